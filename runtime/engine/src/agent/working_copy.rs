//! A writer's working copy, and its changes brought back.
//!
//! A branch that writes while another writer runs works in a copy of its own, made when its
//! delegation starts (`agentd_agents::copies::make_copy`): `<tools.copies>/<task>/<call>/base`, the
//! workspace as it stood, and `<…>/work`, where the teammate's tools and commands run — the sandbox,
//! the file tools' `openat2` rules and the redaction apply there exactly as in the workspace, because
//! the copy *is* the branch's workspace. Both stay until the branch is settled, so a resume after
//! `kill -9` continues the branch in the copy it had.
//!
//! When the branch returns, what it changed — whatever made the change: a file tool, a `sed -i`, a
//! generated file — is the difference between `base` and `work`. That patch is archived whole as
//! evidence (a unified diff), then merged into the workspace three-way against `base`: a clean merge
//! lands; a conflicting file is left as the workspace has it, the teammate's version of it archived
//! whole, and the lead's result names the file, its hunks and that evidence. A merge repeated after a
//! crash changes nothing (a file already as the copy has it is left alone). A branch whose turn failed
//! has its patch archived and not merged: the lead decides.

use super::Agent;
use crate::clock::now_rfc3339;
use crate::error::TurnError;
use agentd_agents::copies::{self, Conflict};
use agentd_agents::workspace::Workspace;
use agentd_protocol::task::EVIDENCE_FOLDER;
use agentd_protocol::{NewEvidence, NotHeld, PatchConflict, Producer, Role, Source, Stored};
use std::path::{Path, PathBuf};

/// A branch's working copy: the workspace as the delegation found it (`base`) and the copy it works
/// in (`work`), side by side in one folder.
#[derive(Debug)]
pub(super) struct Copy {
    folder: PathBuf,
    base: PathBuf,
    work: Workspace,
    /// What the workspace held that the copy does not (FIFOs, sockets, devices, files too large to
    /// carry): said in `delegated` and in the teammate's handoff. Empty for a copy reopened at a resume
    /// (it was said when the copy was made).
    left_out: Vec<NotHeld>,
}

impl Copy {
    /// The copy the branch works in, as its tools' workspace.
    pub(super) fn workspace(&self) -> &Workspace {
        &self.work
    }

    /// Where the copy the branch works in is.
    pub(super) fn work_path(&self) -> &Path {
        self.work.root()
    }

    /// What the workspace held that the copy does not.
    pub(super) fn left_out(&self) -> &[NotHeld] {
        &self.left_out
    }

    /// Removes the copy and its base (once its changes are merged and archived). A copy that cannot
    /// be removed is left, said in the log: it holds nothing the archive does not.
    pub(super) fn remove(self) {
        if let Err(e) = copies::remove_copy(&self.folder) {
            tracing::warn!(folder = %self.folder.display(), error = %e, "a merged working copy could not be removed");
        }
    }
}

/// What a branch's patch did when it came back: what the delegation's result and its
/// `delegation_returned` say.
#[derive(Debug, Clone, Default)]
pub(super) struct Merge {
    pub evidence_id: Option<String>,
    pub files_changed: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub conflicts: Vec<PatchConflict>,
    /// Whether it was merged (a failed branch's is only archived).
    pub applied: bool,
    /// Why its changes could not be read or merged, when they could not (a disk error): the copy is
    /// then kept, and the lead told where.
    pub not_merged: Option<String>,
    /// What the copy held that its patch could not carry back (FIFOs, sockets, devices, files too
    /// large), and why.
    pub not_carried: Vec<NotHeld>,
    /// The conflicts, told in full for the lead.
    told: Vec<String>,
}

impl Merge {
    /// What the lead reads after the teammate's summary.
    pub(super) fn told(&self) -> String {
        let mut out = self.told_changes();
        if !self.not_carried.is_empty() {
            out.push_str(&format!(
                "\n[working copy: not carried back, the workspace keeps what it had there: {}]",
                NotHeld::listed(&self.not_carried, NAMED)
            ));
        }
        out
    }

    /// What the lead reads of the changes themselves.
    fn told_changes(&self) -> String {
        if let Some(why) = &self.not_merged {
            return format!("\n\n[working copy: its changes were NOT merged: {why}]");
        }
        let Some(id) = &self.evidence_id else {
            return "\n\n[working copy: no changes]".to_string();
        };
        let what = format!(
            "{} file(s) changed, +{} -{}; the whole patch is evidence {id}",
            self.files_changed, self.lines_added, self.lines_removed
        );
        if !self.applied {
            return format!("\n\n[working copy: {what}; NOT merged, because the teammate's turn failed]");
        }
        if self.conflicts.is_empty() {
            return format!("\n\n[working copy: {what}; merged into the workspace]");
        }
        let mut out = format!(
            "\n\n[working copy: {what}; merged except {} conflicting file(s), left as the workspace has them:",
            self.conflicts.len()
        );
        for told in &self.told {
            out.push_str("\n- ");
            out.push_str(told);
        }
        out.push_str("\nDecide: delegate a reconciliation, or take one side with write_file.]");
        out
    }
}

/// How many paths not held a model reads named, before how many more.
pub(super) const NAMED: usize = 20;

/// The folder of one branch's copy: `<copies>/<task>/<call id>`.
fn folder_of(copies: &Path, task_id: &str, call_id: &str) -> PathBuf {
    // A call id is the model's word: only its safe characters make the folder's name.
    let safe: String = call_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    copies.join(task_id).join(if safe.is_empty() { "call".to_string() } else { safe })
}

impl Agent {
    /// Makes the working copy of the branch answering `call_id`: the base, then the copy worked in,
    /// each from the workspace as it stands. Why it could not be made, in words, otherwise.
    pub(super) fn working_copy(&self, call_id: &str, instance: &Role) -> Result<Copy, String> {
        let folder = folder_of(&self.task.copies, &self.task.task_id, call_id);
        if folder.exists() {
            std::fs::remove_dir_all(&folder).map_err(|e| {
                format!("a stale working copy at {} could not be cleared: {e}", folder.display())
            })?;
        }
        let (base, work) = (folder.join("base"), folder.join("work"));
        let made = copies::make_copy(self.task.workspace.root(), &base)
            .and_then(|made| copies::make_copy(&base, &work).map(|_| made));
        let made = match made {
            Ok(made) => made,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&folder);
                return Err(format!("its working copy could not be made in {}: {e}", folder.display()));
            }
        };
        let work = Workspace::new(&work).map_err(|e| format!("its working copy could not be opened: {e}"))?;
        tracing::info!(task = %self.task.task_id, %instance, copy = %work.root().display(), files = made.files, bytes = made.bytes, left_out = made.left_out.len(), "working copy made");
        Ok(Copy { folder, base, work, left_out: made.left_out })
    }

    /// The working copy a resumed branch had, opened again; why not, in words.
    pub(super) fn reopen_copy(&self, call_id: &str, work: &Path) -> Result<Copy, String> {
        let folder = folder_of(&self.task.copies, &self.task.task_id, call_id);
        let base = folder.join("base");
        if !base.is_dir() || !work.is_dir() {
            return Err(format!("its working copy {} is not on this machine any more", work.display()));
        }
        let work = Workspace::new(work).map_err(|e| format!("its working copy could not be opened: {e}"))?;
        Ok(Copy { folder, base, work, left_out: Vec::new() })
    }

    /// Brings a settled branch's changes back: its patch archived, then (unless its turn failed)
    /// merged three-way into the workspace, each conflicting file's version archived.
    pub(super) fn merge_back(
        &self,
        call_id: &str,
        from: Option<&Role>,
        copy: &Copy,
        apply: bool,
    ) -> Result<Merge, TurnError> {
        let from = from.cloned().unwrap_or(Role::Lead);
        let kept = |why: String| Merge {
            not_merged: Some(format!("{why}; the working copy is kept at {}", copy.work.root().display())),
            ..Merge::default()
        };
        let patch = match copies::changes(&copy.base, copy.work.root()) {
            Ok(patch) => patch,
            Err(e) => return Ok(kept(format!("its changes could not be read: {e}"))),
        };
        let not_carried = patch.left_out.clone();
        if patch.files.is_empty() {
            return Ok(Merge { applied: apply, not_carried, ..Merge::default() });
        }
        // No secret reaches the archive: the patch as the lead may read it.
        let shown = self.task.engine.redactor().redact(&patch.unified);
        let evidence_id =
            self.archive(call_id, &from, shown.as_bytes(), "text/x-diff", format!("{from}'s patch"))?;
        let mut merge = Merge {
            evidence_id: Some(evidence_id),
            files_changed: patch.files.len() as u64,
            lines_added: patch.lines_added,
            lines_removed: patch.lines_removed,
            applied: apply,
            not_carried,
            ..Merge::default()
        };
        if !apply {
            return Ok(merge);
        }
        let merged = match copies::merge(&copy.base, copy.work.root(), &patch, &self.task.workspace) {
            Ok(merged) => merged,
            Err(e) => {
                let id = merge.evidence_id.clone().unwrap_or_default();
                return Ok(Merge {
                    evidence_id: merge.evidence_id,
                    not_carried: merge.not_carried,
                    ..kept(format!("the merge failed ({e}); the patch is evidence {id}"))
                });
            }
        };
        for conflict in &merged.conflicts {
            let theirs = copy.work.root().join(&conflict.path);
            let version = match std::fs::read(&theirs) {
                // A version holding a secret is not archived: the copy's file is named instead.
                Ok(bytes) if self.task.engine.redactor().held_in(&bytes).is_some() => None,
                Ok(bytes) => {
                    let what = format!("{from}'s version of {}", conflict.path);
                    Some(self.archive(call_id, &from, &bytes, "application/octet-stream", what)?)
                }
                // Deleted in the copy: there is no version to keep.
                Err(_) => None,
            };
            merge.told.push(tell(conflict, version.as_deref()));
            merge.conflicts.push(PatchConflict {
                path: conflict.path.clone(),
                kind: kind_word(conflict),
                lines: conflict.hunks.iter().map(|h| h.line).collect(),
                evidence_id: version,
            });
        }
        Ok(merge)
    }

    /// Stores `data` whole as evidence of this task, and says its id.
    fn archive(
        &self,
        call_id: &str,
        from: &Role,
        data: &[u8],
        media_type: &str,
        detail: String,
    ) -> Result<String, TurnError> {
        let stored = self.task.engine.storage().put_evidence(
            NewEvidence {
                data,
                media_type,
                source: Source {
                    task_id: self.task.task_id.clone(),
                    role: from.clone(),
                    tool: Producer::Patch,
                    call_id: Some(call_id.to_string()),
                    detail: Some(detail),
                },
                complete: true,
                incomplete_reason: None,
                created_at: &now_rfc3339(),
            },
            &self.task.workspace.root().join(EVIDENCE_FOLDER),
        )?;
        Ok(match stored {
            Stored::InStore(meta) => meta.id,
            Stored::Fallback { path, .. } => path.display().to_string(),
        })
    }
}

/// A conflict's kind, as `delegation_returned` spells it.
fn kind_word(conflict: &Conflict) -> String {
    serde_json::to_value(conflict.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// One conflict told to the lead: the file, why, its hunks, and where the teammate's version is.
fn tell(conflict: &Conflict, version: Option<&str>) -> String {
    let mut out = conflict.describe();
    if let Some(id) = version {
        out.push_str(&format!(" The teammate's whole version is evidence {id}."));
    }
    out
}
