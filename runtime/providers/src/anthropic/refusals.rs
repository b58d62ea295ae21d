//! How Anthropic's refusals read: an HTTP error answer, or an error object inside an accepted
//! stream, mapped to a [`ProviderError`] (wait and resend, compact, or give up).

use crate::error::{self, truncate_chars, MAX_ERROR_CHARS};
use crate::refusal::parse_refusal_limit;
use agentd_protocol::{ProviderError, RetryAfter, Tokens};
use serde_json::Value;

/// Whether a refusal is about the request's size against the window, and the limit it states:
/// "prompt is too long: 210034 tokens > 200000 maximum", or "input length and `max_tokens` exceed
/// context limit: 188240 + 21333 > 200000".
fn overflow_limit(message: &str) -> Option<Option<Tokens>> {
    let m = message.to_ascii_lowercase();
    if m.contains("prompt is too long") {
        return Some(parse_refusal_limit(message));
    }
    if m.contains("context limit") || m.contains("context window") {
        let limit = parse_refusal_limit(message).or_else(|| {
            let after = &m[m.rfind('>')? + 1..];
            let digits: String =
                after.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == ',').collect();
            digits.replace(',', "").parse::<u64>().ok().filter(|n| *n > 0).map(Tokens)
        });
        return Some(limit);
    }
    None
}

/// `{"type":"error","error":{"type","message"}}`: the error object's type and message.
fn anthropic_error(body: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(body).ok()?;
    let error = value.get("error")?;
    let message = error.get("message")?.as_str()?;
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    Some((kind.to_string(), truncate_chars(message, MAX_ERROR_CHARS)))
}

/// Maps a non-2xx answer: 429 and 529 (overloaded) wait and resend, honouring `retry-after`; a 400
/// or 413 about the prompt's size is an overflow with the stated limit; any other 4xx is a
/// rejection (so "max_tokens: 8192 > 4096, which is the maximum allowed …" is not mistaken for a
/// window); 5xx is a server error. Bodies in another shape (a proxy's page, plain text) are read as
/// any server's refusal ([`error::classify_http`]).
pub(crate) fn classify_anthropic_http(
    status: u16,
    retry_after: Option<RetryAfter>,
    body: &str,
) -> ProviderError {
    let Some((kind, message)) = anthropic_error(body) else {
        return error::classify_http(status, retry_after, body);
    };
    match status {
        _ if kind == "billing_error" => ProviderError::QuotaExhausted { status, message },
        429 => ProviderError::RateLimited { retry_after, message },
        529 => ProviderError::Overloaded { retry_after, message },
        400 | 413 | 422 => match overflow_limit(&message) {
            Some(limit) => ProviderError::ContextOverflow { limit, message },
            None => ProviderError::Rejected { status, message },
        },
        500..=599 => ProviderError::Server { status, message },
        _ => ProviderError::Rejected { status, message },
    }
}

/// Maps an error object that arrived inside an accepted stream (`event: error`) or as a 200 body:
/// `overloaded_error` and `rate_limit_error` wait and resend, an overflow compacts, the request
/// errors are rejections, anything else (`api_error` …) is a server error.
pub(crate) fn classify_anthropic_error(error: &Value) -> ProviderError {
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    let message = match error.get("message") {
        Some(Value::String(s)) => truncate_chars(s, MAX_ERROR_CHARS),
        _ => truncate_chars(&error.to_string(), MAX_ERROR_CHARS),
    };
    if let Some(limit) = overflow_limit(&message) {
        return ProviderError::ContextOverflow { limit, message };
    }
    match kind {
        "overloaded_error" => ProviderError::Overloaded { retry_after: None, message },
        "rate_limit_error" => ProviderError::RateLimited { retry_after: None, message },
        "billing_error" => ProviderError::QuotaExhausted { status: 402, message },
        "invalid_request_error" => ProviderError::Rejected { status: 400, message },
        "authentication_error" => ProviderError::Rejected { status: 401, message },
        "permission_error" => ProviderError::Rejected { status: 403, message },
        "not_found_error" => ProviderError::Rejected { status: 404, message },
        "request_too_large" => ProviderError::Rejected { status: 413, message },
        _ => ProviderError::Server { status: 500, message },
    }
}
