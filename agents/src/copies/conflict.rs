//! A file a merge could not take from a copy ([`Conflict`]), and how to tell it.

use serde::{Deserialize, Serialize};
use similar::{TextDiff, TextMerge};
use std::fmt::Write as _;

/// A file of the copy that was not merged: the workspace's file was left exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// The file's path, relative to the workspace.
    pub path: String,
    /// Why it could not be merged.
    pub kind: ConflictKind,
    /// Where the two versions differ, when both are text (none otherwise).
    pub hunks: Vec<ConflictHunk>,
}

/// Why a file could not be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictKind {
    /// The workspace and the copy both changed it since the copy was made: the same lines (or lines
    /// next to each other), or in a way lines cannot merge (its mode both ways, a symlink, a directory
    /// or a special file now in its place).
    BothChanged,
    /// The workspace changed it since the copy was made, and the copy deleted it.
    ChangedHereDeletedThere,
    /// The workspace deleted it since the copy was made, and the copy changed it.
    DeletedHereChangedThere,
    /// The workspace and the copy both created it, with different contents.
    BothAdded,
    /// Both changed it, and it is binary (a NUL byte, or not UTF-8): lines cannot be merged.
    Binary,
}

/// One region where the two versions of a conflicting file differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictHunk {
    /// The 1-based first line of the region in the workspace's file as it stands (for a region the
    /// workspace has no lines of, the line before which the copy's would go).
    pub line: u64,
    /// The workspace's lines of the region (empty when it has none there).
    pub workspace: String,
    /// The copy's lines for it (empty when it has none: it deleted them, or the file).
    pub copy: String,
}

impl Conflict {
    /// One readable paragraph for the lead (or a person): the file, why it was not merged, and each
    /// hunk with its line and both sides' text.
    pub fn describe(&self) -> String {
        let why = match self.kind {
            ConflictKind::BothChanged if self.hunks.is_empty() => {
                "the workspace and the copy both changed it since the copy was made, in ways lines cannot \
                 merge (its mode both ways, or a symlink, a directory or a special file in its place)"
            }
            ConflictKind::BothChanged => {
                "the workspace and the copy both changed the same lines (or lines next to each other) \
                 since the copy was made"
            }
            ConflictKind::ChangedHereDeletedThere => {
                "the workspace changed it since the copy was made, and the copy deleted it"
            }
            ConflictKind::DeletedHereChangedThere => {
                "the workspace deleted it since the copy was made, and the copy changed it"
            }
            ConflictKind::BothAdded => "the workspace and the copy both created it, with different contents",
            ConflictKind::Binary => {
                "the workspace and the copy both changed it since the copy was made, and it is binary, so \
                 lines cannot be merged"
            }
        };
        let mut text = format!(
            "{}: not merged: {why}. The workspace's file was left as it is; the copy's version is still in \
             the copy.",
            self.path
        );
        for hunk in &self.hunks {
            let _ = write!(
                text,
                "\n  At line {}, the workspace has:\n{}  where the copy has:\n{}",
                hunk.line,
                indented(&hunk.workspace),
                indented(&hunk.copy)
            );
        }
        text
    }
}

/// `lines`, each indented, ending with a line break; `(nothing)` for none.
fn indented(lines: &str) -> String {
    if lines.is_empty() {
        return "    (nothing)\n".to_string();
    }
    lines.lines().map(|line| format!("    {line}\n")).collect()
}

/// The conflicting regions of a three-way merge whose `ours` is the workspace and `theirs` the copy.
pub(super) fn merge_hunks(merge: &TextMerge<'_, '_, '_, str>) -> Vec<ConflictHunk> {
    merge
        .conflicts()
        .map(|region| ConflictHunk {
            line: region.ours_range().start as u64 + 1,
            workspace: region.ours_range().filter_map(|i| merge.ours_line(i)).collect(),
            copy: region.theirs_range().filter_map(|i| merge.theirs_line(i)).collect(),
        })
        .collect()
}

/// The regions where `workspace` and `other` differ, line by line; each hunk's copy text is
/// `other`'s lines when `other_is_copy`, nothing otherwise (`other` is then the base, and the copy
/// has no file).
pub(super) fn diff_hunks(workspace: &str, other: &str, other_is_copy: bool) -> Vec<ConflictHunk> {
    let diff = TextDiff::from_lines(workspace, other);
    diff.grouped_ops(0)
        .iter()
        .filter_map(|group| {
            let (first, last) = (group.first()?, group.last()?);
            let w = first.old_range().start..last.old_range().end;
            let o = first.new_range().start..last.new_range().end;
            Some(ConflictHunk {
                line: w.start as u64 + 1,
                workspace: w.filter_map(|i| diff.old_slice(i)).collect(),
                copy: if other_is_copy {
                    o.filter_map(|i| diff.new_slice(i)).collect()
                } else {
                    String::new()
                },
            })
        })
        .collect()
}
