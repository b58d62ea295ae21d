//! The daemon as a node of a fleet (`[cluster]`, `docs/cluster.md`): its storage is the fleet's
//! (`agentd_cluster::JetStreamStorage` behind [`DaemonStorage`]), its tasks come from the fleet's one
//! queue, and every event any node appends reaches its subscribers.
//!
//! What lives here is the daemon's side of it: connecting with the configured credentials
//! ([`connect`]), whether this node reaches a workspace ([`reaches`]), why a queued task waits
//! ([`queued_because`]), the live events ([`follow_events`]). The supervisor
//! takes jobs, holds leases and hands tasks over (`crate::supervisor`); every JetStream detail is
//! `agentd-cluster`'s.

use crate::config::ClusterConfig;
use crate::storage::DaemonStorage;
use agentd_cluster::fleet::{Fleet, Joining, NodeConfig};
use agentd_cluster::nodes::Beat;
use agentd_cluster::storage::{NatsAuth, NatsConfig};
use agentd_cluster::{ClusterError, JetStreamStorage};
use agentd_engine::clock::clock;
use agentd_engine::storage::StorageError;
use agentd_evidence::Health;
use agentd_protocol::evidence::{Problem, CHECKPOINT_OBJECT};
use agentd_protocol::rpc::{ClusterStatus, NodeStatus, StreamStatus};
use agentd_protocol::{Event, EvidenceMeta, TaskMeta};
use futures_util::StreamExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// Connects this node to the fleet `config` describes; `env` reads the token and password variables.
/// NATS and JetStream not ready yet is waited out for `[cluster] start_timeout`, each wait told to
/// `waiting`.
pub fn connect(
    config: &ClusterConfig,
    env: impl Fn(&str) -> Option<String>,
    waiting: impl Fn(&Joining),
) -> Result<Fleet, ClusterError> {
    let secret = |name: &Option<String>| name.as_deref().and_then(&env);
    let auth = NatsAuth {
        credentials: config.credentials.clone(),
        token: secret(&config.token_env),
        user: config.user.clone().zip(secret(&config.password_env)),
        tls_ca: config.tls_ca.clone(),
        tls_client: config.tls_client.clone(),
        tls_required: config.tls_required,
    };
    Fleet::connect(
        NodeConfig {
            nats: NatsConfig {
                urls: config.nats.clone(),
                replicas: config.replicas,
                auth,
                name: Some(format!("agentd {}", config.node)),
            },
            node: config.node.clone(),
            lease: config.lease,
            start_within: config.start_timeout,
        },
        waiting,
    )
}

/// The tasks this node stopped because the fleet could not be written — its lease could not be
/// renewed, JetStream without a quorum — each `waiting` (in `task.status` and `task.list` on this
/// node, whose record still says `running`: it cannot be changed meanwhile) until a node takes it
/// again, which says why in its `task_resumed`.
#[derive(Default)]
pub struct Stalls {
    stalled: parking_lot::Mutex<std::collections::HashMap<String, Stall>>,
}

/// A task stopped for the fleet's trouble: the task as last read, why and since when.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// The task as this node last read it (its record may be unreadable meanwhile).
    pub meta: TaskMeta,
    /// Why it stopped.
    pub why: String,
    /// Since when, RFC 3339.
    pub since: String,
}

impl Stall {
    /// What `task.status` says while the task waits: why, and what happens next.
    pub fn waiting_because(&self) -> String {
        format!(
            "stopped on node {} at {}: {}; it goes on when the fleet can be written again (a node takes it over)",
            self.meta.node.as_deref().unwrap_or("?"),
            self.since,
            self.why
        )
    }
}

impl Stalls {
    /// `meta`'s task stopped here, for `why`.
    pub fn stall(&self, meta: TaskMeta, why: &str) {
        let stall = Stall { why: why.to_string(), since: agentd_engine::clock::now_rfc3339(), meta };
        self.stalled.lock().insert(stall.meta.task_id.clone(), stall);
    }

    /// `task_id`'s stall, if it is stalled here.
    pub fn get(&self, task_id: &str) -> Option<Stall> {
        self.stalled.lock().get(task_id).cloned()
    }

    /// `task_id` is no longer stalled here (taken again, here or by another node); its stall, if any.
    pub fn clear(&self, task_id: &str) -> Option<Stall> {
        self.stalled.lock().remove(task_id)
    }
}

/// Whether this node reaches `workspace`: it lies under one of the configured roots and is a
/// directory here.
pub fn reaches(config: &ClusterConfig, workspace: &str) -> bool {
    let path = Path::new(workspace);
    config.workspaces.iter().any(|root| path.starts_with(root)) && path.is_dir()
}

/// Why a task queued with `workspace` has not been taken, judged from the live nodes' heartbeats;
/// `None` when some node reaches it and has room (it will be taken shortly).
pub fn queued_because(workspace: &str, live: &[Beat]) -> Option<String> {
    if live.is_empty() {
        return Some("no node of the fleet is alive".to_string());
    }
    let path = Path::new(workspace);
    let reaching: Vec<&Beat> =
        live.iter().filter(|b| b.workspaces.iter().any(|root| path.starts_with(root))).collect();
    if reaching.is_empty() {
        return Some(format!("no live node reaches {workspace}"));
    }
    if reaching.iter().all(|b| b.running >= b.max_tasks) {
        let names: Vec<&str> = reaching.iter().map(|b| b.node.as_str()).collect();
        return Some(format!("every node that reaches {workspace} is full ({})", names.join(", ")));
    }
    None
}

/// This node's workspace roots, as its heartbeat shows them.
pub fn roots(config: &ClusterConfig) -> Vec<String> {
    config.workspaces.iter().map(|p| p.display().to_string()).collect()
}

/// Feeds `live` (what `watch` follows) with every event any node appends, for the daemon's life;
/// followed again whenever the connection drops the feed.
pub fn follow_events(fleet: Arc<Fleet>, live: broadcast::Sender<Event>) {
    tokio::spawn(async move {
        loop {
            match fleet.events().await {
                Ok(events) => {
                    let mut events = std::pin::pin!(events);
                    while let Some(event) = events.next().await {
                        // No receiver is not an error: nobody is watching.
                        let _ = live.send(event);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot follow the fleet's events; trying again"),
            }
            clock().sleep(Duration::from_secs(1)).await;
        }
    });
}

impl DaemonStorage for JetStreamStorage {
    fn create_task(&self, meta: &TaskMeta) -> Result<(), StorageError> {
        JetStreamStorage::create_task(self, meta)
    }

    fn evidence_list(&self, task_id: Option<&str>) -> Result<Vec<EvidenceMeta>, StorageError> {
        JetStreamStorage::evidence_list(self, task_id)
    }

    fn verify_evidence(&self) -> Result<Vec<Problem>, StorageError> {
        let mut problems: Vec<Problem> = JetStreamStorage::verify_evidence(self)?
            .into_iter()
            .map(|(meta, problem)| Problem {
                path: format!("nats object store agentd_blobs/{}", meta.sha256),
                id: meta.id,
                sha256: meta.sha256,
                problem,
            })
            .collect();
        // Every other object (a checkpoint's), each once.
        for (sha256, problem) in JetStreamStorage::verify_objects(self)? {
            if problems.iter().any(|p| p.sha256 == sha256) {
                continue;
            }
            problems.push(Problem {
                path: format!("nats object store agentd_blobs/{sha256}"),
                id: CHECKPOINT_OBJECT.to_string(),
                problem: format!("checkpoint object {sha256} {problem}"),
                sha256,
            });
        }
        Ok(problems)
    }

    fn health(&self) -> Health {
        let connected = self.connected();
        Health {
            ok: connected,
            error: (!connected).then(|| "not connected to NATS; the client is reconnecting".to_string()),
            since: None,
        }
    }

    fn heal(&self) -> bool {
        // The client reconnects by itself; there is nothing to reopen.
        DaemonStorage::health(self).ok
    }

    fn flush(&self) -> Result<(), StorageError> {
        // Every write is acknowledged by JetStream before it returns: nothing waits to be flushed.
        Ok(())
    }
}

/// The fleet as this node sees it, for `daemon.status`; what could not be read is its `error`.
pub async fn status(fleet: &Fleet) -> ClusterStatus {
    let clock = clock();
    let read = clock.timeout(Duration::from_secs(3), async {
        Ok::<_, ClusterError>((fleet.live_nodes().await?, fleet.streams().await?))
    });
    let (nodes, streams, error) = match read.await {
        Ok(Ok((nodes, streams))) => (nodes, streams, None),
        Ok(Err(e)) => (Vec::new(), Vec::new(), Some(e.to_string())),
        Err(_) => (Vec::new(), Vec::new(), Some("NATS did not answer within 3s".to_string())),
    };
    let nodes = nodes
        .into_iter()
        .map(|b| NodeStatus {
            seen_at: agentd_engine::clock::rfc3339(agentd_engine::clock::later(
                std::time::UNIX_EPOCH,
                Duration::from_millis(b.at_ms),
            )),
            node: b.node,
            running: b.running,
            max_tasks: b.max_tasks,
            workspaces: b.workspaces,
        })
        .collect();
    let streams = streams
        .into_iter()
        .map(|s| StreamStatus {
            name: s.name,
            replicas: s.replicas,
            leader: s.leader,
            current: s.current,
            lagging: s.lagging,
        })
        .collect();
    ClusterStatus {
        node: fleet.node().to_string(),
        servers: fleet.servers().to_vec(),
        connected: fleet.connected(),
        nodes,
        streams,
        error,
        starting: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(node: &str, roots: &[&str], running: u64, max_tasks: u64) -> Beat {
        Beat {
            node: node.into(),
            instance: "i".into(),
            workspaces: roots.iter().map(|r| r.to_string()).collect(),
            max_tasks,
            running,
            at_ms: 0,
        }
    }

    #[test]
    fn a_queued_task_says_which_of_nobody_alive_nobody_reaching_and_everybody_full_holds_it() {
        assert_eq!(queued_because("/srv/w/t", &[]).unwrap(), "no node of the fleet is alive");
        let far = [beat("a", &["/home"], 0, 4)];
        assert_eq!(queued_because("/srv/w/t", &far).unwrap(), "no live node reaches /srv/w/t");
        // A root is a whole path component: /srv/work does not hold /srv/workshop.
        let prefix = [beat("a", &["/srv/w"], 0, 4)];
        assert_eq!(queued_because("/srv/wx", &prefix).unwrap(), "no live node reaches /srv/wx");
        let full = [beat("a", &["/srv"], 4, 4), beat("b", &["/"], 2, 2), beat("c", &["/home"], 0, 9)];
        assert_eq!(queued_because("/srv/w", &full).unwrap(), "every node that reaches /srv/w is full (a, b)");
        let room = [beat("a", &["/srv"], 4, 4), beat("b", &["/srv/w"], 1, 2)];
        assert_eq!(queued_because("/srv/w/t", &room), None, "b will take it");
    }
}
