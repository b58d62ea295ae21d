//! `agentd doctor`: the setup's findings, a line each, and an exit code that says whether a long
//! task can start on it (see `agentd_daemon::doctor` for what is checked).

use crate::exit::{self, fail, Failure};
use crate::print::pretty;
use crate::print::{raw, say};
use agentd_daemon::daemon::Home;
use agentd_daemon::doctor::{run_blocking, Verdict};
use std::path::PathBuf;

/// Checks the setup of `home`; MCP servers start in `workspace` (default: the current directory).
pub fn doctor(home: &Home, workspace: Option<PathBuf>, probe: bool, json: bool) -> Result<u8, Failure> {
    let workspace = match workspace {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|e| fail(exit::USAGE, format!("current directory: {e}")))?,
    };
    let workspace = workspace
        .canonicalize()
        .map_err(|e| fail(exit::USAGE, format!("--workspace {}: {e}", workspace.display())))?;
    let report =
        run_blocking(home, &workspace, probe).map_err(|e| fail(exit::FAILED, format!("doctor: {e}")))?;
    if json {
        raw!("{}", pretty(&report));
    } else {
        say!("agentd doctor — home {}", report.home);
        for c in &report.checks {
            let verdict = match c.verdict {
                Verdict::Ok => "ok",
                Verdict::Warn => "warn",
                Verdict::Fail => "FAIL",
            };
            // A detail of several lines (a TOML error's caret) goes on under its finding.
            let detail = c.detail.replace('\n', &format!("\n{:17}", ""));
            say!("  {verdict:<5} {:<8} {}: {detail}", c.area, c.name);
            if let Some(fix) = &c.fix {
                say!("        {:<8} → {fix}", "");
            }
        }
        let failed: Vec<String> = report.failures().map(|c| format!("{} {}", c.area, c.name)).collect();
        if failed.is_empty() {
            say!("all checks hold");
        } else {
            say!("{} failed: {}", failed.len(), failed.join(", "));
        }
    }
    Ok(if report.ok { exit::OK } else { exit::FAILED })
}
