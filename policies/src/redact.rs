//! Secrets never reach a model, a log or the database: every occurrence of a configured secret's
//! value in a tool result is replaced by `[redacted: NAME]` before the result is stored, counted or
//! sent. The secrets are the providers' keys (`api_key_env`) and the variables named in
//! `[secrets] env`.
//!
//! Pure: the runtime reads the values from its environment once and hands them in.

use std::borrow::Cow;

/// Values shorter than this are not redacted: they would match ordinary text (and are no secret).
pub const MIN_SECRET_LEN: usize = 8;

/// The secrets to redact, by name.
#[derive(Clone, Default)]
pub struct Redactor {
    /// (name, value), longest value first, so a secret that contains another is replaced whole.
    secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        let names: Vec<&str> = self.secrets.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Redactor").field("names", &names).finish()
    }
}

impl Redactor {
    /// A redactor of these (name, value) pairs; values under [`MIN_SECRET_LEN`] bytes are ignored.
    pub fn new(secrets: impl IntoIterator<Item = (String, String)>) -> Redactor {
        let mut secrets: Vec<(String, String)> =
            secrets.into_iter().filter(|(_, v)| v.len() >= MIN_SECRET_LEN).collect();
        secrets.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
        secrets.dedup_by(|a, b| a.1 == b.1);
        Redactor { secrets }
    }

    /// The names of the secrets it redacts.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.secrets.iter().map(|(n, _)| n.as_str())
    }

    /// The name of a secret whose value `bytes` hold, if any: such bytes are never copied where a
    /// secret must not go (a workspace checkpoint keeps such a file by its sha256 alone).
    pub fn held_in(&self, bytes: &[u8]) -> Option<&str> {
        self.secrets
            .iter()
            .find(|(_, value)| memchr::memmem::find(bytes, value.as_bytes()).is_some())
            .map(|(name, _)| name.as_str())
    }

    /// `text` with every occurrence of a secret replaced by `[redacted: NAME]`.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.secrets {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &format!("[redacted: {name}]")));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r() -> Redactor {
        Redactor::new([
            ("OPENAI_API_KEY".to_string(), "sk-abcdefghijklmnop".to_string()),
            ("SHORT".to_string(), "abc".to_string()),
            ("DEPLOY_TOKEN".to_string(), "tok-1234567890".to_string()),
        ])
    }

    #[test]
    fn every_occurrence_is_replaced_by_its_name() {
        let text = "OPENAI_API_KEY=sk-abcdefghijklmnop\0HOME=/root\0T=tok-1234567890 and sk-abcdefghijklmnop";
        assert_eq!(
            r().redact(text),
            "OPENAI_API_KEY=[redacted: OPENAI_API_KEY]\0HOME=/root\0T=[redacted: DEPLOY_TOKEN] and [redacted: OPENAI_API_KEY]"
        );
        assert!(matches!(r().redact("nothing to see, abc"), Cow::Borrowed(_)), "short values are no secrets");
        assert_eq!(r().names().collect::<Vec<_>>(), ["OPENAI_API_KEY", "DEPLOY_TOKEN"]);
        assert!(!format!("{:?}", r()).contains("sk-abc"), "Debug never shows a value");
        assert_eq!(r().held_in(b"x\0T=tok-1234567890\n"), Some("DEPLOY_TOKEN"));
        assert_eq!(r().held_in(b"abc and tok-123456789"), None, "a short value, a partial one: none");
    }

    #[test]
    fn a_secret_inside_another_is_replaced_whole() {
        let r = Redactor::new([
            ("INNER".to_string(), "12345678".to_string()),
            ("OUTER".to_string(), "xx12345678yy".to_string()),
        ]);
        assert_eq!(r.redact("a xx12345678yy b 12345678"), "a [redacted: OUTER] b [redacted: INNER]");
    }

    proptest! {
        #[test]
        fn no_secret_survives(prefix in ".{0,40}", suffix in ".{0,40}", secret in "[A-Za-z0-9_-]{8,40}") {
            let r = Redactor::new([("K".to_string(), secret.clone())]);
            let text = format!("{prefix}{secret}{suffix}{secret}");
            prop_assert!(!r.redact(&text).contains(&secret));
        }
    }
}
