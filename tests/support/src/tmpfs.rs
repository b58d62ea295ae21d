//! A small tmpfs for tests of what happens when the disk fills: mounted on a fresh directory (root
//! only), unmounted on drop.

use std::path::Path;
use std::process::Command;

/// A tmpfs mounted on a temporary directory, for tests that fill the disk; unmounted (lazily) when dropped.
/// Mounting needs root.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `size` (`mount -o size=…`, e.g. `"8m"`). `Err` says why it cannot be mounted here
    /// (not root, no permission): the caller reports its test as skipped, never as passed.
    pub fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed (mounting needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    /// Where the tmpfs is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
