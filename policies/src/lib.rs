//! The conversation model and the pure rules of agentd.
//!
//! The plain data every room speaks — messages and their parts, token counts, windows, task states,
//! events, log records — is `agentd-protocol`'s (reached there, by one path); this room owns the decisions made
//! over them: how a tool call's arguments are read (`args`), thresholds, window learning, a role's history rebuilt from the log, history repair. It
//! must not do IO, read a clock or spawn anything: time and counts come in as parameters, so every
//! rule here is testable with nothing but data.

pub mod args;
pub mod budget;
pub mod cache;
pub mod calibration;
pub mod changes;
pub mod compaction;
pub mod cost;
pub mod history;
pub mod instructions;
pub mod memory;
pub mod observations;
pub mod redact;
pub mod repair;
pub mod reported;
pub mod retry;
pub mod rounds;
pub mod settings;
pub mod spending;
pub mod stall;
pub mod summary;
pub mod thinking;
pub mod usage;
pub mod workspace;

pub use budget::Thresholds;
