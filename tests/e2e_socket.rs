//! End-to-end: the socket protocol's error handling. Every bad input gets its JSON-RPC error and the
//! same connection keeps working.

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

    let e = c.call("task.submit", json!({"objective": "x", "workspace": "relative/dir"})).unwrap_err();
    assert_eq!(e.code, -32004, "{e}");
    let e = c.call("task.submit", json!({"objective": "", "workspace": "/"})).unwrap_err();
    assert_eq!(e.code, -32602, "{e}");
    let e = c.call("task.submit", json!({"objective": "x", "workspace": "/no/such/dir"})).unwrap_err();
    assert_eq!(e.code, -32004, "{e}");
    assert!(e.message.contains("/no/such/dir"), "{e}");

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
    let home_mode = std::fs::metadata(d.home()).unwrap().permissions().mode() & 0o777;
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
    let out = d.cli(&["status", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown task nope"));
    let out = d.cli(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}
