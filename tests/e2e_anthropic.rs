//! End-to-end: a team on the Anthropic Messages API — the real binary against the scripted server's
//! `/v1/messages`. Signed thinking goes back byte-identical through an active chain, the lead's
//! thinking budget and the prompt-cache breakpoints are on the wire, Anthropic's throttling (429 with
//! `retry-after`, 529 overloaded) is waited out, counts come from `count_tokens`, and a "prompt is too
//! long" refusal teaches the window.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentd_test_support::daemon::TestDaemon;
use agentd_test_support::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");
const MODEL: &str = "claude-sonnet-4-5";
const KEY_ENV: &str = "AGENTD_TEST_ANTHROPIC_KEY";
const KEY: &str = "test-key";

/// A team on one Anthropic provider; the lead thinks with a 2048-token budget.
fn config(base_url: &str, extra: &str) -> String {
    format!(
        "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{base_url}\"\napi_key_env = \"{KEY_ENV}\"\n\n\
         [team.lead]\nprovider = \"claude\"\nmodel = \"{MODEL}\"\nthinking_budget = 2048\n\n\
         [team.coder]\nprovider = \"claude\"\nmodel = \"{MODEL}\"\n\n{extra}"
    )
}

fn start_daemon(server: &ScriptedServer, extra: &str) -> TestDaemon {
    let mut d = TestDaemon::prepare(Path::new(BIN), &config(&server.base_url(), extra));
    d.serve_with_env(&[(KEY_ENV, KEY)]);
    d
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// Every block of every assistant turn of a request, in order.
fn assistant_blocks(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .collect()
}

fn thinking_block(text: &str, signature: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": signature})
}

/// The three prompt-cache breakpoints: the last tool, the system block, the last block of the last
/// message — and no more than Anthropic's four.
fn assert_cache_breakpoints(body: &Value) {
    let ephemeral = json!({"type": "ephemeral"});
    let marks = serde_json::to_string(body).unwrap().matches("\"cache_control\"").count();
    assert!(marks <= 4, "at most four breakpoints: {body}");
    assert_eq!(body["system"][0]["cache_control"], ephemeral, "{body}");
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["cache_control"], ephemeral);
    assert!(tools[..tools.len() - 1].iter().all(|t| t.get("cache_control").is_none()));
    let last = body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["content"].as_array().unwrap().last().unwrap()["cache_control"], ephemeral, "{last}");
    assert_eq!(marks, 3, "{body}");
}

const LEAD_THOUGHT: &str = "The objective needs a file written: that is the coder's job.\n\
    \"Delegate\" it — then check the summary. ✓ \\n  ";
const LEAD_SIG: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/lead==";
const LEAD_THOUGHT_2: &str = "The coder reports hello.txt written; finish.";
const LEAD_SIG_2: &str = "EqQBCgIYAhIMlead2nd+/==";
const CODER_THOUGHT: &str = "Write `hello.txt` with \"hi\"…\n\tthen read it back: 2 + 2 = 4 😀";
const CODER_SIG: &str = "EpYCCkYIBxgCKkBcoder/1+signature+with+slashes/and==";
const REDACTED: &str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";
const CODER_THOUGHT_2: &str = "The file reads back as written. Done.";
const CODER_SIG_2: &str = "EqCoderSecond+/=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_team_sends_signed_thinking_back_byte_identical_with_cache_breakpoints() {
    let lead_steps = Arc::new(AtomicUsize::new(0));
    let coder_steps = Arc::new(AtomicUsize::new(0));
    let (lead, coder) = (lead_steps.clone(), coder_steps.clone());
    let server = ScriptedServer::builder()
        .model(MODEL)
        .responder(move |body: &Value| {
            if is_lead_request(body) {
                return match lead.fetch_add(1, Ordering::SeqCst) {
                    0 => sse(vec![
                        thinking(LEAD_THOUGHT, LEAD_SIG),
                        text("Handing this to the coder."),
                        delegate("coder", "Write hello.txt containing hi"),
                    ]),
                    _ => sse(vec![thinking(LEAD_THOUGHT_2, LEAD_SIG_2), finish("the coder wrote hello.txt")]),
                };
            }
            match coder.fetch_add(1, Ordering::SeqCst) {
                0 => sse(vec![
                    thinking(CODER_THOUGHT, CODER_SIG),
                    redacted_thinking(REDACTED),
                    tool_call("write_file", json!({"path": "hello.txt", "content": "hi\n"})),
                ]),
                1 => sse(vec![
                    thinking(CODER_THOUGHT_2, CODER_SIG_2),
                    tool_call("read_file", json!({"path": "hello.txt"})),
                ]),
                _ => sse(vec![reasoning("all good"), finish("wrote hello.txt")]),
            }
        })
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    let d = start_daemon(&server, "");
    let task = d.submit("Have the coder write hello.txt", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());
    assert_eq!(std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(), "hi\n");
    assert_eq!((lead_steps.load(Ordering::SeqCst), coder_steps.load(Ordering::SeqCst)), (2, 3));

    // Every request to the API names the key and the version.
    let recorded = server.requests();
    assert!(recorded.iter().any(|r| r.path_only() == "/v1/messages/count_tokens"));
    for r in recorded.iter().filter(|r| r.method == "POST") {
        assert_eq!(r.header("x-api-key"), Some(KEY), "{}", r.path);
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"), "{}", r.path);
        assert_eq!(r.header("authorization"), None);
    }

    let chats = server.chat_requests();
    assert_eq!(chats.len(), 5);
    let leads: Vec<&Value> = chats.iter().filter(|b| is_lead_request(b)).collect();
    let coders: Vec<&Value> = chats.iter().filter(|b| is_coder_request(b)).collect();
    assert_eq!((leads.len(), coders.len()), (2, 3));

    // The lead thinks with its budget (max_tokens above it); the coder has none configured.
    for body in &leads {
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        assert!(body["max_tokens"].as_u64().unwrap() > 2048 + 4095, "{}", body["max_tokens"]);
        assert_eq!(body["model"], MODEL);
    }
    for body in &coders {
        assert!(body.get("thinking").is_none(), "{body}");
    }
    for body in &chats {
        assert_cache_breakpoints(body);
    }

    // Signed thinking goes back exactly as it came, signature and all, through the active chain.
    assert!(assistant_blocks(coders[0]).is_empty());
    let coder_1 = assistant_blocks(coders[1]);
    assert_eq!(coder_1[0], thinking_block(CODER_THOUGHT, CODER_SIG));
    assert_eq!(coder_1[1], json!({"type": "redacted_thinking", "data": REDACTED}));
    assert_eq!(coder_1[2]["type"], "tool_use");
    assert_eq!(coder_1[2]["name"], "write_file");
    let coder_2 = assistant_blocks(coders[2]);
    assert_eq!(coder_2[..2], coder_1[..2], "the earlier turn's blocks are unchanged");
    assert_eq!(coder_2[3], thinking_block(CODER_THOUGHT_2, CODER_SIG_2));
    let sent = coder_2[0]["thinking"].as_str().unwrap();
    assert_eq!(sent.as_bytes(), CODER_THOUGHT.as_bytes());
    assert_eq!(coder_2[0]["signature"].as_str().unwrap().as_bytes(), CODER_SIG.as_bytes());
    let lead_2 = assistant_blocks(leads[1]);
    assert_eq!(lead_2[0], thinking_block(LEAD_THOUGHT, LEAD_SIG));
    assert_eq!(lead_2[1], json!({"type": "text", "text": "Handing this to the coder."}));
    assert_eq!(lead_2[2]["name"], "delegate");
    // The tool result answers the call it belongs to, in the user turn right after it.
    let last_user = leads[1]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last_user["role"], "user");
    assert_eq!(last_user["content"][0]["type"], "tool_result");
    assert_eq!(last_user["content"][0]["tool_use_id"], lead_2[2]["id"]);
    assert!(last_user["content"][0]["content"].as_str().unwrap().contains("wrote hello.txt"));

    // The log keeps the thinking apart from the shown text, signature included.
    let log = d.client().call("log.get", json!({"task_id": task, "role": "coder"})).unwrap();
    let text = log.to_string();
    assert!(text.contains(CODER_SIG) && text.contains(CODER_SIG_2), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_waited_out_and_counts_come_from_count_tokens() {
    let server = ScriptedServer::builder()
        .model(MODEL)
        .script(vec![
            rate_limited(Some("1")),
            overloaded(),
            sse(vec![tool_call("list_dir", json!({"path": "."}))]),
            sse(vec![finish("listed the workspace")]),
        ])
        .start()
        .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# demo\n").unwrap();
    let d = start_daemon(
        &server,
        "[retry]\nrate_limit = { attempts = 3, delay = \"10ms\" }\noverloaded = { attempts = 2, delay = \"10ms\" }\n",
    );
    let task = d.submit("List the workspace", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(60));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());

    // 429 (its retry-after wins over the configured delay), then 529: overloaded, on its own schedule.
    let retries = of_kind(&events, "retry_scheduled");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(
        (retries[0]["reason"].as_str(), retries[0]["max_attempts"].as_u64()),
        (Some("rate_limit"), Some(3))
    );
    assert_eq!((retries[0]["attempt"].as_u64(), retries[0]["delay_ms"].as_u64()), (Some(1), Some(1000)));
    assert_eq!(
        (retries[1]["reason"].as_str(), retries[1]["max_attempts"].as_u64()),
        (Some("overloaded"), Some(2))
    );
    assert_eq!((retries[1]["attempt"].as_u64(), retries[1]["delay_ms"].as_u64()), (Some(1), Some(10)));
    let chats = server.chat_requests();
    assert_eq!(chats.len(), 4);
    assert_eq!(chats[0], chats[1], "a retry resends the same request");
    assert_eq!(chats[1], chats[2]);
    assert_eq!(server.remaining(), 0);

    // Counted by the provider's own endpoint: measured, not estimated, everywhere it shows.
    let sent = of_kind(&events, "request_sent");
    assert!(!sent.is_empty());
    for e in &sent {
        assert_eq!(e["estimated"], false, "{e}");
        assert!(e["tokens"].as_u64().unwrap() > 0, "{e}");
    }
    let gauge = d.client().call("context.get", json!({"task_id": task, "role": "lead"})).unwrap();
    assert_eq!(gauge["count_source"], "endpoint", "{gauge}");
    assert_eq!(gauge["estimated"], false, "{gauge}");
    assert_eq!(gauge["tokens"], sent.last().unwrap()["tokens"]);
    let counts: Vec<_> =
        server.requests().into_iter().filter(|r| r.path_only() == "/v1/messages/count_tokens").collect();
    assert!(!counts.is_empty());
    assert!(counts.iter().all(|r| r.body["model"] == MODEL && r.header("x-api-key") == Some(KEY)));
    // Within framing of the server's own count of what it received.
    let ours = sent.last().unwrap()["tokens"].as_u64().unwrap();
    let theirs = *server.counted().last().unwrap();
    assert!(ours >= theirs && ours <= theirs + theirs / 5, "ours {ours}, server {theirs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_is_too_long_teaches_the_window_and_the_request_is_compacted_and_resent() {
    // Files of ~6 KB: a dozen reads pass 16K tokens long before the assumed 256K window.
    let ws = tempfile::tempdir().unwrap();
    for i in 0..12 {
        let mut text = String::new();
        let mut n = 0u64;
        while text.len() < 6_000 {
            n += 1;
            text.push_str(&format!(
                "record {i}-{n}: value {} flag {}\n",
                (n * 7919 + i) % 10007,
                n.is_multiple_of(3)
            ));
        }
        std::fs::write(ws.path().join(format!("data_{i}.txt")), text).unwrap();
    }
    let reads = Arc::new(AtomicUsize::new(0));
    let lead_reads = reads.clone();
    let server = ScriptedServer::builder()
        .model(MODEL)
        .window(16_384)
        .responder(move |body: &Value| {
            if is_summary_request(body) {
                return sse(vec![text("Summary: the lead read the data files one by one; all looked fine.")]);
            }
            let n = lead_reads.fetch_add(1, Ordering::SeqCst);
            if n < 12 {
                sse(vec![
                    reasoning(&format!("next, file {n}")),
                    tool_call("read_file", json!({"path": format!("data_{n}.txt")})),
                ])
            } else {
                sse(vec![finish("read all twelve files")])
            }
        })
        .start()
        .await;
    let d = start_daemon(&server, "");
    let task = d.submit("Read every data file yourself, then finish", ws.path());
    let events = d.events_until_end(&task, Duration::from_secs(120));
    assert_eq!(events.last().unwrap()["kind"], "task_finished", "{events:#?}\n{}", d.serve_log());

    // Refused once, with Anthropic's wording; the stated limit became the window.
    assert_eq!(server.refused(), 1);
    let learned = of_kind(&events, "window_learned");
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(learned[0]["old_window"], 256_000);
    assert_eq!(learned[0]["new_window"], 16_384);
    assert_eq!(learned[0]["source"], "error");
    // The refused request was compacted and resent, and nothing was refused again.
    let after: Vec<&Value> = events.iter().skip_while(|e| e["kind"] != "window_learned").collect();
    let compacted = after.iter().position(|e| e["kind"] == "compaction_finished").expect("compacted");
    let resent = after.iter().position(|e| e["kind"] == "request_sent").expect("resent");
    assert!(compacted < resent, "{after:#?}");
    assert_eq!(after[resent]["window"], 16_384);
    assert_eq!(after[resent]["window_source"], "error");
    let chats = server.chat_requests();
    let counted = server.counted();
    assert!(counted.iter().filter(|&&t| t > 16_384).count() == 1, "{counted:?}");
    let resent_body =
        chats.iter().skip_while(|b| !is_summary_request(b)).find(|b| !is_summary_request(b)).unwrap();
    assert!(resent_body["messages"].to_string().contains("[checkpoint]"), "{resent_body}");
    assert_cache_breakpoints(resent_body);
    assert_eq!(resent_body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    // The summariser thinks with no budget and carries no tools.
    let summariser = chats.iter().find(|b| is_summary_request(b)).unwrap();
    assert!(summariser.get("thinking").is_none() && summariser.get("tools").is_none(), "{summariser}");
}
