//! What a server's refusal says, whatever the wire format: the error bodies servers send (OpenAI,
//! vLLM, llama.cpp, FastAPI, plain text), whether one is about the context window, and the
//! status-driven classifier every wire format starts from. Also how much of a provider's words an
//! error keeps.

use crate::refusal::parse_refusal_limit;
use agentd_protocol::{ProviderError, RetryAfter};
use serde_json::Value;

pub(crate) use agentd_protocol::text::truncate_chars;

/// How much of a provider's error text is kept: at most this many characters, the ellipsis that marks
/// a cut included (`agentd_protocol::text::truncate_chars`).
pub(crate) const MAX_ERROR_CHARS: usize = 2000;

/// What an error body says, in any of the shapes servers use.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ErrorInfo {
    pub(crate) message: String,
    /// `error.code` as text (OpenAI: `"context_length_exceeded"`, llama.cpp/vLLM: `400`).
    pub(crate) code: Option<String>,
    /// `error.type`.
    pub(crate) kind: Option<String>,
}

/// `{"error":{"message","code","type"}}`, `{"error":"…"}` (llama.cpp), `{"detail":…}` (FastAPI),
/// `{"message":…}` (older vLLM), or the raw text.
fn parse_error_body(body: &str) -> ErrorInfo {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        if let Some(info) = error_info(&value) {
            return info;
        }
    }
    ErrorInfo { message: truncate_chars(body.trim(), MAX_ERROR_CHARS), code: None, kind: None }
}

fn error_info(value: &Value) -> Option<ErrorInfo> {
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        return Some(error_object_info(error));
    }
    if let Some(detail) = value.get("detail").filter(|d| !d.is_null()) {
        return Some(ErrorInfo {
            message: truncate_chars(&text_of(detail), MAX_ERROR_CHARS),
            code: None,
            kind: None,
        });
    }
    if value.get("message").is_some() {
        return Some(error_object_info(value));
    }
    None
}

/// The inside of `"error"`: an object, or a plain string.
pub(crate) fn error_object_info(error: &Value) -> ErrorInfo {
    match error {
        Value::Object(map) => ErrorInfo {
            message: truncate_chars(
                &map.get("message").map_or_else(|| error.to_string(), text_of),
                MAX_ERROR_CHARS,
            ),
            code: map.get("code").filter(|c| !c.is_null()).map(text_of),
            kind: map.get("type").filter(|c| !c.is_null()).map(text_of),
        },
        other => {
            ErrorInfo { message: truncate_chars(&text_of(other), MAX_ERROR_CHARS), code: None, kind: None }
        }
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether the refusal is about the size of the request against the model's window.
pub(crate) fn says_context_overflow(info: &ErrorInfo) -> bool {
    let tagged = |s: &Option<String>| {
        s.as_deref().is_some_and(|s| {
            let s = s.to_ascii_lowercase();
            s.contains("context_length_exceeded") || s.contains("exceed_context_size")
        })
    };
    if tagged(&info.code) || tagged(&info.kind) {
        return true;
    }
    let m = info.message.to_ascii_lowercase();
    m.contains("context length")
        || m.contains("context size")
        || m.contains("context window")
        || m.contains("context_length_exceeded")
        || m.contains("maximum model length")
        || (m.contains("too long") && (m.contains("prompt") || m.contains("token") || m.contains("input")))
        || parse_refusal_limit(&m).is_some()
}

/// Maps a non-2xx answer, whatever shape its body has, to the error the caller acts on: 429 and
/// 529 wait and resend (honouring `retry_after`), a 400, 413 or 422 about the request's size is an
/// overflow with the limit it states, any other 5xx a server error, any other status a rejection.
/// OpenAI's own classifier; Anthropic's for bodies not in its shape (a proxy's page, plain text).
pub(crate) fn classify_http(status: u16, retry_after: Option<RetryAfter>, body: &str) -> ProviderError {
    let info = parse_error_body(body);
    let overflow = matches!(status, 400 | 413 | 422) && says_context_overflow(&info);
    let message =
        if info.message.is_empty() { format!("HTTP {status} with an empty body") } else { info.message };
    let quota = [&info.code, &info.kind].into_iter().flatten().any(|c| c == "insufficient_quota");
    match status {
        429 | 402 | 403 if quota => ProviderError::QuotaExhausted { status, message },
        429 => ProviderError::RateLimited { retry_after, message },
        529 => ProviderError::Overloaded { retry_after, message },
        _ if overflow => ProviderError::ContextOverflow { limit: parse_refusal_limit(&message), message },
        500..=599 => ProviderError::Server { status, message },
        _ => ProviderError::Rejected { status, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::Tokens;
    use std::time::Duration;

    #[test]
    fn a_used_up_quota_is_not_a_rate_limit() {
        let body = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        match classify_http(429, Some(RetryAfter::new(Duration::from_secs(20), "retry-after")), body) {
            ProviderError::QuotaExhausted { status: 429, message } => {
                assert!(message.starts_with("You exceeded"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify_http(429, None, r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#),
            ProviderError::RateLimited { .. }
        ));
    }

    #[test]
    fn openai_context_length_exceeded() {
        let body = r#"{"error":{"message":"This model's maximum context length is 16384 tokens. However, you requested 20012 tokens (19012 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        match classify_http(400, None, body) {
            ProviderError::ContextOverflow { limit, message } => {
                assert_eq!(limit, Some(Tokens(16384)));
                assert!(message.starts_with("This model's maximum context length"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn llama_cpp_exceed_context_size() {
        let body = r#"{"error":{"code":400,"message":"the request exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3000,"n_ctx":2048}}"#;
        assert_eq!(
            classify_http(400, None, body),
            ProviderError::ContextOverflow {
                limit: Some(Tokens(2048)),
                message: "the request exceeds the available context size (2048 tokens), try increasing it"
                    .into(),
            }
        );
    }

    #[test]
    fn other_error_shapes() {
        // vLLM (older), FastAPI detail, llama.cpp string error, raw text.
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens","type":"BadRequestError","param":null,"code":400}"#;
        assert!(matches!(
            classify_http(400, None, vllm),
            ProviderError::ContextOverflow { limit: Some(Tokens(8192)), .. }
        ));
        assert_eq!(
            classify_http(404, None, r#"{"detail":"Not Found"}"#),
            ProviderError::Rejected { status: 404, message: "Not Found".into() }
        );
        assert_eq!(
            classify_http(500, None, r#"{"error":"model crashed"}"#),
            ProviderError::Server { status: 500, message: "model crashed".into() }
        );
        assert_eq!(
            classify_http(502, None, "<html>Bad Gateway</html>"),
            ProviderError::Server { status: 502, message: "<html>Bad Gateway</html>".into() }
        );
        assert_eq!(
            classify_http(503, None, ""),
            ProviderError::Server { status: 503, message: "HTTP 503 with an empty body".into() }
        );
        let unauthorized = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(
            classify_http(401, None, unauthorized),
            ProviderError::Rejected { status: 401, message: "Incorrect API key provided".into() }
        );
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210034 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            classify_http(400, None, anthropic),
            ProviderError::ContextOverflow { limit: Some(Tokens(200000)), .. }
        ));
        // "too long" about something else is not an overflow.
        let name = r#"{"error":{"message":"Invalid 'tools[0].function.name': string too long. Expected a string with maximum length 64","code":"string_above_max_length"}}"#;
        assert!(matches!(classify_http(400, None, name), ProviderError::Rejected { status: 400, .. }));
        // A 413 without any JSON.
        assert!(matches!(
            classify_http(413, None, "request body too long: prompt exceeds token limit"),
            ProviderError::ContextOverflow { limit: None, .. }
        ));
    }

    #[test]
    fn rate_limits_keep_retry_after_and_truncate() {
        let long = "x".repeat(5000);
        match classify_http(429, Some(RetryAfter::new(Duration::from_secs(3), "retry-after")), &long) {
            ProviderError::RateLimited { retry_after, message } => {
                assert_eq!(retry_after.map(|r| r.delay), Some(Duration::from_secs(3)));
                assert_eq!(message.chars().count(), MAX_ERROR_CHARS);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify_http(529, None, "overloaded"),
            ProviderError::Overloaded { retry_after: None, .. }
        ));
    }
}
