//! The config file parser and validator.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Err(e) = agentd_daemon::fuzzing::check_config(text) {
        panic!("{e}");
    }
});
