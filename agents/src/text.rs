//! Small text helpers shared by the tools and the receipts (cutting text to a size is
//! `agentd_protocol::text`'s).

/// `s` on one line: every run of whitespace (newlines included) becomes a single space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_whitespace() {
        assert_eq!(one_line(" a\n\tb  c \n"), "a b c");
    }
}
