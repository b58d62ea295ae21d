//! What reaches a person's terminal from a model, a tool, a note or a file is made safe: a control
//! character there is a command to the terminal, not text — ESC starts a sequence that can clear the
//! screen, retitle the window or write the clipboard (OSC 52), C1 controls do the same in one byte,
//! a carriage return rewrites the line already shown, and the bidirectional overrides reorder what is
//! read ("Trojan source"). [`safe`] writes each as its escape (`\u{1b}`); lines and tabs stay. A
//! byte of a file name that is not UTF-8 (carried as one character of a private range,
//! `agentd_protocol::path_name`) is shown as `\xNN`, as git and `ls` show one.
//!
//! The CLI's words for a person all pass through it; `--json` output does not (JSON escapes what it
//! must, and is for programs).

use agentd_protocol::path_name;
use std::borrow::Cow;

/// Whether `c` would act on a terminal rather than show: C0 controls but newline and tab, DEL, C1
/// controls, and the bidirectional embeddings, overrides and isolates.
pub fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every character that would act on a terminal written as its escape (`\u{1b}`);
/// text without one comes back as it is, without a copy.
///
/// ```
/// use agentd_client::terminal::safe;
/// assert_eq!(safe("ok\n\tfine"), "ok\n\tfine");
/// assert_eq!(safe("\u{1b}]52;c;aGk=\u{7}"), "\\u{1b}]52;c;aGk=\\u{7}");
/// assert_eq!(safe("a\rb\u{9b}2J"), "a\\u{d}b\\u{9b}2J");
/// // A file name with the byte 0xE9, which is not UTF-8 on its own:
/// assert_eq!(safe(&agentd_protocol::path_name::encode(b"caf\xe9")), "caf\\xe9");
/// ```
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) || path_name::is_escape(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if let Some(byte) = path_name::escaped_byte(c) {
            out.push_str(&format!("\\x{byte:02x}"));
        } else if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Nothing that acts on a terminal comes out, and what was safe is left as it was.
        #[test]
        fn nothing_unsafe_comes_out(
            text in "(\\PC|[\\x00-\\x1f\\x7f-\\u{9f}\\u{202a}-\\u{202e}\\u{2066}-\\u{2069}]){0,60}"
                .prop_map(|t| t.replace('\\', "/"))
        ) {
            let shown = safe(&text);
            prop_assert!(!shown.chars().any(is_unsafe), "{shown:?}");
            if !text.chars().any(is_unsafe) {
                prop_assert_eq!(shown.as_ref(), text.as_str());
            }
            // Each unsafe character is one escape; the safe ones are kept in order.
            let kept: String = text.chars().filter(|c| !is_unsafe(*c)).collect();
            let unescaped = regex_free_strip(&shown);
            prop_assert_eq!(unescaped, kept);
        }
    }

    /// `shown` without the escapes `safe` writes (the strategy above makes no backslash of its own).
    fn regex_free_strip(shown: &str) -> String {
        let mut out = String::new();
        let mut rest = shown;
        while let Some(at) = rest.find("\\u{") {
            out.push_str(&rest[..at]);
            let close = rest[at..].find('}').map_or(rest.len(), |c| at + c + 1);
            rest = &rest[close..];
        }
        out.push_str(rest);
        out
    }
}
