//! Running a parsed command line: [`run`] finds the home, then hands each command to its handler.
//!
//! Every command but `serve`, `mcp`, `acp`, `init`, `doctor` and `completions` is a client of the daemon's socket:
//! it connects (`connect`), sends one request (or a few, to page or to follow), and prints the answer with
//! `crate::print`. A handler returns the exit code it ran to (`crate::exit`), or a `Failure` that
//! carries one.

mod acp;
mod changes;
mod completion;
mod connect;
mod daemon;
mod doctor;
mod evidence;
mod follow;
mod mcp;
mod memory;
mod roles;
mod tasks;
mod usage;

use crate::cli::{Cli, Command, ModelsCommand};
use crate::exit::{self, fail, Failure};
use agentd_daemon::daemon::Home;
use std::path::PathBuf;

/// Runs `cli`'s command to its exit code.
pub fn run(cli: Cli) -> Result<u8, Failure> {
    if let Command::Completions { shell } = cli.command {
        return completion::script(shell);
    }
    let home = home_of(cli.home)?;
    match cli.command {
        Command::Completions { .. } => Ok(exit::OK),
        Command::Init { json } => daemon::init(&home, json),
        Command::Serve { log_format, http } => daemon::serve(&home, log_format, http.as_deref()),
        Command::Dashboard { json } => daemon::dashboard(&home, json),
        Command::Daemon { json } => daemon::status(&home, json),
        Command::Reload { json } => daemon::reload(&home, json),
        Command::Ids { kind } => completion::ids(&home, kind),
        Command::Mcp => mcp::mcp(&home),
        Command::Acp => acp::acp(&home),
        Command::Doctor { workspace, no_probe, json } => doctor::doctor(&home, workspace, !no_probe, json),
        Command::Usage { since, by, json } => usage::usage(&home, since, by, json),
        Command::Submit { objective, workspace, team, budget_tokens, budget_cost, wait, json } => {
            let budget = tasks::budget(budget_tokens, budget_cost);
            tasks::submit(&home, objective, workspace, team, budget, wait, json)
        }
        Command::Tasks { json } => tasks::list(&home, json),
        Command::Status { task, json } => tasks::status(&home, task, json),
        Command::Watch { task, json } => follow::follow(&mut connect::connect(&home)?, &task, json),
        Command::Cancel { task, json } => tasks::cancel(&home, task, json),
        Command::Resume { task, budget_tokens, budget_cost, json } => {
            tasks::resume(&home, task, tasks::budget(budget_tokens, budget_cost), json)
        }
        Command::Message { task, text, wait, json } => tasks::message(&home, task, text, wait, json),
        Command::Log { task, role, full, no_pager, json } => {
            tasks::log(&home, tasks::LogArgs { task, role, full, no_pager, json })
        }
        Command::Compact { task, role, focus, json } => tasks::compact(&home, task, role, focus, json),
        Command::Diff { task, since, role, call, stat, json } => {
            changes::diff(&home, changes::DiffArgs { task, since, role, call, stat, json })
        }
        Command::Revert { task, to, call, force, json } => {
            changes::revert(&home, task, to, call, force, json)
        }
        Command::Context { task, role, json } => roles::context(&home, task, role, json),
        Command::Models { command: ModelsCommand::Probe { role, json } } => roles::probe(&home, role, json),
        Command::Settings { role, key, value, json } => roles::settings(&home, role, key, value, json),
        Command::Evidence { command } => evidence::evidence(&home, command),
        Command::Memory { command } => memory::memory(&home, command),
    }
}

/// The home: `--home`, else `$AGENTD_HOME` (clap reads both), else `~/.agentd` — never the
/// current directory.
fn home_of(cli_home: Option<PathBuf>) -> Result<Home, Failure> {
    match cli_home.or_else(Home::default_dir) {
        Some(dir) => Ok(Home::new(dir)),
        None => {
            Err(fail(exit::USAGE, "no home directory: HOME is not set; pass --home DIR or set AGENTD_HOME"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_is_never_the_current_directory() {
        let home = home_of(None).unwrap();
        assert!(home.dir.is_absolute() && home.dir.ends_with(".agentd"), "{}", home.dir.display());
        assert_eq!(home_of(Some(PathBuf::from("/srv/agentd"))).unwrap().dir, PathBuf::from("/srv/agentd"));
    }
}
