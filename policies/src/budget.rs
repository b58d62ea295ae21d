//! The fitter's two thresholds. The trigger is where a request is rebuilt; the destination is where the
//! rebuilt request lands. They are far apart on purpose: compaction throws the provider's prompt cache
//! away, so it should happen rarely and decisively.

use agentd_protocol::tokens::Tokens;
use serde::{Deserialize, Serialize};

/// How many of the coder's working files (the files it wrote or edited, newest first) a rebuilt
/// request may carry; the compaction keeps them within half the rebuilt request.
pub const WORKING_FILES: usize = 8;

/// A working file larger than this (bytes) is left out of a rebuilt request: the model reads it
/// with `read_file` instead.
pub const WORKING_FILE_BYTES: u64 = 256 << 10;

/// The trigger's percentage of the window when neither `settings.set` nor the role's configuration sets
/// `compact_at`.
pub const DEFAULT_COMPACT_AT: u8 = 80;
/// The destination's percentage of the window: a compaction aims to bring a request down to half the window
/// (less when the trigger sits lower, see [`MIN_GAP_POINTS`]).
pub const DEFAULT_DESTINATION: u8 = 50;
/// The destination sits at least this many points below the trigger.
pub const MIN_GAP_POINTS: u8 = 5;

/// The three sizes a request is judged by, in tokens, for one role on one server/model: the window it must
/// never exceed, the trigger above which it is compacted, and the destination a compaction aims for. Built by
/// [`Thresholds::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// The model's context window.
    pub window: Tokens,
    /// The compaction trigger: `compact_at` percent of the window, lowered so that the answer's
    /// `max_output_tokens` still fits above it. A request above it is compacted before it is sent.
    pub trigger: Tokens,
    /// Where a compaction aims to land: [`DEFAULT_DESTINATION`] percent of the window, and always at least
    /// [`MIN_GAP_POINTS`] percent of the window below the trigger.
    pub destination: Tokens,
}

impl Thresholds {
    /// Thresholds for a window, a `compact_at` percentage and the tokens the answer needs
    /// (`output_reserve`). The trigger is lowered so that the answer still fits above it.
    pub fn new(window: Tokens, compact_at: u8, output_reserve: Tokens) -> Thresholds {
        let compact_at = compact_at.clamp(1, 100);
        let mut trigger = window.percent(compact_at);
        let ceiling = window.saturating_sub(output_reserve);
        if trigger > ceiling {
            trigger = ceiling;
        }
        let dest_points = DEFAULT_DESTINATION.min(compact_at.saturating_sub(MIN_GAP_POINTS));
        let mut destination = window.percent(dest_points);
        // A lowered trigger drags the destination with it, keeping the gap.
        let gap = window.percent(MIN_GAP_POINTS);
        if destination + gap > trigger {
            destination = trigger.saturating_sub(gap);
        }
        Thresholds { window, trigger, destination }
    }

    /// These thresholds with the trigger a compaction priced by the provider's prompt cache
    /// (`compaction::price::next_trigger`): never above the role's trigger, never below the
    /// destination (a compaction lands below it).
    pub fn priced(self, at: Tokens) -> Thresholds {
        Thresholds { trigger: at.clamp(self.destination.min(self.trigger), self.trigger), ..self }
    }

    /// Whether a request of `tokens` must be rebuilt before it is sent.
    pub fn crosses_trigger(&self, tokens: Tokens) -> bool {
        tokens > self.trigger
    }

    /// Whether a request of `tokens` cannot be sent at all.
    pub fn over_window(&self, tokens: Tokens) -> bool {
        tokens > self.window
    }

    /// The largest tool result (or evidence page) that goes into the request whole, when the request
    /// it answers is `current` tokens: whatever still leaves the next request at or under the
    /// trigger — it is read without a compaction in between — and never less than half the
    /// destination, the most a compaction can keep verbatim beside its checkpoint. Larger results are
    /// stored whole as evidence and shown a page of this size at a time. (A page costs a whole request
    /// each: paging what would fit only spends tokens.)
    pub fn whole_result_limit(&self, current: Tokens) -> Tokens {
        let room = self.trigger.saturating_sub(current);
        room.max(Tokens(self.destination.0 / 2)).max(MIN_RESULT_LIMIT)
    }
}

/// No result limit is smaller than this, however small the window.
pub const MIN_RESULT_LIMIT: Tokens = Tokens(256);

/// The summary a checkpoint may carry: a tenth of the window, between 256 and 4,096 tokens. It is both
/// the room the plan reserves for the summary and the summariser's `max_tokens`.
pub fn summary_reserve(window: Tokens) -> Tokens {
    Tokens((window.0 / 10).clamp(256, 4096))
}

/// A folding summary request (instruction, objective, summary so far, batch) and its answer fill at
/// most this share of the summariser's window.
pub const FOLD_REQUEST_PERCENT: u8 = 90;

/// A summary that continues the role's own request (the cached prefix, then the instruction) is
/// made only when that request, the instruction and the answer fill at most this share of the window.
pub const IN_PLACE_PERCENT: u8 = 98;

/// The objective as the summariser sees it is cut to a sixteenth of the window (about three bytes a
/// token): context for the summary, not the thing summarised.
pub fn objective_bytes_for_summary(window: Tokens) -> usize {
    usize::try_from(window.0 / 16 * 3).unwrap_or(usize::MAX)
}

/// Receipts are handed to a delegated agent whole when they fit a tenth of its window; otherwise as a
/// bounded view of that size naming the archive of the complete list.
pub fn handoff_budget(window: Tokens) -> Tokens {
    Tokens(window.0 / 10)
}

/// A refusal that states no limit still proves the request did not fit: the window is bounded just
/// below what was sent.
pub fn refusal_bound(sent: Tokens) -> Tokens {
    sent.percent(95)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let t = Thresholds::new(Tokens(100_000), 80, Tokens(0));
        assert_eq!(t.trigger, Tokens(80_000));
        assert_eq!(t.destination, Tokens(50_000));
    }

    #[test]
    fn low_trigger_keeps_a_gap() {
        let t = Thresholds::new(Tokens(100_000), 40, Tokens(0));
        assert_eq!(t.trigger, Tokens(40_000));
        assert_eq!(t.destination, Tokens(35_000));
    }

    #[test]
    fn results_stay_whole_while_they_fit_under_the_trigger() {
        let t = Thresholds::new(Tokens(32_768), 80, Tokens(0));
        // Early on, the room under the trigger decides: a 20K result of a 3K request is whole.
        assert_eq!(t.whole_result_limit(Tokens(3_000)), Tokens(26_214 - 3_000));
        // Near the trigger, half the destination: what a compaction can still keep verbatim.
        assert_eq!(t.whole_result_limit(Tokens(25_000)), Tokens(8_192));
        assert_eq!(t.whole_result_limit(Tokens(40_000)), Tokens(8_192));
        // A 3,000-token file is never paged at this window.
        assert!((0..26_214).step_by(997).all(|c| t.whole_result_limit(Tokens(c)) >= Tokens(3_000)));
        let tiny = Thresholds::new(Tokens(600), 80, Tokens(0));
        assert_eq!(tiny.whole_result_limit(Tokens(600)), MIN_RESULT_LIMIT);
    }

    #[test]
    fn fractions() {
        assert_eq!(summary_reserve(Tokens(1_000)), Tokens(256));
        assert_eq!(summary_reserve(Tokens(32_768)), Tokens(3_276));
        assert_eq!(summary_reserve(Tokens(1_000_000)), Tokens(4_096));
        assert_eq!(handoff_budget(Tokens(32_768)), Tokens(3_276));
        assert_eq!(refusal_bound(Tokens(10_000)), Tokens(9_500));
        assert_eq!(objective_bytes_for_summary(Tokens(16_384)), 3_072);
    }

    #[test]
    fn a_priced_trigger_stays_between_the_destination_and_the_roles_trigger() {
        let t = Thresholds::new(Tokens(32_768), 80, Tokens(0));
        assert_eq!(t.priced(Tokens(20_000)), Thresholds { trigger: Tokens(20_000), ..t });
        assert_eq!(t.priced(Tokens(1_000)).trigger, t.destination);
        assert_eq!(t.priced(Tokens(40_000)), t);
    }

    #[test]
    fn output_reserve_lowers_trigger() {
        let t = Thresholds::new(Tokens(10_000), 80, Tokens(4_000));
        assert_eq!(t.trigger, Tokens(6_000));
        assert!(t.destination <= Tokens(5_500));
        assert!(t.destination < t.trigger);
    }
}
