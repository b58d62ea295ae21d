//! Server-sent events read in time linear in the bytes: each byte of the stream is looked at once,
//! as it arrives (line ends found with `memchr`), a `data:` line's value goes straight into its
//! event's buffer, and nothing already read is scanned again however long an event grows.
//!
//! The rules are the WHATWG's ("Interpreting an event stream", HTML § 9.2.6): a line ends at
//! `\r\n`, `\n` or `\r`; a line that starts with `:` is a comment; any other is `name: value`, one
//! space after the colon left out, or a name alone (a line with no colon: its value is empty);
//! `data` values are joined with `\n`, `event` names the event (`message` when none does), and `id`,
//! `retry` and names nobody knows are ignored (agentd never reconnects a stream); a blank line
//! completes the event, unless it has no data; a byte order mark at the start of the stream is
//! skipped; an event the stream ends in the middle of is dropped. Every byte sequence is a valid
//! stream by these rules: what can be wrong is an event's data that is not UTF-8, and an event too
//! large to hold.
//!
//! Beyond the rules, two things the driver needs and no kept crate gives (`eventsource-stream`,
//! used before, parsed its whole buffer again for every chunk, quadratic in one event's size;
//! `sse-stream`, in the tree through rmcp, refuses a line with no colon): a cap on one event's
//! size, enforced before its bytes are kept ([`MAX_EVENT_BYTES`]), and what each piece of the
//! stream brought ([`Progress`]), which is what the idle deadline counts.

/// The most bytes one event may hold (its `data:` values with the `\n`s joining them, and its
/// name): 64 MiB. A real answer's biggest event is far smaller — a whole output item, which the
/// Responses API sends twice (`response.output_item.done`, `response.completed`), is bounded by the
/// model's output limit, 128k tokens or about half a megabyte of text, a few megabytes with its
/// encrypted reasoning — so 64 MiB is room for a hundred times that, while the bytes held to read
/// one event (the event, the JSON value parsed from it, the part it is appended to: about three
/// times its size) stay a few hundred megabytes at worst. A bigger event is no answer: the stream is
/// given up with an error naming this cap.
pub(crate) const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One event of the stream: its name and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event:` line's value, `message` when there was none.
    pub(crate) name: String,
    /// The `data:` lines' values, joined with `\n`.
    pub(crate) data: String,
}

/// What a piece of the stream brought, as the idle deadline counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Bytes of an event: any part of a `data:` or `event:` line (from its colon on, or its end),
    /// or the blank line that completed an event.
    Made,
    /// Nothing of an event: comments (a server's keep-alives), blank lines that complete nothing,
    /// fields agentd ignores (`id:`, `retry:`, unknown names), or the first bytes of a line whose
    /// name has not ended yet.
    Idle,
}

/// A stream that cannot be read on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadError {
    /// An event's data or name is not UTF-8.
    #[error("an event's {what} is not UTF-8 ({source})")]
    NotUtf8 {
        /// `data` or `name`.
        what: &'static str,
        /// Where the bad bytes were, as the decoder says.
        source: std::str::Utf8Error,
    },
    /// One event grew past the cap before it was complete.
    #[error("one event passed the cap of {cap} bytes ({size} bytes of it had come)")]
    TooLarge {
        /// The cap: [`MAX_EVENT_BYTES`] for a stream the driver reads.
        cap: usize,
        /// The event's bytes so far, the piece that crossed the cap included.
        size: usize,
    },
}

/// What the rest of the current line is, once its name is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// The name is not over yet (no colon, no line end so far).
    Name,
    /// A `data:` value: kept, in the event's data.
    Data,
    /// An `event:` value: kept, as the event's name.
    Event,
    /// A comment, or a field agentd ignores: dropped as it comes.
    Ignored,
}

/// An SSE parser fed the stream's bytes piece by piece, wherever the pieces split (inside a line
/// end, a UTF-8 sequence, a field's name): the events are the same however the stream is cut.
#[derive(Debug)]
pub(crate) struct Reader {
    cap: usize,
    /// The current line's start while its name is not over: the only bytes kept before it is known
    /// where a line goes.
    name: Vec<u8>,
    line: Line,
    /// The colon just passed: the value's one optional space is still to come.
    space_next: bool,
    /// The last line ended at a `\r`: a `\n` first in the next piece ends no other line.
    after_cr: bool,
    /// No line has ended or reached its colon yet: a byte order mark may lead the name.
    first_line: bool,
    /// The event being read: its `data:` values, each followed by `\n`.
    data: Vec<u8>,
    /// Its `event:` value (empty: `message`).
    event: Vec<u8>,
}

impl Reader {
    /// A reader that refuses an event of more than `cap` bytes (the driver's: [`MAX_EVENT_BYTES`]).
    pub(crate) fn new(cap: usize) -> Reader {
        Reader {
            cap,
            name: Vec::new(),
            line: Line::Name,
            space_next: false,
            after_cr: false,
            first_line: true,
            data: Vec::new(),
            event: Vec::new(),
        }
    }

    /// Reads the stream's next `bytes`: the events they complete are pushed on `events`, in order.
    /// Says whether they brought any part of an event. After an error the stream is not read on.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], events: &mut Vec<Event>) -> Result<Progress, ReadError> {
        let mut progress = Progress::Idle;
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) else {
                self.take(bytes, &mut progress)?;
                break;
            };
            self.take(&bytes[..end], &mut progress)?;
            self.end_line(events, &mut progress)?;
            let ending = bytes[end];
            bytes = &bytes[end + 1..];
            if ending == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        Ok(progress)
    }

    /// Bytes of the current line, up to its end (not included).
    fn take(&mut self, mut part: &[u8], progress: &mut Progress) -> Result<(), ReadError> {
        if part.is_empty() {
            return Ok(());
        }
        if self.line == Line::Name {
            let Some(colon) = memchr::memchr(b':', part) else {
                self.room_for(part.len())?;
                self.name.extend_from_slice(part);
                return Ok(());
            };
            self.room_for(colon)?;
            self.name.extend_from_slice(&part[..colon]);
            self.line = self.named();
            self.space_next = true;
            part = &part[colon + 1..];
            match self.line {
                Line::Data => *progress = Progress::Made,
                Line::Event => {
                    self.event.clear();
                    *progress = Progress::Made;
                }
                Line::Name | Line::Ignored => {}
            }
        }
        if self.space_next && !part.is_empty() {
            self.space_next = false;
            if let Some(rest) = part.strip_prefix(b" ") {
                part = rest;
            }
        }
        if part.is_empty() {
            return Ok(());
        }
        match self.line {
            Line::Data => {
                self.room_for(part.len())?;
                self.data.extend_from_slice(part);
                *progress = Progress::Made;
            }
            Line::Event => {
                self.room_for(part.len())?;
                self.event.extend_from_slice(part);
                *progress = Progress::Made;
            }
            Line::Name | Line::Ignored => {}
        }
        Ok(())
    }

    /// The line ended: a field with no colon is taken with an empty value, a blank line completes
    /// the event.
    fn end_line(&mut self, events: &mut Vec<Event>, progress: &mut Progress) -> Result<(), ReadError> {
        let line = match self.line {
            Line::Name if self.name.is_empty() || (self.first_line && self.name == BOM) => {
                self.first_line = false;
                self.name.clear();
                return self.dispatch(events, progress);
            }
            Line::Name => {
                let line = self.named();
                if line == Line::Event {
                    self.event.clear();
                }
                line
            }
            line => line,
        };
        match line {
            Line::Data => {
                self.room_for(1)?;
                self.data.push(b'\n');
                *progress = Progress::Made;
            }
            Line::Event => *progress = Progress::Made,
            Line::Name | Line::Ignored => {}
        }
        self.line = Line::Name;
        self.space_next = false;
        Ok(())
    }

    /// Where the rest of the line goes, now that its name is over (the name is then forgotten).
    fn named(&mut self) -> Line {
        let first = std::mem::replace(&mut self.first_line, false);
        let name = match self.name.strip_prefix(BOM) {
            Some(name) if first => name,
            _ => &self.name[..],
        };
        let line = match name {
            b"data" => Line::Data,
            b"event" => Line::Event,
            // A comment (nothing before the colon), `id`, `retry`, or a name nobody knows.
            _ => Line::Ignored,
        };
        self.name.clear();
        line
    }

    /// A blank line: the event is complete, and handed over if it has data.
    fn dispatch(&mut self, events: &mut Vec<Event>, progress: &mut Progress) -> Result<(), ReadError> {
        let name = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return Ok(());
        }
        let mut data = std::mem::take(&mut self.data);
        // Each data line ended with `\n`: the last one is no joint.
        data.pop();
        let data = String::from_utf8(data)
            .map_err(|e| ReadError::NotUtf8 { what: "data", source: e.utf8_error() })?;
        let name = if name.is_empty() {
            "message".to_string()
        } else {
            String::from_utf8(name)
                .map_err(|e| ReadError::NotUtf8 { what: "name", source: e.utf8_error() })?
        };
        events.push(Event { name, data });
        *progress = Progress::Made;
        Ok(())
    }

    /// Whether the event may take `more` bytes: what it holds (its data, its name, the name of the
    /// line being read) and `more` must be within the cap.
    fn room_for(&self, more: usize) -> Result<(), ReadError> {
        let size = self.data.len().saturating_add(self.event.len()).saturating_add(self.name.len());
        let after = size.saturating_add(more);
        if after > self.cap {
            return Err(ReadError::TooLarge { cap: self.cap, size: after });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
