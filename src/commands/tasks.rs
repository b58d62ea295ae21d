//! The commands that make and steer tasks — `submit`, `tasks`, `status`, `cancel`, `resume`,
//! `message` — and `log`, which reads a task's transcript.
//!
//! `submit --wait` and `message --wait` go on to follow the task (`super::follow`), so their exit
//! code is the task's: 0 only when it finished.

use super::connect::connect;
use super::follow::{follow, follow_from};
use crate::exit::{self, fail, Failure};
use crate::print::{pretty, print_record, print_state, print_status, print_task_line};
use crate::print::{raw, say};
use agentd_daemon::daemon::Home;
use agentd_protocol::rpc::method;
use agentd_protocol::rpc::{
    CompactParams, CompactResult, LogParams, LogResult, MessageParams, NoParams, ResumeParams, StateResult,
    SubmitParams, Submitted, TaskRef, TaskStatus, TaskSummary,
};
use agentd_protocol::Budget;
use agentd_protocol::ErrorCode;
use agentd_protocol::Role;
use std::path::PathBuf;

/// How many records `log` asks for at a time.
const LOG_PAGE: u64 = 1000;

/// `agentd submit`: the workspace is canonical (the current directory by default) before it is
/// sent, so the daemon gets the same path wherever the command ran.
pub fn submit(
    home: &Home,
    objective: String,
    workspace: Option<PathBuf>,
    team: Option<String>,
    budget: Option<Budget>,
    wait: bool,
    json: bool,
) -> Result<u8, Failure> {
    let workspace = match workspace {
        Some(w) => w,
        None => std::env::current_dir().map_err(|e| fail(exit::USAGE, format!("current directory: {e}")))?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| fail(exit::USAGE, format!("workspace {}: {e}", workspace.display())))?;
    let objective = words_or_stdin(objective, "objective")?;
    let mut client = connect(home)?;
    let submit = SubmitParams {
        objective,
        workspace: workspace.display().to_string(),
        team,
        budget,
        task_id: None,
        ask: Vec::new(),
    };
    let submitted: Submitted = client.call::<method::TaskSubmit>(submit)?;
    if !wait {
        if json {
            raw!("{}", pretty(&submitted));
        } else {
            say!("{}", submitted.task_id);
        }
        return Ok(exit::OK);
    }
    if !json {
        say!("task {}", submitted.task_id);
    }
    follow(&mut client, &submitted.task_id, json)
}

/// `agentd tasks`.
pub fn list(home: &Home, json: bool) -> Result<u8, Failure> {
    let tasks: Vec<TaskSummary> = connect(home)?.call::<method::TaskList>(NoParams {})?;
    if json {
        raw!("{}", pretty(&tasks));
    } else {
        crate::print::print_task_header(tasks.is_empty());
        tasks.iter().for_each(print_task_line);
    }
    Ok(exit::OK)
}

/// `agentd status TASK`.
pub fn status(home: &Home, task: String, json: bool) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    let status: TaskStatus = client.call::<method::TaskStatus>(TaskRef { task_id: task })?;
    super::daemon::warn_if_config_changed(&mut client);
    if json {
        raw!("{}", pretty(&status));
    } else {
        print_status(&status);
    }
    Ok(exit::OK)
}

/// `agentd cancel TASK`: a task that has already ended is left as it is, exit 0, saying so (as
/// `docker stop` of a stopped container): what the user wanted, a task that does not run, holds.
pub fn cancel(home: &Home, task: String, json: bool) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    let refused = match client.call::<method::TaskCancel>(TaskRef { task_id: task.clone() }) {
        Ok(r) => {
            print_state(&r, json);
            return Ok(exit::OK);
        }
        Err(e) if e.error_code() == Some(ErrorCode::NotAllowed) => e,
        Err(e) => return Err(e.into()),
    };
    // Refused for its state: ended already (said, exit 0), or something else (the refusal).
    let status: TaskStatus = client.call::<method::TaskStatus>(TaskRef { task_id: task })?;
    if !status.state.is_terminal() {
        return Err(refused.into());
    }
    if json {
        raw!("{}", pretty(&StateResult { state: status.state }));
    } else {
        say!("{}: task {} had already ended; nothing to cancel", status.state, status.task_id);
    }
    Ok(exit::OK)
}

/// The objective or follow-up as typed, or read from stdin when it is `-` (`echo "Fix it" | agentd
/// submit -`): to its end, trailing whitespace dropped; empty is refused naming where it came from.
pub fn words_or_stdin(text: String, what: &str) -> Result<String, Failure> {
    if text != "-" {
        return Ok(text);
    }
    let mut read = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut read)
        .map_err(|e| fail(exit::USAGE, format!("{what} `-`: cannot read it from stdin: {e}")))?;
    let read = read.trim_end().to_string();
    if read.trim().is_empty() {
        return Err(fail(exit::USAGE, format!("{what} `-`: stdin was empty; type the {what} or pipe it in")));
    }
    Ok(read)
}

/// `--budget-tokens` and `--budget-cost` as a budget, when either is given (the daemon checks the
/// figures and names the one it refuses).
pub fn budget(tokens: Option<u64>, cost: Option<f64>) -> Option<Budget> {
    Budget { tokens, cost }.any()
}

/// `agentd resume TASK [--budget-tokens N] [--budget-cost USD]`.
pub fn resume(home: &Home, task: String, budget: Option<Budget>, json: bool) -> Result<u8, Failure> {
    let params = ResumeParams { task_id: task, budget };
    let mut client = connect(home)?;
    super::daemon::warn_if_config_changed(&mut client);
    let r: StateResult = client.call::<method::TaskResume>(params)?;
    print_state(&r, json);
    Ok(exit::OK)
}

/// `agentd message TASK TEXT`: with `--wait`, follows only the follow-up's own events.
pub fn message(home: &Home, task: String, text: String, wait: bool, json: bool) -> Result<u8, Failure> {
    let text = words_or_stdin(text, "text")?;
    let mut client = connect(home)?;
    let r: StateResult = client.call::<method::TaskMessage>(MessageParams { task_id: task.clone(), text })?;
    if !wait {
        print_state(&r, json);
        return Ok(exit::OK);
    }
    follow_from(&mut client, &task, json, true)
}

/// `agentd compact TASK`: a compaction on request, made now or scheduled.
pub fn compact(
    home: &Home,
    task: String,
    role: Option<String>,
    focus: Option<String>,
    json: bool,
) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    let params = CompactParams { task_id: task, role: role.map(Role::from), focus };
    let r: CompactResult = client.call::<method::TaskCompact>(params)?;
    if json {
        raw!("{}", pretty(&r));
    } else if r.scheduled {
        say!("{}: compaction scheduled before its next request (or when the run ends)", r.role);
    } else {
        let (before, after) = (r.tokens_before.unwrap_or_default(), r.tokens_after.unwrap_or_default());
        let archive = r.archive_id.unwrap_or_default();
        say!("{}: compacted {before} → {after} tokens; what left is evidence {archive}", r.role);
    }
    Ok(exit::OK)
}

/// `agentd log TASK`: the whole transcript, fetched a page at a time until a page comes back empty;
/// through a pager on a terminal (not with `--json` or `--no-pager`).
pub fn log(home: &Home, args: LogArgs) -> Result<u8, Failure> {
    let LogArgs { task, role, full, no_pager, json } = args;
    let mut client = connect(home)?;
    let mut after = 0u64;
    let mut cut = false;
    let mut paging = false;
    loop {
        let params = LogParams {
            task_id: task.clone(),
            role: role.clone().map(Role::from),
            after_seq: Some(after),
            limit: Some(LOG_PAGE),
        };
        let page: LogResult = client.call::<method::LogGet>(params)?;
        if page.records.is_empty() {
            break;
        }
        if !paging && !json && !no_pager && crate::print::to_a_terminal() {
            crate::print::start_pager();
            paging = true;
        }
        for r in &page.records {
            after = after.max(r.seq);
            if json {
                raw!("{}", serde_json::to_string(r).unwrap_or_default());
            } else {
                cut |= print_record(r, full);
            }
        }
    }
    crate::print::finish_pager();
    if cut {
        crate::print::warn(&format!(
            "(long records were cut to a line: `agentd log {task} --full` shows them whole)"
        ));
    }
    Ok(exit::OK)
}

/// What `agentd log` was asked.
pub struct LogArgs {
    /// The task.
    pub task: String,
    /// Only this role's records.
    pub role: Option<String>,
    /// Every record whole.
    pub full: bool,
    /// Never through a pager.
    pub no_pager: bool,
    /// One JSON record a line.
    pub json: bool,
}
