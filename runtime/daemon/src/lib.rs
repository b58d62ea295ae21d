//! agentd's daemon: what serves a team engine to its users and keeps it on disk.
//!
//! What it owns: the daemon's life ([`daemon`]: home, lock, actor system, signals), task
//! lifecycles ([`supervisor`], the one actor that owns them), cron jobs ([`scheduler`],
//! [`schedule`]), the socket ([`socket`], [`rpc`], [`follow`]), the HTTP API and dashboard
//! ([`http`]), MCP both ways ([`mcp`]), an editor's agent over ACP ([`acp`]), the configuration file ([`config`]), and the engine's storage
//! on sled ([`storage`], with [`bus`] publishing events and [`ends`] keeping the ends a full disk
//! refused).
//!
//! What it must not do: decide anything about a turn, a count or a compaction — that is
//! `agentd-engine`'s, reached through its `Engine` and task runner — or know a provider's wire
//! format (`agentd-providers`).

pub mod acp;
pub mod bus;
pub mod config;
pub mod daemon;
pub mod doctor;
pub mod ends;
pub mod fleet;
pub mod follow;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod provider_health;
pub mod reload;
pub mod rpc;
pub mod schedule;
pub mod scheduler;
pub mod shared;
pub mod socket;
pub mod starting;
pub mod storage;
pub mod supervisor;
pub mod telemetry;
#[cfg(test)]
mod testing;
