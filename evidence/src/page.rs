//! Reading one page of a blob, in bytes or in lines, touching only that page of the file.
//!
//! A [`Page`]'s `offset`, `len` and `next_offset` are in the unit that was asked for: byte offsets
//! and byte counts for [`Unit::Bytes`], line numbers (from 0) and line counts for [`Unit::Lines`].
//! `total_bytes` is always in bytes. Following `next_offset` from 0 until it is `None` visits every
//! byte (or line) exactly once.
//!
//! `data` is text. A byte page whose range would split a UTF-8 character is widened to the
//! character's boundaries (by at most 3 bytes at each end), so that consecutive pages never split a
//! character; `offset` and `len` then describe the widened range. Bytes that are not UTF-8 (a binary
//! blob) are replaced by U+FFFD, so for such blobs `data` is a lossy view and `len` still counts the
//! blob's bytes. A line page holds whole lines with their `\n` (a line never splits a character).

use std::io::{self, BufRead, Read, Seek, SeekFrom};

use agentd_protocol::evidence::Page;

/// What a page needs to know about its blob.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extent {
    pub(crate) total_bytes: u64,
    pub(crate) total_lines: u64,
    pub(crate) complete: bool,
}

impl Extent {
    /// An empty page at `offset`: asked with limit 0 (more may follow) or at or past the end.
    fn empty(self, offset: u64, total: u64) -> Page {
        Page {
            data: String::new(),
            offset,
            len: 0,
            total_bytes: self.total_bytes,
            complete: self.complete,
            next_offset: (offset < total).then_some(offset),
        }
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// The length a UTF-8 sequence starting with `lead` claims (1 for anything that is not a lead byte).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

/// `limit` bytes from `offset`, widened to character boundaries. Reads at most `limit + 6` bytes.
pub(crate) fn bytes_page<R: Read + Seek>(
    r: &mut R,
    extent: Extent,
    offset: u64,
    limit: u64,
) -> io::Result<Page> {
    let total = extent.total_bytes;
    if limit == 0 || offset >= total {
        return Ok(extent.empty(offset, total));
    }
    let end = offset.saturating_add(limit).min(total);
    // Up to 3 bytes either side, to find the boundaries of characters split by the range.
    let lo = offset.saturating_sub(3);
    let hi = end.saturating_add(3).min(total);
    let mut buf = vec![0u8; usize::try_from(hi - lo).map_err(io::Error::other)?];
    r.seek(SeekFrom::Start(lo))?;
    r.read_exact(&mut buf)?;

    let mut start = (offset - lo) as usize;
    if is_continuation(buf[start]) {
        let mut k = start;
        while k > 0 && start - k < 3 && is_continuation(buf[k]) {
            k -= 1;
        }
        // Widen only to a lead byte whose sequence covers `offset`: never over foreign bytes.
        if !is_continuation(buf[k]) && sequence_len(buf[k]) > start - k {
            start = k;
        }
    }
    let mut stop = (end - lo) as usize;
    let mut extended = 0;
    while stop < buf.len() && extended < 3 && is_continuation(buf[stop]) {
        stop += 1;
        extended += 1;
    }
    let (first, after) = (lo + start as u64, lo + stop as u64);
    Ok(Page {
        data: String::from_utf8_lossy(&buf[start..stop]).into_owned(),
        offset: first,
        len: after - first,
        total_bytes: total,
        complete: extent.complete,
        next_offset: (after < total).then_some(after),
    })
}

/// Consumes `n` lines (through their `\n`) without keeping them.
fn skip_lines<R: BufRead>(r: &mut R, n: u64) -> io::Result<()> {
    let mut left = n;
    while left > 0 {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let mut used = buf.len();
        for (i, &b) in buf.iter().enumerate() {
            if b == b'\n' {
                left -= 1;
                if left == 0 {
                    used = i + 1;
                    break;
                }
            }
        }
        r.consume(used);
    }
    Ok(())
}

/// `limit` lines from line `offset`, reading from `checkpoint` (a line number at or before `offset`
/// and the byte offset where that line starts).
pub(crate) fn lines_page<R: BufRead + Seek>(
    r: &mut R,
    extent: Extent,
    checkpoint: (u64, u64),
    offset: u64,
    limit: u64,
) -> io::Result<Page> {
    let total = extent.total_lines;
    if limit == 0 || offset >= total {
        return Ok(extent.empty(offset, total));
    }
    let (from_line, from_byte) = checkpoint;
    debug_assert!(from_line <= offset);
    r.seek(SeekFrom::Start(from_byte))?;
    skip_lines(r, offset - from_line)?;
    let mut out = Vec::new();
    let mut count = 0u64;
    while count < limit && r.read_until(b'\n', &mut out)? > 0 {
        count += 1;
    }
    let after = offset + count;
    Ok(Page {
        data: String::from_utf8_lossy(&out).into_owned(),
        offset,
        len: count,
        total_bytes: extent.total_bytes,
        complete: extent.complete,
        next_offset: (count > 0 && after < total).then_some(after),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn extent(data: &[u8]) -> Extent {
        Extent { total_bytes: data.len() as u64, total_lines: crate::lines::scan(data).0, complete: true }
    }

    fn bytes(data: &[u8], offset: u64, limit: u64) -> Page {
        bytes_page(&mut Cursor::new(data), extent(data), offset, limit).unwrap()
    }

    fn lines(data: &[u8], offset: u64, limit: u64) -> Page {
        let (_, index) = crate::lines::scan(data);
        let cp = crate::lines::checkpoint(&index, offset, data.len() as u64).unwrap();
        lines_page(&mut Cursor::new(data), extent(data), cp, offset, limit).unwrap()
    }

    #[test]
    fn byte_pages_cover_the_range() {
        let p = bytes(b"hello world", 6, 3);
        assert_eq!((p.data.as_str(), p.offset, p.len), ("wor", 6, 3));
        assert_eq!(p.next_offset, Some(9));
        assert_eq!(p.total_bytes, 11);
        let p = bytes(b"hello world", 6, 100);
        assert_eq!((p.data.as_str(), p.next_offset), ("world", None));
    }

    #[test]
    fn empty_pages() {
        let p = bytes(b"abc", 1, 0);
        assert_eq!((p.data.as_str(), p.len, p.next_offset), ("", 0, Some(1)));
        let p = bytes(b"abc", 3, 10);
        assert_eq!((p.data.as_str(), p.len, p.next_offset), ("", 0, None));
        let p = bytes(b"abc", 99, 10);
        assert_eq!((p.offset, p.next_offset), (99, None));
        let p = lines(b"a\nb\n", 2, 5);
        assert_eq!((p.data.as_str(), p.len, p.next_offset), ("", 0, None));
        let p = lines(b"a\nb\n", 1, 0);
        assert_eq!((p.data.as_str(), p.next_offset), ("", Some(1)));
    }

    #[test]
    fn byte_pages_widen_to_character_boundaries() {
        let text = "aé€😀z"; // 1 + 2 + 3 + 4 + 1 bytes
        let data = text.as_bytes();
        // Starting inside "€" (bytes 3..6) widens back to its start; ending inside "😀" (6..10)
        // widens forward to its end.
        let p = bytes(data, 4, 3);
        assert_eq!((p.data.as_str(), p.offset, p.len), ("€😀", 3, 7));
        assert_eq!(p.next_offset, Some(10));
        // A one-byte page inside a four-byte character returns the character.
        let p = bytes(data, 8, 1);
        assert_eq!((p.data.as_str(), p.offset, p.len), ("😀", 6, 4));
    }

    #[test]
    fn following_next_offset_visits_every_byte_once() {
        let text = "héllo wörld — ünïcödé 😀😀 ok\n".repeat(5);
        for limit in 1..=7 {
            let mut joined = String::new();
            let mut at = Some(0);
            while let Some(offset) = at {
                let p = bytes(text.as_bytes(), offset, limit);
                assert_eq!(p.offset, offset, "pages never overlap (limit {limit})");
                joined.push_str(&p.data);
                at = p.next_offset;
            }
            assert_eq!(joined, text, "limit {limit}");
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_and_never_widened_over() {
        let data = [b'a', 0x80, 0x80, 0x80, 0x80, b'b'];
        let p = bytes(&data, 2, 1);
        assert_eq!(p.offset, 2, "no lead byte covers offset 2: not widened");
        assert!(p.data.contains('\u{FFFD}'));
        let mut covered = 0;
        let mut at = Some(0);
        while let Some(offset) = at {
            let p = bytes(&data, offset, 1);
            assert_eq!(p.offset, offset);
            covered += p.len;
            at = p.next_offset;
        }
        assert_eq!(covered, data.len() as u64);
    }

    #[test]
    fn line_pages() {
        let data = b"zero\none\ntwo\nthree";
        let p = lines(data, 1, 2);
        assert_eq!((p.data.as_str(), p.offset, p.len), ("one\ntwo\n", 1, 2));
        assert_eq!(p.next_offset, Some(3));
        let p = lines(data, 3, 10);
        assert_eq!((p.data.as_str(), p.len, p.next_offset), ("three", 1, None));
    }

    #[test]
    fn line_pages_from_a_checkpoint() {
        let data: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        for n in [0u64, 4095, 4096, 4097, 12_345, 19_999] {
            let p = lines(data.as_bytes(), n, 2);
            let want: String = (n..(n + 2).min(20_000)).map(|i| format!("line {i}\n")).collect();
            assert_eq!(p.data, want, "from line {n}");
        }
    }
}
