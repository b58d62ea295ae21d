//! The command line: what `agentd` accepts, as clap types. Nothing here runs anything; `commands`
//! takes a parsed [`Cli`] and does what it says.
//!
//! A doc comment on a command, argument or flag below is its `--help` text, so every one has one
//! (the tests at the end hold that), and every command that prints takes `--json`.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

// The whole command line: `agentd [--home DIR] COMMAND`. (Plain comments on these types: a doc
// comment would become their help text.)
#[derive(Parser)]
#[command(
    name = "agentd",
    version,
    about = "Runs teams of LLM agents inside measured context windows",
    after_help = "Exit codes: 0 success; 1 the task failed or was cancelled; 2 bad usage or config; \
                  3 the daemon cannot be reached; 4 no such task or evidence."
)]
pub struct Cli {
    /// The home directory: config, socket, database and evidence (default: $AGENTD_HOME, else
    /// ~/.agentd).
    #[arg(long, global = true, env = "AGENTD_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// The command line as clap reads it, every command's `--help` with its EXAMPLES.
pub fn command() -> clap::Command {
    crate::examples::with_examples(Cli::command())
}

/// Parses the process's arguments (exiting with clap's usage error or help, as `Cli::parse` does).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// How `serve` writes its log (to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for journald or a log shipper.
    Json,
}

// The commands. Each variant's doc comment is its help text, each field's its argument's.
#[derive(Subcommand)]
pub enum Command {
    /// Write a commented default agentd.toml (never overwrites one).
    Init {
        /// Print what was done as JSON: {"config": PATH, "written": BOOL}.
        #[arg(long)]
        json: bool,
    },
    /// Run the daemon in the foreground until SIGINT/SIGTERM.
    Serve {
        /// The log's format on stderr.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Also serve the dashboard and HTTP API here (PORT, IP:PORT or [IPv6]:PORT; a port alone
        /// is 127.0.0.1), whatever `[http] listen` says.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
    },
    /// Print the dashboard's URL with its login token (the daemon must serve HTTP).
    Dashboard {
        /// Print `{url}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Submit a task; prints its id.
    Submit {
        /// What the team should do, in words; `-` reads it from stdin.
        objective: String,
        /// The task's workspace (default: the current directory).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// The team to run it (default: the configured one).
        #[arg(long, value_name = "NAME")]
        team: Option<String>,
        /// The task's token budget: a request that would take it over is not sent and the task
        /// is paused (prompt and completion tokens, summaries included).
        #[arg(long, value_name = "N", value_parser = budget_tokens)]
        budget_tokens: Option<u64>,
        /// The task's budget in US dollars, at [prices."MODEL"].
        #[arg(long, value_name = "USD", value_parser = budget_cost)]
        budget_cost: Option<f64>,
        /// Stream the events until the task ends; exit 0 only if it finished.
        #[arg(long)]
        wait: bool,
        /// Print JSON: the task id as {"task_id": ...}, or with --wait one event per line.
        #[arg(long)]
        json: bool,
    },
    /// List tasks.
    Tasks {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a task.
    Status {
        /// The task's id.
        task: String,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stream a task's events from the first until it ends.
    Watch {
        /// The task's id.
        task: String,
        /// Print one event per line as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a task.
    Cancel {
        /// The task's id.
        task: String,
        /// Print the new state as JSON: {"state": ...}.
        #[arg(long)]
        json: bool,
    },
    /// Continue an interrupted or failed task from its log.
    Resume {
        /// The task's id.
        task: String,
        /// A new token budget for the task, above what it spent: how a paused task goes on.
        #[arg(long, value_name = "N", value_parser = budget_tokens)]
        budget_tokens: Option<u64>,
        /// A new budget in US dollars, above what the task spent.
        #[arg(long, value_name = "USD", value_parser = budget_cost)]
        budget_cost: Option<f64>,
        /// Print the new state as JSON: {"state": ...}.
        #[arg(long)]
        json: bool,
    },
    /// Send a follow-up request to a task that has stopped; the lead takes it up.
    Message {
        /// The task's id.
        task: String,
        /// The follow-up request, in words; `-` reads it from stdin.
        text: String,
        /// Stream the events until the task stops again.
        #[arg(long)]
        wait: bool,
        /// Print JSON: the new state as {"state": ...}, or with --wait one event per line.
        #[arg(long)]
        json: bool,
    },
    /// Compact a role's history now (a stopped task) or before its next request (a running one),
    /// with the same events and archive as an automatic compaction.
    Compact {
        /// The task's id.
        task: String,
        /// Whose history: lead (default), coder or a specialist's name.
        #[arg(long)]
        role: Option<String>,
        /// What the summary is to keep in particular ("keep the parser details").
        #[arg(long)]
        focus: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What a task changed in its workspace, from the checkpoints taken around every writing call
    /// (a command's changes included): a unified diff, or with --stat a line a file.
    Diff {
        /// The task's id.
        task: String,
        /// Only the changes of calls after this seq (as `agentd log` numbers events).
        #[arg(long)]
        since: Option<u64>,
        /// Only this agent's changes (coder, coder#2, a specialist), its working copy's included.
        #[arg(long)]
        role: Option<String>,
        /// Only the change of one call: the seq of its tool_called (a delegation's: its merge).
        #[arg(long)]
        call: Option<u64>,
        /// The files and their line counts, not the diff.
        #[arg(long)]
        stat: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put back what a stopped task changed: every file changed after a call (--to SEQ), or one
    /// call's change (--call SEQ). Refused, naming the files, when you changed them since (--force
    /// overwrites them). A revert is recorded and can itself be reverted.
    Revert {
        /// The task's id.
        task: String,
        /// Put back every file changed after the call with this seq.
        #[arg(long, conflicts_with = "call", required_unless_present = "call")]
        to: Option<u64>,
        /// Take back the change of the call with this seq (or a revert's seq, to undo it).
        #[arg(long)]
        call: Option<u64>,
        /// Overwrite files you changed since the task did.
        #[arg(long)]
        force: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The context gauge of a task's role.
    Context {
        /// The task's id.
        task: String,
        /// The role: lead, coder or a specialist's name.
        #[arg(long, default_value = "lead")]
        role: String,
        /// Print the gauge as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The transcript: messages, checkpoints and events, numbered as events are (the SEQ that
    /// `diff --since` and `revert --to` take); through a pager on a terminal.
    Log {
        /// The task's id.
        task: String,
        /// Only this role's records: lead, coder or a specialist's name.
        #[arg(long)]
        role: Option<String>,
        /// Every record whole: messages and tool results are cut to a line without it.
        #[arg(long)]
        full: bool,
        /// Never through a pager ($AGENTD_PAGER, else $PAGER, else less), even on a terminal.
        #[arg(long)]
        no_pager: bool,
        /// Print one record per line as JSON.
        #[arg(long, visible_alias = "jsonl")]
        json: bool,
    },
    /// Inspect the evidence archive.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
    /// What agentd remembers across tasks: notes the model saved quoting you, which you can list,
    /// show, edit, delete and undo.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Ask the providers.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// Read or change a role's setting (compact_at).
    Settings {
        /// The role: lead, coder or a specialist's name.
        role: String,
        /// The setting: compact_at (the percent of the window at which a request is compacted).
        key: String,
        /// The new value; without it the current value is printed.
        value: Option<u64>,
        /// Print the setting as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The daemon's version, uptime, running tasks, jobs, time zone and storage.
    Daemon {
        /// Print daemon.status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read agentd.toml again (as SIGHUP does), validated whole, and apply it from every task's next
    /// turn; prints each key that changed. An invalid file changes nothing (exit 2, naming the key).
    Reload {
        /// Print {"path", "changes": [{"key", "before"?, "after"?, "applies"}]} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What the tasks spent, from the providers' usage reports: requests, prompt tokens (and how many
    /// the prompt cache served), completion tokens, cost at [prices], compactions apart.
    Usage {
        /// Only what was answered from this day (YYYY-MM-DD, UTC) or instant (RFC 3339) on.
        #[arg(long, value_name = "DATE")]
        since: Option<String>,
        /// One row per task, per model or per day (UTC).
        #[arg(long, value_enum, default_value_t = UsageBy::Task)]
        by: UsageBy,
        /// Print {"by", "since"?, "rows": [{"key", "spent"}], "total"} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check the setup before a long task: the config, each provider (its base_url must answer as
    /// its kind's API), each role's model (window, how tokens are counted, the API key, a one-token
    /// request), each MCP server started as a task would start it, the sandbox on this
    /// kernel, the home, its disk and the daemon. Exit 0 when all hold, 1 naming what fails.
    Doctor {
        /// The workspace MCP servers are started in, as a task there would (default: the current
        /// directory).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Skip the one-token request each role's model must answer (each costs a few prompt
        /// tokens and one answer token, billed as any request).
        #[arg(long)]
        no_probe: bool,
        /// Print the findings as JSON: {"ok", "home", "checks": [{"area", "name", "verdict", "detail", "fix"?}]}.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: `agentd completions bash > ~/.local/share/bash-completion/completions/agentd`.
    Completions {
        /// The shell: bash, zsh or fish (elvish and powershell work too).
        shell: clap_complete::Shell,
    },
    /// Print the ids of the daemon's tasks, evidence or memory notes, one a line: what shell
    /// completion offers (`agentd completions`).
    #[command(name = "__ids", hide = true)]
    Ids {
        /// Which ids.
        #[arg(value_enum)]
        kind: IdKind,
    },
    /// Serve MCP on stdin and stdout: tools with which another agent submits and follows tasks of
    /// the running daemon.
    Mcp,
    /// Serve the Agent Client Protocol on stdin and stdout: an editor (Zed, a JetBrains IDE) starts,
    /// follows and stops tasks of the running daemon, one task per editor session.
    Acp,
}

// `agentd memory …`.
#[derive(Subcommand)]
pub enum MemoryCommand {
    /// List the notes: all, one workspace's (and not the user's), or the user's.
    List {
        /// Only the notes of the project in this directory.
        #[arg(long, value_name = "DIR", conflicts_with = "user")]
        workspace: Option<PathBuf>,
        /// Only the notes about you, carried in every workspace.
        #[arg(long)]
        user: bool,
        /// Deleted notes too.
        #[arg(long)]
        deleted: bool,
        /// Print the notes as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one note, the words of yours it rests on, and every change made to it.
    Show {
        /// The note's id (m17).
        id: String,
        /// Print the note and its changes as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replace a note's text, from the next task on.
    Edit {
        /// The note's id.
        id: String,
        /// Its new text.
        text: String,
        /// Print the change as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a note, from the next task on (it is kept, so `memory undo` brings it back).
    Delete {
        /// The note's id.
        id: String,
        /// Print the change as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Undo the latest change: of this note, or of any (most often the note saved last).
    Undo {
        /// The note's id; without it, the latest change of any note.
        id: Option<String>,
        /// Print the change as JSON.
        #[arg(long)]
        json: bool,
    },
}

// `agentd evidence …`.
#[derive(Subcommand)]
pub enum EvidenceCommand {
    /// List evidence, optionally of one task.
    List {
        /// Only this task's evidence.
        #[arg(long)]
        task: Option<String>,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one piece of evidence's metadata.
    Show {
        /// The evidence id (ev-…).
        id: String,
        /// Print the metadata as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a page of evidence (bytes by default).
    Read {
        /// The evidence id (ev-…).
        id: String,
        /// Where the page starts, in bytes (or lines with --lines), from 0.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// How much to print, in bytes (or lines with --lines); default 64 KiB.
        #[arg(long)]
        limit: Option<u64>,
        /// Count offset and limit in lines instead of bytes.
        #[arg(long)]
        lines: bool,
        /// Print the page as JSON: {data, offset, len, total_bytes, complete, next_offset}.
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every blob; exit 1 naming each one missing or altered.
    Verify {
        /// Print the report as JSON: {checked, problems}.
        #[arg(long)]
        json: bool,
    },
}

// `agentd models …`.
#[derive(Subcommand)]
pub enum ModelsCommand {
    /// Ask the provider for the role's window and print it with its source.
    Probe {
        /// The role whose provider and model are asked: lead, coder or a specialist's name.
        #[arg(long)]
        role: String,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand at any depth, with its path (`evidence read`).
    fn leaves(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        if cmd.get_subcommands().next().is_none() {
            out.push((path, cmd.clone()));
            return;
        }
        for sub in cmd.get_subcommands() {
            let name = format!("{path} {}", sub.get_name()).trim().to_string();
            leaves(sub, name, out);
        }
    }

    fn commands() -> Vec<(String, clap::Command)> {
        let mut out = Vec::new();
        leaves(&Cli::command(), String::new(), &mut out);
        out
    }

    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn every_command_has_examples_in_its_help() {
        let mut all = Vec::new();
        leaves(&command(), String::new(), &mut all);
        let without: Vec<String> = all
            .into_iter()
            .filter(|(_, sub)| !sub.is_hide_set())
            .filter(|(_, sub)| {
                !sub.get_after_help().is_some_and(|h| h.to_string().starts_with("EXAMPLES:\n  "))
            })
            .map(|(path, _)| path)
            .collect();
        assert!(without.is_empty(), "no EXAMPLES: {without:?}");
    }

    #[test]
    fn every_command_argument_and_flag_has_a_help_text() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        for arg in cmd.get_arguments() {
            if arg.get_help().is_none() && !matches!(arg.get_id().as_str(), "help" | "version") {
                missing.push(format!("agentd --{}", arg.get_id()));
            }
        }
        for (path, sub) in commands() {
            if sub.get_about().is_none() {
                missing.push(format!("agentd {path} (about)"));
            }
            for arg in sub.get_arguments() {
                if arg.get_help().is_none() && !matches!(arg.get_id().as_str(), "help" | "home") {
                    missing.push(format!("agentd {path} {}", arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn every_command_that_prints_takes_json() {
        // `serve` prints a log (see --log-format), `completions` a shell script (and `__ids` the
        // ids it completes), `mcp` and `acp` speak their protocols' own JSON-RPC on stdout.
        let exempt = ["serve", "completions", "mcp", "acp", "__ids"];
        let without: Vec<String> = commands()
            .into_iter()
            .filter(|(path, _)| !exempt.contains(&path.as_str()))
            .filter(|(_, sub)| !sub.get_arguments().any(|a| a.get_long() == Some("json")))
            .map(|(path, _)| path)
            .collect();
        assert!(without.is_empty(), "no --json: {without:?}");
        assert!(commands().len() > 15, "the walk found the commands");
    }
}

/// Which ids `agentd __ids` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IdKind {
    /// Tasks' ids.
    Task,
    /// Evidence ids.
    Evidence,
    /// Memory notes' ids.
    Note,
}

/// How `agentd usage` groups what was spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    /// One row per task.
    Task,
    /// One row per model.
    Model,
    /// One row per day (UTC).
    Day,
}

/// `--budget-tokens`: a whole number, by the one check of a budget's figures.
fn budget_tokens(text: &str) -> Result<u64, String> {
    let n: u64 =
        text.trim().parse().map_err(|_| format!("must be a whole number of tokens; got {text:?}"))?;
    agentd_protocol::Budget::check_tokens(n).map_err(|e| e.message)
}

/// `--budget-cost`: an amount in US dollars, by the one check of a budget's figures (`NaN`, `inf`
/// and `1e309`, which reads as infinite, are refused).
fn budget_cost(text: &str) -> Result<f64, String> {
    let usd: f64 = text.trim().parse().map_err(|_| format!("must be an amount in USD; got {text:?}"))?;
    agentd_protocol::Budget::check_cost(usd).map_err(|e| e.message)
}
