//! Context windows are measured, never configured: a window carries where its size came from.

use crate::tokens::Tokens;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What we assume for a server that declares nothing, until a refusal states the limit.
pub const ASSUMED_WINDOW: Tokens = Tokens(256_000);

/// Where a window's size came from. Windows are never configured: they are probed, learned from refusals and
/// usage reports, and remembered per server and model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// The server declared it (`/v1/models`, `/props`, `/api/show`).
    Declared,
    /// A refusal stated it.
    Error,
    /// A usage report showed the server processing a different amount than we sent.
    Usage,
    /// Nothing was known: [`ASSUMED_WINDOW`].
    Assumed,
}

impl WindowSource {
    /// The source's name on the wire and in the CLI (`declared`, `error`, `usage`, `assumed`).
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Declared => "declared",
            WindowSource::Error => "error",
            WindowSource::Usage => "usage",
            WindowSource::Assumed => "assumed",
        }
    }
}

/// A model's context window: how many tokens a request and its answer may hold together, and where that
/// figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Window {
    /// The window's size in tokens.
    pub tokens: Tokens,
    /// Where the size came from.
    pub source: WindowSource,
}

impl Window {
    /// The window of a server that declares nothing, until a refusal or a usage report teaches better:
    /// [`ASSUMED_WINDOW`] tokens, marked `assumed`.
    pub fn assumed() -> Window {
        Window { tokens: ASSUMED_WINDOW, source: WindowSource::Assumed }
    }
}
