//! The replicated history: each task's records and events, one message each on the task's subject of
//! `AGENTD_LOG`, in order, numbered from 1 (the record number in [`SEQ_HEADER`]).
//!
//! An append names the stream sequence it expects last on the task's subject
//! (`Nats-Expected-Last-Subject-Sequence`); JetStream refuses it when another writer got there
//! first, so the log has one order and no duplicate whatever races or fails, and the publish
//! acknowledgement — given once the stream's replicas hold it — is when a record counts as written.
//! A task's [`Head`] (how many records and events, the last stream sequence, the newest lease epoch)
//! is read from its last message when first needed and kept up to date by this writer's own appends.
//!
//! **Fencing.** Every message carries the lease epoch of its writer ([`EPOCH_HEADER`]). A writer
//! appends only on a head whose epoch is not newer than its own: a newer one means the task was
//! taken over, and the append is refused ([`ClusterError::Fenced`]). Since an append also names the
//! head it was decided on, the two rules together mean that once the new holder's first message is
//! in, nothing the old holder sends lands — whether it read the head before that message (the
//! stream refuses it) or after (it refuses itself).

use crate::error::ClusterError;
use crate::names::{log_subject, EPOCH_HEADER, EVENTS_HEADER, SEQ_HEADER};
use agentd_protocol::Record;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_nats::jetstream::Context;

/// Where a task's log stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Head {
    /// How many records it holds (the last record's number).
    pub records: u64,
    /// How many of them are events (the last event's number).
    pub events: u64,
    /// The stream sequence of its last message (0: none).
    pub last: u64,
    /// The lease epoch of its newest writer (0: none held a lease).
    pub epoch: u64,
}

/// The head of `task_id`'s log, read from its last message.
pub async fn head(stream: &Stream, task_id: &str) -> Result<Head, ClusterError> {
    match stream.get_last_raw_message_by_subject(&log_subject(task_id)).await {
        Ok(message) => {
            let number = |name: &str| -> u64 {
                message.headers.get(name).and_then(|v| v.as_str().parse().ok()).unwrap_or(0)
            };
            Ok(Head {
                records: number(SEQ_HEADER),
                events: number(EVENTS_HEADER),
                last: message.sequence,
                epoch: number(EPOCH_HEADER),
            })
        }
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(Head::default()),
        Err(e) => Err(ClusterError::js(format!("reading the head of the log of task {task_id}"), e)),
    }
}

/// Appends `record` to `task_id`'s log whose head is `head`, as a writer holding lease `epoch`,
/// waiting for the acknowledgement; the new head. [`ClusterError::Fenced`] when the head is newer
/// than the writer's lease; [`ClusterError::Conflict`] when the log moved on under another writer.
pub async fn append(
    js: &Context,
    task_id: &str,
    head: Head,
    epoch: u64,
    record: &Record,
) -> Result<Head, ClusterError> {
    if head.epoch > epoch {
        return Err(ClusterError::Fenced { task_id: task_id.to_string(), epoch, newer: head.epoch });
    }
    let payload = serde_json::to_vec(record)
        .map_err(|source| ClusterError::Corrupt { what: format!("a record of task {task_id}"), source })?;
    let is_event = matches!(record, Record::Event { .. });
    let next =
        Head { records: head.records + 1, events: head.events + u64::from(is_event), last: head.last, epoch };
    let publish = PublishMessage::build()
        .payload(payload.into())
        .expected_last_subject_sequence(head.last)
        .header(SEQ_HEADER, next.records.to_string().as_str())
        .header(EVENTS_HEADER, next.events.to_string().as_str())
        .header(EPOCH_HEADER, epoch.to_string().as_str());
    let what = || format!("appending record {} to the log of task {task_id}", next.records);
    let conflict = |kind: PublishErrorKind| kind == PublishErrorKind::WrongLastSequence;
    let ack = match js.send_publish(log_subject(task_id), publish).await {
        Ok(ack) => ack.await,
        Err(e) => Err(e),
    };
    match ack {
        Ok(ack) => Ok(Head { last: ack.sequence, ..next }),
        Err(e) if conflict(e.kind()) => {
            Err(ClusterError::Conflict { task_id: task_id.to_string(), expected: head.last })
        }
        Err(e) => Err(ClusterError::js(what(), e)),
    }
}

/// [`append`], tried again while NATS is in passing trouble (a server down, a leader being elected)
/// for up to [`crate::passing::RETRY_FOR`], and only while `may_write` says the writer still may
/// (its lease lets it). An attempt that timed out may have landed all the same: when the retry
/// then finds the log moved on by exactly one message, and that message is this record, it landed.
pub async fn append_surely(
    js: &Context,
    stream: &Stream,
    task_id: &str,
    at: Head,
    epoch: u64,
    record: &Record,
    may_write: impl Fn() -> bool,
) -> Result<Head, ClusterError> {
    let clock = agentd_engine::clock::clock();
    let deadline = clock.now() + crate::passing::RETRY_FOR;
    let mut retried = false;
    loop {
        match append(js, task_id, at, epoch, record).await {
            Err(e) if e.is_passing() && clock.now() < deadline && may_write() => {
                tracing::debug!(task = task_id, error = %e, "NATS in passing trouble; appending again");
                retried = true;
                clock.sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(ClusterError::Conflict { .. }) if retried => {
                let now = head(stream, task_id).await?;
                let ours = serde_json::to_vec(record).map_err(|source| ClusterError::Corrupt {
                    what: format!("a record of task {task_id}"),
                    source,
                })?;
                let last = stream
                    .get_last_raw_message_by_subject(&log_subject(task_id))
                    .await
                    .map_err(|e| ClusterError::js(format!("reading the log of task {task_id}"), e))?;
                if now.records == at.records + 1
                    && now.epoch == epoch
                    && last.payload.as_ref() == ours.as_slice()
                {
                    return Ok(now);
                }
                return Err(ClusterError::Conflict { task_id: task_id.to_string(), expected: at.last });
            }
            done => return done,
        }
    }
}

/// Every record of `task_id`'s log up to `head`, numbered, in order: each the next message on the
/// task's subject after the one before, asked of the stream's leader (plain requests, which survive
/// a server going down where a consumer's subscription may not).
pub async fn read(stream: &Stream, task_id: &str, head: Head) -> Result<Vec<(u64, Record)>, ClusterError> {
    let mut out = Vec::with_capacity(head.records as usize);
    let subject = log_subject(task_id);
    let what = || format!("reading the log of task {task_id}");
    let mut from = 1;
    while from <= head.last {
        let message = stream
            .raw_message_builder()
            .sequence(from)
            .next_by_subject(subject.clone())
            .send()
            .await
            .map_err(|e| ClusterError::js(what(), e))?;
        let number = out.len() as u64 + 1;
        let record: Record = serde_json::from_slice(&message.payload).map_err(|source| {
            ClusterError::Corrupt { what: format!("record {number} of task {task_id}"), source }
        })?;
        out.push((number, record));
        from = message.sequence + 1;
    }
    Ok(out)
}
