//! A provider's 429 headers, the whole way a wait goes to the log: read saturating, judged by the
//! retry policy, the task's resume time written as the engine records it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = agentd_daemon::fuzzing::check_provider_wait(data) {
        panic!("{e}");
    }
});
