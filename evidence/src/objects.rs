//! Checkpoint objects: the content-addressed files and directory listings of workspace checkpoints
//! (`agentd_agents::checkpoints`), kept as blob files beside the evidence's (one file for identical
//! bytes, whoever stored them) and listed in tree `objects` (sha256 → size), which is what `verify`
//! re-hashes.
//!
//! A checkpoint stores many objects at once, so an object is written without its own sync
//! ([`Store::put_object`]) and the batch is made durable by one [`Store::sync_objects`]: `syncfs` on
//! the blob directory's file system, then the database flushed. The engine records a checkpoint only
//! after that, so a checkpoint a log names has all its objects on disk.

use crate::blobs::{is_sha256_hex, sha256_hex, sync_file_system, Check};
use crate::error::{EvidenceError, StoreError};
use crate::store::Store;
use std::fs;

/// A checkpoint object that `verify` found missing or altered.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectProblem {
    /// The object's name (its recorded sha256).
    pub sha256: String,
    /// Its blob file.
    pub path: std::path::PathBuf,
    /// The sha256 its bytes hash to now; `None` when the file is gone.
    pub actual: Option<String>,
}

impl Store {
    /// Whether checkpoint object `sha256` is stored.
    pub fn has_object(&self, sha256: &str) -> Result<bool, EvidenceError> {
        if !is_sha256_hex(sha256) {
            return Ok(false);
        }
        let trees = self.trees()?;
        let listed = trees.objects.contains_key(sha256.as_bytes()).map_err(StoreError::from)?;
        Ok(listed && self.blobs.path(sha256).is_file())
    }

    /// Stores `data` as checkpoint object `sha256` (which must be its sha256), not yet synced: see
    /// [`Store::sync_objects`].
    pub fn put_object(&self, sha256: &str, data: &[u8]) -> Result<(), EvidenceError> {
        let actual = sha256_hex(data);
        if actual != sha256 {
            return Err(EvidenceError::Integrity {
                id: format!("object {sha256}"),
                expected: sha256.into(),
                actual,
            });
        }
        let trees = self.writing()?;
        self.blobs.put_unsynced(sha256, data, &format!("object-{}", std::process::id()))?;
        let size = (data.len() as u64).to_be_bytes();
        let inserted = trees.objects.insert(sha256.as_bytes(), &size).map(|_| ()).map_err(StoreError::from);
        self.noted(&trees, inserted)?;
        Ok(())
    }

    /// The bytes of checkpoint object `sha256`, checked against its name.
    pub fn object(&self, sha256: &str) -> Result<Vec<u8>, EvidenceError> {
        if !self.has_object(sha256)? {
            return Err(EvidenceError::UnknownObject(sha256.to_string()));
        }
        let path = self.blobs.path(sha256);
        // Read once and hashed here: the bytes served are the bytes checked.
        let data = match fs::read(&path) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(EvidenceError::Missing { id: format!("checkpoint object {sha256}"), path })
            }
            Err(source) => return Err(EvidenceError::Io { path, source }),
        };
        let actual = sha256_hex(&data);
        if actual != sha256 {
            return Err(EvidenceError::Integrity {
                id: format!("checkpoint object {sha256}"),
                expected: sha256.into(),
                actual,
            });
        }
        Ok(data)
    }

    /// Makes every object put so far durable: the blob directory's file system synced, then the
    /// database flushed.
    pub fn sync_objects(&self) -> Result<(), EvidenceError> {
        let dir = self.blobs.dir().to_path_buf();
        if dir.is_dir() {
            sync_file_system(&dir).map_err(|source| EvidenceError::Io { path: dir, source })?;
        }
        let trees = self.writing()?;
        self.flush_on(&trees)?;
        Ok(())
    }

    /// How many checkpoint objects are stored.
    pub fn object_count(&self) -> Result<u64, EvidenceError> {
        Ok(self.trees()?.objects.len() as u64)
    }

    /// Re-hashes every checkpoint object and names each one missing or altered.
    pub fn verify_objects(&self) -> Result<Vec<ObjectProblem>, EvidenceError> {
        let trees = self.trees()?;
        let mut problems = Vec::new();
        for entry in trees.objects.iter() {
            let (key, _) = entry.map_err(StoreError::from)?;
            let Ok(sha256) = std::str::from_utf8(&key) else { continue };
            if !is_sha256_hex(sha256) {
                continue;
            }
            let path = self.blobs.path(sha256);
            let check = self
                .blobs
                .check(sha256, true)
                .map_err(|source| EvidenceError::Io { path: path.clone(), source })?;
            let actual = match check {
                Check::Good => continue,
                Check::Missing => None,
                Check::Altered { actual } => Some(actual),
            };
            problems.push(ObjectProblem { sha256: sha256.to_string(), path, actual });
        }
        Ok(problems)
    }
}
