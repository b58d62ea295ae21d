//! The OpenAI Responses API SSE stream through the real driver and assembler (and as a non-streamed body).
#![no_main]
use agentd_providers::fuzzing::{check_sse, Protocol};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = check_sse(Protocol::Responses, data) {
        panic!("{e}");
    }
});
