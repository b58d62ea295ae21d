//! The context gauge: what a role's last request held, by category, against its window.

use crate::role::Role;
use crate::tokens::{CountSource, Standing, Tokens};
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The gauge of one role of one task: the last request the fitter measured for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Gauge {
    pub role: Role,
    pub model: String,
    /// What measured the request: the model's tokenizer, the server's counting endpoint, or an estimate.
    pub count_source: CountSource,
    /// How the server's usage reports have calibrated that count, once they have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Standing>,
    /// The measure in words: `estimate, calibrated from 12 usage reports, ±1.4 %`.
    #[serde(default)]
    pub measured_by: String,
    pub window: Tokens,
    pub window_source: WindowSource,
    pub tokens: Tokens,
    pub estimated: bool,
    pub categories: Categories,
    pub compact_at: u8,
    pub trigger_tokens: Tokens,
    pub destination_tokens: Tokens,
    pub free_tokens: Tokens,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Categories {
    pub system: Tokens,
    pub tools: Tokens,
    pub objective: Tokens,
    pub checkpoint: Tokens,
    pub observations: Tokens,
    pub files: Tokens,
    /// Recent messages kept verbatim (thinking excluded).
    pub messages: Tokens,
    pub thinking: Tokens,
}
