//! The fleet's live events: an ordered consumer of `AGENTD_LOG` from its end onward, so a daemon
//! sees each event any node appends, once it is stored, in the order the stream holds them — what
//! `watch` on one daemon follows of a task running on another.

use crate::error::ClusterError;
use crate::names::{LOG_STREAM, LOG_SUBJECTS};
use agentd_protocol::{Event, Record};
use async_nats::jetstream::consumer::push::OrderedConfig;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::Context;
use futures_util::{Stream, StreamExt};

/// Every event appended from now on, by any node. Ends when the connection is gone for good.
pub async fn events(js: &Context) -> Result<impl Stream<Item = Event>, ClusterError> {
    let what = |e: &dyn std::fmt::Display| ClusterError::js("following the log", e);
    let stream = js.get_stream(LOG_STREAM).await.map_err(|e| what(&e))?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: LOG_SUBJECTS.to_string(),
            deliver_policy: DeliverPolicy::New,
            deliver_subject: js.client().new_inbox(),
            ..Default::default()
        })
        .await
        .map_err(|e| what(&e))?;
    let messages = consumer.messages().await.map_err(|e| what(&e))?;
    Ok(messages.filter_map(|message| async move {
        let message = match message {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(error = %e, "following the log");
                return None;
            }
        };
        match serde_json::from_slice::<Record>(&message.payload) {
            Ok(Record::Event { event }) => Some(event),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "a log message does not decode");
                None
            }
        }
    }))
}
