//! The evidence archive through the store's public API: blobs stored once per content and read back
//! by bytes and by lines, pages deep in a large blob, incomplete evidence marked, altered or missing
//! blobs reported and never served, and the whole-file fallback when the database cannot take a record.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use agentd_evidence::{write_fallback, BlobProblem, EvidenceError, Store};
use agentd_protocol::evidence::{EvidenceMeta, NewEvidence, Source, Stored, Unit};
use agentd_protocol::task::EVIDENCE_FOLDER;
use std::fs;
use std::path::{Path, PathBuf};

const AT: &str = "2026-01-01T00:00:00.000Z";

struct Env {
    dir: tempfile::TempDir,
    store: Store,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        Env { dir, store }
    }

    fn fallback_dir(&self) -> PathBuf {
        self.dir.path().join("workspace").join(EVIDENCE_FOLDER)
    }

    fn put(&self, task: &str, data: &[u8]) -> EvidenceMeta {
        match self.store.put_evidence(new(task, data), &self.fallback_dir()).unwrap() {
            Stored::InStore(meta) => meta,
            other => panic!("not stored: {other:?}"),
        }
    }

    /// Drops the store and opens the same directories again: a new process's view.
    fn reopen(self) -> Env {
        let Env { dir, store } = self;
        drop(store);
        let store = Store::open(&dir.path().join("db")).unwrap();
        Env { dir, store }
    }
}

fn source(task: &str) -> Source {
    Source {
        task_id: task.into(),
        role: "coder".into(),
        tool: "run_command".into(),
        call_id: Some("call-1".into()),
        detail: Some("cargo test".into()),
    }
}

fn new<'a>(task: &str, data: &'a [u8]) -> NewEvidence<'a> {
    NewEvidence {
        data,
        media_type: "text/plain",
        source: source(task),
        complete: true,
        incomplete_reason: None,
        created_at: AT,
    }
}

/// Every regular file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn blob_path(store: &Store, meta: &EvidenceMeta) -> PathBuf {
    store.blob_path(&meta.sha256).unwrap()
}

/// Rewrites a blob in place (same size), as a person or a bug would.
fn tamper(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(path).unwrap();
    f(&mut bytes);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    }
    fs::write(path, bytes).unwrap();
}

#[test]
fn put_then_read_back_by_bytes_and_by_lines() {
    let env = Env::new();
    let data = b"first line\nsecond line\nthird, unterminated";
    let meta = env.put("task-a", data);

    assert!(meta.id.starts_with("ev-"));
    assert_eq!(meta.bytes, data.len() as u64);
    assert_eq!(meta.lines, 3);
    assert_eq!(meta.sha256.len(), 64);
    assert_eq!(meta.source, source("task-a"));
    assert_eq!(meta.created_at, AT);
    assert!(meta.complete);
    assert_eq!(env.store.evidence(&meta.id).unwrap(), meta);

    let blob = blob_path(&env.store, &meta);
    assert!(blob.starts_with(env.dir.path().join("evidence")));
    assert_eq!(fs::read(&blob).unwrap(), data);

    let page = env.store.read_evidence(&meta.id, 6, 10, Unit::Bytes).unwrap();
    assert_eq!(page.data, "line\nsecon");
    assert_eq!((page.offset, page.len), (6, 10));
    assert_eq!(page.total_bytes, data.len() as u64);
    assert_eq!(page.next_offset, Some(16));
    assert!(page.complete);

    let page = env.store.read_evidence(&meta.id, 1, 5, Unit::Lines).unwrap();
    assert_eq!(page.data, "second line\nthird, unterminated");
    assert_eq!((page.offset, page.len, page.next_offset), (1, 2, None));

    // Walking pages by next_offset gives back the whole blob.
    let mut all = String::new();
    let mut at = Some(0);
    while let Some(offset) = at {
        let page = env.store.read_evidence(&meta.id, offset, 7, Unit::Bytes).unwrap();
        all.push_str(&page.data);
        at = page.next_offset;
    }
    assert_eq!(all.as_bytes(), data);
}

#[test]
fn empty_pages_and_unknown_ids() {
    let env = Env::new();
    let meta = env.put("t", b"a\nb\n");
    for unit in [Unit::Bytes, Unit::Lines] {
        let page = env.store.read_evidence(&meta.id, 1, 0, unit).unwrap();
        assert_eq!((page.data.as_str(), page.len), ("", 0));
        assert_eq!(page.next_offset, Some(1), "limit 0 at {unit:?}");
        let page = env.store.read_evidence(&meta.id, 100, 10, unit).unwrap();
        assert_eq!((page.data.as_str(), page.len, page.next_offset), ("", 0, None));
    }
    match env.store.evidence("ev-nope") {
        Err(EvidenceError::UnknownEvidence(id)) => assert_eq!(id, "ev-nope"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        env.store.read_evidence("ev-nope", 0, 10, Unit::Bytes),
        Err(EvidenceError::UnknownEvidence(_))
    ));
}

#[test]
fn empty_evidence_is_stored_and_read() {
    let env = Env::new();
    let meta = env.put("t", b"");
    assert_eq!((meta.bytes, meta.lines), (0, 0));
    let page = env.store.read_evidence(&meta.id, 0, 10, Unit::Lines).unwrap();
    assert_eq!((page.data.as_str(), page.next_offset), ("", None));
    assert!(env.store.verify_evidence().unwrap().is_empty());
}

#[test]
fn identical_content_is_stored_once_with_a_record_per_source() {
    let env = Env::new();
    let a = env.put("task-a", b"same output\n");
    let b = env.put("task-b", b"same output\n");
    assert_ne!(a.id, b.id);
    assert_eq!(a.sha256, b.sha256);
    assert_eq!(b.source.task_id, "task-b");
    assert_eq!(files(env.store.blob_dir()), vec![blob_path(&env.store, &a)]);
    for meta in [&a, &b] {
        let page = env.store.read_evidence(&meta.id, 0, 100, Unit::Bytes).unwrap();
        assert_eq!(page.data, "same output\n");
    }
    let ids: Vec<_> = env.store.evidence_list(None).unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(ids, vec![a.id, b.id]);
}

#[test]
fn listing_filters_by_task_in_creation_order() {
    let env = Env::new();
    let a1 = env.put("a", b"1");
    let b1 = env.put("b", b"2");
    let a2 = env.put("a", b"3");
    // A task whose id starts with another's is not mixed in.
    let ab = env.put("ab", b"4");
    assert_eq!(env.store.evidence_list(Some("a")).unwrap(), vec![a1, a2]);
    assert_eq!(env.store.evidence_list(Some("b")).unwrap(), vec![b1]);
    assert_eq!(env.store.evidence_list(Some("ab")).unwrap(), vec![ab]);
    assert!(env.store.evidence_list(Some("zzz")).unwrap().is_empty());
    assert_eq!(env.store.evidence_list(None).unwrap().len(), 4);
}

#[test]
fn records_and_blobs_survive_a_reopen() {
    let env = Env::new();
    let meta = env.put("t", b"kept\n");
    let env = env.reopen();
    assert_eq!(env.store.evidence(&meta.id).unwrap(), meta);
    let page = env.store.read_evidence(&meta.id, 0, 1, Unit::Lines).unwrap();
    assert_eq!(page.data, "kept\n");
}

#[test]
fn incomplete_evidence_says_so() {
    let env = Env::new();
    let stored = env
        .store
        .put_evidence(
            NewEvidence {
                complete: false,
                incomplete_reason: Some("killed at its timeout of 30 s".into()),
                ..new("t", b"partial out")
            },
            &env.fallback_dir(),
        )
        .unwrap();
    let meta = stored.meta().clone();
    assert!(stored.fallback_path().is_none());
    assert!(!meta.complete);
    assert_eq!(meta.incomplete_reason.as_deref(), Some("killed at its timeout of 30 s"));
    let page = env.store.read_evidence(&meta.id, 0, 100, Unit::Bytes).unwrap();
    assert!(!page.complete);

    // A complete record serialises without the reason; an incomplete one with it.
    let complete = env.put("t", b"whole");
    let json = serde_json::to_value(&complete).unwrap();
    assert!(json.get("incomplete_reason").is_none());
    let json = serde_json::to_value(&meta).unwrap();
    assert_eq!(json["incomplete_reason"], "killed at its timeout of 30 s");
    let back: EvidenceMeta = serde_json::from_value(json).unwrap();
    assert_eq!(back, meta);
}

/// ~20 MB of numbered lines: a page near the end comes back right, through the line index.
#[test]
fn a_page_deep_in_a_large_blob() {
    let env = Env::new();
    let total_lines = 1_500_000u64;
    let mut data = Vec::with_capacity(21_000_000);
    for i in 0..total_lines {
        data.extend_from_slice(format!("line {i:08}\n").as_bytes());
    }
    assert!(data.len() > 20_000_000);
    let meta = env.put("big", &data);
    assert_eq!(meta.lines, total_lines);

    let page = env.store.read_evidence(&meta.id, total_lines - 3, 10, Unit::Lines).unwrap();
    assert_eq!(page.data, "line 01499997\nline 01499998\nline 01499999\n");
    assert_eq!((page.offset, page.len, page.next_offset), (1_499_997, 3, None));

    let page = env.store.read_evidence(&meta.id, 1_234_567, 2, Unit::Lines).unwrap();
    assert_eq!(page.data, "line 01234567\nline 01234568\n");
    assert_eq!(page.next_offset, Some(1_234_569));

    let page = env.store.read_evidence(&meta.id, 14 * 999_999, 14, Unit::Bytes).unwrap();
    assert_eq!(page.data, "line 00999999\n");

    // The same after a restart (the first read in a process re-hashes the blob once).
    let env = env.reopen();
    let page = env.store.read_evidence(&meta.id, 777_777, 1, Unit::Lines).unwrap();
    assert_eq!(page.data, "line 00777777\n");
}

#[test]
fn an_altered_blob_is_reported_and_never_served() {
    let env = Env::new();
    let meta = env.put("t", b"the true output\n");
    let other = env.put("t", b"untouched\n");
    env.store.read_evidence(&meta.id, 0, 4, Unit::Bytes).unwrap();

    let path = blob_path(&env.store, &meta);
    tamper(&path, |b| b[4] = b'T');

    // Caught by the very next read of this process (the file was rewritten)...
    match env.store.read_evidence(&meta.id, 0, 4, Unit::Bytes) {
        Err(EvidenceError::Integrity { id, expected, actual }) => {
            assert_eq!(id, meta.id);
            assert_eq!(expected, meta.sha256);
            assert_ne!(actual, meta.sha256);
        }
        other => panic!("{other:?}"),
    }
    // ...by verify, which names it and only it...
    let problems = env.store.verify_evidence().unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].id, meta.id);
    assert_eq!(problems[0].path, path);
    let BlobProblem::Altered { actual } = &problems[0].problem else {
        panic!("{problems:?}");
    };
    let err = env.store.read_evidence(&meta.id, 0, 4, Unit::Lines).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("evidence {} is altered on disk: sha256 {actual}, recorded {}", meta.id, meta.sha256)
    );
    assert!(problems[0].to_string().contains(&meta.id));

    // ...after forgetting what was verified, and in a new process.
    env.store.forget_verified_blobs();
    assert!(matches!(
        env.store.read_evidence(&meta.id, 0, 4, Unit::Bytes),
        Err(EvidenceError::Integrity { .. })
    ));
    let env = env.reopen();
    assert!(matches!(
        env.store.read_evidence(&meta.id, 0, 100, Unit::Lines),
        Err(EvidenceError::Integrity { .. })
    ));
    assert_eq!(env.store.read_evidence(&other.id, 0, 100, Unit::Bytes).unwrap().data, "untouched\n");

    // Storing the same content again repairs the blob.
    env.put("t", b"the true output\n");
    assert!(env.store.verify_evidence().unwrap().is_empty());
    assert_eq!(env.store.read_evidence(&meta.id, 0, 100, Unit::Bytes).unwrap().data, "the true output\n");
}

#[test]
fn an_altered_blob_in_a_fresh_process_is_caught_on_first_read() {
    let env = Env::new();
    let meta = env.put("t", b"0123456789\n");
    let env = env.reopen();
    tamper(&blob_path(&env.store, &meta), |b| b[0] = b'X');
    assert!(matches!(
        env.store.read_evidence(&meta.id, 5, 1, Unit::Bytes),
        Err(EvidenceError::Integrity { .. })
    ));
}

#[test]
fn a_missing_blob_is_named() {
    let env = Env::new();
    let a = env.put("t", b"will vanish\n");
    let b = env.put("u", b"will vanish\n");
    let path = blob_path(&env.store, &a);
    fs::remove_file(&path).unwrap();

    let problems = env.store.verify_evidence().unwrap();
    let named: Vec<_> = problems.iter().map(|p| (p.id.clone(), p.problem.clone())).collect();
    assert_eq!(named, vec![(a.id.clone(), BlobProblem::Missing), (b.id, BlobProblem::Missing)]);
    match env.store.read_evidence(&a.id, 0, 10, Unit::Bytes) {
        Err(EvidenceError::Missing { id, path: p }) => {
            assert_eq!(id, a.id);
            assert_eq!(p, path);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_db_that_cannot_hold_the_record_gets_a_whole_fallback_file() {
    let env = Env::new();
    env.store.fail_evidence_inserts(true);
    let data = b"{\"output\": \"everything\"}";
    let stored = env
        .store
        .put_evidence(NewEvidence { media_type: "application/json", ..new("t", data) }, &env.fallback_dir())
        .unwrap();
    let Stored::Fallback { path, meta } = stored else {
        panic!("{stored:?}");
    };
    assert_eq!(path, env.fallback_dir().join(format!("{}.json", meta.id)));
    assert_eq!(fs::read(&path).unwrap(), data);
    assert_eq!(meta.bytes, data.len() as u64);
    assert!(matches!(env.store.evidence(&meta.id), Err(EvidenceError::UnknownEvidence(_))));
    assert!(env.store.evidence_list(None).unwrap().is_empty());

    env.store.fail_evidence_inserts(false);
    env.put("t", data);
    assert_eq!(env.store.evidence_list(None).unwrap().len(), 1);
}

#[test]
fn an_unwritable_blob_dir_also_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    // The blob "directory" is a file: no blob can be written.
    let blob_dir = dir.path().join("evidence");
    fs::write(&blob_dir, b"not a directory").unwrap();
    let store = Store::open_with_blobs(&dir.path().join("db"), &blob_dir).unwrap();
    let fallback = dir.path().join("ws").join(EVIDENCE_FOLDER);
    let stored = store.put_evidence(new("t", b"out\n"), &fallback).unwrap();
    let path = stored.fallback_path().expect("fell back").to_path_buf();
    assert_eq!(fs::read(path).unwrap(), b"out\n");
}

#[test]
fn when_the_fallback_fails_too_the_error_names_both_failures() {
    let env = Env::new();
    env.store.fail_evidence_inserts(true);
    // The fallback "directory" is a file.
    let fallback = env.dir.path().join("blocked");
    fs::write(&fallback, b"").unwrap();
    let err = env.store.put_evidence(new("t", b"data"), &fallback).unwrap_err();
    let EvidenceError::NotStored { path, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(path, &fallback);
    let text = err.to_string();
    assert!(text.contains("fault injection"), "{text}");
    assert!(text.contains("blocked"), "{text}");
}

#[test]
fn write_fallback_is_usable_directly() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_fallback(dir.path(), "ev-x", "text/markdown", b"# notes\n").unwrap();
    assert_eq!(path, dir.path().join("ev-x.md"));
    assert_eq!(fs::read(path).unwrap(), b"# notes\n");
}

#[test]
fn the_blob_dir_defaults_beside_the_db() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("db")).unwrap();
    assert_eq!(store.blob_dir(), dir.path().join("evidence"));
    assert_eq!(store.blob_path("../x"), None);
}
