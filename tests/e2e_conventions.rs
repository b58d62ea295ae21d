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

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `agentd ARGS…` with no `--home` and no `AGENTD_HOME`, `HOME` set to `home`, run in `cwd`.
fn bare(home: &Path, cwd: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(args)
        .env_remove("AGENTD_HOME")
        .env("HOME", home)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn the_default_home_is_agentd_home_else_dot_agentd_in_home_never_the_current_directory() {
    let user = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let out = bare(user.path(), cwd.path(), &["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let home = user.path().join(".agentd");
    assert!(home.join("agentd.toml").is_file(), "{}", stdout(&out));
    assert_eq!(mode(&home), 0o700, "a home agentd creates is private");
    assert!(!cwd.path().join(".agentd").exists(), "nothing is made in the current directory");
    // Any command finds the same home from anywhere: here, its (absent) socket is named.
    let out = bare(user.path(), cwd.path(), &["tasks"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains(&home.join("agentd.sock").display().to_string()), "{}", stderr(&out));

    // AGENTD_HOME wins over HOME.
    let elsewhere = tempfile::tempdir().unwrap();
    let chosen = elsewhere.path().join("agentd-home");
    let out = std::process::Command::new(BIN)
        .args(["init", "--json"])
        .env("AGENTD_HOME", &chosen)
        .env("HOME", user.path())
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["config"], chosen.join("agentd.toml").display().to_string());
    assert_eq!(report["written"], true);

    // No HOME and no --home: a usage error that says what to do, not a home in the current directory.
    let out = std::process::Command::new(BIN)
        .arg("tasks")
        .env_remove("AGENTD_HOME")
        .env_remove("HOME")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--home") && stderr(&out).contains("AGENTD_HOME"), "{}", stderr(&out));
    assert!(!cwd.path().join(".agentd").exists());
}

#[test]
fn init_and_serve_leave_the_mode_of_a_home_they_did_not_create() {
    use std::os::unix::fs::PermissionsExt;
    let d = TestDaemon::prepare(Path::new(BIN), &team_config(NO_MODEL, "gpt-4o", ""));
    std::fs::set_permissions(d.home(), std::fs::Permissions::from_mode(0o750)).unwrap();
    let out = d.cli(&["init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(mode(d.home()), 0o750, "init");
    let mut d = d;
    d.serve();
    assert_eq!(mode(d.home()), 0o750, "serve");
    assert!(d.serve_log().contains("the home may be read by other users"), "{}", d.serve_log());
    assert_eq!(mode(&d.socket()), 0o600, "the socket agentd makes is private");
}

#[test]
fn a_provider_key_variable_that_is_unset_stops_serve_naming_the_provider_and_the_variable() {
    let config = team_config(NO_MODEL, "gpt-4o", "")
        .replace("kind = \"openai\"\n", "kind = \"openai\"\napi_key_env = \"AGENTD_TEST_NO_SUCH_KEY\"\n");
    let mut d = TestDaemon::prepare(Path::new(BIN), &config);
    let out = d.command(&["serve"]).env_remove("AGENTD_TEST_NO_SUCH_KEY").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("providers.scripted.api_key_env")
            && err.contains("\"scripted\"")
            && err.contains("AGENTD_TEST_NO_SUCH_KEY")
            && err.contains("agentd.toml"),
        "{err}"
    );
    assert!(!d.socket().exists(), "nothing was served");
    // With the variable set, the same config serves.
    d.serve_with_env(&[("AGENTD_TEST_NO_SUCH_KEY", "sk-test-0123456789")]);
    assert!(d.client().call("daemon.status", serde_json::json!({})).is_ok());
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    let cwd = tempfile::tempdir().unwrap();
    for (shell, marker) in [("bash", "_agentd()"), ("zsh", "#compdef agentd"), ("fish", "complete -c agentd")]
    {
        // No home is needed to print a script.
        let out = std::process::Command::new(BIN)
            .args(["completions", shell])
            .env_remove("HOME")
            .env_remove("AGENTD_HOME")
            .current_dir(cwd.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["submit", "evidence", "log-format"] {
            assert!(script.contains(word), "{shell} completes {word}");
        }
        // Ids are asked of the daemon where a command takes one (each shell runs its script in
        // e2e_friendly).
        assert!(script.contains(" __ids "), "{shell}: {script}");
        if shell == "zsh" {
            assert!(script.contains("\n_agentd_ids() {\n"), "{script}");
            assert!(script.contains("':task -- The task'\\''s id:_agentd_ids task'"), "{script}");
            assert!(
                script.contains(":_agentd_ids evidence'") && script.contains(":_agentd_ids note'"),
                "{script}"
            );
            assert!(!script.contains("':task -- The task'\\''s id:_default'"), "every task argument");
        }
        if shell == "fish" {
            assert!(script.contains("-f -a '(__agentd_ids evidence)'"), "{script}");
        }
    }
    let out = std::process::Command::new(BIN).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("tcsh"), "{}", stderr(&out));
}

#[test]
fn help_texts_name_every_argument() {
    let out = std::process::Command::new(BIN).args(["evidence", "read", "--help"]).output().unwrap();
    let help = stdout(&out);
    for line in ["<ID>", "--offset", "--limit", "--lines", "--json", "--home"] {
        let described = help.lines().any(|l| l.contains(line) && l.trim().len() > line.len() + 8);
        assert!(described, "{line} has a help text:\n{help}");
    }
    let out = std::process::Command::new(BIN).arg("--help").output().unwrap();
    assert!(stdout(&out).contains("4 no such task or evidence"), "{}", stdout(&out));
}

#[test]
fn exit_codes_tell_no_such_task_from_a_failed_one() {
    // A model that cannot be reached, and no retries: the task fails at once.
    let config = team_config(NO_MODEL, "gpt-4o", "[retry]\nserver_error = { attempts = 0 }\n");
    let d = TestDaemon::start(Path::new(BIN), &config);
    let ws = tempfile::tempdir().unwrap();
    let task = d.submit("fail, please", ws.path());
    d.wait_for_state(&task, "failed", std::time::Duration::from_secs(30));
    let watch = d.cli(&["watch", &task]);
    assert_eq!(watch.status.code(), Some(1), "a failed task: {}", stderr(&watch));
    let status = d.cli(&["status", &task]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));

    let missing = "0190aaaa-0000-7000-8000-000000000000";
    for args in [
        vec!["status", missing],
        vec!["watch", missing],
        vec!["cancel", missing],
        vec!["resume", missing],
        vec!["log", missing],
        vec!["context", missing],
        vec!["message", missing, "more"],
        vec!["evidence", "show", "ev-nothing"],
        vec!["evidence", "read", "ev-nothing"],
    ] {
        let out = d.cli(&args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("unknown"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn every_printing_command_speaks_json() {
    let config = team_config(NO_MODEL, "gpt-4o", "[retry]\nserver_error = { attempts = 0 }\n");
    let d = TestDaemon::start(Path::new(BIN), &config);
    let ws = tempfile::tempdir().unwrap();
    let out = d.cli(&["submit", "fail, please", "--workspace", ws.path().to_str().unwrap(), "--json"]);
    let submitted: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let task = submitted["task_id"].as_str().unwrap().to_string();
    d.wait_for_state(&task, "failed", std::time::Duration::from_secs(30));

    let json = |args: &[&str]| -> Value {
        let out = d.cli(args);
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&out)))
    };
    let json_lines = |args: &[&str]| -> Vec<Value> {
        let out = d.cli(args);
        let text = stdout(&out);
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
            .collect()
    };
    assert_eq!(json(&["init", "--json"])["written"], false);
    assert!(json(&["tasks", "--json"]).as_array().unwrap().iter().any(|t| t["task_id"] == task.as_str()));
    assert_eq!(json(&["status", &task, "--json"])["state"], "failed");
    assert_eq!(json(&["resume", &task, "--json"])["state"], "running");
    d.wait_for_state(&task, "failed", std::time::Duration::from_secs(30));
    assert!(json_lines(&["watch", &task, "--json"]).iter().all(|e| e["task_id"] == task.as_str()));
    assert!(json_lines(&["log", &task, "--json"]).iter().all(|r| r["seq"].is_u64()));
    assert!(json(&["context", &task, "--json"]).is_object());
    assert_eq!(json(&["daemon", "--json"])["tz"], "UTC");
    assert_eq!(json(&["settings", "lead", "compact_at", "--json"])["key"], "compact_at");
    assert!(json(&["evidence", "list", "--json"]).is_array());
    assert_eq!(json(&["evidence", "verify", "--json"])["checked"], 0);
    let message = json(&["message", &task, "once more", "--json"]);
    assert_eq!(message["state"], "running", "{message}");
    d.wait_for_state(&task, "failed", std::time::Duration::from_secs(30));
    // The task has ended: left as it is, exit 0, its state as JSON (as `docker stop` of a stopped
    // container).
    assert_eq!(json(&["cancel", &task, "--json"])["state"], "failed");
    // The human form is not JSON.
    let human = d.cli(&["daemon"]);
    assert!(stdout(&human).contains("time zone    UTC"), "{}", stdout(&human));
}

#[test]
fn serve_logs_json_lines_with_log_format_json() {
    let mut d = TestDaemon::prepare(Path::new(BIN), &team_config(NO_MODEL, "gpt-4o", ""));
    d.set_serve_args(&["--log-format", "json"]);
    d.serve();
    d.stop();
    let log = d.serve_log();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 2, "{log}");
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object() && v["timestamp"].is_string(), "{line}");
    }
    assert!(lines.iter().any(|l| l.contains("agentd is serving")), "{log}");

    // A failure at start is a JSON record too, with its exit code.
    let config = team_config(NO_MODEL, "gpt-4o", "")
        .replace("kind = \"openai\"\n", "kind = \"openai\"\napi_key_env = \"AGENTD_TEST_NO_SUCH_KEY\"\n");
    let d = TestDaemon::prepare(Path::new(BIN), &config);
    let out =
        d.command(&["serve", "--log-format", "json"]).env_remove("AGENTD_TEST_NO_SUCH_KEY").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let record: Value = serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(record["level"], "ERROR", "{record}");
    assert!(record["fields"]["error"].as_str().unwrap().contains("AGENTD_TEST_NO_SUCH_KEY"), "{record}");
}
