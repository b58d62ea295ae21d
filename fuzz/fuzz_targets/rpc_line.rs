//! Socket framing and JSON-RPC request decoding.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = agentd_daemon::fuzzing::check_rpc_lines(data) {
        panic!("{e}");
    }
});
