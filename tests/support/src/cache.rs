//! The scripted server's prompt cache, modelled on OpenAI's and Anthropic's: a request reads from the
//! cache the longest prefix it shares with any earlier request the server accepted, at message
//! granularity, in prompt order — the tool definitions (a changed tool list shares nothing), then
//! Anthropic's top-level `system`, then the leading messages that are JSON-equal (key order and
//! `cache_control` marks aside). The prefix is priced in the server's own tokens with the same
//! per-part rules that count the request ([`Parts`]); a prefix under [`MIN_CACHED_PREFIX`] tokens
//! reads nothing (OpenAI's rule). The reply priming is never part of it.
//!
//! A request refused as over the window was never processed: it reads nothing and leaves nothing in
//! the cache. Entries never expire, and `tool_choice` is not part of the prefix.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::count::Parts;

/// The shortest prefix a provider caches (OpenAI: 1,024 tokens); a shorter one counts as 0 cached.
pub const MIN_CACHED_PREFIX: u64 = 1024;

/// A request's prompt as the cache sees it: one key per part, in prompt order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prompt {
    tools: u64,
    system: u64,
    messages: Vec<u64>,
}

impl Prompt {
    pub fn of(body: &Value) -> Prompt {
        Prompt {
            tools: key(body.get("tools")),
            system: key(body.get("system").filter(|s| !s.is_null())),
            messages: body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|m| key(Some(m)))
                .collect(),
        }
    }

    /// The tokens of the prefix this prompt shares with `earlier`, priced by this prompt's `parts`.
    fn shared_tokens(&self, parts: &Parts, earlier: &Prompt) -> u64 {
        if self.tools != earlier.tools {
            return 0;
        }
        let mut shared = parts.tools;
        if self.system != earlier.system {
            return shared;
        }
        shared += parts.system;
        let same = self.messages.iter().zip(&earlier.messages).take_while(|(a, b)| a == b).count();
        shared + parts.messages.iter().take(same).sum::<u64>()
    }
}

/// The cached tokens of a request: its longest prefix shared with any of `earlier`, or 0 when that
/// is under [`MIN_CACHED_PREFIX`].
pub(crate) fn cached_tokens(prompt: &Prompt, parts: &Parts, earlier: &[Prompt]) -> u64 {
    let best = earlier.iter().map(|e| prompt.shared_tokens(parts, e)).max().unwrap_or(0);
    if best < MIN_CACHED_PREFIX {
        0
    } else {
        best
    }
}

/// A key for a part: equal for JSON-equal values, whatever their key order and cache marks.
fn key(part: Option<&Value>) -> u64 {
    let mut h = DefaultHasher::new();
    match part {
        None => 0u8.hash(&mut h),
        Some(v) => {
            1u8.hash(&mut h);
            hash_value(v, &mut h);
        }
    }
    h.finish()
}

fn hash_value(v: &Value, h: &mut DefaultHasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            for item in items {
                hash_value(item, h);
            }
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().filter(|k| k.as_str() != "cache_control").collect();
            keys.sort();
            (5u8, keys.len()).hash(h);
            for k in keys {
                k.hash(h);
                hash_value(&map[k], h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cached(body: &Value, earlier: &[&Value]) -> u64 {
        let earlier: Vec<Prompt> = earlier.iter().map(|b| Prompt::of(b)).collect();
        cached_tokens(&Prompt::of(body), &Parts::of(body), &earlier)
    }

    fn long(tag: &str) -> String {
        (0..400).map(|i| format!("{tag} line {i} of the file\n")).collect()
    }

    #[test]
    fn the_longest_shared_prefix_of_any_earlier_request_is_cached() {
        let tools = json!([{"type": "function", "function": {"name": "read_file"}}]);
        let first = json!({"tools": tools, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": long("a")},
        ]});
        let second = json!({"tools": tools, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": long("a")},
            {"role": "user", "content": long("b")},
        ]});
        let parts = Parts::of(&second);
        let prefix = parts.tools + parts.messages[0] + parts.messages[1];
        assert!(prefix >= MIN_CACHED_PREFIX, "{prefix}");
        assert_eq!(cached(&second, &[&first]), prefix);
        // The best of several: an unrelated request shares nothing, the first shares the prefix.
        let other = json!({"messages": [{"role": "user", "content": "hello"}]});
        assert_eq!(cached(&second, &[&other, &first]), prefix);
        // Key order and cache marks do not matter.
        let marked = json!({"tools": tools, "messages": [
            {"content": "be brief", "role": "system"},
            {"role": "user", "content": long("a"), "cache_control": {"type": "ephemeral"}},
        ]});
        assert_eq!(cached(&second, &[&marked]), prefix);
        // A changed message ends the prefix there.
        let changed = json!({"tools": tools, "messages": [
            {"role": "system", "content": "be brief!"},
            {"role": "user", "content": long("a")},
        ]});
        assert_eq!(cached(&second, &[&changed]), 0, "the tools alone are under the minimum");
    }

    #[test]
    fn a_prefix_under_the_minimum_reads_nothing() {
        let first = json!({"messages": [{"role": "user", "content": "short"}]});
        let second = json!({"messages": [
            {"role": "user", "content": "short"},
            {"role": "user", "content": long("b")},
        ]});
        assert!(Parts::of(&first).messages[0] < MIN_CACHED_PREFIX);
        assert_eq!(cached(&second, &[&first]), 0);
        assert_eq!(cached(&second, &[]), 0);
    }

    #[test]
    fn a_changed_tool_list_shares_nothing() {
        let messages = json!([{"role": "user", "content": long("a")}]);
        let first = json!({"tools": [{"name": "read_file"}], "messages": messages});
        let second = json!({"tools": [{"name": "read_file"}, {"name": "finish"}], "messages": messages});
        let no_tools = json!({"messages": messages});
        assert_eq!(cached(&second, &[&first]), 0);
        assert_eq!(cached(&no_tools, &[&first]), 0);
        let parts = Parts::of(&first);
        assert_eq!(cached(&first, &[&first]), parts.tools + parts.messages[0]);
    }

    #[test]
    fn anthropic_system_comes_after_the_tools_and_before_the_messages() {
        let tools = json!([{"name": "read_file", "input_schema": {"type": "object"}}]);
        let first = json!({"tools": tools, "system": long("sys"), "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
        ]});
        let other_system = json!({"tools": tools, "system": long("other"), "messages": first["messages"]});
        assert_eq!(cached(&other_system, &[&first]), 0, "only the tools are shared");
        let marked = json!({
            "tools": tools,
            "system": [{"type": "text", "text": long("sys"), "cache_control": {"type": "ephemeral"}}],
            "messages": first["messages"],
        });
        // A string system and the same text as a block are different JSON: the prefix stops there.
        assert_eq!(cached(&marked, &[&first]), 0);
        let parts = Parts::of(&first);
        assert_eq!(cached(&first, &[&first]), parts.tools + parts.system + parts.messages[0]);
    }
}
