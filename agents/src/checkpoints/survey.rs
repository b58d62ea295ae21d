//! [`survey`]: what a workspace holds that its checkpoints cannot fully stand for, found before a
//! task writes anything — files with other hard links, and special files.

use crate::copies::walk::{open_root, path_text, walk, At, Scope, Visitor};
use crate::copies::CopyError;
use agentd_protocol::checkpoint::{special_kind, NotHeld};
use rustix::fs::{self as rfs, AtFlags, FileType};
use std::path::Path;

/// What [`survey`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    /// Regular files with other hard links: a command writing one in place writes the other names
    /// too (they may be outside the workspace), and a revert puts back this name only. Each path and,
    /// in words, how many others it has.
    pub linked: Vec<NotHeld>,
    /// FIFOs, sockets and devices: a checkpoint records their names, not the things themselves.
    pub specials: Vec<NotHeld>,
}

/// Walks `root` as a checkpoint does (the files the `search` tool sees) with `lstat` alone — nothing
/// is read — and lists its hard-linked and special files.
pub fn survey(root: &Path) -> Result<Survey, CopyError> {
    let fd = open_root(root)?;
    let mut surveyor = Surveyor { root, found: Survey::default() };
    walk(root, &fd, Scope::Seen, &mut surveyor)?;
    Ok(surveyor.found)
}

/// How a file's other hard links read, in words.
pub fn other_links(links: u64) -> String {
    let others = links.saturating_sub(1);
    format!(
        "{others} other hard link(s): a command writing it writes {}; a revert puts back this name only",
        if others == 1 { "that one too" } else { "those too" }
    )
}

struct Surveyor<'a> {
    root: &'a Path,
    found: Survey,
}

impl Visitor for Surveyor<'_> {
    fn file(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        let stat = match rfs::statat(at.parent, at.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(CopyError::errno("look at", &self.root.join(at.rel))(e)),
        };
        // `st_nlink` is `u64` on x86_64 and narrower elsewhere.
        #[allow(clippy::useless_conversion)]
        let links = u64::from(stat.st_nlink);
        if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile && links > 1 {
            self.found.linked.push(NotHeld { path: path_text(at.rel), why: other_links(links) });
        }
        Ok(())
    }

    fn symlink(&mut self, _: &At<'_>) -> Result<(), CopyError> {
        Ok(())
    }

    fn special(&mut self, at: &At<'_>, mode: u32) -> Result<(), CopyError> {
        let what = special_kind(mode).unwrap_or("a special file");
        let why = format!("{what}: a checkpoint records its name, not the thing itself");
        self.found.specials.push(NotHeld { path: path_text(at.rel), why });
        Ok(())
    }
}
