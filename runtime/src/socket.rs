//! The socket server: JSON-RPC 2.0, one object per line, over `<home>/agentd.sock`.
//!
//! Each connection has a reader (bounded lines: a line over 8 MiB is answered with -32600 and skipped,
//! and the connection stays usable) and a writer fed by a channel, so subscriptions can stream
//! `task.event` notifications while the same connection keeps answering requests. Connections from
//! another uid are refused.

use crate::follow::follow;
pub(crate) use crate::rpc::{decode_request, error_response};
use crate::rpc::{notification, result_response, ErrorCode, Methods, Request, RpcError};
use agentd_protocol::Notification;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest request line accepted.
pub const MAX_LINE: usize = 8 << 20;

pub async fn serve(listener: UnixListener, methods: Arc<Methods>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let methods = methods.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move { connection(stream, methods, stop).await });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

fn same_uid(stream: &UnixStream) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    matches!(stream.peer_cred(), Ok(cred) if cred.uid() == me)
}

/// A request line's framing: bytes in, whole lines out. A line over `max` bytes is skipped to its
/// end and reported as [`Frame::Oversized`], so the connection stays usable; blank lines are skipped.
pub(crate) struct Framer {
    line: Vec<u8>,
    oversized: bool,
    max: usize,
}

/// What [`Framer::feed`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// One request line, without its `\n`; never blank.
    Line(Vec<u8>),
    /// A line over the limit ended; its bytes were dropped.
    Oversized,
}

impl Framer {
    pub(crate) fn new(max: usize) -> Framer {
        Framer { line: Vec::new(), oversized: false, max }
    }

    /// Takes bytes from `buf` up to and including the first `\n` (or all of it when there is none):
    /// how many it took, and the frame that `\n` ended, if any.
    pub(crate) fn feed(&mut self, buf: &[u8]) -> (usize, Option<Frame>) {
        let (chunk, end, used) = match buf.iter().position(|&b| b == b'\n') {
            Some(pos) => (&buf[..pos], true, pos + 1),
            None => (buf, false, buf.len()),
        };
        if !self.oversized {
            if self.line.len() + chunk.len() > self.max {
                self.oversized = true;
                self.line = Vec::new();
            } else {
                self.line.extend_from_slice(chunk);
            }
        }
        if !end {
            return (used, None);
        }
        if self.oversized {
            self.oversized = false;
            return (used, Some(Frame::Oversized));
        }
        let text = std::mem::take(&mut self.line);
        if text.iter().all(|b| b.is_ascii_whitespace()) {
            return (used, None);
        }
        (used, Some(Frame::Line(text)))
    }
}

pub(crate) fn oversized_error(max: usize) -> RpcError {
    RpcError::new(ErrorCode::InvalidRequest, format!("request line over {max} bytes"))
}

/// A decoded JSON-RPC request: its id (`null` when it has none), method and params (`null` when
/// absent).
async fn connection(stream: UnixStream, methods: Arc<Methods>, stop: CancellationToken) {
    if !same_uid(&stream) {
        let (mut r, mut w) = stream.into_split();
        let e = RpcError::new(ErrorCode::InvalidRequest, "connections from another user are refused");
        let _ = w.write_all(format!("{}\n", error_response(Value::Null, &e)).as_bytes()).await;
        let _ = w.shutdown().await;
        // Take what the client already sent before closing, so the close is not a reset that would
        // throw away the refusal before the client reads it. Bounded in bytes and time.
        let mut sink = [0u8; 4096];
        let drain = async {
            let mut taken = 0usize;
            while taken < (64 << 10) {
                match tokio::io::AsyncReadExt::read(&mut r, &mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => taken += n,
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
        return;
    }
    let (r, mut w) = stream.into_split();
    let (out, mut rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            line.push('\n');
            if w.write_all(line.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let mut reader = BufReader::with_capacity(64 << 10, r);
    let mut framer = Framer::new(MAX_LINE);
    loop {
        let buf = tokio::select! {
            _ = stop.cancelled() => break,
            b = reader.fill_buf() => match b { Ok(b) => b, Err(_) => break },
        };
        if buf.is_empty() {
            break;
        }
        let (used, frame) = framer.feed(buf);
        reader.consume(used);
        match frame {
            None => {}
            Some(Frame::Oversized) => {
                let refusal = error_response(Value::Null, &oversized_error(MAX_LINE));
                if out.send(refusal).await.is_err() {
                    break;
                }
            }
            Some(Frame::Line(text)) => handle_line(&text, &methods, &out).await,
        }
    }
    drop(out);
    let _ = writer.await;
}

async fn handle_line(text: &[u8], methods: &Arc<Methods>, out: &mpsc::Sender<String>) {
    let (id, request) = match decode_request(text) {
        Ok(request) => request,
        Err((id, e)) => {
            let _ = out.send(error_response(id, &e)).await;
            return;
        }
    };
    // Subscribe before answering, so nothing published in between is missed.
    let follows = match &request {
        Request::TaskSubscribe(p) => {
            Some((p.task_id.clone(), p.after_seq.unwrap_or(0), methods.shared.bus.subscribe()))
        }
        _ => None,
    };
    let result = methods.call(request).await;
    let line = match &result {
        Ok(v) => result_response(id, v.clone()),
        Err(e) => error_response(id, e),
    };
    if out.send(line).await.is_err() {
        return;
    }
    if let (Some((task_id, after, live)), Ok(_)) = (follows, result) {
        let methods = methods.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let send = |n: Notification| {
                let out = out.clone();
                async move { out.send(notification(&n)).await.is_ok() }
            };
            // A client may stop writing and go on reading: only a failed write ends the stream.
            follow(&methods.shared, &task_id, after, live, send, std::future::pending()).await
        });
    }
}
