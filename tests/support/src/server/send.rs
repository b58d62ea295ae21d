//! How an answer goes out on the connection beyond a plain JSON body: SSE streams (whole, left
//! open, or trickled), half a JSON body, a request accepted and never answered, keep-alive comments only, an HTML
//! page where JSON was expected.

use std::time::Duration;

use serde_json::Value;

use crate::http::Conn;

async fn start_sse(conn: &mut Conn) -> std::io::Result<()> {
    conn.start_chunked(200, "text/event-stream", &[("Cache-Control", "no-cache".into())]).await
}

/// Starts an SSE stream and sends `events`, leaving the stream open.
pub(super) async fn send_events(conn: &mut Conn, events: Vec<String>) -> std::io::Result<()> {
    start_sse(conn).await?;
    for event in events {
        conn.send_chunk(event.as_bytes()).await?;
    }
    Ok(())
}

/// A whole SSE stream of `events`.
pub(super) async fn send_stream(conn: &mut Conn, events: Vec<String>) -> std::io::Result<()> {
    send_events(conn, events).await?;
    conn.end_chunked().await
}

/// How a trickled stream goes out: `bytes` at a time, `every` between two writes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    pub bytes: usize,
    pub every: Duration,
}

/// A whole SSE stream of `events`, written as `pace` says, whatever the events' bounds: an event
/// arrives in parts, the pause falling inside it (no pause at all when it is zero). The client
/// hanging up ends it.
pub(super) async fn send_trickled(conn: &mut Conn, events: Vec<String>, pace: Pace) -> std::io::Result<()> {
    start_sse(conn).await?;
    let all = events.concat();
    for (n, piece) in all.as_bytes().chunks(pace.bytes.max(1)).enumerate() {
        if n > 0 && !pace.every.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(pace.every) => {}
                _ = conn.wait_for_disconnect() => return Ok(()),
            }
        }
        conn.send_chunk(piece).await?;
    }
    conn.end_chunked().await
}

/// Announces `body` whole as a 200 JSON answer, sends half of it and stops: the caller hangs up.
pub(super) async fn send_half_json(conn: &mut Conn, body: &Value) -> std::io::Result<()> {
    let full = serde_json::to_vec(body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n",
        full.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(&full[..full.len() / 2]).await
}

/// Accepts the request (starting an SSE stream when it asked for one) and never answers, until
/// the client hangs up.
pub(super) async fn hang(conn: &mut Conn, stream: bool) -> std::io::Result<()> {
    if stream {
        start_sse(conn).await?;
    }
    conn.wait_for_disconnect().await;
    Ok(())
}

/// SSE comments only, one every `every`, until the client hangs up (bounded: at most 10 minutes).
pub(super) async fn keep_alive_only(conn: &mut Conn, stream: bool, every: Duration) -> std::io::Result<()> {
    if !stream {
        return hang(conn, false).await;
    }
    start_sse(conn).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while tokio::time::Instant::now() < deadline {
        tokio::select! {
            _ = tokio::time::sleep(every) => conn.send_chunk(b": keepalive\n\n").await?,
            _ = conn.wait_for_disconnect() => return Ok(()),
        }
    }
    Ok(())
}

/// A 200 whose body is an HTML page, as a proxy or a captive portal answers.
pub(super) async fn html_body(conn: &mut Conn) -> std::io::Result<()> {
    let page = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Network login required</h1></body></html>";
    conn.send_response(200, "text/html; charset=utf-8", &[], page).await
}
