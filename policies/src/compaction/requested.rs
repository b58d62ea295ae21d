//! A compaction the user asks for (`agentd compact`), not the trigger: the numbers it aims at, and
//! whether there is anything to compact at all.
//!
//! Past the trigger a compaction aims at the destination. Asked for below it, the same destination
//! could hold the whole history and nothing would leave, so a requested compaction aims at half the
//! request as it stands (the destination when that is lower). It is refused up front — before any
//! event or summary request — when nothing but the last round could leave: the pinned blocks and
//! the objective always stay.

use super::candidate::is_checkpoint;
use crate::budget::Thresholds;
use crate::rounds::rounds;
use agentd_protocol::message::{Message, MessageKind};
use agentd_protocol::tokens::Tokens;

/// Why a requested compaction is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NothingToCompact {
    /// The history holds no more than its last round (besides the blocks and the objective).
    #[error("nothing to compact: the history holds {rounds} round(s) besides its objective and blocks, and the last always stays")]
    TooShort {
        /// How many rounds could be considered.
        rounds: usize,
    },
}

/// The thresholds a requested compaction of a request of `before` tokens works to, or why there is
/// nothing to compact in `history`.
pub fn requested(
    thresholds: Thresholds,
    before: Tokens,
    history: &[Message],
) -> Result<Thresholds, NothingToCompact> {
    let movable: Vec<Message> =
        history.iter().filter(|m| !m.kind.is_pinned() && m.kind != MessageKind::Objective).cloned().collect();
    let n = rounds(&movable).len();
    // One round and a checkpoint (already a summary) is nothing new either.
    let fresh = movable.iter().filter(|m| !is_checkpoint(m)).count();
    if n < 2 || fresh == 0 {
        return Err(NothingToCompact::TooShort { rounds: n });
    }
    Ok(Thresholds { destination: thresholds.destination.min(Tokens(before.0 / 2)), ..thresholds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_compaction_aims_at_half_and_refuses_a_history_with_nothing_to_leave() {
        let t = Thresholds::new(Tokens(100_000), 80, Tokens(4_096));
        let objective = Message::user("fix it").with_kind(MessageKind::Objective);
        let memory = Message::user("[memory]\n- note").with_kind(MessageKind::Memory);
        let short = vec![memory.clone(), objective.clone(), Message::assistant_text("on it")];
        assert_eq!(requested(t, Tokens(3_000), &short), Err(NothingToCompact::TooShort { rounds: 1 }));
        let long = vec![
            memory,
            objective,
            Message::assistant_text("on it"),
            Message::user("more"),
            Message::assistant_text("ok"),
        ];
        let r = requested(t, Tokens(3_000), &long).unwrap();
        assert_eq!((r.destination, r.trigger), (Tokens(1_500), t.trigger));
        assert_eq!(
            requested(t, Tokens(200_000), &long).unwrap().destination,
            t.destination,
            "never above the destination"
        );
        assert!(requested(t, Tokens(3_000), &short)
            .unwrap_err()
            .to_string()
            .starts_with("nothing to compact"));
    }
}
