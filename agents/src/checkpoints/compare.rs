//! [`compare`]: the files that differ between two checkpoints; [`unified`]: the same as a diff.

use super::error::CheckpointError;
use super::objects::{sha256_hex, Objects};
use super::tree::{decode, Entry};
use crate::copies::unified::{file_section, Side};
use agentd_protocol::checkpoint::{FileDelta, FileState};
use std::cmp::Ordering;

/// The files that differ between the checkpoints `before` (none: an empty tree) and `after`, sorted
/// by path. A directory whose object is the same on both sides is not read.
pub fn compare<O: Objects>(
    objects: &O,
    before: Option<&str>,
    after: &str,
) -> Result<Vec<FileDelta>, CheckpointError<O::Error>> {
    let mut out = Vec::new();
    if before != Some(after) {
        pair(objects, "", before, Some(after), &mut out)?;
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The listing of directory object `id`.
fn listing<O: Objects>(objects: &O, id: &str) -> Result<Vec<Entry>, CheckpointError<O::Error>> {
    let bytes = object(objects, id)?;
    decode(&bytes).map_err(|why| CheckpointError::Corrupt { id: id.to_string(), why })
}

/// The bytes of object `id`, checked against its name.
pub(super) fn object<O: Objects>(objects: &O, id: &str) -> Result<Vec<u8>, CheckpointError<O::Error>> {
    let bytes = objects.get(id).map_err(CheckpointError::Store)?;
    let actual = sha256_hex(&bytes);
    if actual != id {
        return Err(CheckpointError::Corrupt {
            id: id.to_string(),
            why: format!("its bytes hash to {actual}"),
        });
    }
    Ok(bytes)
}

/// Compares two directories (either may be absent) at `prefix`.
fn pair<O: Objects>(
    objects: &O,
    prefix: &str,
    before: Option<&str>,
    after: Option<&str>,
    out: &mut Vec<FileDelta>,
) -> Result<(), CheckpointError<O::Error>> {
    let olds = match before {
        Some(id) => listing(objects, id)?,
        None => Vec::new(),
    };
    let news = match after {
        Some(id) => listing(objects, id)?,
        None => Vec::new(),
    };
    let (mut i, mut j) = (0, 0);
    while i < olds.len() || j < news.len() {
        let order = match (olds.get(i), news.get(j)) {
            (Some(o), Some(n)) => o.name.cmp(&n.name),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        let (old, new) = match order {
            Ordering::Less => {
                i += 1;
                (olds.get(i - 1), None)
            }
            Ordering::Greater => {
                j += 1;
                (None, news.get(j - 1))
            }
            Ordering::Equal => {
                i += 1;
                j += 1;
                (olds.get(i - 1), news.get(j - 1))
            }
        };
        let name = old.or(new).map(|e| e.name.as_str()).unwrap_or_default();
        let path = if prefix.is_empty() { name.to_string() } else { format!("{prefix}/{name}") };
        if let (Some(o), Some(n)) = (old, new) {
            if o.state == n.state {
                continue;
            }
        }
        fn dir(e: Option<&Entry>) -> Option<&str> {
            e.filter(|e| e.is_dir()).map(|e| e.state.sha256.as_str())
        }
        let file = |e: Option<&Entry>| e.filter(|e| !e.is_dir()).map(|e| e.state.clone());
        if dir(old).is_some() || dir(new).is_some() {
            pair(objects, &path, dir(old), dir(new), out)?;
        }
        let (fo, fnew) = (file(old), file(new));
        if fo.is_some() || fnew.is_some() {
            if let (Some(a), Some(b)) = (&fo, &fnew) {
                if a.same(b) {
                    continue;
                }
            }
            out.push(FileDelta { path, before: fo, after: fnew });
        }
    }
    Ok(())
}

/// The bytes of a file's state (`None`: absent, no bytes).
fn content<O: Objects>(
    objects: &O,
    path: &str,
    state: Option<&FileState>,
) -> Result<Option<Vec<u8>>, CheckpointError<O::Error>> {
    match state {
        None => Ok(None),
        Some(s) if s.unkept => Err(CheckpointError::NotKept { path: path.to_string() }),
        Some(s) => object(objects, &s.sha256).map(Some),
    }
}

/// What a file's change does to its lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lines {
    /// Lines added.
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
    /// Whether either side is binary (or its bytes were not kept): its lines are not counted.
    pub binary: bool,
}

/// Lines added and removed by `delta`, and whether it is binary. A file whose bytes were not kept
/// counts as binary.
pub fn lines_changed<O: Objects>(objects: &O, delta: &FileDelta) -> Result<Lines, CheckpointError<O::Error>> {
    let mut sink = String::new();
    section(objects, delta, &mut sink)
}

/// Appends `delta`'s section of a unified diff to `out`: its counts.
fn section<O: Objects>(
    objects: &O,
    delta: &FileDelta,
    out: &mut String,
) -> Result<Lines, CheckpointError<O::Error>> {
    let special = [&delta.before, &delta.after].into_iter().flatten().find_map(FileState::special);
    if let Some(what) = special {
        let path = &delta.path;
        out.push_str(&format!(
            "diff --git a/{path} b/{path}\n{} {what}: a checkpoint records its name, not its content\n",
            delta.change()
        ));
        return Ok(Lines { added: 0, removed: 0, binary: true });
    }
    let unkept = [&delta.before, &delta.after].iter().any(|s| s.as_ref().is_some_and(|s| s.unkept));
    if unkept {
        let path = &delta.path;
        out.push_str(&format!("diff --git a/{path} b/{path}\nBinary files differ (bytes not kept)\n"));
        return Ok(Lines { added: 0, removed: 0, binary: true });
    }
    let old = content(objects, &delta.path, delta.before.as_ref())?;
    let new = content(objects, &delta.path, delta.after.as_ref())?;
    let side = |state: &Option<FileState>, bytes: &Option<Vec<u8>>| match (state, bytes) {
        (Some(s), Some(b)) => Some((s.mode, b.clone())),
        _ => None,
    };
    let (old, new) = (side(&delta.before, &old), side(&delta.after, &new));
    let counted = file_section(
        out,
        &delta.path,
        &delta.path,
        old.as_ref().map(|(mode, bytes)| Side { mode: *mode, bytes }),
        new.as_ref().map(|(mode, bytes)| Side { mode: *mode, bytes }),
    );
    Ok(Lines { added: counted.added, removed: counted.removed, binary: counted.binary })
}

/// The unified diff of `deltas` (as git writes it), with each file's counts in order.
pub fn unified<O: Objects>(
    objects: &O,
    deltas: &[FileDelta],
) -> Result<(String, Vec<Lines>), CheckpointError<O::Error>> {
    let mut out = String::new();
    let mut counts = Vec::with_capacity(deltas.len());
    for delta in deltas {
        counts.push(section(objects, delta, &mut out)?);
    }
    Ok((out, counts))
}
