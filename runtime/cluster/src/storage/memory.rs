//! Memory on the stream `AGENTD_MEMORY`: each change one message carrying the note as it became,
//! appended expecting the stream where this writer last saw it; the notes read back as the last
//! state of each.

use super::handle::{encode, storage_error, JetStreamStorage};
use crate::error::ClusterError;
use crate::names::MEMORY_SUBJECT;
use crate::passing::retrying;
use agentd_engine::storage::StorageError;
use agentd_protocol::memory::{MemoryChange, Note};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, Stream};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One memory change as the memory stream holds it: the change and the note as it became.
#[derive(Serialize, Deserialize)]
pub(super) struct MemoryEntry {
    pub(super) change: MemoryChange,
    pub(super) note: Note,
}

impl JetStreamStorage {
    /// Every memory change with its note, oldest first.
    pub(super) fn memory_entries(&self) -> Result<Vec<MemoryEntry>, StorageError> {
        let stream = self.handles.memory.clone();
        self.run(retrying(move || {
            let stream = stream.clone();
            async move { read_memory(&stream).await }
        }))
    }

    /// The notes as they stand: the last state of each, in the order they were saved.
    pub(super) fn current_notes(&self) -> Result<Vec<Note>, StorageError> {
        let mut notes: BTreeMap<u64, Note> = BTreeMap::new();
        let mut first_seen: HashMap<String, u64> = HashMap::new();
        for entry in self.memory_entries()? {
            let order = *first_seen.entry(entry.note.id.clone()).or_insert(entry.change.seq);
            notes.insert(order, entry.note);
        }
        Ok(notes.into_values().collect())
    }

    /// Appends a memory change with its note, expecting the stream where this writer last saw it.
    pub(super) fn write_memory(&self, entry: &MemoryEntry, expected_last: u64) -> Result<(), StorageError> {
        let payload = encode("a memory change", entry).map_err(storage_error)?;
        let js = self.handles.js.clone();
        self.run(async move {
            let publish =
                PublishMessage::build().payload(payload.into()).expected_last_sequence(expected_last);
            let ack = match js.send_publish(MEMORY_SUBJECT, publish).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match ack {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Err(ClusterError::js(
                    "recording a memory change",
                    "another daemon changed memory at the same moment; try again",
                )),
                Err(e) => Err(ClusterError::js("recording a memory change", e)),
            }
        })
    }
}

/// Every change the memory stream holds, oldest first.
async fn read_memory(stream: &Stream) -> Result<Vec<MemoryEntry>, ClusterError> {
    let last = match stream.get_last_raw_message_by_subject(MEMORY_SUBJECT).await {
        Ok(message) => message.sequence,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => return Ok(Vec::new()),
        Err(e) => return Err(ClusterError::js("reading memory", e)),
    };
    let mut out = Vec::new();
    for sequence in 1..=last {
        let message =
            stream.get_raw_message(sequence).await.map_err(|e| ClusterError::js("reading memory", e))?;
        let entry: MemoryEntry = serde_json::from_slice(&message.payload)
            .map_err(|source| ClusterError::Corrupt { what: format!("memory change {sequence}"), source })?;
        out.push(entry);
    }
    Ok(out)
}
