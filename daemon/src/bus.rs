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
    /// A bus over `store`, with room for 8,192 unread events per subscriber (a slower one misses events and
    /// must replay them from the store).
    pub fn new(store: Store) -> EventBus {
        let (live, _) = broadcast::channel(8192);
        EventBus { store, live }
    }

    /// Persists the event, then publishes it. The returned event carries its `seq`.
    pub fn emit(&self, task_id: &str, role: &Role, kind: EventKind) -> Result<Event, StoreError> {
        let event = self.store.append_event(task_id, role, &now_rfc3339(), kind)?;
        // No receiver is not an error: nobody is watching.
        let _ = self.live.send(event.clone());
        Ok(event)
    }

    /// A live feed of every event emitted from now on, for every task; a subscriber filters by task and
    /// replays what came before from the store.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.live.subscribe()
    }
}
