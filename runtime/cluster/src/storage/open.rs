//! What [`JetStreamStorage::connect`](super::handle::JetStreamStorage::connect) opens on NATS: the
//! connection, the history and memory streams, the key-value buckets (read from their leader) and
//! the evidence object store — made when missing, with the replicas the configuration asks for,
//! and waited for until they answer.

use super::config::NatsConfig;
use crate::error::ClusterError;
use crate::names::{
    BLOBS_STORE, EVIDENCE_BUCKET, LOG_STREAM, LOG_SUBJECTS, MEMORY_STREAM, MEMORY_SUBJECT, SETTINGS_BUCKET,
    TASKS_BUCKET, WINDOWS_BUCKET,
};
use async_nats::jetstream::kv;
use async_nats::jetstream::object_store;
use async_nats::jetstream::object_store::ObjectStore;
use async_nats::jetstream::stream;
use async_nats::jetstream::stream::Stream;
use async_nats::jetstream::Context;

/// The handles: the history stream, the buckets, the object store and the memory stream.
#[derive(Clone)]
pub(super) struct Handles {
    pub(super) js: Context,
    pub(super) log: Stream,
    pub(super) tasks: kv::Store,
    pub(super) settings: kv::Store,
    pub(super) windows: kv::Store,
    pub(super) evidence: kv::Store,
    pub(super) blobs: ObjectStore,
    pub(super) memory: Stream,
}

/// Connects to the servers `config` names and opens (or makes) everything the storage holds.
pub(super) async fn open(config: &NatsConfig) -> Result<Handles, ClusterError> {
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

/// Waits (up to 30 s) until `store` answers a read: a bucket made just now on a cluster answers once
/// its replicas have elected a leader; better to wait here than to fail the first task.
async fn ready(store: &kv::Store) -> Result<(), ClusterError> {
    let deadline = agentd_engine::clock::monotonic() + std::time::Duration::from_secs(30);
    loop {
        match store.get("agentd-ready").await {
            Ok(_) => return Ok(()),
            Err(e) if agentd_engine::clock::monotonic() >= deadline => {
                return Err(ClusterError::js(format!("waiting for bucket {} to answer", store.name), e))
            }
            Err(_) => agentd_engine::clock::clock().sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}
