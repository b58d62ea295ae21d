//! [`Fleet`]: one node's handle on the fleet — the storage, the leases, the queue, the heartbeats,
//! the live events and the requests between nodes, over one NATS connection. The daemon drives it;
//! every JetStream detail stays in this crate.

use crate::control::{self, CancelAnswer};
use crate::error::ClusterError;
use crate::lease::{now_ms, Lease, LeaseRecord, Leases};
use crate::names::{LOG_STREAM, MEMORY_STREAM, QUEUE_STREAM};
use crate::nodes::{is_fresh, Beat, Nodes};
use crate::queue::{Job, Queue, Taken};
use crate::storage::{JetStreamStorage, NatsConfig};
use agentd_engine::clock::clock;
use agentd_protocol::Event;
use futures_util::Stream;
use std::sync::Arc;
use std::time::Duration;

/// What a node is in the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Where NATS is and how to log in.
    pub nats: NatsConfig,
    /// This node's name, unique in the fleet.
    pub node: String,
    /// How long a lease (and a queued job's acknowledgement wait) lasts without renewal.
    pub lease: Duration,
    /// How long joining may wait for NATS and JetStream to be ready (servers still starting, a
    /// meta leader or a stream's leader being elected, other daemons making the same streams at
    /// the same moment) before it gives up: [`Fleet::connect`] tries again until then.
    pub start_within: Duration,
}

/// Why joining the fleet is still under way: what the last attempt met, and when the next one is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joining {
    /// Attempts made so far.
    pub attempt: u32,
    /// What the last one met.
    pub why: String,
    /// When the next one is made.
    pub next_in: Duration,
}

impl std::fmt::Display for Joining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (attempt {}; again in {} ms)", self.why, self.attempt, self.next_in.as_millis())
    }
}

/// One of agentd's streams and its replicas' health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHealth {
    /// The stream.
    pub name: String,
    /// Replicas configured.
    pub replicas: u64,
    /// The server leading it (clustered servers only).
    pub leader: Option<String>,
    /// Replicas besides the leader that are current.
    pub current: u64,
    /// Replicas besides the leader offline or behind.
    pub lagging: Vec<String>,
}

/// One node's handle on the fleet.
pub struct Fleet {
    /// The engine's storage, on JetStream.
    pub storage: Arc<JetStreamStorage>,
    leases: Leases,
    queue: Queue,
    nodes: Nodes,
    config: NodeConfig,
    instance: String,
}

impl Fleet {
    /// Connects, makes sure every stream, bucket and the queue exist, and claims the node's name. A
    /// name whose heartbeat is fresh (a daemon that just died, or another one using it) is waited out
    /// for one lease; still fresh then, it is [`ClusterError::NodeTaken`].
    ///
    /// Trouble that passes — no server answering yet, JetStream not ready, a leader being elected,
    /// a cluster still forming, another daemon making the same stream a moment before
    /// ([`ClusterError::is_unreachable`], [`ClusterError::is_passing`], [`ClusterError::is_forming`],
    /// [`ClusterError::is_converging`]) — is tried again, backing off from 250 ms to 5 s, until
    /// [`NodeConfig::start_within`]; `waiting` hears each wait. Anything else (a refused login, a bad
    /// URL) fails at once.
    pub fn connect(config: NodeConfig, waiting: impl Fn(&Joining)) -> Result<Fleet, ClusterError> {
        let started = agentd_engine::clock::monotonic();
        let mut attempt = 0u32;
        let mut backoff = Duration::from_millis(250);
        loop {
            attempt += 1;
            match Fleet::join(config.clone()) {
                Ok(fleet) => return Ok(fleet),
                Err(e)
                    if (e.is_passing() || e.is_converging() || e.is_unreachable() || e.is_forming())
                        && started.elapsed() + backoff < config.start_within =>
                {
                    let joining = Joining { attempt, why: e.to_string(), next_in: backoff };
                    tracing::info!(node = %config.node, %joining, "joining the fleet: not yet");
                    waiting(&joining);
                    // Before the daemon runs: real time, in the clock's one synchronous wait.
                    agentd_engine::clock::pause_thread(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt at [`Fleet::connect`].
    fn join(config: NodeConfig) -> Result<Fleet, ClusterError> {
        let storage = Arc::new(JetStreamStorage::connect(&config.nats)?);
        let (js, replicas, lease) = (storage.jetstream().clone(), config.nats.replicas, config.lease);
        let (leases, queue, nodes) = storage.block_on(async move {
            Ok((
                Leases::open(&js, replicas, lease).await?,
                Queue::open(&js, replicas, lease).await?,
                Nodes::open(&js, replicas).await?,
            ))
        })?;
        let instance = uuid::Uuid::now_v7().to_string();
        let fleet = Fleet { storage, leases, queue, nodes, config, instance };
        let (nodes, node, instance) =
            (fleet.nodes.clone(), fleet.config.node.clone(), fleet.instance.clone());
        fleet.storage.block_on(async move {
            let lease_ms = lease.as_millis() as u64;
            let deadline = now_ms() + lease_ms + 1_000;
            loop {
                match nodes.claim(&node, &instance, now_ms(), lease).await {
                    // Fresh when the claim began, lapsed by the time it answered (a read that
                    // waited out a NATS server's restart): asked again, not refused.
                    Err(ClusterError::NodeTaken { at_ms, .. }) if !is_fresh(at_ms, lease, now_ms()) => {}
                    Err(ClusterError::NodeTaken { .. }) if now_ms() < deadline => {
                        tracing::info!(node, "another daemon's heartbeat under this node name is fresh; waiting for it to lapse");
                        clock().sleep(Duration::from_millis(500)).await;
                    }
                    claimed => return claimed,
                }
            }
        })?;
        Ok(fleet)
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// How long a lease lasts.
    pub fn lease(&self) -> Duration {
        self.config.lease
    }

    /// The NATS servers configured.
    pub fn servers(&self) -> &[String] {
        &self.config.nats.urls
    }

    /// Whether the connection is up now.
    pub fn connected(&self) -> bool {
        self.storage.connected()
    }

    /// Queues `job` for whichever node takes it.
    pub async fn push(&self, job: &Job) -> Result<(), ClusterError> {
        self.queue.push(job).await
    }

    /// The next job for this node, waiting at most `wait`.
    pub async fn next_job(&self, wait: Duration) -> Result<Option<Taken>, ClusterError> {
        self.queue.next(wait).await
    }

    /// Takes the lease on `task_id` and appends its log under it from now on.
    pub async fn acquire(&self, task_id: &str) -> Result<Lease, ClusterError> {
        let lease = self.leases.acquire(task_id, &self.config.node).await?;
        self.storage.fence(task_id, lease.epoch);
        self.storage.hold_until(task_id, lease.until_ms, self.config.lease);
        Ok(lease)
    }

    /// Renews `lease`: the task is written here until the renewed one nears its end.
    pub async fn renew(&self, lease: &Lease) -> Result<Lease, ClusterError> {
        let renewed = self.leases.renew(lease).await?;
        self.storage.hold_until(&renewed.task_id, renewed.until_ms, self.config.lease);
        Ok(renewed)
    }

    /// Gives `lease` up: the task is no longer written here under it.
    pub async fn release(&self, lease: &Lease) -> Result<(), ClusterError> {
        self.storage.let_go(&lease.task_id);
        self.leases.release(lease).await
    }

    /// This node lost `task_id`: it writes nothing of it again until it takes the lease anew.
    pub fn abandon(&self, task_id: &str) {
        self.storage.abandon(task_id);
    }

    /// The lease on `task_id` as it stands.
    pub async fn lease_of(&self, task_id: &str) -> Result<Option<LeaseRecord>, ClusterError> {
        self.leases.current(task_id).await
    }

    /// Writes this node's heartbeat.
    pub async fn beat(
        &self,
        workspaces: Vec<String>,
        max_tasks: u64,
        running: u64,
    ) -> Result<(), ClusterError> {
        let beat = Beat {
            node: self.config.node.clone(),
            instance: self.instance.clone(),
            workspaces,
            max_tasks,
            running,
            at_ms: now_ms(),
        };
        self.nodes.beat(&beat).await
    }

    /// The live nodes: a heartbeat within one lease.
    pub async fn live_nodes(&self) -> Result<Vec<Beat>, ClusterError> {
        self.nodes.live(now_ms(), self.config.lease).await
    }

    /// Removes this node's heartbeat: it is stopping.
    pub async fn leave(&self) -> Result<(), ClusterError> {
        self.nodes.leave(&self.config.node).await
    }

    /// Every event any node appends from now on.
    pub async fn events(&self) -> Result<impl Stream<Item = Event>, ClusterError> {
        crate::tail::events(self.storage.jetstream()).await
    }

    /// Answers the fleet's requests to cancel a task on this node with `cancel`'s answer.
    pub async fn serve_cancels<F, Fut>(&self, cancel: F) -> Result<(), ClusterError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = CancelAnswer>,
    {
        control::serve_cancels(&self.storage.client(), &self.config.node, cancel).await
    }

    /// Asks `node` to cancel `task_id`.
    pub async fn ask_cancel(
        &self,
        node: &str,
        task_id: &str,
        wait: Duration,
    ) -> Result<CancelAnswer, ClusterError> {
        control::ask_cancel(&self.storage.client(), node, task_id, wait).await
    }

    /// agentd's streams with their replicas' health.
    pub async fn streams(&self) -> Result<Vec<StreamHealth>, ClusterError> {
        let js = self.storage.jetstream();
        let mut out = Vec::new();
        for name in [LOG_STREAM, MEMORY_STREAM, QUEUE_STREAM] {
            let mut stream = js
                .get_stream(name)
                .await
                .map_err(|e| ClusterError::js(format!("reading stream {name}"), e))?;
            let info =
                stream.info().await.map_err(|e| ClusterError::js(format!("reading stream {name}"), e))?;
            let cluster = info.cluster.clone();
            let replicas = cluster.as_ref().map_or(&[][..], |c| &c.replicas[..]);
            out.push(StreamHealth {
                name: name.to_string(),
                replicas: info.config.num_replicas as u64,
                leader: cluster.as_ref().and_then(|c| c.leader.clone()),
                current: replicas.iter().filter(|p| p.current && !p.offline).count() as u64,
                lagging: replicas
                    .iter()
                    .filter(|p| !p.current || p.offline)
                    .map(|p| p.name.clone())
                    .collect(),
            });
        }
        Ok(out)
    }
}
