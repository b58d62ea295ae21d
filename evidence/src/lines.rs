//! The sparse line index of a blob, so a page of lines deep in a large blob is read in O(page).
//!
//! A checkpoint is a pair (line number, byte offset of that line's first byte), lines counted from 0.
//! One is taken at the first line start at least [`STRIDE_LINES`] lines or [`STRIDE_BYTES`] bytes after
//! the previous checkpoint (line 0 at byte 0 is implied and not stored). To read from line `n`, a reader
//! seeks to the last checkpoint at or before `n` and skips forward: fewer than 4096 lines and at most
//! 64 KiB plus one line. A 100 MB blob has at most a few thousand checkpoints.
//!
//! The index is computed when the blob is stored and kept in sled (tree `evidence_lines`, keyed by the
//! blob's sha256, so identical content shares it) rather than as a sidecar file: it then sits under the
//! database's own checksums and durability, and is written in the same transaction as the metadata
//! that needs it. Encoding: 16 bytes a checkpoint, line then byte offset, both big-endian `u64`, in
//! ascending order; a lookup is a binary search over the stored bytes, without decoding them all.

pub(crate) const STRIDE_LINES: u64 = 4096;
pub(crate) const STRIDE_BYTES: u64 = 64 * 1024;

const ENTRY: usize = 16;

/// Counts lines and takes checkpoints over a blob fed in chunks.
#[derive(Debug, Default)]
pub(crate) struct LineScanner {
    /// Bytes fed so far.
    pos: u64,
    /// Newlines seen so far.
    newlines: u64,
    last_byte: Option<u8>,
    last_checkpoint: (u64, u64),
    checkpoints: Vec<u8>,
}

impl LineScanner {
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        for (i, &b) in chunk.iter().enumerate() {
            if b == b'\n' {
                self.newlines += 1;
                let line = self.newlines;
                let start = self.pos + i as u64 + 1;
                let (last_line, last_start) = self.last_checkpoint;
                if line - last_line >= STRIDE_LINES || start - last_start >= STRIDE_BYTES {
                    self.checkpoints.extend_from_slice(&line.to_be_bytes());
                    self.checkpoints.extend_from_slice(&start.to_be_bytes());
                    self.last_checkpoint = (line, start);
                }
            }
        }
        self.pos += chunk.len() as u64;
        if let Some(&b) = chunk.last() {
            self.last_byte = Some(b);
        }
    }

    /// The number of lines (newline-terminated ones, plus one for a trailing partial line) and the
    /// encoded index.
    pub(crate) fn finish(mut self) -> (u64, Vec<u8>) {
        let partial = matches!(self.last_byte, Some(b) if b != b'\n');
        // A checkpoint at the very end (after a final newline) names no line: drop it.
        if self.last_checkpoint.1 >= self.pos && !self.checkpoints.is_empty() {
            self.checkpoints.truncate(self.checkpoints.len() - ENTRY);
        }
        (self.newlines + u64::from(partial), self.checkpoints)
    }
}

/// Lines and encoded index of a whole blob in memory.
pub(crate) fn scan(data: &[u8]) -> (u64, Vec<u8>) {
    let mut scanner = LineScanner::default();
    scanner.feed(data);
    scanner.finish()
}

fn entry(index: &[u8], i: usize) -> (u64, u64) {
    let at = i * ENTRY;
    let word = |from: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&index[from..from + 8]);
        u64::from_be_bytes(b)
    };
    (word(at), word(at + 8))
}

/// The last checkpoint at or before `line`: `(line, byte offset)`, `(0, 0)` when there is none.
/// `None` for an index that is not a whole number of entries, or whose checkpoint lies at or past
/// `total_bytes` (the caller rebuilds it). O(log checkpoints): the index is not decoded.
pub(crate) fn checkpoint(index: &[u8], line: u64, total_bytes: u64) -> Option<(u64, u64)> {
    if !index.len().is_multiple_of(ENTRY) {
        return None;
    }
    let (mut lo, mut hi) = (0usize, index.len() / ENTRY);
    // Invariant: entries before `lo` have line <= `line`, entries from `hi` have line > `line`.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if entry(index, mid).0 <= line {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo == 0 {
        return Some((0, 0));
    }
    let found = entry(index, lo - 1);
    (found.1 < total_bytes).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(index: &[u8]) -> Vec<(u64, u64)> {
        (0..index.len() / ENTRY).map(|i| entry(index, i)).collect()
    }

    #[test]
    fn counts_lines_with_and_without_a_trailing_newline() {
        assert_eq!(scan(b"").0, 0);
        assert_eq!(scan(b"a").0, 1);
        assert_eq!(scan(b"a\n").0, 1);
        assert_eq!(scan(b"a\nb").0, 2);
        assert_eq!(scan(b"\n\n").0, 2);
    }

    #[test]
    fn checkpoints_every_4096_lines_of_short_lines() {
        let data = "x\n".repeat(10_000);
        let (lines, index) = scan(data.as_bytes());
        assert_eq!(lines, 10_000);
        assert_eq!(entries(&index), vec![(4096, 8192), (8192, 16384)]);
        let at = |line| checkpoint(&index, line, data.len() as u64);
        assert_eq!(at(0), Some((0, 0)));
        assert_eq!(at(4095), Some((0, 0)));
        assert_eq!(at(4096), Some((4096, 8192)));
        assert_eq!(at(9999), Some((8192, 16384)));
    }

    #[test]
    fn checkpoints_every_64_kib_of_long_lines() {
        let line = format!("{}\n", "y".repeat(1023));
        let data = line.repeat(200);
        let (lines, index) = scan(data.as_bytes());
        assert_eq!(lines, 200);
        assert_eq!(entries(&index), vec![(64, 65536), (128, 131072), (192, 196608)]);
        assert_eq!(checkpoint(&index, 100, data.len() as u64), Some((64, 65536)));
    }

    #[test]
    fn chunked_feeding_matches_whole_and_drops_a_final_checkpoint() {
        let data = "z\n".repeat(4096);
        let (lines, index) = scan(data.as_bytes());
        assert_eq!(lines, 4096);
        assert!(index.is_empty(), "line 4096 would start at the end");
        let data = "ab\ncd\n".repeat(5000) + "tail";
        let mut scanner = LineScanner::default();
        for chunk in data.as_bytes().chunks(7) {
            scanner.feed(chunk);
        }
        assert_eq!(scanner.finish(), scan(data.as_bytes()));
    }

    #[test]
    fn malformed_indexes_are_refused() {
        assert_eq!(checkpoint(&[], 7, 0), Some((0, 0)));
        assert_eq!(checkpoint(&[0; 15], 7, 100), None);
        let mut index = Vec::new();
        index.extend_from_slice(&5u64.to_be_bytes());
        index.extend_from_slice(&500u64.to_be_bytes());
        assert_eq!(checkpoint(&index, 7, 1000), Some((5, 500)));
        assert_eq!(checkpoint(&index, 7, 100), None, "past the end of the blob");
    }
}
