//! Workspace checkpoints in the engine: taken around each writing call, kept behind the storage
//! seam, read back by `task.diff` and `task.revert`.
//!
//! The mechanics (a tree of content-addressed objects, what changed between two, a file put back)
//! are `agentd_agents::checkpoints`; the decisions over the recorded changes (what a diff composes,
//! what a revert puts back) are `agentd_policies::changes`. Here they meet the task:
//!
//! - [`Checkpoints`], one per task run: the snapshotter (which remembers what it hashed) and the
//!   task's byte budget (`[checkpoints] max_bytes`). An agent takes a checkpoint of its workspace
//!   (or its working copy) before a writing call — named on the call's `tool_called` — and after it;
//!   what differs is the call's `files_changed` (`crate::agent`'s `checkpoints` module).
//! - [`StoredObjects`]: the objects, through [`Storage`] (sled and blob files, or the fleet's object
//!   store), so a checkpoint is as durable as the log that names it: objects are synced before the
//!   event that names them is appended.
//! - [`diff`], [`revert`] and [`reconcile`] (after a stop, the change of a call that was cut short).

mod diff;
mod error;
mod reconcile;
mod revert;
mod steps;
mod store;

pub use diff::diff;
pub use error::ChangesError;
pub use reconcile::reconcile;
pub use revert::revert;
pub use steps::{all_events, step_of};
pub use store::{change, take, Checkpoints, Failure, StoredObjects, DEFAULT_MAX_BYTES};
