use super::testing::{kind, Chunk};
use super::*;
use crate::openai::stream::Assembler;
use agentd_protocol::Part;
use futures_util::stream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn data(json: &str) -> String {
    format!("data: {json}\n\n")
}

/// A chat completion's stream whose one tool call brings `arguments` in one event.
fn one_call(arguments: &str) -> String {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
        "index": 0, "id": "c1", "type": "function",
        "function": {"name": "write_file", "arguments": arguments},
    }]}}]});
    [
        data(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#),
        data(&call.to_string()),
        data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat()
}

/// `bytes` in pieces of `size`, each after a pause of `pause`.
fn paced(bytes: &[u8], size: usize, pause: Duration) -> impl Stream<Item = Chunk> {
    let pieces: Vec<Vec<u8>> = bytes.chunks(size).map(<[u8]>::to_vec).collect();
    stream::iter(pieces).then(move |piece| async move {
        tokio::time::sleep(pause).await;
        Chunk::Ok(piece)
    })
}

#[tokio::test]
async fn an_event_slower_than_the_idle_deadline_is_read_while_its_bytes_keep_coming() {
    let arguments = format!(r#"{{"path": "a.txt", "content": "{}"}}"#, "y".repeat(6_000));
    // 7 KB in pieces of 200 bytes, 20 ms apart: the tool call's event alone takes 600 ms to come,
    // each piece well within the 400 ms deadline.
    let bytes = one_call(&arguments);
    let pieces = paced(bytes.as_bytes(), 200, Duration::from_millis(20));
    let answer = drive_within(pieces, Assembler::default(), Some(Duration::from_millis(400))).await.unwrap();
    assert!(matches!(&answer.message.parts[..], [Part::ToolCall { arguments: a, .. }] if *a == arguments));
}

#[tokio::test]
async fn keep_alives_alone_stall_even_after_an_event() {
    let mut bytes = data(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}"#);
    // Two seconds of keep-alives and blank lines, one every 20 ms: none of it is part of an event.
    bytes.push_str(&": keep-alive\n\n\n".repeat(100));
    let r = drive_within(
        paced(bytes.as_bytes(), 15, Duration::from_millis(20)),
        Assembler::default(),
        Some(Duration::from_millis(300)),
    )
    .await;
    match r {
        Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Stalled, message }) => {
            assert!(message.contains("sent no event for 300ms, nor any part of one"), "{message}")
        }
        other => panic!("expected a stall, got {other:?}"),
    }
}

#[tokio::test]
async fn an_event_over_the_cap_ends_the_reading_naming_the_cap_and_its_size() {
    const MIB: usize = 1024 * 1024;
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let head = b"data: {\"choices\": [{\"delta\": {\"content\": \"".to_vec();
    let value_in_head = head.len() - b"data: ".len();
    let mut pieces = vec![head];
    pieces.extend((0..80).map(|_| vec![b'z'; MIB]));
    let bytes = stream::iter(pieces).inspect(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let r = drive_within(bytes.map(Chunk::Ok), Assembler::default(), None).await;
    let Err(ProviderError::StreamAnomaly { kind: AnomalyKind::TooLarge, message }) = r else {
        panic!("expected too_large, got {r:?}")
    };
    let size = MAX_EVENT_BYTES + value_in_head;
    assert!(message.contains("passed 64 MiB, the most agentd reads of one event"), "{message}");
    assert!(message.contains(&format!("({size} bytes of it had come)")), "{message}");
    // The piece that crossed the cap was the last one read: nothing more was held.
    assert_eq!(pulled.load(Ordering::SeqCst), 1 + 64);
}

#[tokio::test]
async fn the_events_before_a_bad_one_count_however_the_pieces_split() {
    let answer = [
        data(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"done"}}]}"#),
        data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#),
    ]
    .concat();
    let finished = format!("{answer}data: [DONE]\n\n");
    // All in one piece with a bad event after `[DONE]`: the answer was complete when it came.
    let bytes = [finished.as_bytes(), b"data: \xFF\n\n"].concat();
    let r = drive_within(stream::iter([Chunk::Ok(bytes)]), Assembler::default(), None).await;
    assert_eq!(r.unwrap().finish_reason, "stop");
    // Before `[DONE]`, the bad event is the stream's failure, in one piece or in bytes.
    let bytes = [answer.as_bytes(), b"data: \xFF\n\n"].concat();
    for size in [bytes.len(), 1] {
        let pieces: Vec<Chunk> = bytes.chunks(size).map(|c| Chunk::Ok(c.to_vec())).collect();
        let r = drive_within(stream::iter(pieces), Assembler::default(), None).await;
        assert_eq!(kind(r), AnomalyKind::Parse, "pieces of {size}");
    }
}
