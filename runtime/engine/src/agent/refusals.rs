//! What a context-overflow refusal teaches, and the rule that each lesson is learned once.
//!
//! A provider that refuses a request as too long either states its limit or does not. The turn loop
//! asks [`Refusals::lesson`] what the refusal teaches: first the window itself (the stated limit, or
//! a bound just below what was refused); then, if the window was already right and the count was
//! calibrated, that the calibration counted too low. Each lesson is learned at most once between two
//! answers, so a model that keeps refusing fails the turn instead of looping.

use agentd_policies::budget::refusal_bound;
use agentd_protocol::{Tokens, Window, WindowSource};

/// What the refusals since the last answer already taught: each lesson is learned once between two
/// answers, so a model that keeps refusing fails the turn instead of looping.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    learned: bool,
    underestimated: bool,
}

/// What a context-overflow refusal teaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Lesson {
    /// The window is not what the fitter believed: this one (stated, or bounded just below what was
    /// refused).
    Window(Window),
    /// Refused at the window the fitter knows: the calibrated count was too low for this window.
    Underestimated { window: Tokens },
}

impl Refusals {
    /// The lesson of a refusal of a request counted as `sent` tokens against a `window`, `stated` the
    /// limit the refusal names; `None` when there is nothing (left) to learn and the turn must fail.
    pub(super) fn lesson(
        &mut self,
        stated: Option<Tokens>,
        window: Tokens,
        sent: Tokens,
        calibrated: bool,
    ) -> Option<Lesson> {
        if !self.learned && stated != Some(window) {
            // The refusal states the real window: remember it. One that states none still proves
            // this request did not fit: just below it is the bound.
            self.learned = true;
            let tokens = stated.unwrap_or_else(|| refusal_bound(sent));
            return Some(Lesson::Window(Window { tokens, source: WindowSource::Error }));
        }
        if !self.underestimated && calibrated {
            self.underestimated = true;
            return Some(Lesson::Underestimated { window });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_lesson_is_learned_once_between_two_answers() {
        let error =
            |tokens| Some(Lesson::Window(Window { tokens: Tokens(tokens), source: WindowSource::Error }));
        // A stated limit other than the window believed is the window.
        let mut refusals = Refusals::default();
        assert_eq!(
            refusals.lesson(Some(Tokens(16_384)), Tokens(256_000), Tokens(20_000), false),
            error(16_384)
        );
        // Refused again before an answer, uncalibrated: nothing left to learn.
        assert_eq!(refusals.lesson(Some(Tokens(8_000)), Tokens(16_384), Tokens(15_000), false), None);
        // Refused at the window known, calibrated: the count was too low, once.
        let mut refusals = Refusals::default();
        let at_window = refusals.lesson(Some(Tokens(16_384)), Tokens(16_384), Tokens(15_000), true);
        assert_eq!(at_window, Some(Lesson::Underestimated { window: Tokens(16_384) }));
        assert_eq!(refusals.lesson(Some(Tokens(16_384)), Tokens(16_384), Tokens(15_000), true), None);
        // A refusal that states no limit bounds the window just below what was refused.
        let mut refusals = Refusals::default();
        assert_eq!(refusals.lesson(None, Tokens(256_000), Tokens(10_000), false), error(9_500));
        let after = refusals.lesson(None, Tokens(9_500), Tokens(9_000), true);
        assert_eq!(after, Some(Lesson::Underestimated { window: Tokens(9_500) }));
    }
}
