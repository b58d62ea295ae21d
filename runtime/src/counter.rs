//! Counting a request in tokens, the way the provider will see it: every message with its framing,
//! thinking that is sent back, tool schemas, images by the provider's rule.
//!
//! Known OpenAI models are measured with their own BPE (tiktoken-rs singletons, `encode_ordinary`);
//! anything else is estimated at one token per three bytes and marked `estimated`, so it can never
//! certify that a request fits. Each message's count is cached by a hash of its content, so a fit
//! check after one appended message tokenises only that message.

use crate::provider::{ChatRequest, ToolSpec};
use agentd_policies::{Count, Message, Part, Role};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Mutex;

/// Framing tokens of every message (`<|im_start|>`, role separator, `<|im_end|>` …).
const MESSAGE_FRAMING: u64 = 4;
/// Framing of one tool call inside an assistant message.
const TOOL_CALL_FRAMING: u64 = 8;
/// Framing of one tool result.
const TOOL_RESULT_FRAMING: u64 = 4;
/// Framing of one tool definition.
const TOOL_SPEC_FRAMING: u64 = 8;
/// The priming of the reply (`<|im_start|>assistant<|message|>`).
const REPLY_PRIMING: u64 = 3;
/// An image, by OpenAI's high-detail rule for a typical 1024×1024 picture: 85 + 4 tiles × 170.
const IMAGE_TOKENS: u64 = 765;
/// The cache is dropped whole when it grows past this many entries.
const CACHE_LIMIT: usize = 200_000;

/// Which tokenizer measures a model's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tokenizer {
    /// GPT-4o, GPT-4.1, GPT-5, o1/o3/o4.
    O200k,
    /// GPT-4, GPT-3.5, text-embedding-3.
    Cl100k,
    /// No tokenizer of ours knows the model: bytes / 3, rounded up, marked estimated.
    Estimate,
}

impl Tokenizer {
    pub fn as_str(self) -> &'static str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
            Tokenizer::Estimate => "estimate",
        }
    }

    fn count(self, text: &str) -> Count {
        match self {
            Tokenizer::O200k => {
                Count::measured(tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len() as u64)
            }
            Tokenizer::Cl100k => {
                Count::measured(tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u64)
            }
            Tokenizer::Estimate => Count::estimate_bytes(text.len()),
        }
    }

    /// A fixed number of framing tokens, marked as this tokenizer marks its counts.
    fn fixed(self, tokens: u64) -> Count {
        match self {
            Tokenizer::Estimate => Count::estimated(tokens),
            _ => Count::measured(tokens),
        }
    }
}

/// The tokenizer for a model name (a `provider/` prefix, as in `openai/gpt-4o`, is ignored).
pub fn tokenizer_for(model: &str) -> Tokenizer {
    let name = model.trim();
    let name = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    let o_series = ["o1", "o3", "o4"]
        .iter()
        .any(|p| name == *p || name.strip_prefix(p).is_some_and(|rest| rest.starts_with(['-', '.', '_'])));
    if o_series || ["gpt-4o", "gpt-4.1", "gpt-5", "chatgpt-4o"].iter().any(|p| name.starts_with(p)) {
        Tokenizer::O200k
    } else if ["gpt-4", "gpt-3.5", "text-embedding-3"].iter().any(|p| name.starts_with(p)) {
        Tokenizer::Cl100k
    } else {
        Tokenizer::Estimate
    }
}

/// A request's count, by category. `total = system + tools + messages + reply priming`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestCount {
    pub total: Count,
    pub system: Count,
    pub tools: Count,
    pub messages: Count,
    /// The part of `messages` that is thinking (reasoning sent back to the provider).
    pub thinking: Count,
}

/// One cached measurement.
#[derive(Debug, Clone, Copy)]
struct Entry {
    total: Count,
    thinking: Count,
}

/// Counts requests for one model, caching each message's count by a hash of its content.
#[derive(Debug)]
pub struct TokenCounter {
    tokenizer: Tokenizer,
    cache: Mutex<HashMap<u64, Entry, BuildHasherDefault<IdentityHasher>>>,
}

impl TokenCounter {
    pub fn new(model: &str) -> TokenCounter {
        TokenCounter { tokenizer: tokenizer_for(model), cache: Mutex::new(HashMap::default()) }
    }

    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// The tokens of a bare text (no framing).
    pub fn count_text(&self, text: &str) -> Count {
        self.tokenizer.count(text)
    }

    /// One message as sent: framing + role + each part. Cached by content.
    pub fn count_message(&self, m: &Message) -> Count {
        let key = message_key(m);
        if let Some(entry) = self.lookup(key) {
            return entry.total;
        }
        let entry = self.measure_message(m);
        self.store(&[(key, entry)]);
        entry.total
    }

    /// The whole request: the system prompt as a message, every message, the tool definitions and
    /// the reply priming. Only messages and tools not seen before are tokenised.
    pub fn count_request(&self, req: &ChatRequest) -> RequestCount {
        let system_key = (!req.system.is_empty()).then(|| system_key(&req.system));
        let tool_json: Vec<String> = req.tools.iter().map(tool_json).collect();
        let tool_keys: Vec<u64> = tool_json.iter().map(|j| tool_key(j)).collect();
        let message_keys: Vec<u64> = req.messages.iter().map(message_key).collect();

        // One pass under the lock for the hits; the misses are measured outside it.
        let (system, mut tools, mut messages) = {
            let cache = self.lock();
            let get = |k: &u64| cache.get(k).copied();
            (
                system_key.map(|k| get(&k)),
                tool_keys.iter().map(get).collect::<Vec<_>>(),
                message_keys.iter().map(get).collect::<Vec<_>>(),
            )
        };
        let mut fresh = Vec::new();
        let system = match (system_key, system) {
            (None, _) => None,
            (Some(_), Some(Some(hit))) => Some(hit),
            (Some(key), _) => {
                let entry = self.measure_system(&req.system);
                fresh.push((key, entry));
                Some(entry)
            }
        };
        for (i, slot) in tools.iter_mut().enumerate() {
            if slot.is_none() {
                let entry = self.measure_tool(&tool_json[i]);
                fresh.push((tool_keys[i], entry));
                *slot = Some(entry);
            }
        }
        for (i, slot) in messages.iter_mut().enumerate() {
            if slot.is_none() {
                let entry = self.measure_message(&req.messages[i]);
                fresh.push((message_keys[i], entry));
                *slot = Some(entry);
            }
        }
        if !fresh.is_empty() {
            self.store(&fresh);
        }

        let mut count = RequestCount {
            system: system.map_or_else(Count::default, |e| e.total),
            ..RequestCount::default()
        };
        for entry in tools.into_iter().flatten() {
            count.tools += entry.total;
        }
        let (mut sum, mut thinking, mut estimated) = (0u64, 0u64, false);
        for entry in messages.into_iter().flatten() {
            sum += entry.total.tokens.0;
            thinking += entry.thinking.tokens.0;
            estimated |= entry.total.estimated;
        }
        count.messages = Count { tokens: agentd_policies::Tokens(sum), estimated };
        count.thinking = Count { tokens: agentd_policies::Tokens(thinking), estimated };
        count.total = count.system + count.tools + count.messages + self.tokenizer.fixed(REPLY_PRIMING);
        count
    }

    fn measure_message(&self, m: &Message) -> Entry {
        let t = self.tokenizer;
        let mut total = t.fixed(MESSAGE_FRAMING) + t.count(m.role.as_str());
        let mut thinking = t.fixed(0);
        for part in &m.parts {
            match part {
                Part::Text { text } => total += t.count(text),
                Part::Thinking { text, signature, .. } => {
                    let mut c = t.count(text);
                    if let Some(signature) = signature {
                        c += t.count(signature);
                    }
                    thinking += c;
                    total += c;
                }
                Part::ToolCall { name, arguments, .. } => {
                    total += t.count(name) + t.count(arguments) + t.fixed(TOOL_CALL_FRAMING);
                }
                Part::ToolResult { call_id, content, .. } => {
                    total += t.count(call_id) + t.count(content) + t.fixed(TOOL_RESULT_FRAMING);
                }
                // The provider's rule, not ours: never a measurement.
                Part::Image { .. } => total += Count::estimated(IMAGE_TOKENS),
            }
        }
        Entry { total, thinking }
    }

    fn measure_system(&self, system: &str) -> Entry {
        let t = self.tokenizer;
        let total = t.fixed(MESSAGE_FRAMING) + t.count(Role::System.as_str()) + t.count(system);
        Entry { total, thinking: t.fixed(0) }
    }

    fn measure_tool(&self, json: &str) -> Entry {
        let t = self.tokenizer;
        Entry { total: t.count(json) + t.fixed(TOOL_SPEC_FRAMING), thinking: t.fixed(0) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry, BuildHasherDefault<IdentityHasher>>> {
        // A panic elsewhere cannot leave a half-written count: entries are inserted whole.
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lookup(&self, key: u64) -> Option<Entry> {
        self.lock().get(&key).copied()
    }

    fn store(&self, entries: &[(u64, Entry)]) {
        let mut cache = self.lock();
        if cache.len() + entries.len() > CACHE_LIMIT {
            cache.clear();
        }
        cache.extend(entries.iter().copied());
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.lock().len()
    }
}

// ---------------------------------------------------------------------------------------------
// Content keys

fn message_key(m: &Message) -> u64 {
    let mut h = FoldHasher::new(0);
    m.hash(&mut h);
    h.finish()
}

fn system_key(system: &str) -> u64 {
    let mut h = FoldHasher::new(1);
    system.hash(&mut h);
    h.finish()
}

fn tool_key(json: &str) -> u64 {
    let mut h = FoldHasher::new(2);
    json.hash(&mut h);
    h.finish()
}

/// A tool definition as its JSON schema serialisation (name, description, parameters).
fn tool_json(tool: &ToolSpec) -> String {
    serde_json::to_string(tool).unwrap_or_default()
}

/// A fast 64-bit content hash (folded 64×64→128 multiplication over 16-byte blocks, as in
/// wyhash/foldhash). Hashing a whole history must cost well under a millisecond per million
/// tokens, which SipHash does not manage. Not for adversarial keys: a collision would only misstate
/// one message's count.
struct FoldHasher {
    state: u64,
}

const K0: u64 = 0x2d35_8dcc_aa6c_78a5;
const K1: u64 = 0x8bb8_4b93_962e_acc9;
const K2: u64 = 0x4b33_a62e_d433_d4a3;

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

impl FoldHasher {
    fn new(domain: u64) -> FoldHasher {
        FoldHasher { state: fold_mul(domain ^ K0, K1) }
    }
}

impl Hasher for FoldHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut s = self.state;
        let mut bytes_left = bytes;
        if bytes.len() >= 128 {
            // Four independent lanes, so the multiplications overlap instead of waiting on each other.
            let mut lanes = [s, s ^ K0, s ^ K1, s ^ K2];
            let mut stripes = bytes.chunks_exact(64);
            for stripe in &mut stripes {
                for (lane, block) in lanes.iter_mut().zip(stripe.chunks_exact(16)) {
                    let a = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
                    let b = u64::from_le_bytes(block[8..].try_into().expect("8 bytes"));
                    *lane = fold_mul(a ^ *lane ^ K1, b ^ K2);
                }
            }
            s = fold_mul(lanes[0] ^ K1, lanes[1] ^ K2);
            s = fold_mul(s ^ lanes[2], lanes[3] ^ K0);
            bytes_left = stripes.remainder();
        }
        let mut blocks = bytes_left.chunks_exact(16);
        for block in &mut blocks {
            let a = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
            let b = u64::from_le_bytes(block[8..].try_into().expect("8 bytes"));
            s = fold_mul(a ^ s ^ K1, b ^ K2);
        }
        // The tail, zero-padded, with the length so that padding cannot collide with real zeros.
        let tail = blocks.remainder();
        let mut buf = [0u8; 16];
        buf[..tail.len()].copy_from_slice(tail);
        let a = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let b = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
        self.state = fold_mul(a ^ s ^ K1, b ^ K2 ^ (bytes.len() as u64).wrapping_mul(K0));
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.state = fold_mul(self.state ^ K1, u64::from(i) ^ K2);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.state = fold_mul(self.state ^ K0 ^ i, K2);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold_mul(self.state ^ K2, K0)
    }
}

/// The cache's keys are hashes already.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_policies::Tokens;
    use serde_json::json;

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: "gpt-4o".into(),
            system: "You are terse.".into(),
            messages,
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            }],
            tool_choice_none: false,
            max_tokens: None,
        }
    }

    #[test]
    fn tokenizer_by_model_name() {
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1-nano",
            "gpt-5",
            "gpt-5.1-codex",
            "o1",
            "o3-mini",
            "o4-mini",
            "chatgpt-4o-latest",
            "openai/GPT-4o",
        ] {
            assert_eq!(tokenizer_for(m), Tokenizer::O200k, "{m}");
        }
        for m in ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "text-embedding-3-small"] {
            assert_eq!(tokenizer_for(m), Tokenizer::Cl100k, "{m}");
        }
        for m in ["qwen3-coder", "llama3.1:8b", "o1x", "olmo-2", "deepseek-chat", ""] {
            assert_eq!(tokenizer_for(m), Tokenizer::Estimate, "{m}");
        }
    }

    #[test]
    fn hello_world_is_two_o200k_tokens() {
        let c = TokenCounter::new("gpt-4o");
        assert_eq!(c.tokenizer(), Tokenizer::O200k);
        assert_eq!(c.count_text("hello world"), Count::measured(2));
        let c = TokenCounter::new("gpt-4");
        assert_eq!(c.count_text("hello world"), Count::measured(2));
    }

    #[test]
    fn estimates_are_marked() {
        let c = TokenCounter::new("qwen3-coder");
        assert_eq!(c.tokenizer(), Tokenizer::Estimate);
        let n = c.count_text("hello world");
        assert!(n.estimated);
        assert_eq!(n.tokens, Tokens(4)); // 11 bytes / 3, rounded up
        let m = c.count_message(&Message::user("hello world"));
        assert!(m.estimated);
        // framing 4 + "user" 2 + text 4
        assert_eq!(m.tokens, Tokens(10));
        assert!(c.count_request(&request(vec![Message::user("x")])).total.estimated);
    }

    #[test]
    fn message_count_is_framing_role_and_parts() {
        let c = TokenCounter::new("gpt-4o");
        let text = |s: &str| c.count_text(s).tokens.0;
        let m = Message::new(
            Role::Assistant,
            vec![
                Part::Thinking { text: "let me look".into(), signature: Some("sig".into()), redacted: false },
                Part::Text { text: "Reading it.".into() },
                Part::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.rs"}"#.into(),
                },
            ],
        );
        let expected = 4
            + text("assistant")
            + text("let me look")
            + text("sig")
            + text("Reading it.")
            + text("read_file")
            + text(r#"{"path":"a.rs"}"#)
            + 8;
        assert_eq!(c.count_message(&m), Count::measured(expected));
        let r = Message::tool_result("c1", "fn main() {}", false);
        assert_eq!(
            c.count_message(&r),
            Count::measured(4 + text("tool") + text("c1") + text("fn main() {}") + 4)
        );
        // Images follow the provider's rule and are estimates.
        let img = Message::new(
            Role::User,
            vec![Part::Image { media_type: "image/png".into(), data: "AAAA".into() }],
        );
        let n = c.count_message(&img);
        assert!(n.estimated);
        assert_eq!(n.tokens, Tokens(4 + text("user") + 765));
    }

    #[test]
    fn request_count_by_category() {
        let c = TokenCounter::new("gpt-4o");
        let thinking = Message::new(
            Role::Assistant,
            vec![
                Part::Thinking { text: "hmm, think".into(), signature: None, redacted: false },
                Part::Text { text: "ok".into() },
            ],
        );
        let req = request(vec![Message::user("hi"), thinking.clone()]);
        let n = c.count_request(&req);
        assert_eq!(n.system, c.count_message(&Message::system("You are terse.")));
        let tool_tokens = c.count_text(&serde_json::to_string(&req.tools[0]).unwrap()).tokens.0 + 8;
        assert_eq!(n.tools, Count::measured(tool_tokens));
        let messages = c.count_message(&Message::user("hi")) + c.count_message(&thinking);
        assert_eq!(n.messages, messages);
        assert_eq!(n.thinking, c.count_text("hmm, think"));
        assert_eq!(n.total.tokens, n.system.tokens + n.tools.tokens + n.messages.tokens + Tokens(3));
        assert!(!n.total.estimated);
        // No system prompt, no tools: nothing counted for them (nothing is sent).
        let mut bare = req.clone();
        bare.system.clear();
        bare.tools.clear();
        let b = c.count_request(&bare);
        assert_eq!((b.system, b.tools), (Count::default(), Count::default()));
        assert_eq!(b.total.tokens, n.messages.tokens + Tokens(3));
    }

    #[test]
    fn appending_one_message_measures_only_it() {
        let c = TokenCounter::new("gpt-4o");
        let mut history: Vec<Message> =
            (0..500).map(|i| Message::user(format!("message number {i}"))).collect();
        let first = c.count_request(&request(history.clone()));
        let cached = c.cached();
        assert_eq!(cached, 500 + 2, "every message, the system prompt and the tool");
        history.push(Message::assistant_text("one more"));
        let second = c.count_request(&request(history.clone()));
        assert_eq!(c.cached(), cached + 1, "only the new message was measured");
        assert_eq!(
            second.total.tokens,
            first.total.tokens + c.count_message(&Message::assistant_text("one more")).tokens
        );
        // The same content is the same key; different content is not.
        assert_eq!(message_key(&Message::user("a")), message_key(&Message::user("a")));
        assert_ne!(message_key(&Message::user("a")), message_key(&Message::assistant_text("a")));
        assert_ne!(message_key(&Message::user("a")), message_key(&Message::user("a\0")));
        // Long texts (the four-lane path): one changed byte anywhere changes the key.
        let long = "0123456789abcdef".repeat(40);
        let base = message_key(&Message::user(long.clone()));
        for at in [0, 17, 64, 100, 300, 639] {
            let mut changed = long.clone().into_bytes();
            changed[at] = b'#';
            let changed = String::from_utf8(changed).unwrap();
            assert_ne!(message_key(&Message::user(changed)), base, "byte {at}");
        }
    }

    #[test]
    fn cache_is_bounded() {
        let c = TokenCounter::new("qwen");
        let many: Vec<(u64, Entry)> = (0..CACHE_LIMIT as u64)
            .map(|k| (k, Entry { total: Count::default(), thinking: Count::default() }))
            .collect();
        c.store(&many);
        assert_eq!(c.cached(), CACHE_LIMIT);
        c.count_message(&Message::user("x"));
        assert_eq!(c.cached(), 1);
    }

    #[test]
    fn hashing_is_fast_enough_for_a_large_history() {
        // ~4 MB (about a million tokens) in 2,000 messages.
        let history: Vec<Message> =
            (0..2000).map(|i| Message::user(format!("{i} {}", "lorem ipsum ".repeat(170)))).collect();
        let start = std::time::Instant::now();
        let keys: Vec<u64> = history.iter().map(message_key).collect();
        let elapsed = start.elapsed();
        assert_eq!(keys.len(), 2000);
        // Generous: unoptimised test builds are far slower than release.
        assert!(elapsed < std::time::Duration::from_millis(250), "{elapsed:?}");
    }
}
