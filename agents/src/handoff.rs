//! The handoff to a delegated agent: the objective, and the caller's receipts as a bounded view.
//!
//! When the whole list fits the handoff's share of the receiving agent's budget it is handed over
//! whole. Otherwise the complete list is archived (by the runtime, as evidence) and the handoff carries
//! the newest receipts that fit, says how many it left out, and names the archive and how to read it.
//! Receipts are never dropped silently: the view always states `shown of total`.

use agentd_protocol::Receipt;
use agentd_protocol::Role;

/// One receipt as a line of the view.
pub fn receipt_line(r: &Receipt) -> String {
    let status = if r.ok { "ok" } else { "failed" };
    let evidence = r.evidence_id.as_deref().map(|id| format!(" [evidence {id}]")).unwrap_or_default();
    format!("- {} {} → {status}: {}{evidence}", r.tool, r.arguments, r.outcome)
}

/// The receipts as JSON lines, for the archive.
pub fn archive_lines(receipts: &[Receipt]) -> String {
    let mut out = String::new();
    for r in receipts {
        out.push_str(&serde_json::to_string(r).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// A rendered handoff.
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    /// The delegated agent's first message: the objective, then the `[receipts]` view.
    pub text: String,
    /// How many receipts the view shows (the newest ones).
    pub shown: usize,
    /// How many receipts the caller has; more than `shown` when the view is bounded and the complete list was
    /// archived.
    pub total: usize,
}

/// Whether the complete list fits `budget` tokens (measured by `count`).
pub fn fits_whole(from: &Role, receipts: &[Receipt], budget: u64, count: &dyn Fn(&str) -> u64) -> bool {
    count(&view(from, receipts, receipts.len(), None)) <= budget
}

fn view(from: &Role, receipts: &[Receipt], shown: usize, archive: Option<&str>) -> String {
    let total = receipts.len();
    let mut text = if shown == total {
        format!("[receipts] What {from} has done so far, newest first ({total} operations):\n")
    } else {
        let reader = archive
            .map(|id| {
                format!(
                    " The complete list is evidence {id}; read it with read_evidence {{\"id\": \"{id}\"}}."
                )
            })
            .unwrap_or_default();
        format!("[receipts] What {from} has done so far, newest first ({shown} of {total} operations shown).{reader}\n")
    };
    for r in receipts.iter().rev().take(shown) {
        text.push_str(&receipt_line(r));
        text.push('\n');
    }
    text
}

/// The handoff message: the objective, then the receipts view within `budget` tokens. `archive` names
/// where the complete list is when it does not fit.
pub fn handoff(
    objective: &str,
    from: &Role,
    receipts: &[Receipt],
    budget: u64,
    count: &dyn Fn(&str) -> u64,
    archive: Option<&str>,
) -> Handoff {
    let total = receipts.len();
    if total == 0 {
        return Handoff { text: objective.to_string(), shown: 0, total };
    }
    // The most receipts (newest first) whose view fits: binary search on the count.
    let (mut lo, mut hi) = (0usize, total);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if count(&view(from, receipts, mid, archive)) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let shown = lo;
    Handoff { text: format!("{objective}\n\n{}", view(from, receipts, shown, archive)), shown, total }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(i: usize) -> Receipt {
        Receipt {
            tool: "read_file".into(),
            arguments: format!("{{\"path\": \"f{i}.rs\"}}"),
            ok: true,
            outcome: "x".repeat(40),
            evidence_id: None,
        }
    }

    fn words(s: &str) -> u64 {
        s.split_whitespace().count() as u64
    }

    #[test]
    fn small_lists_go_whole() {
        let list: Vec<Receipt> = (0..3).map(r).collect();
        assert!(fits_whole(&Role::Lead, &list, 1_000, &words));
        let h = handoff("fix it", &Role::Lead, &list, 1_000, &words, None);
        assert_eq!((h.shown, h.total), (3, 3));
        assert!(h.text.starts_with("fix it\n\n[receipts]"));
        // Newest first.
        assert!(h.text.find("f2.rs").unwrap() < h.text.find("f0.rs").unwrap());
    }

    #[test]
    fn large_lists_are_bounded_and_name_the_archive() {
        let list: Vec<Receipt> = (0..500).map(r).collect();
        assert!(!fits_whole(&Role::Lead, &list, 200, &words));
        let h = handoff("fix it", &Role::Lead, &list, 200, &words, Some("ev-1"));
        assert!(h.shown > 0 && h.shown < 500, "{}", h.shown);
        assert!(words(&h.text) <= 200 + 2);
        assert!(h.text.contains(&format!("{} of 500 operations shown", h.shown)));
        assert!(h.text.contains("read_evidence {\"id\": \"ev-1\"}"));
        assert!(h.text.contains("f499.rs"), "the newest is kept");
    }

    #[test]
    fn archive_lines_round_trip() {
        let list: Vec<Receipt> = (0..4).map(r).collect();
        let back: Vec<Receipt> =
            archive_lines(&list).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(back, list);
    }
}
