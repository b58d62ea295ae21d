//! Counting a request in tokens, the way the provider will see it: every message with its framing,
//! thinking that is sent back, tool schemas, images by the provider's rule.
//!
//! Where a count comes from ([`CountSource`]), in order of preference:
//!
//! - **tiktoken** — known OpenAI models are measured with their own BPE (tiktoken-rs singletons,
//!   `encode_ordinary`).
//! - **endpoint** — a model tiktoken does not know, served by a server that counts for us (vLLM and
//!   llama.cpp `POST /tokenize`; see [`Client::count_text`]). Such a counter
//!   ([`TokenCounter::with_endpoint`], [`Tokenizer::Endpoint`]) is synchronous like the others: it
//!   counts each text from what the endpoint has taught it ([`TokenCounter::learn`]), keyed by a
//!   hash of the text. [`prepare`] asks the endpoint, before a request is counted, for exactly the
//!   texts the counter has not learned ([`TokenCounter::missing_texts`]: O(new messages), thanks to
//!   the per-message cache). A text not learned yet is estimated, and the count it is part of is
//!   marked `estimated`: a guess never certifies that a request fits. Framing is added with the same
//!   constants as for tiktoken (they overcount slightly: the safe direction). When the server turns
//!   out to have no counting endpoint, the counter falls back to the estimate for good.
//! - **estimate** — anything else: one token per three bytes, marked `estimated`, so it can never
//!   certify that a request fits.
//!
//! Each message's count is cached by a hash of its content, so a fit check after one appended message
//! tokenises only that message. A message counted while one of its texts was still a guess is not
//! cached: it is measured again once the endpoint has answered.

use agentd_policies::{Count, Message, Part, Speaker};
use agentd_protocol::ToolSchema;
use agentd_protocol::{ChatRequest, Model};
use futures_util::stream::{self, StreamExt};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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
/// The cache (and the table of texts the endpoint counted) is dropped whole when it grows past this
/// many entries.
const CACHE_LIMIT: usize = 200_000;
/// How many counting requests [`prepare`] keeps in flight at once.
const ENDPOINT_CONCURRENCY: usize = 4;
/// After this many failed [`prepare`] calls in a row (transport errors, 5xx …), the endpoint is given
/// up for good, as if the server had none.
const ENDPOINT_MAX_FAILURES: u32 = 3;

/// Which tokenizer measures a model's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tokenizer {
    /// GPT-4o, GPT-4.1, GPT-5, o1/o3/o4.
    O200k,
    /// GPT-4, GPT-3.5, text-embedding-3.
    Cl100k,
    /// The provider's own counting endpoint: texts it has counted are measured, the others estimated
    /// (and marked) until [`prepare`] has asked for them.
    Endpoint,
    /// No tokenizer of ours knows the model: bytes / 3, rounded up, marked estimated.
    Estimate,
}

impl Tokenizer {
    /// The tokenizer's name in logs (`o200k_base`, `cl100k_base`, `endpoint`, `estimate`).
    pub fn as_str(self) -> &'static str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
            Tokenizer::Endpoint => "endpoint",
            Tokenizer::Estimate => "estimate",
        }
    }

    /// Where this tokenizer's counts come from.
    pub fn source(self) -> CountSource {
        match self {
            Tokenizer::O200k | Tokenizer::Cl100k => CountSource::Tiktoken,
            Tokenizer::Endpoint => CountSource::Endpoint,
            Tokenizer::Estimate => CountSource::Estimate,
        }
    }

    /// A text by this tokenizer alone. (`Endpoint` needs what the endpoint taught: see [`Texts`].)
    fn count(self, text: &str) -> Count {
        match self {
            Tokenizer::O200k => {
                Count::measured(tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len() as u64)
            }
            Tokenizer::Cl100k => {
                Count::measured(tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u64)
            }
            Tokenizer::Endpoint | Tokenizer::Estimate => Count::estimate_bytes(text.len()),
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

pub use agentd_policies::CountSource;

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
    /// The whole request, in tokens.
    pub total: Count,
    /// The system prompt, counted as a message.
    pub system: Count,
    /// The tool schemas.
    pub tools: Count,
    /// Every message of the request (thinking included).
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

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// Counts requests for one model, caching each message's count by a hash of its content.
#[derive(Debug)]
pub struct TokenCounter {
    tokenizer: Tokenizer,
    /// Set once an `Endpoint` counter has given up on its endpoint: it estimates from then on.
    fell_back: AtomicBool,
    /// [`prepare`] calls in a row that failed on an error (not on a missing endpoint).
    endpoint_failures: AtomicU32,
    cache: Mutex<KeyMap<Entry>>,
    /// `Endpoint` mode: the tokens of each text the endpoint counted, by [`text_key`].
    external: Mutex<KeyMap<u64>>,
}

impl TokenCounter {
    /// tiktoken when it knows the model, else the estimate.
    pub fn new(model: &str) -> TokenCounter {
        TokenCounter::with_tokenizer(tokenizer_for(model))
    }

    /// tiktoken when it knows the model; else counts learned from the provider's own counting
    /// endpoint (see [`prepare`]), falling back to the estimate when the server has none.
    pub fn with_endpoint(model: &str) -> TokenCounter {
        match tokenizer_for(model) {
            Tokenizer::Estimate => TokenCounter::with_tokenizer(Tokenizer::Endpoint),
            known => TokenCounter::with_tokenizer(known),
        }
    }

    fn with_tokenizer(tokenizer: Tokenizer) -> TokenCounter {
        TokenCounter {
            tokenizer,
            fell_back: AtomicBool::new(false),
            endpoint_failures: AtomicU32::new(0),
            cache: Mutex::new(HashMap::default()),
            external: Mutex::new(HashMap::default()),
        }
    }

    /// The tokenizer in use now: `Estimate` once an `Endpoint` counter has fallen back.
    pub fn tokenizer(&self) -> Tokenizer {
        if self.tokenizer == Tokenizer::Endpoint && self.fell_back.load(Ordering::Acquire) {
            Tokenizer::Estimate
        } else {
            self.tokenizer
        }
    }

    /// Where this counter's counts come from now.
    pub fn source(&self) -> CountSource {
        self.tokenizer().source()
    }

    /// The tokens of a bare text (no framing).
    pub fn count_text(&self, text: &str) -> Count {
        self.texts(self.tokenizer()).count(text)
    }

    /// One message as sent: framing + role + each part. Cached by content.
    pub fn count_message(&self, m: &Message) -> Count {
        let key = message_key(m);
        if let Some(entry) = self.lookup(key) {
            return entry.total;
        }
        let mode = self.tokenizer();
        let mut texts = self.texts(mode);
        let entry = measure_message(mode, m, &mut |s| texts.count(s));
        let guessed = texts.guessed;
        drop(texts);
        if !guessed {
            self.store(mode, &[(key, entry)]);
        }
        entry.total
    }

    /// The whole request: the system prompt as a message, every message, the tool definitions and
    /// the reply priming. Only messages and tools not seen before are tokenised.
    pub fn count_request(&self, req: &ChatRequest) -> RequestCount {
        self.count_keyed(req, &RequestKeys::of(req))
    }

    /// [`count_request`](Self::count_request) and the request's [`Fingerprint`], from one pass of
    /// hashing over its messages (the fitter needs both for every request).
    pub fn count_and_fingerprint(&self, req: &ChatRequest) -> (RequestCount, Fingerprint) {
        let keys = RequestKeys::of(req);
        let count = self.count_keyed(req, &keys);
        (count, Fingerprint::from_keys(keys, req.tool_choice_none))
    }

    fn count_keyed(&self, req: &ChatRequest, keys: &RequestKeys) -> RequestCount {
        let mode = self.tokenizer();

        // One pass under the lock for the hits; the misses are measured outside it.
        let (system, mut tools, mut messages) = {
            let cache = self.cache.lock();
            let get = |k: &u64| cache.get(k).copied();
            (
                keys.system.map(|k| get(&k)),
                keys.tools.iter().map(get).collect::<Vec<_>>(),
                keys.messages.iter().map(get).collect::<Vec<_>>(),
            )
        };
        let mut fresh = Vec::new();
        let mut texts = self.texts(mode);
        // Measures one miss; it is cached only if no text in it was a guess.
        let mut measure = |key: u64, f: &mut dyn FnMut(&mut Texts<'_>) -> Entry| {
            texts.guessed = false;
            let entry = f(&mut texts);
            if !texts.guessed {
                fresh.push((key, entry));
            }
            entry
        };
        let system = match (keys.system, system) {
            (None, _) => None,
            (Some(_), Some(Some(hit))) => Some(hit),
            (Some(key), _) => {
                Some(measure(key, &mut |t| measure_system(mode, &req.system, &mut |s| t.count(s))))
            }
        };
        for (i, slot) in tools.iter_mut().enumerate() {
            if slot.is_none() {
                let json = &keys.tool_json[i];
                *slot = Some(measure(keys.tools[i], &mut |t| measure_tool(mode, json, &mut |s| t.count(s))));
            }
        }
        for (i, slot) in messages.iter_mut().enumerate() {
            if slot.is_none() {
                let m = &req.messages[i];
                *slot =
                    Some(measure(keys.messages[i], &mut |t| measure_message(mode, m, &mut |s| t.count(s))));
            }
        }
        drop(texts);
        if !fresh.is_empty() {
            self.store(mode, &fresh);
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
        count.total = count.system + count.tools + count.messages + mode.fixed(REPLY_PRIMING);
        count
    }

    /// `Endpoint` mode: every distinct non-empty text [`count_request`](Self::count_request) would
    /// tokenise for `req` — the system prompt, tool definitions, role names and message parts — that
    /// the endpoint has not counted yet, in request order. Messages already in the cache are skipped
    /// whole, so this costs O(new messages). Empty in every other mode.
    pub fn missing_texts(&self, req: &ChatRequest) -> Vec<String> {
        let mode = self.tokenizer();
        if mode != Tokenizer::Endpoint {
            return Vec::new();
        }
        let keys = RequestKeys::of(req);
        let (system_new, tools_new, messages_new) = {
            let cache = self.cache.lock();
            let new = |k: &u64| !cache.contains_key(k);
            (
                keys.system.is_some_and(|k| new(&k)),
                keys.tools.iter().map(new).collect::<Vec<_>>(),
                keys.messages.iter().map(new).collect::<Vec<_>>(),
            )
        };
        let learned = self.learned();
        let mut seen = HashSet::new();
        let mut missing = Vec::new();
        let mut note = |s: &str| {
            if !s.is_empty() {
                let key = text_key(s);
                if !learned.contains_key(&key) && seen.insert(key) {
                    missing.push(s.to_string());
                }
            }
            Count::default()
        };
        if system_new {
            measure_system(mode, &req.system, &mut note);
        }
        for (json, new) in keys.tool_json.iter().zip(tools_new) {
            if new {
                measure_tool(mode, json, &mut note);
            }
        }
        for (m, new) in req.messages.iter().zip(messages_new) {
            if new {
                measure_message(mode, m, &mut note);
            }
        }
        missing
    }

    /// `Endpoint` mode: the endpoint counted `tokens` for `text` (without special tokens).
    pub fn learn(&self, text: &str, tokens: u64) {
        let mut learned = self.learned();
        if learned.len() >= CACHE_LIMIT {
            // The cached messages keep their counts; only texts of new messages are asked again.
            learned.clear();
        }
        learned.insert(text_key(text), tokens);
    }

    /// Gives up on the endpoint for good: from now on this counter estimates (and marks) everything.
    /// What it measured with the endpoint is forgotten, so that its counts do not mix sources.
    pub fn fall_back_to_estimate(&self) {
        if self.tokenizer != Tokenizer::Endpoint || self.fell_back.swap(true, Ordering::AcqRel) {
            return;
        }
        // After the flag: a measurement racing with this either stores before the clear, or sees the
        // new mode in `store` and drops its entries.
        self.cache.lock().clear();
        self.learned().clear();
    }

    /// A `Texts` for one measurement in `mode`.
    fn texts(&self, mode: Tokenizer) -> Texts<'_> {
        let learned = (mode == Tokenizer::Endpoint).then(|| self.learned());
        Texts { mode, learned, guessed: false }
    }

    fn learned(&self) -> MutexGuard<'_, KeyMap<u64>> {
        self.external.lock()
    }

    fn lookup(&self, key: u64) -> Option<Entry> {
        self.cache.lock().get(&key).copied()
    }

    /// Caches entries measured in `mode`, unless the counter has changed mode meanwhile.
    fn store(&self, mode: Tokenizer, entries: &[(u64, Entry)]) {
        let mut cache = self.cache.lock();
        if self.tokenizer() != mode {
            return;
        }
        if cache.len() + entries.len() > CACHE_LIMIT {
            cache.clear();
        }
        cache.extend(entries.iter().copied());
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache.lock().len()
    }
}

/// Asks the provider's counting endpoint for the texts of `req` the counter has not learned yet, so
/// that the next [`TokenCounter::count_request`] measures instead of guessing. Call it right before
/// counting. Up to four requests are in flight at once; what was learned stays learned.
///
/// Returns where the count will come from. For an `Endpoint` counter: `Endpoint` when every text is
/// now known; `Estimate` when the server has no counting endpoint (the counter then falls back to the
/// estimate for good) or when the endpoint failed (the texts stay unknown, so the count is marked
/// estimated; after three failed calls in a row the counter falls back for good too).
pub async fn prepare(
    counter: &TokenCounter,
    client: &dyn Model,
    model: &str,
    req: &ChatRequest,
) -> CountSource {
    if counter.tokenizer() != Tokenizer::Endpoint {
        return counter.source();
    }
    let missing = counter.missing_texts(req);
    learn_from_endpoint(counter, client, model, missing).await
}

/// Like [`prepare`], for one bare text (a tool result, an evidence page): asks the endpoint for it
/// unless it is learned already, so that [`TokenCounter::count_text`] measures it.
pub async fn prepare_text(
    counter: &TokenCounter,
    client: &dyn Model,
    model: &str,
    text: &str,
) -> CountSource {
    if counter.tokenizer() != Tokenizer::Endpoint {
        return counter.source();
    }
    let missing = if text.is_empty() || counter.learned().contains_key(&text_key(text)) {
        Vec::new()
    } else {
        vec![text.to_string()]
    };
    learn_from_endpoint(counter, client, model, missing).await
}

async fn learn_from_endpoint(
    counter: &TokenCounter,
    client: &dyn Model,
    model: &str,
    missing: Vec<String>,
) -> CountSource {
    let mut answers = stream::iter(missing)
        .map(|text| async move {
            let answer = client.count_text(model, &text).await;
            (text, answer)
        })
        .buffer_unordered(ENDPOINT_CONCURRENCY);
    while let Some((text, answer)) = answers.next().await {
        match answer {
            Ok(Some(tokens)) => counter.learn(&text, tokens),
            Ok(None) => {
                tracing::info!(
                    server = client.server(),
                    model,
                    "the server has no token-counting endpoint; estimating counts from now on"
                );
                counter.fall_back_to_estimate();
                return CountSource::Estimate;
            }
            Err(error) => {
                let failures = counter.endpoint_failures.fetch_add(1, Ordering::AcqRel) + 1;
                tracing::warn!(
                    server = client.server(),
                    model,
                    %error,
                    failures,
                    "the token-counting endpoint failed; this count is an estimate"
                );
                if failures >= ENDPOINT_MAX_FAILURES {
                    counter.fall_back_to_estimate();
                }
                return CountSource::Estimate;
            }
        }
    }
    counter.endpoint_failures.store(0, Ordering::Release);
    CountSource::Endpoint
}

/// Counts bare texts during one measurement: with the tokenizer, or (`Endpoint`) from what the
/// endpoint taught, estimating — and noting — the texts it has not counted.
struct Texts<'a> {
    mode: Tokenizer,
    /// Held for the whole measurement (`Endpoint` only).
    learned: Option<MutexGuard<'a, KeyMap<u64>>>,
    /// A text was estimated because the endpoint has not counted it yet.
    guessed: bool,
}

impl Texts<'_> {
    fn count(&mut self, text: &str) -> Count {
        let Some(learned) = &self.learned else { return self.mode.count(text) };
        if text.is_empty() {
            return Count::measured(0);
        }
        match learned.get(&text_key(text)) {
            Some(&tokens) => Count::measured(tokens),
            None => {
                self.guessed = true;
                Count::estimate_bytes(text.len())
            }
        }
    }
}

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

    fn from_keys(keys: RequestKeys, tool_choice_none: bool) -> Fingerprint {
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
struct RequestKeys {
    system: Option<u64>,
    tool_json: Vec<String>,
    tools: Vec<u64>,
    messages: Vec<u64>,
}

impl RequestKeys {
    fn of(req: &ChatRequest) -> RequestKeys {
        let tool_json: Vec<String> = req.tools.iter().map(tool_json).collect();
        RequestKeys {
            system: (!req.system.is_empty()).then(|| system_key(&req.system)),
            tools: tool_json.iter().map(|j| tool_key(j)).collect(),
            tool_json,
            messages: req.messages.iter().map(message_key).collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement: the one walk over what is sent, shared by counting and by `missing_texts`.

fn measure_message(t: Tokenizer, m: &Message, count: &mut dyn FnMut(&str) -> Count) -> Entry {
    let mut total = t.fixed(MESSAGE_FRAMING) + count(m.role.as_str());
    let mut thinking = t.fixed(0);
    for part in &m.parts {
        match part {
            Part::Text { text } => total += count(text),
            Part::Thinking { text, signature, .. } => {
                let mut c = count(text);
                if let Some(signature) = signature {
                    c += count(signature);
                }
                thinking += c;
                total += c;
            }
            Part::ToolCall { name, arguments, .. } => {
                total += count(name) + count(arguments) + t.fixed(TOOL_CALL_FRAMING);
            }
            Part::ToolResult { call_id, content, .. } => {
                total += count(call_id) + count(content) + t.fixed(TOOL_RESULT_FRAMING);
            }
            // The provider's rule, not ours: never a measurement.
            Part::Image { .. } => total += Count::estimated(IMAGE_TOKENS),
        }
    }
    Entry { total, thinking }
}

fn measure_system(t: Tokenizer, system: &str, count: &mut dyn FnMut(&str) -> Count) -> Entry {
    let total = t.fixed(MESSAGE_FRAMING) + count(Speaker::System.as_str()) + count(system);
    Entry { total, thinking: t.fixed(0) }
}

fn measure_tool(t: Tokenizer, json: &str, count: &mut dyn FnMut(&str) -> Count) -> Entry {
    Entry { total: count(json) + t.fixed(TOOL_SPEC_FRAMING), thinking: t.fixed(0) }
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

/// A bare text, as the endpoint counted it.
fn text_key(text: &str) -> u64 {
    let mut h = FoldHasher::new(3);
    text.hash(&mut h);
    h.finish()
}

/// A tool definition as its JSON schema serialisation (name, description, parameters).
fn tool_json(tool: &ToolSchema) -> String {
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

/// The little-endian `u64` of an 8-byte slice (every caller slices exactly 8 bytes of a 16-byte block).
#[inline]
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_le_bytes(word)
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
                    let a = le_u64(&block[..8]);
                    let b = le_u64(&block[8..]);
                    *lane = fold_mul(a ^ *lane ^ K1, b ^ K2);
                }
            }
            s = fold_mul(lanes[0] ^ K1, lanes[1] ^ K2);
            s = fold_mul(s ^ lanes[2], lanes[3] ^ K0);
            bytes_left = stripes.remainder();
        }
        let mut blocks = bytes_left.chunks_exact(16);
        for block in &mut blocks {
            let a = le_u64(&block[..8]);
            let b = le_u64(&block[8..]);
            s = fold_mul(a ^ s ^ K1, b ^ K2);
        }
        // The tail, zero-padded, with the length so that padding cannot collide with real zeros.
        let tail = blocks.remainder();
        let mut buf = [0u8; 16];
        buf[..tail.len()].copy_from_slice(tail);
        let a = le_u64(&buf[..8]);
        let b = le_u64(&buf[8..]);
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
            tools: vec![ToolSchema {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            }],
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
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
            Speaker::Assistant,
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
            Speaker::User,
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
            Speaker::Assistant,
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
    fn one_pass_gives_the_count_and_the_fingerprint() {
        let c = TokenCounter::new("gpt-4o");
        let req = request((0..20).map(|i| Message::user(format!("message {i}"))).collect());
        let (count, fingerprint) = c.count_and_fingerprint(&req);
        assert_eq!(count, c.count_request(&req));
        assert_eq!(fingerprint, Fingerprint::of(&req));
        let mut longer = req.clone();
        longer.messages.push(Message::assistant_text("more"));
        assert!(Fingerprint::of(&longer).extends(&fingerprint));
        assert!(!fingerprint.extends(&Fingerprint::of(&longer)));
        let mut other_tools = longer.clone();
        other_tools.tool_choice_none = true;
        assert!(
            !Fingerprint::of(&other_tools).extends(&fingerprint),
            "the head covers tools and tool_choice"
        );
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

    /// Teaches an endpoint counter what the endpoint would answer: here, o200k counts.
    fn teach(c: &TokenCounter, texts: &[String]) {
        for t in texts {
            c.learn(t, tiktoken_rs::o200k_base_singleton().encode_ordinary(t).len() as u64);
        }
    }

    #[test]
    fn endpoint_mode_is_for_models_tiktoken_does_not_know() {
        assert_eq!(TokenCounter::with_endpoint("qwen3-coder").tokenizer(), Tokenizer::Endpoint);
        assert_eq!(TokenCounter::with_endpoint("gpt-4o").tokenizer(), Tokenizer::O200k);
        assert_eq!(TokenCounter::with_endpoint("gpt-4").tokenizer(), Tokenizer::Cl100k);
        assert_eq!(TokenCounter::new("qwen3-coder").tokenizer(), Tokenizer::Estimate);
        assert_eq!(TokenCounter::with_endpoint("qwen3-coder").source(), CountSource::Endpoint);
        assert_eq!(TokenCounter::new("gpt-4o").source(), CountSource::Tiktoken);
        assert_eq!(serde_json::to_value(CountSource::Tiktoken).unwrap(), json!("tiktoken"));
        assert_eq!(serde_json::to_value(CountSource::Endpoint).unwrap(), json!("endpoint"));
        assert_eq!(serde_json::to_value(CountSource::Estimate).unwrap(), json!("estimate"));
        // Only an endpoint counter asks for anything.
        let req = request(vec![Message::user("hi")]);
        assert!(TokenCounter::new("gpt-4o").missing_texts(&req).is_empty());
        assert!(TokenCounter::new("qwen3-coder").missing_texts(&req).is_empty());
    }

    #[test]
    fn missing_texts_then_learn_then_measured() {
        let c = TokenCounter::with_endpoint("qwen3-coder");
        let call = Message::new(
            Speaker::Assistant,
            vec![
                Part::Thinking { text: "look".into(), signature: Some("sig".into()), redacted: false },
                Part::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                },
            ],
        );
        let result = Message::tool_result("c1", "fn main() {}", false);
        let req = request(vec![Message::user("hi"), Message::user("hi"), call, result]);
        let missing = c.missing_texts(&req);
        let tool = serde_json::to_string(&req.tools[0]).unwrap();
        let expected = [
            "system",
            "You are terse.",
            tool.as_str(),
            "user",
            "hi",
            "assistant",
            "look",
            "sig",
            "read_file",
            r#"{"path":"a"}"#,
            "tool",
            "c1",
            "fn main() {}",
        ];
        assert_eq!(missing, expected, "every distinct text, once, in request order");

        // Not learned yet: a guess, marked, and not cached (it is measured again once learned).
        let guessed = c.count_request(&req);
        assert!(guessed.total.estimated && guessed.messages.estimated && guessed.system.estimated);
        assert_eq!(c.cached(), 0);
        assert!(c.count_text("hi").estimated);
        assert!(c.count_message(&Message::user("hi")).estimated);

        teach(&c, &missing);
        assert!(c.missing_texts(&req).is_empty(), "nothing left to ask");
        let measured = c.count_request(&req);
        assert!(!measured.total.estimated);
        assert_eq!(c.count_text("hi"), Count::measured(1));
        // With o200k as the endpoint's tokenizer, the same numbers as tiktoken's own counter.
        assert_eq!(measured, TokenCounter::new("gpt-4o").count_request(&req));
        assert_eq!(c.cached(), 1 + 1 + 3, "system, tool, three distinct messages");

        // One appended message: only its new texts are asked for.
        let mut longer = req.clone();
        longer.messages.push(Message::assistant_text("one more"));
        assert_eq!(c.missing_texts(&longer), ["one more"]);
        // A text learned before the message was cached is not asked again either.
        c.learn("one more", 2);
        assert!(c.missing_texts(&longer).is_empty());
        let n = c.count_request(&longer);
        assert!(!n.total.estimated);
        assert_eq!(n.total.tokens, measured.total.tokens + Tokens(4 + 1 + 2));
    }

    #[test]
    fn one_unknown_text_makes_the_whole_count_an_estimate() {
        let c = TokenCounter::with_endpoint("qwen3-coder");
        let req = request(vec![Message::user("hi")]);
        teach(&c, &c.missing_texts(&req));
        assert!(!c.count_request(&req).total.estimated);
        let mut more = req.clone();
        more.messages.push(Message::user("something new"));
        let n = c.count_request(&more);
        assert!(n.total.estimated && n.messages.estimated);
        assert!(!n.system.estimated && !n.tools.estimated, "the categories that were measured stay so");
        // An image is the provider's rule, never a measurement, whatever the texts.
        let img = Message::new(
            Speaker::User,
            vec![Part::Image { media_type: "image/png".into(), data: "AAAA".into() }],
        );
        let n = c.count_message(&img);
        assert!(n.estimated);
        assert_eq!(n.tokens, Tokens(4 + 1 + 765));
    }

    #[test]
    fn falling_back_estimates_everything_for_good() {
        let c = TokenCounter::with_endpoint("qwen3-coder");
        let req = request(vec![Message::user("hello world")]);
        teach(&c, &c.missing_texts(&req));
        let measured = c.count_request(&req);
        assert!(!measured.total.estimated);
        assert!(c.cached() > 0);
        c.fall_back_to_estimate();
        assert_eq!(c.tokenizer(), Tokenizer::Estimate);
        assert_eq!(c.source(), CountSource::Estimate);
        assert_eq!(c.cached(), 0, "endpoint counts are not mixed with estimates");
        assert!(c.missing_texts(&req).is_empty());
        let n = c.count_request(&req);
        assert!(n.total.estimated && n.system.estimated && n.tools.estimated && n.messages.estimated);
        assert_eq!(n, TokenCounter::new("qwen3-coder").count_request(&req));
        // Learning after the fall-back changes nothing.
        c.learn("hello world", 1);
        assert_eq!(c.count_text("hello world"), Count::estimate_bytes(11));
        // A tiktoken counter has nothing to fall back from.
        let t = TokenCounter::with_endpoint("gpt-4o");
        t.fall_back_to_estimate();
        assert_eq!(t.tokenizer(), Tokenizer::O200k);
    }

    #[test]
    fn cache_is_bounded() {
        let c = TokenCounter::new("qwen");
        let many: Vec<(u64, Entry)> = (0..CACHE_LIMIT as u64)
            .map(|k| (k, Entry { total: Count::default(), thinking: Count::default() }))
            .collect();
        c.store(c.tokenizer(), &many);
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
