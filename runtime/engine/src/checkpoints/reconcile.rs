//! [`reconcile`]: after a stop, the change of a writing call that was cut short, recorded.

use super::error::ChangesError;
use super::steps::all_events;
use super::store::{change, take, Checkpoints};
use crate::storage::Storage;
use agentd_protocol::event::open_branches;
use agentd_protocol::{EventKind, Role, ToolName};
use std::path::PathBuf;
use std::sync::Arc;

/// A writing call whose change is not recorded: its `tool_called` named a checkpoint, and it never
/// finished (or a stop cut it), with no `files_changed` of its own; or a branch's merge whose
/// `merge_started` has no `files_changed` after it.
struct Cut {
    seq: u64,
    role: Role,
    tool: ToolName,
    call_id: String,
    checkpoint: String,
    finished: bool,
    /// A merge: it wrote into the workspace, whatever copy its branch has.
    merge: bool,
}

/// Records the change of each writing call a stop cut short (`kill -9` between the call and its
/// checkpoint after): its checkpoint before compared with its tree now — the workspace, or the
/// working copy of a branch still open — as a `files_changed` marked `interrupted`. A branch's merge
/// cut short (its `merge_started` with no `files_changed` after) is recorded the same way, against
/// the workspace: what it wrote before the stop is in the record, and the merge repeated by the
/// resume records the rest. So after a resume `agentd diff` and `agentd revert` agree with the files
/// on disk. How many were recorded.
pub async fn reconcile(
    storage: Arc<dyn Storage>,
    checkpoints: Arc<Checkpoints>,
    task_id: &str,
    workspace: PathBuf,
) -> Result<usize, ChangesError> {
    if !checkpoints.enabled() {
        return Ok(0);
    }
    let events = all_events(storage.as_ref(), task_id)?;
    let mut cuts: Vec<Cut> = Vec::new();
    for e in &events {
        match &e.kind {
            EventKind::ToolCalled { tool, call_id, checkpoint: Some(checkpoint) } => cuts.push(Cut {
                seq: e.seq,
                role: e.role.clone(),
                tool: tool.clone(),
                call_id: call_id.clone(),
                checkpoint: checkpoint.clone(),
                finished: false,
                merge: false,
            }),
            EventKind::MergeStarted { call_id, call_seq, checkpoint } => cuts.push(Cut {
                seq: *call_seq,
                role: e.role.clone(),
                tool: ToolName::Delegate,
                call_id: call_id.clone(),
                checkpoint: checkpoint.clone(),
                finished: false,
                merge: true,
            }),
            EventKind::ToolFinished { call_id, interrupted: false, .. } => {
                let found =
                    cuts.iter_mut().rev().find(|c| !c.merge && c.call_id == *call_id && c.role == e.role);
                if let Some(cut) = found {
                    cut.finished = true;
                }
            }
            EventKind::FilesChanged { call_seq, .. } => cuts.retain(|c| c.seq != *call_seq),
            _ => {}
        }
    }
    cuts.retain(|c| !c.finished);
    let branches = open_branches(&events);
    // Where a cut call wrote: the working copy of its agent's branch still open, else (and for a
    // merge, always) the workspace.
    let copy_of = |cut: &Cut| match cut.merge {
        true => None,
        false => branches.iter().find(|b| b.role == cut.role).and_then(|b| b.working_copy.clone()),
    };
    // A write a stop cut short left its temporary file: swept before the change is read, so what the
    // record holds is what the task made.
    let mut roots: Vec<PathBuf> =
        cuts.iter().map(|cut| copy_of(cut).map_or_else(|| workspace.clone(), PathBuf::from)).collect();
    roots.sort();
    roots.dedup();
    for root in roots.into_iter().filter(|r| r.is_dir()) {
        let swept =
            tokio::task::spawn_blocking(move || agentd_agents::checkpoints::sweep_stale_temps(&root)).await;
        match swept.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(task = %task_id, files = ?removed, "temporary files of a write cut short removed")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(task = %task_id, error = %e, "temporary files of a write cut short could not be swept")
            }
        }
    }
    let mut recorded = 0;
    for cut in cuts {
        let copy = copy_of(&cut);
        let root = copy.clone().map_or_else(|| workspace.clone(), PathBuf::from);
        if !root.is_dir() {
            continue;
        }
        let now = take(checkpoints.clone(), storage.clone(), root).await?;
        if now.tree == cut.checkpoint {
            continue;
        }
        let change = change(storage.as_ref(), &cut.checkpoint, &now.tree)?;
        if change.files.is_empty() {
            continue;
        }
        let kind = EventKind::FilesChanged {
            call_id: cut.call_id,
            tool: cut.tool,
            call_seq: cut.seq,
            change: Box::new(change),
            working_copy: copy,
            interrupted: true,
        };
        storage.emit(task_id, &cut.role, kind)?;
        recorded += 1;
    }
    Ok(recorded)
}
