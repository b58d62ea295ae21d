//! `agentd acp`: this process becomes an agent of the Agent Client Protocol on stdin and stdout,
//! each editor session a task of the running daemon — how an editor drives agentd.
//!
//! stdout is the ACP channel, so nothing else may print there: the log goes to stderr (warnings
//! only, unless `RUST_LOG` says otherwise).

use crate::exit::{self, fail, Failure};
use agentd_daemon::acp::{run_stdio, AgentdAcp};
use agentd_daemon::config::Config;
use agentd_daemon::daemon::Home;

/// Serves ACP until the editor closes stdin; `[acp] ask` is read from the home's `agentd.toml`
/// (none when the file is missing: the daemon it talks to says what is wrong with its home).
pub fn acp(home: &Home) -> Result<u8, Failure> {
    crate::commands::mcp::log_to_stderr();
    let path = home.config();
    let ask = match path.exists() {
        true => Config::load(&path).map_err(|e| fail(exit::USAGE, e.to_string()))?.acp_ask,
        false => Vec::new(),
    };
    run_stdio(AgentdAcp::new(home.socket(), home.dir.clone(), ask))
        .map_err(|e| fail(exit::FAILED, e.to_string()))?;
    Ok(exit::OK)
}
