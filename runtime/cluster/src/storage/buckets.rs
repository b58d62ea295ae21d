//! The key-value records: tasks (created once, listed), settings and windows (read and put as
//! JSON values), and the ends a task could not record, kept until it can.

use super::handle::{encode, storage_error, JetStreamStorage};
use crate::error::ClusterError;
use crate::names::token;
use crate::passing::retrying;
use agentd_engine::storage::{End, StorageError};
use agentd_protocol::TaskMeta;
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

impl JetStreamStorage {
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

    /// The JSON value under `key` in `store`, if there is one (`what`: what it is, in errors).
    pub(super) fn kv_get<T: DeserializeOwned>(
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

    /// Puts the JSON `value` under `key` in `store` (`what`: what it is, in errors).
    pub(super) fn kv_put(
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
}

/// Every key of `store` with its value (`what`: what they are, in errors).
pub(super) async fn all_entries(
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
