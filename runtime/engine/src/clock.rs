//! The daemon's clock, read in one place: the only module of the engine and the daemon that reads
//! the system time or sleeps on it (the `architecture` test checks). Policies take time as a parameter; the runtime reads it
//! here. Every deliberate wait (retry delays, idle-thinking decisions, cron jobs) goes through this
//! clock, so a test can run the daemon with `AGENTD_CLOCK=manual` and drive time over the socket
//! (`clock.advance`) instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// The daemon's clock: the system time, or (with `AGENTD_CLOCK=manual`) the system time plus whatever
/// `clock.advance` added. Cheap to clone; clones share the offset.
#[derive(Clone)]
pub struct Clock {
    inner: Arc<Inner>,
}

struct Inner {
    manual: bool,
    /// Milliseconds added to the system time by `advance`.
    offset_ms: AtomicU64,
    advanced: Notify,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::new(false)
    }

    /// The system clock plus whatever `advance` adds: real time still flows, and tests jump ahead.
    pub fn manual() -> Clock {
        Clock::new(true)
    }

    fn new(manual: bool) -> Clock {
        Clock { inner: Arc::new(Inner { manual, offset_ms: AtomicU64::new(0), advanced: Notify::new() }) }
    }

    /// Whether `clock.advance` can move this clock (`AGENTD_CLOCK=manual`).
    pub fn is_manual(&self) -> bool {
        self.inner.manual
    }

    /// The time now on this clock.
    pub fn now(&self) -> SystemTime {
        later(SystemTime::now(), Duration::from_millis(self.inner.offset_ms.load(Ordering::SeqCst)))
    }

    /// Moves a manual clock forward, waking every sleeper whose deadline has passed. Returns false
    /// (and does nothing) on the system clock.
    pub fn advance(&self, by: Duration) -> bool {
        if !self.inner.manual {
            return false;
        }
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .inner
            .offset_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| Some(o.saturating_add(by)));
        self.inner.advanced.notify_waiters();
        true
    }

    /// Sleeps until this clock has moved `d` forward (by real time, or by `advance`).
    pub async fn sleep(&self, d: Duration) {
        // A wait past what the clock can hold never ends by itself (only by what it is raced with).
        let Some(deadline) = self.now().checked_add(d) else { return std::future::pending().await };
        loop {
            let notified = self.inner.advanced.notified();
            let remaining = match deadline.duration_since(self.now()) {
                Ok(r) if !r.is_zero() => r,
                _ => return,
            };
            tokio::select! {
                _ = tokio::time::sleep(remaining) => {}
                _ = notified => {}
            }
        }
    }
}

impl Clock {
    /// Runs `future` until it ends or this clock has moved `d` forward (`Err(Elapsed)`): a wait
    /// with a bound, on the same clock as every other deliberate wait.
    pub async fn timeout<F: std::future::Future>(
        &self,
        d: Duration,
        future: F,
    ) -> Result<F::Output, Elapsed> {
        tokio::select! {
            out = future => Ok(out),
            _ = self.sleep(d) => Err(Elapsed(d)),
        }
    }
}

/// A [`Clock::timeout`] that ran out: the bound it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not done within {}s", .0.as_secs_f64())]
pub struct Elapsed(pub Duration);

static GLOBAL: OnceLock<Clock> = OnceLock::new();

/// Installs the daemon's clock; the first call wins. Without one, the system clock is used.
pub fn install(clock: Clock) -> Clock {
    GLOBAL.get_or_init(|| clock).clone()
}

/// The daemon's clock.
pub fn clock() -> Clock {
    GLOBAL.get_or_init(Clock::system).clone()
}

/// Now as RFC 3339 with milliseconds, UTC: the `at` of events and task records.
pub fn now_rfc3339() -> String {
    rfc3339(clock().now())
}

/// The latest moment RFC 3339 can write (9999-12-31T23:59:59.999Z): later ones are written as it.
const LATEST_MS: u64 = 253_402_300_799_999;

/// A moment within what RFC 3339 can write: from the epoch to the end of year 9999.
fn writable(at: SystemTime) -> SystemTime {
    let latest = UNIX_EPOCH + Duration::from_millis(LATEST_MS);
    at.clamp(UNIX_EPOCH, latest)
}

/// Now on the daemon's clock, in milliseconds since the Unix epoch (leases and heartbeats are
/// judged in them).
pub fn now_unix_ms() -> u64 {
    let since = clock().now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Now on the monotonic clock, for measuring how long something took (an uptime, a deadline of
/// real time before the daemon's clock runs): the one reading of [`Instant`] outside tests.
pub fn monotonic() -> std::time::Instant {
    std::time::Instant::now()
}

/// Waits `d` of real time on this thread: for code that runs before any runtime (or the daemon's
/// clock) does — joining the fleet at `serve`, between attempts. Everything later waits on
/// [`Clock::sleep`].
pub fn pause_thread(d: Duration) {
    std::thread::sleep(d);
}

/// `at` as RFC 3339 with milliseconds, UTC; a moment past the year 9999 (or before 1970) is written
/// as the last (first) one RFC 3339 has, never a panic.
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(writable(at)).to_string()
}

/// [`rfc3339`] to the second.
pub fn rfc3339_seconds(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(writable(at)).to_string()
}

/// `at + after`, or the latest moment [`rfc3339`] can write when that is later (or overflows).
pub fn later(at: SystemTime, after: Duration) -> SystemTime {
    at.checked_add(after).map_or(UNIX_EPOCH + Duration::from_millis(LATEST_MS), writable)
}

/// Parses an `at` written by [`now_rfc3339`].
pub fn parse_rfc3339(at: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(at).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_wakes_sleepers_when_advanced() {
        let clock = Clock::manual();
        let c = clock.clone();
        let sleeper = tokio::spawn(async move { c.sleep(Duration::from_secs(3600)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!sleeper.is_finished());
        assert!(clock.advance(Duration::from_secs(3601)));
        tokio::time::timeout(Duration::from_secs(5), sleeper).await.unwrap().unwrap();
    }

    #[test]
    fn the_system_clock_cannot_be_advanced() {
        assert!(!Clock::system().advance(Duration::from_secs(1)));
    }
}
