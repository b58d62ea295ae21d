//! Counting through the provider's own endpoint (vLLM and llama.cpp `POST /tokenize`): before a
//! request is counted, [`prepare`] asks the endpoint for exactly the texts the counter has not
//! learned yet, a few at a time, and teaches the counter the answers.
//!
//! A server with no counting endpoint makes the counter fall back to the estimate for good; an
//! endpoint that fails leaves the texts unknown (the count is marked estimated), and after a few
//! failed calls in a row the counter gives up on it too.

use super::hash::text_key;
use super::{TokenCounter, Tokenizer};
use agentd_protocol::CountSource;
use agentd_protocol::{ChatRequest, Model};
use futures_util::stream::{self, StreamExt};
use std::sync::atomic::Ordering;

/// How many counting requests [`prepare`] keeps in flight at once.
const ENDPOINT_CONCURRENCY: usize = 4;
/// After this many failed [`prepare`] calls in a row (transport errors, 5xx …), the endpoint is given
/// up for good, as if the server had none.
const ENDPOINT_MAX_FAILURES: u32 = 3;

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
