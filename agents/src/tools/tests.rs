//! End-to-end tests of `execute` against a temporary workspace.

use super::*;
use crate::workspace::Workspace;
use serde_json::json;
use std::fs;
use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

fn setup() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("src/nested")).unwrap();
    fs::write(dir.path().join("src/lib.rs"), "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n").unwrap();
    fs::write(dir.path().join("src/nested/util.rs"), "// add helpers\nfn helper() {}\n").unwrap();
    fs::write(dir.path().join("README.md"), "one\ntwo\nthree\nfour\nfive\n").unwrap();
    let ctx = ToolContext::new(Workspace::new(dir.path()).unwrap());
    (dir, ctx)
}

async fn run(ctx: &ToolContext, tool: &str, args: serde_json::Value) -> ToolOutcome {
    execute(ctx, &agentd_protocol::ToolName::parse(tool), &args.to_string()).await
}

#[tokio::test]
async fn read_file_whole_and_ranges() {
    let (_dir, ctx) = setup();
    let out = run(&ctx, "read_file", json!({"path": "README.md"})).await;
    assert_eq!(out, ToolOutcome::ok("one\ntwo\nthree\nfour\nfive\n"));
    let out = run(&ctx, "read_file", json!({"path": "README.md", "offset": 2, "limit": 2})).await;
    assert_eq!(out.content, "two\nthree\n");
    let out = run(&ctx, "read_file", json!({"path": "README.md", "offset": 4})).await;
    assert_eq!(out.content, "four\nfive\n");
    let out = run(&ctx, "read_file", json!({"path": "README.md", "offset": 9})).await;
    assert!(!out.ok);
    assert_eq!(out.content, "offset 9 is past the end of README.md (5 lines)");
}

#[tokio::test]
async fn read_file_errors() {
    let (dir, ctx) = setup();
    let out = run(&ctx, "read_file", json!({"path": "src"})).await;
    assert!(!out.ok && out.content.contains("is a directory"), "{out:?}");
    let out = run(&ctx, "read_file", json!({"path": "missing.txt"})).await;
    assert_eq!(out, ToolOutcome::error("no such file or directory: missing.txt"));
    let out = run(&ctx, "read_file", json!({"path": "../etc/passwd"})).await;
    assert_eq!(out, ToolOutcome::error("path escapes the workspace: ../etc/passwd"));
    let out = run(&ctx, "read_file", json!({"path": "/etc/passwd"})).await;
    assert_eq!(out, ToolOutcome::error("absolute paths are not allowed: /etc/passwd"));
    let out = run(&ctx, "read_file", json!({"path": ""})).await;
    assert!(!out.ok && out.content.contains("empty path"));
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "s").unwrap();
    symlink(outside.path().join("secret"), dir.path().join("leak")).unwrap();
    let out = run(&ctx, "read_file", json!({"path": "leak"})).await;
    assert!(!out.ok && out.content.starts_with("symlink leaves the workspace: leak -> "), "{out:?}");
    symlink("src/lib.rs", dir.path().join("lib-link")).unwrap();
    let out = run(&ctx, "read_file", json!({"path": "lib-link"})).await;
    assert!(out.ok && out.content.starts_with("pub fn add"));
}

#[tokio::test]
async fn read_file_lossy_empty_and_capped() {
    let (dir, mut ctx) = setup();
    fs::write(dir.path().join("bin.dat"), b"ok \xff\xfe end").unwrap();
    let out = run(&ctx, "read_file", json!({"path": "bin.dat"})).await;
    assert!(out.ok);
    assert!(out.content.starts_with("ok \u{fffd}\u{fffd} end"));
    assert!(out.content.contains("not valid UTF-8"));
    fs::write(dir.path().join("empty"), "").unwrap();
    assert_eq!(run(&ctx, "read_file", json!({"path": "empty"})).await.content, "[empty file]");
    ctx.max_output_bytes = 10;
    let out = run(&ctx, "read_file", json!({"path": "README.md"})).await;
    assert!(out.ok && !out.complete);
    assert!(out.content.starts_with("one\ntwo\n\n[output cut at 10 bytes"), "{out:?}");
}

#[tokio::test]
async fn list_dir_sorted_with_dir_suffix() {
    let (dir, ctx) = setup();
    fs::create_dir(dir.path().join(".git")).unwrap();
    fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
    let out = run(&ctx, "list_dir", json!({"path": "."})).await;
    assert_eq!(out, ToolOutcome::ok(".git/\nREADME.md\nsrc/"));
    let out = run(&ctx, "list_dir", json!({"path": "src"})).await;
    assert_eq!(out.content, "lib.rs\nnested/");
    let out = run(&ctx, "list_dir", json!({"path": "README.md"})).await;
    assert!(!out.ok && out.content.contains("not a directory"));
    let out = run(&ctx, "list_dir", json!({"path": "src/../.."})).await;
    assert!(!out.ok && out.content.starts_with("path escapes the workspace"));
    fs::create_dir(dir.path().join("void")).unwrap();
    assert_eq!(run(&ctx, "list_dir", json!({"path": "void"})).await.content, "void is empty");
}

#[tokio::test]
async fn search_finds_regex_matches_as_ripgrep_prints_them() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join(".gitignore"), "target/\nnode_modules/\n").unwrap();
    for skipped in ["target", "node_modules", ".git", ".hidden"] {
        fs::create_dir(dir.path().join(skipped)).unwrap();
        fs::write(dir.path().join(skipped).join("x.rs"), "fn add() {}\n").unwrap();
    }
    fs::write(dir.path().join("blob.bin"), b"add\0\0\0").unwrap();
    let out = run(&ctx, "search", json!({"pattern": "add"})).await;
    assert_eq!(
        out,
        ToolOutcome::ok(
            "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {\nsrc/nested/util.rs:1:// add helpers"
        ),
        "ignored, hidden, .git and binary files are skipped"
    );
    // A regular expression, in ripgrep's syntax.
    let out = run(&ctx, "search", json!({"pattern": r"fn \w+\(", "path": "src"})).await;
    assert_eq!(
        out.content,
        "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {\nsrc/nested/util.rs:2:fn helper() {}"
    );
    let out =
        run(&ctx, "search", json!({"pattern": "ADD", "case_insensitive": true, "path": "src/lib.rs"})).await;
    assert_eq!(out.content, "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {");
    // fixed_strings: the text as it is ("a + b" as a regex wants spaces before " b").
    let out = run(&ctx, "search", json!({"pattern": "a + b"})).await;
    assert!(out.ok && out.content.starts_with("no matches for \"a + b\" in ."), "{out:?}");
    let out = run(&ctx, "search", json!({"pattern": "a + b", "fixed_strings": true})).await;
    assert_eq!(out.content, "src/lib.rs:2:    a + b");
    // A bad pattern is an error that says so, and how to search for the text instead.
    let out = run(&ctx, "search", json!({"pattern": "(a"})).await;
    assert!(!out.ok, "{out:?}");
    assert!(
        out.content.starts_with("invalid arguments for search: `pattern` is not a valid regular expression"),
        "{}",
        out.content
    );
    assert!(
        out.content.contains("unclosed group") && out.content.contains("fixed_strings"),
        "{}",
        out.content
    );
    let out = run(&ctx, "search", json!({"pattern": "(a", "fixed_strings": true, "path": "src"})).await;
    assert_eq!(out.content, "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {");
    // An explicit path is searched even when it is ignored; hidden and no_ignore search the rest.
    let out = run(&ctx, "search", json!({"pattern": "add", "path": "target"})).await;
    assert_eq!(out.content, "target/x.rs:1:fn add() {}");
    let out = run(&ctx, "search", json!({"pattern": "fn add\\(\\)", "hidden": true})).await;
    assert_eq!(out.content, ".hidden/x.rs:1:fn add() {}");
    let out = run(&ctx, "search", json!({"pattern": "fn add\\(\\)", "no_ignore": true})).await;
    assert_eq!(out.content, "node_modules/x.rs:1:fn add() {}\ntarget/x.rs:1:fn add() {}");
    // Globs include or exclude, and override the ignore files.
    let out = run(&ctx, "search", json!({"pattern": "o", "glob": "*.md"})).await;
    assert_eq!(out.content, "README.md:1:one\nREADME.md:2:two\nREADME.md:4:four");
    let out = run(&ctx, "search", json!({"pattern": "add", "glob": ["!*.rs"]})).await;
    assert!(out.content.starts_with("no matches"), "{out:?}");
    let out = run(&ctx, "search", json!({"pattern": "add", "glob": ["*.rs", "!util.rs"]})).await;
    assert_eq!(out.content, "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {");
    let out = run(&ctx, "search", json!({"pattern": "x", "glob": "a[b"})).await;
    assert!(!out.ok && out.content.contains("bad glob \"a[b\""), "{out:?}");
    // What was skipped is said when nothing matched.
    let out = run(&ctx, "search", json!({"pattern": "fn add\\(\\)"})).await;
    assert!(out.content.contains("hidden or ignored entries were not searched"), "{out:?}");
    let out = run(&ctx, "search", json!({"pattern": "add", "path": "blob.bin"})).await;
    assert!(!out.ok && out.content.contains("binary file"), "{out:?}");
    for (args, message) in [
        (json!({"pattern": ""}), "`pattern` must not be empty"),
        (json!({"pattern": "a\nb"}), "line break"),
        (json!({"pattern": "x", "context": 11}), "`context` must be at most 10"),
        (json!({"pattern": "x", "max_results": 0}), "`max_results` must be from 1 to 1000"),
        (json!({"pattern": "x", "hidden": "yes"}), "field `hidden` must be true or false"),
    ] {
        let out = run(&ctx, "search", args.clone()).await;
        assert!(!out.ok && out.content.contains(message), "{args}: {out:?}");
    }
    let out = run(&ctx, "search", json!({"pattern": "x", "path": "/"})).await;
    assert!(!out.ok && out.content.starts_with("absolute paths"));
}

#[tokio::test]
async fn search_prints_context_lines_and_separates_groups() {
    let (dir, ctx) = setup();
    let out = run(&ctx, "search", json!({"pattern": "three", "context": 1})).await;
    assert_eq!(out.content, "README.md-2-two\nREADME.md:3:three\nREADME.md-4-four");
    let text: String =
        (1..=12).map(|i| format!("{}\n", if i == 2 || i == 8 || i == 9 { "hit" } else { "x" })).collect();
    fs::write(dir.path().join("f.txt"), text).unwrap();
    let out = run(&ctx, "search", json!({"pattern": "hit", "context": 1, "path": "f.txt"})).await;
    assert_eq!(
        out.content,
        "f.txt-1-x\nf.txt:2:hit\nf.txt-3-x\n--\nf.txt-7-x\nf.txt:8:hit\nf.txt:9:hit\nf.txt-10-x"
    );
    // Between files too.
    let out =
        run(&ctx, "search", json!({"pattern": "^(hit|four)$", "context": 1, "glob": ["*.md", "f.txt"]}))
            .await;
    assert!(
        out.content.starts_with("README.md-3-three\nREADME.md:4:four\nREADME.md-5-five\n--\nf.txt-1-x"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn search_subdirectories_keep_their_parents_ignore_rules() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join(".gitignore"), "*.log\n").unwrap();
    fs::write(dir.path().join("src/debug.log"), "needle\n").unwrap();
    fs::write(dir.path().join("src/keep.log"), "needle\n").unwrap();
    fs::write(dir.path().join("src/nested/.ignore"), "!*.log\n").unwrap();
    fs::write(dir.path().join("src/nested/deep.log"), "needle\n").unwrap();
    let out = run(&ctx, "search", json!({"pattern": "needle", "path": "src"})).await;
    assert_eq!(
        out.content, "src/nested/deep.log:1:needle",
        "the root's *.log holds in src; src/nested's .ignore re-includes"
    );
    fs::write(dir.path().join("src/.gitignore"), "!keep.log\n").unwrap();
    let out = run(&ctx, "search", json!({"pattern": "needle"})).await;
    assert_eq!(out.content, "src/keep.log:1:needle\nsrc/nested/deep.log:1:needle");
    // An ignore file that is a symlink is not read (it could lead anywhere).
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("rules"), "*.rs\n").unwrap();
    fs::remove_file(dir.path().join(".gitignore")).unwrap();
    symlink(outside.path().join("rules"), dir.path().join(".gitignore")).unwrap();
    let out = run(&ctx, "search", json!({"pattern": "fn add"})).await;
    assert_eq!(out.content, "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {");
}

#[tokio::test]
async fn search_caps_what_it_shows_and_hands_over_the_rest() {
    let (dir, mut ctx) = setup();
    fs::write(dir.path().join("many.txt"), "hit\n".repeat(250)).unwrap();
    let out = run(&ctx, "search", json!({"pattern": "hit"})).await;
    let lines: Vec<_> = out.content.lines().collect();
    assert_eq!(lines.len(), 101, "{}", out.content);
    assert_eq!(lines[0], "many.txt:1:hit");
    assert_eq!(lines[99], "many.txt:100:hit");
    assert_eq!(lines[100], "[search: 250 matching lines in 1 file; the first 100 shown (max_results 100).]");
    let overflow = out.overflow.as_ref().expect("the complete output goes with the result");
    assert_eq!(overflow.shown_lines, 100);
    assert_eq!(overflow.full.lines().count(), 250);
    assert!(overflow.full.starts_with(&lines[..100].join("\n")));
    assert!(out.ok && out.complete);
    let out = run(&ctx, "search", json!({"pattern": "hit", "max_results": 10})).await;
    assert_eq!(out.content.lines().count(), 11);
    assert_eq!(out.overflow.unwrap().shown_lines, 10);
    // Bytes: long lines fill the shown output before max_results does; lines are cut at 500 chars.
    fs::write(dir.path().join("wide.txt"), format!("{}\n", "w".repeat(2000)).repeat(100)).unwrap();
    let out = run(&ctx, "search", json!({"pattern": "w", "path": "wide.txt"})).await;
    assert!(out.content.len() <= search::MAX_SHOWN_BYTES + 200, "{}", out.content.len());
    assert!(out.content.lines().next().unwrap().ends_with('…'));
    assert!(
        out.content.contains("(output shown is capped at 32 KiB)"),
        "{}",
        out.content.lines().last().unwrap()
    );
    assert_eq!(out.overflow.unwrap().full.lines().count(), 100);
    // The complete output is bounded too: past it the result is marked incomplete and says so.
    ctx.max_output_bytes = 1000;
    let out = run(&ctx, "search", json!({"pattern": "hit", "path": "many.txt", "max_results": 5})).await;
    assert!(out.ok && !out.complete, "{out:?}");
    assert!(
        out.content.contains("250 matching lines") && out.content.contains("stops at 1000 bytes"),
        "{}",
        out.content
    );
    assert!(out.overflow.unwrap().full.len() <= 1000);
    // A small result has no overflow.
    assert_eq!(run(&ctx, "search", json!({"pattern": "three"})).await.overflow, None);
}

#[tokio::test]
async fn search_streams_files_of_any_size() {
    let (dir, ctx) = setup();
    let mut big = "filler line of text\n".repeat(250_000);
    big.push_str("the needle at the end\n");
    assert!(big.len() > 4 << 20);
    fs::write(dir.path().join("big.txt"), big).unwrap();
    let out = run(&ctx, "search", json!({"pattern": "needle"})).await;
    assert_eq!(out.content, "big.txt:250001:the needle at the end");
}

#[tokio::test]
async fn write_file_creates_parents() {
    let (dir, ctx) = setup();
    let out = run(&ctx, "write_file", json!({"path": "new/deep/file.txt", "content": "héllo"})).await;
    assert_eq!(out, ToolOutcome::ok("created new/deep/file.txt: wrote 6 bytes"));
    assert_eq!(fs::read_to_string(dir.path().join("new/deep/file.txt")).unwrap(), "héllo");
    let out = run(&ctx, "write_file", json!({"path": "README.md", "content": ""})).await;
    assert_eq!(out.content, "replaced README.md: wrote 0 bytes");
    let out = run(&ctx, "write_file", json!({"path": "src", "content": "x"})).await;
    assert!(!out.ok);
    let out = run(&ctx, "write_file", json!({"path": "../escape.txt", "content": "x"})).await;
    assert!(!out.ok && out.content.starts_with("path escapes the workspace"));
    assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    let out = run(&ctx, "write_file", json!({"path": "out/x/planted.txt", "content": "x"})).await;
    assert!(!out.ok && out.content.starts_with("symlink leaves the workspace: out -> "), "{out:?}");
    assert!(!outside.path().join("x").exists());
    let out = run(&ctx, "write_file", json!({"path": "a.txt"})).await;
    assert_eq!(out.content, "invalid arguments for write_file: missing field `content`");
}

#[tokio::test]
async fn edit_file_requires_a_unique_match() {
    let (dir, ctx) = setup();
    let out = run(
        &ctx,
        "edit_file",
        json!({"path": "src/lib.rs", "old_text": "a + b", "new_text": "a.wrapping_add(b)"}),
    )
    .await;
    assert_eq!(out, ToolOutcome::ok("edited src/lib.rs: replaced 1 occurrence at line 2"));
    assert!(fs::read_to_string(dir.path().join("src/lib.rs")).unwrap().contains("    a.wrapping_add(b)\n"));
    let out =
        run(&ctx, "edit_file", json!({"path": "src/lib.rs", "old_text": "a + b", "new_text": "x"})).await;
    assert_eq!(out, ToolOutcome::error("old_text not found in src/lib.rs"));
    let out =
        run(&ctx, "edit_file", json!({"path": "src/lib.rs", "old_text": "i32", "new_text": "i64"})).await;
    assert_eq!(out, ToolOutcome::error("old_text occurs 3 times in src/lib.rs; make it unique"));
    let out = run(&ctx, "edit_file", json!({"path": "src/lib.rs", "old_text": "", "new_text": "x"})).await;
    assert!(!out.ok);
    let out = run(&ctx, "edit_file", json!({"path": "nope.rs", "old_text": "a", "new_text": "b"})).await;
    assert_eq!(out.content, "no such file or directory: nope.rs");
    let out = execute(
        &ctx,
        &agentd_protocol::ToolName::parse("edit_file"),
        r#"{"path":"src/lib.rs","new_text":"x"}"#,
    )
    .await;
    assert_eq!(out, ToolOutcome::error("invalid arguments for edit_file: missing field `old_text`"));
}

#[tokio::test]
async fn malformed_arguments_never_panic() {
    let (_dir, ctx) = setup();
    for tool in ["read_file", "list_dir", "search", "write_file", "edit_file", "run_command"] {
        for args in
            ["{", "not json", "[]", "42", "null", r#"{"path": 7, "pattern": [], "command": {}}"#, "\u{0}"]
        {
            let out = execute(&ctx, &agentd_protocol::ToolName::parse(tool), args).await;
            assert!(!out.ok, "{tool} {args}: {out:?}");
            assert!(
                out.content.starts_with(&format!("invalid arguments for {tool}")),
                "{tool} {args}: {out:?}"
            );
        }
    }
    let out = execute(&ctx, &agentd_protocol::ToolName::parse("read_file"), r#"{"path": 7}"#).await;
    assert_eq!(out.content, "invalid arguments for read_file: field `path` must be a string, got a number");
    let out = execute(
        &ctx,
        &agentd_protocol::ToolName::parse("read_file"),
        r#"{"path": "README.md", "offset": -2}"#,
    )
    .await;
    assert!(out.content.contains("field `offset` must be a non-negative integer"));
}

#[tokio::test]
async fn runtime_and_unknown_tools() {
    let (_dir, ctx) = setup();
    for tool in ["delegate", "finish", "read_evidence"] {
        let out = execute(&ctx, &agentd_protocol::ToolName::parse(tool), "{}").await;
        assert_eq!(out, ToolOutcome::error(format!("tool {tool} is handled by the runtime")));
    }
    assert_eq!(
        execute(&ctx, &agentd_protocol::ToolName::parse("rm_rf"), "{}").await,
        ToolOutcome::error("unknown tool rm_rf")
    );
}

#[tokio::test]
async fn run_command_exit_code_and_output() {
    let (_dir, ctx) = setup();
    let out = run(&ctx, "run_command", json!({"command": "cat README.md | head -n 2; echo oops >&2"})).await;
    assert!(out.ok && out.complete);
    assert_eq!(out.content, "exit code: 0\n--- stdout ---\none\ntwo\n--- stderr ---\noops");
    let out = run(&ctx, "run_command", json!({"command": "pwd"})).await;
    assert!(out.content.ends_with(&ctx.workspace.root().display().to_string()), "{out:?}");
    let out = run(&ctx, "run_command", json!({"command": "exit 3"})).await;
    assert_eq!(out, ToolOutcome::error("exit code: 3\n(no output)"));
    let out = run(&ctx, "run_command", json!({"command": "cat"})).await;
    assert!(out.ok, "stdin is null, so cat ends at once: {out:?}");
    let out = run(&ctx, "run_command", json!({"command": "  "})).await;
    assert!(!out.ok && out.content.contains("`command` must not be empty"));
}

#[tokio::test]
async fn run_command_times_out_and_kills_the_group() {
    let (dir, ctx) = setup();
    let started = Instant::now();
    let out = run(
        &ctx,
        "run_command",
        json!({"command": "echo started; sleep 5 | cat; touch late", "timeout_s": 1}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert!(!out.ok && !out.complete);
    assert_eq!(out.content, "killed after 1s timeout\n--- stdout ---\nstarted");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!dir.path().join("late").exists());
}

#[tokio::test]
async fn run_command_caps_output() {
    let (_dir, mut ctx) = setup();
    ctx.max_output_bytes = 100;
    let out = run(&ctx, "run_command", json!({"command": "yes | head -c 100000"})).await;
    assert!(out.ok, "the exit code still decides ok: {out:?}");
    assert!(!out.complete);
    assert!(out.content.ends_with("[output cut at 100 bytes]"));
    assert_eq!(out.content.matches("y\n").count(), 50);
}

#[tokio::test]
async fn run_command_stops_reading_behind_a_background_job() {
    let (_dir, ctx) = setup();
    let started = Instant::now();
    let out = run(&ctx, "run_command", json!({"command": "sleep 3 & echo hi"})).await;
    assert!(started.elapsed() < Duration::from_millis(2500), "took {:?}", started.elapsed());
    assert!(out.ok && !out.complete, "{out:?}");
    assert!(out.content.starts_with("exit code: 0\n--- stdout ---\nhi"));
}

#[tokio::test]
async fn dropping_a_running_command_kills_its_group() {
    let (dir, ctx) = setup();
    let call = run(&ctx, "run_command", json!({"command": "sh -c 'echo $$ > child.pid; exec sleep 30'"}));
    assert!(tokio::time::timeout(Duration::from_millis(500), call).await.is_err());
    let pid = fs::read_to_string(dir.path().join("child.pid")).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    let started = Instant::now();
    // Gone, or a zombie waiting to be reaped.
    while fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(started.elapsed() < Duration::from_secs(2), "grandchild {} still runs", pid.trim());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- Confinement: races, hard links, symlinks, atomic writes, the fallback walk. ----

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RenameFlags};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const ATTEMPTS: usize = 500;

/// The same workspace twice: with `openat2`, and with the component walk forced.
fn both_modes(ctx: &ToolContext) -> Vec<(&'static str, ToolContext)> {
    let mut walk = ctx.clone();
    walk.workspace = walk.workspace.clone().walk_only();
    vec![("openat2", ctx.clone()), ("walk", walk)]
}

/// The names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// A thread that keeps exchanging `a` and `b` in `dir` (`renameat2(RENAME_EXCHANGE)`) until stopped,
/// and puts `b` back as a symlink to `target` whenever a tool's rename replaced the link.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(dir: &std::path::Path, a: &'static str, b: &'static str, target: &std::path::Path) -> Swapper {
        let fd = rfs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicUsize::new(0));
        let target = target.to_path_buf();
        let thread = {
            let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
            std::thread::spawn(move || {
                let is_link = |name: &str| {
                    rfs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
                };
                while !stop.load(Ordering::Relaxed) {
                    if rfs::renameat_with(&fd, a, &fd, b, RenameFlags::EXCHANGE).is_ok() {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                    if !is_link(a) && !is_link(b) {
                        let _ = rfs::unlinkat(&fd, b, AtFlags::empty());
                        let _ = rfs::symlinkat(&target, &fd, b);
                    }
                }
            })
        };
        Swapper { stop, swaps, thread: Some(thread) }
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[tokio::test]
async fn a_file_swapped_for_a_symlink_never_leaks() {
    for mode in ["openat2", "walk"] {
        let (dir, ctx) = setup();
        let ctx = both_modes(&ctx).into_iter().find(|(m, _)| *m == mode).unwrap().1;
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "OUTSIDE\n").unwrap();
        fs::write(dir.path().join("f"), "inside\n").unwrap();
        symlink(outside.path().join("secret"), dir.path().join("swap")).unwrap();
        let swapper = Swapper::start(dir.path(), "f", "swap", &outside.path().join("secret"));
        let (mut read_ok, mut read_refused, mut write_ok, mut write_refused) = (0, 0, 0, 0);
        for i in 0..ATTEMPTS {
            let out = run(&ctx, "read_file", json!({"path": "f"})).await;
            assert!(!out.content.contains("OUTSIDE"), "{mode}: read {i} leaked: {out:?}");
            if out.ok {
                read_ok += 1;
            } else {
                read_refused += 1;
            }
            let out = run(&ctx, "write_file", json!({"path": "f", "content": format!("inside {i}\n")})).await;
            if out.ok {
                write_ok += 1;
            } else {
                write_refused += 1;
            }
            let out =
                run(&ctx, "edit_file", json!({"path": "f", "old_text": "inside", "new_text": "inside"}))
                    .await;
            assert!(!out.content.contains("OUTSIDE"), "{mode}: edit {i} leaked: {out:?}");
        }
        let swaps = swapper.finish();
        assert_eq!(fs::read_to_string(outside.path().join("secret")).unwrap(), "OUTSIDE\n", "{mode}");
        assert_eq!(names(outside.path()), ["secret"], "{mode}: nothing created outside");
        assert!(swaps > 0, "{mode}: the swapper never swapped");
        assert!(!names(dir.path()).iter().any(|n| n.contains(".agentd-write")), "{mode}: temp left");
        eprintln!(
            "file swap ({mode}): {swaps} swaps; reads {read_ok} ok / {read_refused} refused; \
             writes {write_ok} ok / {write_refused} refused; 0 escapes"
        );
    }
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_never_leaks() {
    for mode in ["openat2", "walk"] {
        let (dir, ctx) = setup();
        let ctx = both_modes(&ctx).into_iter().find(|(m, _)| *m == mode).unwrap().1;
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("f"), "OUTSIDE\n").unwrap();
        fs::write(outside.path().join("only-outside.txt"), "OUTSIDE\n").unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        fs::write(dir.path().join("d/f"), "inside\n").unwrap();
        symlink(outside.path(), dir.path().join("dswap")).unwrap();
        let swapper = Swapper::start(dir.path(), "d", "dswap", outside.path());
        let (mut read_ok, mut read_refused, mut write_ok, mut write_refused) = (0, 0, 0, 0);
        for i in 0..ATTEMPTS {
            let out = run(&ctx, "read_file", json!({"path": "d/f"})).await;
            assert!(!out.content.contains("OUTSIDE"), "{mode}: read {i} leaked: {out:?}");
            if out.ok {
                read_ok += 1;
            } else {
                read_refused += 1;
            }
            let out = run(&ctx, "search", json!({"pattern": "OUTSIDE", "path": "d"})).await;
            assert!(out.content.starts_with("no matches") || !out.ok, "{mode}: search {i} leaked: {out:?}");
            let out = run(&ctx, "list_dir", json!({"path": "d"})).await;
            assert!(!out.content.contains("only-outside"), "{mode}: list_dir {i} leaked: {out:?}");
            let path = if i % 2 == 0 { "d/f".to_string() } else { format!("d/new/{i}.txt") };
            let out = run(&ctx, "write_file", json!({"path": path, "content": "inside\n"})).await;
            if out.ok {
                write_ok += 1;
            } else {
                write_refused += 1;
            }
            let out =
                run(&ctx, "edit_file", json!({"path": "d/f", "old_text": "inside", "new_text": "inside"}))
                    .await;
            assert!(!out.content.contains("OUTSIDE"), "{mode}: edit {i} leaked: {out:?}");
        }
        let swaps = swapper.finish();
        assert_eq!(fs::read_to_string(outside.path().join("f")).unwrap(), "OUTSIDE\n", "{mode}");
        assert_eq!(names(outside.path()), ["f", "only-outside.txt"], "{mode}: nothing created outside");
        assert!(swaps > 0, "{mode}: the swapper never swapped");
        eprintln!(
            "directory swap ({mode}): {swaps} swaps; reads {read_ok} ok / {read_refused} refused; \
             writes {write_ok} ok / {write_refused} refused; 0 escapes"
        );
    }
}

#[tokio::test]
async fn hard_links_are_refused_for_read_write_and_edit() {
    let (dir, ctx) = setup();
    let outside = tempfile::tempdir_in(dir.path().parent().unwrap()).unwrap();
    fs::write(outside.path().join("secret"), "OUTSIDE\n").unwrap();
    fs::hard_link(outside.path().join("secret"), dir.path().join("hl")).unwrap();
    let refusal = "hl has 2 hard links; a hard-linked file may also be reachable from outside the \
                   workspace, so it is neither read nor written";
    for (mode, ctx) in both_modes(&ctx) {
        let out = run(&ctx, "read_file", json!({"path": "hl"})).await;
        assert_eq!(out, ToolOutcome::error(refusal), "{mode}");
        let out = run(&ctx, "write_file", json!({"path": "hl", "content": "x"})).await;
        assert_eq!(out, ToolOutcome::error(refusal), "{mode}");
        let out = run(&ctx, "edit_file", json!({"path": "hl", "old_text": "OUTSIDE", "new_text": "x"})).await;
        assert_eq!(out, ToolOutcome::error(refusal), "{mode}");
        let out = run(&ctx, "search", json!({"pattern": "OUTSIDE"})).await;
        assert!(out.ok && out.content.starts_with("no matches"), "{mode}: search skips it: {out:?}");
        // Directories always have several links; they are not affected.
        assert!(run(&ctx, "list_dir", json!({"path": "src"})).await.ok, "{mode}");
    }
    assert_eq!(fs::read_to_string(outside.path().join("secret")).unwrap(), "OUTSIDE\n");
    assert_eq!(fs::metadata(dir.path().join("hl")).unwrap().permissions().mode() & 0o777, 0o644);
}

#[tokio::test]
async fn confinement_holds_in_both_modes() {
    let (dir, ctx) = setup();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), "OUTSIDE\n").unwrap();
    symlink(outside.path().join("secret"), dir.path().join("leak")).unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    symlink("src/lib.rs", dir.path().join("lib-link")).unwrap();
    symlink("../README.md", dir.path().join("src/readme")).unwrap();
    for (mode, ctx) in both_modes(&ctx) {
        for (tool, args) in [
            ("read_file", json!({"path": "leak"})),
            ("read_file", json!({"path": "out/secret"})),
            ("write_file", json!({"path": "leak", "content": "x"})),
            ("write_file", json!({"path": "out/new.txt", "content": "x"})),
            ("write_file", json!({"path": "out/sub/new.txt", "content": "x"})),
            ("edit_file", json!({"path": "leak", "old_text": "OUTSIDE", "new_text": "x"})),
            ("list_dir", json!({"path": "out"})),
            ("search", json!({"pattern": "OUTSIDE", "path": "out"})),
        ] {
            let out = run(&ctx, tool, args.clone()).await;
            assert!(!out.ok, "{mode}: {tool} {args}: {out:?}");
            assert!(
                out.content.starts_with("symlink leaves the workspace: "),
                "{mode}: {tool} {args}: {out:?}"
            );
        }
        for tool in ["read_file", "list_dir", "search", "write_file", "edit_file"] {
            let args = json!({"path": "../README.md", "pattern": "x", "content": "x", "old_text": "a", "new_text": "b"});
            let out = run(&ctx, tool, args).await;
            assert_eq!(out, ToolOutcome::error("path escapes the workspace: ../README.md"), "{mode} {tool}");
            let args = json!({"path": "/etc/passwd", "pattern": "x", "content": "x", "old_text": "a", "new_text": "b"});
            let out = run(&ctx, tool, args).await;
            assert_eq!(
                out,
                ToolOutcome::error("absolute paths are not allowed: /etc/passwd"),
                "{mode} {tool}"
            );
        }
        // The root's search never follows a link out.
        let out = run(&ctx, "search", json!({"pattern": "OUTSIDE"})).await;
        assert!(out.ok && out.content.starts_with("no matches"), "{mode}: {out:?}");
        // Links that stay inside are honoured for reading and writing.
        let out = run(&ctx, "read_file", json!({"path": "lib-link"})).await;
        assert!(out.ok && out.content.starts_with("pub fn add"), "{mode}: {out:?}");
        let out = run(&ctx, "read_file", json!({"path": "src/readme", "limit": 1})).await;
        assert_eq!(out.content, "one\n", "{mode}");
        let out = run(&ctx, "list_dir", json!({"path": "."})).await;
        assert!(
            out.content.contains("lib-link -> src/lib.rs"),
            "{mode}: links are shown, not followed: {out:?}"
        );
        let out = run(&ctx, "write_file", json!({"path": "new/x.txt", "content": mode})).await;
        assert!(out.ok, "{mode}: {out:?}");
        assert_eq!(fs::read_to_string(dir.path().join("new/x.txt")).unwrap(), mode);
    }
    assert_eq!(names(outside.path()), ["secret"]);
    assert_eq!(fs::read_to_string(outside.path().join("secret")).unwrap(), "OUTSIDE\n");
}

#[tokio::test]
async fn atomic_writes_leave_no_temp_file_and_keep_the_mode() {
    let (dir, ctx) = setup();
    fs::set_permissions(dir.path().join("README.md"), fs::Permissions::from_mode(0o600)).unwrap();
    for (mode, ctx) in both_modes(&ctx) {
        let out = run(&ctx, "write_file", json!({"path": "README.md", "content": "replaced\n"})).await;
        assert!(out.ok, "{mode}: {out:?}");
        let out = run(
            &ctx,
            "edit_file",
            json!({"path": "README.md", "old_text": "replaced", "new_text": "edited"}),
        )
        .await;
        assert!(out.ok, "{mode}: {out:?}");
        let out = run(&ctx, "write_file", json!({"path": "src/nested/fresh.rs", "content": "x"})).await;
        assert!(out.ok, "{mode}: {out:?}");
    }
    assert_eq!(fs::read_to_string(dir.path().join("README.md")).unwrap(), "edited\n");
    assert_eq!(fs::metadata(dir.path().join("README.md")).unwrap().permissions().mode() & 0o7777, 0o600);
    assert_eq!(
        fs::metadata(dir.path().join("src/nested/fresh.rs")).unwrap().permissions().mode() & 0o7777,
        0o644
    );
    assert_eq!(names(dir.path()), ["README.md", "src"]);
    assert_eq!(names(&dir.path().join("src/nested")), ["fresh.rs", "util.rs"]);
}

#[tokio::test]
async fn a_write_that_fails_midway_keeps_the_old_content() {
    let (dir, ctx) = setup();
    for (mode, ctx) in both_modes(&ctx) {
        let mut failing = ctx.clone();
        failing.workspace = failing.workspace.clone().failing_writes_after(4);
        let out = run(&failing, "write_file", json!({"path": "README.md", "content": "a new text\n"})).await;
        assert!(!out.ok && out.content.contains("injected failure"), "{mode}: {out:?}");
        let out =
            run(&failing, "edit_file", json!({"path": "README.md", "old_text": "two", "new_text": "2"}))
                .await;
        assert!(!out.ok && out.content.contains("injected failure"), "{mode}: {out:?}");
        let out =
            run(&failing, "write_file", json!({"path": "brand-new.txt", "content": "a new text\n"})).await;
        assert!(!out.ok, "{mode}: {out:?}");
        assert_eq!(
            fs::read_to_string(dir.path().join("README.md")).unwrap(),
            "one\ntwo\nthree\nfour\nfive\n"
        );
        assert_eq!(names(dir.path()), ["README.md", "src"], "{mode}: no temp file, no half-written file");
    }
    // A read-only directory, where permissions bind (not as root): the temp file cannot be made.
    fs::set_permissions(dir.path().join("src"), fs::Permissions::from_mode(0o555)).unwrap();
    let privileged = fs::write(dir.path().join("src/probe"), "").is_ok();
    let out = run(&ctx, "write_file", json!({"path": "src/lib.rs", "content": "x"})).await;
    if !privileged {
        assert!(!out.ok && out.content.starts_with("src/lib.rs: "), "{out:?}");
        assert!(fs::read_to_string(dir.path().join("src/lib.rs")).unwrap().starts_with("pub fn add"));
        assert_eq!(names(&dir.path().join("src")), ["lib.rs", "nested"]);
    }
    fs::set_permissions(dir.path().join("src"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// Found by the `tool_args` fuzz oracle: a write whose arguments came double-encoded (a JSON string
/// holding the object, which `execute` accepts) changed a file without `changed_path` naming it.
#[tokio::test]
async fn changed_path_names_a_double_encoded_write() {
    let (dir, ctx) = setup();
    let args = json!(json!({"path": "notes.md", "content": "hi"}).to_string()).to_string();
    assert_eq!(
        changed_path(&agentd_protocol::ToolName::parse("write_file"), &args).as_deref(),
        Some("notes.md")
    );
    assert!(execute(&ctx, &agentd_protocol::ToolName::parse("write_file"), &args).await.ok);
    assert_eq!(fs::read_to_string(dir.path().join("notes.md")).unwrap(), "hi");
    assert_eq!(changed_path(&agentd_protocol::ToolName::parse("edit_file"), r#"{"path": 5}"#), None);
    assert_eq!(changed_path(&agentd_protocol::ToolName::parse("read_file"), r#"{"path": "a"}"#), None);
}
