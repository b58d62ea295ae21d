//! Summarising what leaves the request, in batches sized in tokens against the summariser's own
//! window, folding: the summary so far + the next batch → the new summary. Each summary request
//! therefore fits, even when the conversation is already larger than any window.
//!
//! Pure: the caller renders the removed messages with [`render_for_summary`], splits the text with
//! [`batches`] (measuring with its own counter) and sends one [`fold_prompt`] per batch.

use agentd_protocol::message::{Message, Part};
use agentd_protocol::text::floor_boundary;
use agentd_protocol::tokens::Tokens;

/// The summariser's system prompt for folding requests (requests of their own, without tools).
pub const SUMMARISER_SYSTEM: &str =
    "You compact the working history of a software agent into a faithful, self-contained summary. \
     You never invent facts and never drop exact identifiers, paths, numbers or error messages.";

/// A plain-text transcript of `messages` for the summariser: one tagged line (or block) per part,
/// a blank line between messages. Thinking signatures and image data are left out.
pub fn render_for_summary(messages: &[Message]) -> String {
    let mut out = String::new();
    for (n, msg) in messages.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let role = msg.role.as_str();
        for part in &msg.parts {
            match part {
                Part::Text { text } => out.push_str(&format!("[{role}] {text}")),
                Part::Thinking { redacted: true, .. } => out.push_str("[thinking] (redacted)"),
                Part::Thinking { text, .. } => out.push_str(&format!("[thinking] {text}")),
                Part::ToolCall { name, arguments, .. } => {
                    out.push_str(&format!("[{role} → {name}] {arguments}"))
                }
                Part::ToolResult { content, is_error: false, .. } => {
                    out.push_str(&format!("[tool result] {content}"))
                }
                Part::ToolResult { content, is_error: true, .. } => {
                    out.push_str(&format!("[tool result (error)] {content}"))
                }
                Part::Image { media_type, data } => out.push_str(&format!(
                    "[{role} image] {media_type}, {} bytes of base64, not shown",
                    data.len()
                )),
            }
            out.push('\n');
        }
    }
    out
}

/// Splits `text` into consecutive pieces whose concatenation is `text`, each with
/// `count(piece) <= budget`. Pieces end at line boundaries when a whole line fits; a line longer than
/// the budget is split at char boundaries. A budget of 0 is treated as 1. A piece exceeds the budget
/// only when it is a single character that alone exceeds it (the split stays lossless).
///
/// `count` is assumed to grow with the text (a longer prefix never counts fewer tokens); every piece
/// is nevertheless measured before it is returned.
pub fn batches(text: &str, budget: Tokens, count: &dyn Fn(&str) -> Tokens) -> Vec<String> {
    let budget = budget.max(Tokens(1));
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let end = next_end(text, start, budget, count);
        out.push(text[start..end].to_string());
        start = end;
    }
    out
}

/// The end of the piece starting at `start` (always `> start`).
fn next_end(text: &str, start: usize, budget: Tokens, count: &dyn Fn(&str) -> Tokens) -> usize {
    let n = text.len();
    let fits = |end: usize| count(&text[start..end]) <= budget;
    // A first guess: tokens rarely span less than a byte.
    let guess = ceil_boundary(text, start.saturating_add(usize::try_from(budget.0).unwrap_or(n)).min(n));
    // `lo` fits (or is `start`); `hi` does not fit (or is past the end).
    let (mut lo, mut hi);
    if fits(guess) {
        // Gallop up: double the length until it no longer fits or the text ends.
        lo = guess;
        hi = n + 1;
        while lo < n {
            let probe = ceil_boundary(text, start + (lo - start).saturating_mul(2).min(n - start));
            if fits(probe) {
                lo = probe;
            } else {
                hi = probe;
                break;
            }
        }
        if lo == n {
            return n;
        }
    } else {
        // Gallop down: halve the length until it fits or no character is left.
        hi = guess;
        lo = start;
        let mut len = guess - start;
        while len > 1 {
            len /= 2;
            let probe = floor_boundary(text, start + len);
            if probe <= start {
                break;
            }
            if fits(probe) {
                lo = probe;
                break;
            }
            hi = probe;
        }
    }
    // Bisect between a fitting end and a failing one: exactly for small pieces, to within 1/64 of the
    // piece for large ones (each probe costs a count).
    loop {
        let piece = lo - start;
        let tolerance = if piece > 4096 { piece / 64 } else { 1 };
        if hi - lo <= tolerance {
            break;
        }
        let half = lo + (hi - lo) / 2;
        let mut mid = floor_boundary(text, half);
        if mid <= lo {
            mid = ceil_boundary(text, half);
        }
        if mid <= lo || mid >= hi {
            // No char boundary lies strictly between.
            break;
        }
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if lo == start {
        // Not even one character fits: take it anyway, so the split stays lossless.
        return ceil_boundary(text, start + 1);
    }
    // Prefer the last line boundary inside the piece.
    if let Some(nl) = text[start..lo].rfind('\n') {
        let line_end = start + nl + 1;
        if line_end == lo || fits(line_end) {
            return line_end;
        }
    }
    lo
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at.min(text.len())
}

/// The user prompt of one folding step: fold `batch` into `summary_so_far` (none for the first batch),
/// producing an updated, self-contained summary of the work on `objective`.
pub fn fold_prompt(summary_so_far: Option<&str>, batch: &str, objective: &str) -> String {
    let mut p = String::new();
    p.push_str(
        "You are compacting the working history of an agent so that it can continue its task with a \
         shorter context. Write an updated summary of the work so far that replaces everything below. \
         The summary must be self-contained: the agent will see only the objective, this summary and \
         its most recent steps.\n\n\
         Cover, in this order:\n\
         1. Facts learned (about the code, the environment, the data).\n\
         2. Files read, created or changed, and their current state.\n\
         3. Commands run and their outcomes, including failures that are not yet fixed.\n\
         4. Decisions taken and the reasons for them.\n\
         5. What remains to be done.\n\n\
         Keep exact identifiers, file paths, numbers, command lines and error messages verbatim; do not \
         paraphrase them. Keep every fact from the summary so far unless the new steps show it is no \
         longer true. Do not call tools. Answer with the summary only.\n\n",
    );
    p.push_str("<objective>\n");
    p.push_str(objective);
    p.push_str("\n</objective>\n\n");
    match summary_so_far {
        Some(summary) => {
            p.push_str("<summary_so_far>\n");
            p.push_str(summary);
            p.push_str("\n</summary_so_far>\n\n<next_steps>\n");
        }
        None => p.push_str("<steps>\n"),
    }
    p.push_str(batch);
    if !batch.ends_with('\n') {
        p.push('\n');
    }
    p.push_str(if summary_so_far.is_some() { "</next_steps>\n" } else { "</steps>\n" });
    p
}

/// The instruction that ends an in-place summary request: the conversation above is the request
/// being compacted (so a provider's prompt cache serves it), and everything but its last `kept`
/// messages will be replaced by the answer.
pub fn prefix_prompt(kept: usize, objective: &str) -> String {
    let scope = match kept {
        0 => "everything above".to_string(),
        1 => "everything above except the last message, which stays verbatim".to_string(),
        n => format!("everything above except the last {n} messages, which stay verbatim"),
    };
    format!(
        "[compaction] This conversation is being compacted so the work can continue in a shorter context. \
         Write a summary that replaces {scope}. It must be self-contained: the agent will see only the \
         objective, this summary and the messages kept.\n\n\
         Cover, in this order:\n\
         1. Facts learned (about the code, the environment, the data).\n\
         2. Files read, created or changed, and their current state.\n\
         3. Commands run and their outcomes, including failures that are not yet fixed.\n\
         4. Decisions taken and the reasons for them.\n\
         5. What remains to be done.\n\n\
         Keep exact identifiers, file paths, numbers, command lines and error messages verbatim. Do not \
         call tools. Answer with the summary only.\n\n<objective>\n{objective}\n</objective>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::message::Speaker;
    use proptest::prelude::*;

    fn chars_over_3(s: &str) -> Tokens {
        Tokens(s.chars().count().div_ceil(3) as u64 + s.matches('\n').count() as u64)
    }

    #[test]
    fn renders_every_kind_of_part() {
        let h = vec![
            Message::user("fix it"),
            Message::new(
                Speaker::Assistant,
                vec![
                    Part::Thinking { text: "hmm".into(), signature: Some("sig".into()), redacted: false },
                    Part::Text { text: "running".into() },
                    Part::ToolCall {
                        id: "c1".into(),
                        name: "run_command".into(),
                        arguments: r#"{"command":"ls"}"#.into(),
                    },
                ],
            ),
            Message::tool_result("c1", "exit code: 2", true),
            Message::tool_result("c2", "ok", false),
        ];
        let t = render_for_summary(&h);
        assert_eq!(
            t,
            "[user] fix it\n\n[thinking] hmm\n[assistant] running\n[assistant → run_command] {\"command\":\"ls\"}\n\n\
             [tool result (error)] exit code: 2\n\n[tool result] ok\n"
        );
        assert!(!t.contains("sig"));
    }

    #[test]
    fn batches_end_at_lines_when_they_can() {
        let text = "aaa\nbbb\nccc\n";
        // Each line is 3 tokens, two lines 5 tokens.
        let b = batches(text, Tokens(5), &chars_over_3);
        assert_eq!(b, vec!["aaa\nbbb\n", "ccc\n"]);
        assert_eq!(batches("", Tokens(5), &chars_over_3), Vec::<String>::new());
        assert_eq!(batches(text, Tokens(100), &chars_over_3), vec![text]);
    }

    #[test]
    fn a_long_line_is_split_inside() {
        let text = "é".repeat(100);
        let b = batches(&text, Tokens(10), &chars_over_3);
        // 30 characters are 10 tokens.
        assert_eq!(b.len(), 4);
        assert_eq!(b.concat(), text);
        assert!(b.iter().all(|p| chars_over_3(p) <= Tokens(10)));
    }

    #[test]
    fn zero_budget_and_oversized_characters_still_progress() {
        let framed = |s: &str| Tokens(s.len() as u64 + 4);
        let b = batches("ab\nc", Tokens(0), &framed);
        assert_eq!(b, vec!["a", "b", "\n", "c"]);
    }

    #[test]
    fn bisection_finds_a_boundary_between_wide_characters() {
        // Found by the property below: a midpoint inside a 4-byte character used to end the search
        // while a boundary still lay between the fitting and the failing end.
        let text = " \u{fb38} a\u{1cf00}® 🤀¡a𜰀0A A\na®0🌀a®A\u{b55}𐾰AA \u{1cf00}ቘ 𬺰 a \n𐆐🌀a0 0a𐞀Aa\u{a01}ㄅAA𝟎A®𑦪 🌀\u{1ab0}A𝌀\nA𝔇⭶0𖩠A𞤀0ೝ ¡0aAA𑀀 ";
        let count = |s: &str| Tokens(chars_over_3(s).0 + 2);
        let b = batches(text, Tokens(25), &count);
        assert_eq!(b.concat(), text);
        assert_eq!(b.len(), 2);
        assert!(b[0].ends_with("𝌀\n"), "{b:?}");
        assert!(b.iter().all(|p| count(p) <= Tokens(25)));
    }

    #[test]
    fn the_fold_prompt_carries_everything() {
        let first = fold_prompt(None, "[user] x", "make it work");
        assert!(first.contains("make it work") && first.contains("[user] x\n</steps>"));
        let next = fold_prompt(Some("S1"), "[user] y\n", "make it work");
        assert!(next.contains("<summary_so_far>\nS1\n</summary_so_far>"));
        assert!(next.contains("[user] y\n</next_steps>"));
        assert!(next.contains("verbatim"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn batches_are_lossless_and_within_budget(
            text in "(\\PC{0,30}\n?){0,12}",
            budget in 0u64..40,
            framing in 0u64..3,
        ) {
            let count = move |s: &str| Tokens(chars_over_3(s).0 + framing);
            let b = batches(&text, Tokens(budget), &count);
            prop_assert_eq!(b.concat(), text.clone());
            for p in &b {
                prop_assert!(!p.is_empty());
                prop_assert!(
                    count(p) <= Tokens(budget.max(1)) || p.chars().count() == 1,
                    "piece {:?} counts {} over {}", p, count(p), budget
                );
            }
            // Maximal at line granularity: a piece that ends a line could not have taken the next line
            // whole, unless that line is itself split.
            for w in b.windows(2) {
                if w[0].ends_with('\n') {
                    if let Some(nl) = w[1].find('\n') {
                        let joined = format!("{}{}", w[0], &w[1][..=nl]);
                        prop_assert!(count(&joined) > Tokens(budget.max(1)));
                    }
                }
            }
        }
    }
}
