//! End-to-end: friendly at the terminal, with the real binary — `doctor` proves the provider works
//! (a wrong `base_url` fails naming the key; the model answers a one-token request), a closed port
//! fails a task at once naming the URL, `reload` (and SIGHUP) make the next turn use the file as it
//! now is, task ids are taken by prefix, and the conventions of `gh`, `docker` and `git`: `submit -`
//! reads stdin, `cancel` of an ended task is no error, empty lists say so, `serve 2>file` is plain
//! text, and the start lists the interrupted tasks with the command that resumes them.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A web server of its own that answers every request with an HTML page (a proxy's, a web UI's).
fn html_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let page = "<!DOCTYPE html><html><body>Welcome to the web UI</body></html>";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}/v1")
}

/// Whether zsh and fish are here to run their completion scripts; when `AGENTD_REQUIRE_SHELLS` is set
/// (CI, after installing them) their absence is a failure, else a skip said on stderr.
fn shells_here() -> bool {
    let here = |shell: &str| std::process::Command::new(shell).arg("--version").output().is_ok();
    let found = here("zsh") && here("fish");
    if !found {
        assert!(
            std::env::var_os("AGENTD_REQUIRE_SHELLS").is_none(),
            "zsh or fish is missing, and AGENTD_REQUIRE_SHELLS is set"
        );
        eprintln!("SKIPPED: the zsh and fish completion scripts (zsh or fish is not installed)");
    }
    found
}

fn check<'a>(report: &'a Value, area: &str, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["area"] == area && c["name"] == name)
        .unwrap_or_else(|| panic!("no {area} {name} check: {report:#}"))
}

fn doctor(d: &TestDaemon, args: &[&str]) -> (Option<i32>, Value) {
    let ws = tempfile::tempdir().unwrap();
    let mut all = vec!["doctor", "--workspace", ws.path().to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let out = d.cli(&all);
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", stderr(&out))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_fails_a_base_url_that_is_not_the_api_and_probes_each_model() {
    let server = ScriptedServer::builder().responder(|_: &Value| sse(vec![text("OK")])).start().await;
    let root = server.base_url().trim_end_matches("/v1").to_string();

    // Every route under /api answers 404: exit 1, naming the key and what answered.
    let d = TestDaemon::prepare(Path::new(BIN), &team_config(&format!("{root}/api"), "gpt-4o", ""));
    let (code, report) = doctor(&d, &[]);
    assert_eq!(code, Some(1), "{report:#}");
    let provider = check(&report, "provider", "scripted");
    assert_eq!(provider["verdict"], "fail", "{provider}");
    assert!(
        provider["detail"].as_str().unwrap().contains(&format!("GET {root}/api/models answered 404")),
        "{provider}"
    );
    assert!(provider["fix"].as_str().unwrap().contains("providers.scripted.base_url"), "{provider}");
    assert_eq!(check(&report, "model", "lead")["verdict"], "fail");
    // In words too, the key named.
    let ws = tempfile::tempdir().unwrap();
    let out = d.cli(&["doctor", "--workspace", ws.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("providers.scripted.base_url"), "{}", stdout(&out));

    // An HTML page is no API either; a closed port is a refused connection.
    let d = TestDaemon::prepare(Path::new(BIN), &team_config(&html_server(), "gpt-4o", ""));
    let (code, report) = doctor(&d, &["--no-probe"]);
    assert_eq!(code, Some(1));
    let detail = check(&report, "provider", "scripted")["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("answered an HTML page, not JSON"), "{detail}");
    let closed = format!("http://127.0.0.1:{}/v1", closed_port());
    let d = TestDaemon::prepare(Path::new(BIN), &team_config(&closed, "gpt-4o", ""));
    let (code, report) = doctor(&d, &[]);
    assert_eq!(code, Some(1));
    let detail = check(&report, "provider", "scripted")["detail"].as_str().unwrap().to_string();
    assert_eq!(detail, format!("GET {closed}/models: connection refused, nothing listens there"));

    // The right URL: the API answers, and each role's model answers a one-token request.
    let d = TestDaemon::prepare(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let (code, report) = doctor(&d, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    let provider = check(&report, "provider", "scripted");
    assert_eq!(provider["verdict"], "ok", "{report:#}");
    assert!(
        provider["detail"].as_str().unwrap().contains("answers as the openai API: 1 model (gpt-4o)"),
        "{provider}"
    );
    let lead = check(&report, "model", "lead");
    assert!(lead["detail"].as_str().unwrap().contains("a one-token request answered"), "{lead}");
    let probes = server.chat_requests();
    assert_eq!(probes.len(), 2, "one per role: {probes:#?}");
    assert!(probes.iter().all(|p| p["max_tokens"] == 1 && p["tools"].is_null()), "{probes:#?}");
    // --no-probe sends none.
    let (_, report) = doctor(&d, &["--no-probe"]);
    assert!(!check(&report, "model", "lead")["detail"].as_str().unwrap().contains("one-token"));
    assert_eq!(server.chat_requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_fails_the_task_at_once_naming_the_url_and_serve_warns_at_its_start() {
    let closed = format!("http://127.0.0.1:{}/v1", closed_port());
    let d = TestDaemon::start(Path::new(BIN), &team_config(&closed, "gpt-4o", ""));
    // The start's check: a loud warning naming the key, and daemon.status says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    let provider = loop {
        let status = d.client().call("daemon.status", json!({})).unwrap();
        let p = status["providers"][0].clone();
        if p["ok"].is_boolean() || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(provider["ok"], false, "{provider}");
    assert!(provider["detail"].as_str().unwrap().contains("connection refused"), "{provider}");
    assert!(d.serve_log().contains("providers.scripted.base_url"), "{}", d.serve_log());
    let shown = stdout(&d.cli(&["daemon"]));
    assert!(shown.contains(&format!("provider     scripted (openai {closed}): UNREACHABLE")), "{shown}");

    let ws = tempfile::tempdir().unwrap();
    let out = d.cli(&["submit", "Say hello", "--workspace", ws.path().to_str().unwrap(), "--wait"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let words = stdout(&out);
    assert!(
        words.contains(&format!("connection refused: is the server at {closed}/chat/completions running?")),
        "{words}"
    );
    assert!(words.contains("agentd doctor"), "{words}");
    // Failed at once: no retry schedule of a server that is not there.
    let task = words.lines().next().unwrap().trim_start_matches("task ").to_string();
    let events = d.logged_events(&task);
    assert!(events.iter().all(|e| e["kind"] != "retry_scheduled"), "{events:#?}");
    assert_eq!(events.last().unwrap()["kind"], "task_failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_makes_the_next_turn_use_the_new_url_and_a_bad_file_changes_nothing() {
    let closed = format!("http://127.0.0.1:{}/v1", closed_port());
    let server = ScriptedServer::start(vec![sse(vec![finish("said hello")])]).await;
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&closed, "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    let task = d.submit("Say hello", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(30));
    assert_eq!(events.last().unwrap()["kind"], "task_failed");

    // The user fixes the URL in the file: `status` and `resume` say the daemon still runs the old one.
    let config = d.home().join("agentd.toml");
    std::fs::write(&config, team_config(&server.base_url(), "gpt-4o", "")).unwrap();
    let status = d.cli(&["status", &task]);
    assert!(stderr(&status).contains("has changed since the daemon read it"), "{}", stderr(&status));
    assert!(stderr(&status).contains("agentd reload"));

    // An invalid file changes nothing, and says why, naming the key.
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, good.replace("model = \"gpt-4o\"", "model = \"gpt-4o\"\ncompact_at = 250"))
        .unwrap();
    let bad = d.cli(&["reload"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stdout(&bad));
    assert!(stderr(&bad).contains("compact_at"), "{}", stderr(&bad));
    std::fs::write(&config, &good).unwrap();

    let out = d.cli(&["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("1 key changed"), "{said}");
    assert!(
        said.contains(&format!(
            "providers.scripted.base_url: \"{closed}\" → \"{}\" (from the next turn)",
            server.base_url()
        )),
        "{said}"
    );
    let status = d.cli(&["status", &task]);
    assert!(!stderr(&status).contains("has changed"), "{}", stderr(&status));
    // The next turn goes to the new URL.
    let resumed = d.cli(&["resume", &task]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let after =
        d.events_after(&task, events.last().unwrap()["seq"].as_u64().unwrap(), Duration::from_secs(30));
    assert_eq!(after.last().unwrap()["kind"], "task_finished", "{after:#?}\n{}", d.serve_log());
    assert_eq!(server.chat_requests().len(), 1);

    // SIGHUP reads it again too.
    std::fs::write(&config, good.replace("[team.coder]", "[team.coder]\ncompact_at = 70")).unwrap();
    let status: Value = d.client().call("daemon.status", json!({})).unwrap();
    assert_eq!(status["config"]["differs"], true, "{status:#}");
    let pid = d.pid().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.client().call("daemon.status", json!({})).unwrap()["config"]["differs"] == true {
        assert!(Instant::now() < deadline, "SIGHUP did not reload: {}", d.serve_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.serve_log().contains("team.coder.compact_at"), "{}", d.serve_log());
    let setting = d.cli(&["settings", "coder", "compact_at", "--json"]);
    assert!(stdout(&setting).contains("70"), "{}", stdout(&setting));
    assert_eq!(d.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ids_are_taken_by_prefix_and_the_conventions_hold() {
    let server = ScriptedServer::builder().responder(|_: &Value| sse(vec![finish("done")])).start().await;
    let mut d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path().to_str().unwrap();

    // Empty lists: a header, then "no tasks" / "no evidence".
    let empty = stdout(&d.cli(&["tasks"]));
    assert!(empty.starts_with("ID ") && empty.contains("STATE") && empty.ends_with("no tasks\n"), "{empty}");
    let none = stdout(&d.cli(&["evidence", "list"]));
    assert!(none.starts_with("ID ") && none.ends_with("no evidence\n"), "{none}");

    // `submit -` reads the objective from stdin.
    let mut child = d
        .command(&["submit", "-", "--workspace", w])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Fix it, from stdin\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let piped = stdout(&out).trim().to_string();
    let status = d.client().call("task.status", json!({"task_id": piped})).unwrap();
    assert_eq!(status["objective"], "Fix it, from stdin");

    // Two tasks whose ids share their first 8 characters.
    let ids = ["abcdef01-0000-7000-8000-000000000001", "abcdef01-0000-7000-8000-000000000002"];
    for id in ids {
        d.client()
            .call("task.submit", json!({"objective": "Say hello", "workspace": w, "task_id": id}))
            .unwrap();
        d.events_until_end(id, Duration::from_secs(30));
    }
    let long = d.cli(&["status", "abcdef01-0000-7000-8000-0000000000", "--json"]);
    assert_eq!(long.status.code(), Some(2), "still ambiguous: {}", stderr(&long));
    let one = d.cli(&["status", "abcdef01-0000-7000-8000-000000000002", "--json"]);
    assert!(one.status.success());
    let by_prefix = d.cli(&["log", "abcdef01-0000-7000-8000-00000000000"]);
    assert_eq!(by_prefix.status.code(), Some(2));
    let ambiguous = d.cli(&["status", "abcdef"]);
    assert_eq!(ambiguous.status.code(), Some(2));
    let said = stderr(&ambiguous);
    assert!(said.contains("task id `abcdef` is ambiguous: it begins 2 tasks"), "{said}");
    assert!(said.contains(ids[0]) && said.contains(ids[1]), "{said}");
    let short = &piped[..8];
    let status = d.cli(&["status", short, "--json"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let shown: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(shown["task_id"], piped.as_str());
    assert!(d.cli(&["log", short]).status.success());
    let http = d.client().call("log.get", json!({"task_id": short})).unwrap();
    assert!(!http["records"].as_array().unwrap().is_empty());
    // An id that names nothing: exit 4, and where to find the ids.
    let unknown = d.cli(&["status", "ffffffff"]);
    assert_eq!(unknown.status.code(), Some(4));
    assert!(stderr(&unknown).contains("agentd tasks"), "{}", stderr(&unknown));

    // `cancel` of a task that has ended: exit 0, saying so — twice.
    for _ in 0..2 {
        let out = d.cli(&["cancel", short]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stdout(&out).contains("had already ended; nothing to cancel"), "{}", stdout(&out));
    }

    // The log on stderr is plain text (not a terminal): no escape codes.
    assert!(!d.serve_log().contains('\u{1b}'), "{}", d.serve_log());

    // A task the daemon's stop interrupted is listed at the next start, with its command.
    let slow = ScriptedServer::builder()
        .responder(|_: &Value| delayed(Duration::from_secs(30), sse(vec![finish("late")])))
        .start()
        .await;
    std::fs::write(d.home().join("agentd.toml"), team_config(&slow.base_url(), "gpt-4o", "")).unwrap();
    assert!(d.cli(&["reload"]).status.success());
    let running = d.submit("Take your time", ws.path());
    assert!(slow.wait_for_requests(1, Duration::from_secs(30)).await);
    assert_eq!(d.stop(), Some(0));
    d.serve();
    let log = d.serve_log();
    assert!(log.contains(&format!("agentd resume {running}")), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_help_completion_ctrl_c_and_errors_speak_as_the_user_typed() {
    // A tool result longer than a line, then a slow answer to interrupt.
    let long = "the parser splits on commas and keeps quoted fields whole; ".repeat(8);
    let server = ScriptedServer::builder()
        .report_usage(true)
        .script(vec![
            sse(vec![tool_call("read_file", json!({"path": "notes.txt"}))]),
            sse(vec![finish("read the notes")]),
            delayed(Duration::from_secs(30), sse(vec![finish("late")])),
        ])
        .start()
        .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", ""));
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), &long).unwrap();
    let task = d.submit("Read the notes", ws.path());
    d.events_until_end(&task, Duration::from_secs(30));

    // `log`: one numbering (the events'), records cut to a line unless --full.
    let out = d.cli(&["log", &task]);
    let text = stdout(&out);
    assert!(!text.contains('#'), "one numbering: {text}");
    let result = text.lines().find(|l| l.contains("result ")).unwrap_or_else(|| panic!("{text}"));
    assert!(result.starts_with("      lead     tool: result ") && result.ends_with('…'), "{result}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("1  lead     task started")), "{text}");
    assert!(stderr(&out).contains(&format!("`agentd log {task} --full`")), "{}", stderr(&out));
    let full = stdout(&d.cli(&["log", &task, "--full"]));
    assert!(full.contains(long.trim_end()), "{full}");
    // A pager on a terminal (script gives the command one): $AGENTD_PAGER reads the log.
    let paged = d.home().join("paged.txt");
    let on_a_terminal = |args: &str| {
        let line = format!("{BIN} --home {} log {task}{args}", d.home().display());
        std::process::Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env("AGENTD_PAGER", format!("cat > {}", paged.display()))
            .output()
            .unwrap()
    };
    let ran = on_a_terminal("");
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert!(std::fs::read_to_string(&paged).unwrap().contains("task started"));
    std::fs::remove_file(&paged).unwrap();
    let ran = on_a_terminal(" --no-pager");
    assert!(ran.status.success() && !paged.exists(), "--no-pager writes to the terminal");

    // A refusal names the flag typed, not the protocol's parameter.
    let out = d.cli(&["resume", &task[..8], "--budget-tokens", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--budget-tokens 1 is not above") && !stderr(&out).contains("budget.tokens")
    );

    // Every command's --help has its EXAMPLES.
    for command in [&["submit", "--help"][..], &["evidence", "read", "--help"], &["reload", "--help"]] {
        let help = stdout(&d.cli(command));
        assert!(help.contains("EXAMPLES:\n  "), "{command:?}: {help}");
    }
    assert!(stdout(&d.cli(&["submit", "--help"])).contains("agentd submit -"));

    // Bash completes task ids from the daemon.
    let script = d.home().join("agentd.bash");
    std::fs::write(&script, d.cli(&["completions", "bash"]).stdout).unwrap();
    let home = d.home().display().to_string();
    let complete = |words: &str, index: usize| {
        let code = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={index}; _agentd_ids; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = std::process::Command::new("bash").args(["-c", &code]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let offered = complete(&format!("{BIN} --home {home} status {}", &task[..4]), 4);
    assert_eq!(offered.trim(), task, "{offered}");
    let offered = complete(&format!("{BIN} --home {home} evidence list --task ''"), 6);
    assert!(offered.contains(&task), "{offered}");
    // Zsh and fish, where they are installed (CI installs them and sets AGENTD_REQUIRE_SHELLS).
    if shells_here() {
        // Zsh: the id arguments of clap's specs call `_agentd_ids`, run here with `compadd` shown.
        let script = d.home().join("_agentd");
        std::fs::write(&script, d.cli(&["completions", "zsh"]).stdout).unwrap();
        let code = format!(
            "autoload -U compinit; compinit -u -D; source {}; compadd() {{ print -l -- ${{(P)${{@[-1]}}}} }}; \
             words=({BIN} --home {home} status {}); _agentd_ids task",
            script.display(),
            &task[..4]
        );
        let out = std::process::Command::new("zsh").args(["-f", "-c", &code]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).lines().any(|l| l == task), "{}", stdout(&out));
        // Fish completes the command line as a user's TAB would.
        let script = d.home().join("agentd.fish");
        std::fs::write(&script, d.cli(&["completions", "fish"]).stdout).unwrap();
        let bin_dir = Path::new(BIN).parent().unwrap().display().to_string();
        let code =
            format!("source {}; complete -C 'agentd --home {home} status {}'", script.display(), &task[..4]);
        let out = std::process::Command::new("fish")
            .args(["--no-config", "-c", &code])
            .env("PATH", format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).lines().any(|l| l.trim() == task), "{}", stdout(&out));
    }

    // Ctrl-C on `watch` leaves the task running, saying how to follow it again or stop it.
    let running = d.submit("Take your time", ws.path());
    let asked = server.wait_for_requests(3, Duration::from_secs(10)).await;
    assert!(asked, "{:#?}\n{}", d.logged_events(&running), d.serve_log());
    let watch =
        d.command(&["watch", &running]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let pid = watch.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = watch.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("agentd watch {running}"))
            && said.contains(&format!("agentd cancel {running}")),
        "{said}"
    );
    let status = d.client().call("task.status", json!({"task_id": running})).unwrap();
    assert_eq!(status["state"], "running", "the task runs on");
}

#[test]
fn a_toml_error_shows_the_line_a_caret_and_the_key_meant() {
    let config = team_config("http://127.0.0.1:9/v1", "gpt-4o", "").replace(
        "model = \"gpt-4o\"\n\n[team.coder]",
        "model = \"gpt-4o\"\ncompact_atx = 70\n\n[team.coder]",
    );
    let d = TestDaemon::prepare(Path::new(BIN), &config);
    let out = d.cli(&["serve"]);
    assert_eq!(out.status.code(), Some(2));
    let said = stderr(&out);
    assert!(said.contains("agentd.toml:\nTOML parse error at line"), "{said}");
    assert!(said.contains("| compact_atx = 70\n") && said.contains('^'), "{said}");
    assert!(said.contains("did you mean `compact_at`?"), "{said}");
    let config = team_config("http://127.0.0.1:9/v1", "gpt-4o", "").replace(
        "model = \"gpt-4o\"\n\n[team.coder]",
        "model = \"gpt-4o\"\ncompact_at = \"80%\"\n\n[team.coder]",
    );
    std::fs::write(d.home().join("agentd.toml"), config).unwrap();
    let said = stderr(&d.cli(&["serve"]));
    assert!(said.contains("expected a whole number") && !said.contains("i64"), "{said}");
}
