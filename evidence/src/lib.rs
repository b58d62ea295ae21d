//! agentd's own disk state.
//!
//! This room is the only one that touches the daemon's durable state: the sled database under
//! `<home>/db` (tasks, the per-task append-only log, settings, learned windows, evidence metadata) and
//! the evidence blobs under `<home>/evidence` (content-addressed files named by sha256; see [`blobs`]
//! and [`evidence`]). It knows nothing of providers, actors or the socket: it stores and returns the
//! plain data of `agentd-policies`.
//!
//! Durability rule (design, "Persistence and resume"): a record is flushed before anything that
//! depends on it is acknowledged. Every mutating method of [`Store`] flushes before it returns, so a
//! caller may publish or acknowledge as soon as the call succeeds.
//!
//! Test support is not part of the shipped library: the fault switches and the cache reset that
//! tests and benchmarks use (`Store::inject_write_failure`, `Store::fail_evidence_inserts`,
//! `Store::forget_verified_blobs`) exist only with the cargo feature `testing`, which is off by
//! default and enabled only from the `[dev-dependencies]` of the crates whose tests use them.
//!
//! Stored data is never trusted: a value that does not decode is reported as
//! [`StoreError::Corrupt`] naming its tree and key, never a panic.

pub mod blobs;
mod codec;
pub mod error;
pub mod evidence;
#[cfg(feature = "testing")]
mod faults;
mod lines;
mod log;
mod memory;
pub mod objects;
pub mod page;
mod seqs;
mod settings;
pub mod store;
pub mod tasks;
mod trees;
mod windows;

pub use blobs::write_fallback;
pub use error::{EvidenceError, StoreError};
pub use evidence::{BlobProblem, VerifyProblem};
pub use objects::ObjectProblem;
pub use store::{Health, Store};
