//! The settings agentd remembers, each a type: one place names every setting, its stored key and the
//! type of its value.
//!
//! Settings live in the store as `key → JSON`. A key is built here from what it is about (a
//! [`Setting`] such as [`CompactAt`]), never with a `format!` at the call site, and the value read back
//! is the setting's own type ([`Setting::Value`]), never a `serde_json::Value` to be picked apart: two
//! rooms can neither spell one setting two ways nor read it as two types.

use crate::calibration::Calibration;
use agentd_protocol::rpc::JobStatus;
use agentd_protocol::{Gauge, Role, Window};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The stored spelling of a setting's key: made only by a [`Setting`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SettingKey(String);

impl SettingKey {
    /// The key as the store spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SettingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A remembered setting: where it is kept and what its value is.
pub trait Setting {
    /// The type of its value.
    type Value: Serialize + DeserializeOwned;
    /// Its key in the store.
    fn key(&self) -> SettingKey;
}

macro_rules! setting {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty),* } => $value:ty, $($fmt:tt)*) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<'a> {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl Setting for $name<'_> {
            type Value = $value;
            fn key(&self) -> SettingKey {
                let $name { $($field),* } = self;
                SettingKey(format!($($fmt)*))
            }
        }
    };
}

setting! {
    /// A role's `compact_at` percentage (`settings.set`), for every server and model.
    CompactAt {
        /// The role it is set for.
        role: &'a Role
    } => u64, "compact_at/{role}"
}

setting! {
    /// A role's `compact_at` percentage on one server/model pair: wins over the role's own.
    CompactAtOn {
        /// The role it is set for.
        role: &'a Role,
        /// The provider's base URL.
        server: &'a str,
        /// The model's name, as the configuration gives it.
        model: &'a str
    } => u64, "compact_at/{role}/{server}/{model}"
}

setting! {
    /// The window a pair had before a usage report clamped it.
    WindowBeforeClamp {
        /// The provider's base URL.
        server: &'a str,
        /// The model's name.
        model: &'a str
    } => Window, "window_before_clamp/{server}/{model}"
}

setting! {
    /// A server/model pair's calibration from usage reports.
    PairCalibration {
        /// The provider's base URL.
        server: &'a str,
        /// The model's name.
        model: &'a str
    } => Calibration, "calibration/{server}/{model}"
}

setting! {
    /// A task role's last gauge.
    LastGauge {
        /// The id of the task whose role was measured.
        task_id: &'a str,
        /// The role measured.
        role: &'a Role
    } => Gauge, "gauge/{task_id}/{role}"
}

setting! {
    /// When a task role's thinking was last cleared.
    LastThinkingCleanup {
        /// The id of the task the role works in.
        task_id: &'a str,
        /// The role whose thinking was cleared.
        role: &'a Role
    } => ThinkingLatch, "thinking_latch/{task_id}/{role}"
}

setting! {
    /// A cron job's runs: how many, and how the last went.
    JobRuns {
        /// The job's name in the configuration.
        name: &'a str
    } => JobStatus, "job/{name}"
}

setting! {
    /// What a server/model's usage reports taught of its prompt cache (see [`crate::cache`]).
    LearnedPromptCache {
        /// The provider's base URL.
        server: &'a str,
        /// The model's name.
        model: &'a str
    } => Option<crate::cache::Learned>, "prompt_cache/{server}/{model}"
}

setting! {
    /// Where a task role's next compaction comes, as its provider's prompt cache priced it: kept so a
    /// restarted daemon, or the node that takes the task over, goes on with it.
    PricedTrigger {
        /// The id of the task the role works in.
        task_id: &'a str,
        /// The role.
        role: &'a Role
    } => Option<Priced>, "priced_trigger/{task_id}/{role}"
}

/// The value of [`PricedTrigger`]: the trigger, and the server/model it was priced for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priced {
    /// The provider's base URL.
    pub server: String,
    /// The model's name.
    pub model: String,
    /// The trigger, in tokens.
    pub at: agentd_protocol::Tokens,
}

/// The value of [`LastThinkingCleanup`]: the checkpoint a cleanup wrote, how much it removed, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkingLatch {
    /// The sequence number of the checkpoint the cleanup recorded.
    pub checkpoint_seq: u64,
    /// How many thinking blocks it removed.
    pub blocks_removed: usize,
    /// When, RFC 3339.
    pub at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_stored_spelling() {
        let coder = Role::Coder;
        assert_eq!(CompactAt { role: &coder }.key().as_str(), "compact_at/coder");
        let on = CompactAtOn { role: &coder, server: "http://s/v1", model: "m" };
        assert_eq!(on.key().to_string(), "compact_at/coder/http://s/v1/m");
        assert_eq!(WindowBeforeClamp { server: "s", model: "m" }.key().as_str(), "window_before_clamp/s/m");
        assert_eq!(PairCalibration { server: "s", model: "m" }.key().as_str(), "calibration/s/m");
        assert_eq!(LastGauge { task_id: "t", role: &Role::Lead }.key().as_str(), "gauge/t/lead");
        let latch = LastThinkingCleanup { task_id: "t", role: &coder };
        assert_eq!(latch.key().as_str(), "thinking_latch/t/coder");
        assert_eq!(JobRuns { name: "v" }.key().as_str(), "job/v");
        assert_eq!(LearnedPromptCache { server: "s", model: "m" }.key().as_str(), "prompt_cache/s/m");
        assert_eq!(PricedTrigger { task_id: "t", role: &coder }.key().as_str(), "priced_trigger/t/coder");
    }

    #[test]
    fn the_latch_keeps_its_stored_shape() {
        let latch = ThinkingLatch { checkpoint_seq: 4, blocks_removed: 2, at: "2026-01-01T00:00:00Z".into() };
        let stored =
            serde_json::json!({"checkpoint_seq": 4, "blocks_removed": 2, "at": "2026-01-01T00:00:00Z"});
        assert_eq!(serde_json::to_value(&latch).unwrap(), stored);
        assert_eq!(serde_json::from_value::<ThinkingLatch>(stored).unwrap(), latch);
    }
}
