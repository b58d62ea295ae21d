//! The fuzz targets' seed corpus (`fuzz/corpus/<target>/`) and the mutations the property tests
//! make of it, the way a fuzzer mutates: shared by every crate whose fuzz oracles run as property
//! tests.

use proptest::prelude::*;
use std::path::PathBuf;

/// Every seed of `target`, by file name, sorted.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed corpus in {}", dir.display());
    files
}

/// The seed `name` of `target`.
pub fn seed(target: &str, name: &str) -> Vec<u8> {
    corpus(target).into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {target}/{name}")).1
}

/// One edit of a mutation: at a position (taken modulo the length), an operation and a byte.
pub type Edit = (usize, u8, u8);

/// `seed` after `edits`, the way a fuzzer mutates: flip, insert, delete, duplicate, truncate, and
/// splice in bytes that matter to the formats (quotes, braces, newlines, a split UTF-8 sequence).
pub fn mutate(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    const SPECIAL: &[&[u8]] = &[
        b"\n",
        b"\n\n",
        b"\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b"\\",
        b"data: ",
        b"event: ",
        b"\r",
        b"\xe2\x82",
        b"\xff",
        b"null",
        b"-1",
        b"1e999",
        b"18446744073709551616",
        b"=",
    ];
    let mut out = seed.to_vec();
    for &(at, op, byte) in edits {
        let at = if out.is_empty() { 0 } else { at % (out.len() + 1) };
        match op % 6 {
            0 if at < out.len() => out[at] ^= byte | 1,
            1 => out.insert(at, byte),
            2 if at < out.len() => {
                let end = (at + 1 + byte as usize % 16).min(out.len());
                out.drain(at..end);
            }
            3 => {
                let end = (at + 1 + byte as usize % 32).min(out.len());
                let piece = out[at..end].to_vec();
                out.splice(at..at, piece);
            }
            4 => out.truncate(at),
            _ => {
                let s = SPECIAL[byte as usize % SPECIAL.len()];
                out.splice(at..at, s.iter().copied());
            }
        }
    }
    out
}

/// A seed of `target` after a few random edits.
pub fn mutation(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus(target);
    (0..seeds.len(), prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..8))
        .prop_map(move |(i, edits)| mutate(&seeds[i].1, &edits))
}
