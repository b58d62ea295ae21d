//! The fitter's two thresholds. The trigger is where a request is rebuilt; the destination is where the
//! rebuilt request lands. They are far apart on purpose: compaction throws the provider's prompt cache
//! away, so it should happen rarely and decisively.

use crate::tokens::Tokens;
use serde::{Deserialize, Serialize};

pub const DEFAULT_COMPACT_AT: u8 = 80;
pub const DEFAULT_DESTINATION: u8 = 50;
/// The destination sits at least this many points below the trigger.
pub const MIN_GAP_POINTS: u8 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    pub window: Tokens,
    pub trigger: Tokens,
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

    /// Whether a request of `tokens` must be rebuilt before it is sent.
    pub fn crosses_trigger(&self, tokens: Tokens) -> bool {
        tokens > self.trigger
    }

    /// Whether a request of `tokens` cannot be sent at all.
    pub fn over_window(&self, tokens: Tokens) -> bool {
        tokens > self.window
    }
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
    fn output_reserve_lowers_trigger() {
        let t = Thresholds::new(Tokens(10_000), 80, Tokens(4_000));
        assert_eq!(t.trigger, Tokens(6_000));
        assert!(t.destination <= Tokens(5_500));
        assert!(t.destination < t.trigger);
    }
}
