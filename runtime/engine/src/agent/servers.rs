//! The task's MCP servers as a turn sees them: their starts and failures recorded as events, and
//! the model told which servers' tools it does not have this turn and why — never a guessing game.

use super::Agent;
use crate::storage::StorageError;
use crate::tool_servers::{ServerNews, Unavailable};
use agentd_protocol::EventKind;

impl Agent {
    /// Records the servers' news since the last look: `mcp_server_started`, `mcp_server_failed`.
    pub(super) fn record_server_news(&self) -> Result<(), StorageError> {
        for news in self.task.servers.news() {
            self.emit(match news {
                ServerNews::Started { server, tools } => EventKind::McpServerStarted { server, tools },
                ServerNews::Failed { server, error, retry_in } => EventKind::McpServerFailed {
                    server,
                    error,
                    will_retry_in_ms: retry_in.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                },
            })?;
        }
        Ok(())
    }

    /// Why `server`'s tools are not offered this turn, if it is one of the role's unavailable ones.
    pub(super) fn why_unavailable(&self, server: &str) -> Option<&str> {
        self.unavailable.iter().find(|u| u.server == server).map(|u| u.reason.as_str())
    }
}

/// The lines the turn's system prompt ends with when some of the role's servers offer no tools:
/// one per server, naming its tools' prefix and why. Empty when all are there.
pub(super) fn unavailable_notice(unavailable: &[Unavailable]) -> String {
    let mut notice = String::new();
    for u in unavailable {
        notice.push_str(&format!(
            "\n\nUnavailable this turn: the tools of MCP server {server} (mcp__{server}__*) — {reason}. \
             agentd tries to start it again at your next turn; work without them meanwhile.",
            server = u.server,
            reason = u.reason.trim_end_matches('.'),
        ));
    }
    notice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_names_each_server_its_tools_and_why_and_is_empty_when_all_are_there() {
        assert_eq!(unavailable_notice(&[]), "");
        let notice = unavailable_notice(&[Unavailable {
            server: "shouter".into(),
            reason: "cannot start MCP server shouter: /v/bin/python does not exist".into(),
        }]);
        assert_eq!(
            notice,
            "\n\nUnavailable this turn: the tools of MCP server shouter (mcp__shouter__*) — cannot start MCP \
             server shouter: /v/bin/python does not exist. agentd tries to start it again at your next turn; \
             work without them meanwhile."
        );
    }
}
