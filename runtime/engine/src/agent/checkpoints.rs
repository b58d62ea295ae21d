//! An agent's checkpoints around its writing calls (see [`crate::checkpoints`]).
//!
//! Before a call that can change files — `write_file`, `edit_file`, `run_command`, a tool of an MCP
//! server marked `writes` — the agent takes a checkpoint of the tree its tools work in (the
//! workspace, or its working copy) and names it on the call's `tool_called`; after the call it takes
//! another, and when they differ it records the call's `files_changed`. A branch's merge back into
//! the workspace is one more change, recorded the same way under the `delegate` call. A checkpoint
//! that cannot be taken is a `checkpoint_failed` event: the call still runs.

use super::turn::Call;
use super::Agent;
use crate::checkpoints::{change, take, Failure};
use crate::error::TurnError;
use agentd_protocol::{EventKind, Role, ToolName};
use std::path::PathBuf;

/// The workspace's checkpoint before a merge, and the `seq` of the `delegate` call it merges.
pub(super) struct MergeBefore {
    tree: String,
    call_seq: u64,
}

impl Agent {
    /// Whether a call of `name` can change files.
    fn changes_files(&self, name: &ToolName) -> bool {
        name.writes() || name.mcp().is_some_and(|tool| self.task.servers.writes(tool))
    }

    /// The checkpoint before `call`, when it can change files and checkpoints are on.
    pub(super) async fn checkpoint_before(&mut self, call: &Call) -> Result<Option<String>, TurnError> {
        if !self.changes_files(&call.name) {
            return Ok(None);
        }
        let root = self.workspace().root().to_path_buf();
        self.checkpoint_at(root, &call.id).await
    }

    /// After `call` (its `tool_called` is event `call_seq`): the checkpoint after, and the call's
    /// `files_changed` when it changed anything since `before`.
    pub(super) async fn checkpoint_after(
        &mut self,
        call: &Call,
        call_seq: u64,
        before: Option<String>,
    ) -> Result<(), TurnError> {
        let Some(before) = before else { return Ok(()) };
        let root = self.workspace().root().to_path_buf();
        let role = self.role.clone();
        self.record_change(&before, root, &call.id, &call.name, call_seq, &role).await
    }

    /// The workspace's checkpoint before a branch's merge (when the branch has a copy to merge),
    /// recorded as `merge_started` for `from` (the teammate) before a file is written: a merge a crash
    /// cuts short is then recorded at the resume (`crate::checkpoints::reconcile`), whatever it wrote.
    pub(super) async fn checkpoint_merge_before(
        &mut self,
        call_id: &str,
        from: &Role,
    ) -> Result<Option<MergeBefore>, TurnError> {
        let root = self.task.workspace.root().to_path_buf();
        let Some(tree) = self.checkpoint_at(root, call_id).await? else { return Ok(None) };
        let call_seq = self.call_seq(call_id)?;
        let started =
            EventKind::MergeStarted { call_id: call_id.to_string(), call_seq, checkpoint: tree.clone() };
        self.task.engine.storage().emit(&self.task.task_id, from, started)?;
        Ok(Some(MergeBefore { tree, call_seq }))
    }

    /// After a branch's merge: the workspace's change, recorded for `from` (the teammate) under the
    /// `delegate` call `call_id`.
    pub(super) async fn checkpoint_merge_after(
        &mut self,
        call_id: &str,
        from: &Role,
        before: Option<MergeBefore>,
    ) -> Result<(), TurnError> {
        let Some(MergeBefore { tree, call_seq }) = before else { return Ok(()) };
        let root = self.task.workspace.root().to_path_buf();
        self.record_change(&tree, root, call_id, &ToolName::Delegate, call_seq, from).await
    }

    /// The checkpoint of `root` before a change for `call_id`, when checkpoints are on; one that
    /// cannot be taken is `checkpoint_failed`, and the change goes unrecorded.
    async fn checkpoint_at(&self, root: PathBuf, call_id: &str) -> Result<Option<String>, TurnError> {
        if !self.task.checkpoints.enabled() {
            return Ok(None);
        }
        match self.checkpoint(root).await {
            Ok(tree) => Ok(Some(tree)),
            Err(e) => {
                self.checkpoint_failed(call_id, &e)?;
                Ok(None)
            }
        }
    }

    /// A checkpoint of the tree at `root`: its name.
    async fn checkpoint(&self, root: PathBuf) -> Result<String, Failure> {
        let (checkpoints, storage) = (self.task.checkpoints.clone(), self.task.engine.storage().clone());
        Ok(take(checkpoints, storage, root).await?.tree)
    }

    /// The checkpoint of `root` after a change, and the change since `before` recorded for `by`. A
    /// checkpoint that cannot be taken or compared is `checkpoint_failed`; only the storage refusing
    /// the event fails the turn, as any storage failure does.
    async fn record_change(
        &self,
        before: &str,
        root: PathBuf,
        call_id: &str,
        tool: &ToolName,
        call_seq: u64,
        by: &Role,
    ) -> Result<(), TurnError> {
        let in_copy = root != self.task.workspace.root();
        let storage = self.task.engine.storage();
        let taken = match self.checkpoint(root.clone()).await {
            Ok(after) if after == before => return Ok(()),
            Ok(after) => change(storage.as_ref(), before, &after),
            Err(e) => Err(e),
        };
        let change = match taken {
            Ok(change) => change,
            Err(e) => return self.checkpoint_failed(call_id, &e),
        };
        let kind = EventKind::FilesChanged {
            call_id: call_id.to_string(),
            tool: tool.clone(),
            call_seq,
            change: Box::new(change),
            working_copy: in_copy.then(|| root.display().to_string()),
            interrupted: false,
        };
        storage.emit(&self.task.task_id, by, kind)?;
        Ok(())
    }

    /// `checkpoint_failed`, said in the log too.
    fn checkpoint_failed(&self, call_id: &str, e: &Failure) -> Result<(), TurnError> {
        tracing::warn!(task = %self.task.task_id, role = %self.role, call = call_id, error = %e, "checkpoint failed");
        self.emit(EventKind::CheckpointFailed { call_id: call_id.to_string(), error: e.to_string() })?;
        Ok(())
    }

    /// The `seq` of this agent's latest `tool_called` for `call_id`.
    fn call_seq(&self, call_id: &str) -> Result<u64, TurnError> {
        let events = crate::checkpoints::all_events(self.task.engine.storage().as_ref(), &self.task.task_id)?;
        Ok(events
            .iter()
            .rev()
            .find(|e| {
                e.role == self.role
                    && matches!(&e.kind, EventKind::ToolCalled { call_id: id, .. } if id == call_id)
            })
            .map_or(0, |e| e.seq))
    }
}
