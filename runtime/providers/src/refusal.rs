//! A refusal's stated window. Context windows are measured, never configured, and a provider that
//! refuses a request as too long states the real limit in prose, in its own phrasing: this module
//! reads it, so a refusal becomes `ProviderError::ContextOverflow { limit }`.

use agentd_protocol::Tokens;

/// Reads the context limit out of a provider's refusal text, in the phrasings of OpenAI, vLLM,
/// llama.cpp and Anthropic. Returns `None` when the text states no limit.
///
/// - OpenAI / vLLM: "This model's maximum context length is 16384 tokens. However, you requested …"
/// - vLLM (newer): "… maximum model length is 16384 …", "max_model_len … (16384)"
/// - llama.cpp: "the request exceeds the available context size (16384 tokens)",
///   "request (20000 tokens) exceeds the available context size (16384 tokens)"
/// - Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
pub fn parse_refusal_limit(text: &str) -> Option<Tokens> {
    let lower = text.to_ascii_lowercase();
    // Phrases after which the first number is the limit.
    const AFTER: [&str; 6] = [
        "maximum context length is",
        "maximum model length",
        "max_model_len",
        "available context size",
        "context window of",
        "context length of",
    ];
    for phrase in AFTER {
        if let Some(at) = lower.find(phrase) {
            if let Some(n) = first_number(&lower[at + phrase.len()..]) {
                return Some(Tokens(n));
            }
        }
    }
    // Anthropic: "N tokens > M maximum".
    if let Some(at) = lower.find("maximum") {
        let before = &lower[..at];
        if let Some(gt) = before.rfind('>') {
            if let Some(n) = first_number(&before[gt + 1..]) {
                return Some(Tokens(n));
            }
        }
    }
    None
}

/// The first run of ASCII digits (commas allowed inside, as in "16,384") within the next 40 bytes.
fn first_number(s: &str) -> Option<u64> {
    let window = &s.as_bytes()[..s.len().min(40)];
    let start = window.iter().position(|b| b.is_ascii_digit())?;
    let mut value: u64 = 0;
    for &b in &window[start..] {
        match b {
            b'0'..=b'9' => value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?,
            b',' | b'_' => continue,
            _ => break,
        }
    }
    (value > 0).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_phrasing() {
        let t = "This model's maximum context length is 16384 tokens. However, you requested 20012 tokens (19012 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.";
        assert_eq!(parse_refusal_limit(t), Some(Tokens(16384)));
    }

    #[test]
    fn vllm_phrasing() {
        let t = "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens in the messages, Please reduce the length of the messages.";
        assert_eq!(parse_refusal_limit(t), Some(Tokens(8192)));
        let t2 = "The decoder prompt (length 40000) is longer than the maximum model length of 32768. Make sure that `max_model_len` is no smaller than the number of text tokens.";
        assert_eq!(parse_refusal_limit(t2), Some(Tokens(32768)));
    }

    #[test]
    fn llama_cpp_phrasing() {
        let t = "the request exceeds the available context size (2048 tokens), try increasing it";
        assert_eq!(parse_refusal_limit(t), Some(Tokens(2048)));
        let t2 = "request (3000 tokens) exceeds the available context size (2,048 tokens), try increasing it";
        assert_eq!(parse_refusal_limit(t2), Some(Tokens(2048)));
    }

    #[test]
    fn anthropic_phrasing() {
        let t = "prompt is too long: 210034 tokens > 200000 maximum";
        assert_eq!(parse_refusal_limit(t), Some(Tokens(200000)));
    }

    #[test]
    fn no_limit_stated() {
        assert_eq!(parse_refusal_limit("Rate limit reached for requests"), None);
        assert_eq!(parse_refusal_limit(""), None);
    }
}
