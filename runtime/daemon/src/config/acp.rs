//! `[acp]`: what `agentd acp` asks the editor's user before it runs. `ask` lists the tools whose
//! calls wait for the user's answer (`session/request_permission`); none by default, the sandbox
//! being the guard. A tool agentd does not know, or one whose call is never a single action the
//! user could judge (`delegate`, `finish`), is refused naming it.

use super::error::{ConfigError, Invalid};
use super::raw::RawAcp;
use agentd_protocol::ToolName;

/// `acp.ask`: the tools named, each a built-in workspace tool or an MCP server's `mcp__SERVER__TOOL`.
pub(super) fn ask(raw: RawAcp, invalid: Invalid) -> Result<Vec<ToolName>, ConfigError> {
    let mut tools = Vec::new();
    for name in raw.ask {
        let tool = ToolName::parse(&name);
        match tool {
            ToolName::Delegate | ToolName::Finish => {
                return Err(invalid(
                    "acp.ask".into(),
                    format!("{name:?} is the team's own step, not a call to approve"),
                ))
            }
            ToolName::Other(_) => {
                let known: Vec<&str> = ToolName::BUILTIN.iter().map(ToolName::as_str).collect();
                return Err(invalid(
                    "acp.ask".into(),
                    format!(
                        "unknown tool {name:?}; the tools are {} and mcp__SERVER__TOOL",
                        known.join(", ")
                    ),
                ));
            }
            _ if tools.contains(&tool) => {}
            _ => tools.push(tool),
        }
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use agentd_protocol::ToolName;

    #[test]
    fn the_tools_to_ask_about_are_read_and_a_wrong_one_is_named() {
        assert!(parse(DEFAULT_CONFIG).unwrap().acp_ask.is_empty(), "none by default");
        let asked = format!(
            "{DEFAULT_CONFIG}\n[acp]\nask = [\"run_command\", \"edit_file\", \"mcp__git__commit\"]\n"
        );
        let c = parse(&asked).unwrap();
        assert_eq!(c.acp_ask[..2], [ToolName::RunCommand, ToolName::EditFile]);
        assert_eq!(c.acp_ask[2].as_str(), "mcp__git__commit");
        let typo =
            parse(&format!("{DEFAULT_CONFIG}\n[acp]\nask = [\"edit_files\"]\n")).unwrap_err().to_string();
        assert!(
            typo.contains("acp.ask") && typo.contains("edit_files") && typo.contains("edit_file,"),
            "{typo}"
        );
        let own = parse(&format!("{DEFAULT_CONFIG}\n[acp]\nask = [\"finish\"]\n")).unwrap_err().to_string();
        assert!(own.contains("acp.ask") && own.contains("finish"), "{own}");
    }

    #[test]
    fn a_collector_is_named_by_its_url() {
        let ok =
            parse(&format!("{DEFAULT_CONFIG}\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n"))
                .unwrap();
        assert_eq!(ok.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        let bad = parse(&format!("{DEFAULT_CONFIG}\n[telemetry]\notlp_endpoint = \"127.0.0.1:4318\"\n"))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("telemetry.otlp_endpoint") && bad.contains("http://"), "{bad}");
    }
}
