//! The keys of the daemon's settings tree: one place names every setting agentd remembers.
//!
//! Settings live in the store as `key → JSON`; a key is built here from what it is about, never
//! with a `format!` at the call site, so two rooms can never spell one setting two ways.

use agentd_protocol::Role;
use std::fmt;

/// A remembered setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKey<'a> {
    /// A role's `compact_at` (`settings.set`), for every server and model.
    CompactAt {
        /// The role it is set for.
        role: &'a Role,
    },
    /// A role's `compact_at` on one server/model pair: wins over the role's own.
    CompactAtOn {
        /// The role it is set for.
        role: &'a Role,
        /// The provider's base URL.
        server: &'a str,
        /// The model's name, as the configuration gives it.
        model: &'a str,
    },
    /// The window a pair had before a usage report clamped it.
    WindowBeforeClamp {
        /// The provider's base URL.
        server: &'a str,
        /// The model's name.
        model: &'a str,
    },
    /// A server/model pair's calibration from usage reports.
    Calibration {
        /// The provider's base URL.
        server: &'a str,
        /// The model's name.
        model: &'a str,
    },
    /// A task role's last gauge.
    Gauge {
        /// The id of the task whose role was measured.
        task_id: &'a str,
        /// The role measured.
        role: &'a Role,
    },
    /// A task role's thinking latch (when its thinking was last cleared).
    ThinkingLatch {
        /// The id of the task the role works in.
        task_id: &'a str,
        /// The role whose thinking was cleared.
        role: &'a Role,
    },
    /// A cron job's last run.
    Job {
        /// The job's name in the configuration.
        name: &'a str,
    },
}

impl fmt::Display for SettingKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingKey::CompactAt { role } => write!(f, "compact_at/{role}"),
            SettingKey::CompactAtOn { role, server, model } => {
                write!(f, "compact_at/{role}/{server}/{model}")
            }
            SettingKey::WindowBeforeClamp { server, model } => {
                write!(f, "window_before_clamp/{server}/{model}")
            }
            SettingKey::Calibration { server, model } => write!(f, "calibration/{server}/{model}"),
            SettingKey::Gauge { task_id, role } => write!(f, "gauge/{task_id}/{role}"),
            SettingKey::ThinkingLatch { task_id, role } => write!(f, "thinking_latch/{task_id}/{role}"),
            SettingKey::Job { name } => write!(f, "job/{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_stored_spelling() {
        let coder = Role::Coder;
        assert_eq!(SettingKey::CompactAt { role: &coder }.to_string(), "compact_at/coder");
        let on = SettingKey::CompactAtOn { role: &coder, server: "http://s/v1", model: "m" };
        assert_eq!(on.to_string(), "compact_at/coder/http://s/v1/m");
        assert_eq!(SettingKey::Calibration { server: "s", model: "m" }.to_string(), "calibration/s/m");
        assert_eq!(SettingKey::Gauge { task_id: "t", role: &Role::Lead }.to_string(), "gauge/t/lead");
        assert_eq!(SettingKey::Job { name: "v" }.to_string(), "job/v");
    }
}
