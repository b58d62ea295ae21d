//! The file tools: `read_file`, `write_file`, `edit_file`. Blocking; the dispatcher runs them on the
//! blocking pool. Every file is opened beneath the workspace's root descriptor with no-follow
//! semantics ([`crate::workspace`]); writes replace the file atomically.

use super::context::ToolContext;
use super::outcome::ToolOutcome;
use crate::error::ToolError;
use agentd_policies::args::Args;
use agentd_protocol::ToolName;
use rustix::fs::FileType;
use std::fs;
use std::io::{BufRead, BufReader, Read};

/// `read_file`'s arguments, checked: `offset` is 1-based (at least 1), `limit` at least 1.
#[derive(Debug)]
pub(crate) struct ReadArgs<'a> {
    pub(crate) path: &'a str,
    pub(crate) offset: u64,
    pub(crate) limit: Option<u64>,
}

impl<'a> ReadArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<ReadArgs<'a>, ToolError> {
        let path = args.str("path")?;
        let offset = args.opt_u64("offset")?.unwrap_or(1).max(1);
        let limit = args.opt_u64("limit")?;
        if limit == Some(0) {
            return Err(ToolError::InvalidArguments {
                tool: ToolName::ReadFile.into(),
                message: "`limit` must be at least 1".into(),
            });
        }
        Ok(ReadArgs { path, offset, limit })
    }
}

/// `write_file`'s arguments.
#[derive(Debug)]
pub(crate) struct WriteArgs<'a> {
    pub(crate) path: &'a str,
    pub(crate) content: &'a str,
}

impl<'a> WriteArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<WriteArgs<'a>, ToolError> {
        Ok(WriteArgs { path: args.str("path")?, content: args.str("content")? })
    }
}

/// `edit_file`'s arguments, checked: `old_text` is not empty.
#[derive(Debug)]
pub(crate) struct EditArgs<'a> {
    pub(crate) path: &'a str,
    pub(crate) old_text: &'a str,
    pub(crate) new_text: &'a str,
}

impl<'a> EditArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<EditArgs<'a>, ToolError> {
        let path = args.str("path")?;
        let old_text = args.str("old_text")?;
        let new_text = args.str("new_text")?;
        if old_text.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: ToolName::EditFile.into(),
                message: "`old_text` must not be empty".into(),
            });
        }
        Ok(EditArgs { path, old_text, new_text })
    }
}

/// The file's text, or the lines `offset..offset+limit` (1-based) of it, as it is: no line numbers.
/// At most `ctx.max_output_bytes` are returned; a longer result is cut (at a line end when there is
/// one) and marked incomplete. Invalid UTF-8 is replaced, with a note.
pub(crate) fn read_file(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let ReadArgs { path, offset, limit } = ReadArgs::parse(args)?;
    let opened = ctx.workspace.open(path)?;
    match opened.kind() {
        FileType::RegularFile => {}
        FileType::Directory => return Err(ToolError::Failed(format!("{path} is a directory; use list_dir"))),
        _ => return Err(ToolError::Failed(format!("{path} is not a regular file"))),
    }
    let file = fs::File::from(opened.fd);
    let lines = read_lines(BufReader::new(file), offset, limit, ctx.max_output_bytes)
        .map_err(|e| ToolError::io(path, &e))?;
    if lines.ended_before_offset && offset > 1 {
        return Err(ToolError::Failed(format!(
            "offset {offset} is past the end of {path} ({} lines)",
            lines.total_lines
        )));
    }
    let mut bytes = lines.bytes;
    if lines.cut {
        trim_to_char_boundary(&mut bytes);
    }
    let mut content = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let mut text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            text.push_str(&format!(
                "\n[note: {path} is not valid UTF-8; invalid bytes were replaced with U+FFFD]"
            ));
            text
        }
    };
    if lines.cut {
        content.push_str(&format!(
            "\n[output cut at {} bytes; read the rest with offset/limit]",
            ctx.max_output_bytes
        ));
    }
    if content.is_empty() && !lines.cut {
        content = "[empty file]".to_string();
    }
    Ok(ToolOutcome { complete: !lines.cut, ..ToolOutcome::ok(content) })
}

struct Lines {
    bytes: Vec<u8>,
    /// The output hit the byte cap.
    cut: bool,
    /// The file ended before line `offset`; `total_lines` is then the file's line count.
    ended_before_offset: bool,
    total_lines: u64,
}

/// Streams the reader, keeping lines `offset..offset+limit` and at most `cap` bytes, without ever
/// holding more than one buffer of a line that is skipped or too long.
fn read_lines(
    mut reader: impl BufRead,
    offset: u64,
    limit: Option<u64>,
    cap: usize,
) -> std::io::Result<Lines> {
    let mut out = Vec::new();
    let mut line = 1u64; // the line the next byte belongs to
    let mut taken = 0u64;
    let mut at_line_start = true;
    let mut cut = false;
    'read: loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        let mut i = 0;
        while i < chunk.len() {
            if line >= offset && limit.is_some_and(|l| taken >= l) {
                break 'read;
            }
            let newline = chunk[i..].iter().position(|&b| b == b'\n').map(|p| i + p + 1);
            let end = newline.unwrap_or(chunk.len());
            if line >= offset {
                let segment = &chunk[i..end];
                let room = cap - out.len();
                if segment.len() > room {
                    out.extend_from_slice(&segment[..room]);
                    cut = true;
                    break 'read;
                }
                out.extend_from_slice(segment);
            }
            at_line_start = newline.is_some();
            if newline.is_some() {
                if line >= offset {
                    taken += 1;
                }
                line += 1;
            }
            i = end;
        }
        let consumed = chunk.len();
        reader.consume(consumed);
    }
    let total_lines = if at_line_start { line - 1 } else { line };
    Ok(Lines { bytes: out, cut, ended_before_offset: !cut && total_lines < offset, total_lines })
}

/// After a cut: back to the last line end when there is one, else drop a split trailing character.
fn trim_to_char_boundary(bytes: &mut Vec<u8>) {
    if let Some(last_newline) = bytes.iter().rposition(|&b| b == b'\n') {
        bytes.truncate(last_newline + 1);
        return;
    }
    if let Err(e) = std::str::from_utf8(bytes) {
        if e.error_len().is_none() {
            bytes.truncate(e.valid_up_to());
        }
    }
}

pub(crate) fn write_file(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let WriteArgs { path, content } = WriteArgs::parse(args)?;
    let existed = ctx.workspace.write_atomic(path, content.as_bytes(), false)?;
    let verb = if existed { "replaced" } else { "created" };
    Ok(ToolOutcome::ok(format!("{verb} {path}: wrote {} bytes", content.len())))
}

pub(crate) fn edit_file(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let EditArgs { path, old_text, new_text } = EditArgs::parse(args)?;
    let opened = ctx.workspace.open(path)?;
    match opened.kind() {
        FileType::RegularFile => {}
        FileType::Directory => return Err(ToolError::Failed(format!("{path} is a directory"))),
        _ => return Err(ToolError::Failed(format!("{path} is not a regular file"))),
    }
    let mut bytes = Vec::new();
    fs::File::from(opened.fd).read_to_end(&mut bytes).map_err(|e| ToolError::io(path, &e))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        ToolError::Failed(format!("{path} is not valid UTF-8 text; edit_file cannot change it"))
    })?;
    let at = match text.match_indices(old_text).map(|(i, _)| i).collect::<Vec<_>>().as_slice() {
        [] => return Err(ToolError::Failed(format!("old_text not found in {path}"))),
        [at] => *at,
        many => {
            return Err(ToolError::Failed(format!(
                "old_text occurs {} times in {path}; make it unique",
                many.len()
            )))
        }
    };
    let line = text[..at].matches('\n').count() + 1;
    let mut edited = String::with_capacity(text.len() - old_text.len() + new_text.len());
    edited.push_str(&text[..at]);
    edited.push_str(new_text);
    edited.push_str(&text[at + old_text.len()..]);
    ctx.workspace.write_atomic(path, edited.as_bytes(), true)?;
    Ok(ToolOutcome::ok(format!("edited {path}: replaced 1 occurrence at line {line}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str, offset: u64, limit: Option<u64>, cap: usize) -> (String, bool, bool, u64) {
        let l = read_lines(BufReader::with_capacity(4, text.as_bytes()), offset, limit, cap).unwrap();
        (String::from_utf8(l.bytes).unwrap(), l.cut, l.ended_before_offset, l.total_lines)
    }

    #[test]
    fn line_ranges() {
        let t = "one\ntwo\nthree\nfour";
        assert_eq!(lines(t, 1, None, 100).0, t);
        assert_eq!(lines(t, 2, Some(2), 100).0, "two\nthree\n");
        assert_eq!(lines(t, 4, Some(9), 100).0, "four");
        let (text, cut, past, total) = lines(t, 6, None, 100);
        assert_eq!((text.as_str(), cut, past, total), ("", false, true, 4));
        let (text, cut, ..) = lines(t, 1, None, 6);
        assert_eq!((text.as_str(), cut), ("one\ntw", true));
        assert_eq!(lines("a\n", 1, None, 100).3, 1);
        assert!(!lines("a\n", 1, None, 100).2);
    }
}
