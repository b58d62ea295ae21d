//! A request's content identity: its head (system prompt, tools, tool choice) and each message by
//! its content hash — the same keys the counter caches by, so the fitter gets a request's count and
//! fingerprint from one pass of hashing.

use super::hash::{message_key, system_key, tool_key};
use super::measure::tool_json;
use agentd_protocol::ChatRequest;

/// What identifies a request's content: its system prompt and tools (`head`), and each message, by
/// the counter's content hashes. One request extends another when the heads are equal and the
/// other's messages are the start of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// A hash of the system prompt, the tool schemas and whether tools are forbidden (`tool_choice: "none"`).
    pub head: u64,
    /// Each message's content hash, in order.
    pub messages: Vec<u64>,
}

impl Fingerprint {
    /// The fingerprint of `req`.
    pub fn of(req: &ChatRequest) -> Fingerprint {
        Fingerprint::from_keys(RequestKeys::of(req), req.tool_choice_none)
    }

    pub(super) fn from_keys(keys: RequestKeys, tool_choice_none: bool) -> Fingerprint {
        let mut head = keys.system.unwrap_or(0) ^ 0x9e37_79b9_7f4a_7c15;
        for k in &keys.tools {
            head = head.rotate_left(5) ^ k;
        }
        head ^= u64::from(tool_choice_none);
        Fingerprint { head, messages: keys.messages }
    }

    /// Whether `self` (a later request) starts with everything `earlier` carried.
    pub fn extends(&self, earlier: &Fingerprint) -> bool {
        self.head == earlier.head && self.messages.starts_with(&earlier.messages)
    }
}

/// The cache keys of a request's parts.
pub(super) struct RequestKeys {
    pub(super) system: Option<u64>,
    pub(super) tool_json: Vec<String>,
    pub(super) tools: Vec<u64>,
    pub(super) messages: Vec<u64>,
}

impl RequestKeys {
    pub(super) fn of(req: &ChatRequest) -> RequestKeys {
        let tool_json: Vec<String> = req.tools.iter().map(tool_json).collect();
        RequestKeys {
            system: (!req.system.is_empty()).then(|| system_key(&req.system)),
            tools: tool_json.iter().map(|j| tool_key(j)).collect(),
            tool_json,
            messages: req.messages.iter().map(message_key).collect(),
        }
    }
}
