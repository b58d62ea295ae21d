//! The HTTP API's decoding of a route's path, query and body into its method's params.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = agentd_daemon::fuzzing::check_http_request(data) {
        panic!("{e}");
    }
});
