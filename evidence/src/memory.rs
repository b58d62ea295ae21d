//! Durable memory: trees `memory_notes` (each note as it stands, by id) and `memory_changes` (every
//! change, by its number, big-endian).
//!
//! A change and the note it makes are written in one transaction and flushed before the call
//! returns; what a change does is decided by `agentd_policies::memory::apply`. Nothing is ever
//! removed: a deleted note stays, flagged, so its deletion can be undone.

use crate::codec::{decode, encode, show_key};
use crate::error::StoreError;
use crate::store::Store;
use crate::trees::{Trees, MEMORY_CHANGES, MEMORY_NOTES};
use agentd_policies::memory::{apply, saved};
use agentd_protocol::memory::{Author, MemoryChange, NewNote, Note, NoteEdit, NoteFilter};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use std::convert::Infallible;

impl Store {
    /// Saves a new note, with its `saved` change, durably; its id is `m` and the change's number.
    pub fn save_note(&self, new: NewNote) -> Result<Note, StoreError> {
        let _guard = self.memory_writes.lock();
        let trees = self.writing()?;
        let (note, change) = saved(new, next_seq(&trees)?);
        self.write_change(&trees, &note, &change)?;
        Ok(note)
    }

    /// The notes `filter` shows, in the order they were saved.
    pub fn notes(&self, filter: &NoteFilter) -> Result<Vec<Note>, StoreError> {
        let mut notes = Vec::new();
        for entry in self.trees()?.memory_notes.iter() {
            let (key, bytes) = entry?;
            let note: Note = decode(MEMORY_NOTES, || show_key(&key), &bytes)?;
            if filter.shows(&note) {
                notes.push(note);
            }
        }
        notes.sort_by_key(|n| note_number(&n.id));
        Ok(notes)
    }

    /// One note, deleted or not; [`StoreError::UnknownNote`] when there is none.
    pub fn note(&self, id: &str) -> Result<Note, StoreError> {
        match self.trees()?.memory_notes.get(id.as_bytes())? {
            Some(bytes) => decode(MEMORY_NOTES, || id.to_string(), &bytes),
            None => Err(StoreError::UnknownNote(id.to_string())),
        }
    }

    /// Applies `edit` to note `id` as `by`, at `at`: the note as it becomes and the change recorded.
    /// A refused change ([`StoreError::NoteChange`]) writes nothing.
    pub fn change_note(
        &self,
        id: &str,
        edit: &NoteEdit,
        by: Author,
        at: &str,
    ) -> Result<(Note, MemoryChange), StoreError> {
        let _guard = self.memory_writes.lock();
        let note = self.note(id)?;
        let latest = self.note_changes(Some(id))?.pop();
        let applied = apply(&note, edit, latest.as_ref(), at)?;
        let trees = self.writing()?;
        let change = applied.change(next_seq(&trees)?, by, at);
        self.write_change(&trees, &applied.note, &change)?;
        Ok((applied.note, change))
    }

    /// The changes of note `id` (of every note for `None`), oldest first.
    pub fn note_changes(&self, id: Option<&str>) -> Result<Vec<MemoryChange>, StoreError> {
        let mut changes = Vec::new();
        for entry in self.trees()?.memory_changes.iter() {
            let (key, bytes) = entry?;
            let change: MemoryChange = decode(MEMORY_CHANGES, || format!("{:?}", key.as_ref()), &bytes)?;
            if id.is_none_or(|id| change.note_id == id) {
                changes.push(change);
            }
        }
        Ok(changes)
    }

    fn write_change(&self, trees: &Trees, note: &Note, change: &MemoryChange) -> Result<(), StoreError> {
        let note_bytes = encode(MEMORY_NOTES, || note.id.clone(), note)?;
        let change_bytes = encode(MEMORY_CHANGES, || change.seq.to_string(), change)?;
        self.room(trees, note_bytes.len() + change_bytes.len())?;
        let written = (&trees.memory_notes, &trees.memory_changes)
            .transaction(|(notes, changes)| {
                notes.insert(note.id.as_bytes(), note_bytes.as_slice())?;
                changes.insert(&change.seq.to_be_bytes()[..], change_bytes.as_slice())?;
                Ok::<_, ConflictableTransactionError<Infallible>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => StoreError::Db(e),
                TransactionError::Abort(never) => match never {},
            });
        self.noted(trees, written)?;
        self.flush_on(trees)
    }
}

/// The next change number: one past the last recorded (1 for the first).
fn next_seq(trees: &Trees) -> Result<u64, StoreError> {
    Ok(match trees.memory_changes.last()? {
        Some((key, _)) => key.as_ref().try_into().map(u64::from_be_bytes).unwrap_or(0) + 1,
        None => 1,
    })
}

/// The number in a note id (`m17` → 17), for ordering.
fn note_number(id: &str) -> u64 {
    id.trim_start_matches('m').parse().unwrap_or(u64::MAX)
}
