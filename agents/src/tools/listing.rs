//! The finding tools: `list_dir` (one directory, not recursive) and `search` (a plain substring,
//! recursive). Blocking; the dispatcher runs them on the blocking pool.

use super::args::Args;
use super::ToolOutcome;
use crate::error::ToolError;
use crate::text::truncate_chars;
use crate::workspace::Workspace;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Entries shown by `list_dir` before the rest are counted instead.
pub(crate) const MAX_ENTRIES: usize = 1000;
/// Matches shown by `search` before the rest are counted instead.
pub(crate) const MAX_MATCHES: usize = 200;
/// Files larger than this are not searched.
pub(crate) const MAX_SEARCH_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// Characters of a matching line shown.
const MAX_LINE_CHARS: usize = 300;
/// Directories `search` does not descend into.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];
/// A NUL byte in this many leading bytes marks a file as binary.
const BINARY_SNIFF_BYTES: usize = 8192;

pub(crate) fn list_dir(ws: &Workspace, args: &Args) -> Result<ToolOutcome, ToolError> {
    let path = args.str("path")?;
    let abs = ws.resolve(path)?;
    if !abs.is_dir() {
        return Err(ToolError::Failed(format!("{path} is not a directory; use read_file")));
    }
    let mut entries = Vec::new();
    for entry in fs::read_dir(&abs).map_err(|e| ToolError::io(path, &e))? {
        let entry = entry.map_err(|e| ToolError::io(path, &e))?;
        let mut name = entry.file_name().to_string_lossy().into_owned();
        // Follows symlinks, so a link to a directory is shown as one.
        if fs::metadata(entry.path()).map(|m| m.is_dir()).unwrap_or(false) {
            name.push('/');
        }
        entries.push(name);
    }
    if entries.is_empty() {
        return Ok(ToolOutcome::ok(format!("{path} is empty")));
    }
    entries.sort();
    let more = entries.len().saturating_sub(MAX_ENTRIES);
    entries.truncate(MAX_ENTRIES);
    let mut content = entries.join("\n");
    if more > 0 {
        content.push_str(&format!("\n... {more} more entries not shown"));
    }
    Ok(ToolOutcome::ok(content))
}

pub(crate) fn search(ws: &Workspace, args: &Args) -> Result<ToolOutcome, ToolError> {
    let pattern = args.str("pattern")?;
    if pattern.is_empty() {
        return Err(ToolError::InvalidArguments {
            tool: "search".into(),
            message: "`pattern` must not be empty".into(),
        });
    }
    let path = args.opt_str("path")?.unwrap_or(".");
    let abs = ws.resolve(path)?;
    let mut shown = Vec::new();
    let mut total = 0usize;
    for file in files_under(&abs) {
        let Some(text) = searchable_text(&file) else {
            continue;
        };
        let rel = ws.display_relative(&file);
        for (i, line) in text.lines().enumerate() {
            if line.contains(pattern) {
                total += 1;
                if shown.len() < MAX_MATCHES {
                    shown.push(format!(
                        "{rel}:{}: {}",
                        i + 1,
                        truncate_chars(line.trim_end(), MAX_LINE_CHARS)
                    ));
                }
            }
        }
    }
    if total == 0 {
        return Ok(ToolOutcome::ok(format!("no matches for {pattern:?} in {path}")));
    }
    let mut content = shown.join("\n");
    if total > shown.len() {
        content.push_str(&format!("\n... {} more matches not shown", total - shown.len()));
    }
    Ok(ToolOutcome::ok(content))
}

/// The regular files at or under `root`, in sorted order. Symlinks are not followed (no cycles, no
/// way out), and `SKIPPED_DIRS` below the root are not entered. Unreadable directories are skipped.
fn files_under(root: &Path) -> Vec<PathBuf> {
    if root.is_file() {
        return vec![root.to_path_buf()];
    }
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = read.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let name = entry.file_name();
                if !SKIPPED_DIRS.iter().any(|s| name == *s) {
                    subdirs.push(entry.path());
                }
            } else if kind.is_file() {
                files.push(entry.path());
            }
        }
        // Reversed so the stack pops them in sorted order.
        stack.extend(subdirs.into_iter().rev());
    }
    files
}

/// The file's text, or `None` when it is too large, unreadable or binary (a NUL byte near the start).
fn searchable_text(file: &Path) -> Option<String> {
    let meta = fs::metadata(file).ok()?;
    if meta.len() > MAX_SEARCH_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    fs::File::open(file).ok()?.take(MAX_SEARCH_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
