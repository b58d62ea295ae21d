//! The fleet's one queue: a JetStream work-queue stream (`AGENTD_QUEUE`) pulled by every node through
//! one durable consumer, so each job goes to exactly one node at a time.
//!
//! A job stays unacknowledged while its task runs: the node holding it reports progress with each
//! lease renewal ([`Taken::progress`]) and acknowledges it when the task stops ([`Taken::done`]). A
//! node that dies stops reporting, and JetStream hands the job to another node once the
//! acknowledgement wait (the lease) runs out — that redelivery is how a task lost with its machine is
//! taken over. A node that cannot take a job (its workspace is not there) hands it back with a delay
//! ([`Taken::later`]); a node with no room does not pull.

use crate::error::ClusterError;
use crate::names::{QUEUE_CONSUMER, QUEUE_STREAM, QUEUE_SUBJECT};
use agentd_engine::task::Start;
use async_nats::jetstream::consumer::pull::Config as PullConfig;
use async_nats::jetstream::consumer::AckPolicy;
use async_nats::jetstream::consumer::Consumer;
use async_nats::jetstream::message::{AckKind, Message, PublishMessage};
use async_nats::jetstream::stream::{self, RetentionPolicy};
use async_nats::jetstream::Context;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A job on the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The task.
    pub task_id: String,
    /// Its workspace: only a node whose workspace roots hold it takes the job.
    pub workspace: String,
    /// What to do: the engine's own [`Start`], its `start` tag beside the fields above.
    #[serde(flatten)]
    pub start: Start,
}

/// The queue, as one node pulls it.
#[derive(Clone)]
pub struct Queue {
    js: Context,
    consumer: Consumer<PullConfig>,
}

/// A job this node pulled and has not yet let go of.
pub struct Taken {
    /// The job.
    pub job: Job,
    /// How many times JetStream has delivered it (more than 1: a node before this one had it).
    pub delivered: i64,
    message: Message,
}

impl Queue {
    /// The queue stream and its consumer (made when missing), a job's acknowledgement waiting `lease`.
    pub async fn open(js: &Context, replicas: usize, lease: Duration) -> Result<Queue, ClusterError> {
        let stream = js
            .get_or_create_stream(stream::Config {
                name: QUEUE_STREAM.to_string(),
                subjects: vec![QUEUE_SUBJECT.to_string()],
                retention: RetentionPolicy::WorkQueue,
                num_replicas: replicas.max(1),
                ..Default::default()
            })
            .await
            .map_err(|e| ClusterError::js(format!("opening stream {QUEUE_STREAM}"), e))?;
        let consumer = stream
            .get_or_create_consumer(
                QUEUE_CONSUMER,
                PullConfig {
                    durable_name: Some(QUEUE_CONSUMER.to_string()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: lease,
                    max_ack_pending: -1,
                    num_replicas: replicas.max(1),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| ClusterError::js(format!("opening consumer {QUEUE_CONSUMER}"), e))?;
        Ok(Queue { js: js.clone(), consumer })
    }

    /// Puts `job` on the queue, once JetStream holds it. Tried again while NATS is in passing
    /// trouble; the job's message id makes JetStream keep one copy however many attempts land.
    pub async fn push(&self, job: &Job) -> Result<(), ClusterError> {
        let what = format!("queueing task {}", job.task_id);
        let payload =
            serde_json::to_vec(job).map_err(|source| ClusterError::Corrupt { what: what.clone(), source })?;
        let payload = bytes::Bytes::from(payload);
        let id = uuid::Uuid::now_v7().to_string();
        crate::passing::retrying(|| {
            let (js, payload, id, what) = (self.js.clone(), payload.clone(), id.clone(), what.clone());
            async move {
                let publish = PublishMessage::build().payload(payload).message_id(id.as_str());
                let ack =
                    js.send_publish(QUEUE_SUBJECT, publish).await.map_err(|e| ClusterError::js(&what, e))?;
                ack.await.map(drop).map_err(|e| ClusterError::js(&what, e))
            }
        })
        .await
    }

    /// The next job, waiting at most `wait`; `None` when there is none. A job that does not decode is
    /// dropped from the queue (logged): no node could ever run it.
    pub async fn next(&self, wait: Duration) -> Result<Option<Taken>, ClusterError> {
        let what = || "pulling the queue".to_string();
        let mut batch = self
            .consumer
            .fetch()
            .max_messages(1)
            .expires(wait)
            .messages()
            .await
            .map_err(|e| ClusterError::js(what(), e))?;
        let Some(message) = batch.next().await else { return Ok(None) };
        let message = message.map_err(|e| ClusterError::js(what(), e))?;
        let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
        match serde_json::from_slice::<Job>(&message.payload) {
            Ok(job) => Ok(Some(Taken { job, delivered, message })),
            Err(e) => {
                tracing::error!(error = %e, "a queued job does not decode; dropped");
                let _ = message.ack_with(AckKind::Term).await;
                Ok(None)
            }
        }
    }
}

impl Taken {
    /// The job is still being worked on: JetStream waits another lease before handing it on.
    pub async fn progress(&self) -> Result<(), ClusterError> {
        self.message
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| ClusterError::js("extending a queued job", e))
    }

    /// The job is done (its task stopped here): it leaves the queue.
    pub async fn done(&self) -> Result<(), ClusterError> {
        self.message.double_ack().await.map_err(|e| ClusterError::js("acknowledging a queued job", e))
    }

    /// This node cannot take the job: JetStream offers it again after `delay`, to any node.
    pub async fn later(&self, delay: Duration) -> Result<(), ClusterError> {
        self.message
            .ack_with(AckKind::Nak(Some(delay)))
            .await
            .map_err(|e| ClusterError::js("handing a queued job back", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The queue's JSON is what nodes of every version read: the job's fields, and beside them the
    /// start's tag and its own field.
    #[test]
    fn a_job_is_its_task_its_workspace_and_the_start_flattened_beside_them() {
        let job = |start| Job { task_id: "t1".into(), workspace: "/w".into(), start };
        let cases = [
            (
                job(Start::Fresh { objective: "Fix it".into() }),
                json!({"task_id": "t1", "workspace": "/w", "start": "fresh", "objective": "Fix it"}),
            ),
            (job(Start::Resume), json!({"task_id": "t1", "workspace": "/w", "start": "resume"})),
            (
                job(Start::Followup { text: "More".into() }),
                json!({"task_id": "t1", "workspace": "/w", "start": "followup", "text": "More"}),
            ),
        ];
        for (job, wire) in cases {
            assert_eq!(serde_json::to_value(&job).unwrap(), wire);
            assert_eq!(serde_json::from_value::<Job>(wire).unwrap(), job);
        }
    }
}
