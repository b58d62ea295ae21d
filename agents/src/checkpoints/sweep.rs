//! [`sweep_stale_temps`]: the temporary files a run killed in the middle of a write left behind.
//!
//! Every write of the workspace goes through a temporary file beside its target
//! (`.agentd-write-PID-N.tmp`, `.agentd-link-PID-N.tmp`) renamed into place; a `kill -9` between the
//! two leaves the temporary file. The resume that follows removes those of other processes, so a
//! crash leaves nothing in the user's tree that no change records.

use crate::copies::walk::{open_root, path_text, walk, At, Scope, Visitor};
use crate::copies::CopyError;
use rustix::fs::{self as rfs, AtFlags};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Removes, under `root` (what git ignores included), every file or symlink named as a temporary
/// file of another process's write ([`crate::workspace::is_stale_temp_name`]); the paths removed.
pub fn sweep_stale_temps(root: &Path) -> Result<Vec<String>, CopyError> {
    let fd = open_root(root)?;
    let mut sweeper = Sweeper { root, removed: Vec::new() };
    walk(root, &fd, Scope::Whole, &mut sweeper)?;
    Ok(sweeper.removed)
}

struct Sweeper<'a> {
    root: &'a Path,
    removed: Vec<String>,
}

impl Sweeper<'_> {
    fn sweep(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        if !crate::workspace::is_stale_temp_name(at.name.as_bytes()) {
            return Ok(());
        }
        match rfs::unlinkat(at.parent, at.name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {
                self.removed.push(path_text(at.rel));
                Ok(())
            }
            Err(e) => Err(CopyError::errno("remove", &self.root.join(at.rel))(e)),
        }
    }
}

impl Visitor for Sweeper<'_> {
    fn file(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        self.sweep(at)
    }

    fn symlink(&mut self, at: &At<'_>) -> Result<(), CopyError> {
        self.sweep(at)
    }

    fn special(&mut self, _: &At<'_>, _: u32) -> Result<(), CopyError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_processes_temporary_files_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("deep/er")).unwrap();
        let ours = format!(".agentd-write-{}-3.tmp", std::process::id());
        for name in
            [".agentd-write-1-2.tmp", "deep/er/.agentd-write-77-0.tmp", "keep.txt", ".agentd-write-x-1.tmp"]
        {
            std::fs::write(root.join(name), "x").unwrap();
        }
        std::fs::write(root.join(&ours), "mine, in flight").unwrap();
        std::os::unix::fs::symlink("target", root.join("deep/.agentd-link-9-9.tmp")).unwrap();
        let mut removed = sweep_stale_temps(root).unwrap();
        removed.sort();
        assert_eq!(
            removed,
            [".agentd-write-1-2.tmp", "deep/.agentd-link-9-9.tmp", "deep/er/.agentd-write-77-0.tmp"]
        );
        assert!(root.join("keep.txt").exists() && root.join(ours).exists());
        assert!(root.join(".agentd-write-x-1.tmp").exists(), "not a name of ours");
    }
}
