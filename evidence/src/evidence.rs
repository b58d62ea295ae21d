//! The evidence archive: what an agent saw (tool output, archived conversation), kept whole.
//!
//! Bytes are content-addressed blob files (see [`crate::blobs`]); metadata is in sled: tree `evidence`
//! (id → [`EvidenceMeta`] JSON), tree `evidence_by_task` (task id, NUL, evidence id → empty) and tree
//! `evidence_lines` (blob sha256 → sparse line index: a checkpoint every 4096 lines or 64 KiB, so a
//! page of lines is read in O(page)). The three are written in one transaction and flushed before
//! [`Store::put_evidence`] returns.
//!
//! Identical content is stored once: every call gets its own id and metadata (its own source), and
//! they share the blob file.
//!
//! A failure to store is never a silent drop. When the blob or its record cannot be written (disk
//! full, the database refusing the insert or the flush), the bytes are written whole to a file in the
//! task workspace's evidence folder and the caller gets [`Stored::Fallback`] naming it; only when that
//! fails too is the result an error, naming both failures. If the insert succeeded but the flush
//! failed, the record may still become durable later: then the evidence exists twice, never zero
//! times.
//!
//! Reading never serves an altered blob: see [`crate::blobs`] for how reads verify in O(page).

use crate::blobs::{is_sha256_hex, sha256_hex, write_fallback, Check};
use crate::codec::{decode, encode, show_key};
use crate::error::{EvidenceError, StoreError};
use crate::lines::{self, LineScanner};
use crate::page::{bytes_page, lines_page, Extent};
use crate::store::Store;
use crate::trees::EVIDENCE;
use agentd_protocol::evidence::{Page, Unit};
use serde::Serialize;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::collections::HashMap;
use std::convert::Infallible;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use agentd_protocol::evidence::{EvidenceMeta, NewEvidence, Stored};

/// A blob that `verify` found wrong, for one piece of evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyProblem {
    /// The evidence id (`ev-…`).
    pub id: String,
    /// The recorded sha256.
    pub sha256: String,
    /// The blob file.
    pub path: PathBuf,
    /// What is wrong with the blob.
    pub problem: BlobProblem,
}

/// What `verify` (or a read) found wrong with a blob.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlobProblem {
    /// The blob file is gone.
    Missing,
    /// The blob's bytes hash to `actual`, not to the recorded sha256.
    Altered {
        /// The sha256 the bytes hash to now.
        actual: String,
    },
}

impl std::fmt::Display for VerifyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.problem {
            BlobProblem::Missing => {
                write!(f, "evidence {}: its blob {} is missing", self.id, self.path.display())
            }
            BlobProblem::Altered { actual } => write!(
                f,
                "evidence {} is altered on disk: sha256 {actual}, recorded {} ({})",
                self.id,
                self.sha256,
                self.path.display()
            ),
        }
    }
}

fn by_task_prefix(task_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(task_id.len() + 1);
    key.extend_from_slice(task_id.as_bytes());
    key.push(0);
    key
}

fn by_task_key(task_id: &str, id: &str) -> Vec<u8> {
    let mut key = by_task_prefix(task_id);
    key.extend_from_slice(id.as_bytes());
    key
}

fn new_id() -> String {
    format!("ev-{}", uuid::Uuid::now_v7())
}

/// Decodes a metadata record, refusing one whose sha256 is not a blob name (it would name a path).
fn decode_meta(key: &[u8], bytes: &[u8]) -> Result<EvidenceMeta, StoreError> {
    let meta: EvidenceMeta = decode(EVIDENCE, || show_key(key), bytes)?;
    if !is_sha256_hex(&meta.sha256) {
        return Err(StoreError::Corrupt {
            tree: EVIDENCE,
            key: show_key(key),
            source: serde::de::Error::custom(format!(
                "sha256 {:?} is not 64 lowercase hex digits",
                meta.sha256
            )),
        });
    }
    Ok(meta)
}

impl Store {
    /// The directory of the blob files.
    pub fn blob_dir(&self) -> &Path {
        self.blobs.dir()
    }

    /// The blob file of a sha256 (`None` if it is not 64 lowercase hex digits).
    pub fn blob_path(&self, sha256: &str) -> Option<PathBuf> {
        is_sha256_hex(sha256).then(|| self.blobs.path(sha256))
    }

    /// Fault injection switch, only with the `testing` feature: while on, every evidence record insert
    /// fails as if the database could not hold it, so callers (and tests) exercise the fallback file.
    /// Off unless switched on; nothing else is affected.
    #[cfg(feature = "testing")]
    pub fn fail_evidence_inserts(&self, fail: bool) {
        self.faults.set_evidence_inserts_fail(fail);
    }

    /// Forgets which blobs this process has verified: the next read of each re-hashes it in full.
    /// Only with the `testing` feature, for tests and benchmarks of a first read.
    #[cfg(feature = "testing")]
    pub fn forget_verified_blobs(&self) {
        self.blobs.forget_verified();
    }

    /// Stores evidence: the blob (once per content), then its record, flushed. If either cannot be
    /// stored, the bytes are written whole to `fallback_dir/<id>.<ext>` (normally the task
    /// workspace's evidence folder) and [`Stored::Fallback`] names it; if that fails too, the error
    /// names both failures.
    pub fn put_evidence(&self, new: NewEvidence<'_>, fallback_dir: &Path) -> Result<Stored, EvidenceError> {
        let (lines, index) = lines::scan(new.data);
        let meta = new.meta(new_id(), sha256_hex(new.data), lines);
        let failure = match self.store_evidence(&meta, new.data, &index) {
            Ok(()) => return Ok(Stored::InStore(meta)),
            Err(failure) => failure,
        };
        match write_fallback(fallback_dir, &meta.id, &meta.media_type, new.data) {
            Ok(path) => Ok(Stored::Fallback { path, meta }),
            Err(source) => Err(EvidenceError::NotStored {
                id: meta.id,
                store: Box::new(failure),
                path: fallback_dir.to_path_buf(),
                source,
            }),
        }
    }

    fn store_evidence(&self, meta: &EvidenceMeta, data: &[u8], index: &[u8]) -> Result<(), EvidenceError> {
        self.blobs.put(&meta.sha256, data, &meta.id)?;
        #[cfg(feature = "testing")]
        if self.faults.evidence_inserts_fail() {
            return Err(StoreError::Db(sled::Error::Unsupported(
                "evidence inserts are switched off (fault injection)".into(),
            ))
            .into());
        }
        let record = encode(EVIDENCE, || meta.id.clone(), meta)?;
        let task_key = by_task_key(&meta.source.task_id, &meta.id);
        let trees = self.writing()?;
        self.room(&trees, record.len() + index.len())?;
        let written = (&trees.evidence, &trees.evidence_by_task, &trees.evidence_lines)
            .transaction(|(evidence, by_task, lines)| {
                evidence.insert(meta.id.as_bytes(), record.as_slice())?;
                by_task.insert(task_key.as_slice(), &[][..])?;
                lines.insert(meta.sha256.as_bytes(), index)?;
                Ok::<_, ConflictableTransactionError<Infallible>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => StoreError::Db(e),
                TransactionError::Abort(never) => match never {},
            });
        self.noted(&trees, written)?;
        self.flush_on(&trees)?;
        Ok(())
    }

    /// The record of one piece of evidence; [`EvidenceError::UnknownEvidence`] if there is none.
    pub fn evidence(&self, id: &str) -> Result<EvidenceMeta, EvidenceError> {
        match self.trees()?.evidence.get(id.as_bytes()).map_err(StoreError::from)? {
            Some(bytes) => Ok(decode_meta(id.as_bytes(), &bytes)?),
            None => Err(EvidenceError::UnknownEvidence(id.to_string())),
        }
    }

    /// Every piece of evidence, or a task's, ordered by id (creation order).
    pub fn evidence_list(&self, task_id: Option<&str>) -> Result<Vec<EvidenceMeta>, EvidenceError> {
        let trees = self.trees()?;
        let Some(task_id) = task_id else {
            return trees
                .evidence
                .iter()
                .map(|entry| {
                    let (key, bytes) = entry.map_err(StoreError::from)?;
                    Ok(decode_meta(&key, &bytes)?)
                })
                .collect();
        };
        let prefix = by_task_prefix(task_id);
        let mut out = Vec::new();
        for entry in trees.evidence_by_task.scan_prefix(&prefix) {
            let (key, _) = entry.map_err(StoreError::from)?;
            let id = &key[prefix.len()..];
            let Some(bytes) = trees.evidence.get(id).map_err(StoreError::from)? else {
                continue;
            };
            let meta = decode_meta(id, &bytes)?;
            // Task ids containing NUL could share a prefix: the record decides.
            if meta.source.task_id == task_id {
                out.push(meta);
            }
        }
        Ok(out)
    }

    /// One page of evidence: `limit` bytes from byte `offset`, or `limit` lines from line `offset`
    /// (see [`Page`]), reading only that page of the blob. The blob is verified first (see
    /// [`crate::blobs`]): an altered blob is [`EvidenceError::Integrity`] and a missing one
    /// [`EvidenceError::Missing`]; no data is returned from either.
    pub fn read_evidence(
        &self,
        id: &str,
        offset: u64,
        limit: u64,
        unit: Unit,
    ) -> Result<Page, EvidenceError> {
        let meta = self.evidence(id)?;
        let path = self.blobs.path(&meta.sha256);
        self.ensure_intact(&meta, &path)?;
        let io_err = |source: io::Error| {
            if source.kind() == io::ErrorKind::NotFound {
                EvidenceError::Missing { id: meta.id.clone(), path: path.clone() }
            } else {
                EvidenceError::Io { path: path.clone(), source }
            }
        };
        let extent = Extent { total_bytes: meta.bytes, total_lines: meta.lines, complete: meta.complete };
        let mut file = File::open(&path).map_err(io_err)?;
        match unit {
            Unit::Bytes => bytes_page(&mut file, extent, offset, limit).map_err(io_err),
            Unit::Lines => {
                let checkpoint = if limit > 0 && offset < meta.lines {
                    self.line_checkpoint(&meta, &path, offset)?
                } else {
                    (0, 0)
                };
                let mut reader = BufReader::with_capacity(64 * 1024, file);
                lines_page(&mut reader, extent, checkpoint, offset, limit).map_err(io_err)
            }
        }
    }

    /// Re-hashes every blob that metadata refers to (each blob once) and names each piece of
    /// evidence whose blob is missing or altered, in id order. Also refreshes what this process
    /// counts as verified.
    pub fn verify_evidence(&self) -> Result<Vec<VerifyProblem>, EvidenceError> {
        let mut checked: HashMap<String, Check> = HashMap::new();
        let mut problems = Vec::new();
        for meta in self.evidence_list(None)? {
            let path = self.blobs.path(&meta.sha256);
            let check = match checked.get(&meta.sha256) {
                Some(check) => check.clone(),
                None => {
                    let check = self
                        .blobs
                        .check(&meta.sha256, true)
                        .map_err(|source| EvidenceError::Io { path: path.clone(), source })?;
                    checked.insert(meta.sha256.clone(), check.clone());
                    check
                }
            };
            let problem = match check {
                Check::Good => continue,
                Check::Missing => BlobProblem::Missing,
                Check::Altered { actual } => BlobProblem::Altered { actual },
            };
            problems.push(VerifyProblem { id: meta.id, sha256: meta.sha256, path, problem });
        }
        Ok(problems)
    }

    fn ensure_intact(&self, meta: &EvidenceMeta, path: &Path) -> Result<(), EvidenceError> {
        match self.blobs.check(&meta.sha256, false) {
            Ok(Check::Good) => Ok(()),
            Ok(Check::Missing) => {
                Err(EvidenceError::Missing { id: meta.id.clone(), path: path.to_path_buf() })
            }
            Ok(Check::Altered { actual }) => {
                Err(EvidenceError::Integrity { id: meta.id.clone(), expected: meta.sha256.clone(), actual })
            }
            Err(source) => Err(EvidenceError::Io { path: path.to_path_buf(), source }),
        }
    }

    /// The line checkpoint for `line` from the stored index. An index that is absent or malformed
    /// (it should not be) is rebuilt from the verified blob, O(blob) once, and stored again.
    fn line_checkpoint(
        &self,
        meta: &EvidenceMeta,
        path: &Path,
        line: u64,
    ) -> Result<(u64, u64), EvidenceError> {
        let trees = self.trees()?;
        let stored = trees.evidence_lines.get(meta.sha256.as_bytes()).map_err(StoreError::from)?;
        if let Some(found) = stored.and_then(|index| lines::checkpoint(&index, line, meta.bytes)) {
            return Ok(found);
        }
        let io_err = |source| EvidenceError::Io { path: path.to_path_buf(), source };
        let mut file = File::open(path).map_err(io_err)?;
        let mut scanner = LineScanner::default();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => scanner.feed(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        let (_, index) = scanner.finish();
        // Best effort: the rebuilt index serves this read either way.
        if let Ok(trees) = self.writing() {
            let inserted = trees.evidence_lines.insert(meta.sha256.as_bytes(), index.as_slice());
            if self.noted(&trees, inserted.map_err(StoreError::from)).is_ok() {
                let _ = self.flush_on(&trees);
            }
        }
        Ok(lines::checkpoint(&index, line, meta.bytes).unwrap_or((0, 0)))
    }
}
