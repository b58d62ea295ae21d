//! Logging what anyone who can reach the port can send — requests without the token, requests
//! actix cannot parse — without letting them fill the log: at `debug` only, and at most one line
//! per [`EVERY`], which says how many more of the same were refused since the line before.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line this often.
pub const EVERY: Duration = Duration::from_secs(10);

/// A rate limit on one kind of log line.
pub struct Quiet {
    what: &'static str,
    state: Mutex<State>,
}

struct State {
    last: Option<Instant>,
    unlogged: u64,
}

impl Quiet {
    /// A limit on lines about `what` ("request without the token").
    pub const fn new(what: &'static str) -> Quiet {
        Quiet { what, state: Mutex::new(State { last: None, unlogged: 0 }) }
    }

    /// Counts one occurrence and logs it at `debug` unless a line was logged within [`EVERY`].
    pub fn note(&self, detail: &str) {
        if let Some(more) = self.due(agentd_engine::clock::monotonic()) {
            tracing::debug!(more_since_last_line = more, "refused a {}: {detail}", self.what);
        }
    }

    /// Whether a line is due at `now`, and if so how many occurrences went unlogged before it.
    fn due(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match state.last {
            Some(last) if now.duration_since(last) < EVERY => {
                state.unlogged += 1;
                None
            }
            _ => {
                state.last = Some(now);
                Some(std::mem::take(&mut state.unlogged))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_counting_the_rest() {
        let quiet = Quiet::new("thing");
        let start = Instant::now();
        assert_eq!(quiet.due(start), Some(0));
        for i in 1..=99 {
            assert_eq!(quiet.due(start + Duration::from_millis(i)), None);
        }
        assert_eq!(quiet.due(start + EVERY), Some(99), "the next line counts what went unlogged");
        assert_eq!(quiet.due(start + EVERY + Duration::from_secs(1)), None);
    }
}
