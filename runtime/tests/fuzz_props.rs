//! The fuzz targets' oracles (`agentd_runtime::fuzzing`) as property tests, so CI runs them on
//! every build: arbitrary bytes, and random mutations of the committed seed corpus
//! (`fuzz/corpus/<target>/`). `cargo fuzz` (see `fuzz/README.md`) runs the same oracles longer.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_policies::Part;
use agentd_runtime::fuzzing::{
    assemble_anthropic_sse, assemble_openai_sse, check_config, check_http_request, check_rpc_lines,
    check_sse, decode_rpc_lines, parse_config, Decoded, Delivery, Protocol,
};
use proptest::prelude::*;
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed corpus in {}", dir.display());
    files
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    corpus(target).into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {target}/{name}")).1
}

/// One edit of a mutation: at a position (taken modulo the length), an operation and a byte.
type Edit = (usize, u8, u8);

/// `seed` after `edits`, the way a fuzzer mutates: flip, insert, delete, duplicate, truncate, and
/// splice in bytes that matter to the formats (quotes, braces, newlines, a split UTF-8 sequence).
fn mutate(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    const SPECIAL: &[&[u8]] = &[
        b"\n",
        b"\n\n",
        b"\"",
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b"\\",
        b"data: ",
        b"event: ",
        b"\r",
        b"\xe2\x82",
        b"\xff",
        b"null",
        b"-1",
        b"1e999",
        b"18446744073709551616",
        b"=",
    ];
    let mut out = seed.to_vec();
    for &(at, op, byte) in edits {
        let at = if out.is_empty() { 0 } else { at % (out.len() + 1) };
        match op % 6 {
            0 if at < out.len() => out[at] ^= byte | 1,
            1 => out.insert(at, byte),
            2 if at < out.len() => {
                let end = (at + 1 + byte as usize % 16).min(out.len());
                out.drain(at..end);
            }
            3 => {
                let end = (at + 1 + byte as usize % 32).min(out.len());
                let piece = out[at..end].to_vec();
                out.splice(at..at, piece);
            }
            4 => out.truncate(at),
            _ => {
                let s = SPECIAL[byte as usize % SPECIAL.len()];
                out.splice(at..at, s.iter().copied());
            }
        }
    }
    out
}

fn mutation(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus(target);
    (0..seeds.len(), prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..8))
        .prop_map(move |(i, edits)| mutate(&seeds[i].1, &edits))
}

fn ok(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[test]
fn every_seed_passes_its_oracle() {
    for (name, bytes) in corpus("rpc_line") {
        check_rpc_lines(&bytes).unwrap_or_else(|e| panic!("rpc_line/{name}: {e}"));
    }
    for (target, protocol) in [("sse_openai", Protocol::OpenAi), ("sse_anthropic", Protocol::Anthropic)] {
        for (name, bytes) in corpus(target) {
            check_sse(protocol, &bytes).unwrap_or_else(|e| panic!("{target}/{name}: {e}"));
        }
    }
    for (name, bytes) in corpus("config") {
        check_config(std::str::from_utf8(&bytes).unwrap()).unwrap_or_else(|e| panic!("config/{name}: {e}"));
    }
    for (name, bytes) in corpus("http_route") {
        check_http_request(&bytes).unwrap_or_else(|e| panic!("http_route/{name}: {e}"));
    }
}

#[test]
fn http_seeds_decode_as_the_socket_would() {
    use agentd_protocol::http::ROUTES;
    use agentd_runtime::http::decode_route;
    let route = |method: &str| ROUTES.iter().find(|r| r.method.name() == method).unwrap();
    let r =
        decode_route(route("log.get"), &["t".into()], "role=coder&after_seq=12&limit=500&colour=red", b"");
    let (method, params) = r.unwrap().to_wire();
    assert_eq!(method, "log.get");
    assert_eq!(params, serde_json::json!({"task_id": "t", "role": "coder", "after_seq": 12, "limit": 500}));
    let e = decode_route(route("log.get"), &["t".into()], "limit=ten", b"").unwrap_err();
    assert_eq!(e.code, agentd_runtime::rpc::ErrorCode::InvalidParams);
    let e = decode_route(route("task.submit"), &[], "", br#"{"objective": 1, "workspace": [}"#).unwrap_err();
    assert_eq!(e.code, agentd_runtime::rpc::ErrorCode::ParseError);
}

#[test]
fn seeds_decode_as_expected() {
    let session = decode_rpc_lines(&seed("rpc_line", "session.jsonl"), 8 << 20, 0);
    assert_eq!(session.len(), 7);
    assert!(session.iter().all(|d| matches!(d, Decoded::Request { .. })), "{session:?}");
    let broken = decode_rpc_lines(&seed("rpc_line", "broken.jsonl"), 8 << 20, 0);
    // The last line has no newline: never decoded. Blank lines are skipped.
    assert_eq!(broken.len(), 10, "{broken:?}");
    assert!(
        matches!(&broken[5], Decoded::Error { error, .. } if error.code == agentd_runtime::rpc::ErrorCode::InvalidParams),
        "{:?}",
        broken[5]
    );

    let text = assemble_openai_sse(&seed("sse_openai", "text.sse"), Delivery::default()).unwrap();
    assert_eq!(text.message.parts, vec![Part::Text { text: "Hello, world".into() }]);
    let calls =
        assemble_openai_sse(&seed("sse_openai", "tool_calls.sse"), Delivery { piece: 3, reset: false });
    let calls = calls.unwrap().message.parts;
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        matches!(&calls[0], Part::ToolCall { arguments, .. } if arguments == r#"{"path": "src/main.rs"}"#)
    );
    assert!(assemble_openai_sse(&seed("sse_openai", "cut.sse"), Delivery { piece: 0, reset: true }).is_err());

    let answer = assemble_anthropic_sse(
        &seed("sse_anthropic", "thinking_tool.sse"),
        Delivery { piece: 5, reset: false },
    );
    let parts = answer.unwrap().message.parts;
    assert!(
        matches!(&parts[0], Part::Thinking { text, .. } if text == "I should read the file.\n"),
        "{parts:?}"
    );
    assert!(parts.iter().any(|p| matches!(p, Part::ToolCall { name, .. } if name == "edit_file")));
    assert!(assemble_anthropic_sse(&seed("sse_anthropic", "error.sse"), Delivery::default()).is_err());

    assert!(parse_config(std::str::from_utf8(&seed("config", "full.toml")).unwrap()).is_ok());
    let bad = parse_config(std::str::from_utf8(&seed("config", "bad_values.toml")).unwrap()).unwrap_err();
    assert!(bad.to_string().contains("key `"), "{bad}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rpc_lines_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        ok(check_rpc_lines(&bytes));
    }

    #[test]
    fn rpc_lines_from_mutated_seeds(bytes in mutation("rpc_line")) {
        ok(check_rpc_lines(&bytes));
    }

    #[test]
    fn openai_sse_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        ok(check_sse(Protocol::OpenAi, &bytes));
    }

    #[test]
    fn openai_sse_from_mutated_seeds(bytes in mutation("sse_openai")) {
        ok(check_sse(Protocol::OpenAi, &bytes));
    }

    #[test]
    fn anthropic_sse_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        ok(check_sse(Protocol::Anthropic, &bytes));
    }

    #[test]
    fn anthropic_sse_from_mutated_seeds(bytes in mutation("sse_anthropic")) {
        ok(check_sse(Protocol::Anthropic, &bytes));
    }

    #[test]
    fn http_requests_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        ok(check_http_request(&bytes));
    }

    #[test]
    fn http_requests_from_mutated_seeds(bytes in mutation("http_route")) {
        ok(check_http_request(&bytes));
    }

    #[test]
    fn config_from_any_text(text in "\\PC{0,300}") {
        ok(check_config(&text));
    }

    #[test]
    fn config_from_mutated_seeds(bytes in mutation("config")) {
        ok(check_config(&String::from_utf8_lossy(&bytes)));
    }
}
