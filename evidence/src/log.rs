//! The per-task append-only log: tree `log`.
//!
//! Keys are `task_id` bytes, `/`, a kind byte and the sequence number as a big-endian `u64`, so a
//! prefix scan returns one task's entries of one kind in order:
//!
//! - `task_id/r<seq>`: a [`Record`] (message, checkpoint, settings snapshot or event), seq from 1;
//! - `task_id/e<seq>`: an [`Event`], seq from 1, the event index the socket streams from.
//!
//! An event is written under both kinds in one atomic batch, so `records` shows it in its place among
//! the messages and `events` serves subscribers without decoding messages.
//!
//! Sequence numbers come from per-task counters kept in memory ([`crate::seqs`]) and loaded lazily
//! from the last key of the task's prefix, so they continue after a reopen (also the store's own
//! reopen when it heals: the counters belong to one open of the database and are reloaded from what
//! the new open holds). Allocating a number and inserting under it
//! happen under the task's lock (numbers are unique and contiguous); the flush happens after the lock
//! is released, so concurrent appenders' flushes coalesce. Each append returns only after its flush,
//! but a concurrent reader may see an entry a moment before it is durable, and two concurrent
//! appenders may return out of seq order: whoever publishes events should publish from the log.

use crate::codec::{decode, encode};
use crate::error::StoreError;
use crate::seqs::Seqs;
use crate::store::Store;
use crate::trees::{Trees, LOG};
use agentd_policies::history::history_of;
use agentd_protocol::Role;
use agentd_protocol::{Event, EventKind, Message, Record};
use serde::de::DeserializeOwned;

const RECORD: u8 = b'r';
const EVENT: u8 = b'e';

fn prefix(task_id: &str, kind: u8) -> Vec<u8> {
    let mut p = Vec::with_capacity(task_id.len() + 10);
    p.extend_from_slice(task_id.as_bytes());
    p.push(b'/');
    p.push(kind);
    p
}

fn key(task_id: &str, kind: u8, seq: u64) -> Vec<u8> {
    let mut k = prefix(task_id, kind);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The seq of a key under a prefix of `prefix_len` bytes; `None` for a key of another shape (a task
/// whose id merely starts with this one's, e.g. ids containing `/`).
fn seq_of(prefix_len: usize, key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(prefix_len..)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

fn show(task_id: &str, kind: u8, seq: u64) -> String {
    format!("{task_id}/{}/{seq}", kind as char)
}

impl Store {
    /// Appends a record to a task's log; returns its seq (from 1 per task). Flushed before returning.
    /// Events go through [`Store::append_event`], which also indexes them; a `Record::Event` appended
    /// here is only a record.
    pub fn append(&self, task_id: &str, record: &Record) -> Result<u64, StoreError> {
        let trees = self.writing()?;
        let seq = self.with_seqs(&trees, task_id, |seqs| {
            let seq = seqs.record + 1;
            let bytes = encode(LOG, || show(task_id, RECORD, seq), record)?;
            self.room(&trees, bytes.len())?;
            let inserted = trees.log.insert(key(task_id, RECORD, seq), bytes).map_err(StoreError::from);
            self.noted(&trees, inserted)?;
            seqs.record = seq;
            Ok(seq)
        })?;
        self.flush_on(&trees)?;
        Ok(seq)
    }

    /// Numbers and persists an event: written to the event index and as a `Record::Event` in one
    /// atomic batch, flushed before returning. The returned event may be published.
    pub fn append_event(
        &self,
        task_id: &str,
        role: &Role,
        at: &str,
        kind: EventKind,
    ) -> Result<Event, StoreError> {
        let trees = self.writing()?;
        let event = self.with_seqs(&trees, task_id, |seqs| {
            let event = Event {
                seq: seqs.event + 1,
                task_id: task_id.to_string(),
                role: role.clone(),
                at: at.to_string(),
                kind,
            };
            let record_seq = seqs.record + 1;
            let event_bytes = encode(LOG, || show(task_id, EVENT, event.seq), &event)?;
            let record = Record::Event { event: event.clone() };
            let record_bytes = encode(LOG, || show(task_id, RECORD, record_seq), &record)?;
            self.room(&trees, event_bytes.len() + record_bytes.len())?;
            let mut batch = sled::Batch::default();
            batch.insert(key(task_id, EVENT, event.seq), event_bytes);
            batch.insert(key(task_id, RECORD, record_seq), record_bytes);
            let applied = trees.log.apply_batch(batch).map_err(StoreError::from);
            self.noted(&trees, applied)?;
            seqs.event = event.seq;
            seqs.record = record_seq;
            Ok(event)
        })?;
        self.flush_on(&trees)?;
        Ok(event)
    }

    /// Up to `limit` events with `seq > after_seq`, ascending.
    pub fn events(&self, task_id: &str, after_seq: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        Ok(self.read_range::<Event>(task_id, EVENT, after_seq, limit)?.into_iter().map(|(_, e)| e).collect())
    }

    /// Up to `limit` records with `seq > after_seq`, ascending, with their seqs.
    pub fn records(
        &self,
        task_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Record)>, StoreError> {
        self.read_range(task_id, RECORD, after_seq, limit)
    }

    /// The seq of the task's last event, 0 if it has none.
    pub fn last_event_seq(&self, task_id: &str) -> Result<u64, StoreError> {
        let trees = self.trees()?;
        self.last_seq(&trees, task_id, EVENT)
    }

    /// A role's active history: its latest checkpoint plus every later message record.
    pub fn history(&self, task_id: &str, role: &Role) -> Result<Vec<Message>, StoreError> {
        let records = self.records(task_id, 0, usize::MAX)?;
        Ok(history_of(role, records.iter().map(|(_, r)| r)))
    }

    /// The roles that have a history in the task (message or checkpoint records), in order of first
    /// appearance.
    pub fn roles(&self, task_id: &str) -> Result<Vec<Role>, StoreError> {
        let mut roles: Vec<Role> = Vec::new();
        for (_, record) in self.records(task_id, 0, usize::MAX)? {
            if let Record::Message { role, .. } | Record::Checkpoint { role, .. } = record {
                if !roles.contains(&role) {
                    roles.push(role);
                }
            }
        }
        Ok(roles)
    }

    /// Runs `f` with the task's counters of this open locked (loading them from disk on first use).
    fn with_seqs<R>(
        &self,
        trees: &Trees,
        task_id: &str,
        f: impl FnOnce(&mut Seqs) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let slot = trees.seqs.slot(task_id);
        let mut seqs = slot.lock();
        if !seqs.loaded {
            seqs.record = self.last_seq(trees, task_id, RECORD)?;
            seqs.event = self.last_seq(trees, task_id, EVENT)?;
            seqs.loaded = true;
        }
        f(&mut seqs)
    }

    /// The last seq on disk under a task's prefix of one kind, 0 if none.
    fn last_seq(&self, trees: &Trees, task_id: &str, kind: u8) -> Result<u64, StoreError> {
        let prefix = prefix(task_id, kind);
        for entry in trees.log.scan_prefix(&prefix).rev() {
            let (k, _) = entry?;
            if let Some(seq) = seq_of(prefix.len(), &k) {
                return Ok(seq);
            }
        }
        Ok(0)
    }

    fn read_range<T: DeserializeOwned>(
        &self,
        task_id: &str,
        kind: u8,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<(u64, T)>, StoreError> {
        let mut out = Vec::new();
        let Some(first) = after_seq.checked_add(1) else {
            return Ok(out);
        };
        if limit == 0 {
            return Ok(out);
        }
        let prefix_len = prefix(task_id, kind).len();
        let trees = self.trees()?;
        for entry in trees.log.range(key(task_id, kind, first)..=key(task_id, kind, u64::MAX)) {
            let (k, v) = entry?;
            let Some(seq) = seq_of(prefix_len, &k) else {
                continue;
            };
            out.push((seq, decode(LOG, || show(task_id, kind, seq), &v)?));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_seq_and_parse_back() {
        let a = key("t", RECORD, 2);
        let b = key("t", RECORD, 256);
        assert!(a < b);
        assert_eq!(seq_of(prefix("t", RECORD).len(), &b), Some(256));
        assert_eq!(seq_of(prefix("t", RECORD).len(), b"t/r12"), None);
        assert_eq!(show("t", EVENT, 7), "t/e/7");
    }
}
