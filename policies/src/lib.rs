//! The conversation model and the pure rules of agentd.
//!
//! This room owns the plain data every other crate speaks — messages and their parts, token counts,
//! windows, task states, events, log records — and the decisions made over them: thresholds, window
//! learning, history repair. It must not do IO, read a clock or spawn anything: time and counts come in
//! as parameters, so every rule here is testable with nothing but data.

pub mod budget;
pub mod calibration;
pub mod compaction;
pub mod event;
pub mod message;
pub mod observations;
pub mod record;
pub mod redact;
pub mod repair;
pub mod retry;
pub mod rounds;
pub mod summary;
pub mod task;
pub mod thinking;
pub mod tokens;
pub mod usage;
pub mod window;
pub mod workspace;

pub use budget::Thresholds;
pub use event::{Event, EventKind, Usage};
pub use message::{Message, Part, Role};
pub use record::Record;
pub use task::TaskState;
pub use tokens::{Count, CountSource, Measured, Tokens};
pub use window::{Window, WindowSource};
