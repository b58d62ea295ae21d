//! Context windows are measured, never configured: a window carries where its size came from.

use crate::tokens::Tokens;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What we assume for a server that declares nothing, until a refusal states the limit.
pub const ASSUMED_WINDOW: Tokens = Tokens(256_000);

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
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Declared => "declared",
            WindowSource::Error => "error",
            WindowSource::Usage => "usage",
            WindowSource::Assumed => "assumed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Window {
    pub tokens: Tokens,
    pub source: WindowSource,
}

impl Window {
    pub fn assumed() -> Window {
        Window { tokens: ASSUMED_WINDOW, source: WindowSource::Assumed }
    }
}
