//! [`JetStreamStorage`]: the engine's storage seam over NATS JetStream. It passes the seam's contract
//! (`agentd_engine::contract::check`) against a real `nats-server` (`runtime/cluster/tests/storage.rs`).
//!
//! One concept a module:
//! - `handle`: the storage itself — its handles on NATS, its writer's state, the runtime its calls
//!   wait on, and how a fleet failure reads as the seam's [`StorageError`](agentd_engine::storage::StorageError);
//! - `config`: where NATS is and how to log in ([`NatsConfig`], [`NatsAuth`]);
//! - `open`: the streams, buckets and object store made (or found) at connect;
//! - `fencing`: the lease-bounded writer — which tasks this writer may still write, and until when;
//! - `history`: a task's log, appended under that writer's lease and read back;
//! - `buckets`: the key-value records (tasks, settings, windows) and the ends kept for later;
//! - `evidence`: evidence records and their bytes;
//! - `memory`: the memory stream of notes and their changes;
//! - `seam`: [`Storage`](agentd_engine::storage::Storage) itself, each call made of the above.

mod buckets;
mod config;
mod evidence;
mod fencing;
mod handle;
mod history;
mod memory;
mod open;
mod seam;

pub use config::{NatsAuth, NatsConfig};
pub use handle::JetStreamStorage;
pub(crate) use open::open_bucket;
