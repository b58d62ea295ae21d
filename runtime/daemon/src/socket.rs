//! The socket server: JSON-RPC 2.0, one object per line, over `<home>/agentd.sock`.
//!
//! Each connection has a reader (lines framed by [`crate::framing`], tokio-util's length-capped
//! `LinesCodec`: a line over 8 MiB is answered with -32600 and skipped, and the connection stays
//! usable) and a writer fed by a channel, so subscriptions can stream
//! `task.event` notifications while the same connection keeps answering requests. Connections from
//! another uid are refused.

use crate::follow::follow;
pub(crate) use crate::rpc::{decode_request, error_response};
use crate::rpc::{notification, result_response, Methods};
pub(crate) use agentd_client::framing::{Frame, Lines, MAX_LINE};
use agentd_protocol::Notification;
use agentd_protocol::{ErrorCode, Request, RpcError};
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Accepts connections on `listener` until `stop` fires, serving each on its own task: requests answered
/// through `methods`, subscriptions streamed. Connections from another uid are refused.
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
                    agentd_engine::clock::clock().sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

pub(crate) fn same_uid(stream: &UnixStream) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    matches!(stream.peer_cred(), Ok(cred) if cred.uid() == me)
}

pub(crate) fn oversized_error(max: usize) -> RpcError {
    RpcError::new(ErrorCode::InvalidRequest, format!("request line over {max} bytes"))
}

/// The answer to a request line that is not UTF-8 (so not JSON either).
pub(crate) fn not_utf8_error() -> RpcError {
    RpcError::new(ErrorCode::ParseError, "parse error: the line is not valid UTF-8")
}

/// The answer to what the framing found that is not a request line, if it is one of those.
pub(crate) fn framing_error(frame: &Frame, max: usize) -> Option<RpcError> {
    match frame {
        Frame::Line(_) => None,
        Frame::Oversized => Some(oversized_error(max)),
        Frame::NotUtf8 => Some(not_utf8_error()),
    }
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
        let _ = agentd_engine::clock::clock().timeout(std::time::Duration::from_secs(1), drain).await;
        return;
    }
    let (mut r, mut w) = stream.into_split();
    let (out, mut rx) = mpsc::channel::<String>(1024);
    let writer = tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            line.push('\n');
            if w.write_all(line.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let mut lines = Lines::new(MAX_LINE);
    'read: loop {
        let read = tokio::select! {
            _ = stop.cancelled() => break,
            n = r.read_buf(lines.buffer(64 << 10)) => n,
        };
        if matches!(read, Ok(0) | Err(_)) {
            break;
        }
        while let Some(frame) = lines.next_frame() {
            if let Frame::Line(text) = &frame {
                handle_line(text.as_bytes(), &methods, &out).await;
            } else if let Some(refusal) = framing_error(&frame, MAX_LINE) {
                if out.send(error_response(Value::Null, &refusal)).await.is_err() {
                    break 'read;
                }
            }
        }
    }
    drop(out);
    let _ = writer.await;
}

async fn handle_line(text: &[u8], methods: &Arc<Methods>, out: &mpsc::Sender<String>) {
    let (id, request) = match decode_request(text) {
        Ok((id, request)) => match methods.full_task_id(request) {
            Ok(request) => (id, request),
            Err(e) => {
                let _ = out.send(error_response(id, &e)).await;
                return;
            }
        },
        Err((id, e)) => {
            let _ = out.send(error_response(id, &e)).await;
            return;
        }
    };
    // Subscribe before answering, so nothing published in between is missed.
    let follows = match &request {
        Request::TaskSubscribe(p) => {
            Some((p.task_id.clone(), p.after_seq.unwrap_or(0), methods.shared.live.subscribe()))
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
