//! JSON as Python writes it: `json.dumps` puts `NaN`, `Infinity` and `-Infinity` where a float is
//! not finite, and JSON has no such words, so a strict parser fails the whole payload — a whole
//! answer lost over one figure of its usage report. A payload that does not parse is read again with
//! each of those bare words (outside strings) quoted: `{"prompt_tokens": NaN}` reads as
//! `{"prompt_tokens": "NaN"}`, a figure that is no count, which the usage judge refuses by name
//! while the answer stands.

/// The words Python writes for floats that are not finite, longest first where one begins another.
const WORDS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];

/// `text` with every bare `NaN`, `Infinity` and `-Infinity` outside a string quoted; `None` when it
/// has none (then quoting cannot make it parse).
pub(crate) fn quoted(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 8);
    let (mut in_string, mut escaped, mut found) = (false, false, false);
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            at += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            at += 1;
            continue;
        }
        if let Some(word) = WORDS.iter().find(|w| bytes[at..].starts_with(w.as_bytes())) {
            out.push_str(&text[copied..at]);
            out.push('"');
            out.push_str(word);
            out.push('"');
            at += word.len();
            copied = at;
            found = true;
            continue;
        }
        at += 1;
    }
    if !found {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_non_finite_words_are_quoted_and_strings_left_alone() {
        assert_eq!(
            quoted(r#"{"a": NaN, "b": [Infinity, -Infinity], "c": "NaN \" NaN"}"#).as_deref(),
            Some(r#"{"a": "NaN", "b": ["Infinity", "-Infinity"], "c": "NaN \" NaN"}"#)
        );
        assert_eq!(quoted(r#"{"a": 1, "text": "NaN"}"#), None);
        assert_eq!(quoted("not json at all"), None);
        // Whatever the bytes, no panic: a word split by a multi-byte character is no word.
        assert_eq!(quoted("é\"\\"), None);
        assert_eq!(quoted("NaNé"), Some("\"NaN\"é".to_string()));
    }
}
