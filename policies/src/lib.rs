//! The conversation model and the pure rules of agentd.
//!
//! The plain data every room speaks — messages and their parts, token counts, windows, task states,
//! events, log records — is `agentd-protocol`'s, re-exported here; this room owns the decisions made
//! over them: how a tool call's arguments are read (`args`), thresholds, window learning, a role's history rebuilt from the log, history repair. It
//! must not do IO, read a clock or spawn anything: time and counts come in as parameters, so every
//! rule here is testable with nothing but data.

pub mod args;
pub mod budget;
pub mod calibration;
pub mod compaction;
pub use agentd_protocol::event;
pub mod history;
pub use agentd_protocol::message;
pub mod observations;
pub use agentd_protocol::record;
pub mod redact;
pub mod repair;
pub mod retry;
pub mod rounds;
pub mod settings;
pub mod summary;
pub use agentd_protocol::task;
pub use agentd_protocol::text;
pub mod thinking;
pub use agentd_protocol::tokens;
pub mod usage;
pub use agentd_protocol::window;
pub mod workspace;

pub use budget::Thresholds;
pub use event::{Event, EventKind, Usage};
pub use message::{Message, MessageKind, Part, Speaker};
pub use record::{CheckpointKind, Record};
pub use task::TaskState;
pub use tokens::{Count, CountSource, Measured, Tokens};
pub use window::{Window, WindowSource};
