//! The nodes of a fleet: each writes a heartbeat to the key-value bucket `agentd_nodes` — its
//! workspace roots, its room and what it runs — every few seconds. A heartbeat older than a lease
//! is a node gone. The heartbeats say which nodes are alive (`daemon.status`), why a queued task
//! waits (no node reaches its workspace, every node that does is full), and whether a node name is
//! already taken when a daemon starts.

use crate::error::ClusterError;
use crate::names::{token, NODES_BUCKET};
use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::Context;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One node's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beat {
    /// The node's name.
    pub node: String,
    /// This run of the daemon (a new one each start): two daemons under one name differ here.
    pub instance: String,
    /// The workspace roots it reaches.
    pub workspaces: Vec<String>,
    /// How many tasks it runs at once.
    pub max_tasks: u64,
    /// How many it runs now.
    pub running: u64,
    /// When it was written, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// The heartbeats bucket.
#[derive(Clone)]
pub struct Nodes {
    store: kv::Store,
}

impl Nodes {
    /// The bucket (made when missing).
    pub async fn open(js: &Context, replicas: usize) -> Result<Nodes, ClusterError> {
        let store = crate::storage::open_bucket(js, NODES_BUCKET, replicas).await?;
        Ok(Nodes { store })
    }

    /// Writes `beat`.
    pub async fn beat(&self, beat: &Beat) -> Result<(), ClusterError> {
        let what = || format!("writing the heartbeat of node {}", beat.node);
        let value =
            serde_json::to_vec(beat).map_err(|source| ClusterError::Corrupt { what: what(), source })?;
        self.store
            .put(token(&beat.node), value.into())
            .await
            .map(drop)
            .map_err(|e| ClusterError::js(what(), e))
    }

    /// Every heartbeat written within `fresh` of `now_ms`, by node name.
    pub async fn live(&self, now_ms: u64, fresh: Duration) -> Result<Vec<Beat>, ClusterError> {
        let what = |e: &dyn std::fmt::Display| ClusterError::js("reading the nodes' heartbeats", e);
        let mut keys = self.store.keys().await.map_err(|e| what(&e))?;
        let mut beats = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| what(&e))?;
            let Some(entry) = self.store.entry(&key).await.map_err(|e| what(&e))? else { continue };
            if entry.operation != Operation::Put {
                continue;
            }
            match serde_json::from_slice::<Beat>(&entry.value) {
                Ok(beat) if is_fresh(beat.at_ms, fresh, now_ms) => beats.push(beat),
                Ok(_) => {}
                Err(e) => tracing::warn!(key, error = %e, "a node's heartbeat does not decode"),
            }
        }
        beats.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(beats)
    }

    /// Refuses `node` when another daemon under that name beat within `fresh` of `now_ms`: a node's
    /// name is unique in the fleet.
    pub async fn claim(
        &self,
        node: &str,
        instance: &str,
        now_ms: u64,
        fresh: Duration,
    ) -> Result<(), ClusterError> {
        let live = self.live(now_ms, fresh).await?;
        match live.into_iter().find(|b| b.node == node && b.instance != instance) {
            Some(other) => Err(ClusterError::NodeTaken { node: node.to_string(), at_ms: other.at_ms }),
            None => Ok(()),
        }
    }

    /// Removes `node`'s heartbeat: it is leaving.
    pub async fn leave(&self, node: &str) -> Result<(), ClusterError> {
        self.store
            .delete(token(node))
            .await
            .map_err(|e| ClusterError::js(format!("removing the heartbeat of node {node}"), e))
    }
}

/// Whether a heartbeat written at `at_ms` is still fresh at `now_ms`: within `fresh` of it. Whatever
/// moment another node wrote (the year 584,942,417, say) is compared, never added up past `u64`.
pub(crate) fn is_fresh(at_ms: u64, fresh: Duration, now_ms: u64) -> bool {
    let fresh_ms = u64::try_from(fresh.as_millis()).unwrap_or(u64::MAX);
    at_ms.saturating_add(fresh_ms) >= now_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_is_fresh_within_its_window_and_a_moment_past_u64_never_overflows() {
        let lease = Duration::from_secs(3);
        assert!(is_fresh(10_000, lease, 13_000));
        assert!(!is_fresh(10_000, lease, 13_001));
        assert!(is_fresh(u64::MAX, lease, 13_000));
        assert!(is_fresh(0, Duration::MAX, u64::MAX));
    }
}
