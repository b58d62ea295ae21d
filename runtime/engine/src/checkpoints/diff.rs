//! [`diff`]: what a task changed in its workspace, composed from its recorded changes.

use super::error::ChangesError;
use super::steps::{all_events, step_of};
use super::store::StoredObjects;
use crate::storage::Storage;
use agentd_agents::checkpoints as cp;
use agentd_policies::changes::{compose, Step};
use agentd_protocol::rpc::{DiffFile, DiffParams, DiffResult};
use agentd_protocol::NotHeld;

/// The files the task's recorded changes (those `params` picks) changed, each from its state before
/// the first of them to its state after the last, with the unified diff unless `stat`.
///
/// Which changes: those of one call (`call`), or of one agent (`role`, its working copy's
/// included), else the workspace's own (a working copy's reach it through their merge); then only
/// those after `since`.
pub fn diff(storage: &dyn Storage, params: &DiffParams) -> Result<DiffResult, ChangesError> {
    if storage.task(&params.task_id)?.is_none() {
        return Err(crate::storage::StorageError::UnknownTask(params.task_id.clone()).into());
    }
    let steps: Vec<Step> = all_events(storage, &params.task_id)?
        .iter()
        .filter_map(step_of)
        .filter(|s| match params.call {
            Some(call) => s.call_seq == call,
            // A working copy's changes are an agent's own; the workspace's reach it by their merge.
            None => params.role.is_some() || !s.in_copy,
        })
        .filter(|s| params.role.as_ref().is_none_or(|r| s.role == *r))
        .filter(|s| params.since.is_none_or(|since| s.call_seq > since))
        .collect();
    let composed = compose(&steps);
    let deltas: Vec<_> = composed.iter().map(|c| c.delta.clone()).collect();
    let (unified, counts) = cp::unified(&StoredObjects(storage), &deltas)?;
    let files: Vec<DiffFile> = composed
        .into_iter()
        .zip(counts)
        .map(|(c, lines)| DiffFile {
            change: c.delta.change().to_string(),
            delta: c.delta,
            binary: lines.binary,
            lines_added: lines.added,
            lines_removed: lines.removed,
            seqs: c.seqs,
        })
        .collect();
    let not_held = files
        .iter()
        .filter_map(|f| {
            let special = [&f.delta.before, &f.delta.after].into_iter().flatten().find_map(|s| s.special());
            special.map(|what| NotHeld {
                path: f.delta.path.clone(),
                why: format!("{what}: a checkpoint records its name, not its content"),
            })
        })
        .collect();
    Ok(DiffResult {
        not_held,
        task_id: params.task_id.clone(),
        lines_added: files.iter().map(|f| f.lines_added).sum(),
        lines_removed: files.iter().map(|f| f.lines_removed).sum(),
        files,
        unified: if params.stat { String::new() } else { unified },
        changes: steps.len() as u64,
    })
}
