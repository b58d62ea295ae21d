//! [`JetStreamStorage`] itself: its handles on NATS, its writer's state, the runtime its calls wait
//! on, and how a fleet failure reads as the seam's [`StorageError`] — what every other part of
//! `storage` builds on.

use super::config::NatsConfig;
use super::open::{open, Handles};
use crate::bridge::Bridge;
use crate::error::ClusterError;
use crate::log::Head;
use agentd_engine::storage::{End, StorageError};
use async_nats::jetstream::Context;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The engine's storage on NATS JetStream. See the crate's documentation for what lives where.
pub struct JetStreamStorage {
    pub(super) bridge: Bridge,
    pub(super) handles: Handles,
    /// Each task's log head as this writer last saw it (appends of one task are serialised here).
    pub(super) heads: Mutex<HashMap<String, Head>>,
    /// Ends the storage could not take, kept until it can (the seam's `keep_end`).
    pub(super) ends: Mutex<HashMap<String, End>>,
    /// Serialises this writer's memory changes (JetStream orders them across writers).
    pub(super) memory_writes: Mutex<()>,
    /// The lease epoch this writer appends each task's log with ([`JetStreamStorage::fence`]; 0
    /// without a lease).
    pub(super) epochs: Mutex<HashMap<String, u64>>,
    /// Tasks this writer lost ([`JetStreamStorage::abandon`]): it writes nothing of them again.
    pub(super) abandoned: Mutex<HashSet<String>>,
    /// Until when this writer may write each task it holds under a lease, in milliseconds since the
    /// Unix epoch ([`JetStreamStorage::hold_until`]): its lease's end, less a sixth of the lease.
    pub(super) writable_until: Arc<Mutex<HashMap<String, u64>>>,
}

/// A JetStream failure by its kind, as the engine's seam says it: the one place the fleet's errors
/// are read.
pub(super) fn storage_error(e: ClusterError) -> StorageError {
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

    pub(super) fn run<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = Result<T, ClusterError>> + Send + 'static,
    ) -> Result<T, StorageError> {
        self.bridge.run(future).and_then(|r| r).map_err(storage_error)
    }
}

pub(super) fn encode(what: &str, value: &impl Serialize) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(value).map_err(|source| ClusterError::Corrupt { what: what.to_string(), source })
}
