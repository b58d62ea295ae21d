//! What changed between two readings of `agentd.toml`, key by key — what `agentd reload` (and
//! SIGHUP) says it applied — and which changes wait for the next start.
//!
//! Pure: both texts are TOML that parsed; the diff is of their values, dotted as the file is read
//! (`providers.local.base_url`), an array (such as `scheduler.jobs`) as one value.

use agentd_protocol::rpc::{ConfigApplies, ConfigChange};
use std::collections::BTreeMap;

/// The sections a running daemon cannot take up: what they set up (the HTTP listener, the fleet
/// connection, the scheduler's jobs and zone, the trace exporter) is made once, at the start.
const AT_START: [&str; 4] = ["http", "cluster", "scheduler", "telemetry"];

/// Every key whose value differs between `before` and `after`, in key order; a text that is not
/// TOML reads as empty.
pub fn changes(before: &str, after: &str) -> Vec<ConfigChange> {
    let (old, new) = (flat(before), flat(after));
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|key| ConfigChange {
            key: key.clone(),
            before: old.get(key).cloned(),
            after: new.get(key).cloned(),
            applies: applies(key),
        })
        .collect()
}

/// When a change to `key` takes effect.
pub fn applies(key: &str) -> ConfigApplies {
    let section = key.split('.').next().unwrap_or("");
    if AT_START.contains(&section) {
        ConfigApplies::NextStart
    } else {
        ConfigApplies::Now
    }
}

/// The document's values by dotted key, each as TOML writes it.
fn flat(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(table) = text.parse::<toml::Table>() {
        walk("", &toml::Value::Table(table), &mut out);
    }
    out
}

fn walk(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, String>) {
    match value {
        toml::Value::Table(table) if !table.is_empty() || prefix.is_empty() => {
            for (k, v) in table {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                walk(&key, v, out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_changed_key_is_named_with_its_values_and_when_it_applies() {
        let before = "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\n\
                      [team.lead]\nprovider = \"local\"\nmodel = \"m\"\n\n[http]\nlisten = \"127.0.0.1:1\"\n";
        let after = "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:2/v1\"\n\n\
                     [team.lead]\nprovider = \"local\"\nmodel = \"m\"\ncompact_at = 70\n\n[http]\nlisten = \"127.0.0.1:2\"\n";
        let c = changes(before, after);
        let keys: Vec<(&str, Option<&str>, Option<&str>, ConfigApplies)> =
            c.iter().map(|c| (c.key.as_str(), c.before.as_deref(), c.after.as_deref(), c.applies)).collect();
        assert_eq!(
            keys,
            [
                ("http.listen", Some("\"127.0.0.1:1\""), Some("\"127.0.0.1:2\""), ConfigApplies::NextStart),
                (
                    "providers.local.base_url",
                    Some("\"http://127.0.0.1:1/v1\""),
                    Some("\"http://127.0.0.1:2/v1\""),
                    ConfigApplies::Now
                ),
                ("team.lead.compact_at", None, Some("70"), ConfigApplies::Now),
            ]
        );
        assert!(changes(after, after).is_empty());
        assert!(changes("# only a comment\n", "# another\n").is_empty(), "comments are no change");
    }
}
