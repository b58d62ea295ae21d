//! The daemon's fuzz targets' oracles (`agentd_daemon::fuzzing`: socket lines, HTTP routes, the
//! config) as property tests, so CI runs them on
//! every build: arbitrary bytes, and random mutations of the committed seed corpus
//! (`fuzz/corpus/<target>/`). `cargo fuzz` (see `fuzz/README.md`) runs the same oracles longer.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_daemon::fuzzing::{
    check_config, check_http_request, check_provider_wait, check_rpc_lines, decode_rpc_lines, parse_config,
    LineOutcome,
};
use agentd_test_support::corpus::{corpus, mutation, seed};
use proptest::prelude::*;

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
    for (name, bytes) in corpus("config") {
        check_config(std::str::from_utf8(&bytes).unwrap()).unwrap_or_else(|e| panic!("config/{name}: {e}"));
    }
    for (name, bytes) in corpus("http_route") {
        check_http_request(&bytes).unwrap_or_else(|e| panic!("http_route/{name}: {e}"));
    }
    for (name, bytes) in corpus("provider_wait") {
        check_provider_wait(&bytes).unwrap_or_else(|e| panic!("provider_wait/{name}: {e}"));
    }
}

#[test]
fn http_seeds_decode_as_the_socket_would() {
    use agentd_daemon::http::decode_route;
    use agentd_protocol::rpc::ROUTES;
    let route = |method: &str| ROUTES.iter().find(|r| r.method.name() == method).unwrap();
    let r =
        decode_route(route("log.get"), &["t".into()], "role=coder&after_seq=12&limit=500&colour=red", b"");
    let (method, params) = r.unwrap().to_wire();
    assert_eq!(method, "log.get");
    assert_eq!(params, serde_json::json!({"task_id": "t", "role": "coder", "after_seq": 12, "limit": 500}));
    let e = decode_route(route("log.get"), &["t".into()], "limit=ten", b"").unwrap_err();
    assert_eq!(e.code, agentd_protocol::ErrorCode::InvalidParams);
    let e = decode_route(route("task.submit"), &[], "", br#"{"objective": 1, "workspace": [}"#).unwrap_err();
    assert_eq!(e.code, agentd_protocol::ErrorCode::ParseError);
}

#[test]
fn seeds_decode_as_expected() {
    let session = decode_rpc_lines(&seed("rpc_line", "session.jsonl"), 8 << 20, 0);
    assert_eq!(session.len(), 7);
    assert!(session.iter().all(|d| matches!(d, LineOutcome::Request { .. })), "{session:?}");
    let broken = decode_rpc_lines(&seed("rpc_line", "broken.jsonl"), 8 << 20, 0);
    // The last line has no newline: never decoded. Blank lines are skipped.
    assert_eq!(broken.len(), 10, "{broken:?}");
    assert!(
        matches!(&broken[5], LineOutcome::Error { error, .. } if error.code == agentd_protocol::ErrorCode::InvalidParams),
        "{:?}",
        broken[5]
    );

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
    fn http_requests_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        ok(check_http_request(&bytes));
    }

    #[test]
    fn http_requests_from_mutated_seeds(bytes in mutation("http_route")) {
        ok(check_http_request(&bytes));
    }

    #[test]
    fn provider_waits_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        ok(check_provider_wait(&bytes));
    }

    #[test]
    fn provider_waits_from_mutated_seeds(bytes in mutation("provider_wait")) {
        ok(check_provider_wait(&bytes));
    }

    /// Each header the providers read, with a number of any size, sign and form.
    #[test]
    fn provider_waits_of_any_number(
        name in prop::sample::select(vec![
            "retry-after-ms", "retry-after", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
            "anthropic-ratelimit-tokens-reset",
        ]),
        value in prop_oneof![
            any::<f64>().prop_map(|f| f.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<u128>().prop_map(|n| format!("{n}.5")),
            (any::<u64>(), prop::sample::select(vec!["h", "m", "s", "ms", "h1m", "m0.5s"]))
                .prop_map(|(n, u)| format!("{n}{u}")),
            (1u32..99_999).prop_map(|y| format!("{y:04}-01-01T00:00:00Z")),
        ],
    ) {
        ok(check_provider_wait(format!("{name}: {value}\n").as_bytes()));
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
