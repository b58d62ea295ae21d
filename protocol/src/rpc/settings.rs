//! What a client may tune per role, and what it may ask a role's server: `settings.get` /
//! `settings.set` (a [`Setting`] for a role, remembered per server and model) and `models.probe`
//! (the role's model's context window, asked again).

use crate::role::Role;
use crate::tokens::Tokens;
use crate::window::WindowSource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A setting a client may read and set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    /// The compaction trigger, percent of the window (1–100).
    CompactAt,
}

impl Setting {
    /// The key's name on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Setting::CompactAt => "compact_at",
        }
    }
}

/// `settings.get`'s and `settings.set`'s params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SettingParams {
    /// The role whose setting it is: `lead`, `coder` or a specialist's name from the configuration.
    pub role: Role,
    /// Which setting.
    pub key: Setting,
    /// `settings.set` only: the new value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

/// Params naming one role (`models.probe`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RoleParams {
    /// The role, as the configuration names it; a role the team lacks is refused with -32602.
    pub role: Role,
}

/// `settings.get` / `settings.set`'s answer: the value in effect for the role's server and model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SettingResult {
    /// The role the setting is for.
    pub role: Role,
    /// The setting.
    pub key: Setting,
    /// The value in effect, a percentage from 1 to 100: the one set for the role on its current server and
    /// model, else the one set for the role, else the role's `compact_at` in the configuration, else 80.
    pub value: u8,
    /// The base URL of the role's provider, which the value is remembered for.
    pub server: String,
    /// The role's model, which the value is remembered for.
    pub model: String,
}

/// `models.probe`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeResult {
    /// The role probed.
    pub role: Role,
    /// The base URL of the role's provider.
    pub server: String,
    /// The model probed.
    pub model: String,
    /// The window now believed, in tokens.
    pub window: Tokens,
    /// Where it came from: `declared` when the server declared it, else the window learned before (or
    /// `assumed`).
    pub window_source: WindowSource,
}
