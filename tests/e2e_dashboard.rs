//! End-to-end in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`) on the
//! dashboard of the real binary, against the scripted model. It logs in with the token the way a
//! person does (the URL `agentd dashboard` prints), submits a task from the page and watches it
//! finish live, sends a follow-up and cancels a task from the page, sees a long run's compactions,
//! refusal and learned window marked on the chart and its archive linked from the transcript, reads
//! an evidence page and verifies the archive, and is refused without the token. The long run's page
//! is the README's screenshot (`docs/dashboard.png`, written when `AGENTD_WRITE_SCREENSHOT=1`).
//!
//! Without Chromium the tests print `SKIPPED: …` and return (reported by `.ci/run` as skipped, not
//! passed); with `AGENTD_REQUIRE_BROWSER` set, a missing browser fails them.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::browser::{processes_naming, skip_or_fail, Browser};
use agentd_test_support::daemon::{team_config, TestDaemon};
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const HTTP: &str = "[http]\nlisten = \"127.0.0.1:0\"\n";
const WAIT: Duration = Duration::from_secs(60);

async fn browser(test: &str) -> Option<Browser> {
    match Browser::start().await {
        Ok(Some(b)) => Some(b),
        Ok(None) => {
            skip_or_fail(test);
            None
        }
        Err(e) => panic!("Chromium is installed but did not start: {e}"),
    }
}

/// The URL `agentd dashboard` prints.
fn dashboard_url(d: &TestDaemon) -> String {
    let out = d.cli(&["dashboard"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Logs the browser in with the printed URL; answers the dashboard's base (`http://127.0.0.1:PORT`).
async fn log_in(b: &Browser, d: &TestDaemon) -> String {
    let base = d.http_base();
    b.goto(&dashboard_url(d)).await;
    assert_eq!(b.url().await, format!("{base}/"), "the token left the address bar");
    b.wait_for("window.agentd && window.agentd.ready", WAIT).await;
    base
}

fn advance(d: &TestDaemon) {
    d.client().call("clock.advance", json!({"ms": 60_000})).unwrap();
}

/// `12,345`, as the page writes counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_in_with_the_token_submit_and_watch_a_task_finish_live() {
    let Some(b) = browser("log_in_with_the_token_submit_and_watch_a_task_finish_live").await else { return };
    // The lead is rate limited for 30 s of the daemon's manual clock: the task is live while the
    // page watches; then the clock moves and the team finishes.
    let server = ScriptedServer::builder()
        .script(vec![
            rate_limited(Some("30")),
            sse(vec![text("the coder looks"), delegate("coder", "List the workspace")]),
            sse(vec![tool_call("list_dir", json!({"path": "."}))]),
            sse(vec![finish("listed: one file")]),
            sse(vec![finish("the coder listed the workspace")]),
            // The follow-up.
            sse(vec![finish("still one file")]),
            // The second task: rate limited until it is cancelled.
            rate_limited(Some("50")),
            // The third: refused for good, so it fails; resumed, it finishes.
            server_error(400, "the model is not loaded"),
            sse(vec![finish("done after the resume")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "hello\n").unwrap();
    let mut d = TestDaemon::prepare(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    d.serve_with_env(&[("AGENTD_CLOCK", "manual")]);
    let base = d.http_base();

    // Without the token: the page is refused, and so is the API from the browser.
    b.goto(&format!("{base}/")).await;
    assert_eq!(b.text("#refused").await, "Refused");
    b.goto(&format!("{base}/?token=not-the-token")).await;
    assert_eq!(b.text("#refused").await, "Refused");
    let status = b.js_async("fetch('/api/v1/tasks').then(r => arguments[0](r.status))", json!([])).await;
    assert_eq!(status, 401);
    assert!(b.cookies().await.is_empty());

    // With it: a cookie the page's scripts cannot read, and the token gone from the address bar.
    log_in(&b, &d).await;
    let cookies = b.cookies().await;
    let cookie = cookies.iter().find(|c| c["name"] == "agentd_token").expect("the login cookie");
    assert_eq!(cookie["httpOnly"], true);
    assert_eq!(cookie["value"], d.http_token());
    assert_eq!(b.js("return document.cookie", json!([])).await, "");

    // Submit from the page.
    b.wait_for(
        "document.querySelector('#tasks') && document.querySelector('#tasks').innerText.includes('No tasks')",
        WAIT,
    )
    .await;
    b.type_into("#objective", "List the workspace").await;
    b.type_into("#workspace", ws.path().to_str().unwrap()).await;
    b.click("#submit-button").await;
    let hash = b.wait_for("location.hash.startsWith('#/task/') && location.hash", WAIT).await;
    let task = hash.as_str().unwrap().trim_start_matches("#/task/").to_string();
    assert_eq!(
        d.client().call("task.status", json!({"task_id": task})).unwrap()["objective"],
        "List the workspace"
    );

    // Live: the wait shows up as it happens, on a page that is never reloaded.
    b.wait_for("document.querySelector('#events [data-kind=retry_scheduled]')", WAIT).await;
    b.wait_for("document.querySelector('#task-state').innerText === 'waiting retry'", WAIT).await;
    b.js("window.__same_page = true", json!([])).await;
    let mut ended = Value::Null;
    for _ in 0..600 {
        advance(&d);
        ended = b.js("return document.querySelector('#stream-state').innerText", json!([])).await;
        if ended.as_str().unwrap_or("").starts_with("ended") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ended, "ended: finished");
    assert_eq!(
        b.js("return window.__same_page === true", json!([])).await,
        true,
        "updated live, not reloaded"
    );
    b.wait_for("document.querySelector('#task-state').innerText === 'finished'", WAIT).await;
    assert_eq!(b.text("#task-result").await, "result: the coder listed the workspace");

    // What the page showed is the task's log, every event once, in order.
    let logged = d.logged_events(&task);
    let shown = b
        .js(
            "return [...document.querySelectorAll('#events [data-seq]')].map(e => Number(e.dataset.seq))",
            json!([]),
        )
        .await;
    assert_eq!(shown, json!((1..=logged.len() as u64).collect::<Vec<_>>()));
    assert_eq!(b.js("return window.agentd.events", json!([])).await, json!(logged));
    // A chart per role that made requests, with every request of it.
    for role in ["lead", "coder"] {
        let sent = of_kind(&logged, "request_sent").into_iter().filter(|e| e["role"] == role).count();
        let script = format!("return window.agentd.charts['{role}'].data[1].filter(v => v !== null).length");
        assert_eq!(b.wait_for(&format!("(() => {{ {script} }})() === {sent}"), WAIT).await, true, "{role}");
    }
    b.wait_for("document.querySelector('#gauge-lead .gauge')", WAIT).await;

    // A follow-up from the page: the stream picks up again and ends again.
    b.type_into("#followup", "Is it still one file?").await;
    b.click("#message-form button").await;
    b.wait_for("document.querySelector('#events [data-kind=task_message]')", WAIT).await;
    b.wait_for("document.querySelectorAll('#events [data-kind=task_finished]').length === 2", WAIT).await;
    b.wait_for("document.querySelector('#stream-state').innerText === 'ended: finished'", WAIT).await;
    let logged = d.logged_events(&task);
    assert_eq!(b.js("return window.agentd.events.length", json!([])).await, json!(logged.len()));

    // Cancel from the page.
    let other = d.submit("Wait for ever", ws.path());
    b.goto(&format!("{base}/#/task/{other}")).await;
    b.wait_for("document.querySelector('#events [data-kind=retry_scheduled]')", WAIT).await;
    b.wait_for("!document.querySelector('#cancel').disabled", WAIT).await;
    b.click("#cancel").await;
    b.wait_for("document.querySelector('#stream-state').innerText === 'ended: cancelled'", WAIT).await;
    b.wait_for("document.querySelector('#task-state').innerText === 'cancelled'", WAIT).await;
    assert_eq!(d.client().call("task.status", json!({"task_id": other})).unwrap()["state"], "cancelled");

    // Resume a failed task from the page: it runs again, live, to its end.
    let failed = d.submit("Fail once", ws.path());
    b.goto(&format!("{base}/#/task/{failed}")).await;
    b.wait_for("document.querySelector('#stream-state').innerText === 'ended: failed'", WAIT).await;
    b.wait_for("document.querySelector('#task-error') && !document.querySelector('#resume').disabled", WAIT)
        .await;
    b.click("#resume").await;
    b.wait_for("document.querySelector('#events [data-kind=task_resumed]')", WAIT).await;
    b.wait_for("document.querySelector('#stream-state').innerText === 'ended: finished'", WAIT).await;
    b.wait_for("document.querySelector('#task-state').innerText === 'finished'", WAIT).await;
    assert_eq!(b.text("#task-result").await, "result: done after the resume");

    // The task list shows them, with their states.
    b.goto(&format!("{base}/#/")).await;
    b.wait_for(
        &format!("document.querySelector('tr[data-task=\"{failed}\"] .state').innerText === 'finished'"),
        WAIT,
    )
    .await;
    b.wait_for(
        &format!("document.querySelector('tr[data-task=\"{task}\"] .state').innerText === 'finished'"),
        WAIT,
    )
    .await;
    b.wait_for(
        &format!("document.querySelector('tr[data-task=\"{other}\"] .state').innerText === 'cancelled'"),
        WAIT,
    )
    .await;

    // Dropped, the browser stops what it started: no process names its profile, which is gone.
    let profile = b.profile().to_path_buf();
    assert!(!processes_naming(&profile.display().to_string()).is_empty(), "the browser runs with it");
    drop(b);
    let left = processes_naming(&profile.display().to_string());
    assert!(left.is_empty(), "still running after the drop: {left:?}");
    assert!(!profile.exists(), "{} is left", profile.display());
}

/// The long run's team: the lead delegates and finishes; the coder reads `reads` files of ~1,300
/// tokens, one a step, then finishes; a summary is short.
fn responder(reads: usize) -> impl Fn(&Value) -> Step + Send + Sync + 'static {
    let steps = Arc::new(AtomicUsize::new(0));
    move |body: &Value| {
        if is_summary_request(body) {
            return sse(vec![text("Summary: the data files were read in order; nothing unusual in them.")]);
        }
        if is_lead_request(body) {
            let returned = body["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
            return if returned {
                sse(vec![finish("the coder read every file")])
            } else {
                sse(vec![delegate("coder", "Read every data file")])
            };
        }
        let n = steps.fetch_add(1, Ordering::SeqCst);
        if n < reads {
            sse_with_usage(
                vec![tool_call("read_file", json!({"path": format!("data/file_{}.txt", n % 10)}))],
                count_request(body),
                12,
            )
        } else {
            sse(vec![finish(&format!("read {reads} files"))])
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_marks_compactions_on_the_chart_and_its_evidence_reads_in_pages() {
    let Some(b) = browser("a_long_run_marks_compactions_on_the_chart_and_its_evidence_reads_in_pages").await
    else {
        return;
    };
    // The server declares 32K but takes 16K: the first request over 16K is refused and the window
    // learned; then the coder's reads compact at the learned window's trigger.
    let server = ScriptedServer::builder()
        .model("qwen3-coder")
        .max_model_len(Some(32_768))
        .window(16_384)
        .report_usage(true)
        .responder(responder(40))
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    for i in 0..10 {
        let text: String = (1..=160)
            .map(|n| format!("record {i}-{n}: value {} flag {}\n", (n * 7919 + i) % 10007, n % 3 == 0))
            .collect();
        std::fs::write(ws.path().join(format!("data/file_{i}.txt")), text).unwrap();
    }
    let prices =
        format!("{HTTP}\n[prices.\"qwen3-coder\"]\ninput = 0.5\ncached_input = 0.05\noutput = 2.0\n");
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "qwen3-coder", &prices));
    let task = d.submit("Have the coder read the data", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(180));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{}", d.serve_log());
    let compactions = of_kind(&events, "compaction_finished");
    assert!(!compactions.is_empty(), "40 reads of ~1,300 tokens in a 16K window compact");
    let learned = of_kind(&events, "window_learned");
    assert!(!learned.is_empty(), "the 32K the server declared was refused: {events:#?}");

    let base = log_in(&b, &d).await;
    b.goto(&format!("{base}/#/task/{task}")).await;
    b.wait_for(
        "window.agentd.ready && document.querySelector('#stream-state').innerText.startsWith('ended')",
        WAIT,
    )
    .await;

    // The coder's chart: every request, each compaction before → after, the refusal, the window.
    let coder = |e: &&Value| e["role"] == "coder";
    let coder_compactions: Vec<&Value> = compactions.iter().copied().filter(coder).collect();
    let sent = of_kind(&events, "request_sent").into_iter().filter(coder).count();
    let series = b
        .wait_for(
            &format!(
                "(() => {{ const u = window.agentd.charts.coder; if (!u || u.data[1].filter(v => v !== null).length !== {sent}) return null; \
                 return u.series.map((s, i) => [s.label || '', u.data[i].filter(v => v !== null)]); }})()"
            ),
            WAIT,
        )
        .await;
    let of = |label: &str| -> Vec<u64> {
        let s = series
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == label)
            .unwrap_or_else(|| panic!("no {label}: {series}"));
        s[1].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as u64).collect()
    };
    let marked: Vec<u64> = coder_compactions
        .iter()
        .flat_map(|c| [c["tokens_before"].as_u64().unwrap(), c["tokens_after"].as_u64().unwrap()])
        .collect();
    assert_eq!(of("compaction (before → after)"), marked);
    assert!(!of("refused").is_empty(), "the refused request is marked: {series}");
    // Until the calibration is confirmed the model's counts are estimates, and marked so.
    let estimated: Vec<u64> = of_kind(&events, "request_sent")
        .into_iter()
        .filter(|e| coder(e) && e["estimated"] == true)
        .map(|e| e["tokens"].as_u64().unwrap())
        .collect();
    assert!(!estimated.is_empty(), "an unknown model starts as an estimate");
    assert_eq!(of("estimated"), estimated);
    assert_eq!(
        of("window learned"),
        learned.iter().map(|l| l["new_window"].as_u64().unwrap()).collect::<Vec<_>>()
    );
    assert!(of("window").contains(&16_384) && of("window").contains(&32_768), "{series}");
    assert!(!of("trigger").is_empty() && !of("destination").is_empty());
    let items = b.js("return [...document.querySelectorAll('#compactions-coder li[data-archive]')].map(li => li.innerText)", json!([])).await;
    assert_eq!(items.as_array().unwrap().len(), coder_compactions.len(), "{items}");
    let first = &coder_compactions[0];
    let before_after = format!(
        "{} → {}",
        thousands(first["tokens_before"].as_u64().unwrap()),
        thousands(first["tokens_after"].as_u64().unwrap())
    );
    assert!(items[0].as_str().unwrap().contains(&before_after), "{items} vs {before_after}");
    // Beside it, what each request and each compaction cost, and the sum so far; the task's spending
    // in its head.
    let costs: Vec<f64> = events
        .iter()
        .filter(|e| {
            coder(e) && ["response_received", "compaction_finished"].contains(&e["kind"].as_str().unwrap())
        })
        .filter_map(|e| e["cost_usd"].as_f64())
        .collect();
    assert!(costs.len() > compactions.len(), "priced answers and compactions: {costs:?}");
    let drawn = b
        .wait_for(
            &format!(
                "(() => {{ const u = window.agentd.costCharts.coder; if (!u || u.data[0].length !== {}) return null; \
                 return u.data; }})()",
                costs.len()
            ),
            WAIT,
        )
        .await;
    let total = drawn[3].as_array().unwrap().last().unwrap().as_f64().unwrap();
    assert!((total - costs.iter().sum::<f64>()).abs() < 1e-9, "{drawn}");
    let spent = b
        .wait_for(
            "document.querySelector('#task-spent') && document.querySelector('#task-spent').innerText",
            WAIT,
        )
        .await;
    assert!(
        spent.as_str().unwrap().contains('$') && spent.as_str().unwrap().contains("compactions"),
        "{spent}"
    );
    assert!(items[0].as_str().unwrap().contains("freed), its summaries cost $"), "{items}");
    // The gauge by category; the transcript's checkpoint names the same archive.
    b.wait_for("document.querySelector('#gauge-coder [data-category=checkpoint]')", WAIT).await;
    let archive = first["archive_id"].as_str().unwrap();
    b.wait_for(
        &format!("document.querySelector('#transcript .checkpoint[data-archive=\"{archive}\"] a')"),
        WAIT,
    )
    .await;

    // The screenshot of this page is the README's.
    b.resize(1440, 1900).await;
    b.js("window.dispatchEvent(new Event('resize')); window.scrollTo(0, 0)", json!([])).await;
    let png = b.screenshot().await;
    b.resize(1440, 1000).await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("dashboard.png"), &png).unwrap();
    if std::env::var_os("AGENTD_WRITE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard.png");
        std::fs::write(&docs, &png).unwrap();
        eprintln!("wrote {}", docs.display());
    }

    // Follow the archive into the evidence: metadata, pages by lines, then bytes, and verify.
    b.click(&format!("#compactions-coder li[data-archive=\"{archive}\"] a")).await;
    b.wait_for(&format!("location.hash === '#/evidence/{archive}'"), WAIT).await;
    let meta = d.client().call("evidence.get", json!({"id": archive})).unwrap();
    b.wait_for(
        &format!(
            "document.querySelector('#evidence-meta').innerText.includes('{}')",
            meta["sha256"].as_str().unwrap()
        ),
        WAIT,
    )
    .await;
    b.wait_for("document.querySelector('#page-where').innerText.startsWith('lines 0')", WAIT).await;
    let page = |offset: u64, limit: u64| {
        d.client()
            .call("evidence.read", json!({"id": archive, "offset": offset, "limit": limit, "unit": "lines"}))
            .unwrap()
    };
    let shown = || b.js("return document.querySelector('#evidence-page').textContent", json!([]));
    assert_eq!(shown().await, page(0, 200)["data"]);
    // Pages of 4 lines: the first, then the next, as the daemon pages them.
    b.type_into("#limit", "4").await;
    b.click("#read").await;
    b.wait_for("document.querySelector('#page-where').innerText.startsWith('lines 0–4 ')", WAIT).await;
    assert_eq!(shown().await, page(0, 4)["data"]);
    let next = page(0, 4)["next_offset"].as_u64().expect("a compaction archive of more than 4 lines");
    b.click("#next").await;
    b.wait_for(&format!("document.querySelector('#page-where').innerText.startsWith('lines {next}–')"), WAIT)
        .await;
    assert_eq!(shown().await, page(next, 4)["data"]);
    b.js(
        "const u = document.querySelector('#unit'); u.value = 'bytes'; u.dispatchEvent(new Event('change'))",
        json!([]),
    )
    .await;
    b.wait_for("document.querySelector('#page-where').innerText.startsWith('bytes 0')", WAIT).await;
    let bytes = d
        .client()
        .call("evidence.read", json!({"id": archive, "offset": 0, "limit": 16384, "unit": "bytes"}))
        .unwrap();
    assert_eq!(
        b.js("return document.querySelector('#evidence-page').textContent", json!([])).await,
        bytes["data"]
    );
    std::fs::write(dir.join("dashboard-evidence.png"), b.screenshot().await).unwrap();
    b.click("#verify").await;
    let checked = d.client().call("evidence.verify", json!({})).unwrap()["checked"].as_u64().unwrap();
    b.wait_for(
        &format!("document.querySelector('#verify-result').innerText === '{checked} checked, 0 problems'"),
        WAIT,
    )
    .await;

    // The evidence list of the task holds the archive.
    b.goto(&format!("{base}/#/evidence?task={task}")).await;
    b.wait_for(&format!("document.querySelector('tr[data-evidence=\"{archive}\"]')"), WAIT).await;
    b.goto(&format!("{base}/#/")).await;
    b.wait_for(&format!("document.querySelector('tr[data-task=\"{task}\"] .rolegauge')"), WAIT).await;
    std::fs::write(dir.join("dashboard-tasks.png"), b.screenshot().await).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_page_edits_deletes_and_undoes_and_a_saved_note_is_undone_from_its_event() {
    let Some(b) =
        browser("the_memory_page_edits_deletes_and_undoes_and_a_saved_note_is_undone_from_its_event").await
    else {
        return;
    };
    let quote = "We always use cargo nextest, never cargo test.";
    let server = ScriptedServer::start(vec![
        sse(vec![tool_call("remember", json!({"note": "Use cargo nextest", "quote": quote}))]),
        sse(vec![tool_call(
            "remember",
            json!({"note": "Answer briefly", "quote": "Keep your answers brief.", "scope": "user"}),
        )]),
        sse(vec![tool_call("read_file", json!({"path": "notes.txt"}))]),
        sse(vec![finish("noted")]),
    ])
    .await;
    let d = TestDaemon::start(Path::new(BIN), &team_config(&server.base_url(), "gpt-4o", HTTP));
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "the parser splits on commas\n".repeat(40)).unwrap();
    let task = d.submit(&format!("Fix it. {quote} Keep your answers brief."), ws.path());
    d.events_until_end(&task, Duration::from_secs(30));
    let base = log_in(&b, &d).await;

    // The task's events: each memory_saved has an undo button that takes the note back.
    b.goto(&format!("{base}/#/task/{task}")).await;
    b.wait_for(
        "document.querySelectorAll('#events [data-kind=memory_saved] [data-undo]').length === 2",
        WAIT,
    )
    .await;
    let first: String =
        d.client().call("memory.list", json!({})).unwrap()[0]["id"].as_str().unwrap().to_string();
    b.click(&format!("#events [data-undo={first}]")).await;
    b.wait_for(&format!("document.querySelector('#events [data-undo={first}]').parentElement.innerText.includes('deleted')"), WAIT)
        .await;
    assert_eq!(d.client().call("memory.list", json!({})).unwrap().as_array().unwrap().len(), 1, "undone");

    // A compaction on request from the role's card: the earlier rounds leave, summarised.
    server.push((0..3).map(|_| sse(vec![text("Summary: two notes saved, notes.txt read.")])));
    b.click("[data-role=lead] [data-compact=lead]").await;
    b.wait_for("document.querySelector('[data-compact-result=lead]').innerText.includes('tokens')", WAIT)
        .await;
    assert_eq!(of_kind(&d.logged_events(&task), "compaction_finished").len(), 1);

    // The Memory page: the remaining note, edited in place; the deleted one shown on request; undo.
    b.goto(&format!("{base}/#/memory")).await;
    b.wait_for("window.agentd.ready && document.querySelectorAll('[data-note]').length === 1", WAIT).await;
    let second: String =
        d.client().call("memory.list", json!({})).unwrap()[0]["id"].as_str().unwrap().to_string();
    b.js(
        &format!("document.querySelector('[data-note-text={second}]').value = 'Answer very briefly'"),
        json!([]),
    )
    .await;
    b.click(&format!("[data-note={second}] button")).await;
    b.wait_for(&format!("document.querySelector('[data-note-text={second}]') && document.querySelector('[data-note-text={second}]').value === 'Answer very briefly'"), WAIT).await;
    let note = d.client().call("memory.get", json!({"id": second})).unwrap();
    assert_eq!(note["note"]["text"], "Answer very briefly");
    b.click("#memory-undo").await;
    b.wait_for("document.querySelector('#memory-status').innerText.includes('edited')", WAIT).await;
    let note = d.client().call("memory.get", json!({"id": second})).unwrap();
    assert_eq!(note["note"]["text"], "Answer briefly", "the latest change undone");
    b.goto(&format!("{base}/#/memory?deleted=true")).await;
    b.wait_for("document.querySelectorAll('[data-note]').length === 2", WAIT).await;
}
