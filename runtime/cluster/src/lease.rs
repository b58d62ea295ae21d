//! Leases on running tasks: a key-value entry per task in `agentd_leases`, taken and renewed only
//! with compare-and-set on its revision, so two nodes can never both believe they hold it.
//!
//! A lease names its holder, an **epoch** (one more than the last, each time it changes hands) and
//! when it lapses unless renewed. The holder appends the task's log under that epoch
//! ([`crate::storage::JetStreamStorage::fence`]); once another node takes the lapsed lease and
//! appends under the next one, the old holder's appends are refused ([`crate::log`]). A holder that
//! cannot renew must stop the task itself before [`Lease::until_ms`]. Lapse is judged on the nodes'
//! clocks (the daemon's clock, `agentd_engine::clock`): they must agree to well within a lease.

use crate::error::ClusterError;
use crate::names::{token, LEASES_BUCKET};
use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, UpdateErrorKind};
use async_nats::jetstream::Context;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A lease as the bucket holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The node holding it; `None` once released.
    pub holder: Option<String>,
    /// How many times it has changed hands.
    pub epoch: u64,
    /// When it lapses unless renewed, in milliseconds since the Unix epoch.
    pub until_ms: u64,
}

/// A lease this node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The task.
    pub task_id: String,
    /// The node (this one).
    pub node: String,
    /// Its epoch: what the task's log is appended under.
    pub epoch: u64,
    /// When it lapses unless renewed, in milliseconds since the Unix epoch.
    pub until_ms: u64,
    /// The entry's revision this node last wrote.
    revision: u64,
}

/// The leases bucket.
#[derive(Clone)]
pub struct Leases {
    store: kv::Store,
    ttl: Duration,
}

/// Now, by the daemon's clock, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    agentd_engine::clock::now_unix_ms()
}

impl Leases {
    /// The bucket (made when missing), leases lasting `ttl` without renewal.
    pub async fn open(js: &Context, replicas: usize, ttl: Duration) -> Result<Leases, ClusterError> {
        let store = crate::storage::open_bucket(js, LEASES_BUCKET, replicas).await?;
        Ok(Leases { store, ttl })
    }

    /// The lease on `task_id` as it stands (`None`: never taken).
    pub async fn current(&self, task_id: &str) -> Result<Option<LeaseRecord>, ClusterError> {
        Ok(self.read(task_id).await?.map(|(record, _)| record))
    }

    /// The lease on `task_id` as it stands, with the entry's revision.
    async fn read(&self, task_id: &str) -> Result<Option<(LeaseRecord, u64)>, ClusterError> {
        let entry = self
            .store
            .entry(token(task_id))
            .await
            .map_err(|e| ClusterError::js(format!("reading the lease on task {task_id}"), e))?;
        match entry.filter(|e| e.operation == Operation::Put) {
            None => Ok(None),
            Some(e) => serde_json::from_slice(&e.value).map(|r| Some((r, e.revision))).map_err(|source| {
                ClusterError::Corrupt { what: format!("the lease on task {task_id}"), source }
            }),
        }
    }

    /// Takes the lease on `task_id` for `node`: when nobody holds it, it was released, or it lapsed.
    /// [`ClusterError::Held`] while another node's lease runs; a race lost to another taker is that
    /// too.
    pub async fn acquire(&self, task_id: &str, node: &str) -> Result<Lease, ClusterError> {
        let now = now_ms();
        let until_ms = now + self.ttl.as_millis() as u64;
        let current = self.read(task_id).await?;
        let epoch = match &current {
            Some((r, _)) if r.holder.as_deref().is_some_and(|h| h != node) && r.until_ms > now => {
                return Err(ClusterError::Held {
                    task_id: task_id.to_string(),
                    holder: r.holder.clone().unwrap_or_default(),
                    until_ms: r.until_ms,
                })
            }
            Some((r, _)) => r.epoch + 1,
            None => 1,
        };
        let record = LeaseRecord { holder: Some(node.to_string()), epoch, until_ms };
        let value = serde_json::to_vec(&record).map_err(|source| ClusterError::Corrupt {
            what: format!("the lease on task {task_id}"),
            source,
        })?;
        let lost =
            || ClusterError::Held { task_id: task_id.to_string(), holder: "another node".into(), until_ms };
        let revision = match current {
            None => match self.store.create(token(task_id), value.into()).await {
                Ok(revision) => revision,
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => return Err(lost()),
                Err(e) => return Err(ClusterError::js(format!("taking the lease on task {task_id}"), e)),
            },
            Some((_, revision)) => match self.store.update(token(task_id), value.into(), revision).await {
                Ok(revision) => revision,
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => return Err(lost()),
                Err(e) => return Err(ClusterError::js(format!("taking the lease on task {task_id}"), e)),
            },
        };
        Ok(Lease { task_id: task_id.to_string(), node: node.to_string(), epoch, until_ms, revision })
    }

    /// Renews `lease` for another `ttl`; [`ClusterError::LeaseLost`] when it changed hands (or was
    /// released) since this node last wrote it.
    pub async fn renew(&self, lease: &Lease) -> Result<Lease, ClusterError> {
        let until_ms = now_ms() + self.ttl.as_millis() as u64;
        self.write(lease, Some(lease.node.clone()), until_ms).await
    }

    /// Gives `lease` up: the task may be taken at once by another node.
    pub async fn release(&self, lease: &Lease) -> Result<(), ClusterError> {
        self.write(lease, None, now_ms()).await.map(drop)
    }

    async fn write(
        &self,
        lease: &Lease,
        holder: Option<String>,
        until_ms: u64,
    ) -> Result<Lease, ClusterError> {
        let task_id = &lease.task_id;
        let record = LeaseRecord { holder, epoch: lease.epoch, until_ms };
        let value = serde_json::to_vec(&record).map_err(|source| ClusterError::Corrupt {
            what: format!("the lease on task {task_id}"),
            source,
        })?;
        match self.store.update(token(task_id), value.into(), lease.revision).await {
            Ok(revision) => Ok(Lease { until_ms, revision, ..lease.clone() }),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                Err(ClusterError::LeaseLost { task_id: task_id.clone(), epoch: lease.epoch })
            }
            Err(e) => Err(ClusterError::js(format!("renewing the lease on task {task_id}"), e)),
        }
    }
}
