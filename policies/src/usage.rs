//! Correcting the believed window from a provider's usage report. A server that processed fewer
//! prompt tokens than we measured, while we believed the request fit, cut the prompt silently: its
//! real window is smaller, so clamp it. A server that processed more than a clamped window allows
//! proves the clamp false: lift it.

use crate::event::Usage;
use crate::tokens::{Count, Tokens};
use crate::window::{Window, WindowSource};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Correction {
    None,
    Clamp(Window),
    Lift(Window),
}

/// How far below our measurement a report may fall before it counts as truncation: tokenizers and
/// chat templates differ by a few tokens per message.
pub fn tolerance(sent: Tokens) -> Tokens {
    Tokens((sent.0 / 50).max(32))
}

/// `window` is what we believe; `before_clamp` the window believed before an earlier clamp, if any;
/// `sent` what we measured for the request; `usage` what the server reported for it.
pub fn correct_window(window: Window, before_clamp: Option<Window>, sent: Count, usage: Usage) -> Correction {
    let processed = Tokens(usage.prompt_tokens);
    // An estimate is no basis for accusing a server of truncation, and a zero report says nothing.
    if sent.estimated || processed == Tokens::ZERO {
        return Correction::None;
    }
    let believed_fit = sent.tokens <= window.tokens;
    if believed_fit && processed + tolerance(sent.tokens) < sent.tokens {
        let new = processed + Tokens(usage.completion_tokens);
        if new < window.tokens {
            return Correction::Clamp(Window { tokens: new, source: WindowSource::Usage });
        }
    }
    if window.source == WindowSource::Usage && processed > window.tokens {
        let lifted = Tokens(usage.prompt_tokens + usage.completion_tokens);
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
        Usage { prompt_tokens: p, completion_tokens: c }
    }

    #[test]
    fn silent_truncation_clamps() {
        let c =
            correct_window(w(256_000, WindowSource::Assumed), None, Count::measured(6_000), usage(2_000, 48));
        assert_eq!(c, Correction::Clamp(w(2_048, WindowSource::Usage)));
    }

    #[test]
    fn small_template_differences_are_tolerated() {
        let c = correct_window(
            w(32_768, WindowSource::Declared),
            None,
            Count::measured(10_000),
            usage(9_900, 10),
        );
        assert_eq!(c, Correction::None);
    }

    #[test]
    fn estimates_never_accuse() {
        let c = correct_window(
            w(256_000, WindowSource::Assumed),
            None,
            Count::estimated(6_000),
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
            Count::measured(5_000),
            usage(5_000, 10),
        );
        assert_eq!(c, Correction::Lift(before));
        let c = correct_window(w(2_048, WindowSource::Usage), None, Count::measured(5_000), usage(5_000, 10));
        assert_eq!(c, Correction::Lift(w(5_010, WindowSource::Usage)));
    }

    #[test]
    fn a_declared_window_is_not_lifted_by_usage() {
        let c =
            correct_window(w(8_192, WindowSource::Declared), None, Count::measured(9_000), usage(9_000, 1));
        assert_eq!(c, Correction::None);
    }
}
