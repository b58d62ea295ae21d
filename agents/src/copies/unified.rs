//! The unified diff of a patch, as git writes it, for `git apply` and for people.
//!
//! Each file is a `diff --git a/P b/P` section: `new file mode`/`deleted file mode`, `old mode`/`new
//! mode`, `similarity index 100%` with `rename from`/`rename to`, then either `Binary files … differ`
//! or `--- a/P` / `+++ b/P` (`/dev/null` for a side that is absent) and the hunks, with 3 lines of
//! context and `\ No newline at end of file` where a side's last line has none. A symlink is a file
//! of mode `120000` whose content is its target. A change of kind (a file become a symlink) is, as in
//! git, a deletion followed by an addition. Names are quoted as git quotes them (C-style, within
//! double quotes) when they hold a quote, a backslash, a control character or a non-ASCII byte.
//!
//! Git knows two modes of a regular file, `100644` and `100755` (any owner-execute bit): a change of
//! permission bits that leaves the git mode as it was (`0644` to `0600`) is in the patch's file list
//! but writes nothing here, as `git diff` shows nothing for it.

use similar::{ChangeTag, TextDiff};
use std::fmt::Write as _;
use std::time::Duration;

/// Lines of context around a hunk.
const CONTEXT: usize = 3;
/// How long a line diff of one file may search for the shortest diff before it settles for a longer
/// one (a file rewritten from end to end would otherwise cost the product of its lengths).
const DIFF_TIMEOUT: Duration = Duration::from_secs(2);
/// The file-type bits of a mode, and the type of a symlink.
pub(crate) const TYPE_MASK: u32 = 0o170000;
/// A symlink's mode, as git writes it.
pub(crate) const SYMLINK: u32 = 0o120000;
/// A regular file's type bits.
pub(crate) const REGULAR: u32 = 0o100000;

/// One side of a file's change: its mode (type and permission bits) and its content (a symlink's
/// target text for a symlink).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side<'a> {
    pub(crate) mode: u32,
    pub(crate) bytes: &'a [u8],
}

/// What a file's section counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) added: u64,
    pub(crate) removed: u64,
    pub(crate) binary: bool,
}

/// Whether `bytes` are text: UTF-8 without a NUL byte.
pub(crate) fn is_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

/// The mode git writes for `mode`: `120000` for a symlink, `100755` for a regular file any of whose
/// owner-execute bit is set, `100644` otherwise.
pub(crate) fn git_mode(mode: u32) -> u32 {
    if mode & TYPE_MASK == SYMLINK {
        SYMLINK
    } else if mode & 0o100 != 0 {
        0o100755
    } else {
        0o100644
    }
}

/// Appends the section of one file to `out`: `old` at `old_path` becoming `new` at `new_path` (a side
/// that is `None` is absent: an addition or a deletion). Returns the lines added and removed, and
/// whether the content is binary (a NUL byte or not UTF-8, on either side).
pub(crate) fn file_section(
    out: &mut String,
    old_path: &str,
    new_path: &str,
    old: Option<Side<'_>>,
    new: Option<Side<'_>>,
) -> Counted {
    // A change of kind is a deletion and an addition, as git writes it.
    if let (Some(o), Some(n)) = (old, new) {
        if o.mode & TYPE_MASK != n.mode & TYPE_MASK {
            let gone = file_section(out, old_path, old_path, old, None);
            let made = file_section(out, new_path, new_path, None, new);
            return Counted { added: made.added, removed: gone.removed, binary: gone.binary || made.binary };
        }
    }
    let binary = [old, new].iter().flatten().any(|side| !is_text(side.bytes));
    let same_content = matches!((old, new), (Some(o), Some(n)) if o.bytes == n.bytes);
    let mut head = String::new();
    match (old, new) {
        (None, Some(n)) => {
            let _ = writeln!(head, "new file mode {:o}", git_mode(n.mode));
        }
        (Some(o), None) => {
            let _ = writeln!(head, "deleted file mode {:o}", git_mode(o.mode));
        }
        (Some(o), Some(n)) => {
            if git_mode(o.mode) != git_mode(n.mode) {
                let _ = writeln!(head, "old mode {:o}\nnew mode {:o}", git_mode(o.mode), git_mode(n.mode));
            }
            if old_path != new_path {
                let _ = writeln!(
                    head,
                    "similarity index 100%\nrename from {}\nrename to {}",
                    quote(old_path),
                    quote(new_path)
                );
            }
        }
        (None, None) => {}
    }
    let empty = |side: Option<Side<'_>>| side.is_none_or(|s| s.bytes.is_empty());
    let mut counted = Counted { binary, ..Counted::default() };
    let mut body = String::new();
    let no_lines = same_content || (empty(old) && empty(new));
    if !no_lines {
        let a = if old.is_some() { quote(&format!("a/{old_path}")) } else { "/dev/null".to_string() };
        let b = if new.is_some() { quote(&format!("b/{new_path}")) } else { "/dev/null".to_string() };
        if binary {
            let _ = writeln!(body, "Binary files {a} and {b} differ");
        } else {
            fn text<'a>(side: Option<Side<'a>>) -> &'a str {
                side.map_or("", |s| std::str::from_utf8(s.bytes).unwrap_or_default())
            }
            let _ = writeln!(body, "--- {a}{}\n+++ {b}{}", tab_if_spaced(&a), tab_if_spaced(&b));
            let diff = TextDiff::configure().timeout(DIFF_TIMEOUT).diff_lines(text(old), text(new));
            let mut unified = diff.unified_diff();
            unified.context_radius(CONTEXT);
            for hunk in unified.iter_hunks() {
                for change in hunk.iter_changes() {
                    match change.tag() {
                        ChangeTag::Insert => counted.added += 1,
                        ChangeTag::Delete => counted.removed += 1,
                        ChangeTag::Equal => {}
                    }
                }
                let _ = write!(body, "{hunk}");
            }
        }
    }
    // A change git cannot see (permission bits within one git mode) writes no section.
    if !head.is_empty() || !body.is_empty() {
        let _ = writeln!(
            out,
            "diff --git {} {}",
            quote(&format!("a/{old_path}")),
            quote(&format!("b/{new_path}"))
        );
        out.push_str(&head);
        out.push_str(&body);
    }
    counted
}

/// Git ends a `---`/`+++` name that holds a space with a tab, so that `patch` reads it whole.
fn tab_if_spaced(name: &str) -> &'static str {
    if !name.starts_with('"') && name.contains(' ') {
        "\t"
    } else {
        ""
    }
}

/// `name` as git writes it in a patch: as it is, or C-quoted within double quotes when it holds a
/// double quote, a backslash, a control character or a non-ASCII byte.
pub(crate) fn quote(name: &str) -> String {
    let plain = |b: u8| b != b'"' && b != b'\\' && (0x20..0x7f).contains(&b);
    if name.bytes().all(plain) {
        return name.to_string();
    }
    let mut quoted = String::from("\"");
    for b in name.bytes() {
        match b {
            b'"' => quoted.push_str("\\\""),
            b'\\' => quoted.push_str("\\\\"),
            b'\t' => quoted.push_str("\\t"),
            b'\n' => quoted.push_str("\\n"),
            b'\r' => quoted.push_str("\\r"),
            0x07 => quoted.push_str("\\a"),
            0x08 => quoted.push_str("\\b"),
            0x0b => quoted.push_str("\\v"),
            0x0c => quoted.push_str("\\f"),
            b if plain(b) => quoted.push(char::from(b)),
            b => {
                let _ = write!(quoted, "\\{b:03o}");
            }
        }
    }
    quoted.push('"');
    quoted
}
