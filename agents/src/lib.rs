//! What this room owns and what it must not do.
//!
//! `agentd-agents` owns the definition of the agents themselves: their roles ([`roles`]), their system
//! prompts ([`prompts`]), the JSON schemas of the tools the models see ([`schema`]), the execution of
//! those tools confined to a task's workspace ([`workspace`], [`tools`]), the receipts that record
//! what each tool call did ([`receipts`]), and the working copies of a workspace that parallel writers
//! work in ([`copies`]).
//!
//! It never talks to providers, never knows a wire format or the socket, and touches the disk only
//! inside a task's workspace. The tools the runtime dispatches itself (`delegate`, `finish`,
//! `read_evidence`) are described here but not executed here.
//!
//! The entry points of the fuzz targets and their property tests (`fuzzing`) are not part of the
//! library: they exist only with the cargo feature `fuzzing`, off by default and enabled by `fuzz/`
//! and by this crate's own tests.

pub mod checkpoints;
pub mod copies;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod handoff;
pub mod prompts;
pub mod receipts;
pub mod roles;
pub mod schema;
mod text;
pub mod tools;
pub mod workspace;

pub use error::ToolError;
pub use prompts::system_prompt;
pub use roles::{default_tools, ALL_TOOLS, CODER_TOOLS, LEAD_TOOLS, SPECIALIST_TOOLS};
pub use schema::{schema, schemas, UnknownTool};
pub use tools::{execute, ToolContext, ToolOutcome, DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES};
pub use workspace::Workspace;
