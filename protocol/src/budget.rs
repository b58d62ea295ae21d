//! Spending ceilings: a task's or a day's budget in tokens and in money, what was spent against one,
//! and where it applies. A task that reaches one is `paused`, with `budget_reached`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A ceiling in tokens, in US dollars, or both: `[budgets]` in the configuration, `task.submit`'s and
/// `task.resume`'s `budget`. Tokens are what the providers' usage reports say — prompt (cached or
/// not, cache writes included) and completion, summary requests included; cost is that usage at
/// `[prices."MODEL"]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// At most this many tokens, from 1 to [`MAX_BUDGET_TOKENS`]; absent: no ceiling in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_tokens")]
    #[schemars(range(min = 1, max = MAX_BUDGET_TOKENS))]
    pub tokens: Option<u64>,
    /// At most this many US dollars, above 0 and at most [`MAX_BUDGET_USD`]; absent: no ceiling in
    /// money.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_BUDGET_USD), extend("exclusiveMinimum" = 0))]
    pub cost: Option<f64>,
}

/// The largest token ceiling a budget takes: a trillion tokens. Anything larger is a typo, or a
/// number meant to overflow a sum.
pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000;

/// The largest money ceiling a budget takes, in US dollars: a million.
pub const MAX_BUDGET_USD: f64 = 1_000_000.0;

/// A token figure as JSON Schema's `integer` reads one: a whole number, written `316292922` or
/// `316292922.0` alike (a client that writes numbers as floats means the same budget).
fn whole_tokens<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_number(d, "a whole number of tokens")
}

/// An optional whole number as JSON Schema's `integer` reads one (`45878` or `45878.0`), within
/// u64; `what` names it in the error.
pub(crate) fn whole_number<'de, D: serde::Deserializer<'de>>(
    d: D,
    what: &'static str,
) -> Result<Option<u64>, D::Error> {
    struct Whole(&'static str);
    impl serde::de::Visitor<'_> for Whole {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u64, E> {
            Ok(n)
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u64, E> {
            u64::try_from(n).map_err(|_| E::custom(format!("expected {}, got {n}", self.0)))
        }
        fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<u64, E> {
            // Whole and within u64 (2^64 itself is not: the cast would saturate to it).
            if f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                Ok(f as u64)
            } else {
                Err(E::custom(format!("expected {}, got {f}", self.0)))
            }
        }
    }
    struct Maybe(&'static str);
    impl<'de> serde::de::Visitor<'de> for Maybe {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}, or null", self.0)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
            d.deserialize_any(Whole(self.0)).map(Some)
        }
    }
    d.deserialize_option(Maybe(what))
}

/// Why a budget's figure was refused: which figure (`tokens`, `cost`) and why, in words that name
/// the figure given. [`Budget::check`] is the one check, for the CLI's flags, `task.submit` and
/// `task.resume` (socket, HTTP, `agentd mcp`) and `[budgets]` alike.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("budget.{figure} {message}")]
pub struct BudgetError {
    /// `tokens` or `cost`.
    pub figure: &'static str,
    /// Why: `must be …; got …`.
    pub message: String,
}

impl Budget {
    /// A token ceiling: a whole number from 1 to [`MAX_BUDGET_TOKENS`] (given as any integer — a
    /// config's may be negative — and named as given when refused).
    pub fn check_tokens(tokens: impl Into<i128>) -> Result<u64, BudgetError> {
        let tokens = tokens.into();
        if let Ok(n) = u64::try_from(tokens) {
            if (1..=MAX_BUDGET_TOKENS).contains(&n) {
                return Ok(n);
            }
        }
        let message = format!("must be a number of tokens from 1 to {MAX_BUDGET_TOKENS}; got {tokens}");
        Err(BudgetError { figure: "tokens", message })
    }

    /// A money ceiling: a finite amount in US dollars above 0 and at most [`MAX_BUDGET_USD`] (not
    /// `NaN`, not infinite, not `1e309`, which reads as infinite).
    pub fn check_cost(usd: f64) -> Result<f64, BudgetError> {
        if usd.is_finite() && usd > 0.0 && usd <= MAX_BUDGET_USD {
            return Ok(usd);
        }
        let message = format!("must be an amount in USD above 0 and at most {MAX_BUDGET_USD}; got {usd}");
        Err(BudgetError { figure: "cost", message })
    }

    /// Both figures, each when given.
    pub fn check(&self) -> Result<(), BudgetError> {
        self.tokens.map(Budget::check_tokens).transpose()?;
        self.cost.map(Budget::check_cost).transpose()?;
        Ok(())
    }

    /// Neither a token nor a money ceiling.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_none() && self.cost.is_none()
    }

    /// This budget when it has a ceiling; `None` when it has none (how it is shown: absent).
    pub fn any(self) -> Option<Budget> {
        (!self.is_empty()).then_some(self)
    }

    /// This budget, its ceilings replaced by `other`'s where `other` has one.
    pub fn with(self, other: Budget) -> Budget {
        Budget { tokens: other.tokens.or(self.tokens), cost: other.cost.or(self.cost) }
    }
}

/// What was spent (or is about to be): tokens, and their cost when every model involved is priced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Amount {
    /// Tokens: prompt (cached or not) and completion.
    pub tokens: u64,
    /// US dollars, at `[prices."MODEL"]`; absent when nothing spent was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl Amount {
    /// No tokens and no cost.
    pub fn is_nothing(&self) -> bool {
        self.tokens == 0 && self.cost.is_none_or(|c| c == 0.0)
    }

    /// This amount and `other`, summed (tokens saturating: a server's absurd usage report cannot
    /// overflow a sum).
    pub fn plus(self, other: Amount) -> Amount {
        let cost = match (self.cost, other.cost) {
            (None, None) => None,
            (a, b) => Some(cost_sum(a.unwrap_or(0.0), b.unwrap_or(0.0))),
        };
        Amount { tokens: self.tokens.saturating_add(other.tokens), cost }
    }
}

/// Two costs in USD summed, and the sum finite: a cost that is not a finite amount of 0 or more
/// counts as nothing, and the sum stops at `f64::MAX`.
pub fn cost_sum(a: f64, b: f64) -> f64 {
    let finite = |c: f64| if c.is_finite() && c >= 0.0 { c } else { 0.0 };
    (finite(a) + finite(b)).min(f64::MAX)
}

/// Which ceiling a task reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// The task's own: `task.submit`'s `budget`, else `[budgets] task_tokens` / `task_cost`. Raised by
    /// `task.resume` with a `budget`.
    Task,
    /// Every task's requests of one day (in `[scheduler] tz`): `[budgets] day_tokens` / `day_cost`. The
    /// task goes on by itself when the day turns.
    Day,
}

impl BudgetScope {
    /// `task` or `day`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Task => "task",
            BudgetScope::Day => "day",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_figure_is_a_whole_number_however_it_is_written() {
        let read = |text: &str| serde_json::from_str::<Budget>(text).map(|b| b.tokens);
        assert_eq!(read(r#"{"tokens": 316292922}"#).unwrap(), Some(316_292_922));
        assert_eq!(read(r#"{"tokens": 316292922.0}"#).unwrap(), Some(316_292_922));
        assert_eq!(read(r#"{"tokens": null}"#).unwrap(), None);
        assert_eq!(read(r#"{}"#).unwrap(), None);
        for bad in [r#"{"tokens": 1.5}"#, r#"{"tokens": -3}"#, r#"{"tokens": "ten"}"#, r#"{"tokens": 1e20}"#]
        {
            let e = read(bad).unwrap_err().to_string();
            assert!(e.contains("whole number of tokens"), "{bad}: {e}");
        }
    }
}
