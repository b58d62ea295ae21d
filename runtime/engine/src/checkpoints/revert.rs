//! [`revert`]: files a stopped task changed, put back as they were.

use super::error::ChangesError;
use super::steps::{all_events, step_of};
use super::store::{change, Checkpoints, StoredObjects};
use crate::storage::Storage;
use agentd_agents::checkpoints as cp;
use agentd_agents::Workspace;
use agentd_policies::changes::{plan, same, Restore, Step, Target};
use agentd_policies::redact::Redactor;
use agentd_protocol::rpc::{RevertParams, RevertResult};
use agentd_protocol::NotHeld;
use agentd_protocol::{EventKind, Message, MessageKind, Record, Role};

/// Puts back what `params` names — every file changed after call `to`, or the change of call
/// `call` — in the task's workspace, and records it: a `reverted` event (with the checkpoints before
/// and after, so it can itself be reverted) and a notice in the next request of the lead and of each
/// agent whose work it took back.
///
/// Refused, with nothing written, when a file is not as the task last left it (the user changed it
/// since; `force` overwrites it) or its bytes were not kept. What it cannot put back is said in its
/// result and its event (`not_restored`): a special file (a FIFO, a socket, a device) the task took
/// away — one it made is removed — and the other hard links of a file it puts back. The task must be stopped: the caller
/// holds it. `max_bytes` and `secrets`: the task's `[checkpoints] max_bytes`, and the secrets no
/// checkpoint keeps.
pub fn revert(
    storage: &dyn Storage,
    (max_bytes, secrets): (u64, &Redactor),
    workspace: &Workspace,
    params: &RevertParams,
) -> Result<RevertResult, ChangesError> {
    let task_id = &params.task_id;
    let target = match (params.to, params.call) {
        (Some(to), None) => Target::To(to),
        (None, Some(call)) => Target::Call(call),
        _ => return Err(ChangesError::Target),
    };
    let steps: Vec<Step> = all_events(storage, task_id)?.iter().filter_map(step_of).collect();
    let planned = plan(&steps, target)?;
    if planned.is_empty() {
        return Ok(RevertResult {
            task_id: task_id.clone(),
            seq: 0,
            files: Vec::new(),
            forced: Vec::new(),
            not_restored: Vec::new(),
        });
    }
    // A special file (a FIFO, a socket, a device) is named by a checkpoint, never held: one the task
    // made is removed, one it took away cannot be made again, and is said.
    let (specials, restores): (Vec<Restore>, Vec<Restore>) =
        planned.into_iter().partition(|r| r.target.as_ref().is_some_and(|t| t.special().is_some()));
    let mut not_restored: Vec<NotHeld> = specials
        .iter()
        .map(|r| {
            let what = r.target.as_ref().and_then(|t| t.special()).unwrap_or("a special file");
            NotHeld {
                path: r.path.clone(),
                why: format!("it was {what}: a checkpoint records its name, not the thing itself"),
            }
        })
        .collect();
    let unkept: Vec<String> = restores
        .iter()
        .filter(|r| r.target.as_ref().is_some_and(|t| t.unkept))
        .map(|r| r.path.clone())
        .collect();
    if !unkept.is_empty() {
        return Err(ChangesError::NotKept(unkept));
    }
    let mut changed = Vec::new();
    let mut linked = Vec::new();
    for r in &restores {
        let now = cp::current::<crate::storage::StorageError>(workspace, &r.path)?;
        if !same(now.state.as_ref(), r.expected.as_ref()) {
            changed.push(r.path.clone());
        }
        if now.links > 1 {
            linked.push((r, now.links));
        }
    }
    if !changed.is_empty() && !params.force {
        return Err(ChangesError::ChangedSince(changed));
    }
    // A file with other hard links (maybe outside the workspace) is put back under this name only:
    // the others keep what the task wrote through them, and the user is told which.
    for (r, links) in linked {
        let others = links - 1;
        not_restored.push(NotHeld {
            path: r.path.clone(),
            why: format!(
                "it has {others} other hard link(s): this name is put back, the other {others} keep what the task wrote through them"
            ),
        });
    }
    // Its own checkpoints: kept even when a task's are off (`max_bytes` 0), so it can be undone.
    let checkpoints = Checkpoints::new(max_bytes.max(1), secrets.clone());
    let before = checkpoints.take_blocking(storage, workspace.root())?;
    let put_back = put_back(storage, workspace, &restores);
    let after = checkpoints.take_blocking(storage, workspace.root())?;
    let change = change(storage, &before.tree, &after.tree)?;
    let files = change.files.clone();
    let (to_seq, call_seq) = (params.to, params.call);
    not_restored.sort_by(|a, b| a.path.cmp(&b.path));
    let event = storage.emit(
        task_id,
        &Role::Lead,
        EventKind::Reverted {
            to_seq,
            call_seq,
            forced: changed.clone(),
            not_restored: not_restored.clone(),
            change: Box::new(change),
        },
    )?;
    tell(storage, task_id, &steps, target, &files, &not_restored)?;
    put_back?;
    Ok(RevertResult { task_id: task_id.clone(), seq: event.seq, files, forced: changed, not_restored })
}

/// Puts each file back, removals first (a file may give way to a directory, or the reverse).
fn put_back(storage: &dyn Storage, workspace: &Workspace, restores: &[Restore]) -> Result<(), ChangesError> {
    let mut ordered: Vec<&Restore> = restores.iter().collect();
    ordered.sort_by_key(|r| r.target.is_some());
    let mut done = Vec::new();
    for r in ordered {
        if let Err(source) = cp::restore(workspace, &StoredObjects(storage), &r.path, r.target.as_ref()) {
            return Err(ChangesError::Partly { path: r.path.clone(), done, source: Box::new(source) });
        }
        done.push(r.path.clone());
    }
    Ok(())
}

/// The notice the lead and each agent whose work was taken back read in their next request.
fn tell(
    storage: &dyn Storage,
    task_id: &str,
    steps: &[Step],
    target: Target,
    files: &[agentd_protocol::FileDelta],
    not_restored: &[NotHeld],
) -> Result<(), ChangesError> {
    let what = match target {
        Target::To(seq) => format!("every change the team made to the workspace after call {seq}"),
        Target::Call(seq) => format!("the change of call {seq}"),
    };
    let mut names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let more = names.len().saturating_sub(20);
    names.truncate(20);
    let mut listed = names.join(", ");
    if more > 0 {
        listed.push_str(&format!(" and {more} more"));
    }
    let mut text = format!(
        "[agentd] The user reverted {what}: {listed} are back as they were before it. \
         Take this into account; do not redo that work unless the user asks for it."
    );
    if !not_restored.is_empty() {
        text.push_str(&format!(" Not put back: {}.", NotHeld::listed(not_restored, 20)));
    }
    let mut roles = vec![Role::Lead];
    for s in steps.iter().filter(|s| match target {
        Target::To(seq) => s.call_seq > seq,
        Target::Call(seq) => s.call_seq == seq,
    }) {
        if !roles.contains(&s.role) {
            roles.push(s.role.clone());
        }
    }
    for role in roles {
        if storage.history(task_id, &role)?.is_empty() {
            continue;
        }
        let message = Message::user(text.clone()).with_kind(MessageKind::Notice);
        storage.append(task_id, &Record::Message { role, message })?;
    }
    Ok(())
}
