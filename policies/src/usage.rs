//! Correcting the believed window from a provider's usage report. A server that processed fewer
//! prompt tokens than we measured, while we believed the request fit, cut the prompt silently: its
//! real window is smaller, so clamp it. A server that processed more than a clamped window allows
//! proves the clamp false: lift it.

use agentd_protocol::tokens::{Count, Tokens};
use agentd_protocol::usage::Usage;
use agentd_protocol::window::{Window, WindowSource};

/// What a usage report says about the window believed, as [`correct_window`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Correction {
    /// Nothing to correct.
    None,
    /// The server processed less than was sent although the request was believed to fit: it truncated
    /// silently. The window is clamped to what it processed plus its answer, marked `usage`.
    Clamp(Window),
    /// The server processed more than a clamped window allows, so the clamp was wrong: the window is lifted
    /// to the one believed before the clamp, or to what the server processed and answered.
    Lift(Window),
}

/// How far below our measurement a report may fall before it counts as truncation: tokenizers and
/// chat templates differ by a few tokens per message.
pub fn tolerance(sent: Tokens) -> Tokens {
    Tokens((sent.0 / 50).max(32))
}

/// What we expected the server to count for a request, and how far below it a report may fall
/// before it counts as a silent truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// What the server was expected to count: our count, or the calibrated prediction, of the request.
    pub count: Count,
    /// How far below `count` the server's report may fall before it counts as a silent truncation.
    pub tolerance: Tokens,
    /// The largest prompt the server has reported processing for this model: a request no larger
    /// than that was not cut (the server took more before), so a report below `count` is our
    /// miscount, not a truncation.
    pub processed_before: Tokens,
}

impl Expected {
    /// Counted by the model's own tokenizer, with `framing` tokens of our approximation of the
    /// server's template around the texts (set high, on the safe side): a report below by at most
    /// the framing plus a few percent is template noise, more is a cut (2 %, at least 32 tokens,
    /// plus the framing). A long chain of tool calls adds framing at every step, and a server that
    /// frames them more cheaply is not cutting anything.
    pub fn exact(count: Count, framing: Tokens) -> Expected {
        Expected { count, tolerance: tolerance(count.tokens) + framing, processed_before: Tokens::ZERO }
    }

    /// Predicted by a confirmed calibration, whose confirmation allows errors up to 3 %: only a report more
    /// than 3 % below (at least 32 tokens) is a cut.
    pub fn calibrated(count: Count) -> Expected {
        Expected {
            count,
            tolerance: Tokens((count.tokens.0 * 3 / 100).max(32)),
            processed_before: Tokens::ZERO,
        }
    }

    /// Texts counted exactly but framed by our approximation of the server's template (a counting
    /// endpoint asked text by text): only a report more than 15 % below is a cut.
    pub fn approximate(count: Count) -> Expected {
        Expected {
            count,
            tolerance: Tokens((count.tokens.0 * 15 / 100).max(32)),
            processed_before: Tokens::ZERO,
        }
    }

    /// The same expectation, knowing the server has processed prompts of `largest` tokens for this
    /// model.
    pub fn after(self, largest: Tokens) -> Expected {
        Expected { processed_before: largest, ..self }
    }
}

/// `window` is what we believe; `before_clamp` the window believed before an earlier clamp, if any;
/// `sent` what we expected the server to count for the request; `usage` what it reported.
pub fn correct_window(
    window: Window,
    before_clamp: Option<Window>,
    sent: Expected,
    usage: Usage,
) -> Correction {
    let Expected { count: sent, tolerance, processed_before } = sent;
    let processed = Tokens(usage.prompt_tokens);
    // An estimate is no basis for accusing a server of truncation, and a zero report says nothing.
    if sent.estimated || processed == Tokens::ZERO {
        return Correction::None;
    }
    let believed_fit = sent.tokens <= window.tokens;
    if believed_fit && processed + tolerance < sent.tokens && sent.tokens > processed_before {
        let new = processed + Tokens(usage.completion_tokens);
        if new < window.tokens {
            return Correction::Clamp(Window { tokens: new, source: WindowSource::Usage });
        }
    }
    if window.source == WindowSource::Usage && processed > window.tokens {
        let lifted = Tokens(usage.prompt_tokens.saturating_add(usage.completion_tokens));
        let restored = before_clamp.filter(|b| b.tokens > lifted);
        return Correction::Lift(restored.unwrap_or(Window { tokens: lifted, source: WindowSource::Usage }));
    }
    Correction::None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(tokens: u64, source: WindowSource) -> Window {
        Window { tokens: Tokens(tokens), source }
    }

    fn usage(p: u64, c: u64) -> Usage {
        Usage::new(p, c)
    }

    #[test]
    fn silent_truncation_clamps() {
        let c = correct_window(
            w(256_000, WindowSource::Assumed),
            None,
            Expected::exact(Count::measured(6_000), Tokens::ZERO),
            usage(2_000, 48),
        );
        assert_eq!(c, Correction::Clamp(w(2_048, WindowSource::Usage)));
    }

    #[test]
    fn a_cheaper_framing_is_not_a_cut_but_more_than_it_is() {
        // A chain of 40 tool calls counted with 640 tokens of framing: a server that frames them for
        // less reports up to that much below without having cut anything.
        let expected = || Expected::exact(Count::measured(10_000), Tokens(640));
        let believed = w(256_000, WindowSource::Assumed);
        assert_eq!(correct_window(believed, None, expected(), usage(9_200, 10)), Correction::None);
        assert_eq!(
            correct_window(believed, None, expected(), usage(9_000, 10)),
            Correction::Clamp(w(9_010, WindowSource::Usage)),
            "past the framing and the 2 %"
        );
    }

    #[test]
    fn a_request_no_larger_than_one_the_server_took_was_not_cut() {
        // A calibrated prediction 20 % over the report: a truncation, unless the server has already
        // processed a larger prompt of this model, and then it is our miscount.
        let expected = Expected::calibrated(Count::measured(4_000));
        let w64 = w(65_536, WindowSource::Declared);
        assert_eq!(
            correct_window(w64, None, expected, usage(3_300, 30)),
            Correction::Clamp(w(3_330, WindowSource::Usage))
        );
        assert_eq!(
            correct_window(w64, None, expected.after(Tokens(52_000)), usage(3_300, 30)),
            Correction::None
        );
        assert_eq!(
            correct_window(w64, None, expected.after(Tokens(3_900)), usage(3_300, 30)),
            Correction::Clamp(w(3_330, WindowSource::Usage))
        );
    }

    #[test]
    fn small_template_differences_are_tolerated() {
        let c = correct_window(
            w(32_768, WindowSource::Declared),
            None,
            Expected::exact(Count::measured(10_000), Tokens::ZERO),
            usage(9_900, 10),
        );
        assert_eq!(c, Correction::None);
    }

    #[test]
    fn estimates_never_accuse() {
        let c = correct_window(
            w(256_000, WindowSource::Assumed),
            None,
            Expected::exact(Count::estimated(6_000), Tokens::ZERO),
            usage(2_000, 48),
        );
        assert_eq!(c, Correction::None);
    }

    #[test]
    fn a_larger_prompt_lifts_a_false_clamp() {
        let before = w(32_768, WindowSource::Declared);
        let c = correct_window(
            w(2_048, WindowSource::Usage),
            Some(before),
            Expected::exact(Count::measured(5_000), Tokens::ZERO),
            usage(5_000, 10),
        );
        assert_eq!(c, Correction::Lift(before));
        let c = correct_window(
            w(2_048, WindowSource::Usage),
            None,
            Expected::exact(Count::measured(5_000), Tokens::ZERO),
            usage(5_000, 10),
        );
        assert_eq!(c, Correction::Lift(w(5_010, WindowSource::Usage)));
    }

    #[test]
    fn an_approximate_count_tolerates_its_framing_and_still_sees_a_cut() {
        let w32 = w(32_768, WindowSource::Declared);
        // 12 % over by our framing of the server's template: not a truncation.
        let c = correct_window(w32, None, Expected::approximate(Count::measured(784)), usage(700, 10));
        assert_eq!(c, Correction::None);
        assert_eq!(
            correct_window(w32, None, Expected::exact(Count::measured(784), Tokens::ZERO), usage(700, 10)),
            Correction::Clamp(w(710, WindowSource::Usage)),
            "the same report against an exact count is one"
        );
        // A real cut (a third gone) is seen through the approximation.
        let c = correct_window(w32, None, Expected::approximate(Count::measured(9_000)), usage(6_000, 10));
        assert_eq!(c, Correction::Clamp(w(6_010, WindowSource::Usage)));
        // A calibrated prediction: 3 %.
        let c = correct_window(w32, None, Expected::calibrated(Count::measured(10_000)), usage(9_800, 10));
        assert_eq!(c, Correction::None);
        let c = correct_window(w32, None, Expected::calibrated(Count::measured(10_000)), usage(9_000, 10));
        assert_eq!(c, Correction::Clamp(w(9_010, WindowSource::Usage)));
    }

    #[test]
    fn a_declared_window_is_not_lifted_by_usage() {
        let c = correct_window(
            w(8_192, WindowSource::Declared),
            None,
            Expected::exact(Count::measured(9_000), Tokens::ZERO),
            usage(9_000, 1),
        );
        assert_eq!(c, Correction::None);
    }
}
