//! A store whose writes fail (a full disk) says so, refuses writes without touching the disk, and
//! heals by reopening the database, without losing anything it acknowledged.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_evidence::{Store, StoreError};
use agentd_protocol::Role;
use agentd_protocol::{EventKind, Message, Record};
use agentd_test_support::tmpfs::Tmpfs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const AT: &str = "2026-01-01T00:00:00.000Z";

fn msg(text: &str) -> Record {
    Record::Message { role: "lead".into(), message: Message::user(text) }
}

fn step(i: usize) -> EventKind {
    EventKind::TaskMessage { text: format!("step {i}") }
}

/// Appends until `ok` holds, retrying for up to `within` (a heal is rate-limited to once a second).
fn append_when_healed(store: &Store, task: &str, text: &str, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        match store.append(task, &msg(text)) {
            Ok(seq) => return seq,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("the store did not heal within {within:?}: {e}"),
        }
    }
}

fn assert_contiguous(store: &Store, task: &str) -> (Vec<String>, u64) {
    let records = store.records(task, 0, usize::MAX).unwrap();
    for (i, (seq, _)) in records.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "record seqs are contiguous from 1");
    }
    let events = store.events(task, 0, usize::MAX).unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "event seqs are contiguous from 1");
    }
    let texts = records
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Message { message, .. } => Some(message.text()),
            _ => None,
        })
        .collect();
    (texts, events.len() as u64)
}

#[test]
fn an_injected_write_failure_marks_the_store_unhealthy_and_a_real_reopen_heals_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = Store::open(&db).unwrap();
    assert!(store.health().ok);
    assert_eq!(store.append("t", &msg("one")).unwrap(), 1);
    assert_eq!(store.append_event("t", &Role::Lead, AT, step(1)).unwrap().seq, 1);

    store.inject_write_failure();
    let e = store.append("t", &msg("refused")).unwrap_err();
    assert!(matches!(e, StoreError::Db(sled::Error::Io(_))), "{e}");
    let health = store.health();
    assert!(!health.ok && health.since.is_some(), "{health:?}");
    assert!(health.error.as_deref().unwrap_or("").contains("injected"), "{health:?}");
    assert_eq!(store.records("t", 0, 10).unwrap().len(), 2, "reads work while unhealthy");

    // A clone shares the health; the next write (here through the clone) first reopens the database
    // for every clone: the disk takes writes, so it heals at once.
    let clone = store.clone();
    assert_eq!(clone.append_event("t", &Role::Lead, AT, step(2)).unwrap().seq, 2);
    assert!(store.health().ok, "{:?}", store.health());
    assert!(store.heal());
    // Counters were reloaded from the reopened log: numbering continues with no gap and no repeat.
    assert_eq!(store.append("t", &msg("two")).unwrap(), 4, "record seq 3 is the event");
    assert_eq!(store.append_event("t", &Role::Lead, AT, step(3)).unwrap().seq, 3);
    let (texts, events) = assert_contiguous(&store, "t");
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(events, 3);
    // The reopen was real: the old handles are gone, so another store of the directory waits for
    // the new ones' lock and is refused.
    assert!(matches!(Store::open(&db), Err(StoreError::Open { .. })));

    // Everything is durable.
    drop(clone);
    drop(store);
    let store = Store::open(&db).unwrap();
    let (texts, events) = assert_contiguous(&store, "t");
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(events, 3);
}

/// Fills the file system holding `path` (a file as large as it will take).
fn fill(path: &PathBuf) {
    let _ = std::fs::write(path, vec![0x5a_u8; 64 << 20]);
}

#[test]
fn a_full_disk_fails_writes_loudly_and_freeing_space_heals_without_losing_anything() {
    let fs = match Tmpfs::mount("8m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: a_full_disk_fails_writes_loudly_and_freeing_space_heals: {why}");
            return;
        }
    };
    let db = fs.path().join("db");
    let store = Store::open(&db).unwrap();
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let text = format!("before {i}");
        store.append("t", &msg(&text)).unwrap();
        acknowledged.push(text);
    }
    let filler = fs.path().join("filler");
    fill(&filler);
    // Appends fail once sled needs space it cannot have; keep appending until one does.
    let big = "x".repeat(16 << 10);
    let mut failure = None;
    for i in 0..2000 {
        let text = format!("full {i} {big}");
        match store.append("t", &msg(&text)) {
            Ok(_) => acknowledged.push(text),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("a write fails on a full disk");
    assert!(matches!(failure, StoreError::Db(sled::Error::Io(_))), "{failure}");
    let health = store.health();
    assert!(!health.ok, "{health:?}");
    // No heal while the disk is still full: the probe fails, the old handles stay for reading.
    std::thread::sleep(Duration::from_millis(1100));
    assert!(!store.heal());
    assert!(store.health().error.unwrap_or_default().contains("reopening failed"));
    assert!(store.records("t", 0, 1).is_ok(), "reads still work while unhealthy");

    std::fs::remove_file(&filler).unwrap();
    let seq = append_when_healed(&store, "t", "after", Duration::from_secs(5));
    acknowledged.push("after".into());
    assert!(store.health().ok);
    let (texts, _) = assert_contiguous(&store, "t");
    assert_eq!(texts.last().map(String::as_str), Some("after"));
    assert_eq!(seq, texts.len() as u64);
    // Every acknowledged record is there, in order (a record that failed may or may not have
    // reached the disk: it was never acknowledged).
    let mut found = texts.iter();
    for want in &acknowledged {
        assert!(found.any(|t| t == want), "acknowledged record {:.20} is lost", want);
    }
    drop(store);
    let store = Store::open(&db).unwrap();
    let (again, _) = assert_contiguous(&store, "t");
    assert_eq!(again, texts, "everything is durable after a real reopen");
}
