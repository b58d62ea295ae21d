//! The context machinery against a real model: `scripts/real-model-smoke.sh` starts
//! llama-cpp-python's server with SmolLM2-135M and a 4,096-token context, then runs this.
//!
//! It checks, on the real server: the window probe (and what the server declares), counting through
//! the server's own tokenizer endpoint, a refusal of an over-long request whose stated limit is
//! learned, a compaction whose summary is a real answer, and agentd's counts against the server's
//! usage reports (relative error printed). The model is too small for tool calls: task success is not
//! what is checked.
//!
//! `cargo run --example real_model_smoke -- http://127.0.0.1:8765/v1 smollm2`

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_engine::counter::{prepare, TokenCounter};
use agentd_engine::meter::Meter;
use agentd_policies::calibration::{Basis, Calibration, Raw};
use agentd_protocol::ChatRequest;
use agentd_protocol::Tokens;
use agentd_providers::{Client, OpenAiClient};
use common::{agentd_binary, team_config, Daemon, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(base_url), Some(model)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: real_model_smoke BASE_URL MODEL [WINDOW]   (e.g. http://127.0.0.1:8765/v1 smollm2 4096)"
        );
        std::process::exit(2);
    };
    // The server's real context (its n_ctx): what a refusal must teach.
    let window: u64 = match args.get(2).map(|w| w.parse()) {
        None => 4096,
        Some(Ok(w)) => w,
        Some(Err(e)) => {
            eprintln!("real_model_smoke: WINDOW {:?}: {e}", args[2]);
            std::process::exit(2);
        }
    };
    match run(base_url, model, window) {
        Ok(0) => println!("\nreal-model smoke: all checks passed"),
        Ok(failures) => {
            println!("\nreal-model smoke: {failures} check(s) failed");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("real_model_smoke: {e}");
            std::process::exit(1);
        }
    }
}

struct Checks {
    failures: usize,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        println!("  [{}] {what}", if ok { "ok" } else { "FAILED" });
        if !ok {
            self.failures += 1;
        }
    }
}

fn run(base_url: &str, model: &str, window: u64) -> Result<usize> {
    let mut c = Checks { failures: 0 };
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio: {e}"))?;

    println!("1. counting: agentd's count of a request vs the server's usage report");
    let openai = OpenAiClient::new(base_url, None);
    let client = Client::from(openai.clone());
    let counter = TokenCounter::with_endpoint(model);
    let mut errors = Vec::new();
    for (label, request) in sample_requests(model) {
        let source = rt.block_on(prepare(&counter, &client, model, &request));
        let ours = counter.count_request(&request).total;
        let theirs = prompt_tokens(&openai, base_url, &request)?;
        let err = (ours.tokens.0 as f64 - theirs as f64) / theirs as f64;
        println!(
            "     {label:<28} agentd {:>5}{} ({source:?})  server {:>5}  relative error {:+.1}%",
            ours.tokens.0,
            if ours.estimated { "~" } else { " " },
            theirs,
            err * 100.0
        );
        c.check(
            !ours.estimated,
            &format!("{label}: measured by the server's tokenizer endpoint, not estimated"),
        );
        if request.tools.is_empty() {
            // Chat templates differ from agentd's framing by a token or two per message.
            errors.push(err);
            c.check(err.abs() <= 0.10, &format!("{label}: within 10% of the server's usage report"));
        } else if theirs < ours.tokens.0 / 2 {
            println!("     (this server's chat template drops tool schemas: agentd counts them anyway, the safe side)");
        }
    }
    let mean = errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len().max(1) as f64;
    println!("     mean |relative error| without tools: {:.1}%", mean * 100.0);

    println!(
        "1b. calibration on: a growing conversation (the lead's tools), each request extending the last"
    );
    let counter = std::sync::Arc::new(counter);
    let mut calibration = Calibration::default();
    let mut basis = None;
    let (mut raw_errors, mut calibrated_errors) = (Vec::new(), Vec::new());
    for (i, request) in growing_conversation(model).into_iter().enumerate() {
        rt.block_on(prepare(&counter, &client, model, &request));
        let meter = Meter::new(counter.clone(), calibration.clone());
        let measured = meter.count_request(&request, basis);
        let theirs = prompt_tokens(&openai, base_url, &request)?;
        let raw_err = (measured.raw.tokens.0 as f64 - theirs as f64) / theirs as f64;
        let cal_err = (measured.count.total.tokens.0 as f64 - theirs as f64) / theirs as f64;
        println!(
            "     request {i}: raw {:>5}  calibrated {:>5}  server {:>5}   raw error {:+.1}%  calibrated error {:+.1}%",
            measured.raw.tokens.0,
            measured.count.total.tokens.0,
            theirs,
            raw_err * 100.0,
            cal_err * 100.0
        );
        if i >= 3 {
            raw_errors.push(raw_err);
            calibrated_errors.push(cal_err);
        }
        let raw = Raw { total: measured.raw.tokens, fixed: measured.raw_fixed };
        calibration.observe(raw, basis, Tokens(theirs));
        basis = Some(Basis { raw: measured.raw.tokens, actual: Tokens(theirs) });
    }
    let mean_abs = |v: &[f64]| v.iter().map(|e| e.abs()).sum::<f64>() / v.len().max(1) as f64;
    let worst = |v: &[f64]| v.iter().copied().fold(0.0f64, |w, e| if e.abs() > w.abs() { e } else { w });
    println!(
        "     after the first 3 reports: raw mean |error| {:.1}% (worst {:+.1}%), calibrated {:.1}% (worst {:+.1}%); {}",
        mean_abs(&raw_errors) * 100.0,
        worst(&raw_errors) * 100.0,
        mean_abs(&calibrated_errors) * 100.0,
        worst(&calibrated_errors) * 100.0,
        calibration.standing()
    );
    c.check(
        !calibrated_errors.is_empty() && mean_abs(&calibrated_errors) <= 0.03,
        "calibrated by the usage reports, agentd's count is within 3% of the server's",
    );
    c.check(
        calibrated_errors.iter().all(|e| *e >= -0.01),
        "calibrated, agentd's count is never more than 1% under the server's",
    );

    println!("2. the daemon against the real server");
    let bin = agentd_binary()?;
    let extra = "[retry]\nstream_anomaly = { attempts = 2, delay = \"1s\" }\n";
    // Short answers: the model rambles otherwise, and the trigger makes room for what is claimed.
    let config = team_config(base_url, model, extra).replace(
        &format!("model = \"{model}\"\n"),
        &format!("model = \"{model}\"\nmax_output_tokens = 128\n"),
    );
    let mut daemon = Daemon::start(&bin, &config)?;
    let probe = daemon.cli(&["models", "probe", "--role", "lead"])?;
    let probe_text = String::from_utf8_lossy(&probe.stdout).trim().to_string();
    println!("     models probe: {probe_text}");
    c.check(probe.status.success(), "the window was probed from the server");

    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut rpc = daemon.client()?;
    let task = rpc
        .call("task.submit", json!({"objective": "Say hello in one short sentence.", "workspace": ws.path()}))
        .map_err(|e| e.to_string())?["task_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let first = wait_end(&daemon, &task, 0)?;
    c.check(first.iter().any(|e| e["kind"] == "response_received"), "the real model answered a request");

    // Follow-ups that grow the history past the real context.
    let filler = "The service keeps a ledger of every shipment: the origin depot, the destination, the weight in \
                  kilograms, the carrier and the day it left. Summaries must keep depot names and weights exactly. ";
    let mut all = first;
    // Until the real server refuses (its template drops the tool schemas, so it fills up later than
    // agentd's count says), and one more turn after that.
    let mut after_refusal = 0;
    for i in 0..40 {
        let after = all.last().and_then(|e| e["seq"].as_u64()).unwrap_or(0);
        let text = format!("Note {i}: {}", filler.repeat(4));
        rpc.call("task.message", json!({"task_id": task, "text": text})).map_err(|e| e.to_string())?;
        all.extend(wait_end(&daemon, &task, after)?);
        if all.iter().any(|e| e["kind"] == "window_learned") {
            after_refusal += 1;
            if after_refusal == 2 {
                break;
            }
        }
    }
    let learned: Vec<&Value> = all.iter().filter(|e| e["kind"] == "window_learned").collect();
    for l in &learned {
        println!("     window_learned: {} → {} ({})", l["old_window"], l["new_window"], l["source"]);
    }
    c.check(
        learned.iter().any(|l| l["source"] == "error" && l["new_window"] == window),
        &format!(
            "an over-long request was refused by the real server and its stated limit ({window}) learned"
        ),
    );
    let finished: Vec<&Value> = all.iter().filter(|e| e["kind"] == "compaction_finished").collect();
    for f in &finished {
        println!(
            "     compaction: {} → {} tokens in {} summary batch(es), archive {}",
            f["tokens_before"], f["tokens_after"], f["batches"], f["archive_id"]
        );
    }
    let failed: Vec<&Value> = all.iter().filter(|e| e["kind"] == "compaction_failed").collect();
    for f in &failed {
        println!("     compaction_failed: {}", f["reason"]);
    }
    c.check(!finished.is_empty(), "a compaction finished with summaries from the real model");
    let log = rpc.call("log.get", json!({"task_id": task, "role": "lead"})).map_err(|e| e.to_string())?;
    let summary = log["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["type"] == "system" && r["subtype"] == "compaction")
        .filter_map(|r| r["history"].as_array().cloned())
        .flatten()
        .filter_map(|m| m["parts"][0]["text"].as_str().map(str::to_string))
        .find(|t| t.starts_with("[checkpoint]"));
    if let Some(s) = &summary {
        let shown: String = s.chars().take(300).collect();
        println!(
            "     checkpoint written from the model's summary:\n       {}",
            shown.replace('\n', "\n       ")
        );
    }
    c.check(
        summary.as_deref().is_some_and(|s| s.len() > "[checkpoint]".len() + 20),
        "the checkpoint carries a real summary",
    );
    let sent: Vec<&Value> = all.iter().filter(|e| e["kind"] == "request_sent").collect();
    let after_learning = sent.iter().filter(|e| e["window"] == window).collect::<Vec<_>>();
    c.check(
        after_learning.iter().all(|e| e["tokens"].as_u64().unwrap_or(u64::MAX) <= window),
        "after learning, no request over the real window",
    );
    c.check(sent.iter().all(|e| e["estimated"] == false), "every request measured, none estimated");
    // Calibrated: each request_sent against the usage report of its answer (the next
    // response_received of the same role); refused requests have none.
    let mut calibrated = Vec::new();
    for (i, e) in all.iter().enumerate() {
        if e["kind"] != "request_sent" {
            continue;
        }
        let answer = all[i + 1..].iter().find(|r| {
            r["role"] == e["role"] && (r["kind"] == "response_received" || r["kind"] == "request_sent")
        });
        let Some(prompt) = answer
            .filter(|r| r["kind"] == "response_received")
            .and_then(|r| r["usage"]["prompt_tokens"].as_u64())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        let ours = e["tokens"].as_u64().unwrap_or(0) as f64;
        calibrated.push((
            (ours - prompt as f64) / prompt as f64,
            e["measured_by"]["calibrated_by"].as_u64().unwrap_or(0),
        ));
    }
    let later: Vec<f64> = calibrated.iter().skip(3).map(|(e, _)| *e).collect();
    let mean = later.iter().map(|e| e.abs()).sum::<f64>() / later.len().max(1) as f64;
    let worst = later.iter().copied().fold(0.0f64, |w, e| if e.abs() > w.abs() { e } else { w });
    println!(
        "     calibrated count vs the server's usage, after the first 3 of {} answered requests: mean |error| {:.1}%, worst {:+.1}% (calibrated by up to {} reports)",
        calibrated.len(),
        mean * 100.0,
        worst * 100.0,
        calibrated.iter().map(|(_, n)| *n).max().unwrap_or(0)
    );
    if later.is_empty() {
        println!("     (this server sends no usage while streaming: the daemon run had nothing to calibrate from; see 1b)");
    } else {
        c.check(mean <= 0.05, "with calibration on, the daemon's count is within 5% of the server's usage");
    }
    let g = rpc.call("context.get", json!({"task_id": task, "role": "lead"})).map_err(|e| e.to_string())?;
    c.check(
        g["categories"]["checkpoint"].as_u64().unwrap_or(0) > 0,
        "later requests carry the checkpoint (the gauge counts it)",
    );
    let gauge = daemon.cli(&["context", &task])?;
    println!(
        "     context gauge:\n       {}",
        String::from_utf8_lossy(&gauge.stdout).trim().replace('\n', "\n       ")
    );
    daemon.stop();
    Ok(c.failures)
}

/// Requests of growing size: a bare question, the same with the lead's tools, a longer history.
fn sample_requests(model: &str) -> Vec<(&'static str, ChatRequest)> {
    use agentd_protocol::Message;
    let tools = tool_specs(&["read_file", "list_dir", "search", "finish"]);
    let base = |messages: Vec<Message>, tools: Vec<agentd_protocol::ToolSchema>| ChatRequest {
        model: model.to_string(),
        system: "You are a helpful assistant.".into(),
        messages,
        tools,
        tool_choice_none: false,
        max_tokens: None,
        thinking_budget: None,
        cache_key: None,
    };
    let mut history = vec![Message::user("Summarise the depot ledger.")];
    for i in 0..6 {
        history.push(Message::assistant_text(format!(
            "Entry {i}: depot Lyon sent 1,240 kg to Oslo by rail on day {i}."
        )));
        history.push(Message::user(format!("And entry {}?", i + 1)));
    }
    vec![
        ("a short question", base(vec![Message::user("What is 2 + 2?")], Vec::new())),
        ("with four tool schemas", base(vec![Message::user("List the files.")], tools)),
        ("a 13-message history", base(history, Vec::new())),
    ]
}

/// The schemas of these tools, as the daemon sends them.
fn tool_specs(names: &[&str]) -> Vec<agentd_protocol::ToolSchema> {
    let names: Vec<agentd_protocol::ToolName> =
        names.iter().map(|n| agentd_protocol::ToolName::parse(n)).collect();
    agentd_agents::schema::schemas(&names).unwrap_or_default()
}

/// An agent-like conversation under the real 2,048-token context: the lead's tools and system prompt,
/// then user notes and short answers appended one exchange at a time (each request extends the last).
fn growing_conversation(model: &str) -> Vec<ChatRequest> {
    use agentd_protocol::Message;
    let tools = tool_specs(&["read_file", "list_dir", "finish"]);
    let mut messages = vec![Message::user("Keep the depot ledger; answer each note in one sentence.")];
    let mut out = Vec::new();
    for i in 0..8 {
        messages.push(Message::user(format!(
            "Note {i}: depot Lyon sent {} kg of valves to Oslo by rail on day {i}; depot Porto sent {} kg of \
             gears to Riga by sea on day {}. The carrier for both was Nordline, invoice NL-{:04}.",
            1_240 + i * 37,
            860 + i * 11,
            i + 2,
            4_100 + i
        )));
        out.push(ChatRequest {
            model: model.to_string(),
            system: "You are a helpful assistant that keeps exact records.".into(),
            messages: messages.clone(),
            tools: tools.clone(),
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
            cache_key: None,
        });
        messages.push(Message::assistant_text(format!("Recorded note {i}: Lyon to Oslo and Porto to Riga.")));
    }
    out
}

/// The server's `usage.prompt_tokens` for a request, asked without streaming (one token of answer).
fn prompt_tokens(openai: &OpenAiClient, base_url: &str, request: &ChatRequest) -> Result<u64> {
    let mut body = serde_json::to_value(openai.body(request)).map_err(|e| e.to_string())?;
    body["stream"] = json!(false);
    body.as_object_mut().map(|o| o.remove("stream_options"));
    body["max_tokens"] = json!(1);
    let answer = post_json(base_url, "/chat/completions", &body)?;
    answer["usage"]["prompt_tokens"].as_u64().ok_or_else(|| format!("no usage in {answer}"))
}

/// Waits for the task to stop after `after`, returning the events.
fn wait_end(daemon: &Daemon, task: &str, after: u64) -> Result<Vec<Value>> {
    let mut c = daemon.client()?;
    c.set_timeout(Some(Duration::from_secs(600)));
    c.call("task.subscribe", json!({"task_id": task, "after_seq": after})).map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    loop {
        let n = c.next_notification().map_err(|e| format!("waiting for {task}: {e}"))?;
        let e = n["params"].clone();
        let event: agentd_protocol::Event =
            serde_json::from_value(e.clone()).map_err(|err| format!("an unreadable event {e}: {err}"))?;
        println!("     {}", agentd_client::render::event_line(&event));
        let end = common::is_terminal(&e);
        events.push(e);
        if end {
            return Ok(events);
        }
    }
}

/// A minimal HTTP/1.1 POST of JSON to the server (non-streaming, so the answer carries usage).
fn post_json(base_url: &str, path: &str, body: &Value) -> Result<Value> {
    let rest = base_url.strip_prefix("http://").ok_or("the smoke needs an http:// base URL")?;
    let (host, prefix) = rest.split_once('/').map_or((rest, String::new()), |(h, p)| (h, format!("/{p}")));
    let mut stream = std::net::TcpStream::connect(host).map_err(|e| format!("connect {host}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(300))).map_err(|e| e.to_string())?;
    let payload = body.to_string();
    let request = format!(
        "POST {prefix}{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP body")?;
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}
