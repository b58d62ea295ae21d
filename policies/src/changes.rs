//! What a task changed in its workspace, and what taking it back puts where: pure folds over the
//! task's recorded changes (its `files_changed` and `reverted` events, see
//! `agentd_protocol::checkpoint`).
//!
//! A change is a [`Step`]: the files one call (a merge, a revert) changed, each from a state to a
//! state. Steps are taken in the order they were recorded. A step is known by its `call_seq`: the
//! `seq` of its call's `tool_called` (a merge's: its `delegate` call's; a revert's: its own event's).
//!
//! - [`compose`]: each file the steps changed, from its state before the first of them to its state
//!   after the last — what `agentd diff` shows.
//! - [`plan`]: what a revert puts back. `--to SEQ`: every file the workspace's steps after SEQ
//!   changed, put back as their first step found it — so a change the user made between two calls is
//!   theirs and stays. `--call SEQ`: that step's files, unless a later step changed one of them too.
//!   Each [`Restore`] names what the file should be now (what the last step left): a file that is
//!   something else was changed by the user since, which the revert refuses without `--force`.

use agentd_protocol::checkpoint::{FileDelta, FileState};
use agentd_protocol::Role;
use std::collections::BTreeMap;

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The `seq` that names it: its call's `tool_called` (a merge's `delegate`), or the revert's own.
    pub call_seq: u64,
    /// Who made it.
    pub role: Role,
    /// The files it changed.
    pub files: Vec<FileDelta>,
    /// Whether it was made in a working copy (the workspace has it only after the merge).
    pub in_copy: bool,
}

/// A file as a run of steps changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composed {
    /// From its state before the first step to its state after the last.
    pub delta: FileDelta,
    /// The `call_seq`s of the steps that changed it, in order.
    pub seqs: Vec<u64>,
}

/// Each file `steps` changed, from before the first to after the last, sorted by path; a file they
/// changed and then put back as it was is left out.
pub fn compose<'a>(steps: impl IntoIterator<Item = &'a Step>) -> Vec<Composed> {
    let mut files: BTreeMap<&str, Composed> = BTreeMap::new();
    for step in steps {
        for delta in &step.files {
            let entry = files.entry(delta.path.as_str()).or_insert_with(|| Composed {
                delta: FileDelta { path: delta.path.clone(), before: delta.before.clone(), after: None },
                seqs: Vec::new(),
            });
            entry.delta.after = delta.after.clone();
            if entry.seqs.last() != Some(&step.call_seq) {
                entry.seqs.push(step.call_seq);
            }
        }
    }
    files.into_values().filter(|c| !same(c.delta.before.as_ref(), c.delta.after.as_ref())).collect()
}

/// Whether two states are the same file (both absent included).
pub fn same(a: Option<&FileState>, b: Option<&FileState>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.same(b),
        _ => false,
    }
}

/// What a revert takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every change of the workspace after the one whose `call_seq` is this.
    To(u64),
    /// The change whose `call_seq` is this.
    Call(u64),
}

/// One file a revert puts back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    /// The file.
    pub path: String,
    /// What it is put back as; `None`: removed.
    pub target: Option<FileState>,
    /// What it should be now, as the task last left it; anything else is the user's change.
    pub expected: Option<FileState>,
}

/// Why a revert cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No change of the workspace is recorded under this `seq`.
    #[error("no change of the workspace is recorded for call {0}; `agentd diff TASK --stat` lists the changes with their seqs")]
    NoChange(u64),
    /// The change was made in a working copy; its merge is what reached the workspace.
    #[error("call {0} changed a working copy, not the workspace: revert its delegation's merge (the `delegate` call's seq) instead")]
    InCopy(u64),
    /// Later changes touched files of the call: taking it back alone would undo them too.
    #[error("later changes touched the same files: {}; revert --to the call before instead", show(.0))]
    Later(Vec<(String, Vec<u64>)>),
}

fn show(later: &[(String, Vec<u64>)]) -> String {
    later
        .iter()
        .map(|(path, seqs)| {
            let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
            format!("{path} (by {})", seqs.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The files a revert of `target` puts back, over the task's `steps` in recorded order; only the
/// workspace's steps count (a working copy's reach it through their merge).
pub fn plan(steps: &[Step], target: Target) -> Result<Vec<Restore>, PlanError> {
    let main: Vec<&Step> = steps.iter().filter(|s| !s.in_copy).collect();
    let restores = |run: &[&Step]| -> Vec<Restore> {
        compose(run.iter().copied())
            .into_iter()
            .map(|c| Restore { path: c.delta.path, target: c.delta.before, expected: c.delta.after })
            .collect()
    };
    match target {
        Target::To(seq) => {
            let run: Vec<&Step> = main.into_iter().filter(|s| s.call_seq > seq).collect();
            Ok(restores(&run))
        }
        Target::Call(seq) => {
            let Some(at) = main.iter().position(|s| s.call_seq == seq) else {
                return Err(match steps.iter().any(|s| s.call_seq == seq) {
                    true => PlanError::InCopy(seq),
                    false => PlanError::NoChange(seq),
                });
            };
            let run: Vec<&Step> = main[at..].iter().copied().filter(|s| s.call_seq == seq).collect();
            let later: Vec<&Step> = main[at..].iter().copied().filter(|s| s.call_seq != seq).collect();
            let mut blocked = Vec::new();
            for file in run.iter().flat_map(|s| &s.files) {
                let by: Vec<u64> = later
                    .iter()
                    .filter(|s| s.files.iter().any(|f| f.path == file.path))
                    .map(|s| s.call_seq)
                    .collect();
                if !by.is_empty() && !blocked.iter().any(|(p, _)| *p == file.path) {
                    blocked.push((file.path.clone(), by));
                }
            }
            if !blocked.is_empty() {
                return Err(PlanError::Later(blocked));
            }
            Ok(restores(&run))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(n: u8) -> FileState {
        FileState { mode: 0o100644, sha256: format!("{n:064x}"), unkept: false }
    }

    fn step(call_seq: u64, files: &[(&str, Option<u8>, Option<u8>)]) -> Step {
        Step {
            call_seq,
            role: Role::Coder,
            files: files
                .iter()
                .map(|(p, b, a)| FileDelta { path: p.to_string(), before: b.map(state), after: a.map(state) })
                .collect(),
            in_copy: false,
        }
    }

    #[test]
    fn a_revert_to_puts_back_what_the_first_later_step_found_and_expects_what_the_last_left() {
        let steps = [
            step(3, &[("a", Some(1), Some(2))]),
            step(5, &[("a", Some(2), Some(3)), ("b", None, Some(1))]),
            // The user changed `a` between the calls: the next call found 4, not 3.
            step(8, &[("a", Some(4), Some(5)), ("c", Some(1), None)]),
        ];
        let plan = plan(&steps, Target::To(3)).unwrap();
        assert_eq!(
            plan,
            [
                Restore { path: "a".into(), target: Some(state(2)), expected: Some(state(5)) },
                Restore { path: "b".into(), target: None, expected: Some(state(1)) },
                Restore { path: "c".into(), target: Some(state(1)), expected: None },
            ]
        );
    }

    #[test]
    fn a_call_is_taken_back_alone_only_when_no_later_step_touched_its_files() {
        let steps = [
            step(3, &[("a", Some(1), Some(2))]),
            step(5, &[("b", None, Some(1))]),
            step(8, &[("a", Some(2), Some(3))]),
        ];
        assert_eq!(
            plan(&steps, Target::Call(5)).unwrap(),
            [Restore { path: "b".into(), target: None, expected: Some(state(1)) }]
        );
        let refused = plan(&steps, Target::Call(3)).unwrap_err();
        assert_eq!(refused, PlanError::Later(vec![("a".into(), vec![8])]));
        assert!(refused.to_string().contains("a (by 8)"), "{refused}");
        assert_eq!(plan(&steps, Target::Call(4)).unwrap_err(), PlanError::NoChange(4));
        let mut copy = step(9, &[("d", None, Some(1))]);
        copy.in_copy = true;
        assert_eq!(plan(&[copy], Target::Call(9)).unwrap_err(), PlanError::InCopy(9));
    }

    proptest! {
        /// Replaying the steps over the starting files, then the revert's restores, gives back the
        /// files as they were after the kept steps — for any run of steps that chain (each finds
        /// what the one before left).
        #[test]
        fn a_revert_to_leaves_the_files_as_the_kept_steps_left_them(
            changes in proptest::collection::vec((0usize..4, proptest::option::of(0u8..5)), 1..20),
            cut in 0u64..20,
        ) {
            let paths = ["a", "b", "c", "d"];
            let mut files: BTreeMap<&str, Option<u8>> = paths.iter().map(|p| (*p, None)).collect();
            let mut steps = Vec::new();
            let mut kept = files.clone();
            for (i, (p, after)) in changes.into_iter().enumerate() {
                let path = paths[p];
                let before = files[path];
                if before == after {
                    continue;
                }
                let seq = i as u64 + 1;
                steps.push(step(seq, &[(path, before, after)]));
                files.insert(path, after);
                if seq <= cut {
                    kept = files.clone();
                }
            }
            let mut now: BTreeMap<&str, Option<FileState>> =
                files.iter().map(|(p, s)| (*p, s.map(state))).collect();
            for r in plan(&steps, Target::To(cut)).unwrap() {
                prop_assert!(same(now[r.path.as_str()].as_ref(), r.expected.as_ref()));
                now.insert(paths.iter().find(|p| **p == r.path).unwrap(), r.target);
            }
            let want: BTreeMap<&str, Option<FileState>> = kept.iter().map(|(p, s)| (*p, s.map(state))).collect();
            prop_assert_eq!(now, want);
        }
    }
}
