//! How the configured MCP servers fare on this daemon: each server's last start (for
//! `daemon.status`) and the servers down in each running task (for `task.status`).
//!
//! Written only by the tasks' [`super::TaskServers`] as their servers start, fail and close; read by
//! the status methods. Node-local: in a fleet, the node that runs a task knows its servers.

use crate::config::{Config, McpTransport};
use agentd_engine::clock::now_rfc3339;
use agentd_protocol::rpc::{McpDown, McpServerStatus, McpStart};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The daemon's record of its MCP servers.
#[derive(Debug, Default)]
pub struct McpHealth {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each server's last start, by name.
    last: BTreeMap<String, McpStart>,
    /// Per running task, its servers that are down, by name.
    down: BTreeMap<String, BTreeMap<String, McpDown>>,
}

impl McpHealth {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut inner = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut inner)
    }

    /// `server` started for `task_id` with `tools` tools.
    pub fn started(&self, task_id: &str, server: &str, tools: u32) {
        self.with(|i| {
            i.last.insert(
                server.to_string(),
                McpStart {
                    at: now_rfc3339(),
                    task_id: task_id.to_string(),
                    ok: true,
                    tools: Some(tools),
                    error: None,
                },
            );
            if let Some(down) = i.down.get_mut(task_id) {
                down.remove(server);
            }
        })
    }

    /// `server` failed for `task_id`: `started` says whether this was a start (else it stopped).
    pub fn failed(&self, task_id: &str, server: &str, error: &str, retry_in: Option<Duration>, start: bool) {
        self.with(|i| {
            let at = now_rfc3339();
            if start {
                i.last.insert(
                    server.to_string(),
                    McpStart {
                        at: at.clone(),
                        task_id: task_id.to_string(),
                        ok: false,
                        tools: None,
                        error: Some(error.to_string()),
                    },
                );
            }
            let retry_at = retry_in.map(|d| {
                agentd_engine::clock::rfc3339(agentd_engine::clock::later(
                    agentd_engine::clock::clock().now(),
                    d,
                ))
            });
            let entry = McpDown { server: server.to_string(), error: error.to_string(), since: at, retry_at };
            i.down.entry(task_id.to_string()).or_default().insert(server.to_string(), entry);
        })
    }

    /// The task's servers are closed: it has none down any more.
    pub fn closed(&self, task_id: &str) {
        self.with(|i| i.down.remove(task_id));
    }

    /// The servers down in `task_id` now, by name.
    pub fn down(&self, task_id: &str) -> Vec<McpDown> {
        self.with(|i| i.down.get(task_id).map(|d| d.values().cloned().collect()).unwrap_or_default())
    }

    /// Every configured server, in name order, with its last start on this daemon.
    pub fn servers(&self, config: &Config) -> Vec<McpServerStatus> {
        self.with(|i| {
            config
                .mcp
                .values()
                .map(|s| {
                    let (transport, target) = match &s.transport {
                        McpTransport::Stdio { command, args, .. } => (
                            "stdio",
                            std::iter::once(command).chain(args).cloned().collect::<Vec<_>>().join(" "),
                        ),
                        McpTransport::Http { url, .. } => ("http", url.clone()),
                    };
                    McpServerStatus {
                        server: s.name.clone(),
                        transport: transport.to_string(),
                        target,
                        roles: s.roles.clone(),
                        last_start: i.last.get(&s.name).cloned(),
                    }
                })
                .collect()
        })
    }
}
