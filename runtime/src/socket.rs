//! The socket server: JSON-RPC 2.0, one object per line, over `<home>/agentd.sock`.
//!
//! Each connection has a reader (lines framed by [`crate::framing`], tokio-util's length-capped
//! `LinesCodec`: a line over 8 MiB is answered with -32600 and skipped, and the connection stays
//! usable) and a writer fed by a channel, so subscriptions can stream
//! `task.event` notifications while the same connection keeps answering requests. Connections from
//! another uid are refused.

pub(crate) use crate::framing::{Frame, Lines};
pub(crate) use crate::rpc::{decode_request, error_response};
use crate::rpc::{
    end_notification, event_notification, result_response, unrecorded_end_notification, ErrorCode, Methods,
    Request, RpcError,
};
use agentd_policies::Event;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// The longest request line accepted.
pub const MAX_LINE: usize = 8 << 20;

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
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
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
        tokio::spawn(async move { follow(&methods, &task_id, after, live, &out).await });
    }
}

/// Streams a task's events after `after`: the stored ones first, then live ones, with no gap and no
/// repeat, until the terminal event that ends the task (or the connection closes). A task that ends
/// without a recordable event (a full disk) ends the stream too: the supervisor's in-memory end
/// (`Shared::ends`) is sent as a `task.end` with `recorded: false`.
/// Sends one event of a subscription, and the `task.end` after it when it `ends` the stream. Whether
/// the stream goes on.
async fn send_event(out: &mpsc::Sender<String>, e: &Event, ends: bool) -> bool {
    if out.send(event_notification(e)).await.is_err() {
        return false;
    }
    if ends {
        if let Some(end) = end_notification(e) {
            let _ = out.send(end).await;
        }
        return false;
    }
    true
}

async fn follow(
    methods: &Methods,
    task_id: &str,
    after: u64,
    mut live: broadcast::Receiver<Event>,
    out: &mpsc::Sender<String>,
) {
    let store = &methods.shared.store;
    let ends = &methods.shared.ends;
    // Subscribed before the first look, so an end added meanwhile is seen.
    let mut ended = ends.subscribe();
    let mut last = after;
    // Replays stored events after `last`; true when the stream is over.
    let replay = |last: &mut u64| -> Result<Vec<(Event, bool)>, ()> {
        let mut sent = Vec::new();
        loop {
            let batch = store.events(task_id, *last, 1000).map_err(|_| ())?;
            let n = batch.len();
            let newest = store.last_event_seq(task_id).map_err(|_| ())?;
            for e in batch {
                *last = e.seq;
                // A terminal event ends the stream only if nothing followed it (a resume would).
                let ends = e.kind.is_terminal() && e.seq == newest;
                sent.push((e, ends));
                if ends {
                    return Ok(sent);
                }
            }
            if n < 1000 {
                return Ok(sent);
            }
        }
    };
    macro_rules! send_all {
        ($events:expr) => {
            match $events {
                Ok(events) => {
                    for (e, ends) in events {
                        if !send_event(out, &e, ends).await {
                            return;
                        }
                    }
                }
                Err(()) => {
                    if let Some(end) = ends.get(task_id) {
                        if let Some(line) = unrecorded_end_notification(task_id, last, &end) {
                            let _ = out.send(line).await;
                        }
                    }
                    return;
                }
            }
        };
    }
    send_all!(replay(&mut last));
    let mut signal_open = true;
    loop {
        if let Some(end) = ends.get(task_id) {
            // Everything the store holds was sent; the end it could not take comes from memory.
            send_all!(replay(&mut last));
            if let Some(line) = unrecorded_end_notification(task_id, last, &end) {
                let _ = out.send(line).await;
            }
            return;
        }
        let received = tokio::select! {
            r = live.recv() => r,
            changed = ended.changed(), if signal_open => {
                signal_open = changed.is_ok();
                continue;
            }
        };
        match received {
            Ok(e) if e.task_id == task_id && e.seq > last => {
                if e.seq > last + 1 {
                    send_all!(replay(&mut last));
                    continue;
                }
                last = e.seq;
                if !send_event(out, &e, e.kind.is_terminal()).await {
                    return;
                }
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => send_all!(replay(&mut last)),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
