//! The event bus: every event is appended to the task's log (flushed) and only then published to live
//! subscribers. Subscribers replay from the store and follow the bus, so they see no gap and no repeat.

use agentd_engine::clock::now_rfc3339;
use agentd_evidence::{Store, StoreError};
use agentd_protocol::Role;
use agentd_protocol::{Event, EventKind};
use tokio::sync::broadcast;

/// Where events go: each is appended to the task's log (flushed) and then broadcast to every live subscriber.
/// Cheap to clone; clones share the store and the channel.
#[derive(Clone)]
pub struct EventBus {
    store: Store,
    live: broadcast::Sender<Event>,
}

impl EventBus {
    /// A bus over `store`, publishing on `live`.
    pub fn new(store: Store, live: broadcast::Sender<Event>) -> EventBus {
        EventBus { store, live }
    }

    /// The channel live events go out on: room for 8,192 unread events per subscriber (a slower one
    /// misses events and must replay them from the store).
    pub fn channel() -> broadcast::Sender<Event> {
        broadcast::channel(8192).0
    }

    /// Persists the event, then publishes it. The returned event carries its `seq`.
    pub fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StoreError> {
        let event = self.store.append_event(task_id, role, &now_rfc3339(), kind)?;
        // No receiver is not an error: nobody is watching.
        let _ = self.live.send(event.clone());
        Ok(event)
    }
}
