//! The socket protocol: JSON-RPC 2.0, one object a line, over the daemon's Unix socket.
//!
//! Every method is declared once, in `methods` (name, params type, result type, HTTP route): a
//! request is a [`Request`] — its `method` names the variant and its `params` are that variant's
//! params type — and every method answers with its own result type ([`RpcMethod`]). Errors carry an [`ErrorCode`]. A subscription is followed by
//! [`Notification`]s. `docs/protocol.schema.json` is generated from these types
//! ([`crate::schema::protocol_schema`]) and a test fails when it is stale.
//!
//! Every type is named from here (`rpc::TaskStatus`); the files beneath hold one part each:
//! `methods` (the declaration: [`Request`], [`Method`], [`ROUTES`], [`Handlers`]), `error` (codes and error answers), the params
//! and results of a group of methods each — `task` (`task.*`), `changes` (`task.diff`, `task.revert`), `inspect` (`context.get`,
//! `log.get`), `evidence` (`evidence.*`), `memory` (`memory.*`), `settings` (`settings.*`, `models.probe`), `daemon`
//! (`daemon.status`, `clock.advance`) — and `notification` (what follows a subscription). They
//! import one another, never this module, so no file imports one that imports it back.

mod changes;
mod daemon;
mod error;
mod evidence;
mod inspect;
mod memory;
mod methods;
mod notification;
mod settings;
mod task;

pub use changes::{DiffFile, DiffParams, DiffResult, RevertParams, RevertResult};
pub use daemon::{
    ClockParams, ClockResult, ClusterStatus, ConfigApplies, ConfigChange, ConfigStatus, DaemonStatus,
    DaySpending, HttpServing, JobAction, JobStatus, McpServerStatus, McpStart, NodeStatus, ProviderStatus,
    ReloadResult, StorageStatus, StreamStatus, TelemetryStatus,
};
pub use error::{ErrorCode, RpcError};
pub use evidence::{EvidenceListParams, EvidenceReadParams, EvidenceRef, VerifyResult};
pub use inspect::{ContextParams, ContextResult, LogEntry, LogParams, LogResult, Unmeasured};
pub use memory::{NoteChanged, NoteDetail, NoteEditParams, NoteRef, UndoParams};
pub use methods::{method, Handle, Handlers, Method, NoParams, Request, Route, RpcMethod, Server, ROUTES};
pub use notification::{Notification, TaskEnd};
pub use settings::{ProbeResult, RoleParams, Setting, SettingParams, SettingResult};
pub use task::{
    spent, CompactParams, CompactResult, CompactionSpent, EventsParams, EventsResult, McpDown, MessageParams,
    PermitParams, PermitResult, ResumeParams, RoleStatus, Spent, StateResult, SubmitParams, Submitted,
    SubscribeParams, Subscribed, TaskRef, TaskStatus, TaskSummary, MAX_FOCUS_CHARS,
};
