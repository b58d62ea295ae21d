//! How an OpenAI-compatible server's error object inside an accepted stream (or a 200 body) reads,
//! mapped to a [`ProviderError`].

use crate::error::{error_object_info, says_context_overflow};
use crate::refusal::parse_refusal_limit;
use agentd_protocol::ProviderError;
use serde_json::Value;

/// Maps an `{"error":{…}}` object that arrived inside an accepted stream.
pub(crate) fn classify_stream_error(error: &Value) -> ProviderError {
    let info = error_object_info(error);
    if says_context_overflow(&info) {
        let limit = parse_refusal_limit(&info.message);
        return ProviderError::ContextOverflow { limit, message: info.message };
    }
    let numeric = info.code.as_deref().and_then(|c| c.parse::<u16>().ok());
    let rate_limited = numeric == Some(429)
        || [&info.code, &info.kind].iter().any(|s| s.as_deref().is_some_and(|s| s.contains("rate_limit")));
    if rate_limited {
        return ProviderError::RateLimited { retry_after: None, message: info.message };
    }
    let status = numeric.filter(|s| (500..=599).contains(s)).unwrap_or(500);
    ProviderError::Server { status, message: info.message }
}
