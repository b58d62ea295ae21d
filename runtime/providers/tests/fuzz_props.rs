//! The SSE fuzz targets' oracles (`agentd_providers::fuzzing`) as property tests, so CI runs them on
//! every build: arbitrary bytes, and random mutations of the committed seed corpus
//! (`fuzz/corpus/sse_*/`). `cargo fuzz` (see `fuzz/README.md`) runs the same oracles longer.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_protocol::Part;
use agentd_providers::fuzzing::{assemble_anthropic_sse, assemble_openai_sse, assemble_responses_sse};
use agentd_providers::fuzzing::{check_sse, Delivery, Protocol};
use agentd_test_support::corpus::{corpus, mutation, seed};
use proptest::prelude::*;

fn ok(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[test]
fn every_seed_passes_its_oracle() {
    for (target, protocol) in [
        ("sse_openai", Protocol::OpenAi),
        ("sse_anthropic", Protocol::Anthropic),
        ("sse_responses", Protocol::Responses),
    ] {
        for (name, bytes) in corpus(target) {
            check_sse(protocol, &bytes).unwrap_or_else(|e| panic!("{target}/{name}: {e}"));
        }
    }
}

#[test]
fn seeds_assemble_as_expected() {
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

    let text =
        assemble_responses_sse(&seed("sse_responses", "text.sse"), Delivery { piece: 7, reset: false });
    let text = text.unwrap();
    assert_eq!(text.message.parts, vec![Part::Text { text: "Hello, world".into() }]);
    let usage = text.usage.and_then(|u| u.counts()).unwrap();
    assert_eq!((usage.prompt_tokens, usage.cache_read_tokens, usage.completion_tokens), (1500, 1024, 4));
    let chain = assemble_responses_sse(&seed("sse_responses", "reasoning_tool.sse"), Delivery::default());
    let chain = chain.unwrap();
    assert_eq!(chain.finish_reason, "tool_calls");
    assert_eq!(
        chain.message.parts,
        vec![
            Part::Thinking {
                text: "I should read the file.".into(),
                signature: Some("gAAAAABoEncryptedReasoning==".into()),
                redacted: false
            },
            Part::ToolCall {
                id: "call_abc".into(),
                name: "read_file".into(),
                arguments: r#"{"path": "src/main.rs"}"#.into()
            },
        ]
    );
    let cut = assemble_responses_sse(&seed("sse_responses", "incomplete.sse"), Delivery::default()).unwrap();
    assert_eq!(cut.finish_reason, "length");
    assert!(assemble_responses_sse(&seed("sse_responses", "failed.sse"), Delivery::default()).is_err());
    assert!(assemble_responses_sse(&seed("sse_responses", "cut.sse"), Delivery { piece: 0, reset: true })
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

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
    fn responses_sse_from_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        ok(check_sse(Protocol::Responses, &bytes));
    }

    #[test]
    fn responses_sse_from_mutated_seeds(bytes in mutation("sse_responses")) {
        ok(check_sse(Protocol::Responses, &bytes));
    }

    #[test]
    fn anthropic_sse_from_mutated_seeds(bytes in mutation("sse_anthropic")) {
        ok(check_sse(Protocol::Anthropic, &bytes));
    }
}
