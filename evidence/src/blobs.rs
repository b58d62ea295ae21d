//! Content-addressed blob files: `<blob_dir>/<sha256[0..2]>/<sha256>`, and the fallback file.
//!
//! **Writing.** A blob is written to a temporary file in its final directory (`.tmp-<tag>`), synced,
//! made read-only, renamed into place, and the directory is synced: a reader (or a restart) sees no
//! file or the whole file, never a part. Identical content is one file: when the file already exists
//! and re-hashes to its name it is left alone; a file that does not (altered, truncated) is replaced.
//! A temporary file left by a crash is never read and is harmless.
//!
//! **Verifying.** Re-hashing a 100 MB blob on every page read would make a page cost O(blob). So a
//! blob is re-hashed in full the first time this process reads it (or when it was written by this
//! process, it counts as verified by the write), and its file identity is remembered: size,
//! modification and (on Unix) status-change times, device and inode. Every later read stats the file
//! and re-hashes it in full again whenever any of these differ. Anything that rewrites the file in
//! place or replaces it changes the status-change time, which cannot be set back, so an alteration
//! after the first read is caught at the next read. What this does not catch without a full re-hash
//! is a change below the file system (bit rot, a raw write to the device) after the first verified
//! read in this process: that is what `verify` (always a full re-hash) is for, and a fresh process
//! re-hashes again on first read.

use crate::error::EvidenceError;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::{self, File, Metadata};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The blob directory and the blobs this process has verified.
pub(crate) struct Blobs {
    dir: PathBuf,
    /// sha256 → the file identity it had when it last hashed correctly.
    verified: Mutex<HashMap<String, FileStamp>>,
}

/// What a check of one blob found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Check {
    Good,
    Missing,
    Altered { actual: String },
}

/// A file's identity as far as `stat` tells: equal stamps mean the file was not rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    /// dev, ino, ctime, ctime_nsec on Unix; zero elsewhere.
    unix: [i64; 4],
}

impl FileStamp {
    fn of(md: &Metadata) -> FileStamp {
        #[cfg(unix)]
        let unix = {
            use std::os::unix::fs::MetadataExt;
            [md.dev() as i64, md.ino() as i64, md.ctime(), md.ctime_nsec()]
        };
        #[cfg(not(unix))]
        let unix = [0; 4];
        FileStamp { len: md.len(), modified: md.modified().ok(), unix }
    }
}

/// Whether `s` is a sha256 in lowercase hex (64 digits), the only names blob files have.
pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// The sha256 of `data`, lowercase hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// The sha256 of a file's contents, lowercase hex, read in 1 MiB chunks.
fn hash_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(hex(&hasher.finalize()))
}

/// Makes a directory entry durable: syncs the directory (a no-op where directories cannot be opened).
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Creates `dir` (and its parents) if needed; each directory created is made durable in its parent.
fn ensure_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    fs::create_dir_all(dir)?;
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Writes `data` whole under `dir/name` through `dir/tmp_name`: create, write, sync, rename, sync the
/// directory. The temporary file is removed when anything fails.
fn write_atomically(
    dir: &Path,
    tmp_name: &str,
    name: &str,
    data: &[u8],
    read_only: bool,
) -> io::Result<PathBuf> {
    write_file(dir, tmp_name, name, data, read_only, true)
}

/// [`write_atomically`], the file and the directory synced only when `sync` says (a batch of objects
/// is synced once, by [`sync_file_system`]).
fn write_file(
    dir: &Path,
    tmp_name: &str,
    name: &str,
    data: &[u8],
    read_only: bool,
    sync: bool,
) -> io::Result<PathBuf> {
    let tmp = dir.join(tmp_name);
    let path = dir.join(name);
    let written = (|| {
        let mut file = File::options().write(true).create_new(true).open(&tmp)?;
        file.write_all(data)?;
        if read_only {
            let mut perms = file.metadata()?.permissions();
            perms.set_readonly(true);
            file.set_permissions(perms)?;
        }
        if sync {
            file.sync_all()?;
        }
        drop(file);
        fs::rename(&tmp, &path)?;
        if sync {
            sync_dir(dir)?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Makes everything written to the file system holding `dir` durable: `syncfs(2)`, one call for a
/// batch of files.
pub(crate) fn sync_file_system(dir: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let handle = File::open(dir)?;
    // SAFETY: `syncfs` reads only the descriptor, which `handle` keeps open for the call.
    if unsafe { libc::syncfs(handle.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The file name extension of a media type, for files a person may open: `text/plain` → `txt`.
fn extension(media_type: &str) -> &'static str {
    let essence = media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => "json",
        "application/x-ndjson" | "application/jsonl" | "application/x-jsonlines" => "jsonl",
        "text/markdown" => "md",
        "text/x-diff" | "text/x-patch" => "diff",
        "text/html" => "html",
        "text/csv" => "csv",
        t if t.starts_with("text/") => "txt",
        _ => "bin",
    }
}

/// Writes evidence that the store could not hold, whole, as `dir/<id>.<ext>` (the extension from the
/// media type: `txt`, `json`, `md`, … or `bin`), creating `dir` if needed: written to a temporary
/// file, synced, renamed, and the directory synced. Returns the file's path. `id` must be a plain file
/// name (no separators, not `.` or `..`).
pub fn write_fallback(dir: &Path, id: &str, media_type: &str, data: &[u8]) -> io::Result<PathBuf> {
    if id.is_empty() || id == "." || id == ".." || id.contains(['/', '\\', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("evidence id {id:?} is not a plain file name"),
        ));
    }
    ensure_dir(dir)?;
    let name = format!("{id}.{}", extension(media_type));
    write_atomically(dir, &format!(".{id}.tmp"), &name, data, false)
}

impl Blobs {
    pub(crate) fn new(dir: PathBuf) -> Blobs {
        Blobs { dir, verified: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of a blob. `sha` must be a valid sha256 hex (see [`is_sha256_hex`]).
    pub(crate) fn path(&self, sha: &str) -> PathBuf {
        self.dir.join(&sha[..2]).join(sha)
    }

    /// Forgets which blobs were verified: the next read of each re-hashes it in full.
    #[cfg(feature = "testing")]
    pub(crate) fn forget_verified(&self) {
        self.verified.lock().clear();
    }

    /// Stores `data` (whose sha256 is `sha`) unless an intact copy is already there; `tag` makes the
    /// temporary file's name unique. Returns the blob's path.
    pub(crate) fn put(&self, sha: &str, data: &[u8], tag: &str) -> Result<PathBuf, EvidenceError> {
        self.store(sha, data, tag, true)?;
        Ok(self.path(sha))
    }

    /// Stores `data` (whose sha256 is `sha`) unless an intact copy is already there, without syncing
    /// it: it is durable once [`sync_file_system`] has run on the blob directory. Returns whether it
    /// was written.
    pub(crate) fn put_unsynced(&self, sha: &str, data: &[u8], tag: &str) -> Result<bool, EvidenceError> {
        self.store(sha, data, tag, false)
    }

    /// Writes the blob unless an intact copy is there (synced when `sync` says); whether it wrote it.
    fn store(&self, sha: &str, data: &[u8], tag: &str, sync: bool) -> Result<bool, EvidenceError> {
        let path = self.path(sha);
        if let Ok(Check::Good) = self.check(sha, false) {
            return Ok(false);
        }
        let shard = self.dir.join(&sha[..2]);
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EvidenceError::Io { path, source }
        };
        ensure_dir(&shard).map_err(io_err(&shard))?;
        write_file(&shard, &format!(".tmp-{tag}"), sha, data, true, sync).map_err(io_err(&path))?;
        // Written from `data` by this call: verified by construction.
        match fs::metadata(&path) {
            Ok(md) => {
                self.verified.lock().insert(sha.to_string(), FileStamp::of(&md));
            }
            Err(source) => return Err(EvidenceError::Io { path, source }),
        }
        Ok(true)
    }

    /// Checks a blob against its name. With `full`, always re-hashes it; otherwise only when its file
    /// identity differs from the one it had when it was last verified by this process.
    pub(crate) fn check(&self, sha: &str, full: bool) -> io::Result<Check> {
        let path = self.path(sha);
        let before = match fs::metadata(&path) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.unverify(sha);
                return Ok(Check::Missing);
            }
            Err(e) => return Err(e),
        };
        if !before.is_file() {
            self.unverify(sha);
            return Err(io::Error::other("the blob is not a regular file"));
        }
        let stamp = FileStamp::of(&before);
        if !full && self.verified.lock().get(sha) == Some(&stamp) {
            return Ok(Check::Good);
        }
        let actual = match hash_file(&path) {
            Ok(actual) => actual,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.unverify(sha);
                return Ok(Check::Missing);
            }
            Err(e) => return Err(e),
        };
        if actual != sha {
            self.unverify(sha);
            return Ok(Check::Altered { actual });
        }
        // Remember the identity only if the file did not change while it was hashed.
        if fs::metadata(&path).is_ok_and(|after| FileStamp::of(&after) == stamp) {
            self.verified.lock().insert(sha.to_string(), stamp);
        }
        Ok(Check::Good)
    }

    fn unverify(&self, sha: &str) {
        self.verified.lock().remove(sha);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_sha_names() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let sha = sha256_hex(b"abc");
        assert_eq!(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(is_sha256_hex(&sha));
        assert!(!is_sha256_hex(&sha.to_uppercase()));
        assert!(!is_sha256_hex("../../etc/passwd"));
        assert!(!is_sha256_hex(&sha[1..]));
    }

    #[test]
    fn extensions_follow_the_media_type() {
        assert_eq!(extension("text/plain; charset=utf-8"), "txt");
        assert_eq!(extension("application/json"), "json");
        assert_eq!(extension("text/x-rust"), "txt");
        assert_eq!(extension("image/png"), "bin");
        assert_eq!(extension(""), "bin");
    }

    #[test]
    fn fallback_writes_the_whole_file_and_creates_the_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws").join(agentd_protocol::task::EVIDENCE_FOLDER);
        let path = write_fallback(&dir, "ev-1", "text/plain", b"all of it\n").unwrap();
        assert_eq!(path, dir.join("ev-1.txt"));
        assert_eq!(fs::read(&path).unwrap(), b"all of it\n");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ev-1.txt")]);
        assert_eq!(
            write_fallback(&dir, "../x", "text/plain", b"").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn put_dedupes_and_replaces_a_corrupt_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let blobs = Blobs::new(tmp.path().join("evidence"));
        let sha = sha256_hex(b"hello");
        let path = blobs.put(&sha, b"hello", "a").unwrap();
        assert_eq!(path, tmp.path().join("evidence").join(&sha[..2]).join(&sha));
        assert_eq!(blobs.check(&sha, true).unwrap(), Check::Good);
        assert!(fs::metadata(&path).unwrap().permissions().readonly());

        // Corrupt it; a fresh put of the same content replaces it.
        fs::remove_file(&path).unwrap();
        fs::write(&path, b"HELLO").unwrap();
        assert_eq!(blobs.check(&sha, false).unwrap(), Check::Altered { actual: sha256_hex(b"HELLO") });
        blobs.put(&sha, b"hello", "b").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);

        fs::remove_file(&path).unwrap();
        assert_eq!(blobs.check(&sha, false).unwrap(), Check::Missing);
    }
}
