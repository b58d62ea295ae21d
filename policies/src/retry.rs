//! Retry schedules: which provider failures are retried, how often, and after how long. Pure: the
//! scheduler executes the waits and the runtime classifies the failures.

use agentd_protocol::{AnomalyKind, ProviderError};
use serde::{Deserialize, Serialize};

/// A failure the runtime may retry, as classified from a provider error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 429 or a provider throttling code; `retry_after_ms` when the server said how long to wait.
    RateLimit {
        /// The server's `Retry-After`, in milliseconds, when it sent one.
        retry_after_ms: Option<u64>,
    },
    /// 529 / `overloaded_error`: a short-lived overload; `retry_after_ms` when the server said.
    Overloaded {
        /// The server's `Retry-After`, in milliseconds, when it sent one.
        retry_after_ms: Option<u64>,
    },
    /// 5xx.
    ServerError,
    /// No finish reason, no content and no tool call, a cut stream, an unparseable event.
    StreamAnomaly,
}

impl Failure {
    /// The failure the retry policy weighs, when waiting and resending may help: a rate limit (with
    /// the server's `Retry-After`), a server error, or a stream anomaly. A connection that broke is
    /// retried like a server error; one refused (nothing listens there), a cancelled call and a
    /// stream event too large to read (the same request would bring the same answer) are not.
    /// `None`: give up.
    pub fn of(error: &ProviderError) -> Option<Failure> {
        match error {
            ProviderError::RateLimited { retry_after, .. } => {
                Some(Failure::RateLimit { retry_after_ms: retry_after.map(|r| r.millis()) })
            }
            ProviderError::Overloaded { retry_after, .. } => {
                Some(Failure::Overloaded { retry_after_ms: retry_after.map(|r| r.millis()) })
            }
            ProviderError::Server { .. } | ProviderError::Transport { .. } => Some(Failure::ServerError),
            ProviderError::StreamAnomaly { kind: AnomalyKind::TooLarge, .. } => None,
            ProviderError::StreamAnomaly { .. } => Some(Failure::StreamAnomaly),
            ProviderError::ContextOverflow { .. }
            | ProviderError::Rejected { .. }
            | ProviderError::QuotaExhausted { .. }
            | ProviderError::ConnectionRefused { .. }
            | ProviderError::Cancelled { .. } => None,
        }
    }

    /// The `reason` of the `retry_scheduled` event.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::RateLimit { .. } => "rate_limit",
            Failure::Overloaded { .. } => "overloaded",
            Failure::ServerError => "server_error",
            Failure::StreamAnomaly => "stream_anomaly",
        }
    }
}

/// How often one kind of failure is retried and the delay its waits are built from (`[retry]` in the
/// configuration, `{ attempts, delay }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Retries after the first failure (not counting the first attempt).
    pub attempts: u32,
    /// The base delay in milliseconds: the wait itself for rate limits, the step of an incremental schedule,
    /// the first wait of an exponential one.
    pub delay_ms: u64,
}

/// The retry schedule of each kind of failure, from the `[retry]` table of the configuration (its defaults
/// when absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Fixed delay, or the server's `Retry-After` when it sends one.
    pub rate_limit: Schedule,
    /// Incremental: delay, 2×delay, 3×delay, …
    pub stream_anomaly: Schedule,
    /// Exponential: delay, 2×delay, 4×delay, …
    pub server_error: Schedule,
    /// Incremental (delay, 2×delay, …) or the server's `Retry-After`: an overload passes in seconds,
    /// not in the minutes a rate limit takes.
    #[serde(default = "default_overloaded")]
    pub overloaded: Schedule,
}

fn default_overloaded() -> Schedule {
    Schedule { attempts: 5, delay_ms: 5_000 }
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            rate_limit: Schedule { attempts: 10, delay_ms: 60_000 },
            stream_anomaly: Schedule { attempts: 2, delay_ms: 2_000 },
            server_error: Schedule { attempts: 3, delay_ms: 2_000 },
            overloaded: default_overloaded(),
        }
    }
}

/// The decision for one failure: wait this long and try again, or give up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait `delay_ms` milliseconds, then send the same request again.
    Retry {
        /// Which retry this is, from 1.
        attempt: u32,
        /// How many retries the schedule allows for this kind of failure.
        max_attempts: u32,
        /// How long to wait first, in milliseconds.
        delay_ms: u64,
    },
    /// The schedule's retries are used up (or the attempt number is 0): fail with the last error.
    GiveUp,
    /// The server said to wait longer than any wait the policy makes ([`RetryPolicy::longest_delay_ms`]):
    /// a usage limit, not a hiccup. It is waited out — `delay_ms`, durably, the task `waiting` — and is
    /// no retry attempt.
    WaitOut {
        /// How long the server said to wait, in milliseconds.
        delay_ms: u64,
    },
}

impl RetryPolicy {
    /// The longest wait any of the schedules makes, in milliseconds: a server that asks for longer
    /// is waited out ([`Decision::WaitOut`]) rather than retried.
    pub fn longest_delay_ms(&self) -> u64 {
        let grows = |s: Schedule| s.delay_ms.saturating_mul(u64::from(s.attempts));
        let doubles = |s: Schedule| s.delay_ms.saturating_mul(1u64 << s.attempts.saturating_sub(1).min(20));
        [
            self.rate_limit.delay_ms,
            grows(self.stream_anomaly),
            doubles(self.server_error),
            grows(self.overloaded),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

/// Decide what to do after the `attempt`-th failure of this kind in a row (1 for the first). A
/// server-stated wait longer than [`RetryPolicy::longest_delay_ms`] is [`Decision::WaitOut`],
/// whatever the attempt.
pub fn decide(policy: &RetryPolicy, failure: Failure, attempt: u32) -> Decision {
    if let Failure::RateLimit { retry_after_ms: Some(ms) }
    | Failure::Overloaded { retry_after_ms: Some(ms) } = failure
    {
        if ms > policy.longest_delay_ms() {
            return Decision::WaitOut { delay_ms: ms };
        }
    }
    let (schedule, delay_ms) = match failure {
        Failure::RateLimit { retry_after_ms } => {
            (policy.rate_limit, retry_after_ms.unwrap_or(policy.rate_limit.delay_ms))
        }
        Failure::Overloaded { retry_after_ms } => {
            let s = policy.overloaded;
            (s, retry_after_ms.unwrap_or(s.delay_ms.saturating_mul(u64::from(attempt))))
        }
        Failure::StreamAnomaly => {
            let s = policy.stream_anomaly;
            (s, s.delay_ms.saturating_mul(u64::from(attempt)))
        }
        Failure::ServerError => {
            let s = policy.server_error;
            (s, s.delay_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(20)))
        }
    };
    if attempt == 0 || attempt > schedule.attempts {
        return Decision::GiveUp;
    }
    Decision::Retry { attempt, max_attempts: schedule.attempts, delay_ms }
}

/// The wait before a tool server that crashed or failed to start (an MCP server) is started again
/// after its first failure.
pub const RESTART_FIRST_DELAY_MS: u64 = 1_000;

/// The longest wait between two starts of a tool server that keeps failing.
pub const RESTART_MAX_DELAY_MS: u64 = 60_000;

/// How long to wait, after the `failures`-th failure in a row of a tool server (a crash, or a start
/// that failed), before starting it again: nothing before the first failure, then 1 s, 2 s, 4 s …
/// doubling up to [`RESTART_MAX_DELAY_MS`]. A server that answers a call counts from 0 again, so
/// one that crashes now and then is back at once, and one that cannot start costs a start a minute.
///
/// ```
/// use agentd_policies::retry::restart_delay_ms;
/// assert_eq!([0, 1, 2, 3].map(restart_delay_ms), [0, 1_000, 2_000, 4_000]);
/// assert_eq!(restart_delay_ms(50), 60_000);
/// ```
pub fn restart_delay_ms(failures: u32) -> u64 {
    match failures {
        0 => 0,
        n => RESTART_FIRST_DELAY_MS.saturating_mul(1u64 << (n - 1).min(32)).min(RESTART_MAX_DELAY_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_provider_errors_are_retried() {
        use agentd_protocol::AnomalyKind;
        use std::time::Duration;
        let transport = |message: &str| ProviderError::Transport { url: "u".into(), message: message.into() };
        let rate_limited = |retry_after| ProviderError::RateLimited { retry_after, message: "m".into() };
        assert_eq!(
            Failure::of(&rate_limited(Some(agentd_protocol::RetryAfter::new(
                Duration::from_millis(1500),
                "retry-after"
            )))),
            Some(Failure::RateLimit { retry_after_ms: Some(1500) })
        );
        assert_eq!(Failure::of(&rate_limited(None)), Some(Failure::RateLimit { retry_after_ms: None }));
        let server = ProviderError::Server { status: 503, message: "m".into() };
        assert_eq!(Failure::of(&server), Some(Failure::ServerError));
        assert_eq!(Failure::of(&transport("connection reset by peer")), Some(Failure::ServerError));
        assert_eq!(Failure::of(&ProviderError::ConnectionRefused { url: "u".into() }), None);
        // A transport error that merely says "cancelled" is still a transport error: only the
        // variant means the caller cancelled.
        assert_eq!(Failure::of(&transport("cancelled")), Some(Failure::ServerError));
        let cancelled = ProviderError::Cancelled { url: "u".into() };
        assert!(cancelled.is_cancelled() && !transport("cancelled").is_cancelled());
        assert_eq!(Failure::of(&cancelled), None);
        let anomaly = ProviderError::StreamAnomaly { kind: AnomalyKind::Cut, message: "m".into() };
        assert_eq!(Failure::of(&anomaly), Some(Failure::StreamAnomaly));
        // An event too big to read comes back as big: resending is no cure.
        let too_large = ProviderError::StreamAnomaly { kind: AnomalyKind::TooLarge, message: "m".into() };
        assert_eq!(Failure::of(&too_large), None);
        let overflow = ProviderError::ContextOverflow { limit: None, message: "m".into() };
        assert_eq!(Failure::of(&overflow), None);
        assert_eq!(Failure::of(&ProviderError::Rejected { status: 401, message: "m".into() }), None);
    }
    use proptest::prelude::*;

    #[test]
    fn retry_after_wins_for_rate_limits() {
        let p = RetryPolicy::default();
        let d = decide(&p, Failure::RateLimit { retry_after_ms: Some(1500) }, 1);
        assert_eq!(d, Decision::Retry { attempt: 1, max_attempts: 10, delay_ms: 1500 });
        let d = decide(&p, Failure::RateLimit { retry_after_ms: None }, 3);
        assert_eq!(d, Decision::Retry { attempt: 3, max_attempts: 10, delay_ms: 60_000 });
        assert_eq!(decide(&p, Failure::RateLimit { retry_after_ms: None }, 11), Decision::GiveUp);
    }

    #[test]
    fn overloads_have_a_short_schedule_of_their_own() {
        let p = RetryPolicy::default();
        let d = decide(&p, Failure::Overloaded { retry_after_ms: None }, 1);
        assert_eq!(d, Decision::Retry { attempt: 1, max_attempts: 5, delay_ms: 5_000 });
        let d = decide(&p, Failure::Overloaded { retry_after_ms: None }, 3);
        assert_eq!(d, Decision::Retry { attempt: 3, max_attempts: 5, delay_ms: 15_000 });
        let d = decide(&p, Failure::Overloaded { retry_after_ms: Some(700) }, 2);
        assert_eq!(d, Decision::Retry { attempt: 2, max_attempts: 5, delay_ms: 700 });
        assert_eq!(decide(&p, Failure::Overloaded { retry_after_ms: None }, 6), Decision::GiveUp);
        assert_eq!(Failure::Overloaded { retry_after_ms: None }.reason(), "overloaded");
    }

    #[test]
    fn stream_anomalies_grow_and_stop_after_two() {
        let p = RetryPolicy::default();
        assert_eq!(
            decide(&p, Failure::StreamAnomaly, 1),
            Decision::Retry { attempt: 1, max_attempts: 2, delay_ms: 2000 }
        );
        assert_eq!(
            decide(&p, Failure::StreamAnomaly, 2),
            Decision::Retry { attempt: 2, max_attempts: 2, delay_ms: 4000 }
        );
        assert_eq!(decide(&p, Failure::StreamAnomaly, 3), Decision::GiveUp);
    }

    #[test]
    fn a_wait_longer_than_any_the_policy_makes_is_waited_out_whatever_the_attempt() {
        let p = RetryPolicy::default();
        // Default: rate limits wait 60 s, the longest of the schedules.
        assert_eq!(p.longest_delay_ms(), 60_000);
        let hours = Failure::RateLimit { retry_after_ms: Some(10_800_000) };
        for attempt in [1, 5, 11] {
            assert_eq!(decide(&p, hours, attempt), Decision::WaitOut { delay_ms: 10_800_000 });
        }
        let overload = Failure::Overloaded { retry_after_ms: Some(600_000) };
        assert_eq!(decide(&p, overload, 1), Decision::WaitOut { delay_ms: 600_000 });
        // Exactly the longest is still a retry.
        let minute = Failure::RateLimit { retry_after_ms: Some(60_000) };
        assert!(matches!(decide(&p, minute, 1), Decision::Retry { delay_ms: 60_000, .. }));
    }

    proptest! {
        #[test]
        fn a_retry_never_waits_longer_than_the_longest_delay(attempt in 1u32..30, after in proptest::option::of(0u64..1_000_000), kind in 0u8..4) {
            let p = RetryPolicy::default();
            let failure = match kind {
                0 => Failure::RateLimit { retry_after_ms: after },
                1 => Failure::Overloaded { retry_after_ms: after },
                2 => Failure::ServerError,
                _ => Failure::StreamAnomaly,
            };
            match decide(&p, failure, attempt) {
                Decision::Retry { delay_ms, .. } => prop_assert!(delay_ms <= p.longest_delay_ms()),
                Decision::WaitOut { delay_ms } => prop_assert!(delay_ms > p.longest_delay_ms()),
                Decision::GiveUp => {}
            }
        }

        #[test]
        fn never_more_than_the_schedule_allows(attempt in 0u32..100, kind in 0u8..3) {
            let p = RetryPolicy::default();
            let failure = match kind {
                0 => Failure::RateLimit { retry_after_ms: None },
                1 => Failure::ServerError,
                _ => Failure::StreamAnomaly,
            };
            match decide(&p, failure, attempt) {
                Decision::Retry { attempt: a, max_attempts, .. } => {
                    prop_assert!(a >= 1 && a <= max_attempts);
                }
                Decision::GiveUp => prop_assert!(attempt == 0 || attempt > 1),
                Decision::WaitOut { .. } => prop_assert!(false, "no server-stated wait here"),
            }
        }
    }
}
