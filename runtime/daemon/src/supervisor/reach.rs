//! How a runner's loops reach the supervisor once it runs ([`Reach`]): asking for [`Room`], and
//! running work on its tasks with [`OnTasks`] (a fleet's node starting a task it took from the
//! queue).

use super::messages::{Cancel, IsRunning, RunningCount};
use super::tasks::Tasks;
use actix::prelude::*;
use futures_util::future::BoxFuture;

/// Has this node room for another task of the fleet's (`[cluster] max_tasks`)?
#[derive(Message)]
#[rtype(result = "bool")]
pub(super) struct Room;

/// Work on the supervisor's tasks, done inside the actor (a fleet's node starting a task it took from
/// the queue); the future it returns, if any, then runs beside the actor — and stops with it.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct OnTasks(pub(super) Work);

/// Work on the supervisor's tasks, and what it leaves to run beside the actor (a taken task's lease
/// kept while it runs).
pub(super) type Work = Box<dyn FnOnce(&mut Tasks) -> Option<BoxFuture<'static, ()>> + Send>;

/// The supervisor as a runner's loops reach it, started: one recipient per message they send.
#[derive(Clone)]
pub(super) struct Reach {
    /// Whether there is room for another task.
    pub(super) room: Recipient<Room>,
    /// Whether a task runs here.
    pub(super) is_running: Recipient<IsRunning>,
    /// How many tasks run here.
    pub(super) running_count: Recipient<RunningCount>,
    /// Cancelling a task (one this node runs, asked by another node).
    pub(super) cancel: Recipient<Cancel>,
    /// Work on the tasks, inside the actor.
    pub(super) on_tasks: Recipient<OnTasks>,
}
