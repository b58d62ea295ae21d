//! Fault switches for tests and benchmarks, compiled only with the crate's `testing` feature.
//!
//! The daemon's store never fails on purpose. Tests of what happens when it does — a write failing
//! with an IO error marks the store unhealthy and it heals, an evidence record the database cannot
//! take goes whole to the workspace's fallback folder — need it to fail on cue, and these switches are
//! how. They exist only with the `testing` feature, which is off by default and enabled only from the
//! `[dev-dependencies]` of the crates whose tests use it, so a shipped store has neither the switches
//! nor a check of them on its write path.
//!
//! A [`Store`](crate::Store) holds one set, shared by its clones, and flips them through
//! [`Store::inject_write_failure`](crate::Store::inject_write_failure) and
//! [`Store::fail_evidence_inserts`](crate::Store::fail_evidence_inserts). (The third test-only hook,
//! [`Store::forget_verified_blobs`](crate::Store::forget_verified_blobs), is no fault: it lets a
//! benchmark or a test measure a first read again.)

use std::sync::atomic::{AtomicBool, Ordering};

/// One store's fault switches, all off until a test turns them on.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// The next write fails as if the disk had refused it.
    fail_next_write: AtomicBool,
    /// While set, every evidence record insert fails as if the database could not hold it.
    fail_evidence_inserts: AtomicBool,
}

impl Faults {
    /// Makes the next write fail.
    pub(crate) fn fail_next_write(&self) {
        self.fail_next_write.store(true, Ordering::SeqCst);
    }

    /// Whether this write is the one to fail; asking turns the switch off again.
    pub(crate) fn take_write_failure(&self) -> bool {
        self.fail_next_write.swap(false, Ordering::SeqCst)
    }

    /// Turns failing evidence record inserts on or off.
    pub(crate) fn set_evidence_inserts_fail(&self, fail: bool) {
        self.fail_evidence_inserts.store(fail, Ordering::SeqCst);
    }

    /// Whether evidence record inserts fail now.
    pub(crate) fn evidence_inserts_fail(&self) -> bool {
        self.fail_evidence_inserts.load(Ordering::SeqCst)
    }
}
