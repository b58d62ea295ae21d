//! agentd's runtime: the actors, the provider clients, token counting and the socket server.
//!
//! This room owns everything that moves: a supervisor that owns tasks, one agent actor per role per
//! task, the shared fitter every request passes through, the scheduler where the daemon waits on
//! purpose, and the socket server. It is the only room that knows provider wire formats and the socket
//! protocol. It keeps no durable state of its own: everything that must survive goes through
//! `agentd-evidence` before it is acknowledged or published.

pub mod agent;
pub mod bus;
pub mod client;
pub mod clock;
pub mod compactor;
pub mod config;
pub mod counter;
pub mod daemon;
pub mod ends;
pub mod fitter;
pub mod follow;
mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod mcp;
pub mod meter;
pub mod provider;
pub mod render;
pub mod retry;
pub mod rpc;
pub mod schedule;
pub mod scheduler;
pub mod socket;
pub mod supervisor;
pub mod task;
#[cfg(test)]
mod testing;
