//! The database through the store's public API: records and events numbered from 1 per task and read
//! in order, a reopen that keeps everything, a second open refused by the lock, concurrent appends,
//! histories rebuilt from the latest checkpoint, tasks, settings and windows, and corrupt values named
//! by their tree and key.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use agentd_evidence::{Store, StoreError};
use agentd_protocol::task::TaskMeta;
use agentd_protocol::Role;
use agentd_protocol::{EventKind, Message, Record, TaskState, Tokens, Window, WindowSource};
use std::collections::HashSet;

const AT: &str = "2026-01-01T00:00:00.000Z";

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db")).unwrap();
    (dir, store)
}

fn msg(role: &str, text: &str) -> Record {
    Record::Message { role: role.into(), message: Message::user(text) }
}

fn meta(id: &str) -> TaskMeta {
    TaskMeta {
        task_id: id.into(),
        objective: format!("objective of {id}"),
        workspace: "/tmp/ws".into(),
        team: None,
        state: TaskState::Queued,
        created_at: AT.into(),
        updated_at: AT.into(),
        result: None,
        error: None,
        node: None,
        budget: None,
        resume_at: None,
        ask: Vec::new(),
    }
}

fn started(objective: &str) -> EventKind {
    EventKind::TaskStarted { objective: objective.into() }
}

#[test]
fn records_are_numbered_from_one_per_task_and_read_in_order() {
    let (_dir, store) = open();
    for i in 1..=5u64 {
        assert_eq!(store.append("a", &msg("lead", &format!("a{i}"))).unwrap(), i);
    }
    assert_eq!(store.append("b", &msg("lead", "b1")).unwrap(), 1);
    assert_eq!(store.append("a", &msg("lead", "a6")).unwrap(), 6);

    let all = store.records("a", 0, usize::MAX).unwrap();
    assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(all[2].1, msg("lead", "a3"));
    assert_eq!(store.records("b", 0, 100).unwrap(), vec![(1, msg("lead", "b1"))]);
    assert!(store.records("nobody", 0, 100).unwrap().is_empty());

    let page = store.records("a", 2, 3).unwrap();
    assert_eq!(page.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![3, 4, 5]);
    assert!(store.records("a", 6, 10).unwrap().is_empty());
    assert!(store.records("a", 0, 0).unwrap().is_empty());
    assert!(store.records("a", u64::MAX, 10).unwrap().is_empty());
}

#[test]
fn events_are_numbered_separately_and_also_logged_as_records() {
    let (_dir, store) = open();
    store.append("t", &msg("lead", "hello")).unwrap();
    let e1 = store.append_event("t", &Role::Lead, AT, started("x")).unwrap();
    let e2 = store
        .append_event(
            "t",
            &Role::Lead,
            AT,
            EventKind::ToolCalled { tool: "read_file".into(), call_id: "c1".into(), checkpoint: None },
        )
        .unwrap();
    let other = store.append_event("u", &Role::Lead, AT, started("y")).unwrap();
    assert_eq!((e1.seq, e2.seq, other.seq), (1, 2, 1));
    assert_eq!(e1.task_id, "t");
    assert_eq!(e1.role, Role::Lead);
    assert_eq!(e1.at, AT);

    assert_eq!(store.events("t", 0, 10).unwrap(), vec![e1.clone(), e2.clone()]);
    assert_eq!(store.events("t", 1, 10).unwrap(), vec![e2.clone()]);
    assert_eq!(store.events("t", 0, 1).unwrap(), vec![e1.clone()]);
    assert_eq!(store.last_event_seq("t").unwrap(), 2);
    assert_eq!(store.last_event_seq("u").unwrap(), 1);
    assert_eq!(store.last_event_seq("nobody").unwrap(), 0);

    let records = store.records("t", 0, 10).unwrap();
    assert_eq!(
        records,
        vec![(1, msg("lead", "hello")), (2, Record::Event { event: e1 }), (3, Record::Event { event: e2 })]
    );
    assert_eq!(store.append("t", &msg("lead", "after")).unwrap(), 4);
}

#[test]
fn reopen_keeps_everything_and_seqs_continue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path).unwrap();
        store.put_task(&meta("t1")).unwrap();
        store.append("t1", &msg("lead", "one")).unwrap();
        store.append_event("t1", &Role::Lead, AT, started("x")).unwrap();
        store.set_setting("compact_at", &serde_json::json!(75)).unwrap();
        store
            .set_window("local", "qwen", Window { tokens: Tokens(16384), source: WindowSource::Error })
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.task("t1").unwrap(), Some(meta("t1")));
    assert_eq!(store.records("t1", 0, 10).unwrap().len(), 2);
    assert_eq!(store.events("t1", 0, 10).unwrap().len(), 1);
    assert_eq!(store.last_event_seq("t1").unwrap(), 1);
    assert_eq!(store.setting("compact_at").unwrap(), Some(serde_json::json!(75)));
    assert_eq!(
        store.window("local", "qwen").unwrap(),
        Some(Window { tokens: Tokens(16384), source: WindowSource::Error })
    );

    assert_eq!(store.append("t1", &msg("lead", "two")).unwrap(), 3);
    assert_eq!(store.append_event("t1", &Role::Lead, AT, started("again")).unwrap().seq, 2);
    assert_eq!(
        store.records("t1", 0, 10).unwrap().iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}

#[test]
fn a_second_open_of_the_same_directory_is_refused_with_its_path() {
    let (dir, _store) = open();
    let path = dir.path().join("db");
    match Store::open(&path) {
        Err(err @ StoreError::Open { .. }) => {
            assert!(err.to_string().contains(&path.display().to_string()), "{err}");
        }
        other => panic!("expected StoreError::Open, got {other:?}"),
    }
}

#[test]
fn concurrent_appends_to_one_task_get_unique_contiguous_seqs() {
    let (_dir, store) = open();
    const THREADS: u64 = 8;
    const EACH: u64 = 50;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for i in 0..EACH {
                    if i % 5 == 0 {
                        let e =
                            store.append_event("t", &Role::from(format!("r{t}")), AT, started("x")).unwrap();
                        got.push(('e', e.seq));
                    } else {
                        got.push(('r', store.append("t", &msg(&format!("r{t}"), &i.to_string())).unwrap()));
                    }
                }
                got
            })
        })
        .collect();
    let got: Vec<(char, u64)> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let events = THREADS * EACH / 5;
    let mut event_seqs: Vec<u64> = got.iter().filter(|(k, _)| *k == 'e').map(|(_, s)| *s).collect();
    event_seqs.sort_unstable();
    assert_eq!(event_seqs, (1..=events).collect::<Vec<_>>());
    let record_seqs: HashSet<u64> = got.iter().filter(|(k, _)| *k == 'r').map(|(_, s)| *s).collect();
    assert_eq!(record_seqs.len() as u64, THREADS * EACH - events);

    let records = store.records("t", 0, usize::MAX).unwrap();
    assert_eq!(records.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (1..=THREADS * EACH).collect::<Vec<_>>());
    // Every event record sits under a record seq no message took, and the event index matches.
    let logged_events: Vec<u64> = records
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Event { event } => Some(event.seq),
            _ => None,
        })
        .collect();
    assert_eq!(logged_events, (1..=events).collect::<Vec<_>>());
    assert_eq!(store.events("t", 0, usize::MAX).unwrap().len() as u64, events);
}

#[test]
fn history_starts_at_the_latest_checkpoint() {
    let (_dir, store) = open();
    store.append("t", &msg("lead", "a")).unwrap();
    store.append("t", &msg("coder", "x")).unwrap();
    store.append_event("t", &Role::Lead, AT, started("o")).unwrap();
    store
        .append(
            "t",
            &Record::Checkpoint {
                role: "lead".into(),
                subtype: agentd_protocol::CheckpointKind::Compaction,
                history: vec![Message::user("summary")],
                archive_id: Some("ev1".into()),
            },
        )
        .unwrap();
    store.append("t", &msg("lead", "b")).unwrap();
    store
        .append(
            "t",
            &Record::Settings {
                role: "reviewer".into(),
                settings: agentd_protocol::TurnSettings { compact_at: 80, ..Default::default() },
            },
        )
        .unwrap();

    assert_eq!(
        store.history("t", &Role::from("lead")).unwrap(),
        vec![Message::user("summary"), Message::user("b")]
    );
    assert_eq!(store.history("t", &Role::from("coder")).unwrap(), vec![Message::user("x")]);
    assert!(store.history("t", &Role::from("reviewer")).unwrap().is_empty());
    assert_eq!(store.roles("t").unwrap(), vec![Role::Lead, Role::Coder]);
}

#[test]
fn tasks_round_trip_and_update() {
    let (_dir, store) = open();
    store.put_task(&meta("0002")).unwrap();
    store.put_task(&meta("0001")).unwrap();
    assert_eq!(store.task("nope").unwrap(), None);
    let ids: Vec<String> = store.tasks().unwrap().into_iter().map(|m| m.task_id).collect();
    assert_eq!(ids, vec!["0001", "0002"]);

    let updated = store
        .update_task("0001", |m| {
            m.state = TaskState::Finished;
            m.result = Some("done".into());
            m.task_id = "hijack".into();
        })
        .unwrap();
    assert_eq!(updated.state, TaskState::Finished);
    assert_eq!(updated.task_id, "0001");
    assert_eq!(store.task("0001").unwrap(), Some(updated));
    assert_eq!(store.task("hijack").unwrap(), None);

    match store.update_task("missing", |m| m.state = TaskState::Failed) {
        Err(StoreError::UnknownTask(id)) => assert_eq!(id, "missing"),
        other => panic!("expected UnknownTask, got {other:?}"),
    }
    assert_eq!(store.task("missing").unwrap(), None);
}

#[test]
fn settings_and_windows_round_trip() {
    let (_dir, store) = open();
    assert_eq!(store.setting("k").unwrap(), None);
    store.set_setting("k", &serde_json::json!({"a": [1, 2]})).unwrap();
    assert_eq!(store.setting("k").unwrap(), Some(serde_json::json!({"a": [1, 2]})));
    store.set_setting("k", &serde_json::json!("replaced")).unwrap();
    assert_eq!(store.setting("k").unwrap(), Some(serde_json::json!("replaced")));

    assert_eq!(store.window("s", "m").unwrap(), None);
    store.set_window("s", "m", Window::assumed()).unwrap();
    store.set_window("s", "m2", Window { tokens: Tokens(8192), source: WindowSource::Declared }).unwrap();
    assert_eq!(store.window("s", "m").unwrap(), Some(Window::assumed()));
    assert_eq!(store.window("s", "m2").unwrap().map(|w| w.tokens), Some(Tokens(8192)));
    assert_eq!(store.window("s2", "m").unwrap(), None);
}

#[test]
fn corrupt_values_are_reported_with_tree_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path).unwrap();
        store.put_task(&meta("good")).unwrap();
        store.append("t", &msg("lead", "fine")).unwrap();
    }
    {
        // Damage the data behind the store's back.
        let db = sled::open(&path).unwrap();
        db.open_tree("tasks").unwrap().insert("bad", &b"{not json"[..]).unwrap();
        let mut key = b"t/r".to_vec();
        key.extend_from_slice(&2u64.to_be_bytes());
        db.open_tree("log").unwrap().insert(key, &b"\xff\x00"[..]).unwrap();
        db.open_tree("settings").unwrap().insert("s", &b""[..]).unwrap();
        db.open_tree("windows").unwrap().insert("srv\nm", &b"[1]"[..]).unwrap();
        db.flush().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let corrupt = |r: Result<_, StoreError>| match r {
        Err(StoreError::Corrupt { tree, key, .. }) => (tree, key),
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(_) => panic!("expected Corrupt, got a value"),
    };
    assert_eq!(corrupt(store.task("bad").map(drop)), ("tasks", "bad".to_string()));
    assert_eq!(corrupt(store.tasks().map(drop)), ("tasks", "bad".to_string()));
    assert_eq!(store.task("good").unwrap(), Some(meta("good")));
    assert_eq!(corrupt(store.records("t", 0, 10).map(drop)), ("log", "t/r/2".to_string()));
    assert_eq!(store.records("t", 0, 1).unwrap().len(), 1);
    assert_eq!(corrupt(store.history("t", &Role::from("lead")).map(drop)), ("log", "t/r/2".to_string()));
    assert_eq!(corrupt(store.setting("s").map(drop)), ("settings", "s".to_string()));
    assert_eq!(corrupt(store.window("srv", "m").map(drop)), ("windows", "srv\nm".to_string()));
    let err = store.setting("s").unwrap_err().to_string();
    assert!(err.contains("corrupt record s in settings"), "{err}");
    // Appending continues after the damaged entry rather than overwriting it.
    assert_eq!(store.append("t", &msg("lead", "next")).unwrap(), 3);
}

#[test]
fn task_ids_that_extend_another_do_not_leak_into_its_log() {
    let (_dir, store) = open();
    store.append("a", &msg("lead", "a1")).unwrap();
    store.append("a/r", &msg("lead", "x1")).unwrap();
    store.append("a/r", &msg("lead", "x2")).unwrap();
    assert_eq!(store.append("a", &msg("lead", "a2")).unwrap(), 2);
    assert_eq!(store.records("a", 0, 10).unwrap().len(), 2);
    assert_eq!(store.records("a/r", 0, 10).unwrap().len(), 2);
}
