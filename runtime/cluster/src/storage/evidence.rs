//! Evidence: its records (a key-value bucket) and its bytes (the object store, one object per
//! sha256), listed, read and checked against each other; and the checkpoint objects of workspace
//! checkpoints, in the same object store under the same names.

use super::buckets::all_entries;
use super::handle::{storage_error, JetStreamStorage};
use crate::error::ClusterError;
use crate::passing::retrying;
use agentd_engine::storage::StorageError;
use agentd_protocol::EvidenceMeta;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

impl JetStreamStorage {
    /// Every evidence record, or a task's, oldest first.
    pub fn evidence_list(&self, task_id: Option<&str>) -> Result<Vec<EvidenceMeta>, StorageError> {
        let evidence = self.handles.evidence.clone();
        let values = self.run(retrying(move || all_entries(evidence.clone(), "the evidence")))?;
        let mut metas = values
            .into_iter()
            .map(|(key, value)| {
                serde_json::from_slice::<EvidenceMeta>(&value).map_err(|source| {
                    storage_error(ClusterError::Corrupt { what: format!("evidence {key}"), source })
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        metas.retain(|m| task_id.is_none_or(|t| m.source.task_id == t));
        // Evidence ids are UUID v7: their order is their age.
        metas.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(metas)
    }

    /// Reads every evidence object back and checks it against its record's sha256 and size: the
    /// records whose bytes are missing or altered, with what is wrong.
    pub fn verify_evidence(&self) -> Result<Vec<(EvidenceMeta, String)>, StorageError> {
        let mut problems = Vec::new();
        for meta in self.evidence_list(None)? {
            match self.blob(&meta.sha256) {
                Err(e) => problems.push((meta, format!("cannot be read: {e}"))),
                Ok(data) => {
                    let sha256 = hex_sha256(&data);
                    if sha256 != meta.sha256 {
                        problems.push((meta, format!("its bytes hash to {sha256}")));
                    } else if data.len() as u64 != meta.bytes {
                        let len = data.len();
                        problems.push((meta, format!("it holds {len} bytes")));
                    }
                }
            }
        }
        Ok(problems)
    }

    /// Whether an object named `sha256` is stored (and not deleted).
    pub(super) fn has_blob(&self, sha256: &str) -> Result<bool, StorageError> {
        let (blobs, name) = (self.handles.blobs.clone(), sha256.to_string());
        self.run(retrying(move || {
            let (blobs, name) = (blobs.clone(), name.clone());
            async move {
                match blobs.info(name.as_str()).await {
                    Ok(info) => Ok(!info.deleted),
                    Err(e) if e.kind() == async_nats::jetstream::object_store::InfoErrorKind::NotFound => {
                        Ok(false)
                    }
                    Err(e) => Err(ClusterError::js("looking up a checkpoint object", e)),
                }
            }
        }))
    }

    /// Stores `data` under `sha256` (acknowledged by the stream: durable when this returns).
    pub(super) fn put_blob(&self, sha256: &str, data: &[u8]) -> Result<(), StorageError> {
        let (blobs, name, data) = (self.handles.blobs.clone(), sha256.to_string(), data.to_vec());
        self.run(retrying(move || {
            let (blobs, name, data) = (blobs.clone(), name.clone(), data.clone());
            async move {
                blobs
                    .put(name.as_str(), &mut data.as_slice())
                    .await
                    .map(drop)
                    .map_err(|e| ClusterError::js("storing a checkpoint object", e))
            }
        }))
    }

    /// Reads every object of the store whose name is a sha256 back and names each whose bytes do not
    /// hash to it: (name, what is wrong). Evidence bytes and checkpoint objects alike.
    pub fn verify_objects(&self) -> Result<Vec<(String, String)>, StorageError> {
        use futures_util::StreamExt;
        let blobs = self.handles.blobs.clone();
        let names = self.run(retrying(move || {
            let blobs = blobs.clone();
            async move {
                let mut list = blobs.list().await.map_err(|e| ClusterError::js("listing objects", e))?;
                let mut names = Vec::new();
                while let Some(info) = list.next().await {
                    let info = info.map_err(|e| ClusterError::js("listing objects", e))?;
                    if !info.deleted {
                        names.push(info.name);
                    }
                }
                Ok(names)
            }
        }))?;
        let mut problems = Vec::new();
        for name in names.into_iter().filter(|n| n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit())) {
            match self.blob(&name) {
                Err(e) => problems.push((name, format!("cannot be read: {e}"))),
                Ok(data) => {
                    let sha256 = hex_sha256(&data);
                    if sha256 != name {
                        problems.push((name, format!("its bytes hash to {sha256}")));
                    }
                }
            }
        }
        Ok(problems)
    }

    /// The bytes stored under `sha256`.
    pub(super) fn blob(&self, sha256: &str) -> Result<Vec<u8>, StorageError> {
        let (blobs, name) = (self.handles.blobs.clone(), sha256.to_string());
        self.run(retrying(move || {
            let (blobs, name) = (blobs.clone(), name.clone());
            async move {
                let mut object = blobs
                    .get(name.as_str())
                    .await
                    .map_err(|e| ClusterError::js("reading evidence bytes", e))?;
                let mut data = Vec::new();
                object
                    .read_to_end(&mut data)
                    .await
                    .map_err(|e| ClusterError::js("reading evidence bytes", e))?;
                Ok(data)
            }
        }))
    }
}

/// A sha256 in lower-case hex.
pub(super) fn hex_sha256(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}
