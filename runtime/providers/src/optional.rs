//! A field a request body carries only while the server accepts it: `prompt_cache_key` on a chat
//! completion (OpenAI reads it; a vLLM whose request models forbid extra fields refuses it), the
//! Responses API's `include: ["reasoning.encrypted_content"]` (a model that does not reason refuses
//! it). The first 400 or 422 that names the field drops it for this client from then on, and the
//! request is asked once more without it ([`crate::wire::chat`]); any other refusal is the caller's.

use agentd_protocol::ProviderError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One optional field of a client's requests, and whether its server refused it (shared by clones).
#[derive(Debug, Clone)]
pub(crate) struct Optional {
    /// The field's name on the wire.
    name: &'static str,
    /// Other words (lower case) by which a refusal names the field.
    also: &'static [&'static str],
    refused: Arc<AtomicBool>,
}

impl Optional {
    /// A field, sent until refused; `also` lists other words (lower case) a refusal may name it by.
    pub(crate) fn new(name: &'static str, also: &'static [&'static str]) -> Optional {
        Optional { name, also, refused: Arc::new(AtomicBool::new(false)) }
    }

    /// Whether the field is still sent.
    pub(crate) fn sent(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    /// Whether `error` is the server refusing this field while it was sent: if so it is not sent
    /// again (true once; the request is worth asking again without it).
    pub(crate) fn refused_by(&self, error: &ProviderError) -> bool {
        let ProviderError::Rejected { status: 400 | 422, message } = error else { return false };
        let message = message.to_ascii_lowercase();
        let named = message.contains(self.name) || self.also.iter().any(|word| message.contains(word));
        if !named || !self.sent() {
            return false;
        }
        self.refused.store(true, Ordering::Relaxed);
        tracing::info!(field = self.name, %message, "the server refused an optional field: no longer sent");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(status: u16, message: &str) -> ProviderError {
        ProviderError::Rejected { status, message: message.into() }
    }

    #[test]
    fn a_refusal_naming_the_field_drops_it_once_and_for_every_clone() {
        let field = Optional::new("include", &["encrypted content"]);
        let clone = field.clone();
        assert!(field.sent());
        assert!(!field.refused_by(&rejected(401, "include is not allowed")), "not a request error");
        assert!(!field.refused_by(&rejected(400, "messages must not be empty")), "another field");
        let overflow = ProviderError::ContextOverflow { limit: None, message: "include".into() };
        assert!(!field.refused_by(&overflow));
        assert!(field.sent());
        assert!(field.refused_by(&rejected(400, "Encrypted content is not supported with this model.")));
        assert!(!clone.sent(), "clones share what the server said");
        assert!(!field.refused_by(&rejected(400, "include: unknown")), "once: a second refusal is final");
        let key = Optional::new("prompt_cache_key", &[]);
        assert!(key.refused_by(&rejected(422, "extra fields not permitted: PROMPT_CACHE_KEY")));
    }
}
