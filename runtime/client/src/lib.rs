//! agentd's socket client and the renderer of its events: what the CLI (and `agentd mcp`, and any
//! other program) uses to talk to a running daemon.
//!
//! - [`Client`]: a blocking client of the socket protocol — a method and its params in, the method's
//!   result type out; notifications kept for [`Client::next_item`].
//! - [`framing`]: the length-capped line framing both ends of the socket use (the daemon's socket
//!   reads with it too).
//! - [`render`]: events as one line each, for the CLI and the demo.
//! - [`terminal`]: text from a model, a tool, a note or a file made safe to show on a terminal.
//!
//! What it must not do: know the daemon's insides. It speaks `agentd-protocol`'s types only.

mod connection;
pub mod framing;
pub mod render;
pub mod terminal;

pub use connection::{Client, ClientError, StreamItem, MAX_ANSWER_LINE};
