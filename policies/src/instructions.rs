//! The project's instructions block: the workspace's `AGENTS.md` (or the files configured), put in
//! every request of a task as a block of its own, never summarised away.
//!
//! Which files are read: `[instructions] files`, in order; **every** file found is included, each
//! under its own name (a project with both `AGENTS.md` and `CLAUDE.md` meant both to be read). The
//! block is bounded like a large tool result: past its budget, its first part is shown with where
//! the whole is kept as evidence and how to read on.

use agentd_protocol::text::floor_boundary;
use agentd_protocol::tokens::Tokens;

/// The first line of the instructions block.
pub const INSTRUCTIONS_HEADER: &str = "[instructions]";

/// The block's text for these files (`(name, text)`, in the configured order), whole. `None` when
/// there is none.
pub fn instructions_text(files: &[(String, String)]) -> Option<String> {
    if files.is_empty() {
        return None;
    }
    let mut text = format!(
        "{INSTRUCTIONS_HEADER}\nThe project's own instructions for agents working in it, from the workspace \
         root. Follow them."
    );
    for (name, body) in files {
        text.push_str(&format!("\n\n--- {name} ---\n{}", body.trim_end()));
    }
    Some(text)
}

/// The first part of `text` that fits `budget` (counted with `count`) once [`with_more`] appends
/// `more` — where the whole is and how to read on — to it: cut on a line boundary when one is near.
pub fn cut_to_fit<'t>(text: &'t str, budget: Tokens, count: &dyn Fn(&str) -> Tokens, more: &str) -> &'t str {
    let with = |end: usize| with_more(&text[..end], more);
    // The largest prefix that fits, by bisection on bytes (a char boundary each time).
    let (mut lo, mut hi) = (0usize, text.len());
    while lo < hi {
        let mid = floor_boundary(text, lo + (hi - lo).div_ceil(2));
        if mid <= lo {
            break;
        }
        if count(&with(mid)) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let end = match text[..lo].rfind('\n') {
        Some(nl) if nl > lo / 2 => nl,
        _ => lo,
    };
    &text[..end]
}

/// A cut text with what says where the rest is: `first part`, `…`, `more`, a line each.
pub fn with_more(first: &str, more: &str) -> String {
    format!("{first}\n…\n{more}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_found_is_shown_under_its_name() {
        assert_eq!(instructions_text(&[]), None);
        let files = vec![
            ("AGENTS.md".to_string(), "Use nextest.\n".to_string()),
            ("CLAUDE.md".into(), "Be brief.".into()),
        ];
        let text = instructions_text(&files).unwrap();
        assert!(text.starts_with(INSTRUCTIONS_HEADER));
        assert!(text.contains("--- AGENTS.md ---\nUse nextest.\n\n--- CLAUDE.md ---\nBe brief."));
    }

    #[test]
    fn a_long_text_keeps_its_first_part_and_says_where_the_rest_is() {
        let text: String = (0..400).map(|i| format!("rule {i}: é keep it\n")).collect();
        let count = |t: &str| Tokens(t.len() as u64 / 3);
        let more = "[read on: evidence e1]";
        let cut = with_more(cut_to_fit(&text, Tokens(200), &count, more), more);
        assert!(count(&cut) <= Tokens(200));
        assert!(cut.starts_with("rule 0: é keep it\n"));
        assert!(cut.ends_with("…\n[read on: evidence e1]"));
        assert!(cut.len() > 400, "as much as fits: {}", cut.len());
    }
}
