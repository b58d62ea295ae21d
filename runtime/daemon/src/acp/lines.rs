//! The editor's wire under `agentd acp`: stdin read as lines of bounded length before the ACP crate
//! sees them, and stdout written a whole line at a time.
//!
//! The crate (`agent-client-protocol`) reads stdin with `BufRead::lines`, which holds a line whole
//! however long it is, and ends the connection — the process — at the first line that is not UTF-8.
//! So stdin is read here instead, on a thread of its own, and what the crate gets is only lines that
//! are JSON:
//!
//! - a line longer than [`MAX_LINE`] (64 MiB) is not kept: its bytes are dropped as they come, up
//!   to the next newline, and it is answered `-32600` (`request line over 67108864 bytes`), with
//!   `data: {max_bytes, line_bytes}`;
//! - a line that is not UTF-8, or not JSON, is answered `-32700` (parse error), its id unknown
//!   (`null`), with `data.line` quoting at most its first [`QUOTED`] bytes (lossily where it is not
//!   UTF-8) and, when that is not the whole line, `data.line_bytes` and `data.cut_bytes` saying how
//!   much was left out;
//! - a blank line (spaces, a lone `\r`) is passed over; a line's trailing `\r` is dropped.
//!
//! After any of these the connection goes on with the next line. A line that is JSON goes to the
//! crate, which answers what it makes of it (an invalid request, an unknown method) as before.

use agentd_protocol::text::floor_boundary;
use futures_util::{Sink, Stream};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};

/// The longest line read from the editor, in bytes (its newline aside): 64 MiB, room for a prompt
/// well over what the daemon takes in one request (8 MiB), so that such a prompt gets the daemon's
/// refusal as its answer rather than an error with no id.
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// How much of a line that is not JSON its parse error quotes, in bytes.
pub const QUOTED: usize = 1024;

/// What one line of stdin is.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A line that is JSON, for the ACP crate.
    Json(String),
    /// A line that is refused: the error answer to write back.
    Refused(Value),
}

/// A JSON-RPC error answer to a line whose id could not be read.
fn error(code: i64, message: String, data: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message, "data": data}})
}

/// `data` of a parse error: the line quoted — at most its first [`QUOTED`] bytes, cut on a character
/// boundary when it is UTF-8, lossily where it is not — and, when that is not all of it, how long it
/// was and how much was left out.
fn quoted(bytes: &[u8], utf8: Option<&str>) -> Value {
    let cut = utf8.map_or(bytes.len().min(QUOTED), |text| floor_boundary(text, QUOTED));
    let line = String::from_utf8_lossy(&bytes[..cut]);
    if cut == bytes.len() {
        return json!({ "line": line });
    }
    json!({ "line": line, "line_bytes": bytes.len(), "cut_bytes": bytes.len() - cut })
}

/// What a whole line (read in full, at most [`MAX_LINE`] bytes) is; `None`: a blank line. A line
/// that is JSON is handed on as it was read, not copied.
fn judge(mut bytes: Vec<u8>) -> Option<Line> {
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let message = format!("Parse error: the line is not valid UTF-8 (at byte {at})");
            return Some(Line::Refused(error(-32700, message, quoted(e.as_bytes(), None))));
        }
    };
    match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
        Ok(_) => Some(Line::Json(text)),
        // serde_json's words for a syntax error say what and where, and never quote the input.
        Err(e) => Some(Line::Refused(error(
            -32700,
            format!("Parse error: the line is not JSON ({e})"),
            quoted(text.as_bytes(), Some(&text)),
        ))),
    }
}

/// The next line of `input`, at most `max` bytes of it held at once; `None` at the end of the input.
/// A line over `max` bytes is read to its end and dropped, and is a `-32600` answer.
pub fn next_line(input: &mut impl BufRead, max: usize) -> std::io::Result<Option<Line>> {
    loop {
        let mut line = Vec::new();
        let mut total = 0usize;
        let mut ended = false;
        loop {
            let buf = input.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let (piece, used) = match buf.iter().position(|b| *b == b'\n') {
                Some(at) => {
                    ended = true;
                    (&buf[..at], at + 1)
                }
                None => (buf, buf.len()),
            };
            total = total.saturating_add(piece.len());
            if total <= max {
                line.extend_from_slice(piece);
            } else if !line.is_empty() {
                // Over the bound: what was kept goes, and so does the rest, as it comes.
                line = Vec::new();
            }
            input.consume(used);
            if ended {
                break;
            }
        }
        if !ended && total == 0 {
            return Ok(None);
        }
        if total > max {
            let message = format!("request line over {max} bytes: {total} bytes were read and dropped");
            let data = json!({ "max_bytes": max, "line_bytes": total });
            return Ok(Some(Line::Refused(error(-32600, message, data))));
        }
        if let Some(judged) = judge(line) {
            return Ok(Some(judged));
        }
    }
}

/// Writes `line` and its newline to stdout in one write, and flushes it.
fn write_line(line: &str) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)?;
    out.flush()
}

/// The lines of `input` that are JSON, read on a thread of their own; every other line is answered
/// on stdout there. The stream ends at the input's end, or after a read error it yields.
pub fn incoming(input: impl Read + Send + 'static) -> impl Stream<Item = std::io::Result<String>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(8);
    let reader = std::thread::Builder::new().name("acp-stdin".into()).spawn(move || {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        loop {
            let line = match next_line(&mut input, MAX_LINE) {
                Ok(None) => return,
                Ok(Some(Line::Json(text))) => Ok(text),
                Ok(Some(Line::Refused(answer))) => match write_line(&answer.to_string()) {
                    Ok(()) => continue,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            // After an error the stream ends: the crate ends the connection with it.
            let last = line.is_err();
            if tx.blocking_send(line).is_err() || last {
                return;
            }
        }
    });
    let failed = reader.err();
    futures_util::stream::unfold((rx, failed), |(mut rx, failed)| async move {
        if let Some(e) = failed {
            // No thread to read stdin: the connection ends with why.
            return Some((Err(e), (rx, None)));
        }
        rx.recv().await.map(|item| (item, (rx, None)))
    })
}

/// Stdout as the crate's sink of lines: each written whole on a blocking thread, in order.
pub fn outgoing() -> impl Sink<String, Error = std::io::Error> + Send {
    futures_util::sink::unfold((), |(), line: String| async move {
        tokio::task::spawn_blocking(move || write_line(&line)).await.map_err(std::io::Error::other)?
    })
}

#[cfg(test)]
mod tests;
