//! `agentd diff` and `agentd revert`: what a task changed in its workspace, from its checkpoints,
//! and taking it back.

use super::connect::connect;
use crate::exit::{self, Failure};
use crate::print::{pretty, raw, say};
use agentd_daemon::daemon::Home;
use agentd_protocol::rpc::{method, DiffParams, DiffResult, RevertParams, RevertResult};
use agentd_protocol::Role;

/// What `agentd diff` shows.
pub struct DiffArgs {
    /// The task.
    pub task: String,
    /// Only changes after this seq.
    pub since: Option<u64>,
    /// Only this agent's changes.
    pub role: Option<String>,
    /// Only this call's change.
    pub call: Option<u64>,
    /// The files and counts only.
    pub stat: bool,
    /// Print the result as JSON.
    pub json: bool,
}

/// `agentd diff TASK`: the unified diff (with `--stat`, a line a file), then a summary line.
pub fn diff(home: &Home, args: DiffArgs) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    let params = DiffParams {
        task_id: args.task,
        since: args.since,
        role: args.role.map(Role::from),
        call: args.call,
        stat: args.stat,
    };
    let r: DiffResult = client.call::<method::TaskDiff>(params)?;
    if args.json {
        raw!("{}", pretty(&r));
        return Ok(exit::OK);
    }
    if r.files.is_empty() {
        say!("no changes recorded ({} change(s) looked at)", r.changes);
        return Ok(exit::OK);
    }
    if args.stat {
        for f in &r.files {
            let seqs: Vec<String> = f.seqs.iter().map(u64::to_string).collect();
            let lines = if f.binary {
                "binary".to_string()
            } else {
                format!("+{} -{}", f.lines_added, f.lines_removed)
            };
            say!("{:<9} {}  {lines}  (calls {})", f.change, f.delta.path, seqs.join(", "));
        }
    } else {
        for line in r.unified.lines() {
            say!("{line}");
        }
    }
    for n in &r.not_held {
        say!("not held  {} ({})", n.path, n.why);
    }
    say!(
        "{} file(s) changed, +{} -{}, over {} recorded change(s)",
        r.files.len(),
        r.lines_added,
        r.lines_removed,
        r.changes
    );
    Ok(exit::OK)
}

/// `agentd revert TASK --to SEQ | --call SEQ [--force]`.
pub fn revert(
    home: &Home,
    task: String,
    to: Option<u64>,
    call: Option<u64>,
    force: bool,
    json: bool,
) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    let r: RevertResult =
        client.call::<method::TaskRevert>(RevertParams { task_id: task, to, call, force })?;
    if json {
        raw!("{}", pretty(&r));
        return Ok(exit::OK);
    }
    if r.files.is_empty() && r.not_restored.is_empty() {
        say!("nothing to put back");
        return Ok(exit::OK);
    }
    for f in &r.files {
        let now = match (&f.before, &f.after) {
            (_, None) => "removed",
            (None, Some(_)) => "restored",
            _ => "put back",
        };
        say!("{now:<9} {}", f.path);
    }
    if !r.forced.is_empty() {
        say!("overwrote your changes to {}", r.forced.join(", "));
    }
    for n in &r.not_restored {
        say!("NOT put back  {}: {}", n.path, n.why);
    }
    say!(
        "reverted {} file(s), recorded as event {} (agentd revert TASK --call {} takes it back)",
        r.files.len(),
        r.seq,
        r.seq
    );
    Ok(exit::OK)
}
