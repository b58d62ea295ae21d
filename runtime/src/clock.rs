//! The wall clock, read in one place. Policies take time as a parameter; the runtime reads it here.

use std::time::SystemTime;

/// Now as RFC 3339 with milliseconds, UTC: the `at` of events and task records.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
