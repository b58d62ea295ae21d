//! Small text helpers shared by the tools and the receipts.

/// At most `max` characters of `s`; when cut, the last kept character is replaced by "…" so the
/// result is still at most `max` characters. Never splits a character.
pub(crate) fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some(_) if max == 0 => String::new(),
        Some(_) => {
            let keep = s.char_indices().nth(max - 1).map(|(i, _)| i).unwrap_or(s.len());
            let mut out = s[..keep].to_string();
            out.push('…');
            out
        }
    }
}

/// `s` on one line: every run of whitespace (newlines included) becomes a single space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_is_char_safe() {
        assert_eq!(truncate_chars("hello", 5), "hello");
        assert_eq!(truncate_chars("hello!", 5), "hell…");
        assert_eq!(truncate_chars("ééééé€", 3), "éé…");
        assert_eq!(truncate_chars("abc", 0), "");
        assert_eq!(truncate_chars("", 3), "");
    }

    #[test]
    fn one_line_collapses_whitespace() {
        assert_eq!(one_line(" a\n\tb  c \n"), "a b c");
    }
}
