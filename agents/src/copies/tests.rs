//! The copies on real directories: made, changed by files and by commands, diffed, applied by git,
//! merged.

use super::*;
use std::collections::BTreeMap;
use std::fs;
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

#[test]
fn make_copy_takes_what_search_sees() {
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
            "empty",
            "empty/inner",
            "main-link",
            "run.sh",
            "src",
            "src/lib.rs",
            "src/main.rs",
            "sub",
            "sub/.ignore",
            "sub/kept.rs"
        ]
    );
    // Ignored (target/, *.log, sub/generated.rs), .git and the evidence folder are left out.
    assert!(!to.join("target").exists() && !to.join(".git").exists());
    assert!(!to.join(".agentd-evidence").exists() && !to.join("build.log").exists());
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
        "run.sh",
        "src/lib.rs",
        "src/main.rs",
        "sub/.ignore",
        "sub/kept.rs",
    ];
    assert_eq!(made.files, regular.len() as u64 + 1, "the regular files and the one symlink");
    let bytes = regular.iter().map(|f| fs::metadata(ws.path().join(f)).unwrap().len()).sum::<u64>();
    assert_eq!(made.bytes, bytes);
}

#[test]
fn make_copy_refuses_an_existing_destination_and_skips_special_files() {
    let ws = sample();
    let out = tempfile::tempdir().unwrap();
    fs::create_dir(out.path().join("there")).unwrap();
    fs::write(out.path().join("there/mine"), "x").unwrap();
    let e = make_copy(ws.path(), &out.path().join("there")).unwrap_err();
    assert!(matches!(&e, CopyError::Io { op: "create the copy's directory", .. }), "{e}");
    assert!(e.to_string().contains("there"), "{e}");
    assert!(out.path().join("there/mine").exists(), "nothing of the existing directory is removed");
    // A fifo is skipped (and opening it would not hang: it is never opened).
    sh(ws.path(), "mkfifo pipe");
    make_copy(ws.path(), &out.path().join("c")).unwrap();
    assert!(!out.path().join("c/pipe").exists());
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
