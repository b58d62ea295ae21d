//! How long does a big stream event take to read? Figures, printed (this is a benchmark, not a test).
//!
//! ```text
//! cargo run --release --example bench_stream [MB …]
//! ```
//!
//! A scripted OpenAI-compatible server on 127.0.0.1 answers with one tool call whose arguments (a
//! `write_file` of `MB` megabytes of text) stream in **one** SSE event, as a model that writes a big
//! file in one piece sends it; the provider client (`agentd_providers::Client`, the daemon's own)
//! reads and assembles the answer. For each size (1, 8 and 40 MB unless given): the time to read
//! the stream's bytes alone (the HTTP client counting them, as curl would), and the time the client
//! takes to read the same answer into a tool call, checked whole — the event written at once, and
//! written 16 KiB at a time as a server flushing as it goes does (more, smaller pieces reach the
//! reader: a reader that scans its buffer again for each piece shows it most there). Then a Responses API stream whose
//! reasoning item carries 10 MB of text (its `output_item.done` and `response.completed` events
//! each carry the whole item). The idle and request deadlines are set far out, so a slow reader is
//! timed rather than cut.

// A benchmark or demo, not the daemon: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use agentd_protocol::{ChatRequest, Message, Model, Part};
use agentd_providers::{install_tls_provider, Deadlines, ProviderKind};
use agentd_test_support::*;
use common::{mb, runtime, Result};
use futures_util::StreamExt;
use serde_json::json;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const FAR: Duration = Duration::from_secs(3600);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_stream: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|e| format!("a size in MB, not {a:?}: {e}")))
        .collect::<Result<_>>()?;
    let sizes = if sizes.is_empty() { vec![1, 8, 40] } else { sizes };
    let rt = runtime()?;
    rt.block_on(async {
        install_tls_provider();
        let raw = reqwest::Client::new();
        // The first request of a process pays for setting the HTTP client up: not a figure.
        let warm = ScriptedServer::start(vec![sse(vec![text("warm")])]).await;
        raw_read(&raw, &warm.base_url(), "chat/completions").await?;
        println!("one SSE event carrying a tool call's arguments (chat completions), read by the client:");
        println!(
            "{:>6}  {:>11}  {:>9}  {:>16}  {:>16}",
            "MB", "event bytes", "raw read", "written at once", "in 16 KiB writes"
        );
        for n in sizes {
            let content = text_of(n * 1_000_000);
            let call =
                || sse(vec![tool_call_whole("write_file", json!({"path": "big.txt", "content": content}))]);
            let server =
                ScriptedServer::start(vec![call(), call(), trickled(16 * 1024, Duration::ZERO, call())])
                    .await;
            let (bytes, raw_read) = raw_read(&raw, &server.base_url(), "chat/completions").await?;
            let client = ProviderKind::OpenAi.connect(&server.base_url(), None, far());
            let mut reads = Vec::new();
            for _ in 0..2 {
                let started = Instant::now();
                let answer = Model::chat(&client, &request()).await.map_err(|e| e.to_string())?;
                reads.push(started.elapsed());
                let arguments = match answer.message.parts.first() {
                    Some(Part::ToolCall { arguments, .. }) => arguments.clone(),
                    other => return Err(format!("not the tool call: {other:?}")),
                };
                let sent: serde_json::Value = serde_json::from_str(&arguments).map_err(|e| e.to_string())?;
                if sent["content"].as_str() != Some(content.as_str()) {
                    return Err(format!("{n} MB: the arguments read are not the ones sent"));
                }
            }
            println!(
                "{n:>6}  {:>9.1}MB  {:>7.2} s  {:>14.2} s  {:>14.2} s",
                mb(bytes),
                raw_read.as_secs_f64(),
                reads[0].as_secs_f64(),
                reads[1].as_secs_f64()
            );
        }

        println!(
            "\na Responses API stream with a 10 MB reasoning item (its deltas, then two events of 10 MB):"
        );
        println!("{:>6}  {:>11}  {:>9}  {:>16}", "MB", "stream bytes", "raw read", "client read");
        let thought = text_of(10_000_000);
        let answer = || sse(vec![reasoning(&thought), finish("done")]);
        let server = ScriptedServer::start(vec![answer(), answer()]).await;
        let (bytes, raw_read) = raw_read(&raw, &server.base_url(), "responses").await?;
        let client = ProviderKind::OpenAiResponses.connect(&server.base_url(), None, far());
        let started = Instant::now();
        let answer = Model::chat(&client, &request()).await.map_err(|e| e.to_string())?;
        let read = started.elapsed();
        let thinking = answer.message.parts.iter().find_map(|p| match p {
            Part::Thinking { text, .. } => Some(text.len()),
            _ => None,
        });
        if thinking != Some(thought.len()) {
            return Err(format!("the reasoning read is {thinking:?} bytes, {} were sent", thought.len()));
        }
        println!(
            "{:>6}  {:>9.1}MB  {:>7.2} s  {:>14.2} s",
            10,
            mb(bytes),
            raw_read.as_secs_f64(),
            read.as_secs_f64()
        );
        Ok(())
    })
}

fn far() -> Deadlines {
    Deadlines { idle: FAR, total: FAR }
}

fn request() -> ChatRequest {
    chat_request(DEFAULT_MODEL, vec![Message::user("write the big file")])
}

/// `len` bytes of text in lines, as a file an agent writes might read (quotes and newlines to escape).
fn text_of(len: usize) -> String {
    let line = "    let \"value\" = compute(alpha, beta); // the next step of the work\n";
    line.repeat(len / line.len() + 1)[..len].to_string()
}

/// A stream's bytes read and counted from `path` (`chat/completions`, `responses`), nothing parsed
/// (what curl does): their number and the time taken, the server's building of its events included
/// as it is in the client's figures.
async fn raw_read(client: &reqwest::Client, base_url: &str, path: &str) -> Result<(usize, Duration)> {
    let body = json!({"model": DEFAULT_MODEL, "stream": true,
        "messages": [{"role": "user", "content": "write"}], "input": "write"});
    let started = Instant::now();
    let response =
        client.post(format!("{base_url}/{path}")).json(&body).send().await.map_err(|e| e.to_string())?;
    let mut bytes = response.bytes_stream();
    let mut total = 0;
    while let Some(chunk) = bytes.next().await {
        total += chunk.map_err(|e| e.to_string())?.len();
    }
    Ok((total, started.elapsed()))
}
