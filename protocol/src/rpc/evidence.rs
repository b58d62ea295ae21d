//! The `evidence.*` methods' params and results: listing the evidence archive, one item's metadata,
//! reading one page of an item, and re-hashing every blob. The items and pages themselves are
//! [`crate::evidence`]'s types.

use crate::evidence::{Problem, Unit};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `evidence.list`'s params.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceListParams {
    /// Only this task's evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// Params naming one evidence item (`evidence.get`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceRef {
    /// The item's id (`ev-…`); an unknown one is refused with -32002.
    pub id: String,
}

/// `evidence.read`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceReadParams {
    /// The item's id (`ev-…`); an unknown one is refused with -32002.
    pub id: String,
    /// Where to start, in `unit`s (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// How much, in `unit`s (default 64 KiB of bytes; at most 4 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `bytes` (default) or `lines`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<Unit>,
}

/// `evidence.verify`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifyResult {
    /// Evidence items checked.
    pub checked: u64,
    /// Each one missing or altered.
    pub problems: Vec<Problem>,
}
