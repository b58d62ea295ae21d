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
//!
//! The module, one concept a file:
//!
//! - `tokenizer`: which tokenizer measures a model ([`tokenizer_for`]) and the count of a bare text.
//! - `measure`: the one walk over what is sent — framing, role, each part — shared by counting and
//!   by asking the endpoint what it has not counted yet.
//! - `token_counter`: the [`TokenCounter`], with its per-message cache and what the endpoint taught.
//! - `endpoint`: [`prepare`] and [`prepare_text`], which ask the endpoint before counting.
//! - `fingerprint`: a request's content identity ([`Fingerprint`]), for "does it extend that one".
//! - `hash`: the content keys, and the hasher that makes them fast enough for a whole history.

mod endpoint;
mod fingerprint;
mod hash;
mod measure;
#[cfg(test)]
mod tests;
mod token_counter;
mod tokenizer;

pub use endpoint::{prepare, prepare_text};
pub use fingerprint::Fingerprint;
pub use measure::{framing, RequestCount};
pub use token_counter::TokenCounter;
pub use tokenizer::{tokenizer_for, Tokenizer};
