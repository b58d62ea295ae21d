//! What does a working copy cost? Figures, printed (this is a benchmark, not a test).
//!
//! ```text
//! cargo run --release --example bench_copies
//! ```
//!
//! A workspace of 10,000 files and about 200 MB (8,000 small text files of 1–7 KB, 1,900 of 20–60 KB,
//! 100 of 0.5–1.3 MB, in 100 directories of 10 subdirectories) is written to a temporary directory
//! three times: as a plain directory, as a git repository (`git init`, `git add -A`, `git commit`),
//! and as a plain directory with 10,000 more files and 50 MB that git ignores (`node_modules/`, 5 KB
//! each: 20,001 files, 250 MB in all) — a copy holds those too, and what the branch writes there (100
//! build outputs) comes back in its patch. For each:
//!
//! 1. `make_copy` of the workspace, twice: the base and the writer's copy (agentd_agents::copies).
//! 2. For the git one, the comparison the design asked about: `git worktree add --detach` of the
//!    same tree, then `git worktree remove --force`.
//! 3. 10 files edited in the copy (5 appended to, 5 with a line replaced), then `changes` (the
//!    patch), `merge` into the workspace, and `std::fs::remove_dir_all` of the copy and of the base.
//!
//! The filesystem type is printed (`stat -f -c %T`): on btrfs or XFS `make_copy`'s
//! `copy_file_range` shares extents (a reflink), elsewhere (ext4, tmpfs) it copies the bytes in the
//! kernel. The files were just written, so they are in the page cache: these are warm figures (the
//! workspace's dirty pages are written back, `sync`, before the measured steps).

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_agents::copies::{changes, make_copy, merge};
use agentd_agents::Workspace;
use common::workspace::{build_workspace, DIRS, SUBDIRS};
use common::{group, mb, ms};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const EDITS: usize = 10;
/// Build outputs the branch writes where git ignores them, in the third workspace.
const OUTPUTS: usize = 100;
/// Files and bytes of `node_modules/` in the third workspace: 10,000 of 5 KB.
const IGNORED_FILES: usize = 10_000;
const IGNORED_BYTES: usize = 5 * 1024;

/// `node_modules/` of `IGNORED_FILES` files in 100 packages, ignored by the workspace's `.gitignore`;
/// its files and bytes.
fn add_ignored(ws: &Path) -> Result<(usize, usize), String> {
    let mut gitignore = fs::read_to_string(ws.join(".gitignore")).map_err(|e| e.to_string())?;
    gitignore.push_str("node_modules/\n");
    fs::write(ws.join(".gitignore"), gitignore).map_err(|e| e.to_string())?;
    for i in 0..IGNORED_FILES {
        let dir = ws.join(format!("node_modules/pkg{:03}", i % 100));
        if i < 100 {
            fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        }
        let body = format!("module.exports = {i};\n").repeat(IGNORED_BYTES / 16 + 1);
        fs::write(dir.join(format!("m{i}.js")), &body[..IGNORED_BYTES]).map_err(|e| e.to_string())?;
    }
    Ok((IGNORED_FILES, IGNORED_FILES * IGNORED_BYTES))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_copies: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let fs_type = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(tmp.path())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    println!("bench_copies: working copies of a 10,000-file workspace (and of 20,001 files, 50 MB of them ignored)");
    println!("temporary directory {} on a {fs_type} filesystem", tmp.path().display());
    println!(
        "(reflink: {})\n",
        if ["btrfs", "xfs"].contains(&fs_type.as_str()) {
            "possible, copy_file_range may share extents"
        } else {
            "not on this filesystem, copy_file_range copies the bytes in the kernel"
        }
    );
    for (git, ignored) in [(false, false), (true, false), (false, true)] {
        let root = tmp.path().join(match (git, ignored) {
            (true, _) => "git",
            (_, true) => "ignored",
            _ => "plain",
        });
        let ws = root.join("workspace");
        let started = Instant::now();
        let (mut files, mut bytes) = build_workspace(&ws)?;
        if ignored {
            let (more, more_bytes) = add_ignored(&ws)?;
            files += more;
            bytes += more_bytes;
        }
        let built = started.elapsed();
        let label = match (git, ignored) {
            (true, _) => "git repository",
            (_, true) => "plain directory with node_modules/ git ignores",
            _ => "plain directory",
        };
        println!("== {label}: {} files, {:.1} MB, written in {}", group(files as u64), mb(bytes), ms(built));
        if git {
            let t = Instant::now();
            git_run(&ws, &["init", "-q"])?;
            git_run(&ws, &["add", "-A"])?;
            git_run(&ws, &["-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "-m", "init"])?;
            row("git init + add -A + commit", t.elapsed());
        }
        // The workspace's pages written back first, so that no measured step pays for them.
        let _ = Command::new("sync").status();
        measure(&root, &ws, git, ignored)?;
        println!();
    }
    Ok(())
}

/// Copies, edits, diffs, merges and removes, printing each time; with `ignored`, the edits include
/// build outputs written where git ignores them.
fn measure(root: &Path, ws: &Path, git: bool, ignored: bool) -> Result<(), String> {
    let base = root.join("base");
    let copy = root.join("copy");
    let (t, made) = timed(|| make_copy(ws, &base));
    let made = made.map_err(|e| e.to_string())?;
    row(&format!("make_copy (base): {} files, {:.1} MB", group(made.files), mb(made.bytes as usize)), t);
    let (t, made) = timed(|| make_copy(ws, &copy));
    made.map_err(|e| e.to_string())?;
    row("make_copy (copy)", t);
    if git {
        let tree = root.join("worktree");
        let tree_arg = tree.to_str().ok_or("temp path is not UTF-8")?;
        let (t, r) = timed(|| git_run(ws, &["worktree", "add", "-q", "--detach", tree_arg]));
        r?;
        row("git worktree add --detach", t);
        let (t, r) = timed(|| git_run(ws, &["worktree", "remove", "--force", tree_arg]));
        r?;
        row("git worktree remove --force", t);
    }
    let mut edited = edit(&copy)?;
    if ignored {
        let out = copy.join("target");
        fs::create_dir_all(&out).map_err(|e| e.to_string())?;
        for i in 0..OUTPUTS {
            fs::write(out.join(format!("out{i}.o")), vec![i as u8; 4096]).map_err(|e| e.to_string())?;
        }
        edited += OUTPUTS;
    }
    let (t, patch) = timed(|| changes(&base, &copy));
    let patch = patch.map_err(|e| e.to_string())?;
    row(
        &format!(
            "changes: {} files, +{} -{} lines",
            patch.files.len(),
            patch.lines_added,
            patch.lines_removed
        ),
        t,
    );
    if patch.files.len() != edited {
        return Err(format!("{edited} files edited, the patch has {}", patch.files.len()));
    }
    let workspace = Workspace::new(ws).map_err(|e| e.to_string())?;
    let (t, merged) = timed(|| merge(&base, &copy, &patch, &workspace));
    let merged = merged.map_err(|e| e.to_string())?;
    row(&format!("merge: {} applied, {} conflicts", merged.applied.len(), merged.conflicts.len()), t);
    if merged.applied.len() != edited || !merged.conflicts.is_empty() {
        return Err(format!("the merge did not take every edit: {merged:?}"));
    }
    let (t, r) = timed(|| fs::remove_dir_all(&copy));
    r.map_err(|e| e.to_string())?;
    row("remove_dir_all (copy)", t);
    let (t, r) = timed(|| fs::remove_dir_all(&base));
    r.map_err(|e| e.to_string())?;
    row("remove_dir_all (base)", t);
    Ok(())
}

fn row(label: &str, t: Duration) {
    println!("  {label:<56}{:>12}", ms(t));
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed(), out)
}

fn git_run(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out =
        Command::new("git").args(args).current_dir(dir).output().map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// Edits `EDITS` files of the copy (every 997th file): appends a line to half, replaces the first
/// line of the others. Returns how many.
fn edit(copy: &Path) -> Result<usize, String> {
    let mut files: Vec<PathBuf> = Vec::new();
    for d in 0..DIRS {
        for s in 0..SUBDIRS {
            let dir = copy.join(format!("d{d:02}/s{s}"));
            for entry in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
                files.push(entry.map_err(|e| e.to_string())?.path());
            }
        }
    }
    files.sort();
    for (i, file) in files.iter().step_by(997).take(EDITS).enumerate() {
        let text = fs::read_to_string(file).map_err(|e| e.to_string())?;
        let edited = if i % 2 == 0 {
            format!("{text}// appended by the benchmark\n")
        } else {
            let rest = text.split_once('\n').map_or("", |(_, rest)| rest);
            format!("// replaced by the benchmark\n{rest}")
        };
        fs::write(file, edited).map_err(|e| e.to_string())?;
    }
    Ok(EDITS)
}
