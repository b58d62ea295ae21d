//! [`JetStreamStorage`]: the engine's storage seam over NATS JetStream. It passes the seam's contract
//! (`agentd_engine::contract::check`) against a real `nats-server` (`runtime/cluster/tests/storage.rs`).
//!
//! This module owns the storage itself — its handles on NATS, its writer's state, the runtime its
//! calls wait on, and how a fleet failure reads as the seam's [`StorageError`]. The rest is one
//! concept a module:
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
mod history;
mod memory;
mod open;
mod seam;

pub use config::{NatsAuth, NatsConfig};
pub(crate) use open::open_bucket;

use crate::bridge::Bridge;
use crate::error::ClusterError;
use crate::log::Head;
use agentd_engine::storage::{End, StorageError};
use async_nats::jetstream::kv;
use async_nats::jetstream::object_store::ObjectStore;
use async_nats::jetstream::stream::Stream;
use async_nats::jetstream::Context;
use open::open;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The handles: the history stream, the buckets, the object store and the memory stream.
#[derive(Clone)]
struct Handles {
    js: Context,
    log: Stream,
    tasks: kv::Store,
    settings: kv::Store,
    windows: kv::Store,
    evidence: kv::Store,
    blobs: ObjectStore,
    memory: Stream,
}

/// The engine's storage on NATS JetStream. See the crate's documentation for what lives where.
pub struct JetStreamStorage {
    bridge: Bridge,
    handles: Handles,
    /// Each task's log head as this writer last saw it (appends of one task are serialised here).
    heads: Mutex<HashMap<String, Head>>,
    /// Ends the storage could not take, kept until it can (the seam's `keep_end`).
    ends: Mutex<HashMap<String, End>>,
    /// Serialises this writer's memory changes (JetStream orders them across writers).
    memory_writes: Mutex<()>,
    /// The lease epoch this writer appends each task's log with ([`JetStreamStorage::fence`]; 0
    /// without a lease).
    epochs: Mutex<HashMap<String, u64>>,
    /// Tasks this writer lost ([`JetStreamStorage::abandon`]): it writes nothing of them again.
    abandoned: Mutex<HashSet<String>>,
    /// Until when this writer may write each task it holds under a lease, in milliseconds since the
    /// Unix epoch ([`JetStreamStorage::hold_until`]): its lease's end, less a sixth of the lease.
    writable_until: Arc<Mutex<HashMap<String, u64>>>,
}

/// A JetStream failure by its kind, as the engine's seam says it: the one place the fleet's errors
/// are read.
fn storage_error(e: ClusterError) -> StorageError {
    match e {
        e @ ClusterError::Conflict { .. } => StorageError::conflict(e),
        e @ (ClusterError::Fenced { .. } | ClusterError::LeaseLost { .. }) => StorageError::fenced(e),
        e if e.is_passing() => StorageError::unavailable(e),
        e @ (ClusterError::Connect { .. } | ClusterError::Stopped) => StorageError::unavailable(e),
        e => StorageError::failed(e),
    }
}

impl JetStreamStorage {
    /// Connects to NATS and makes sure agentd's streams, buckets and object store exist.
    pub fn connect(config: &NatsConfig) -> Result<JetStreamStorage, ClusterError> {
        let bridge = Bridge::new()?;
        let config = config.clone();
        let handles = bridge.run(async move { open(&config).await })??;
        Ok(JetStreamStorage {
            bridge,
            handles,
            heads: Mutex::default(),
            ends: Mutex::default(),
            memory_writes: Mutex::default(),
            epochs: Mutex::default(),
            abandoned: Mutex::default(),
            writable_until: Arc::default(),
        })
    }

    /// The NATS connection, for the fleet's other parts (the control subjects, connection state).
    pub fn client(&self) -> async_nats::Client {
        self.handles.js.client()
    }

    /// Whether the connection to NATS is up now (the client reconnects by itself when it is not).
    pub fn connected(&self) -> bool {
        self.client().connection_state() == async_nats::connection::State::Connected
    }

    /// The connection's JetStream context, for the fleet's other parts (leases, the queue).
    pub fn jetstream(&self) -> &Context {
        &self.handles.js
    }

    /// Runs `future` on the storage's client runtime and waits for it here.
    pub fn block_on<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = Result<T, ClusterError>> + Send + 'static,
    ) -> Result<T, ClusterError> {
        self.bridge.run(future)?
    }

    fn run<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = Result<T, ClusterError>> + Send + 'static,
    ) -> Result<T, StorageError> {
        self.bridge.run(future).and_then(|r| r).map_err(storage_error)
    }
}

fn encode(what: &str, value: &impl Serialize) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(value).map_err(|source| ClusterError::Corrupt { what: what.to_string(), source })
}
