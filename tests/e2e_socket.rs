//! End-to-end: the socket protocol's error handling. Every bad input gets its JSON-RPC error and the
//! same connection keeps working.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn daemon() -> TestDaemon {
    // No model is ever asked in these tests; the server address only has to parse.
    TestDaemon::start(Path::new(BIN), &team_config("http://127.0.0.1:9/v1", "gpt-4o", ""))
}

fn error_code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error: {v}"))
}

#[test]
fn bad_input_gets_errors_and_the_connection_stays_usable() {
    let d = daemon();
    let mut c = d.client();

    c.send_raw(b"{not json\n");
    assert_eq!(error_code(&c.read_value().unwrap()), -32700);

    c.send_raw(b"[1,2,3]\n");
    assert_eq!(error_code(&c.read_value().unwrap()), -32600);

    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":5}\n");
    let v = c.read_value().unwrap();
    assert_eq!(error_code(&v), -32600);
    assert_eq!(v["id"], 5);

    let e = c.call("task.explode", json!({})).unwrap_err();
    assert_eq!(e.code, -32601);
    assert!(e.message.contains("task.explode"), "{e}");

    let e = c.call("task.status", json!({})).unwrap_err();
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("task_id"), "{e}");

    let e = c.call("task.status", json!({"task_id": 42})).unwrap_err();
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("task_id") && e.message.contains("string"), "{e}");

    // Not absolute: a malformed parameter (-32602); no directory there: -32004; a directory agentd
    // will not work in: -32007.
    let e = c.call("task.submit", json!({"objective": "x", "workspace": "relative/dir"})).unwrap_err();
    assert_eq!(e.code, -32602, "{e}");
    let e = c.call("task.submit", json!({"objective": "", "workspace": "/"})).unwrap_err();
    assert_eq!(e.code, -32602, "{e}");
    let e = c.call("task.submit", json!({"objective": "x", "workspace": "/no/such/dir"})).unwrap_err();
    assert_eq!(e.code, -32004, "{e}");
    assert!(e.message.contains("/no/such/dir"), "{e}");
    // The root, the system's directories, the daemon's home and any directory holding it are never
    // workspaces: a task could rewrite /etc, or agentd.toml and the database.
    let home = d.home().canonicalize().unwrap();
    let inside = home.join("evidence");
    std::fs::create_dir_all(&inside).unwrap();
    let parent = home.parent().unwrap().to_path_buf();
    for (ws, why) in [
        (Path::new("/").to_path_buf(), "system directory"),
        (Path::new("/etc").to_path_buf(), "the system's own files"),
        (Path::new("/usr/lib").to_path_buf(), "the system's own files"),
        (home.clone(), "inside the agentd home"),
        (inside, "inside the agentd home"),
        // (The test home's parent is /tmp: a system directory as well.)
        (parent, "holds the agentd home|system directory"),
    ] {
        let e = c.call("task.submit", json!({"objective": "x", "workspace": ws})).unwrap_err();
        assert_eq!(e.code, -32007, "{}: {e}", ws.display());
        let named = why.split('|').any(|w| e.message.contains(w));
        assert!(e.message.contains("is refused") && named, "{}: {e}", ws.display());
    }
    // A symlink to the home is judged as what it points at.
    let ws = tempfile::tempdir().unwrap();
    let link = ws.path().join("home-link");
    std::os::unix::fs::symlink(&home, &link).unwrap();
    let e = c.call("task.submit", json!({"objective": "x", "workspace": link})).unwrap_err();
    assert_eq!(e.code, -32007, "{e}");
    let out = d.cli(&["submit", "edit the config", "--workspace", "/etc"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/etc"), "{out:?}");

    let e = c.call("task.status", json!({"task_id": "0190aaaa-0000-7000-8000-000000000000"})).unwrap_err();
    assert_eq!(e.code, -32001);

    // A line over 8 MiB: refused, and the connection still answers afterwards.
    let mut big = Vec::with_capacity(9 << 20);
    big.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"daemon.status\",\"params\":{\"pad\":\"",
    );
    big.resize(big.len() + (8 << 20) + 100, b'a');
    big.extend_from_slice(b"\"}}\n");
    c.send_raw(&big);
    let v = c.read_value().unwrap();
    assert_eq!(error_code(&v), -32600, "{v}");

    let status = c.call("daemon.status", json!({})).unwrap();
    assert_eq!(status["tasks_running"], 0);
    assert!(status["version"].is_string());
}

#[test]
fn home_and_socket_are_private() {
    let d = daemon();
    // A home agentd creates is private; one it did not create keeps its mode (tests/e2e_conventions.rs).
    let fresh = d.home().join("fresh-home");
    let out = std::process::Command::new(BIN).arg("--home").arg(&fresh).arg("init").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let home_mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    let sock_mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(home_mode, 0o700);
    assert_eq!(sock_mode, 0o600);
}

#[test]
fn cli_without_a_daemon_exits_3_naming_the_socket() {
    let d = TestDaemon::prepare(Path::new(BIN), &team_config("http://127.0.0.1:9/v1", "gpt-4o", ""));
    let out = d.cli(&["tasks"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agentd.sock"), "{err}");
}

#[test]
fn cli_unknown_task_and_bad_usage() {
    let d = daemon();
    // No such task: exit 4, not 1 (a task that failed).
    let out = d.cli(&["status", "nope"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown task nope"));
    let out = d.cli(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

const NOBODY: u32 = 65534;

/// Root is needed to act as another user; without it the tests below are skipped with a note.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: acting as another user needs root (to setuid to {NOBODY})");
    }
    root
}

/// The home (0700) and socket (0600) keep other users out before the daemon is even asked; root
/// bypasses them but others do not, so open both: then the peer-credential check is all that is left.
fn open_to_everyone(d: &TestDaemon) {
    std::fs::set_permissions(d.home(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(d.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// `program` run as uid/gid 65534 with no supplementary groups.
/// A copy of `program` that another user can run: the build may live under a home only root can
/// enter (CI sets CARGO_TARGET_DIR under ~/.cache).
fn runnable_by_anyone(program: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("agentd-as-nobody-{}", std::process::id()));
    // The copies of test runs that are over (their process is gone) go: each is a whole binary.
    for old in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        let name = old.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix("agentd-as-nobody-") else { continue };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(old.path());
        }
    }
    std::fs::create_dir_all(&dir).expect("a directory for the copy");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod the directory");
    let copy = dir.join(program.file_name().expect("a program file name"));
    if !copy.exists() {
        let tmp =
            dir.join(format!(".{}.{:?}.tmp", copy.display().to_string().len(), std::thread::current().id()));
        std::fs::copy(program, &tmp).expect("copy the program");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod the copy");
        std::fs::rename(&tmp, &copy).expect("put the copy in place");
    }
    copy
}

/// Runs `cmd` to its end. A copy just written may still be open for writing in a child that another
/// test thread forked meanwhile (until that child execs): exec then fails with ETXTBSY, for a moment.
fn output(cmd: &mut std::process::Command) -> std::process::Output {
    for _ in 0..50 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => return other.expect("run the program as uid 65534"),
        }
    }
    panic!("the copied program stayed busy (ETXTBSY)");
}

fn as_nobody(program: &Path) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(runnable_by_anyone(program));
    // SAFETY: only async-signal-safe calls between fork and exec; a failure aborts the spawn.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn assert_still_serves_its_own_user(d: &TestDaemon) {
    let status = d.client().call("daemon.status", json!({})).unwrap();
    assert_eq!(status["tasks_running"], 0);
    let out = d.cli(&["tasks"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

const RAW_SOCKET_ENV: &str = "AGENTD_TEST_RAW_SOCKET";
const REFUSAL_MARK: &str = "refusal line: ";

/// Not a test of its own: run by `another_users_connection_gets_the_refusal_and_is_closed` (as
/// another user, in a child process of this test binary), it connects to the socket named by
/// `AGENTD_TEST_RAW_SOCKET`, sends nothing, and prints the first line the daemon sends and whether
/// the daemon then closed the connection.
#[test]
#[ignore = "a helper, run as another user by another_users_connection_gets_the_refusal_and_is_closed"]
fn raw_connection_helper() {
    use std::io::{BufRead, BufReader};
    let Some(path) = std::env::var_os(RAW_SOCKET_ENV) else { return };
    let stream = std::os::unix::net::UnixStream::connect(path).expect("connect as another user");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("a line from the daemon");
    println!("{REFUSAL_MARK}{}", line.trim_end());
    let mut rest = String::new();
    let closed = matches!(reader.read_line(&mut rest), Ok(0));
    println!("closed: {closed}");
}

#[test]
fn another_users_connection_gets_the_refusal_and_is_closed() {
    if !is_root() {
        return;
    }
    let d = daemon();
    open_to_everyone(&d);
    let me = std::env::current_exe().unwrap();
    let out = output(
        as_nobody(&me)
            .args(["--exact", "raw_connection_helper", "--ignored", "--nocapture", "--test-threads=1"])
            .env(RAW_SOCKET_ENV, d.socket()),
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = printed
        .lines()
        .find_map(|l| l.split_once(REFUSAL_MARK).map(|(_, line)| line))
        .unwrap_or_else(|| panic!("the helper printed no refusal: {printed}"));
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(error_code(&v), -32600, "{v}");
    assert_eq!(v["error"]["message"], "connections from another user are refused", "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    assert!(printed.contains("closed: true"), "the daemon closes the connection: {printed}");
    assert_still_serves_its_own_user(&d);
}

#[test]
fn the_cli_of_another_user_is_refused_by_peer_credentials() {
    if !is_root() {
        return;
    }
    let d = daemon();
    open_to_everyone(&d);
    let out =
        output(as_nobody(Path::new(BIN)).arg("--home").arg(d.home()).arg("tasks").env_remove("AGENTD_HOME"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "another user's CLI must not succeed: {err}");
    assert!(err.contains("connections from another user are refused"), "{err}");
    assert_still_serves_its_own_user(&d);
}
