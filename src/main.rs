//! The `agentd` binary: parse the command line, run the command, exit with its code. The daemon
//! lives in `agentd-daemon`; every other command is a client of its socket.
//!
//! - [`cli`]: what the command line accepts (the clap types).
//! - [`commands`]: what each command does.
//! - [`print`]: how the answers read, in words or as JSON.
//! - [`exit`]: the exit codes, and a failure with its code and message.
//! - [`examples`]: the EXAMPLES section of each command's `--help`.

mod cli;
mod commands;
mod examples;
mod exit;
mod print;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::parse();
    match commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if !f.logged {
                print::warn(&format!("agentd: {}", f.message));
            }
            ExitCode::from(f.code)
        }
    }
}
