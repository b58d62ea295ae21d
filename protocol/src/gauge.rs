//! The context gauge: what a role's last request held, by category, against its window.

use crate::role::Role;
use crate::tokens::{CountSource, Standing, Tokens};
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The gauge of one role of one task: the last request the fitter measured for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Gauge {
    /// The role measured.
    pub role: Role,
    /// The model the role's requests go to, as its configuration names it.
    pub model: String,
    /// What measured the request: the model's tokenizer, the server's counting endpoint, or an estimate.
    pub count_source: CountSource,
    /// How the server's usage reports have calibrated that count, once they have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Standing>,
    /// The measure in words: `estimate, calibrated from 12 usage reports, ±1.4 %`.
    #[serde(default)]
    pub measured_by: String,
    /// The model's context window, in tokens.
    pub window: Tokens,
    /// Where `window` came from: declared by the server, stated by a refusal, corrected from a usage report,
    /// or assumed.
    pub window_source: WindowSource,
    /// The request's size as the fitter measured it: the role's counter, calibrated when usage reports exist,
    /// with the calibration's margin added. After a compaction it is the rebuilt request's size.
    pub tokens: Tokens,
    /// True when no tokenizer of the model's own measured the request (an estimate not yet confirmed by usage
    /// reports); `agentd context` marks it with `~`.
    pub estimated: bool,
    /// Where the request's tokens went, by category. They add up to `tokens` but for the few tokens the wire
    /// format adds to prime the reply.
    pub categories: Categories,
    /// The compaction trigger as a percentage of the window (the role's `compact_at` in effect, default 80).
    pub compact_at: u8,
    /// The compaction trigger in tokens: `compact_at` percent of the window, lowered when needed to leave
    /// room for the answer's `max_output_tokens` — or, when the provider declares a prompt cache and
    /// the role has compacted, where the last compaction priced the next one (`trigger_priced`). A
    /// request above it is compacted before it is sent.
    pub trigger_tokens: Tokens,
    /// Whether the provider's prompt cache priced `trigger_tokens` below where `compact_at` puts it
    /// (never below the destination; `compaction_finished`'s `next_trigger_tokens`).
    #[serde(default)]
    pub trigger_priced: bool,
    /// The size a compaction aims for, in tokens: at most half the window, and at least five percent of the
    /// window below the trigger.
    pub destination_tokens: Tokens,
    /// The window less the request's size, in tokens: the room left for the answer and for the history to
    /// grow.
    pub free_tokens: Tokens,
    /// The prompt cache the role's compactions are priced with, when its server has one: declared, or
    /// learned from its usage reports (`cache_learned`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<GaugeCache>,
}

/// The prompt cache a role's compactions are priced with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GaugeCache {
    /// What a cached prompt token costs relative to an uncached one.
    pub read_factor: f64,
    /// The shortest prefix it caches, in tokens.
    pub min_tokens: Tokens,
    /// `declared` (`[providers.NAME] cache`, or the kind's own) or `learned` (from usage reports).
    pub source: String,
}

/// A measured request's tokens by what they are, each counted by the role's measure and scaled so that the
/// messages' categories add up to the messages' calibrated size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Categories {
    /// The system prompt.
    pub system: Tokens,
    /// The tool schemas sent with the request.
    pub tools: Tokens,
    /// The project's instructions (`AGENTS.md`), a block of every request (0 when the workspace has none).
    #[serde(default)]
    pub instructions: Tokens,
    /// The durable memory notes, a block of every request (0 when there are none).
    #[serde(default)]
    pub memory: Tokens,
    /// The task's objective, the first user message of every request.
    pub objective: Tokens,
    /// The latest compaction checkpoint's summary (0 before the first compaction).
    pub checkpoint: Tokens,
    /// The unresolved failures carried through compactions (0 when there are none).
    pub observations: Tokens,
    /// The coder's working files: the current text of files it wrote or edited (0 for other roles).
    pub files: Tokens,
    /// Recent messages kept verbatim (thinking excluded).
    pub messages: Tokens,
    /// Provider reasoning (thinking blocks) still in the history.
    pub thinking: Tokens,
}
