//! agentd's engine: a team's turn loop and everything that decides how big a request is and what
//! it carries — the fitter, the meter and its token counter, compaction, retries, tool dispatch and
//! the idle thinking cleanup.
//!
//! What it owns: one [`agent::Member`] per role per task and its turns ([`agent`], [`error`]), what a
//! task's parts share ([`context`]), a task's run from start to recorded end ([`task`], [`end`]), the one measurer of every request ([`fitter`], [`meter`],
//! [`counter`]), a usage report judged before anything learns from it ([`reported`]), compaction's IO ([`compactor`]), the one retry loop ([`retry`]), the daemon's
//! clock ([`clock`]) and the team's settings ([`team`]).
//!
//! What it must not do: know how anything is stored, served or transported. It reaches
//!
//! - the task log, events, settings, windows and evidence through [`storage::Storage`] (the daemon
//!   implements it over sled; [`memory`] in memory, for tests; a replicated log is one more
//!   implementation),
//! - models through `agentd_protocol::Model` (implemented by `agentd-providers`),
//! - MCP servers through [`tool_servers::ToolServers`] (implemented by the daemon),
//!
//! so actix, actix-web, sled, rmcp and reqwest are absent from its dependency tree (the
//! `architecture` test checks it), and the whole turn loop runs in a unit test in memory.

pub mod agent;
pub mod blocks;
pub mod checkpoints;
pub mod clock;
pub mod compactor;
pub mod context;
#[cfg(any(test, feature = "testing"))]
pub mod contract;
pub mod counter;
pub mod end;
pub mod error;
pub mod fitter;
pub mod halt;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod meter;
pub mod permissions;
pub mod reported;
pub mod retry;
pub mod spans;
pub mod spending;
pub mod storage;
pub mod task;
pub mod team;
#[cfg(test)]
mod testing;
pub mod tool_servers;
