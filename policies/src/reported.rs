//! Whether a server's usage report is believed: each figure judged against the request it answers.
//!
//! A usage report teaches a lot — the window (a silent truncation), the calibration of the count,
//! the basis of the next count, the prompt cache — and it is what the budgets, the prices and every
//! total count. One absurd figure would poison all of it: a prompt of 5,000,000 tokens reported for
//! a 1,700-token request made the next count 5,000,054 and failed the task; 2^64 − 1 wrapped the
//! totals; cached tokens fifty times the prompt taught a cache on the first request. So a report is
//! judged before anything learns from it ([`judge`]), against what was sent ([`Sent`]):
//!
//! - **a figure that is no count** — negative, a fraction, `NaN`, a string, past 2^64 − 1, or, for
//!   the prompt and the answer, missing — is refused (a cache figure left out or `null` is 0);
//! - **a prompt** is refused when it is above the window the request was fitted into *and* more
//!   than [`PROMPT_TIMES_SENT`] times our count of it (plus [`PROMPT_SLACK`]): a server counts a
//!   little more than we do, by its template or a tokenizer we only estimate, never several times
//!   more; and a prompt over its window is refused by the server, not answered;
//! - **an answer** is refused when it is more than [`ANSWER_TIMES_BOUND`] times the largest of the
//!   window, the request's `max_tokens` and [`ANSWER_FLOOR`]: an answer shares the window with its
//!   prompt and keeps to the limit it was given;
//! - **cached tokens** (read, and read plus written) are refused above the prompt they are part of.
//!
//! A report with any refused figure is not believed ([`Judged::believed`] is `None`): no window,
//! calibration or cache learns from it. What is counted ([`Judged::counted`]: budgets, prices,
//! totals) is the report's believable figures with our count in place of each refused one — the
//! request as sent, the answer as received — and no cache figure unless the prompt is believed.
//!
//! Pure: the raw report and the request's numbers come in, the verdict goes out.

use agentd_protocol::{Figure, RawUsage, Tokens, Usage};

/// How many times our count of a request a reported prompt may be before, above the window too, it
/// is refused. Our count is exact for a model whose tokenizer we have, and otherwise one token per
/// three bytes, which real text exceeds at most about twice over (scripts of many bytes a
/// character): four times is no tokenizer's difference.
pub const PROMPT_TIMES_SENT: u64 = 4;

/// Tokens a reported prompt may be above [`PROMPT_TIMES_SENT`] times our count: a server's chat
/// template frames even a tiny request with a few hundred tokens of its own.
pub const PROMPT_SLACK: u64 = 1_024;

/// How many times the largest of the window, `max_tokens` and [`ANSWER_FLOOR`] a reported answer
/// may be. An answer shares the window with its prompt and keeps to its `max_tokens` (a server that
/// ignores it still stops at its window); twice over spares a window believed too small.
pub const ANSWER_TIMES_BOUND: u64 = 2;

/// The smallest bound an answer is held to, whatever window is believed: a window clamped low by a
/// truncation the server later disproves must not refuse the answers that disprove it.
pub const ANSWER_FLOOR: u64 = 32_768;

/// What was sent and received, by our own count: what a report is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Our count of the request as it was sent (the fitter's measure).
    pub prompt: Tokens,
    /// Our count of the answer as it came back (its text, thinking and calls).
    pub answer: Tokens,
    /// The window the request was fitted into.
    pub window: Tokens,
    /// The answer's limit the request set (`max_tokens`), if it set one.
    pub max_output: Option<u32>,
}

impl Sent {
    /// The most tokens a reported answer is believed up to.
    pub fn answer_bound(&self) -> u64 {
        let largest = self.window.0.max(self.max_output.map_or(0, u64::from)).max(ANSWER_FLOOR);
        largest.saturating_mul(ANSWER_TIMES_BOUND)
    }

    /// The most tokens a reported prompt is believed up to.
    pub fn prompt_bound(&self) -> u64 {
        let times = self.prompt.0.saturating_mul(PROMPT_TIMES_SENT).saturating_add(PROMPT_SLACK);
        self.window.0.max(times)
    }
}

/// Which figure of a report a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The prompt.
    Prompt,
    /// The answer.
    Completion,
    /// The prompt tokens read from the cache.
    CacheRead,
    /// The prompt tokens written to the cache.
    CacheWrite,
}

/// Why a figure of a report is not believed; its text says so with the numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A figure that is no whole number of tokens from 0 to 2^64 − 1.
    #[error("`{}` is {}, not a count of tokens", .figure.key, .figure.said)]
    NotACount {
        /// Which figure.
        which: Which,
        /// The figure as said.
        figure: Figure,
    },
    /// The report has no prompt or no answer figure.
    #[error("the report has no {} figure", if *.which == Which::Prompt { "prompt" } else { "answer" })]
    Missing {
        /// Which figure.
        which: Which,
    },
    /// Anthropic's whole prompt (input plus the cache's reads and writes) is past 2^64 − 1.
    #[error("`{key}` {input} with the cache's {read} read and {write} written is past 2^64 − 1 tokens")]
    PromptPastCounting {
        /// The input figure's key.
        key: String,
        /// The uncached input.
        input: u64,
        /// The cache reads.
        read: u64,
        /// The cache writes.
        write: u64,
    },
    /// A prompt above the window and several times what was sent.
    #[error(
        "`{key}` {reported} is above the {window}-token window and more than {PROMPT_TIMES_SENT} × the {sent} tokens sent"
    )]
    PromptTooLarge {
        /// The prompt figure's key.
        key: String,
        /// The whole prompt reported.
        reported: u64,
        /// Our count of the request.
        sent: Tokens,
        /// The window it was fitted into.
        window: Tokens,
    },
    /// An answer longer than any the request allowed.
    #[error(
        "`{key}` {reported} is more than {bound} tokens, {ANSWER_TIMES_BOUND} × the largest of the window, the request's max_tokens and {ANSWER_FLOOR}"
    )]
    AnswerTooLong {
        /// The answer figure's key.
        key: String,
        /// The answer reported.
        reported: u64,
        /// The most believed.
        bound: u64,
    },
    /// Cached tokens (read, or read and written) above the prompt they are part of.
    #[error("`{key}` {cached} is more than the prompt's {prompt} tokens")]
    CacheAbovePrompt {
        /// Which cache figure.
        which: Which,
        /// Its key.
        key: String,
        /// The cached tokens (read and written, for the written figure).
        cached: u64,
        /// The prompt reported.
        prompt: u64,
    },
}

impl Refusal {
    /// The figure it refuses.
    pub fn which(&self) -> Which {
        match self {
            Refusal::NotACount { which, .. }
            | Refusal::Missing { which }
            | Refusal::CacheAbovePrompt { which, .. } => *which,
            Refusal::PromptPastCounting { .. } | Refusal::PromptTooLarge { .. } => Which::Prompt,
            Refusal::AnswerTooLong { .. } => Which::Completion,
        }
    }
}

/// A report, judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// What every sum counts (budgets, prices, totals): the report's believable figures, our count of
    /// the request and of the answer in place of a refused prompt or answer, 0 for a cache figure
    /// not believed.
    pub counted: Usage,
    /// The report, when every figure of it is believed: the only usage windows, calibration and the
    /// prompt cache learn from. Then it equals `counted`.
    pub believed: Option<Usage>,
    /// Why figures were refused, in the order prompt, answer, cache; empty when believed.
    pub refused: Vec<Refusal>,
}

impl Judged {
    /// Each refusal in words, as `usage_refused` carries them.
    pub fn reasons(&self) -> Vec<String> {
        self.refused.iter().map(ToString::to_string).collect()
    }
}

/// The verdict on `raw`, the report of an answer to a request of which `sent` says our counts.
pub fn judge(raw: &RawUsage, sent: &Sent) -> Judged {
    let mut refused = Vec::new();
    let input = required(raw.prompt.as_ref(), Which::Prompt, &mut refused);
    let completion = required(raw.completion.as_ref(), Which::Completion, &mut refused);
    let read = cache(raw.cache_read.as_ref(), Which::CacheRead, &mut refused);
    let write = cache(raw.cache_write.as_ref(), Which::CacheWrite, &mut refused);
    let key = |figure: &Option<Figure>| figure.as_ref().map_or_else(String::new, |f| f.key.clone());

    // The whole prompt: Anthropic's input is the uncached rest, to which the cache figures add.
    let prompt = match input {
        Some(input) if raw.cache_apart => {
            let (r, w) = (read.unwrap_or(0), write.unwrap_or(0));
            let whole = input.checked_add(r).and_then(|sum| sum.checked_add(w));
            if whole.is_none() {
                refused.push(Refusal::PromptPastCounting { key: key(&raw.prompt), input, read: r, write: w });
            }
            whole
        }
        other => other,
    };
    let prompt = prompt.filter(|&reported| {
        let believed = reported <= sent.prompt_bound();
        if !believed {
            refused.push(Refusal::PromptTooLarge {
                key: key(&raw.prompt),
                reported,
                sent: sent.prompt,
                window: sent.window,
            });
        }
        believed
    });
    let completion = completion.filter(|&reported| {
        let bound = sent.answer_bound();
        if reported > bound {
            refused.push(Refusal::AnswerTooLong { key: key(&raw.completion), reported, bound });
        }
        reported <= bound
    });
    // The cache's share means something only of a believed prompt.
    let (read, write) = match prompt {
        Some(prompt) => {
            let read = read.filter(|&cached| {
                let within = cached <= prompt;
                if !within {
                    let key = key(&raw.cache_read);
                    refused.push(Refusal::CacheAbovePrompt { which: Which::CacheRead, key, cached, prompt });
                }
                within
            });
            let write = write.filter(|&w| {
                let cached = read.unwrap_or(0).saturating_add(w);
                let within = cached <= prompt;
                if !within {
                    let key = key(&raw.cache_write);
                    refused.push(Refusal::CacheAbovePrompt { which: Which::CacheWrite, key, cached, prompt });
                }
                within
            });
            (read, write)
        }
        None => (None, None),
    };
    let counted = Usage {
        prompt_tokens: prompt.unwrap_or(sent.prompt.0),
        completion_tokens: completion.unwrap_or(sent.answer.0),
        cache_read_tokens: read.unwrap_or(0),
        cache_write_tokens: write.unwrap_or(0),
    };
    Judged { counted, believed: refused.is_empty().then_some(counted), refused }
}

/// A prompt or answer figure's count; a missing one, or one that is no count, refused.
fn required(figure: Option<&Figure>, which: Which, refused: &mut Vec<Refusal>) -> Option<u64> {
    let Some(figure) = figure else {
        refused.push(Refusal::Missing { which });
        return None;
    };
    let count = figure.count();
    if count.is_none() {
        refused.push(Refusal::NotACount { which, figure: figure.clone() });
    }
    count
}

/// A cache figure's count: 0 when left out or `null` (the cache was not involved); one that is no
/// count refused.
fn cache(figure: Option<&Figure>, which: Which, refused: &mut Vec<Refusal>) -> Option<u64> {
    match figure {
        None => Some(0),
        Some(f) if f.is_null() => Some(0),
        Some(f) => {
            let count = f.count();
            if count.is_none() {
                refused.push(Refusal::NotACount { which, figure: f.clone() });
            }
            count
        }
    }
}

#[cfg(test)]
mod tests;
