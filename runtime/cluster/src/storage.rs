//! [`JetStreamStorage`]: the engine's storage seam over NATS JetStream. It passes the seam's contract
//! (`agentd_engine::contract::check`) against a real `nats-server` (`runtime/cluster/tests/storage.rs`).

use crate::bridge::Bridge;
use crate::error::ClusterError;
use crate::log::{self, Head};
use crate::names::{
    token, BLOBS_STORE, EVIDENCE_BUCKET, LOG_STREAM, LOG_SUBJECTS, MEMORY_STREAM, MEMORY_SUBJECT,
    SETTINGS_BUCKET, TASKS_BUCKET, WINDOWS_BUCKET,
};
use crate::passing::retrying;
use agentd_engine::clock::now_rfc3339;
use agentd_engine::storage::{lines_of, page_of, End, Storage, StorageError};
use agentd_policies::history::history_of;
use agentd_policies::memory::{apply, saved};
use agentd_policies::settings::SettingKey;
use agentd_protocol::memory::{Author, MemoryChange, NewNote, Note, NoteEdit, NoteFilter};
use agentd_protocol::{
    Event, EventKind, EvidenceMeta, Message, NewEvidence, Page, Record, Role, Stored, TaskMeta, Unit, Window,
};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{self, UpdateErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::object_store::{self, ObjectStore};
use async_nats::jetstream::stream::{self, Stream};
use async_nats::jetstream::Context;
use async_nats::ConnectOptions;
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncReadExt;

/// How many times a compare-and-set update of a task's record is tried when others keep changing it.
const CAS_ATTEMPTS: usize = 16;

/// Where agentd's data lives on NATS, how many replicas JetStream keeps of it, and how to log in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NatsConfig {
    /// The servers' URLs (`nats://host:4222`); any of them will do.
    pub urls: Vec<String>,
    /// Replicas of each stream, bucket and object store (1 on a single server, 3 for a cluster).
    pub replicas: usize,
    /// How this client proves who it is, and the TLS it asks for.
    pub auth: NatsAuth,
    /// The connection's name, as the servers show it (`agentd build-1`).
    pub name: Option<String>,
}

/// How a client logs in to NATS and the TLS it uses, as `async-nats` offers them. Secrets are values
/// here: the daemon reads them from the environment variables its configuration names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NatsAuth {
    /// A `.creds` file (a user JWT and its NKey seed).
    pub credentials: Option<PathBuf>,
    /// A token.
    pub token: Option<String>,
    /// A user name and its password.
    pub user: Option<(String, String)>,
    /// PEM files of the certificate authorities to trust.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that verify clients.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// Refuse a connection that is not TLS.
    pub tls_required: bool,
}

impl NatsConfig {
    /// The client's options for this configuration.
    async fn options(&self) -> Result<ConnectOptions, ClusterError> {
        let auth = &self.auth;
        let mut options = match &auth.credentials {
            Some(path) => ConnectOptions::with_credentials_file(path.clone()).await.map_err(|e| {
                ClusterError::Connect {
                    urls: self.urls.join(","),
                    message: format!("cannot read the credentials file {}: {e}", path.display()),
                }
            })?,
            None => ConnectOptions::new(),
        };
        if let Some(token) = &auth.token {
            options = options.token(token.clone());
        }
        if let Some((user, password)) = &auth.user {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(ca) = &auth.tls_ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &auth.tls_client {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        if let Some(name) = &self.name {
            options = options.name(name);
        }
        Ok(options.require_tls(auth.tls_required).connection_timeout(std::time::Duration::from_secs(5)))
    }
}

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

/// One memory change as the memory stream holds it: the change and the note as it became.
#[derive(Serialize, Deserialize)]
struct MemoryEntry {
    change: MemoryChange,
    note: Note,
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

    /// This writer lost `task_id` (its lease lapsed, or may have): from now on every write of it —
    /// an append, a change of its record, a kept end — is refused here, before it reaches NATS.
    pub fn abandon(&self, task_id: &str) {
        self.abandoned.lock().insert(task_id.to_string());
    }

    /// Whether this writer lost `task_id` (and has not taken it anew).
    pub fn abandoned(&self, task_id: &str) -> bool {
        self.abandoned.lock().contains(task_id)
    }

    /// This writer holds `task_id` again (it took the lease anew): its writes go through.
    fn reclaim(&self, task_id: &str) {
        self.abandoned.lock().remove(task_id);
    }

    /// This writer holds `task_id` under a lease of `lease` that lapses at `until_ms` (taken or
    /// renewed): it writes the task only until a sixth of the lease before then, and gives it up
    /// past that — a node whose renewals are late (starved, cut off) must stop writing before
    /// another can take the task, not after (found by the fleet chaos run: a task finished twice,
    /// by its lapsed holder and by the node that took it over).
    pub fn hold_until(&self, task_id: &str, until_ms: u64, lease: std::time::Duration) {
        let margin = u64::try_from(lease.as_millis() / 6).unwrap_or(u64::MAX);
        self.writable_until.lock().insert(task_id.to_string(), until_ms.saturating_sub(margin));
    }

    /// This writer gave its lease on `task_id` up: what it writes of the task from now on (a resume,
    /// a cancel of a stopped task) is under no lease's deadline.
    pub fn let_go(&self, task_id: &str) {
        self.writable_until.lock().remove(task_id);
    }

    /// How long this writer may still write `task_id`: `None` without a lease deadline.
    fn writable_for(&self, task_id: &str) -> Option<std::time::Duration> {
        let until = *self.writable_until.lock().get(task_id)?;
        Some(std::time::Duration::from_millis(until.saturating_sub(agentd_engine::clock::now_unix_ms())))
    }

    fn refuse_abandoned(&self, task_id: &str) -> Result<(), StorageError> {
        if self.writable_for(task_id).is_some_and(|left| left.is_zero()) {
            tracing::warn!(
                task = task_id,
                "the task's lease was not renewed in time; this writer writes nothing more of it"
            );
            self.abandon(task_id);
        }
        if self.abandoned.lock().contains(task_id) {
            let epoch = self.epochs.lock().get(task_id).copied().unwrap_or(0);
            return Err(storage_error(ClusterError::LeaseLost { task_id: task_id.to_string(), epoch }));
        }
        Ok(())
    }

    /// The NATS connection, for the fleet's other parts (the control subjects, connection state).
    pub fn client(&self) -> async_nats::Client {
        self.handles.js.client()
    }

    /// Whether the connection to NATS is up now (the client reconnects by itself when it is not).
    pub fn connected(&self) -> bool {
        self.client().connection_state() == async_nats::connection::State::Connected
    }

    /// Every task recorded, in no particular order.
    pub fn tasks(&self) -> Result<Vec<TaskMeta>, StorageError> {
        let tasks = self.handles.tasks.clone();
        let values = self.run(retrying(move || all_entries(tasks.clone(), "the tasks")))?;
        values
            .into_iter()
            .map(|(key, value)| {
                serde_json::from_slice(&value).map_err(|source| {
                    storage_error(ClusterError::Corrupt { what: format!("task {key}"), source })
                })
            })
            .collect()
    }

    /// Every evidence record, or a task's, oldest first.
    pub fn evidence_list(&self, task_id: Option<&str>) -> Result<Vec<EvidenceMeta>, StorageError> {
        let evidence = self.handles.evidence.clone();
        let values = self.run(retrying(move || all_entries(evidence.clone(), "the evidence")))?;
        let mut metas = values
            .into_iter()
            .map(|(key, value)| {
                serde_json::from_slice::<EvidenceMeta>(&value).map_err(|source| {
                    storage_error(ClusterError::Corrupt { what: format!("evidence {key}"), source })
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        metas.retain(|m| task_id.is_none_or(|t| m.source.task_id == t));
        // Evidence ids are UUID v7: their order is their age.
        metas.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(metas)
    }

    /// Reads every evidence object back and checks it against its record's sha256 and size: the
    /// records whose bytes are missing or altered, with what is wrong.
    pub fn verify_evidence(&self) -> Result<Vec<(EvidenceMeta, String)>, StorageError> {
        let mut problems = Vec::new();
        for meta in self.evidence_list(None)? {
            match self.blob(&meta.sha256) {
                Err(e) => problems.push((meta, format!("cannot be read: {e}"))),
                Ok(data) => {
                    let sha256 = hex_sha256(&data);
                    if sha256 != meta.sha256 {
                        problems.push((meta, format!("its bytes hash to {sha256}")));
                    } else if data.len() as u64 != meta.bytes {
                        let len = data.len();
                        problems.push((meta, format!("it holds {len} bytes")));
                    }
                }
            }
        }
        Ok(problems)
    }

    /// The bytes stored under `sha256`.
    fn blob(&self, sha256: &str) -> Result<Vec<u8>, StorageError> {
        let (blobs, name) = (self.handles.blobs.clone(), sha256.to_string());
        self.run(retrying(move || {
            let (blobs, name) = (blobs.clone(), name.clone());
            async move {
                let mut object = blobs
                    .get(name.as_str())
                    .await
                    .map_err(|e| ClusterError::js("reading evidence bytes", e))?;
                let mut data = Vec::new();
                object
                    .read_to_end(&mut data)
                    .await
                    .map_err(|e| ClusterError::js("reading evidence bytes", e))?;
                Ok(data)
            }
        }))
    }

    /// From now on this writer appends `task_id`'s log under lease `epoch` (the lease it took): a
    /// writer with an older one can no longer append to it once this one has.
    pub fn fence(&self, task_id: &str, epoch: u64) {
        self.epochs.lock().insert(task_id.to_string(), epoch);
        // Whoever held the task before appended since this writer last looked: read the head anew.
        self.heads.lock().remove(task_id);
        self.writable_until.lock().remove(task_id);
        self.reclaim(task_id);
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

    /// Records a new task, as `task.submit` does; refused when the id is taken (by another task: an
    /// attempt of this one that timed out but landed is no refusal).
    pub fn create_task(&self, meta: &TaskMeta) -> Result<(), StorageError> {
        self.create_task_record(meta).map_err(storage_error)
    }

    fn create_task_record(&self, meta: &TaskMeta) -> Result<(), ClusterError> {
        let tasks = self.handles.tasks.clone();
        let (key, value) = (token(&meta.task_id), encode(&format!("task {}", meta.task_id), meta)?);
        let value = bytes::Bytes::from(value);
        let what = format!("recording task {}", meta.task_id);
        let (k, v) = (key.clone(), value.clone());
        let created = self.bridge.run(retrying(move || {
            let (tasks, key, value, what) = (tasks.clone(), k.clone(), v.clone(), what.clone());
            async move { tasks.create(key, value).await.map(drop).map_err(|e| ClusterError::js(what, e)) }
        }))?;
        match created {
            Err(e) => {
                let tasks = self.handles.tasks.clone();
                let stored = self.bridge.run(async move { tasks.get(key).await.ok().flatten() })?;
                if stored.as_ref() == Some(&value) {
                    return Ok(());
                }
                Err(e)
            }
            ok => ok,
        }
    }

    /// The end kept for a task whose end could not be recorded.
    pub fn kept_end(&self, task_id: &str) -> Option<End> {
        self.ends.lock().get(task_id).cloned()
    }

    fn run<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = Result<T, ClusterError>> + Send + 'static,
    ) -> Result<T, StorageError> {
        self.bridge.run(future).and_then(|r| r).map_err(storage_error)
    }

    /// Every record of a task, numbered.
    fn all_records(&self, task_id: &str) -> Result<Vec<(u64, Record)>, StorageError> {
        // Read up to the stream's head, not only this writer's: another daemon may have appended.
        let (stream, id) = (self.handles.log.clone(), task_id.to_string());
        self.run(retrying(move || {
            let (stream, id) = (stream.clone(), id.clone());
            async move {
                let head = log::head(&stream, &id).await?;
                log::read(&stream, &id, head).await
            }
        }))
    }

    /// The head of a task's log as the stream holds it.
    fn head_of(&self, task_id: &str) -> Result<Head, StorageError> {
        let (stream, id) = (self.handles.log.clone(), task_id.to_string());
        self.run(retrying(move || {
            let (stream, id) = (stream.clone(), id.clone());
            async move { log::head(&stream, &id).await }
        }))
    }

    fn kv_get<T: DeserializeOwned>(
        &self,
        store: &kv::Store,
        key: String,
        what: String,
    ) -> Result<Option<T>, StorageError> {
        let store = store.clone();
        let bytes = self.run(retrying(move || {
            let (store, key, what) = (store.clone(), key.clone(), what.clone());
            async move { store.get(key).await.map_err(|e| ClusterError::js(format!("reading {what}"), e)) }
        }))?;
        match bytes {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b).map(Some).map_err(|source| {
                storage_error(ClusterError::Corrupt { what: "a stored value".into(), source })
            }),
        }
    }

    fn kv_put(
        &self,
        store: &kv::Store,
        key: String,
        value: Vec<u8>,
        what: String,
    ) -> Result<(), StorageError> {
        let store = store.clone();
        let value = bytes::Bytes::from(value);
        // A put is the same whether it lands once or twice: a passing trouble is tried again.
        self.run(retrying(move || {
            let (store, key, value, what) = (store.clone(), key.clone(), value.clone(), what.clone());
            async move {
                store
                    .put(key, value)
                    .await
                    .map(drop)
                    .map_err(|e| ClusterError::js(format!("writing {what}"), e))
            }
        }))
    }

    /// Every memory change with its note, oldest first.
    fn memory_entries(&self) -> Result<Vec<MemoryEntry>, StorageError> {
        let stream = self.handles.memory.clone();
        self.run(retrying(move || {
            let stream = stream.clone();
            async move { read_memory(&stream).await }
        }))
    }

    /// The notes as they stand: the last state of each, in the order they were saved.
    fn current_notes(&self) -> Result<Vec<Note>, StorageError> {
        let mut notes: BTreeMap<u64, Note> = BTreeMap::new();
        let mut first_seen: HashMap<String, u64> = HashMap::new();
        for entry in self.memory_entries()? {
            let order = *first_seen.entry(entry.note.id.clone()).or_insert(entry.change.seq);
            notes.insert(order, entry.note);
        }
        Ok(notes.into_values().collect())
    }

    /// Appends a memory change with its note, expecting the stream where this writer last saw it.
    fn write_memory(&self, entry: &MemoryEntry, expected_last: u64) -> Result<(), StorageError> {
        let payload = encode("a memory change", entry).map_err(storage_error)?;
        let js = self.handles.js.clone();
        self.run(async move {
            let publish =
                PublishMessage::build().payload(payload.into()).expected_last_sequence(expected_last);
            let ack = match js.send_publish(MEMORY_SUBJECT, publish).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match ack {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Err(ClusterError::js(
                    "recording a memory change",
                    "another daemon changed memory at the same moment; try again",
                )),
                Err(e) => Err(ClusterError::js("recording a memory change", e)),
            }
        })
    }
}

async fn open(config: &NatsConfig) -> Result<Handles, ClusterError> {
    let urls = config.urls.join(",");
    let mut addrs: Vec<async_nats::ServerAddr> = Vec::with_capacity(config.urls.len());
    for url in &config.urls {
        addrs.push(url.parse().map_err(|e| ClusterError::Connect {
            urls: urls.clone(),
            message: format!("{url} is not a NATS server URL: {e}"),
        })?);
    }
    let client = config
        .options()
        .await?
        .connect(addrs.as_slice())
        .await
        .map_err(|e| ClusterError::Connect { urls: urls.clone(), message: e.to_string() })?;
    let js = async_nats::jetstream::new(client);
    let replicas = config.replicas.max(1);
    let stream_of = |name: &str, subjects: &str| stream::Config {
        name: name.to_string(),
        subjects: vec![subjects.to_string()],
        num_replicas: replicas,
        ..Default::default()
    };
    let log = js
        .get_or_create_stream(stream_of(LOG_STREAM, LOG_SUBJECTS))
        .await
        .map_err(|e| ClusterError::js(format!("opening stream {LOG_STREAM}"), e))?;
    let memory = js
        .get_or_create_stream(stream_of(MEMORY_STREAM, MEMORY_SUBJECT))
        .await
        .map_err(|e| ClusterError::js(format!("opening stream {MEMORY_STREAM}"), e))?;
    let bucket = |name: &'static str| open_bucket(&js, name, replicas);
    let blobs = match js.get_object_store(BLOBS_STORE).await {
        Ok(store) => store,
        Err(_) => js
            .create_object_store(object_store::Config {
                bucket: BLOBS_STORE.to_string(),
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| ClusterError::js(format!("creating object store {BLOBS_STORE}"), e))?,
    };
    let handles = Handles {
        log,
        tasks: bucket(TASKS_BUCKET).await?,
        settings: bucket(SETTINGS_BUCKET).await?,
        windows: bucket(WINDOWS_BUCKET).await?,
        evidence: bucket(EVIDENCE_BUCKET).await?,
        blobs,
        memory,
        js,
    };
    Ok(handles)
}

/// The key-value bucket `name` (made when missing, keeping one value a key, on `replicas`), read
/// from its leader, once it answers.
///
/// Its stream is made as a bucket's (the configuration `async-nats` gives one) but read from its
/// leader from the start: several daemons making it at the same moment ask for the one same
/// configuration, which JetStream takes as one stream — a bucket made with direct gets and turned
/// to leader reads after was "already in use with a different configuration" to the daemon making
/// it a moment later.
pub(crate) async fn open_bucket(
    js: &Context,
    name: &str,
    replicas: usize,
) -> Result<kv::Store, ClusterError> {
    js.get_or_create_stream(bucket_stream(name, replicas))
        .await
        .map_err(|e| ClusterError::js(format!("creating bucket {name}"), e))?;
    // A bucket an earlier agentd made, with direct gets: turned to leader reads.
    read_from_leader(js, name).await?;
    // Opened after the change: the handle reads the way its stream's configuration says.
    let store =
        js.get_key_value(name).await.map_err(|e| ClusterError::js(format!("opening bucket {name}"), e))?;
    ready(&store).await?;
    Ok(store)
}

/// The stream of key-value bucket `name`: a bucket's configuration as `async-nats` makes one (one
/// value a key, rollups, no deletes of messages, new writes refused when full), without direct
/// gets.
fn bucket_stream(name: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: format!("KV_{name}"),
        description: Some(String::new()),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        allow_direct: false,
        num_replicas: replicas.max(1),
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    }
}

/// Turns off direct gets on bucket `name`'s stream, which a key-value bucket is made with: any replica
/// answers a direct get, and one still applying the last writes answers with an older value — a
/// task's record read as `running` after its end was acknowledged, by the node that takes its
/// redelivered job, which then ran the finished task again. Without them, reads go to the leader,
/// which answers with what was acknowledged.
async fn read_from_leader(js: &Context, name: &str) -> Result<(), ClusterError> {
    let fail = |e: &dyn std::fmt::Display| ClusterError::js(format!("configuring bucket {name}"), e);
    let mut stream = js.get_stream(format!("KV_{name}")).await.map_err(|e| fail(&e))?;
    let config = &stream.info().await.map_err(|e| fail(&e))?.config;
    if config.allow_direct {
        let config = stream::Config { allow_direct: false, ..config.clone() };
        js.update_stream(config).await.map_err(|e| fail(&e))?;
    }
    Ok(())
}

/// Every key of `store` with its value (`what`: what they are, in errors).
async fn all_entries(
    store: kv::Store,
    what: &'static str,
) -> Result<Vec<(String, bytes::Bytes)>, ClusterError> {
    let fail = |e: &dyn std::fmt::Display| ClusterError::js(format!("listing {what}"), e);
    let mut keys = store.keys().await.map_err(|e| fail(&e))?;
    let mut values = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| fail(&e))?;
        if let Some(value) = store.get(&key).await.map_err(|e| fail(&e))? {
            values.push((key, value));
        }
    }
    Ok(values)
}

/// Waits (up to 30 s) until `store` answers a read: a bucket made just now on a cluster answers once
/// its replicas have elected a leader; better to wait here than to fail the first task.
async fn ready(store: &kv::Store) -> Result<(), ClusterError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match store.get("agentd-ready").await {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(ClusterError::js(format!("waiting for bucket {} to answer", store.name), e))
            }
            Err(_) => agentd_engine::clock::clock().sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

async fn read_memory(stream: &Stream) -> Result<Vec<MemoryEntry>, ClusterError> {
    let last = match stream.get_last_raw_message_by_subject(MEMORY_SUBJECT).await {
        Ok(message) => message.sequence,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => return Ok(Vec::new()),
        Err(e) => return Err(ClusterError::js("reading memory", e)),
    };
    let mut out = Vec::new();
    for sequence in 1..=last {
        let message =
            stream.get_raw_message(sequence).await.map_err(|e| ClusterError::js("reading memory", e))?;
        let entry: MemoryEntry = serde_json::from_slice(&message.payload)
            .map_err(|source| ClusterError::Corrupt { what: format!("memory change {sequence}"), source })?;
        out.push(entry);
    }
    Ok(out)
}

/// A sha256 in lower-case hex.
fn hex_sha256(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

fn encode(what: &str, value: &impl Serialize) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(value).map_err(|source| ClusterError::Corrupt { what: what.to_string(), source })
}

impl JetStreamStorage {
    /// Appends the record `make` builds from the log's head (an event takes its number from it),
    /// this writer's appends to the task one at a time; the new head and what `make` handed back.
    fn append_with<T>(
        &self,
        task_id: &str,
        make: impl FnOnce(Head) -> (Record, T),
    ) -> Result<(Head, T), StorageError> {
        self.refuse_abandoned(task_id)?;
        let mut heads = self.heads.lock();
        let head = match heads.get(task_id) {
            Some(head) => *head,
            None => self.head_of(task_id)?,
        };
        let (record, made) = make(head);
        let epoch = self.epochs.lock().get(task_id).copied().unwrap_or(0);
        let (js, stream, id) = (self.handles.js.clone(), self.handles.log.clone(), task_id.to_string());
        // Tried again only while the lease (as renewed meanwhile) lets this writer write.
        let (writable, task) = (self.writable_until.clone(), task_id.to_string());
        let may_write = move || {
            writable.lock().get(&task).is_none_or(|until| agentd_engine::clock::now_unix_ms() < *until)
        };
        let appended = self
            .bridge
            .run(async move { log::append_surely(&js, &stream, &id, head, epoch, &record, may_write).await })
            .and_then(|r| r);
        match appended {
            Ok(next) => {
                heads.insert(task_id.to_string(), next);
                Ok((next, made))
            }
            // Another writer appended since this one last did, or under a newer lease: this writer
            // lost the task (its lease lapsed before it knew). It writes nothing of it again —
            // not its end on the record either, which would overwrite the new holder's — until it
            // takes the lease anew (found by the fleet chaos run: a task `failed` by its old holder
            // while its new one ran it).
            Err(e @ (ClusterError::Conflict { .. } | ClusterError::Fenced { .. })) => {
                heads.remove(task_id);
                drop(heads);
                tracing::warn!(task = task_id, error = %e, "another writer holds the task now; this one writes nothing more of it");
                self.abandon(task_id);
                Err(storage_error(e))
            }
            Err(e) => {
                // Read the head again next time: another writer may have moved it.
                heads.remove(task_id);
                drop(heads);
                // Tried until the lease no longer let it write: the task is another node's to go on
                // with once its lease lapses, not this run's to fail.
                if e.is_passing() && self.writable_for(task_id).is_some_and(|left| left.is_zero()) {
                    tracing::warn!(task = task_id, error = %e, "the fleet did not take the append before the task's lease ran out; this writer writes nothing more of it");
                    self.abandon(task_id);
                }
                Err(storage_error(e))
            }
        }
    }
}

impl Storage for JetStreamStorage {
    fn tasks(&self) -> Result<Vec<TaskMeta>, StorageError> {
        let mut tasks = JetStreamStorage::tasks(self)?;
        // Task ids are UUID v7: their order is their age, as sled lists them.
        tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        Ok(tasks)
    }

    fn append(&self, task_id: &str, record: &Record) -> Result<u64, StorageError> {
        Ok(self.append_with(task_id, |_| (record.clone(), ()))?.0.records)
    }

    fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StorageError> {
        let (_, event) = self.append_with(task_id, |head| {
            let event = Event {
                seq: head.events + 1,
                task_id: task_id.to_string(),
                role: role.clone(),
                at: now_rfc3339(),
                kind,
            };
            (Record::Event { event: event.clone() }, event)
        })?;
        Ok(event)
    }

    fn history(&self, task_id: &str, role: &Role) -> Result<Vec<Message>, StorageError> {
        let records: Vec<Record> = self.all_records(task_id)?.into_iter().map(|(_, r)| r).collect();
        Ok(history_of(role, &records))
    }

    fn records(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<(u64, Record)>, StorageError> {
        Ok(self.all_records(task_id)?.into_iter().filter(|(n, _)| *n > after).take(limit).collect())
    }

    fn events(&self, task_id: &str, after: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        Ok(self
            .all_records(task_id)?
            .into_iter()
            .filter_map(|(_, r)| match r {
                Record::Event { event } if event.seq > after => Some(event),
                _ => None,
            })
            .take(limit)
            .collect())
    }

    fn last_event_seq(&self, task_id: &str) -> Result<u64, StorageError> {
        Ok(self.head_of(task_id)?.events)
    }

    fn task(&self, task_id: &str) -> Result<Option<TaskMeta>, StorageError> {
        self.kv_get(&self.handles.tasks, token(task_id), format!("task {task_id}"))
    }

    fn update_task(&self, task_id: &str, change: &mut dyn FnMut(&mut TaskMeta)) -> Result<(), StorageError> {
        self.refuse_abandoned(task_id)?;
        let tasks = self.handles.tasks.clone();
        for _ in 0..CAS_ATTEMPTS {
            let (store, key) = (tasks.clone(), token(task_id));
            let entry = self.run(retrying(move || {
                let (store, key) = (store.clone(), key.clone());
                async move { store.entry(key).await.map_err(|e| ClusterError::js("reading a task", e)) }
            }))?;
            let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                return Err(StorageError::UnknownTask(task_id.to_string()));
            };
            let mut meta: TaskMeta = serde_json::from_slice(&entry.value).map_err(|source| {
                storage_error(ClusterError::Corrupt { what: format!("task {task_id}"), source })
            })?;
            change(&mut meta);
            let value = encode(&format!("task {task_id}"), &meta).map_err(storage_error)?;
            let (store, key, revision) = (tasks.clone(), token(task_id), entry.revision);
            let updated = self.run(async move {
                match store.update(key, value.into(), revision).await {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(false),
                    Err(e) => Err(ClusterError::js("updating a task", e)),
                }
            })?;
            if updated {
                return Ok(());
            }
        }
        Err(storage_error(ClusterError::js(
            format!("updating task {task_id}"),
            "it kept changing under other writers",
        )))
    }

    fn keep_end(&self, task_id: &str, end: End) {
        // A task this writer lost goes on elsewhere: its end here is no end of the task.
        if self.abandoned.lock().contains(task_id) {
            return;
        }
        self.ends.lock().insert(task_id.to_string(), end);
    }

    fn setting(&self, key: &SettingKey) -> Result<Option<Value>, StorageError> {
        self.kv_get(&self.handles.settings, token(key.as_str()), format!("setting {key}"))
    }

    fn set_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        let bytes = encode(&format!("setting {key}"), value).map_err(storage_error)?;
        self.kv_put(&self.handles.settings, token(key.as_str()), bytes, format!("setting {key}"))
    }

    fn cache_setting(&self, key: &SettingKey, value: &Value) -> Result<(), StorageError> {
        self.set_setting(key, value)
    }

    fn window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError> {
        self.kv_get(
            &self.handles.windows,
            token(&format!("{server}\n{model}")),
            format!("the window of {model}"),
        )
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError> {
        let bytes = encode("a window", &window).map_err(storage_error)?;
        self.kv_put(
            &self.handles.windows,
            token(&format!("{server}\n{model}")),
            bytes,
            format!("the window of {model}"),
        )
    }

    fn put_evidence(&self, new: NewEvidence<'_>, _fallback_dir: &Path) -> Result<Stored, StorageError> {
        let sha256 = hex_sha256(new.data);
        let meta =
            new.meta(format!("ev-{}", uuid::Uuid::now_v7()), sha256.clone(), lines_of(new.data).len() as u64);
        // The bytes first, then the record that names them: a record never points at nothing.
        let (blobs, data) = (self.handles.blobs.clone(), new.data.to_vec());
        let name = sha256.clone();
        self.run(async move {
            blobs
                .put(name.as_str(), &mut data.as_slice())
                .await
                .map(drop)
                .map_err(|e| ClusterError::js("storing evidence bytes", e))
        })?;
        let record = encode("an evidence record", &meta).map_err(storage_error)?;
        self.kv_put(&self.handles.evidence, token(&meta.id), record, format!("evidence {}", meta.id))?;
        Ok(Stored::InStore(meta))
    }

    fn evidence(&self, id: &str) -> Result<EvidenceMeta, StorageError> {
        self.kv_get(&self.handles.evidence, token(id), format!("evidence {id}"))?
            .ok_or_else(|| StorageError::UnknownEvidence(id.to_string()))
    }

    fn read_evidence(&self, id: &str, offset: u64, limit: u64, unit: Unit) -> Result<Page, StorageError> {
        let meta = self.evidence(id)?;
        let data = self.blob(&meta.sha256)?;
        Ok(page_of(&data, &meta, offset, limit, unit))
    }

    fn save_note(&self, new: NewNote) -> Result<Note, StorageError> {
        let _guard = self.memory_writes.lock();
        let last = self.memory_entries()?.len() as u64;
        let (note, change) = saved(new, last + 1);
        self.write_memory(&MemoryEntry { change, note: note.clone() }, last)?;
        Ok(note)
    }

    fn notes(&self, filter: &NoteFilter) -> Result<Vec<Note>, StorageError> {
        Ok(self.current_notes()?.into_iter().filter(|n| filter.shows(n)).collect())
    }

    fn note(&self, id: &str) -> Result<Note, StorageError> {
        self.current_notes()?
            .into_iter()
            .find(|n| n.id == id)
            .ok_or_else(|| StorageError::UnknownNote(id.to_string()))
    }

    fn change_note(
        &self,
        id: &str,
        edit: &NoteEdit,
        by: Author,
        at: &str,
    ) -> Result<(Note, MemoryChange), StorageError> {
        let _guard = self.memory_writes.lock();
        let entries = self.memory_entries()?;
        let note = entries
            .iter()
            .rev()
            .find(|e| e.note.id == id)
            .map(|e| e.note.clone())
            .ok_or_else(|| StorageError::UnknownNote(id.to_string()))?;
        let latest = entries.iter().rev().find(|e| e.change.note_id == id).map(|e| &e.change);
        let applied = apply(&note, edit, latest, at).map_err(StorageError::RefusedChange)?;
        let last = entries.len() as u64;
        let change = applied.change(last + 1, by, at);
        self.write_memory(&MemoryEntry { change: change.clone(), note: applied.note.clone() }, last)?;
        Ok((applied.note, change))
    }

    fn note_changes(&self, id: Option<&str>) -> Result<Vec<MemoryChange>, StorageError> {
        Ok(self
            .memory_entries()?
            .into_iter()
            .map(|e| e.change)
            .filter(|c| id.is_none_or(|id| c.note_id == id))
            .collect())
    }
}
