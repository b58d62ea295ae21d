//! The scheduler: the one place where the daemon waits on purpose. Retry delays run here (cancellable,
//! so `cancel` during a wait ends it at once); idle-thinking cleanup and cron jobs join it later.

use actix::prelude::*;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct Scheduler;

impl Actor for Scheduler {
    type Context = Context<Self>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    Elapsed,
    Cancelled,
}

/// Wait `delay`, or until `cancel` fires.
#[derive(Message)]
#[rtype(result = "Waited")]
pub struct Wait {
    pub delay: Duration,
    pub cancel: CancellationToken,
}

impl Handler<Wait> for Scheduler {
    type Result = ResponseFuture<Waited>;

    fn handle(&mut self, msg: Wait, _: &mut Context<Self>) -> Self::Result {
        Box::pin(async move {
            tokio::select! {
                _ = tokio::time::sleep(msg.delay) => Waited::Elapsed,
                _ = msg.cancel.cancelled() => Waited::Cancelled,
            }
        })
    }
}
