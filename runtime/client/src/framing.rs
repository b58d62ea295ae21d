//! The socket's line framing, the same on both ends: tokio-util's [`LinesCodec`] with a cap on the
//! length of a line, driven over a buffer the caller fills — by an async read in the daemon, a
//! blocking one in the CLI's client, or straight from the fuzzer's bytes.
//!
//! A line over the cap is refused as soon as the buffer holds more than the cap without a `\n` (the
//! peer need not send the end of a line that will never be read), and the codec then drops bytes up
//! to the next `\n`, so the connection stays usable and memory stays bounded by the cap. A line that
//! is not UTF-8 is refused on its own, and the next line is read as usual. A trailing `\r` is
//! dropped; blank lines are skipped. Bytes after the last `\n` wait for more: a line is never taken
//! before its end arrives.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};

/// The longest request line accepted.
pub const MAX_LINE: usize = 8 << 20;

/// What the framing found in the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// One line, without its `\n` (and `\r`); never blank.
    Line(String),
    /// A line over the cap: refused, and its bytes up to the next `\n` are dropped.
    Oversized,
    /// A line that is not UTF-8: refused, and dropped whole.
    NotUtf8,
}

/// Bytes in, [`Frame`]s out.
#[derive(Debug)]
pub struct Lines {
    codec: LinesCodec,
    buf: BytesMut,
    max: usize,
}

impl Lines {
    /// Framing that refuses lines of more than `max` bytes.
    pub fn new(max: usize) -> Lines {
        Lines { codec: LinesCodec::new_with_max_length(max), buf: BytesMut::new(), max }
    }

    /// The cap on a line, in bytes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The buffer the next read appends to (for `read_buf`), with room for at least `room` bytes.
    pub fn buffer(&mut self, room: usize) -> &mut BytesMut {
        self.buf.reserve(room);
        &mut self.buf
    }

    /// Appends bytes that were read.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next frame the bytes so far hold, or `None` until more arrive.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            return match self.codec.decode(&mut self.buf) {
                Ok(Some(line)) if line.trim().is_empty() => continue,
                Ok(Some(line)) => Some(Frame::Line(line)),
                Ok(None) => None,
                Err(LinesCodecError::MaxLineLengthExceeded) => Some(Frame::Oversized),
                // The only IO error a decode gives: the line was not UTF-8 (and is consumed).
                Err(LinesCodecError::Io(_)) => Some(Frame::NotUtf8),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(max: usize, pieces: &[&[u8]]) -> Vec<Frame> {
        let mut lines = Lines::new(max);
        let mut out = Vec::new();
        for piece in pieces {
            lines.extend(piece);
            while let Some(f) = lines.next_frame() {
                out.push(f);
            }
        }
        out
    }

    #[test]
    fn lines_blank_lines_and_carriage_returns() {
        let got = frames(100, &[b"one\r\n\n  \ntw", b"o\nthree"]);
        assert_eq!(got, [Frame::Line("one".into()), Frame::Line("two".into())]);
    }

    #[test]
    fn an_oversized_line_is_refused_once_and_the_next_is_read() {
        let long = vec![b'x'; 40];
        // At once, or a byte at a time: one refusal, then the next line.
        let whole = [long.as_slice(), b"\nok\n"].concat();
        assert_eq!(frames(16, &[&whole]), [Frame::Oversized, Frame::Line("ok".into())]);
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(frames(16, &bytes), [Frame::Oversized, Frame::Line("ok".into())]);
        // Exactly at the cap is accepted.
        assert_eq!(frames(4, &[b"abcd\n"]), [Frame::Line("abcd".into())]);
        // Refused before its end arrives: the peer need not finish it.
        assert_eq!(frames(16, &[&long]), [Frame::Oversized]);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_refused_alone() {
        assert_eq!(frames(100, &[b"a\xff\nb\n"]), [Frame::NotUtf8, Frame::Line("b".into())]);
    }
}
