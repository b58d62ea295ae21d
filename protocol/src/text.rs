//! Cutting text by size without splitting a character: by characters for text a person or a model
//! reads ([`truncate_chars`], marked with an ellipsis), by bytes for text that must fit a byte budget
//! ([`truncate_bytes`], unmarked). Every room that shortens text uses these, so a cut means the same
//! everywhere.

/// A JSON Schema `pattern` a text the daemon refuses when blank (`text.trim().is_empty()`) must
/// match: one character that is not white space as Rust's `char::is_whitespace` defines it, so
/// the schema promises exactly what the check accepts.
pub const NOT_BLANK: &str =
    r"[^\t\n\u000B\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";

/// A JSON Schema `pattern` for an absolute path (what `Path::is_absolute` accepts on Unix).
pub const ABSOLUTE_PATH: &str = "^/";

/// A JSON Schema `pattern` for a UUID as the daemon takes one from a client: 36 characters, hex
/// digits in groups of 8-4-4-4-12 joined by `-` (what [`is_uuid`] accepts).
pub const UUID: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// Whether `text` is a UUID in its hyphenated form, as [`UUID`] says.
pub fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A JSON Schema for a tool whose calls a client may approve (`task.submit`'s `ask`): a built-in
/// workspace tool, `remember`, `read_evidence`, or an MCP server's `mcp__SERVER__TOOL` — the names the
/// daemon takes there (a server without `__` and not ending with `_`; at most 64 bytes).
pub const ASKABLE_TOOL_PATTERN: &str = "^(read_file|list_dir|search|write_file|edit_file|run_command|read_evidence|remember|mcp__[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*__[A-Za-z0-9_-]+)$";

/// What [`truncate_chars`] ends a text it cut with.
pub const ELLIPSIS: char = '…';

/// `text` in at most `max` characters (Unicode scalar values, `char`s), never splitting one.
///
/// A text of at most `max` characters comes back whole. A longer one is cut: its first `max - 1`
/// characters followed by [`ELLIPSIS`], which counts toward `max`, so a cut result is exactly `max`
/// characters long and always ends with the ellipsis. For `max == 0` the result is empty (there is no
/// room even for the ellipsis).
pub fn truncate_chars(text: &str, max: usize) -> String {
    if text.char_indices().nth(max).is_none() {
        return text.to_string();
    }
    let Some(keep) = max.checked_sub(1) else {
        return String::new();
    };
    // `text` has more than `max` characters, so its `keep`-th character exists.
    let cut = text.char_indices().nth(keep).map_or(text.len(), |(at, _)| at);
    let mut out = String::with_capacity(cut + ELLIPSIS.len_utf8());
    out.push_str(&text[..cut]);
    out.push(ELLIPSIS);
    out
}

/// The largest byte index at most `max_bytes` that falls on a character boundary of `text` (its
/// length when it is shorter): where a cut to at most `max_bytes` bytes may go.
pub fn floor_boundary(text: &str, max_bytes: usize) -> usize {
    let mut cut = max_bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// Shortens `text` in place to at most `max_bytes` bytes (UTF-8), cutting at the last character
/// boundary that fits — so up to three bytes fewer than `max_bytes` when a character straddles it.
/// Nothing marks the cut; a text of at most `max_bytes` bytes is left whole.
pub fn truncate_bytes(text: &mut String, max_bytes: usize) {
    let cut = floor_boundary(text, max_bytes);
    text.truncate(cut);
}

/// The first `max` of `items` as one line, each as `show` writes it, joined by `, `, then `and N
/// more` when there are more: a list a person or a model reads whole, however long it is.
///
/// ```
/// use agentd_protocol::text::listed;
/// assert_eq!(listed(&[1, 2, 3], 2, |n| n.to_string()), "1, 2, and 1 more");
/// assert_eq!(listed(&[1, 2], 2, |n| n.to_string()), "1, 2");
/// ```
pub fn listed<T>(items: &[T], max: usize, show: impl Fn(&T) -> String) -> String {
    let mut parts: Vec<String> = items.iter().take(max).map(show).collect();
    if items.len() > max {
        parts.push(format!("and {} more", items.len() - max));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_uuid_is_its_hyphenated_form_only() {
        assert!(is_uuid("0190aaaa-0000-7000-8000-000000000001"));
        assert!(is_uuid("0190AAAA-0000-7000-8000-00000000000F"));
        for not in [
            "",
            "0190aaaa00007000800000000000000a",
            "0190aaaa-0000-7000-8000-00000000000",
            "{0190aaaa-0000-7000-8000-000000000001}",
            "0190aaaa-0000-7000-8000-00000000000g",
        ] {
            assert!(!is_uuid(not), "{not:?}");
        }
    }

    #[test]
    fn the_askable_pattern_names_tools_a_call_can_be_of() {
        use crate::tool::ToolName;
        // Names the pattern matches (by hand: no regex engine in this crate) parse to a tool a call
        // can be of; the team's own steps and unknown names are outside it.
        for name in ["edit_file", "run_command", "remember", "mcp__git__commit", "mcp__my-srv_x__a__b"] {
            let tool = ToolName::parse(name);
            assert!(!matches!(tool, ToolName::Other(_) | ToolName::Delegate | ToolName::Finish), "{name}");
        }
        for name in ["delegate", "finish", "teleport"] {
            assert!(
                !ASKABLE_TOOL_PATTERN.contains(&format!("|{name}|"))
                    && !ASKABLE_TOOL_PATTERN.contains(&format!("({name}|")),
                "{name}"
            );
        }
    }
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn char_cuts_count_the_ellipsis() {
        assert_eq!(truncate_chars("hello", 5), "hello");
        assert_eq!(truncate_chars("hello!", 5), "hell…");
        assert_eq!(truncate_chars("héllo", 2), "h…");
        assert_eq!(truncate_chars("ééééé€", 3), "éé…");
        assert_eq!(truncate_chars("abc", 1), "…");
        assert_eq!(truncate_chars("abc", 0), "");
        assert_eq!(truncate_chars("", 0), "");
        assert_eq!(truncate_chars("", 3), "");
    }

    #[test]
    fn byte_cuts_fall_between_characters() {
        assert_eq!(floor_boundary("héllo", 2), 1, "é is two bytes: a cut at 2 would split it");
        assert_eq!(floor_boundary("héllo", 3), 3);
        assert_eq!(floor_boundary("ab", 10), 2);
        let mut s = String::from("ééé");
        truncate_bytes(&mut s, 5);
        assert_eq!(s, "éé");
    }

    /// Texts mixing one- to four-byte characters.
    fn arb_text() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!['a', ' ', '\n', 'é', '€', '😀', '…']), 0..40)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn truncate_chars_keeps_its_contract(text in arb_text(), max in 0usize..50) {
            let out = truncate_chars(&text, max);
            let n = text.chars().count();
            if n <= max {
                prop_assert_eq!(out, text);
            } else {
                prop_assert_eq!(out.chars().count(), max);
                if max > 0 {
                    prop_assert!(out.ends_with(ELLIPSIS));
                    let kept = &out[..out.len() - ELLIPSIS.len_utf8()];
                    prop_assert!(text.starts_with(kept));
                    prop_assert_eq!(kept.chars().count(), max - 1);
                } else {
                    prop_assert!(out.is_empty());
                }
            }
        }

        #[test]
        fn truncate_bytes_keeps_the_longest_fitting_prefix(text in arb_text(), max in 0usize..120) {
            let mut out = text.clone();
            truncate_bytes(&mut out, max);
            prop_assert!(out.len() <= max);
            prop_assert!(text.starts_with(&out));
            if text.len() <= max {
                prop_assert_eq!(&out, &text);
            } else {
                // One more character would not fit.
                let next = text[out.len()..].chars().next().map_or(0, char::len_utf8);
                prop_assert!(out.len() + next > max);
            }
        }
    }
}
