//! Rounds: the units compaction keeps or removes whole, so that a tool call is never separated from
//! its result.
//!
//! An assistant message together with all the tool messages that follow it is one round; a user or a
//! system message is a round of its own; a stray tool message joins the round before it (or forms the
//! first round when it opens the history). A history read back unrepaired may hold a result that does
//! not follow its call directly (a user message in between): then every round from the call's to the
//! result's is merged into one, so the pair still cannot be split.

use agentd_protocol::message::{Message, Speaker};
use std::collections::HashMap;
use std::ops::Range;

/// Partitions `history` into rounds: contiguous ranges of message indices, in order, covering it all.
pub fn rounds(history: &[Message]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    // Call id → index of the latest message that made that call.
    let mut calls: HashMap<&str, usize> = HashMap::new();
    for (i, msg) in history.iter().enumerate() {
        match msg.role {
            Speaker::Tool if !out.is_empty() => {
                if let Some(last) = out.last_mut() {
                    last.end = i + 1;
                }
            }
            _ => out.push(i..i + 1),
        }
        // Keep every answered call in the same round as its answer.
        let earliest_call = msg.tool_result_ids().filter_map(|id| calls.get(id).copied()).min();
        if let Some(call_at) = earliest_call {
            let r = round_containing(&out, call_at);
            if r + 1 < out.len() {
                out.truncate(r + 1);
                out[r].end = i + 1;
            }
        }
        for (id, _, _) in msg.tool_calls() {
            calls.insert(id, i);
        }
    }
    out
}

/// For each message, the index of the round holding it.
pub fn round_of_each(rounds: &[Range<usize>]) -> Vec<usize> {
    let mut out = Vec::with_capacity(rounds.last().map_or(0, |r| r.end));
    for (r, range) in rounds.iter().enumerate() {
        out.extend(range.clone().map(|_| r));
    }
    out
}

fn round_containing(rounds: &[Range<usize>], index: usize) -> usize {
    // Rounds are sorted and contiguous: the last one starting at or before `index`.
    rounds.partition_point(|r| r.start <= index).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_protocol::message::Part;
    use proptest::prelude::*;

    fn call(ids: &[&str]) -> Message {
        Message::new(
            Speaker::Assistant,
            ids.iter()
                .map(|id| Part::ToolCall {
                    id: (*id).into(),
                    name: "read_file".into(),
                    arguments: "{}".into(),
                })
                .collect(),
        )
    }

    #[test]
    fn assistant_and_its_results_form_one_round() {
        let h = vec![
            Message::user("go"),
            call(&["a", "b"]),
            Message::tool_result("a", "x", false),
            Message::tool_result("b", "y", false),
            Message::assistant_text("done"),
            Message::user("more"),
            Message::system("note"),
        ];
        assert_eq!(rounds(&h), vec![0..1, 1..4, 4..5, 5..6, 6..7]);
        assert_eq!(round_of_each(&rounds(&h)), vec![0, 1, 1, 1, 2, 3, 4]);
    }

    #[test]
    fn stray_tool_messages() {
        let h = vec![
            Message::tool_result("zz", "x", false),
            Message::tool_result("yy", "x", false),
            Message::user("go"),
            Message::tool_result("ww", "x", false),
        ];
        assert_eq!(rounds(&h), vec![0..2, 2..4]);
        assert!(rounds(&[]).is_empty());
    }

    #[test]
    fn a_late_result_merges_the_rounds_between() {
        let h = vec![
            Message::user("go"),
            call(&["a"]),
            Message::user("interjection"),
            Message::tool_result("a", "x", false),
            Message::assistant_text("ok"),
        ];
        assert_eq!(rounds(&h), vec![0..1, 1..4, 4..5]);
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let id = prop::sample::select(vec!["a", "b", "c", "d"]);
        prop_oneof![
            Just(Message::user("u")),
            Just(Message::system("s")),
            Just(Message::assistant_text("t")),
            prop::collection::vec(id.clone(), 1..3).prop_map(|ids| call(&ids)),
            id.prop_map(|id| Message::tool_result(id, "r", false)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn rounds_cover_in_order_and_keep_pairs(h in prop::collection::vec(arb_message(), 0..40)) {
            let rs = rounds(&h);
            let mut next = 0;
            for r in &rs {
                prop_assert_eq!(r.start, next);
                prop_assert!(r.end > r.start);
                next = r.end;
            }
            prop_assert_eq!(next, h.len());
            let of = round_of_each(&rs);
            prop_assert_eq!(of.len(), h.len());
            for (i, m) in h.iter().enumerate() {
                // A tool message opens a round only when it opens the history.
                if m.role == Speaker::Tool && i > 0 {
                    prop_assert!(rs[of[i]].start < i);
                }
                for id in m.tool_result_ids() {
                    let call_at = (0..i).rev().find(|&j| h[j].tool_calls().any(|(c, _, _)| c == id));
                    if let Some(j) = call_at {
                        prop_assert_eq!(of[j], of[i], "call {} at {} answered at {}", id, j, i);
                    }
                }
            }
        }
    }
}
