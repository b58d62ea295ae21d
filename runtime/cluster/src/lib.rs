//! agentd's storage on NATS JetStream: the fleet's implementation of the engine's storage seam
//! ([`agentd_engine::storage::Storage`]), beside the daemon's sled one.
//!
//! What lives where (the names are [`names`]'):
//! - **The history** — every record and event of a task, one message each on the task's subject of
//!   the replicated stream `AGENTD_LOG` (`agentd.log.<task>`). The publish acknowledgement is the
//!   durability point, as the sled flush is on one machine; every append names the stream sequence
//!   it expects last on the subject, so a task's log never gets a gap or a duplicate whichever
//!   writer fails or races ([`log`]).
//! - **Tasks, settings, windows, evidence records** — key-value buckets, a task's record updated
//!   with compare-and-set on its revision.
//! - **Evidence bytes** — the object store, one object per sha256.
//! - **Memory** — the stream `AGENTD_MEMORY`: each change a message carrying the note as it became,
//!   appended in order; the notes are read back as the last state of each.
//! - **Leases** — a key-value entry per running task, taken and renewed by compare-and-set; its epoch
//!   is on every message its holder appends, and a log whose newest epoch is newer than a writer's
//!   refuses that writer ([`lease`], [`log`]): a node that lost a task cannot write to it again.
//!
//! - **The fleet's coordination** — one work queue of jobs (`AGENTD_QUEUE`, [`queue`]), the nodes'
//!   heartbeats ([`nodes`]), the live tail of every event ([`tail`]) and node-to-node requests
//!   ([`control`]).
//!
//! The seam is synchronous by design (an implementation blocks in place on its acknowledgement); the
//! client is async, so it runs on a small runtime of this crate's own and a call waits for its
//! answer on the caller's thread ([`bridge`]).
//!
//! *Must not*: replicate, order or lock anything itself — JetStream does; know about the engine's
//! decisions — it stores what the engine hands it.

pub mod bridge;
pub mod control;
pub mod error;
pub mod fleet;
pub mod lease;
pub mod log;
pub mod names;
pub mod nodes;
pub mod passing;
pub mod queue;
pub mod storage;
pub mod tail;

pub use error::ClusterError;
pub use storage::JetStreamStorage;
