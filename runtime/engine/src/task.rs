//! A task's run: the team formed from the log (one member per role, each history repaired), the
//! lead's turn driven to an end state — through a delegation a resume finds pending — and the end
//! recorded.

use crate::agent::limits::Limit;
use crate::agent::{Member, Team};
use crate::clock::now_rfc3339;
use crate::context::{Engine, TaskCtx};
use crate::end::{record_end, record_halt};
use crate::error::TurnError;
use crate::fitter::{FitError, Requested, RequestedDone};
use crate::storage::{each_record, End, Storage, StorageError};
use crate::tool_servers::{NoToolServers, ToolServers};
use agentd_agents::workspace::Workspace;
use agentd_policies::repair::repair;
use agentd_protocol::Receipt;
use agentd_protocol::{CheckpointKind, EventKind, Message, Record, Role, Speaker, TaskState, ToolName};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How a task starts: fresh with its objective, or resumed from its log. It is also what a fleet's
/// queued job asks of the node that takes it (`agentd_cluster::queue::Job`), flattened into the job:
/// `{"start": "fresh", "objective": …}`, `{"start": "resume"}`, `{"start": "followup", "text": …}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "start", rename_all = "snake_case")]
pub enum Start {
    /// A new task: the lead takes its objective as the first user message.
    Fresh {
        /// The objective, as submitted.
        objective: String,
    },
    /// An interrupted or failed task continues from its log: every role's history as it was, repaired.
    Resume,
    /// A follow-up user request to a task that had stopped.
    Followup {
        /// The follow-up, which the lead takes as a new user message.
        text: String,
    },
}

/// Why a task could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The storage could not read the task's log or take its records.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The configuration yields no lead (it always should: the lead is required).
    #[error("the team has no lead")]
    NoLead,
}

/// Builds the team and runs the task to an end state on the tokio runtime, with `servers` as its
/// tool servers. Returns the final state through `done`, and at once the task's context (through
/// which a compaction is asked for while it runs, [`TaskCtx::request_compaction`]).
pub fn launch(
    engine: Arc<Engine>,
    task_id: String,
    workspace: Workspace,
    start: Start,
    cancel: CancellationToken,
    servers: Arc<dyn ToolServers>,
    done: tokio::sync::watch::Sender<Option<TaskState>>,
) -> Result<Arc<TaskCtx>, TaskError> {
    let ctx = Arc::new(TaskCtx::new(task_id.clone(), workspace, cancel.clone(), engine.clone(), servers)?);
    let storage = engine.storage().clone();
    let mut states = role_states(storage.as_ref(), &task_id)?;
    // The configured roles, and every instance of one (`coder#2`) the log has agents of.
    let mut roles: Vec<Role> = engine.team().roles().collect();
    let instances = states.keys().filter(|r| r.number() > 1 && engine.team().role(r).is_some());
    let mut instances: Vec<Role> = instances.cloned().collect();
    instances.sort();
    roles.extend(instances);
    let members = Arc::new(Team::default());
    let mut team = BTreeMap::new();
    let mut pending = Vec::new();
    let mut lead_empty = false;
    for role in roles {
        let stored = storage.history(&task_id, &role)?;
        if role == Role::Lead {
            lead_empty = stored.is_empty();
        }
        let (mut history, mut repairs) = repair(&stored);
        if matches!(start, Start::Resume) && role == Role::Lead {
            // The lead was waiting on delegations: their branches go on instead of the lead being
            // told they were interrupted, and each one's summary comes back as its call's result.
            pending = pending_delegations(&stored);
            let before = history.len();
            history.retain(|m| {
                !(m.role == Speaker::Tool
                    && m.tool_result_ids().next().is_some()
                    && m.tool_result_ids().all(|id| pending.iter().any(|p| p == id)))
            });
            repairs.results_added = repairs.results_added.saturating_sub(before - history.len());
        }
        if repairs.any() {
            tracing::info!(task = %task_id, role = role.name(), ?repairs, "repaired history on resume");
            storage.append(
                &task_id,
                &Record::Checkpoint {
                    role: role.clone(),
                    subtype: CheckpointKind::Repair,
                    history: history.clone(),
                    archive_id: None,
                },
            )?;
        }
        let state = states.remove(&role).unwrap_or_default();
        team.insert(
            role.clone(),
            Member::new(
                role,
                history,
                state.receipts,
                state.changed_files,
                state.last_answer_at,
                ctx.clone(),
                Arc::downgrade(&members),
            ),
        );
    }
    let Some(lead) = team.get(&Role::Lead).cloned() else {
        return Err(TaskError::NoLead);
    };
    // Set once, right here, before any turn can look the team up.
    members.form(team, ctx.clone());
    let resumed = match pending.is_empty() {
        true => None,
        false => Some(resumed_branches(storage.as_ref(), &task_id, pending)?),
    };
    // A new objective or message: the workspace's hard-linked files are said before anything runs.
    let survey = matches!(start, Start::Fresh { .. } | Start::Followup { .. });
    let input = match start {
        Start::Fresh { objective } => Some(objective),
        // A task acknowledged but stopped before its lead wrote anything starts over from its
        // objective; otherwise the lead continues from its log.
        Start::Resume if lead_empty => storage.task(&task_id)?.map(|t| t.objective),
        Start::Resume => None,
        Start::Followup { text } => Some(text),
    };
    storage.update_task(&task_id, &mut |t| {
        t.state = TaskState::Running;
        t.resume_at = None;
        t.updated_at = now_rfc3339();
    })?;
    let running = ctx.clone();
    let (servers, ended_storage, ended_id) = (ctx.servers.clone(), storage.clone(), task_id.clone());
    // The run goes on in the span its starter opened (the daemon's `task`): every turn's nests in it.
    let run = tokio::spawn(async move {
        if survey {
            tell_linked_files(storage.clone(), &task_id, ctx.workspace.root().to_path_buf()).await;
        }
        // A writing call a stop cut short: its change is found and recorded before anything runs.
        let (checkpoints, root) = (ctx.checkpoints.clone(), ctx.workspace.root().to_path_buf());
        if let Err(e) = crate::checkpoints::reconcile(storage.clone(), checkpoints, &task_id, root).await {
            tracing::warn!(task = %task_id, error = %e, "the change of a call cut short could not be recorded");
            let failed = EventKind::CheckpointFailed { call_id: String::new(), error: e.to_string() };
            if let Err(e) = storage.emit(&task_id, &Role::Lead, failed) {
                ctx.servers.shutdown().await;
                return finish(storage.as_ref(), &task_id, &cancel, Err(e.into()));
            }
        }
        if let Some(resumed) = resumed {
            if let Err(e) = lead.resume_delegations(resumed).await {
                ctx.servers.shutdown().await;
                return finish(storage.as_ref(), &task_id, &cancel, Err(e));
            }
        }
        let outcome = lead.run_turn(input, Vec::new(), None).await;
        if !cancel.is_cancelled() {
            compact_requested(&ctx, &members).await;
        }
        // The task's MCP servers end with its run, before its end is recorded; a follow-up or a
        // resume starts them again.
        ctx.servers.shutdown().await;
        let state = finish(storage.as_ref(), &task_id, &cancel, outcome);
        // A finished or cancelled task's branches are over; a failed, waiting or interrupted one's
        // copies stay for the resume that continues them.
        if matches!(state, TaskState::Finished | TaskState::Cancelled) {
            remove_copies(&ctx.copies, &task_id);
        }
        state
    }
    .in_current_span());
    tokio::spawn(async move {
        let state = match run.await {
            Ok(state) => state,
            // Whatever panicked — a turn, a compaction, the recording of an end — the task ends
            // `failed` with the panic's words and its holder hears it ended: never `running` forever.
            Err(e) => {
                // The servers are shut down apart: their own panic (it may be the one) stops here.
                let _ = tokio::spawn(async move { servers.shutdown().await }).await;
                ended_by_panic(ended_storage.as_ref(), &ended_id, e)
            }
        };
        let _ = done.send(Some(state));
    });
    Ok(running)
}

/// Says, as `linked_files`, which files of the workspace have other hard links: a command writing one
/// in place writes the others too, and a revert puts back the workspace's name only. A workspace
/// that cannot be walked is said in the log; the task goes on.
async fn tell_linked_files(storage: Arc<dyn Storage>, task_id: &str, root: std::path::PathBuf) {
    let surveyed = tokio::task::spawn_blocking(move || agentd_agents::checkpoints::survey(&root)).await;
    match surveyed.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
        Ok(survey) if !survey.linked.is_empty() => {
            tracing::warn!(task = %task_id, files = survey.linked.len(), "workspace files with other hard links");
            if let Err(e) =
                storage.emit(task_id, &Role::Lead, EventKind::LinkedFiles { files: survey.linked })
            {
                tracing::warn!(task = %task_id, error = %e, "linked_files could not be recorded");
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(task = %task_id, error = %e, "the workspace's hard links could not be surveyed")
        }
    }
}

/// Records the end of a task whose runner stopped without recording one (it panicked, or was
/// aborted): `failed`, with what the panic said. Recording it cannot panic the caller; an end the
/// storage refuses is kept by it, as [`finish`] does.
fn ended_by_panic(storage: &dyn Storage, task_id: &str, stopped: tokio::task::JoinError) -> TaskState {
    let error = match stopped.try_into_panic() {
        Ok(payload) => {
            format!("the task's runner stopped unexpectedly: it panicked: {}", panic_words(&*payload))
        }
        Err(e) => format!("the task's runner stopped unexpectedly: {e}"),
    };
    tracing::error!(task = %task_id, %error, "the task's runner stopped; failing the task");
    let end = End {
        state: TaskState::Failed,
        kind: EventKind::TaskFailed { error: error.clone() },
        result: None,
        error: Some(error),
        record_error: String::new(),
    };
    let recorded =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| record_end(storage, task_id, &end)));
    match recorded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => storage.keep_end(task_id, End { record_error: e.to_string(), ..end }),
        Err(_) => storage.keep_end(task_id, End { record_error: "recording the end panicked".into(), ..end }),
    }
    TaskState::Failed
}

/// What a panic said: its message when it is text.
pub fn panic_words(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic with no message)".to_string()
    }
}

/// The compactions asked for during the run that no later request made: made now, before the end
/// is recorded. A refused or failed one has said so already (`compaction_refused`,
/// `compaction_failed`).
async fn compact_requested(ctx: &TaskCtx, members: &Team) {
    for (role, requested) in ctx.take_all_requested() {
        let Some(member) = members.member(&role) else { continue };
        match member.compact(requested).await {
            Ok(_) | Err(TurnError::Fit(FitError::NothingToCompact(_) | FitError::Refused(_))) => {}
            Err(e) => {
                tracing::warn!(task = %ctx.task_id, role = role.name(), error = %e, "the requested compaction failed")
            }
        }
    }
}

/// Compacts `role`'s history of a task that is not running, as the user asked (`agentd compact`),
/// until `cancel` fires (the daemon stopping):
/// the role's agent is formed from the log (its history repaired, as a resume would) and compacts
/// it now, with the same events, archive and checkpoint as a compaction the trigger makes. Refused,
/// with nothing written, when there is nothing to compact.
pub async fn compact_stopped(
    engine: Arc<Engine>,
    task_id: String,
    workspace: Workspace,
    cancel: CancellationToken,
    role: Role,
    requested: Requested,
) -> Result<RequestedDone, TurnError> {
    if engine.team().role(&role).is_none() {
        return Err(TurnError::UnknownRole(role));
    }
    let storage = engine.storage().clone();
    let (history, _) = repair(&storage.history(&task_id, &role)?);
    let state = role_states(storage.as_ref(), &task_id)?.remove(&role).unwrap_or_default();
    let ctx = TaskCtx::new(task_id, workspace, cancel, engine, Arc::new(NoToolServers))?;
    // A compaction delegates to nobody: the team is empty, held for as long as the compaction runs.
    let team = Arc::new(Team::default());
    let member = Member::new(
        role,
        history,
        state.receipts,
        state.changed_files,
        state.last_answer_at,
        Arc::new(ctx),
        Arc::downgrade(&team),
    );
    member.compact(requested).await
}

/// Removes the task's working copies once its run is over: every branch has been settled (its
/// changes merged and archived) or the task ended without them (their patches are not wanted).
fn remove_copies(copies: &std::path::Path, task_id: &str) {
    let folder = copies.join(task_id);
    if folder.exists() {
        if let Err(e) = agentd_agents::copies::remove_copy(&folder) {
            tracing::warn!(task = %task_id, folder = %folder.display(), error = %e, "working copies could not be removed");
        }
    }
}

/// The `delegate` calls of the lead's last answer that have no result (in the log as stored), in
/// call order: the branches a stop interrupted.
fn pending_delegations(history: &[Message]) -> Vec<String> {
    let Some(at) = history.iter().rposition(|m| m.role == Speaker::Assistant) else { return Vec::new() };
    let answered: Vec<&str> = history[at + 1..].iter().flat_map(|m| m.tool_result_ids()).collect();
    history[at]
        .tool_calls()
        .filter(|(id, name, _)| ToolName::parse(name) == ToolName::Delegate && !answered.contains(id))
        .map(|(id, _, _)| id.to_string())
        .collect()
}

/// What the log says of the interrupted branches: for each pending call whose `delegated` was
/// logged, the agent it ran on, its working copy, and whether that agent logged the handoff after it.
/// A log written before `delegated` named its call answers its one pending call by its last
/// `delegated`.
fn resumed_branches(
    storage: &dyn Storage,
    task_id: &str,
    pending: Vec<String>,
) -> Result<crate::agent::Resumed, StorageError> {
    let mut delegated: BTreeMap<String, (u64, Role, Option<String>, Limit)> = BTreeMap::new();
    let mut unnamed: Option<(u64, Role)> = None;
    let mut last_objective: HashMap<Role, u64> = HashMap::new();
    // What each agent's requests used since its latest delegation started.
    let mut spent: HashMap<Role, u64> = HashMap::new();
    each_record(storage, task_id, |seq, record| match record {
        Record::Event { event } => match event.kind {
            EventKind::Delegated { to_role, call_id, working_copy, limit_tokens, deadline, .. } => {
                spent.insert(to_role.clone(), 0);
                let limit = Limit {
                    tokens: limit_tokens,
                    deadline: deadline.as_deref().and_then(crate::clock::parse_rfc3339),
                    ..Limit::default()
                };
                match call_id {
                    Some(id) => {
                        delegated.insert(id, (seq, to_role, working_copy, limit));
                    }
                    None => unnamed = Some((seq, to_role)),
                }
            }
            EventKind::ResponseReceived { usage, .. } => {
                let used = usage.map_or(0, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
                if let Some(total) = spent.get_mut(&event.role) {
                    *total = total.saturating_add(used);
                }
            }
            _ => {}
        },
        Record::Message { role, message } if message.kind == agentd_protocol::MessageKind::Objective => {
            last_objective.insert(role, seq);
        }
        _ => {}
    })?;
    if let ([only], Some((seq, to_role))) = (pending.as_slice(), &unnamed) {
        delegated.entry(only.clone()).or_insert((*seq, to_role.clone(), None, Limit::default()));
    }
    let started = pending
        .iter()
        .filter_map(|id| {
            let (seq, instance, working_copy, limit) = delegated.get(id)?.clone();
            let handed_over = last_objective.get(&instance).is_some_and(|at| *at > seq);
            let limit = Limit { spent: spent.get(&instance).copied().unwrap_or(0), ..limit };
            Some((id.clone(), crate::agent::StartedBranch { instance, working_copy, handed_over, limit }))
        })
        .collect();
    Ok(crate::agent::Resumed { pending, started })
}

/// What each role's agent resumes with besides its history: its receipts, the files it changed
/// (newest last) and when it last answered (the `at` of its last `response_received`). One pass over
/// the log serves every role.
#[derive(Default)]
struct RoleState {
    receipts: Vec<Receipt>,
    changed_files: Vec<String>,
    last_answer_at: Option<std::time::SystemTime>,
}

fn role_states(storage: &dyn Storage, task_id: &str) -> Result<HashMap<Role, RoleState>, StorageError> {
    let mut states: HashMap<Role, RoleState> = HashMap::new();
    each_record(storage, task_id, |_, record| match record {
        Record::Receipt { role, receipt } => states.entry(role).or_default().receipts.push(receipt),
        Record::Message { role, message } => {
            let changed = &mut states.entry(role).or_default().changed_files;
            for (_, name, arguments) in message.tool_calls() {
                if let Some(path) = agentd_agents::tools::changed_path(&ToolName::parse(name), arguments) {
                    changed.retain(|p| *p != path);
                    changed.push(path);
                }
            }
        }
        Record::Event { event } if matches!(event.kind, EventKind::ResponseReceived { .. }) => {
            states.entry(event.role).or_default().last_answer_at = crate::clock::parse_rfc3339(&event.at);
        }
        _ => {}
    })?;
    Ok(states)
}

/// Records the end of a task: its state, result or error, and the terminal event. An end the storage
/// cannot take (a full disk) is handed to [`Storage::keep_end`], reported from memory and recorded
/// once the storage heals.
fn finish(
    storage: &dyn Storage,
    task_id: &str,
    cancel: &CancellationToken,
    outcome: Result<String, TurnError>,
) -> TaskState {
    // A shutdown marks the task interrupted itself; do not overwrite that with cancelled.
    if let Ok(Some(meta)) = storage.task(task_id) {
        if meta.state == TaskState::Interrupted {
            return TaskState::Interrupted;
        }
    }
    // A usage limit or a budget stops the task without ending it.
    if let Some(halt) = outcome.as_ref().err().and_then(TurnError::halt).filter(|_| !cancel.is_cancelled()) {
        match record_halt(storage, task_id, halt) {
            Ok(state) => return state,
            Err(e) => {
                tracing::error!(task = %task_id, error = %e, "could not record the halt; failing the task")
            }
        }
    }
    let (state, kind, result, error) = match outcome {
        Ok(summary) => {
            (TaskState::Finished, EventKind::TaskFinished { summary: summary.clone() }, Some(summary), None)
        }
        Err(TurnError::Cancelled) => (TaskState::Cancelled, EventKind::TaskCancelled {}, None, None),
        Err(_) if cancel.is_cancelled() => (TaskState::Cancelled, EventKind::TaskCancelled {}, None, None),
        Err(e) => {
            let error = e.to_string();
            (TaskState::Failed, EventKind::TaskFailed { error: error.clone() }, None, Some(error))
        }
    };
    let end = End { state, kind, result, error, record_error: String::new() };
    if let Err(e) = record_end(storage, task_id, &end) {
        tracing::error!(task = %task_id, error = %e, "could not record the end of the task; kept in memory");
        storage.keep_end(task_id, End { record_error: e.to_string(), ..end });
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::effective_compact_at;
    use crate::end::close_unfinished_calls;
    use crate::storage::Settings;
    use crate::storage::Storage;
    use crate::testing::{Rig, PROVIDER};
    use agentd_agents::roles::default_tools;
    use agentd_agents::tools::ToolOutcome;
    use agentd_policies::budget::DEFAULT_COMPACT_AT;
    use agentd_policies::settings::{CompactAt, CompactAtOn};
    use agentd_protocol::{Message, Part, Speaker};
    use agentd_test_support::{delegate, finish as finish_call, sse, tool_call_with_id, ScriptedServer};
    use serde_json::json;
    use std::time::Duration;

    fn call(id: &str, name: &str, args: serde_json::Value) -> Part {
        Part::ToolCall { id: id.into(), name: name.into(), arguments: args.to_string() }
    }

    fn message(role: &str, message: Message) -> Record {
        Record::Message { role: Role::from(role), message }
    }

    #[test]
    fn the_unanswered_delegate_calls_of_the_last_answer_are_pending() {
        let d = |id: &str| call(id, "delegate", json!({"to": "coder", "objective": "x"}));
        let asked = Message::new(Speaker::Assistant, vec![d("d1")]);
        assert_eq!(pending_delegations(&[Message::user("Fix it"), asked.clone()]), ["d1"]);
        // Several: those with no result, in call order; another tool's call is not a delegation.
        let three = Message::new(
            Speaker::Assistant,
            vec![d("d1"), call("r1", "read_file", json!({})), d("d2"), d("d3")],
        );
        let answered = Message::tool_result("d2", "done", false);
        assert_eq!(pending_delegations(&[three, answered]), ["d1", "d3"]);
        assert!(pending_delegations(&[asked.clone(), Message::tool_result("d1", "done", false)]).is_empty());
        let reading = Message::new(Speaker::Assistant, vec![call("r1", "read_file", json!({"path": "a"}))]);
        assert!(pending_delegations(&[reading]).is_empty());
        assert!(pending_delegations(&[]).is_empty());
        // Only the last answer counts: an earlier one's calls were answered or repaired long ago.
        assert!(pending_delegations(&[asked, Message::assistant_text("done")]).is_empty());
    }

    #[test]
    fn what_each_role_resumes_with_is_read_back_from_one_pass_over_the_log() {
        let store = crate::memory::MemoryStorage::new();
        let outcome = ToolOutcome::ok("wrote");
        let receipt =
            agentd_agents::receipts::receipt(ToolName::WriteFile, r#"{"path":"a.txt"}"#, &outcome, None);
        let writes = |id: &str, tool: &str, path: &str| {
            Message::new(Speaker::Assistant, vec![call(id, tool, json!({"path": path, "content": "x"}))])
        };
        for record in [
            message("coder", writes("c1", "write_file", "a.txt")),
            Record::Receipt { role: Role::Coder, receipt: receipt.clone() },
            message("coder", writes("c2", "edit_file", "b.txt")),
            message("coder", writes("c3", "read_file", "c.txt")),
            message("coder", writes("c4", "write_file", "a.txt")),
        ] {
            store.append("t1", &record).unwrap();
        }
        let kind = EventKind::ResponseReceived {
            finish_reason: "stop".into(),
            usage: None,
            model: None,
            cost_usd: None,
        };
        let record = Record::Event {
            event: agentd_protocol::Event {
                seq: 1,
                task_id: "t1".into(),
                role: Role::Lead,
                at: "2025-01-01T00:00:00.000Z".into(),
                kind,
            },
        };
        store.append("t1", &record).unwrap();

        let mut states = role_states(&store, "t1").unwrap();
        let coder = states.remove(&Role::Coder).unwrap();
        assert_eq!(coder.receipts, [receipt]);
        assert_eq!(coder.changed_files, ["b.txt", "a.txt"], "written or edited, newest last, once each");
        assert_eq!(coder.last_answer_at, None);
        let lead = states.remove(&Role::Lead).unwrap();
        assert_eq!(lead.last_answer_at, crate::clock::parse_rfc3339("2025-01-01T00:00:00.000Z"));
        assert!(lead.receipts.is_empty() && lead.changed_files.is_empty());
    }

    #[tokio::test]
    async fn every_unfinished_call_is_closed_but_a_delegation_a_resume_continues() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let storage = rig.storage.as_ref();
        let called = |tool: &str, id: &str| EventKind::ToolCalled {
            tool: tool.into(),
            call_id: id.into(),
            checkpoint: None,
        };
        storage.emit("t1", &Role::from("lead"), called("delegate", "d1")).unwrap();
        storage.emit("t1", &Role::from("coder"), called("read_file", "c1")).unwrap();
        storage.emit("t1", &Role::from("coder"), called("read_file", "c2")).unwrap();
        storage
            .emit(
                "t1",
                &Role::from("coder"),
                EventKind::tool_ended(&ToolName::parse("read_file"), "c2", true, false),
            )
            .unwrap();

        assert_eq!(close_unfinished_calls(storage, "t1", true).unwrap(), 1);
        let last = rig.events("t1").pop().unwrap();
        assert_eq!(
            (&last.role, &last.kind),
            (&Role::Coder, &EventKind::tool_ended(&ToolName::parse("read_file"), "c1", false, true))
        );
        // Closing is idempotent; once the task is over, the delegation is closed too.
        assert_eq!(close_unfinished_calls(storage, "t1", true).unwrap(), 0);
        assert_eq!(close_unfinished_calls(storage, "t1", false).unwrap(), 1);
        assert_eq!(
            rig.events("t1").pop().unwrap().kind,
            EventKind::tool_ended(&ToolName::parse("delegate"), "d1", false, true)
        );
    }

    #[tokio::test]
    async fn compact_at_is_the_pairs_then_the_roles_then_the_configs_then_the_default() {
        let server = ScriptedServer::start(vec![]).await;
        let rig = Rig::start_with(server, |team| team.coder.compact_at = Some(70)).await;
        let (url, model) = (rig.server.base_url(), rig.server.model().to_string());
        let at = |role: &str| effective_compact_at(&rig.engine, &Role::from(role), &url, &model).unwrap();
        let set = |role: &Role, pair: Option<(&str, &str)>, value: u64| match pair {
            None => rig.storage.put(&CompactAt { role }, &value).unwrap(),
            Some((server, model)) => rig.storage.put(&CompactAtOn { role, server, model }, &value).unwrap(),
        };
        assert_eq!((at("lead"), at("coder")), (DEFAULT_COMPACT_AT, 70));
        set(&Role::Coder, None, 60);
        assert_eq!(at("coder"), 60);
        set(&Role::Coder, Some((&url, &model)), 50);
        assert_eq!(at("coder"), 50);
        // Another pair's setting is not this pair's, and a value out of range is not a setting.
        set(&Role::Lead, Some(("http://elsewhere/v1", &model)), 40);
        set(&Role::Lead, None, 0);
        assert_eq!(at("lead"), DEFAULT_COMPACT_AT);

        let snapshot = rig.task("x").snapshot(&Role::Coder).unwrap();
        assert_eq!(
            (snapshot.compact_at, snapshot.server.as_str(), snapshot.model.as_str()),
            (50, url.as_str(), model.as_str())
        );
        assert_eq!(snapshot.provider, PROVIDER);
        assert_eq!(snapshot.tools, default_tools(&Role::Coder));
        let unknown = rig.task("x").snapshot(&Role::specialist("reviewer")).unwrap_err();
        assert_eq!(unknown.to_string(), "no role \"reviewer\" in the team");
    }

    #[tokio::test]
    async fn a_state_change_never_overwrites_an_end_or_an_interruption() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let task = rig.task("x");
        task.set_state(TaskState::WaitingRetry).unwrap();
        assert_eq!(rig.state(&task.task_id), TaskState::WaitingRetry);
        rig.storage.update_task(&task.task_id, &mut |t| t.state = TaskState::Interrupted).unwrap();
        task.set_state(TaskState::Running).unwrap();
        assert_eq!(rig.state(&task.task_id), TaskState::Interrupted);
    }

    #[tokio::test]
    async fn the_end_of_a_task_is_recorded_by_its_outcome() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let storage = rig.storage.as_ref();
        let end = |outcome: Result<String, TurnError>, cancelled: bool| {
            let task = rig.task("x");
            if cancelled {
                task.cancel.cancel();
            }
            let state = finish(storage, &task.task_id, &task.cancel, outcome);
            let meta = storage.task(&task.task_id).unwrap().unwrap();
            (state, meta.state, meta.result, meta.error, rig.events(&task.task_id).pop().map(|e| e.kind))
        };
        let (state, recorded, result, _, last) = end(Ok("fixed".into()), false);
        assert_eq!(
            (state, recorded, result.as_deref()),
            (TaskState::Finished, TaskState::Finished, Some("fixed"))
        );
        assert_eq!(last, Some(EventKind::TaskFinished { summary: "fixed".into() }));
        let (state, _, _, _, last) = end(Err(TurnError::Cancelled), false);
        assert_eq!((state, last), (TaskState::Cancelled, Some(EventKind::TaskCancelled {})));
        // A turn that failed because the task was being cancelled was cancelled.
        let (state, _, _, error, _) = end(Err(TurnError::UnknownProvider("gone".into())), true);
        assert_eq!((state, error), (TaskState::Cancelled, None));
        let (state, _, _, error, last) = end(Err(TurnError::UnknownProvider("gone".into())), false);
        assert_eq!(
            (state, error.as_deref()),
            (TaskState::Failed, Some("no provider named \"gone\" is configured"))
        );
        assert_eq!(
            last,
            Some(EventKind::TaskFailed { error: "no provider named \"gone\" is configured".into() })
        );

        // A shutdown's `interrupted` stands.
        let task = rig.task("x");
        storage.update_task(&task.task_id, &mut |t| t.state = TaskState::Interrupted).unwrap();
        let state = finish(storage, &task.task_id, &task.cancel, Err(TurnError::Cancelled));
        assert_eq!((state, rig.state(&task.task_id)), (TaskState::Interrupted, TaskState::Interrupted));
        assert!(rig.events(&task.task_id).is_empty());
    }

    /// Launches the task and waits for its end state.
    async fn run(rig: &Rig, task: &TaskCtx, start: Start) -> TaskState {
        let (done, mut ended) = tokio::sync::watch::channel(None);
        launch(
            rig.engine.clone(),
            task.task_id.clone(),
            task.workspace.clone(),
            start,
            task.cancel.clone(),
            task.servers.clone(),
            done,
        )
        .unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(30), ended.wait_for(Option::is_some)).await;
        let state = *ended.expect("the task ends").expect("the runner reports");
        state.expect("an end state")
    }

    /// A server's `Retry-After` of 300,000,000,000 s (or 2^64-1): the task waits the 30-day ceiling,
    /// `waiting` with the wait said capped — it did wedge the task `running` (formatting a resume
    /// time past the year 9999 panicked), or wrap into a 384 ms retry.
    #[tokio::test]
    async fn a_wait_of_ten_thousand_years_is_the_ceiling_and_the_task_waits() {
        for asked in ["300000000000", "18446744073709551615", "18446744073709552"] {
            let server = ScriptedServer::start(vec![agentd_test_support::rate_limited(Some(asked))]).await;
            let rig = Rig::start(server).await;
            let task = rig.task("wait");
            let state = run(&rig, &task, Start::Fresh { objective: "wait".into() }).await;
            assert_eq!(state, TaskState::Waiting, "{asked}");
            assert_eq!(rig.server.chat_requests().len(), 1, "{asked}: no early retry");
            let events = rig.events(&task.task_id);
            let Some(EventKind::UsageLimitWait { resume_at, capped, .. }) =
                events.iter().map(|e| e.kind.clone()).find(|k| matches!(k, EventKind::UsageLimitWait { .. }))
            else {
                panic!("{asked}: {events:?}")
            };
            assert!(capped, "{asked}: the event says the wait was capped");
            let at = crate::clock::parse_rfc3339(&resume_at).unwrap();
            let ahead = at.duration_since(crate::clock::clock().now()).unwrap();
            let ceiling = agentd_protocol::MAX_PROVIDER_WAIT;
            assert!(ahead <= ceiling && ahead > ceiling - Duration::from_secs(60), "{asked}: {ahead:?}");
            let meta = rig.storage.task(&task.task_id).unwrap().unwrap();
            assert_eq!(meta.resume_at.as_deref(), Some(resume_at.as_str()));
        }
    }

    /// A daemon killed between an end's record and its event (found by the fleet chaos run: a task
    /// `finished` whose log never got `task_finished`, its watcher waiting for ever): the end is
    /// completed from the record, once, with every call left open ended.
    #[tokio::test]
    async fn an_end_on_the_record_but_not_in_the_log_is_completed_once() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let storage = rig.storage.as_ref();
        let task = rig.task("x");
        let id = &task.task_id;
        storage.emit(id, &Role::Lead, EventKind::TaskStarted { objective: "x".into() }).unwrap();
        let called =
            EventKind::ToolCalled { tool: ToolName::RunCommand, call_id: "c1".into(), checkpoint: None };
        storage.emit(id, &Role::Coder, called).unwrap();
        let meta = |state| {
            storage
                .update_task(id, &mut |t| {
                    t.state = state;
                    t.result = Some("done".into());
                })
                .unwrap();
            storage.task(id).unwrap().unwrap()
        };
        assert!(!crate::end::complete_end(storage, &meta(TaskState::Running)).unwrap(), "no end to complete");
        let finished = meta(TaskState::Finished);
        assert!(crate::end::complete_end(storage, &finished).unwrap());
        assert!(!crate::end::complete_end(storage, &finished).unwrap(), "once");
        let kinds = rig.kinds(id);
        assert_eq!(kinds, ["task_started", "tool_called", "tool_finished", "task_finished"]);
        let last = rig.events(id).last().map(|e| e.kind.clone());
        assert_eq!(last, Some(EventKind::TaskFinished { summary: "done".into() }));
    }

    /// Tool servers whose shutdown panics: a panic outside any turn, in the runner itself.
    struct PanickingServers;

    impl ToolServers for PanickingServers {
        fn tools_for<'a>(
            &'a self,
            role: &'a Role,
            cancel: &'a CancellationToken,
        ) -> futures_util::future::BoxFuture<'a, crate::tool_servers::RoleTools> {
            NoToolServers.tools_for(role, cancel)
        }

        fn call<'a>(
            &'a self,
            tool: &'a agentd_protocol::McpTool,
            arguments: &'a str,
            cancel: &'a CancellationToken,
        ) -> futures_util::future::BoxFuture<
            'a,
            Result<crate::tool_servers::ToolReply, crate::tool_servers::ToolFailure>,
        > {
            NoToolServers.call(tool, arguments, cancel)
        }

        fn shutdown(&self) -> futures_util::future::BoxFuture<'_, ()> {
            Box::pin(async { panic!("the servers' shutdown broke") })
        }

        fn news(&self) -> Vec<crate::tool_servers::ServerNews> {
            Vec::new()
        }
    }

    /// Whatever panics in a task's runner, the task ends `failed` with the panic's words and its
    /// holder hears that it ended: it is never left `running` with nobody running it.
    #[tokio::test]
    async fn a_panicking_runner_fails_its_task_with_the_panics_words() {
        let server = ScriptedServer::start(vec![sse(vec![finish_call("done")])]).await;
        let rig = Rig::start(server).await;
        let task = rig.task("x");
        let (done, mut ended) = tokio::sync::watch::channel(None);
        launch(
            rig.engine.clone(),
            task.task_id.clone(),
            task.workspace.clone(),
            Start::Fresh { objective: "x".into() },
            task.cancel.clone(),
            Arc::new(PanickingServers),
            done,
        )
        .unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(30), ended.wait_for(Option::is_some)).await;
        let state = *ended.expect("the runner reports its end").expect("the channel");
        assert_eq!(state, Some(TaskState::Failed));
        let meta = rig.storage.task(&task.task_id).unwrap().unwrap();
        assert_eq!(meta.state, TaskState::Failed);
        let error = meta.error.unwrap();
        assert!(error.contains("panicked") && error.contains("the servers' shutdown broke"), "{error}");
        let last = rig.events(&task.task_id).last().map(|e| e.kind.clone());
        assert_eq!(last, Some(EventKind::TaskFailed { error }));
    }

    #[tokio::test]
    async fn a_launched_task_runs_the_lead_through_a_delegation_to_its_end() {
        let server = ScriptedServer::start(vec![
            sse(vec![delegate("coder", "Fix the adder")]),
            sse(vec![finish_call("changed - to +")]),
            sse(vec![finish_call("the coder fixed the adder")]),
        ])
        .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Fix the adder");
        assert_eq!(
            run(&rig, &task, Start::Fresh { objective: "Fix the adder".into() }).await,
            TaskState::Finished
        );

        let meta = rig.storage.task(&task.task_id).unwrap().unwrap();
        assert_eq!(meta.result.as_deref(), Some("the coder fixed the adder"));
        let coder = rig.history(&task.task_id, "coder");
        assert!(coder[0].text().contains("Fix the adder"), "the handoff carries the objective: {coder:#?}");
        let lead = rig.history(&task.task_id, "lead");
        let returned = lead.iter().flat_map(|m| &m.parts).any(
            |p| matches!(p, Part::ToolResult { content, is_error: false, .. } if content == "changed - to +"),
        );
        assert!(returned, "the coder's summary is the delegate call's result: {lead:#?}");
        let kinds = rig.kinds(&task.task_id);
        let delegated = kinds.iter().position(|k| k == "delegated").unwrap();
        let returned = kinds.iter().position(|k| k == "delegation_returned").unwrap();
        assert!(delegated < returned);
        assert_eq!(kinds.last().map(String::as_str), Some("task_finished"));
    }

    #[tokio::test]
    async fn a_resume_into_a_pending_delegation_hands_the_delegates_summary_back() {
        let server = ScriptedServer::start(vec![
            sse(vec![tool_call_with_id("c9", "finish", json!({"summary": "changed - to +"}))]),
            sse(vec![finish_call("the coder fixed the adder")]),
        ])
        .await;
        let rig = Rig::start(server).await;
        let task = rig.task("Fix the adder");
        // The daemon stopped while the lead waited on the coder.
        let asked = Message::new(
            Speaker::Assistant,
            vec![call("d1", "delegate", json!({"to": "coder", "objective": "Fix the adder"}))],
        );
        for record in [
            message("lead", Message::user("Fix the adder")),
            message("lead", asked),
            message("coder", Message::user("Fix the adder (handed over by lead)")),
        ] {
            rig.storage.append(&task.task_id, &record).unwrap();
        }
        rig.storage
            .emit(
                &task.task_id,
                &Role::Lead,
                EventKind::ToolCalled { tool: "delegate".into(), call_id: "d1".into(), checkpoint: None },
            )
            .unwrap();
        assert_eq!(run(&rig, &task, Start::Resume).await, TaskState::Finished);

        let sent = rig.server.chat_requests();
        assert_eq!(sent.len(), 2, "the coder's turn, then the lead's: nobody starts over");
        let lead = rig.history(&task.task_id, "lead");
        assert_eq!(lead[2], Message::tool_result("d1", "changed - to +", false));
        let events = rig.events(&task.task_id);
        assert!(events
            .iter()
            .any(|e| e.kind == EventKind::tool_ended(&ToolName::parse("delegate"), "d1", true, false)));
        let meta = rig.storage.task(&task.task_id).unwrap().unwrap();
        assert_eq!(meta.result.as_deref(), Some("the coder fixed the adder"));
    }
}
