//! What does a checkpoint cost? Figures, printed (this is a benchmark, not a test).
//!
//! ```text
//! cargo run --release --example bench_checkpoints
//! ```
//!
//! The benchmarks' workspace of 10,000 files and about 200 MB (`common::workspace`) is written to a
//! temporary directory; the checkpoints go to a real store (sled and its blob files, as the daemon
//! keeps them, `agentd_daemon::storage::SledStorage`) on the same filesystem. Measured:
//!
//! 1. The first checkpoint of the workspace (every file read, hashed and stored), then one with
//!    nothing changed, then one after a call that changed one file: the time, the files read, and
//!    the objects and bytes stored — what a writing call costs before and after it.
//! 2. A task of 100 writing calls, each changing 3 files (a fourth of them creating one, a tenth
//!    deleting one): the two checkpoints around each call and its `files_changed` (as an agent records
//!    them), then `task.diff` of the whole task (the unified diff of every file it touched), a
//!    `--stat` one, and `task.revert --to` the first call (every file put back), checked byte for byte.
//!
//! Warm figures: the files were just written and are in the page cache (their dirty pages written
//! back first, `sync`).

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_agents::Workspace;
use agentd_daemon::bus::EventBus;
use agentd_daemon::ends::Ends;
use agentd_daemon::storage::{DaemonStorage, SledStorage};
use agentd_engine::checkpoints::{self, Checkpoints};
use agentd_engine::storage::Storage;
use agentd_evidence::Store;
use agentd_policies::redact::Redactor;
use agentd_protocol::rpc::{DiffParams, RevertParams};
use agentd_protocol::{EventKind, Role, TaskMeta, TaskState, ToolName};
use common::workspace::build_workspace;
use common::{group, mb, ms};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CALLS: usize = 100;
const TASK: &str = "bench-checkpoints";

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_checkpoints: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let ws = tmp.path().join("workspace");
    let t = Instant::now();
    let (files, bytes) = build_workspace(&ws)?;
    println!(
        "bench_checkpoints: {} files, {:.1} MB, written in {}",
        group(files as u64),
        mb(bytes),
        ms(t.elapsed())
    );
    let _ = Command::new("sync").status();
    let store = Store::open(&tmp.path().join("home/db")).map_err(|e| format!("open store: {e}"))?;
    let (live, _) = tokio::sync::broadcast::channel(16);
    let storage = SledStorage::new(store.clone(), EventBus::new(store, live), Arc::new(Ends::default()));
    storage.create_task(&task(&ws)).map_err(|e| e.to_string())?;
    let checkpoints = Checkpoints::new(checkpoints::DEFAULT_MAX_BYTES, Redactor::default());

    println!("\n== checkpoints of the workspace");
    let (t, first) = timed(|| checkpoints.take_blocking(&storage, &ws));
    let first = first.map_err(|e| e.to_string())?;
    row(
        &format!(
            "first: {} read, {} objects, {:.1} MB stored",
            group(first.read),
            group(first.stored),
            mb(first.stored_bytes as usize)
        ),
        t,
    );
    let (t, same) = timed(|| checkpoints.take_blocking(&storage, &ws));
    let same = same.map_err(|e| e.to_string())?;
    row(&format!("nothing changed: {} read, {} stored", same.read, same.stored), t);
    assert_eq!(same.tree, first.tree);
    let one = ws.join("d42/s3/f0.rs");
    let text = fs::read_to_string(&one).map_err(|e| e.to_string())?;
    fs::write(&one, format!("{text}// one more line\n")).map_err(|e| e.to_string())?;
    let (t, after) = timed(|| checkpoints.take_blocking(&storage, &ws));
    let after = after.map_err(|e| e.to_string())?;
    row(
        &format!(
            "one file changed: {} read, {} objects, {} bytes stored",
            after.read,
            after.stored,
            group(after.stored_bytes)
        ),
        t,
    );
    let fresh = Checkpoints::new(checkpoints::DEFAULT_MAX_BYTES, Redactor::default());
    let (t, again) = timed(|| fresh.take_blocking(&storage, &ws));
    let again = again.map_err(|e| e.to_string())?;
    row(&format!("after a restart (nothing known): {} read, {} stored", group(again.read), again.stored), t);

    println!("\n== a task of {CALLS} writing calls, 3 files each");
    let before_task = snapshot_files(&ws)?;
    let mut around = Vec::with_capacity(CALLS);
    let mut first_call = 0;
    for call in 0..CALLS {
        let t = Instant::now();
        let before = checkpoints.take_blocking(&storage, &ws).map_err(|e| e.to_string())?;
        let called = EventKind::ToolCalled {
            tool: ToolName::RunCommand,
            call_id: format!("c{call}"),
            checkpoint: Some(before.tree.clone()),
        };
        let seq = storage.emit(TASK, &Role::Coder, called).map_err(|e| e.to_string())?.seq;
        if call == 0 {
            first_call = seq;
        }
        change_files(&ws, call)?;
        let after = checkpoints.take_blocking(&storage, &ws).map_err(|e| e.to_string())?;
        let change = checkpoints::change(&storage, &before.tree, &after.tree).map_err(|e| e.to_string())?;
        let kind = EventKind::FilesChanged {
            call_id: format!("c{call}"),
            tool: ToolName::RunCommand,
            call_seq: seq,
            change: Box::new(change),
            working_copy: None,
            interrupted: false,
        };
        storage.emit(TASK, &Role::Coder, kind).map_err(|e| e.to_string())?;
        around.push(t.elapsed());
    }
    around.sort();
    row("checkpoints and files_changed of a call (median)", around[CALLS / 2]);
    row("                                        (p90)", around[CALLS * 9 / 10]);
    let params = |stat| DiffParams { task_id: TASK.into(), since: None, role: None, call: None, stat };
    let (t, diff) = timed(|| checkpoints::diff(&storage, &params(false)));
    let diff = diff.map_err(|e| e.to_string())?;
    row(
        &format!(
            "diff: {} files, +{} -{}, {:.1} KB of diff",
            diff.files.len(),
            diff.lines_added,
            diff.lines_removed,
            diff.unified.len() as f64 / 1024.0
        ),
        t,
    );
    let (t, stat) = timed(|| checkpoints::diff(&storage, &params(true)));
    stat.map_err(|e| e.to_string())?;
    row("diff --stat", t);
    let workspace = Workspace::new(&ws).map_err(|e| e.to_string())?;
    let revert = RevertParams { task_id: TASK.into(), to: Some(first_call - 1), call: None, force: false };
    let (t, reverted) = timed(|| {
        checkpoints::revert(
            &storage,
            (checkpoints::DEFAULT_MAX_BYTES, &Redactor::default()),
            &workspace,
            &revert,
        )
    });
    let reverted = reverted.map_err(|e| e.to_string())?;
    row(&format!("revert --to before the first call: {} files put back", reverted.files.len()), t);
    if snapshot_files(&ws)? != before_task {
        return Err("the revert did not put the workspace back as it was".into());
    }
    println!("  (the workspace is back byte for byte)");
    let objects = store_bytes(&tmp.path().join("home/evidence"))?;
    println!(
        "\nstore: {:.1} MB of objects for {} MB of workspace and {CALLS} calls",
        mb(objects as usize),
        mb(bytes).round()
    );
    Ok(())
}

fn task(ws: &Path) -> TaskMeta {
    TaskMeta {
        task_id: TASK.into(),
        objective: "benchmark".into(),
        workspace: ws.display().to_string(),
        team: None,
        state: TaskState::Finished,
        created_at: "2026-12-05T00:00:00.000Z".into(),
        updated_at: "2026-12-05T00:00:00.000Z".into(),
        result: None,
        error: None,
        node: None,
        budget: None,
        resume_at: None,
        ask: Vec::new(),
    }
}

/// Call `n`'s change: a line appended to two files and replaced in a third, a new file every fourth
/// call, a deletion every tenth.
fn change_files(ws: &Path, n: usize) -> Result<(), String> {
    for (k, file) in [(0, n * 7), (1, n * 13 + 5), (2, n * 31 + 11)] {
        let path = ws.join(format!("d{:02}/s{}/f{}.rs", file % 100, (file / 100) % 10, (file / 7) % 10));
        let text = fs::read_to_string(&path).unwrap_or_default();
        let edited = if k == 2 {
            let rest = text.split_once('\n').map_or("", |(_, rest)| rest);
            format!("// call {n} replaced this line\n{rest}")
        } else {
            format!("{text}// call {n} was here\n")
        };
        fs::write(&path, edited).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if n.is_multiple_of(4) {
        fs::write(ws.join(format!("d{:02}/new_{n}.rs", n % 100)), format!("// made by call {n}\n"))
            .map_err(|e| e.to_string())?;
    }
    if n % 10 == 9 {
        let gone = ws.join(format!("d{:02}/s9/f9.rs", (n * 3) % 100));
        let _ = fs::remove_file(gone);
    }
    Ok(())
}

/// Every file of the workspace, path and bytes and mode.
fn snapshot_files(root: &Path) -> Result<Vec<(PathBuf, Vec<u8>, u32)>, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| e.to_string())? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let md = fs::symlink_metadata(&path).map_err(|e| e.to_string())?;
            if md.is_dir() {
                dirs.push(path);
            } else {
                let bytes = fs::read(&path).map_err(|e| e.to_string())?;
                out.push((path, bytes, md.permissions().mode()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The bytes of every blob file under `dir`.
fn store_bytes(dir: &Path) -> Result<u64, String> {
    let mut total = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let md = entry.metadata().map_err(|e| e.to_string())?;
            if md.is_dir() {
                dirs.push(entry.path());
            } else {
                total += md.len();
            }
        }
    }
    Ok(total)
}

fn row(label: &str, t: Duration) {
    println!("  {label:<68}{:>12}", ms(t));
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed(), out)
}
