//! Requests from one node to another over core NATS: today one, "cancel the task you run"
//! ([`cancel_subject`]). The node running a task is the one that can stop its commands; any other
//! node asks it.

use crate::error::ClusterError;
use crate::names::cancel_subject;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The answer to a cancel request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelAnswer {
    /// Cancelled: the state the task ended in.
    Ended(String),
    /// The node does not run the task (any more).
    NotHere,
    /// It could not be cancelled: why.
    Failed(String),
}

/// Asks `node` to cancel `task_id`, waiting up to `wait` for its answer.
pub async fn ask_cancel(
    client: &async_nats::Client,
    node: &str,
    task_id: &str,
    wait: Duration,
) -> Result<CancelAnswer, ClusterError> {
    let what = || format!("asking node {node} to cancel task {task_id}");
    let request = client.request(cancel_subject(node), task_id.to_string().into());
    let reply = agentd_engine::clock::clock()
        .timeout(wait, request)
        .await
        .map_err(|_| ClusterError::js(what(), format!("no answer within {}s", wait.as_secs())))?
        .map_err(|e| ClusterError::js(what(), e))?;
    serde_json::from_slice(&reply.payload).map_err(|source| ClusterError::Corrupt { what: what(), source })
}

/// Answers every request to cancel a task on `node` with what `cancel` makes of its task id, until
/// the connection is gone.
pub async fn serve_cancels<F, Fut>(
    client: &async_nats::Client,
    node: &str,
    cancel: F,
) -> Result<(), ClusterError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = CancelAnswer>,
{
    let mut requests = client
        .subscribe(cancel_subject(node))
        .await
        .map_err(|e| ClusterError::js(format!("listening for cancels on node {node}"), e))?;
    while let Some(request) = requests.next().await {
        let task_id = String::from_utf8_lossy(&request.payload).into_owned();
        let answered = cancel(task_id).await;
        answer(client, &request, &answered).await;
    }
    Ok(())
}

/// Answers a cancel request.
async fn answer(client: &async_nats::Client, request: &async_nats::Message, answer: &CancelAnswer) {
    let Some(reply) = &request.reply else { return };
    match serde_json::to_vec(answer) {
        Ok(bytes) => {
            if let Err(e) = client.publish(reply.clone(), bytes.into()).await {
                tracing::warn!(error = %e, "could not answer a cancel request");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not encode a cancel answer"),
    }
}
