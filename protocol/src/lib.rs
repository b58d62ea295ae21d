//! agentd's wire vocabulary: the words that cross from one room to another and out to clients.
//!
//! This room owns the plain data every other crate speaks — the socket protocol (requests, results,
//! notifications, error codes), events, log records, tasks, the conversation model, token counts
//! and windows — and the shared vocabulary that replaces strings: [`Role`], [`ToolName`],
//! [`CheckpointKind`], [`MessageKind`], [`Producer`]. Its JSON Schema ([`schema::protocol_schema`])
//! is committed as `docs/protocol.schema.json`.
//!
//! It must not do IO, read a clock, spawn, or decide anything: serde and schemars only. Decisions
//! over this data are `agentd-policies`'. The one exception is [`text`]: how a text is cut to a size
//! without splitting a character, a pure helper every room (the providers included, which depend on
//! this crate only) must do the same way.

pub mod budget;
pub mod checkpoint;
pub mod event;
pub mod evidence;
pub mod gauge;
pub mod http;
pub mod memory;
pub mod message;
pub mod model;
pub mod openapi;
pub mod path_name;
pub mod record;
pub mod role;
pub mod route;
pub mod rpc;
pub mod schema;
pub mod task;
pub mod text;
pub mod tokens;
pub mod tool;
pub mod usage;
pub mod window;

pub use budget::{Amount, Budget, BudgetScope};
pub use checkpoint::{FileDelta, FileState, NotHeld};
pub use event::{Event, EventKind, OpenBranch, PatchConflict, Stalled};
pub use evidence::{EvidenceMeta, NewEvidence, Page, Producer, Source, Stored, Unit};
pub use gauge::{Categories, Gauge};
pub use message::{CarriedObservation, Message, MessageKind, ObservationKind, Part, Speaker};
pub use model::{
    AnomalyKind, ChatRequest, ChatResponse, Model, PromptCache, ProviderError, RetryAfter, MAX_PROVIDER_WAIT,
};
pub use record::{CheckpointKind, Receipt, Record, TurnSettings};
pub use role::Role;
pub use rpc::{ErrorCode, Method, Notification, Request, RpcError};
pub use task::{TaskMeta, TaskState};
pub use tokens::{Count, CountSource, Measured, Standing, Tokens};
pub use tool::{McpTool, ToolName, ToolSchema};
pub use usage::{Figure, RawUsage, Usage};
pub use window::{Window, WindowSource};
