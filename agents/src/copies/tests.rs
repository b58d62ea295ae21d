//! The copies on real directories: made, changed by files and by commands, diffed, applied by git,
//! merged.

use super::*;
use crate::error::ToolError;
use crate::Workspace;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel)).unwrap()
}

fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(root: &Path, rel: &str) -> u32 {
    fs::symlink_metadata(root.join(rel)).unwrap().mode() & 0o7777
}

fn sh(dir: &Path, script: &str) {
    let status = Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap();
    assert!(status.success(), "{script}");
}

/// Every file, symlink and directory under `root` (not `.git`), with its kind, mode and content.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    fn visit(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".git" {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, format!("link -> {}", fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                out.insert(rel, "dir".to_string());
                visit(root, &path, out);
            } else {
                let content = String::from_utf8_lossy(&fs::read(&path).unwrap()).into_owned();
                out.insert(rel, format!("{:o} {content}", meta.mode() & 0o777));
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, &mut out);
    out
}

/// A workspace with a little of everything, in a temporary directory.
fn sample() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write(ws, ".gitignore", "target/\n*.log\n");
    write(ws, "src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n");
    write(ws, "src/lib.rs", "pub mod a;\npub mod b;\n");
    write(ws, "README.md", "# sample\n\nA sample workspace.\n");
    write(ws, "run.sh", "#!/bin/sh\necho run\n");
    chmod(ws, "run.sh", 0o755);
    write(ws, ".env", "KEY=value\n");
    write(ws, ".config/settings.toml", "a = 1\n");
    write(ws, "target/debug/app", "binary output");
    write(ws, "build.log", "log\n");
    write(ws, ".git/HEAD", "ref: refs/heads/main\n");
    write(ws, ".agentd-evidence/0001.txt", "evidence\n");
    write(ws, "sub/.ignore", "generated.rs\n");
    write(ws, "sub/generated.rs", "// generated\n");
    write(ws, "sub/kept.rs", "// kept\n");
    fs::create_dir_all(ws.join("empty/inner")).unwrap();
    symlink("src/main.rs", ws.join("main-link")).unwrap();
    dir
}

/// A base and a copy of `ws`, side by side in a fresh temporary directory.
fn base_and_copy(ws: &Path) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let copy = dir.path().join("copy");
    make_copy(ws, &base).unwrap();
    make_copy(ws, &copy).unwrap();
    (dir, base, copy)
}

#[test]
fn make_copy_takes_the_whole_tree_what_git_ignores_included() {
    let ws = sample();
    let out = tempfile::tempdir().unwrap();
    let to = out.path().join("deep/parents/copy");
    let made = make_copy(ws.path(), &to).unwrap();
    let copied = snapshot(&to);
    let names: Vec<&str> = copied.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            ".config",
            ".config/settings.toml",
            ".env",
            ".gitignore",
            "README.md",
            "build.log",
            "empty",
            "empty/inner",
            "main-link",
            "run.sh",
            "src",
            "src/lib.rs",
            "src/main.rs",
            "sub",
            "sub/.ignore",
            "sub/generated.rs",
            "sub/kept.rs",
            "target",
            "target/debug",
            "target/debug/app",
        ]
    );
    // What git ignores is in (target/, *.log, sub/generated.rs); .git and the evidence folder are not.
    assert!(!to.join(".git").exists() && !to.join(".agentd-evidence").exists());
    assert_eq!(read(&to, "target/debug/app"), "binary output");
    // The symlink is a symlink with the same target; the exec bit is kept; content is the same.
    assert_eq!(fs::read_link(to.join("main-link")).unwrap(), Path::new("src/main.rs"));
    assert!(fs::symlink_metadata(to.join("main-link")).unwrap().file_type().is_symlink());
    assert_eq!(mode(&to, "run.sh"), 0o755);
    assert_eq!(read(&to, "src/main.rs"), read(ws.path(), "src/main.rs"));
    assert!(to.join("empty/inner").is_dir());
    let regular = [
        ".config/settings.toml",
        ".env",
        ".gitignore",
        "README.md",
        "build.log",
        "run.sh",
        "src/lib.rs",
        "src/main.rs",
        "sub/.ignore",
        "sub/generated.rs",
        "sub/kept.rs",
        "target/debug/app",
    ];
    assert_eq!(made.files, regular.len() as u64 + 1, "the regular files and the one symlink");
    let bytes = regular.iter().map(|f| fs::metadata(ws.path().join(f)).unwrap().len()).sum::<u64>();
    assert_eq!(made.bytes, bytes);
    assert_eq!(made.left_out, []);
}

#[test]
fn make_copy_refuses_an_existing_destination_and_names_special_files() {
    let ws = sample();
    let out = tempfile::tempdir().unwrap();
    fs::create_dir(out.path().join("there")).unwrap();
    fs::write(out.path().join("there/mine"), "x").unwrap();
    let e = make_copy(ws.path(), &out.path().join("there")).unwrap_err();
    assert!(matches!(&e, CopyError::Io { op: "create the copy's directory", .. }), "{e}");
    assert!(e.to_string().contains("there"), "{e}");
    assert!(out.path().join("there/mine").exists(), "nothing of the existing directory is removed");
    // A fifo is left out, and said (opening it would not hang: it is never opened).
    sh(ws.path(), "mkfifo pipe");
    let made = make_copy(ws.path(), &out.path().join("c")).unwrap();
    assert!(!out.path().join("c/pipe").exists());
    assert_eq!(made.left_out, [agentd_protocol::NotHeld { path: "pipe".into(), why: "a FIFO".into() }]);
    // A read-only directory keeps its mode, and its files are in.
    write(ws.path(), "ro/file", "r\n");
    chmod(ws.path(), "ro", 0o555);
    make_copy(ws.path(), &out.path().join("d")).unwrap();
    assert_eq!(mode(&out.path().join("d"), "ro"), 0o555);
    assert_eq!(read(&out.path().join("d"), "ro/file"), "r\n");
    chmod(ws.path(), "ro", 0o755);
    // And a copy holding it is removed whole.
    remove_copy(&out.path().join("d")).unwrap();
    assert!(!out.path().join("d").exists());
}

#[test]
fn a_copy_made_inside_its_source_is_not_copied_into_itself() {
    let ws = sample();
    let to = ws.path().join("copies/one");
    make_copy(ws.path(), &to).unwrap();
    assert!(to.join("src/main.rs").exists());
    assert!(to.join("copies").is_dir(), "the directory above the copy is copied");
    assert!(!to.join("copies/one").exists(), "the copy itself is not");
}

#[test]
fn changes_reports_every_kind_with_its_lines() {
    let ws = sample();
    write(ws.path(), "old/name.txt", "moved\ncontent\n");
    write(ws.path(), "gone.txt", "to be removed by a command\n");
    write(ws.path(), "log.txt", "one\n");
    let (_dir, base, copy) = base_and_copy(ws.path());
    assert!(changes(&base, &copy).unwrap().is_empty());

    // Added.
    write(&copy, "src/new.rs", "pub fn new() {}\n// two\n");
    // Modified as `sed -i` does: a temporary file renamed over it.
    write(&copy, "src/.main.rs.tmp", "fn main() {\n    println!(\"bye\");\n}\n");
    fs::rename(copy.join("src/.main.rs.tmp"), copy.join("src/main.rs")).unwrap();
    // Modified by a real `sed -i`.
    sh(&copy, "sed -i 's/a = 1/a = 2/' .config/settings.toml");
    // Modified in place: an append.
    fs::OpenOptions::new()
        .append(true)
        .open(copy.join("log.txt"))
        .unwrap()
        .write_all(b"two\nthree\n")
        .unwrap();
    // Deleted.
    fs::remove_file(copy.join("README.md")).unwrap();
    // Renamed (its directory goes with it).
    fs::create_dir_all(copy.join("new")).unwrap();
    fs::rename(copy.join("old/name.txt"), copy.join("new/name.txt")).unwrap();
    fs::remove_dir(copy.join("old")).unwrap();
    // chmod +x.
    chmod(&copy, "src/lib.rs", 0o755);
    // A command creates one file and deletes another; a build output it makes (which git ignores)
    // is a change like any other.
    sh(&copy, "printf 'made\\nby sh\\n' > made.txt && rm gone.txt && mkdir -p target && echo x > target/out");

    let patch = changes(&base, &copy).unwrap();
    let got: Vec<(&str, &Change, u64, u64)> =
        patch.files.iter().map(|f| (f.path.as_str(), &f.change, f.lines_added, f.lines_removed)).collect();
    assert_eq!(
        got,
        [
            (".config/settings.toml", &Change::Modified { old_mode: 0o100644, new_mode: 0o100644 }, 1, 1),
            ("README.md", &Change::Deleted { mode: 0o100644 }, 0, 3),
            ("gone.txt", &Change::Deleted { mode: 0o100644 }, 0, 1),
            ("log.txt", &Change::Modified { old_mode: 0o100644, new_mode: 0o100644 }, 2, 0),
            ("made.txt", &Change::Added { mode: 0o100644 }, 2, 0),
            ("new/name.txt", &Change::Renamed { from: "old/name.txt".into(), mode: 0o100644 }, 0, 0),
            ("src/lib.rs", &Change::Mode { old_mode: 0o100644, new_mode: 0o100755 }, 0, 0),
            ("src/main.rs", &Change::Modified { old_mode: 0o100644, new_mode: 0o100644 }, 1, 1),
            ("src/new.rs", &Change::Added { mode: 0o100644 }, 2, 0),
            ("target/out", &Change::Added { mode: 0o100644 }, 1, 0),
        ]
    );
    assert!(patch.files.iter().all(|f| !f.binary));
    assert_eq!((patch.lines_added, patch.lines_removed), (9, 6));
    let unified = &patch.unified;
    for expected in [
        "diff --git a/README.md b/README.md\ndeleted file mode 100644\n--- a/README.md\n+++ /dev/null\n@@ -1,3 +0,0 @@\n",
        "diff --git a/made.txt b/made.txt\nnew file mode 100644\n--- /dev/null\n+++ b/made.txt\n@@ -0,0 +1,2 @@\n+made\n+by sh\n",
        "diff --git a/old/name.txt b/new/name.txt\nsimilarity index 100%\nrename from old/name.txt\nrename to new/name.txt\n",
        "diff --git a/src/lib.rs b/src/lib.rs\nold mode 100644\nnew mode 100755\n",
        "--- a/src/main.rs\n+++ b/src/main.rs\n@@ -1,3 +1,3 @@\n fn main() {\n-    println!(\"hello\");\n+    println!(\"bye\");\n }\n",
    ] {
        assert!(unified.contains(expected), "missing\n{expected}\nin\n{unified}");
    }
    // The patch goes through serde unchanged (it crosses the engine's store).
    let json = serde_json::to_string(&patch).unwrap();
    assert!(json.contains(r#""change":{"kind":"renamed","from":"old/name.txt","mode":33188}"#), "{json}");
    assert_eq!(serde_json::from_str::<Patch>(&json).unwrap(), patch);
}

#[test]
fn changes_tells_symlinks_binaries_and_missing_newlines() {
    let ws = sample();
    fs::write(ws.path().join("blob.bin"), b"\x00\x01\x02").unwrap();
    write(ws.path(), "tail.txt", "a\nb");
    let (_dir, base, copy) = base_and_copy(ws.path());
    fs::remove_file(copy.join("main-link")).unwrap();
    symlink("src/lib.rs", copy.join("main-link")).unwrap();
    symlink("README.md", copy.join("readme-link")).unwrap();
    fs::write(copy.join("blob.bin"), b"\x00\x01\x03").unwrap();
    write(&copy, "tail.txt", "a\nc");
    // A file become a symlink: a change of kind.
    fs::remove_file(copy.join(".env")).unwrap();
    symlink("elsewhere", copy.join(".env")).unwrap();
    let patch = changes(&base, &copy).unwrap();
    let by_path: BTreeMap<&str, &FileChange> = patch.files.iter().map(|f| (f.path.as_str(), f)).collect();
    assert_eq!(by_path[".env"].change, Change::Modified { old_mode: 0o100644, new_mode: 0o120000 });
    assert_eq!(by_path["main-link"].change, Change::Modified { old_mode: 0o120000, new_mode: 0o120000 });
    assert_eq!(by_path["readme-link"].change, Change::Added { mode: 0o120000 });
    assert!(by_path["blob.bin"].binary);
    assert_eq!((by_path["blob.bin"].lines_added, by_path["blob.bin"].lines_removed), (0, 0));
    let unified = &patch.unified;
    for expected in [
        "diff --git a/blob.bin b/blob.bin\nBinary files a/blob.bin and b/blob.bin differ\n",
        "diff --git a/readme-link b/readme-link\nnew file mode 120000\n--- /dev/null\n+++ b/readme-link\n@@ -0,0 +1 @@\n+README.md\n\\ No newline at end of file\n",
        "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
        "diff --git a/.env b/.env\ndeleted file mode 100644\n--- a/.env\n+++ /dev/null\n@@ -1 +0,0 @@\n-KEY=value\ndiff --git a/.env b/.env\nnew file mode 120000\n",
    ] {
        assert!(unified.contains(expected), "missing\n{expected}\nin\n{unified}");
    }
}

#[test]
fn ignore_files_change_nothing_of_what_a_patch_carries() {
    let ws = sample();
    let (_dir, base, copy) = base_and_copy(ws.path());
    // The copy starts ignoring a file it still has, unchanged: no change; one it changes: a change.
    write(&copy, ".gitignore", "target/\n*.log\nREADME.md\nrun.sh\n");
    write(&copy, "run.sh", "#!/bin/sh\necho changed\n");
    let patch = changes(&base, &copy).unwrap();
    assert_eq!(patch.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), [".gitignore", "run.sh"]);
}

#[test]
fn what_branches_write_at_ignored_paths_lands_in_the_workspace() {
    // The issue's reproduction: `.gitignore` = `build/ *.log .env`; two writers at once.
    let team =
        Team::new(&[(".gitignore", "build/\n*.log\n.env\n"), (".env", "TOKEN=x\n"), ("a.txt", "a\n")], 2);
    // Each copy holds what the workspace holds, what git ignores included.
    for copy in &team.copies {
        assert_eq!(read(copy, ".env"), "TOKEN=x\n");
    }
    sh(
        &team.copies[0],
        "mkdir -p build; echo generated > build/out.bin; echo log > debug.log; echo new > kept.txt",
    );
    write(&team.copies[1], "build/report.txt", "report\n");
    let first = team.merge(0);
    assert_eq!(first.applied, ["build/out.bin", "debug.log", "kept.txt"]);
    let second = team.merge(1);
    assert_eq!(second.applied, ["build/report.txt"]);
    assert!(first.conflicts.is_empty() && second.conflicts.is_empty());
    assert_eq!(read(team.root(), "build/out.bin"), "generated\n");
    assert_eq!(read(team.root(), "debug.log"), "log\n");
    assert_eq!(read(team.root(), "kept.txt"), "new\n");
    assert_eq!(read(team.root(), "build/report.txt"), "report\n");
    assert_eq!(read(team.root(), ".env"), "TOKEN=x\n");
}

#[test]
fn what_a_copy_cannot_carry_is_named_never_passed_over() {
    let team = Team::new(&[("a.txt", "a\n")], 1);
    let copy = &team.copies[0];
    sh(copy, "mkfifo pipe");
    let _socket = std::os::unix::net::UnixListener::bind(copy.join("app.sock")).unwrap();
    // A sparse file past what a copy carries: never read, never carried.
    let big = fs::File::create(copy.join("huge.img")).unwrap();
    big.set_len(MAX_COPIED_FILE + 1).unwrap();
    write(copy, "small.txt", "carried\n");
    let patch = changes(&team.base, copy).unwrap();
    assert_eq!(patch.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["small.txt"]);
    let left: Vec<(&str, &str)> = patch.left_out.iter().map(|l| (l.path.as_str(), l.why.as_str())).collect();
    assert_eq!(
        left,
        [
            ("app.sock", "a socket"),
            ("huge.img", "268435457 bytes, over the 256 MiB a working copy carries"),
            ("pipe", "a FIFO"),
        ]
    );
    let merged = merge(&team.base, copy, &patch, &team.ws).unwrap();
    assert_eq!(merged.applied, ["small.txt"]);
    assert!(!team.root().join("pipe").exists() && !team.root().join("huge.img").exists());
    // A copy of a workspace holding such things names them too, and is made without them.
    let out = tempfile::tempdir().unwrap();
    let made = make_copy(copy, &out.path().join("again")).unwrap();
    let left: Vec<&str> = made.left_out.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(left, ["app.sock", "huge.img", "pipe"]);
}

#[test]
fn past_the_patch_texts_bound_a_file_is_carried_and_counted_its_lines_not_shown() {
    let team = Team::new(&[("keep.txt", "k\n")], 1);
    let line = "x".repeat(1023) + "\n";
    write(&team.copies[0], "a-big.txt", &line.repeat(MAX_PATCH_TEXT / 1024 + 16));
    write(&team.copies[0], "b-small.txt", "one\ntwo\n");
    let patch = changes(&team.base, &team.copies[0]).unwrap();
    let files: Vec<(&str, u64)> = patch.files.iter().map(|f| (f.path.as_str(), f.lines_added)).collect();
    assert_eq!(files, [("a-big.txt", (MAX_PATCH_TEXT / 1024 + 16) as u64), ("b-small.txt", 2)]);
    assert!(patch.unified.ends_with(
        "diff --git a/b-small.txt b/b-small.txt\n(not shown: the patch's text passed 64 MiB; the file is carried all the same)\n"
    ));
    assert!(patch.unified.len() < MAX_PATCH_TEXT + (1 << 20));
    let merged = team.merge(0);
    assert_eq!(merged.applied, ["a-big.txt", "b-small.txt"]);
    assert_eq!(read(team.root(), "b-small.txt"), "one\ntwo\n");
}

#[test]
fn a_name_that_is_not_utf8_is_carried_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let team = Team::new(&[("a.txt", "a\n")], 1);
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9 \xff.txt");
    fs::create_dir_all(team.copies[0].join(std::ffi::OsStr::from_bytes(b"dir\x80"))).unwrap();
    fs::write(team.copies[0].join(name), "latin-1\n").unwrap();
    fs::write(team.copies[0].join(std::ffi::OsStr::from_bytes(b"dir\x80")).join(name), "deep\n").unwrap();
    let patch = changes(&team.base, &team.copies[0]).unwrap();
    let paths: Vec<&str> = patch.files.iter().map(|f| f.path.as_str()).collect();
    let expected = [
        agentd_protocol::path_name::encode(b"caf\xe9 \xff.txt"),
        agentd_protocol::path_name::encode(b"dir\x80/caf\xe9 \xff.txt"),
    ];
    assert_eq!(paths, expected);
    let merged = team.merge(0);
    assert_eq!(merged.applied.len(), 2, "{merged:?}");
    assert_eq!(fs::read_to_string(team.root().join(name)).unwrap(), "latin-1\n");
    let deep = team.root().join(std::ffi::OsStr::from_bytes(b"dir\x80")).join(name);
    assert_eq!(fs::read_to_string(deep).unwrap(), "deep\n");
}

/// The unified diff of `base` → `copy`, applied by `git apply` to a repository holding the base's
/// files, gives the copy's tree.
fn assert_git_applies(base: &Path, copy: &Path, patch: &Patch) {
    let scratch = tempfile::tempdir().unwrap();
    let repo = scratch.path().join("repo");
    make_copy(base, &repo).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).current_dir(&repo).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    fs::write(scratch.path().join("patch.diff"), &patch.unified).unwrap();
    git(&["apply", "--whitespace=nowarn", scratch.path().join("patch.diff").to_str().unwrap()]);
    let files_only = |tree: BTreeMap<String, String>| -> BTreeMap<String, String> {
        tree.into_iter().filter(|(_, v)| v != "dir").collect()
    };
    assert_eq!(files_only(snapshot(&repo)), files_only(snapshot(copy)), "patch:\n{}", patch.unified);
}

#[test]
fn the_unified_diff_applies_with_git() {
    let ws = sample();
    let long: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    write(ws.path(), "long.txt", &long);
    write(ws.path(), "no newline.txt", "first\nlast");
    write(ws.path(), "quo\"ted.txt", "q\n");
    write(ws.path(), "dir/moved.txt", "moving\n");
    let (_dir, base, copy) = base_and_copy(ws.path());
    write(
        &copy,
        "long.txt",
        &long
            .replace("line 5\n", "line five\n")
            .replace("line 30\n", "")
            .replace("line 40\n", "line 40\nline 41\n"),
    );
    write(&copy, "no newline.txt", "first\nlast\n");
    write(&copy, "quo\"ted.txt", "quoted\n");
    write(&copy, "brand/new/file.rs", "new\n");
    write(&copy, "empty.txt", "");
    fs::remove_file(copy.join("README.md")).unwrap();
    fs::create_dir_all(copy.join("elsewhere")).unwrap();
    fs::rename(copy.join("dir/moved.txt"), copy.join("elsewhere/moved.txt")).unwrap();
    chmod(&copy, "src/lib.rs", 0o755);
    chmod(&copy, "run.sh", 0o644);
    fs::remove_file(copy.join("main-link")).unwrap();
    symlink("README.md", copy.join("main-link")).unwrap();
    sh(&copy, "echo 'by a command' >> src/main.rs");
    let patch = changes(&base, &copy).unwrap();
    assert_eq!(patch.files.len(), 11, "{:#?}", patch.files);
    assert_git_applies(&base, &copy, &patch);
}

/// A workspace holding `files`, its base and one copy per entry of `edits` (each a closure run on the
/// copy), and the patches.
struct Team {
    _dir: tempfile::TempDir,
    ws: Workspace,
    base: std::path::PathBuf,
    copies: Vec<std::path::PathBuf>,
}

impl Team {
    fn new(files: &[(&str, &str)], writers: usize) -> Team {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        fs::create_dir(&root).unwrap();
        for (rel, content) in files {
            write(&root, rel, content);
        }
        let base = dir.path().join("base");
        make_copy(&root, &base).unwrap();
        let copies = (0..writers)
            .map(|i| {
                let copy = dir.path().join(format!("copy{i}"));
                make_copy(&root, &copy).unwrap();
                copy
            })
            .collect();
        let ws = Workspace::new(&root).unwrap();
        Team { _dir: dir, ws, base, copies }
    }

    fn root(&self) -> &Path {
        self.ws.root()
    }

    fn merge(&self, i: usize) -> Merged {
        let patch = changes(&self.base, &self.copies[i]).unwrap();
        merge(&self.base, &self.copies[i], &patch, &self.ws).unwrap()
    }
}

const TEXT: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";

#[test]
fn two_copies_changing_different_files_both_land() {
    let team = Team::new(&[("a.txt", "a\n"), ("b.txt", "b\n")], 2);
    write(&team.copies[0], "a.txt", "A\n");
    write(&team.copies[1], "b.txt", "B\n");
    write(&team.copies[1], "new/dir/c.txt", "C\n");
    let first = team.merge(0);
    assert_eq!(first.applied, ["a.txt"]);
    assert!(first.conflicts.is_empty() && first.already.is_empty());
    let second = team.merge(1);
    assert_eq!(second.applied, ["b.txt", "new/dir/c.txt"]);
    assert!(second.conflicts.is_empty());
    assert_eq!(read(team.root(), "a.txt"), "A\n");
    assert_eq!(read(team.root(), "b.txt"), "B\n");
    assert_eq!(read(team.root(), "new/dir/c.txt"), "C\n");
}

#[test]
fn the_same_lines_changed_twice_are_a_conflict_and_the_first_stands() {
    let team = Team::new(&[("t.txt", TEXT)], 2);
    write(&team.copies[0], "t.txt", &TEXT.replace("four\n", "FOUR\n"));
    write(&team.copies[1], "t.txt", &TEXT.replace("four\n", "4\n"));
    assert_eq!(team.merge(0).applied, ["t.txt"]);
    let first_result = read(&team.copies[0], "t.txt");
    let second = team.merge(1);
    assert!(second.applied.is_empty());
    assert_eq!(
        second.conflicts,
        [Conflict {
            path: "t.txt".into(),
            kind: ConflictKind::BothChanged,
            hunks: vec![ConflictHunk { line: 4, workspace: "FOUR\n".into(), copy: "4\n".into() }],
        }]
    );
    assert_eq!(
        read(team.root(), "t.txt"),
        first_result,
        "the workspace's file is exactly the first's result"
    );
    let described = second.conflicts[0].describe();
    for part in ["t.txt", "same lines", "At line 4", "    FOUR", "    4"] {
        assert!(described.contains(part), "{described}");
    }
}

#[test]
fn changes_in_different_regions_of_one_file_merge() {
    let team = Team::new(&[("t.txt", TEXT)], 2);
    write(&team.copies[0], "t.txt", &TEXT.replace("two\n", "TWO\n"));
    write(&team.copies[1], "t.txt", &TEXT.replace("nine\n", "NINE\nnine and a half\n"));
    // The workspace's mode changed meanwhile: kept (neither copy changed it), with both edits.
    chmod(team.root(), "t.txt", 0o600);
    assert_eq!(team.merge(0).applied, ["t.txt"]);
    let second = team.merge(1);
    assert_eq!(second.applied, ["t.txt"]);
    assert_eq!(
        read(team.root(), "t.txt"),
        TEXT.replace("two\n", "TWO\n").replace("nine\n", "NINE\nnine and a half\n")
    );
    assert_eq!(mode(team.root(), "t.txt"), 0o600);
}

#[test]
fn a_deletion_against_a_change_is_a_conflict_both_ways() {
    let team = Team::new(&[("x.txt", TEXT), ("y.txt", TEXT)], 2);
    // Copy 0 changes x and deletes y; copy 1 deletes x and changes y.
    write(&team.copies[0], "x.txt", &TEXT.replace("one\n", "ONE\n"));
    fs::remove_file(team.copies[0].join("y.txt")).unwrap();
    fs::remove_file(team.copies[1].join("x.txt")).unwrap();
    write(&team.copies[1], "y.txt", &TEXT.replace("ten\n", "TEN\n"));
    assert_eq!(team.merge(0).applied, ["x.txt", "y.txt"]);
    let second = team.merge(1);
    let kinds: Vec<(&str, ConflictKind)> =
        second.conflicts.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds,
        [("x.txt", ConflictKind::ChangedHereDeletedThere), ("y.txt", ConflictKind::DeletedHereChangedThere)]
    );
    assert_eq!(
        second.conflicts[0].hunks,
        [ConflictHunk { line: 1, workspace: "ONE\n".into(), copy: String::new() }]
    );
    assert_eq!(read(team.root(), "x.txt"), TEXT.replace("one\n", "ONE\n"), "untouched");
    assert!(!team.root().join("y.txt").exists(), "untouched");
    assert!(second.conflicts[1].describe().contains("deleted it since the copy was made"));
}

#[test]
fn other_conflicts_both_added_binary_and_mode() {
    let team = Team::new(&[("blob.bin", "\0base"), ("m.sh", "echo\n")], 2);
    write(&team.copies[0], "added.txt", "mine\n");
    write(&team.copies[1], "added.txt", "theirs\n");
    fs::write(team.copies[0].join("blob.bin"), b"\0one").unwrap();
    fs::write(team.copies[1].join("blob.bin"), b"\0two").unwrap();
    chmod(&team.copies[0], "m.sh", 0o755);
    chmod(&team.copies[1], "m.sh", 0o600);
    assert_eq!(team.merge(0).applied, ["added.txt", "blob.bin", "m.sh"]);
    let second = team.merge(1);
    let kinds: Vec<(&str, ConflictKind)> =
        second.conflicts.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("added.txt", ConflictKind::BothAdded),
            ("blob.bin", ConflictKind::Binary),
            ("m.sh", ConflictKind::BothChanged)
        ]
    );
    assert_eq!(
        second.conflicts[0].hunks,
        [ConflictHunk { line: 1, workspace: "mine\n".into(), copy: "theirs\n".into() }]
    );
    assert_eq!(fs::read(team.root().join("blob.bin")).unwrap(), b"\0one");
    assert_eq!(mode(team.root(), "m.sh"), 0o755);
}

#[test]
fn renames_symlinks_modes_and_emptied_directories_merge() {
    let team = Team::new(&[("old/deep/f.txt", "content\n"), ("keep.txt", "k\n"), ("x.sh", "echo\n")], 1);
    let copy = &team.copies[0];
    fs::create_dir_all(copy.join("new")).unwrap();
    fs::rename(copy.join("old/deep/f.txt"), copy.join("new/f.txt")).unwrap();
    fs::remove_dir_all(copy.join("old")).unwrap();
    symlink("keep.txt", copy.join("link")).unwrap();
    chmod(copy, "x.sh", 0o755);
    // The workspace changed x.sh's content meanwhile: the mode still comes, the content stays.
    write(team.root(), "x.sh", "echo changed\n");
    let merged = team.merge(0);
    assert_eq!(merged.applied, ["link", "new/f.txt", "old/deep/f.txt", "x.sh"]);
    assert_eq!(read(team.root(), "new/f.txt"), "content\n");
    assert!(!team.root().join("old").exists(), "directories emptied by the deletion are removed");
    assert_eq!(fs::read_link(team.root().join("link")).unwrap(), Path::new("keep.txt"));
    assert_eq!((read(team.root(), "x.sh"), mode(team.root(), "x.sh")), ("echo changed\n".into(), 0o755));
}

#[test]
fn a_repeated_merge_finds_everything_already_there_and_writes_nothing() {
    let team = Team::new(&[("t.txt", TEXT), ("gone.txt", "g\n"), ("m.sh", "m\n")], 1);
    let copy = &team.copies[0];
    write(copy, "t.txt", &TEXT.replace("five\n", "FIVE\n"));
    write(copy, "added.txt", "a\n");
    fs::remove_file(copy.join("gone.txt")).unwrap();
    chmod(copy, "m.sh", 0o700);
    let first = team.merge(0);
    assert_eq!(first.applied, ["added.txt", "gone.txt", "m.sh", "t.txt"]);
    let before: BTreeMap<String, (u64, i64, i64)> = ["t.txt", "added.txt", "m.sh"]
        .iter()
        .map(|f| {
            let m = fs::metadata(team.root().join(f)).unwrap();
            (f.to_string(), (m.ino(), m.mtime_nsec(), m.ctime_nsec()))
        })
        .collect();
    let tree = snapshot(team.root());
    let again = team.merge(0);
    assert_eq!(again.already, ["added.txt", "gone.txt", "m.sh", "t.txt"]);
    assert!(again.applied.is_empty() && again.conflicts.is_empty());
    assert_eq!(snapshot(team.root()), tree);
    for (f, (ino, mtime, ctime)) in before {
        let m = fs::metadata(team.root().join(&f)).unwrap();
        assert_eq!((m.ino(), m.mtime_nsec(), m.ctime_nsec()), (ino, mtime, ctime), "{f} was written again");
    }
}

#[test]
fn a_symlink_planted_in_the_workspace_is_never_written_through() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "target.txt", "outside\n");
    fs::create_dir(outside.path().join("dir")).unwrap();
    let team = Team::new(&[("t.txt", TEXT), ("d/f.txt", "f\n"), ("gone.txt", "g\n")], 1);
    let copy = &team.copies[0];
    write(copy, "t.txt", &TEXT.replace("one\n", "ONE\n"));
    write(copy, "d/f.txt", "F\n");
    write(copy, "d/new.txt", "new\n");
    fs::remove_file(copy.join("gone.txt")).unwrap();
    // The workspace's t.txt and gone.txt become symlinks to a file outside.
    for name in ["t.txt", "gone.txt"] {
        fs::remove_file(team.root().join(name)).unwrap();
        symlink(outside.path().join("target.txt"), team.root().join(name)).unwrap();
    }
    let merged = team.merge(0);
    let kinds: Vec<(&str, ConflictKind)> =
        merged.conflicts.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds,
        [("gone.txt", ConflictKind::ChangedHereDeletedThere), ("t.txt", ConflictKind::BothChanged)]
    );
    assert_eq!(read(outside.path(), "target.txt"), "outside\n");
    assert!(fs::symlink_metadata(team.root().join("t.txt")).unwrap().file_type().is_symlink());
    // A directory of the path become a symlink to a directory outside: what stands there is neither
    // the base's nor the copy's, so both its files are conflicts, and nothing is written there.
    fs::remove_dir_all(team.root().join("d")).unwrap();
    symlink(outside.path().join("dir"), team.root().join("d")).unwrap();
    let merged = team.merge(0);
    let kinds: Vec<(&str, ConflictKind)> =
        merged.conflicts.iter().map(|c| (c.path.as_str(), c.kind)).collect();
    assert_eq!(
        kinds[..2],
        [("d/f.txt", ConflictKind::BothChanged), ("d/new.txt", ConflictKind::BothChanged)]
    );
    assert_eq!(fs::read_dir(outside.path().join("dir")).unwrap().count(), 0);
    assert_eq!(
        team.ws.found_exact("d/new.txt").unwrap(),
        crate::workspace::exact::Found::Blocked("a directory of its path is a symlink")
    );
    // Were it planted after the merge read the path, the write itself refuses to cross it.
    let e = team.ws.write_exact("d/new.txt", b"new\n", 0o644).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    assert_eq!(fs::read_dir(outside.path().join("dir")).unwrap().count(), 0);
}

#[test]
fn workspace_exact_operations_cross_no_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret", "s\n");
    let ws = Workspace::new(dir.path()).unwrap();
    symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    assert!(matches!(ws.set_mode("link", 0o777), Err(ToolError::Failed(_))));
    assert!(ws.write_exact("out/x", b"x", 0o644).is_err());
    assert!(ws.remove("out/secret").is_err());
    assert_eq!(read(outside.path(), "secret"), "s\n");
    assert_eq!(mode(outside.path(), "secret"), 0o644);
    // Replacing a symlink replaces the link, not its target.
    ws.write_exact("link", b"mine\n", 0o640).unwrap();
    assert_eq!((read(dir.path(), "link"), mode(dir.path(), "link")), ("mine\n".into(), 0o640));
    assert_eq!(read(outside.path(), "secret"), "s\n");
    assert!(ws.remove("link").unwrap());
    assert!(!ws.remove("link").unwrap());
    assert!(matches!(ws.write_exact("", b"", 0o644), Err(ToolError::EmptyPath)));
    assert!(matches!(ws.write_exact("../x", b"", 0o644), Err(ToolError::Escapes(_))));
}

/// One line-level edit of a text: lines `start..end` replaced by `with`.
#[derive(Debug, Clone)]
struct Edit {
    start: usize,
    end: usize,
    with: Vec<String>,
}

fn apply(lines: &[String], edits: &[&Edit]) -> String {
    let mut out = lines.to_vec();
    // From the last edit back, so the earlier ones' line numbers hold.
    let mut edits = edits.to_vec();
    edits.sort_by_key(|e| std::cmp::Reverse(e.start));
    for edit in edits {
        out.splice(edit.start..edit.end, edit.with.iter().cloned());
    }
    out.concat()
}

/// A text of 3 to 40 distinct lines and two edits of it with at least one untouched line between.
fn two_disjoint_edits() -> impl Strategy<Value = (Vec<String>, Edit, Edit)> {
    (3usize..40)
        .prop_flat_map(|n| {
            let cut = 0..=n;
            (Just(n), cut.clone(), cut.clone(), cut.clone(), cut)
        })
        .prop_filter_map("two regions with a line between", |(n, a, b, c, d)| {
            let mut points = [a, b, c, d];
            points.sort_unstable();
            let [s1, e1, s2, e2] = points;
            (s2 > e1).then_some((n, s1, e1, s2, e2))
        })
        .prop_flat_map(|(n, s1, e1, s2, e2)| {
            let new_lines = |tag: &'static str| {
                prop::collection::vec(0u32..1000, 0..4)
                    .prop_map(move |ns| ns.iter().map(|k| format!("{tag} {k}\n")).collect::<Vec<_>>())
            };
            (Just(n), Just((s1, e1, s2, e2)), new_lines("first"), new_lines("second"))
        })
        .prop_map(|(n, (s1, e1, s2, e2), w1, w2)| {
            let lines = (0..n).map(|i| format!("line {i}\n")).collect();
            (lines, Edit { start: s1, end: e1, with: w1 }, Edit { start: s2, end: e2, with: w2 })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn disjoint_edits_in_two_copies_both_land((lines, first, second) in two_disjoint_edits(), swap in any::<bool>()) {
        let text = lines.concat();
        let team = Team::new(&[("f.txt", &text)], 2);
        let (one, two) = if swap { (&second, &first) } else { (&first, &second) };
        write(&team.copies[0], "f.txt", &apply(&lines, &[one]));
        write(&team.copies[1], "f.txt", &apply(&lines, &[two]));
        let a = team.merge(0);
        let b = team.merge(1);
        prop_assert!(a.conflicts.is_empty(), "{:?}", a.conflicts);
        prop_assert!(b.conflicts.is_empty(), "{:?}", b.conflicts);
        prop_assert_eq!(read(team.root(), "f.txt"), apply(&lines, &[&first, &second]));
    }

    #[test]
    fn a_copy_identical_to_its_base_changes_nothing((lines, _, _) in two_disjoint_edits()) {
        let team = Team::new(&[("f.txt", &lines.concat()), ("g/h.txt", "h\n")], 1);
        write(team.root(), "f.txt", "the workspace moved on\n");
        let tree = snapshot(team.root());
        let patch = changes(&team.base, &team.copies[0]).unwrap();
        prop_assert!(patch.is_empty());
        prop_assert_eq!(&patch.unified, "");
        let merged = merge(&team.base, &team.copies[0], &patch, &team.ws).unwrap();
        prop_assert_eq!(merged, Merged { applied: vec![], already: vec![], conflicts: vec![] });
        prop_assert_eq!(snapshot(team.root()), tree);
    }
}
