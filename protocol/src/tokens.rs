//! Token quantities. A count always says whether it was measured by the model's own tokenizer (or the
//! provider) or merely estimated: an estimate may never certify that a request fits.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A number of tokens. Never a byte count, never a percentage.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct Tokens(pub u64);

impl Tokens {
    /// No tokens.
    pub const ZERO: Tokens = Tokens(0);

    /// `percent` % of this many tokens, rounded down.
    pub fn percent(self, percent: u8) -> Tokens {
        let share = u128::from(self.0) * u128::from(percent) / 100;
        Tokens(u64::try_from(share).unwrap_or(u64::MAX))
    }

    /// This many tokens less `other`, never below zero.
    pub fn saturating_sub(self, other: Tokens) -> Tokens {
        Tokens(self.0.saturating_sub(other.0))
    }
}

/// Sums saturate, as differences stop at zero: no figure a server reports wraps a count.
impl Add for Tokens {
    type Output = Tokens;
    fn add(self, rhs: Tokens) -> Tokens {
        Tokens(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Tokens {
    fn add_assign(&mut self, rhs: Tokens) {
        *self = *self + rhs;
    }
}

impl Sub for Tokens {
    type Output = Tokens;
    fn sub(self, rhs: Tokens) -> Tokens {
        Tokens(self.0.saturating_sub(rhs.0))
    }
}

impl std::iter::Sum for Tokens {
    fn sum<I: Iterator<Item = Tokens>>(iter: I) -> Tokens {
        iter.fold(Tokens::ZERO, |sum, t| sum + t)
    }
}

impl fmt::Display for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A measured or estimated token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Count {
    /// How many tokens.
    pub tokens: Tokens,
    /// True when no tokenizer of the model's own measured this; shown as `~` to users.
    pub estimated: bool,
}

impl Count {
    /// A count a tokenizer of the model's own (or the provider) made.
    pub fn measured(tokens: u64) -> Count {
        Count { tokens: Tokens(tokens), estimated: false }
    }

    /// A count that was only estimated; it never certifies that a request fits.
    pub fn estimated(tokens: u64) -> Count {
        Count { tokens: Tokens(tokens), estimated: true }
    }

    /// The conservative estimate for text no tokenizer of ours knows: one token per three bytes,
    /// rounded up. Real BPE vocabularies average three to four bytes a token on code and prose, so
    /// this overcounts, which is the safe direction.
    pub fn estimate_bytes(bytes: usize) -> Count {
        Count::estimated(bytes.div_ceil(3) as u64)
    }
}

impl Add for Count {
    type Output = Count;
    fn add(self, rhs: Count) -> Count {
        Count { tokens: self.tokens + rhs.tokens, estimated: self.estimated || rhs.estimated }
    }
}

impl AddAssign for Count {
    fn add_assign(&mut self, rhs: Count) {
        *self = *self + rhs;
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.estimated {
            write!(f, "~{}", self.tokens)
        } else {
            write!(f, "{}", self.tokens)
        }
    }
}

/// Where a count came from: the model's own tokenizer, the provider's counting endpoint, or an
/// estimate (one token per three bytes, marked `estimated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CountSource {
    /// tiktoken-rs: the model's own BPE.
    Tiktoken,
    /// The provider's counting endpoint (vLLM / llama.cpp `POST /tokenize`, Anthropic `count_tokens`).
    Endpoint,
    /// One token per three bytes: marked `estimated`, never certifies a fit.
    Estimate,
}

impl CountSource {
    /// The source's name on the wire and in the CLI (`tiktoken`, `endpoint`, `estimate`).
    pub fn as_str(self) -> &'static str {
        match self {
            CountSource::Tiktoken => "tiktoken",
            CountSource::Endpoint => "endpoint",
            CountSource::Estimate => "estimate",
        }
    }
}

/// Which measure a size decision used, as its event says: the counter's source, and how many usage
/// reports had calibrated it (0: the raw count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Measured {
    /// What counted: the model's tokenizer, the provider's counting endpoint, or the estimate.
    pub source: CountSource,
    /// How many of the server's usage reports had calibrated the counter (0: its raw count).
    #[serde(default)]
    pub calibrated_by: u64,
}

/// How a calibration stands, as the gauge and the events show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Standing {
    /// Usage reports learned from.
    pub reports: u64,
    /// The largest recent relative error of a prediction, in percent (0 before any was checked).
    pub spread_percent: f64,
    /// The margin added on top of predictions, in percent.
    pub margin_percent: f64,
    /// Whether the reports have confirmed the calibration (see `agentd_policies::calibration::CONFIRM_REPORTS`).
    pub confirmed: bool,
}

impl std::fmt::Display for Standing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.reports == 1 { "" } else { "s" };
        write!(f, "calibrated from {} usage report{plural}, ±{:.1} %", self.reports, self.spread_percent)?;
        if !self.confirmed {
            write!(f, " (not confirmed yet)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_marks_itself_and_rounds_up() {
        let c = Count::estimate_bytes(10);
        assert!(c.estimated);
        assert_eq!(c.tokens, Tokens(4));
        assert_eq!(c.to_string(), "~4");
    }

    #[test]
    fn adding_an_estimate_taints_the_sum() {
        let sum = Count::measured(10) + Count::estimated(5);
        assert!(sum.estimated);
        assert_eq!(sum.tokens, Tokens(15));
    }

    #[test]
    fn percent_rounds_down() {
        assert_eq!(Tokens(16_384).percent(80), Tokens(13_107));
    }
}
