//! End-to-end: the conventions a user and a script rely on — the socket's framing, the home, the
//! command line's help, completions, `--json`, exit codes and log format, the provider keys checked at
//! `serve`, and cron schedules with their time zone.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use serde_json::Value;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// No model is ever asked here; the server address only has to parse.
const NO_MODEL: &str = "http://127.0.0.1:9/v1";

fn daemon() -> TestDaemon {
    TestDaemon::start(Path::new(BIN), &team_config(NO_MODEL, "gpt-4o", ""))
}

fn error_code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error: {v}"))
}

#[test]
fn a_line_over_the_cap_is_refused_before_its_end_and_the_connection_goes_on() {
    let d = daemon();
    let mut c = d.client();
    // 8 MiB and a little more, with no end of line: refused without waiting for one.
    c.send_raw(&vec![b'a'; (8 << 20) + 100]);
    let v = c.read_value().unwrap();
    assert_eq!(error_code(&v), -32600, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("over 8388608 bytes"), "{v}");
    // The rest of that line is dropped up to its end; the next line is read as usual.
    c.send_raw(&vec![b'a'; 1 << 20]);
    c.send_raw(b"\n");
    // A line that is not UTF-8 is a parse error of its own.
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"task.list\"}\xff\n");
    let v = c.read_value().unwrap();
    assert_eq!(error_code(&v), -32700, "{v}");
    let status = c.call("daemon.status", serde_json::json!({})).unwrap();
    assert!(status["version"].is_string(), "{status}");
}

#[test]
fn cron_takes_the_five_field_form_and_daemon_status_states_the_zone() {
    let jobs = "[scheduler]\ntz = \"+02:00\"\n[[scheduler.jobs]]\nname = \"nightly\"\ncron = \"30 3 * * *\"\naction = \"logs.export\"\n";
    let d = TestDaemon::start(Path::new(BIN), &team_config(NO_MODEL, "gpt-4o", jobs));
    let status = d.client().call("daemon.status", serde_json::json!({})).unwrap();
    assert_eq!(status["tz"], "+02:00", "{status}");
    let job = &status["jobs"][0];
    assert_eq!(job["cron"], "30 3 * * *", "{status}");
    // 03:30 at +02:00 is 01:30 UTC; run times are instants, shown in UTC.
    let next = job["next_run_at"].as_str().unwrap();
    assert!(next.ends_with("T01:30:00.000Z"), "{next}");

    // Without `tz`, schedules are read in UTC, and daemon.status says so.
    let d = daemon();
    let status = d.client().call("daemon.status", serde_json::json!({})).unwrap();
    assert_eq!(status["tz"], "UTC", "{status}");
}
