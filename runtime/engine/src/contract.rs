//! The storage seam's contract as a check any implementation runs: [`check`] drives a fresh
//! [`Storage`] through what the engine relies on and panics at the first difference, naming it. The
//! in-memory storage runs it in the engine's tests, the daemon's sled storage in the daemon's; a new
//! implementation (a replicated log) is done when it passes too.

// A check, like a test: a broken promise panics, naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::storage::{Settings, Storage, StorageError};
use agentd_policies::settings::{CompactAt, LastThinkingCleanup, Setting, ThinkingLatch};
use agentd_protocol::memory::{Author, ChangeAction, MemoryScope, NewNote, NoteEdit, NoteFilter};
use agentd_protocol::{
    CheckpointKind, EventKind, Message, NewEvidence, Producer, Record, Role, Source, Stored, TaskMeta,
    TaskState, Tokens, Unit, Window, WindowSource,
};
use std::path::Path;

fn task(id: &str) -> TaskMeta {
    TaskMeta {
        task_id: id.to_string(),
        objective: "Fix the adder".into(),
        workspace: "/tmp".into(),
        team: None,
        state: TaskState::Running,
        created_at: "2025-01-01T00:00:00.000Z".into(),
        updated_at: "2025-01-01T00:00:00.000Z".into(),
        result: None,
        error: None,
        node: None,
        budget: None,
        resume_at: None,
        ask: Vec::new(),
    }
}

/// Runs the contract on `storage`, which holds the task record `put_task` makes (a fresh storage
/// given `contract-task`), with `fallback` as a directory evidence may fall back to.
///
/// Panics, naming the broken promise, when `storage` does not keep it.
pub fn check(storage: &dyn Storage, put_task: impl Fn(TaskMeta), fallback: &Path) {
    let t = "contract-task";
    put_task(task(t));
    let message = |text: &str| Record::Message { role: Role::Coder, message: Message::user(text) };

    // The log: numbered from 1, events are records too, numbering without gaps.
    assert_eq!(storage.append(t, &message("one")).unwrap(), 1, "the first record is number 1");
    let event = storage.emit(t, &Role::Coder, EventKind::TaskResumed { node: None, after: None }).unwrap();
    assert_eq!(event.seq, 1, "the first event is number 1");
    assert_eq!((event.task_id.as_str(), &event.role), (t, &Role::Coder));
    assert_eq!(storage.append(t, &message("two")).unwrap(), 3, "an event is a record of the log too");
    assert_eq!(storage.last_event_seq(t).unwrap(), 1);
    assert_eq!(storage.last_event_seq("no-such-task").unwrap(), 0, "a task without events has 0");
    let records = storage.records(t, 0, 100).unwrap();
    assert_eq!(records.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(matches!(&records[1].1, Record::Event { event: e } if e.seq == 1));
    assert_eq!(storage.records(t, 1, 1).unwrap().len(), 1, "records page after a number");
    assert_eq!(storage.records(t, 1, 1).unwrap()[0].0, 2);
    assert_eq!(storage.events(t, 0, 10).unwrap(), std::slice::from_ref(&event));
    assert!(storage.events(t, 1, 10).unwrap().is_empty(), "events page after a number");

    // A role's history: its latest checkpoint and what came after.
    assert_eq!(storage.history(t, &Role::Coder).unwrap(), [Message::user("one"), Message::user("two")]);
    let checkpoint = Record::Checkpoint {
        role: Role::Coder,
        subtype: CheckpointKind::Compaction,
        history: vec![Message::user("summary")],
        archive_id: None,
    };
    storage.append(t, &checkpoint).unwrap();
    storage.append(t, &message("three")).unwrap();
    assert_eq!(
        storage.history(t, &Role::Coder).unwrap(),
        [Message::user("summary"), Message::user("three")],
        "the history is the latest checkpoint and what followed"
    );
    assert!(storage.history(t, &Role::Lead).unwrap().is_empty(), "another role's history is its own");

    // The task's record.
    storage.update_task(t, &mut |m| m.state = TaskState::Finished).unwrap();
    assert_eq!(storage.task(t).unwrap().map(|m| m.state), Some(TaskState::Finished));
    assert!(storage.task("no-such-task").unwrap().is_none());
    let unknown = storage.update_task("no-such-task", &mut |_| {}).unwrap_err();
    assert!(
        matches!(&unknown, StorageError::UnknownTask(id) if id == "no-such-task"),
        "an unknown task: {unknown:?}"
    );

    // Settings and windows.
    let role = Role::Coder;
    let key = CompactAt { role: &role };
    assert!(storage.get(&key).unwrap().is_none());
    storage.put(&key, &70).unwrap();
    assert_eq!(storage.get(&key).unwrap(), Some(70));
    assert_eq!(storage.setting(&key.key()).unwrap(), Some(serde_json::json!(70)), "kept as JSON");
    let latch = LastThinkingCleanup { task_id: t, role: &role };
    let value = ThinkingLatch { checkpoint_seq: 3, blocks_removed: 1, at: "2026-01-01T00:00:00Z".into() };
    storage.cache(&latch, &value).unwrap();
    assert_eq!(storage.get(&latch).unwrap(), Some(value));
    // A value that does not read as the setting's type is unset, and stays stored.
    storage.set_setting(&key.key(), &serde_json::json!("seventy")).unwrap();
    assert_eq!(storage.get(&key).unwrap(), None);
    assert_eq!(storage.setting(&key.key()).unwrap(), Some(serde_json::json!("seventy")));
    assert!(storage.window("http://s/v1", "m").unwrap().is_none());
    let window = Window { tokens: Tokens(8_192), source: WindowSource::Error };
    storage.set_window("http://s/v1", "m", window).unwrap();
    assert_eq!(storage.window("http://s/v1", "m").unwrap(), Some(window));
    assert!(storage.window("http://s/v1", "other").unwrap().is_none(), "windows are per model");

    // Evidence, whole, read back by page.
    let data = "line 1\nline 2\nline 3\nline 4";
    let source = Source {
        task_id: t.to_string(),
        role: Role::Coder,
        tool: Producer::Compaction,
        call_id: None,
        detail: Some("a contract check".into()),
    };
    let new = NewEvidence {
        data: data.as_bytes(),
        media_type: "text/plain",
        source: source.clone(),
        complete: true,
        incomplete_reason: None,
        created_at: "2025-01-01T00:00:00.000Z",
    };
    let Stored::InStore(meta) = storage.put_evidence(new, fallback).unwrap() else {
        panic!("evidence a healthy storage can hold is stored, not fallen back")
    };
    assert_eq!((meta.bytes, meta.lines, meta.source), (data.len() as u64, 4, source));
    assert_eq!(storage.evidence(&meta.id).unwrap().id, meta.id);
    let page = storage.read_evidence(&meta.id, 1, 2, Unit::Lines).unwrap();
    assert_eq!((page.data.as_str(), page.offset, page.len), ("line 2\nline 3\n", 1, 2));
    assert_eq!(page.next_offset, Some(3));
    let last = storage.read_evidence(&meta.id, 3, 10, Unit::Lines).unwrap();
    assert_eq!((last.data.as_str(), last.next_offset), ("line 4", None), "the last page says so");
    let bytes = storage.read_evidence(&meta.id, 0, 4, Unit::Bytes).unwrap();
    assert_eq!((bytes.data.as_str(), bytes.next_offset), ("line", Some(4)));
    let unknown = storage.evidence("ev-no-such").unwrap_err();
    assert!(matches!(&unknown, StorageError::UnknownEvidence(id) if id == "ev-no-such"), "{unknown:?}");
    let unknown = storage.read_evidence("ev-no-such", 0, 1, Unit::Lines).unwrap_err();
    assert!(matches!(&unknown, StorageError::UnknownEvidence(id) if id == "ev-no-such"), "{unknown:?}");

    // Checkpoint objects: named by their sha256, stored once however often put, durable once
    // synced, read back whole; one never stored is unknown, by its kind.
    let bytes = b"fn main() {}\n";
    let id = agentd_agents::checkpoints::sha256_hex(bytes);
    assert!(!storage.has_object(&id).unwrap(), "an object never put is not there");
    storage.put_object(&id, bytes).unwrap();
    storage.put_object(&id, bytes).unwrap();
    storage.sync_objects().unwrap();
    assert!(storage.has_object(&id).unwrap(), "a put object is there");
    assert_eq!(storage.object(&id).unwrap(), bytes, "an object reads back whole");
    let never = "0".repeat(64);
    let unknown = storage.object(&never).unwrap_err();
    assert!(matches!(&unknown, StorageError::UnknownObject(id) if *id == never), "{unknown:?}");

    // Memory: notes saved with their change, listed by scope, changed only by recorded changes.
    let new = |text: &str, scope, workspace: &str| NewNote {
        text: text.into(),
        quote: "we always use cargo nextest".into(),
        scope,
        workspace: workspace.into(),
        task_id: t.into(),
        role: Role::Lead,
        source_seq: 1,
        at: "2025-01-01T00:00:00.000Z".into(),
    };
    let a = storage.save_note(new("use nextest", MemoryScope::Workspace, "/w1")).unwrap();
    let b = storage.save_note(new("answer in French", MemoryScope::User, "/w1")).unwrap();
    let c = storage.save_note(new("other project", MemoryScope::Workspace, "/w2")).unwrap();
    assert!(a.id != b.id && b.id != c.id);
    let ids = |filter: &NoteFilter| -> Vec<String> {
        storage.notes(filter).unwrap().into_iter().map(|n| n.id).collect()
    };
    assert_eq!(
        ids(&NoteFilter::for_task("/w1")),
        [a.id.clone(), b.id.clone()],
        "this workspace's and the user's"
    );
    assert_eq!(ids(&NoteFilter::for_task("/w2")), [b.id.clone(), c.id.clone()]);
    assert_eq!(ids(&NoteFilter { user: true, ..NoteFilter::default() }), vec![b.id.clone()]);
    let later = "2025-01-02T00:00:00.000Z";
    let (edited, change) =
        storage.change_note(&a.id, &NoteEdit::Edit("use cargo nextest".into()), Author::User, later).unwrap();
    assert_eq!((edited.text.as_str(), change.before.as_deref()), ("use cargo nextest", Some("use nextest")));
    storage.change_note(&a.id, &NoteEdit::Delete, Author::User, later).unwrap();
    assert_eq!(ids(&NoteFilter::for_task("/w1")), vec![b.id.clone()], "a deleted note is in no list");
    assert!(storage.note(&a.id).unwrap().deleted, "but kept");
    assert!(
        matches!(
            storage.change_note(&a.id, &NoteEdit::Delete, Author::User, later),
            Err(StorageError::RefusedChange(agentd_policies::memory::ChangeError::Deleted(_)))
        ),
        "refused, nothing written"
    );
    let (back, undo) = storage.change_note(&a.id, &NoteEdit::Undo, Author::User, later).unwrap();
    assert!(!back.deleted);
    assert_eq!(back.text, "use cargo nextest");
    let history = storage.note_changes(Some(&a.id)).unwrap();
    let actions: Vec<ChangeAction> = history.iter().map(|c| c.action).collect();
    use ChangeAction::*;
    assert_eq!(actions, [Saved, Edited, Deleted, Restored]);
    assert_eq!(undo.undoes, Some(history[2].seq));
    assert!(history.windows(2).all(|w| w[0].seq < w[1].seq), "numbered in order");
    assert_eq!(storage.note_changes(None).unwrap().len(), 6, "three saves and three changes");
    let unknown = storage.note("m-no-such").unwrap_err();
    assert!(matches!(&unknown, StorageError::UnknownNote(id) if id == "m-no-such"), "{unknown:?}");
    let unknown = storage.change_note("m-no-such", &NoteEdit::Delete, Author::User, later).unwrap_err();
    assert!(matches!(&unknown, StorageError::UnknownNote(_)), "{unknown:?}");
}
