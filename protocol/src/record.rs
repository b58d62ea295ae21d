//! Log records: the append-only per-task log holds messages, checkpoints, settings snapshots and events,
//! each tagged with the role it belongs to. Resume is "the latest checkpoint of a role plus every later
//! message record of that role".

use crate::event::Event;
use crate::message::Message;
use crate::role::Role;
use crate::tool::ToolName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One entry of a task's append-only log: the messages, checkpoints, settings snapshots, events and receipts
/// of every role, in the order they happened. On the wire `type` names the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// One message of a role's history.
    Message {
        /// The role whose history the message belongs to.
        role: Role,
        /// The message, as it was sent to or received from the model.
        message: Message,
    },
    /// The role's whole active history replaced (compaction, thinking cleanup, repair).
    /// Shape per the design: `{type: system, subtype: compaction, history: [...]}` (stored before
    /// as `type: checkpoint`, which still reads).
    #[serde(rename = "system", alias = "checkpoint")]
    Checkpoint {
        /// The role whose history this replaces.
        role: Role,
        /// Why the history was replaced: a compaction, a thinking cleanup or a repair.
        subtype: CheckpointKind,
        /// The role's whole active history from here on, replacing everything before.
        history: Vec<Message>,
        /// The evidence item archiving what a compaction removed; absent for other checkpoints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        archive_id: Option<String>,
    },
    /// The settings a role's turn started with.
    Settings {
        /// The role whose turn started.
        role: Role,
        /// The snapshot the whole turn runs with.
        settings: TurnSettings,
    },
    /// An event, also kept in the event index.
    Event {
        /// The event, with its own `seq` in the task's event numbering.
        event: Event,
    },
    /// What one operation of a role did (tool, arguments, outcome, evidence): its receipt.
    Receipt {
        /// The role that made the call.
        role: Role,
        /// What was called, with what, and how it ended.
        receipt: Receipt,
    },
}

/// Why a role's history was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// A compaction: what left the request was archived and summarised.
    Compaction,
    /// An idle-thinking cleanup: outdated reasoning blocks were cleared.
    ThinkingCleanup,
    /// A history repaired after a crash (calls without results answered).
    Repair,
}

impl CheckpointKind {
    /// The word the log and the CLI show.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Compaction => "compaction",
            CheckpointKind::ThinkingCleanup => "thinking_cleanup",
            CheckpointKind::Repair => "repair",
        }
    }
}

/// The settings a role's turn started with: a snapshot taken when the turn begins, logged, and used
/// for the whole turn (a `settings.set` applies from the next one). Every field has a default so an
/// older, shorter snapshot still reads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TurnSettings {
    /// The provider's name in the configuration.
    pub provider: String,
    /// The provider's base URL.
    pub server: String,
    /// The model the role's requests go to.
    pub model: String,
    /// The compaction trigger, percent of the window.
    pub compact_at: u8,
    /// How long `run_command` (and the coder's `verify`) may run before it is killed, in seconds.
    pub command_timeout_s: u64,
    /// The command that checks the coder's work, when configured.
    pub verify: Option<String>,
    /// The tools the role may use this turn.
    pub tools: Vec<ToolName>,
    /// Extended thinking's budget (the role's `thinking_budget`), sent only to Anthropic.
    pub thinking_budget: Option<u32>,
    /// The role's `max_output_tokens`.
    pub max_output_tokens: Option<u32>,
}

/// A short record of one tool call — what was called with what, and how it ended. The caller's
/// receipts travel with a delegation so the teammate knows what was already read, written and run;
/// the full result, when archived, is named by `evidence_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Receipt {
    /// The tool called.
    pub tool: ToolName,
    /// The arguments on one line, shortened.
    pub arguments: String,
    /// Whether the call succeeded.
    pub ok: bool,
    /// The result on one line, shortened; `(incomplete)` leads when the output was cut off.
    pub outcome: String,
    /// The evidence item holding the full result, when it was too large to keep whole in the history.
    pub evidence_id: Option<String>,
}

impl Record {
    /// The role the record belongs to (for an event, the event's role).
    pub fn role(&self) -> &Role {
        match self {
            Record::Message { role, .. }
            | Record::Checkpoint { role, .. }
            | Record::Settings { role, .. }
            | Record::Receipt { role, .. } => role,
            Record::Event { event } => &event.role,
        }
    }
}
