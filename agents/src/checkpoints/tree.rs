//! A directory's object: its listing, one entry per file, symlink or directory, in name order.
//!
//! Each entry is `MODE SHA256[ -]\tNAME\0`: the mode in octal as git writes it (`100644`, `100755`,
//! `120000`, [`DIR`] for a directory), the sha256 of the entry's object, ` -` when a file's bytes
//! were not kept, a tab, and the name (UTF-8, never holding a NUL or a `/`), ended by a NUL.

use agentd_protocol::checkpoint::FileState;

/// The mode of a directory entry.
pub const DIR: u32 = 0o40000;

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the directory.
    pub name: String,
    /// Its mode ([`DIR`] for a directory), its object and whether its bytes were kept.
    pub state: FileState,
}

impl Entry {
    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.state.mode == DIR
    }
}

/// The listing of `entries` (in name order) as bytes.
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 80);
    for e in entries {
        let unkept = if e.state.unkept { " -" } else { "" };
        out.extend_from_slice(format!("{:o} {}{unkept}\t", e.state.mode, e.state.sha256).as_bytes());
        out.extend_from_slice(e.name.as_bytes());
        out.push(0);
    }
    out
}

/// The entries of a listing; why it does not read, when it does not.
pub fn decode(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for raw in bytes.split(|b| *b == 0) {
        if raw.is_empty() {
            continue;
        }
        let line = std::str::from_utf8(raw).map_err(|_| "an entry is not UTF-8".to_string())?;
        let (head, name) = line.split_once('\t').ok_or_else(|| format!("entry {line:?} has no tab"))?;
        let mut words = head.split(' ');
        let mode = words.next().and_then(|m| u32::from_str_radix(m, 8).ok());
        let sha256 = words.next().filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()));
        let unkept = match words.next() {
            None => false,
            Some("-") => true,
            Some(other) => return Err(format!("entry {name:?} has an unknown mark {other:?}")),
        };
        let (Some(mode), Some(sha256)) = (mode, sha256) else {
            return Err(format!("entry {name:?} has no mode or object"));
        };
        if name.is_empty() || name.contains('/') {
            return Err(format!("entry name {name:?} is not a name"));
        }
        entries
            .push(Entry { name: name.to_string(), state: FileState { mode, sha256: sha256.into(), unkept } });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_listing_reads_back_as_it_was_written(
            names in proptest::collection::btree_set("[^/\u{0}]{1,12}", 0..8),
            unkept in any::<bool>(),
        ) {
            let entries: Vec<Entry> = names
                .into_iter()
                .enumerate()
                .map(|(i, name)| Entry {
                    name,
                    state: FileState {
                        mode: if i % 2 == 0 { 0o100644 } else { DIR },
                        sha256: format!("{i:064x}"),
                        unkept: unkept && i % 2 == 0,
                    },
                })
                .collect();
            prop_assert_eq!(decode(&encode(&entries)).unwrap(), entries);
        }
    }

    #[test]
    fn a_listing_that_does_not_read_says_why() {
        assert!(decode(b"100644 abc\tx\0").unwrap_err().contains("no mode or object"));
        assert!(decode(b"100644 nothing").unwrap_err().contains("no tab"));
        let sha = "0".repeat(64);
        assert!(decode(format!("100644 {sha}\ta/b\0").as_bytes()).unwrap_err().contains("not a name"));
    }
}
