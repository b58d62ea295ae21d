//! The [`TokenCounter`] of one model: counts messages and whole requests, caching each message's
//! count by a hash of its content, so a fit check after one appended message tokenises only that
//! message.
//!
//! In `Endpoint` mode it also holds what the endpoint taught (the tokens of each text, by hash) and
//! counts from that synchronously; a text not learned yet is estimated and makes its count
//! `estimated`, and a message counted while one of its texts was a guess is not cached.

use super::fingerprint::{Fingerprint, RequestKeys};
use super::hash::{message_key, text_key, KeyMap};
use super::measure::{measure_message, measure_system, measure_tool, Entry, RequestCount, REPLY_PRIMING};
use super::{tokenizer_for, Tokenizer};
use agentd_protocol::ChatRequest;
use agentd_protocol::CountSource;
use agentd_protocol::{Count, Message};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The cache (and the table of texts the endpoint counted) is dropped whole when it grows past this
/// many entries.
pub(super) const CACHE_LIMIT: usize = 200_000;

/// Counts requests for one model, caching each message's count by a hash of its content.
#[derive(Debug)]
pub struct TokenCounter {
    tokenizer: Tokenizer,
    /// Set once an `Endpoint` counter has given up on its endpoint: it estimates from then on.
    fell_back: AtomicBool,
    /// [`prepare`] calls in a row that failed on an error (not on a missing endpoint).
    pub(super) endpoint_failures: AtomicU32,
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
        count.messages = Count { tokens: agentd_protocol::Tokens(sum), estimated };
        count.thinking = Count { tokens: agentd_protocol::Tokens(thinking), estimated };
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

    pub(super) fn learned(&self) -> MutexGuard<'_, KeyMap<u64>> {
        self.external.lock()
    }

    fn lookup(&self, key: u64) -> Option<Entry> {
        self.cache.lock().get(&key).copied()
    }

    /// Caches entries measured in `mode`, unless the counter has changed mode meanwhile.
    pub(super) fn store(&self, mode: Tokenizer, entries: &[(u64, Entry)]) {
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
    pub(super) fn cached(&self) -> usize {
        self.cache.lock().len()
    }
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
