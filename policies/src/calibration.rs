//! Calibration: what a server's usage reports teach about our counts.
//!
//! A usage report (`usage.prompt_tokens`, or Anthropic's `input_tokens` plus its cache reads and
//! writes) is the exact size of a request we measured just before sending it: the best calibration
//! there is. So, per server and model:
//!
//! - the **basis** of a request that extends the last reported one (same system, tools and leading
//!   messages) is what the server said of that one; only what was appended since is ours to count,
//!   scaled by the ratio the reports have shown between the server's tokens and our raw count of
//!   appended text ([`Calibration::predict`]);
//! - a request that does not extend it (a rebuilt one, another role's first) is predicted in two
//!   parts: its messages by the ratio of appended text, and its fixed part (system prompt, tool
//!   schemas, priming) by what the server's reports leave for the fixed parts once their messages are
//!   accounted for — a chat template that drops the tool schemas shows up there, not as an error in
//!   every message (before any appended part was measured: the whole-request ratio);
//! - every prediction is checked against the report that follows it; the worst recent
//!   under-prediction becomes the **margin** added on top, so a calibrated count stays on the safe
//!   side of the server's (never under-count), and the spread of those errors is what the gauge shows
//!   (`calibrated from 12 usage reports, ±1.4 %`);
//! - an estimate stays marked `estimated` until the calibration is **confirmed**: the last
//!   [`CONFIRM_REPORTS`] predictions were each within [`CONFIRM_SPREAD`] of the report.
//!
//! Pure data and arithmetic: the fitter feeds reports in ([`Calibration::observe`]) and keeps the
//! state per server/model, persisted, so a restarted daemon starts calibrated.

use agentd_protocol::tokens::{Count, Tokens};
use serde::{Deserialize, Serialize};

/// How much more than the gap to the window a refused count is taken to have missed: the request's
/// real size was somewhere above the window, not at it.
pub const REFUSAL_SLACK: f64 = 0.02;

/// How many recent samples a ratio is taken over: recent enough to follow what the conversation is
/// made of now (code, prose, JSON), long enough to be steady.
pub const RATIO_SAMPLES: usize = 8;
/// How many recent prediction errors the spread is taken over.
pub const RESIDUAL_SAMPLES: usize = 8;
/// How many recent prediction errors the margin is taken over: few, so that one poor early
/// prediction (made from a single report) does not inflate every count for long.
pub const MARGIN_SAMPLES: usize = 4;
/// A calibration is confirmed when this many predictions in a row were close to the reports.
pub const CONFIRM_REPORTS: usize = 3;
/// "Close": within this fraction of the server's count.
pub const CONFIRM_SPREAD: f64 = 0.03;
/// The smallest margin ever added on top of a calibrated prediction (half a percent).
pub const MIN_MARGIN: f64 = 0.005;
/// The margin while no prediction has been checked yet (after a first report).
pub const FIRST_MARGIN: f64 = 0.05;
/// An appended part smaller than this (raw tokens) says too little about the ratio of text to be a
/// sample: a tool call and a one-line result are mostly framing.
const MIN_DELTA_RAW: u64 = 128;
/// A report whose ratio to our raw count falls outside these bounds is not a measurement of the same
/// request (a truncating server, a proxy that adds or drops a prompt): it is not learned from.
const RATIO_BOUNDS: (f64, f64) = (0.2, 5.0);

/// Our raw count of a request: the whole, and its fixed part (system prompt, tool schemas, reply
/// priming); the rest is its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Raw {
    /// The whole request, raw.
    pub total: Tokens,
    /// Its fixed part, raw: system prompt, tool schemas and reply priming.
    pub fixed: Tokens,
}

/// What the server reported for the last request of a role, with our raw count of that request: the
/// basis of the next request when that one extends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Basis {
    /// Our raw (uncalibrated) count of the reported request.
    pub raw: Tokens,
    /// The server's count of it.
    pub actual: Tokens,
}

/// What became of a usage report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Observed {
    /// Learned from; `error` is the relative error of the prediction that was made for it
    /// (`(ours - server's) / server's`, margin excluded), when one was.
    Learned {
        /// The relative error of the prediction that was made for this request (`(ours - server's) /
        /// server's`, margin excluded); `None` when no prediction was made for it (the first report).
        error: Option<f64>,
    },
    /// Not learned from: zero counts, or a ratio no tokenizer explains.
    Rejected,
}

/// One prediction checked against its report. Positive errors mean we predicted too few.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Residual {
    /// `(server's - predicted) / server's`: how far off the whole count was.
    of_total: f64,
    /// The same error relative to the part of the prediction that was estimated (the appended part
    /// of a request with a basis; all of any other): what the margin scales.
    of_estimated: f64,
    /// Whether the prediction was made with ratios measured on its kind of text (appended parts;
    /// fixed parts) rather than a stand-in; only informed errors say anything about predictions now.
    informed: bool,
}

/// The calibration of one server/model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Recent whole requests: (our raw count, the server's count, our raw count of the fixed part),
    /// oldest first.
    whole: Vec<(u64, u64, u64)>,
    /// Recent appended parts (a request minus its basis): (raw, server's), oldest first.
    delta: Vec<(u64, u64)>,
    /// Recent prediction errors, oldest first.
    residuals: Vec<Residual>,
    /// Every report learned from.
    reports: u64,
    /// The largest prompt the server has reported processing (tokens): proof of how much it takes.
    #[serde(default)]
    largest: u64,
}

use agentd_protocol::tokens::Standing;

fn ratio_of(samples: &[(u64, u64)]) -> Option<f64> {
    let recent = &samples[samples.len().saturating_sub(RATIO_SAMPLES)..];
    let raw: u64 = recent.iter().map(|s| s.0).sum();
    let actual: u64 = recent.iter().map(|s| s.1).sum();
    (raw > 0).then(|| actual as f64 / raw as f64)
}

fn push_bounded<T>(v: &mut Vec<T>, item: T, cap: usize) {
    v.push(item);
    if v.len() > cap {
        v.remove(0);
    }
}

fn ceil_tokens(x: f64) -> Tokens {
    if x.is_finite() && x > 0.0 {
        Tokens(x.ceil() as u64)
    } else {
        Tokens::ZERO
    }
}

impl Calibration {
    /// The largest prompt the server has reported processing for this model, in tokens.
    pub fn largest_reported(&self) -> Tokens {
        Tokens(self.largest)
    }

    /// Whether any report has been learned from: before that, counts are used as they are.
    pub fn is_calibrated(&self) -> bool {
        !self.whole.is_empty()
    }

    /// How many usage reports have been learned from, ever (rejected ones do not count).
    pub fn reports(&self) -> u64 {
        self.reports
    }

    /// The informed prediction errors, oldest first (a stand-in ratio's errors say nothing about
    /// the predictions made now).
    fn informed_residuals(&self) -> Vec<Residual> {
        self.residuals.iter().filter(|r| r.informed).copied().collect()
    }

    /// Whether the last [`CONFIRM_REPORTS`] informed predictions were each within [`CONFIRM_SPREAD`]
    /// of the report.
    pub fn confirmed(&self) -> bool {
        let informed = self.informed_residuals();
        informed.len() >= CONFIRM_REPORTS
            && informed[informed.len() - CONFIRM_REPORTS..].iter().all(|r| r.of_total.abs() <= CONFIRM_SPREAD)
    }

    /// The fraction of the estimated part added on top of a prediction: the worst under-prediction
    /// of the last [`MARGIN_SAMPLES`] informed ones, at least [`MIN_MARGIN`]; [`FIRST_MARGIN`] while
    /// no informed prediction has been checked.
    pub fn margin(&self) -> f64 {
        let informed = self.informed_residuals();
        let recent = &informed[informed.len().saturating_sub(MARGIN_SAMPLES)..];
        if recent.is_empty() {
            return FIRST_MARGIN;
        }
        recent.iter().map(|r| r.of_estimated).fold(MIN_MARGIN, f64::max)
    }

    /// The largest recent relative error of a whole count, either way: how far off the last
    /// [`RESIDUAL_SAMPLES`] checked predictions were.
    pub fn spread(&self) -> f64 {
        self.residuals[self.residuals.len().saturating_sub(RESIDUAL_SAMPLES)..]
            .iter()
            .map(|r| r.of_total.abs())
            .fold(0.0, f64::max)
    }

    /// How the calibration stands, for the gauge and the events: reports learned from, the spread and the
    /// margin in percent, and whether it is confirmed.
    pub fn standing(&self) -> Standing {
        Standing {
            reports: self.reports,
            spread_percent: (self.spread() * 1000.0).round() / 10.0,
            margin_percent: (self.margin() * 1000.0).round() / 10.0,
            confirmed: self.confirmed(),
        }
    }

    /// Server tokens per raw token of whole requests.
    pub fn whole_ratio(&self) -> Option<f64> {
        let pairs: Vec<(u64, u64)> = self.whole.iter().map(|w| (w.0, w.1)).collect();
        ratio_of(&pairs)
    }

    /// Server tokens per raw token of the fixed parts (system, tools, priming): what the recent
    /// reports leave once their messages are counted at the text ratio.
    pub fn fixed_ratio(&self) -> Option<f64> {
        let text = ratio_of(&self.delta)?;
        let recent = &self.whole[self.whole.len().saturating_sub(RATIO_SAMPLES)..];
        let fixed: u64 = recent.iter().map(|w| w.2).sum();
        if fixed == 0 {
            return None;
        }
        let left: f64 =
            recent.iter().map(|w| (w.1 as f64 - text * w.0.saturating_sub(w.2) as f64).max(0.0)).sum();
        Some(left / fixed as f64)
    }

    /// Server tokens per raw token of appended text (tool results, answers): the ratio for pieces of
    /// a conversation. Until an appended part has been measured, 1 — the raw count itself, which for
    /// the estimate overcounts text; a whole request's ratio is no stand-in (its tool schemas count
    /// differently from text).
    pub fn text_ratio(&self) -> Option<f64> {
        if !self.is_calibrated() {
            return None;
        }
        Some(ratio_of(&self.delta).unwrap_or(1.0))
    }

    /// Whether a prediction with this basis uses ratios measured on its kind of text.
    fn informed(&self, basis: Option<Basis>) -> bool {
        match basis {
            Some(_) => !self.delta.is_empty(),
            None => self.fixed_ratio().is_some(),
        }
    }

    /// The best prediction of the server's count of a request whose raw count is `raw`, margin
    /// excluded, in two parts: what is known (the basis's reported count, when this request extends
    /// it) and what is estimated (the appended part; all of any other request).
    fn parts(&self, raw: Raw, basis: Option<Basis>) -> Option<(f64, f64)> {
        match basis {
            Some(b) if raw.total >= b.raw => {
                let ratio = self.text_ratio()?;
                Some((b.actual.0 as f64, ratio * (raw.total - b.raw).0 as f64))
            }
            _ => match (self.fixed_ratio(), ratio_of(&self.delta)) {
                (Some(fixed), Some(text)) => Some((
                    0.0,
                    fixed * raw.fixed.0 as f64 + text * raw.total.saturating_sub(raw.fixed).0 as f64,
                )),
                _ => Some((0.0, self.whole_ratio()? * raw.total.0 as f64)),
            },
        }
    }

    /// The best prediction of the server's count, margin excluded.
    pub fn best(&self, raw: Raw, basis: Option<Basis>) -> Option<f64> {
        self.parts(raw, basis).map(|(known, estimated)| known + estimated)
    }

    /// A request's count for every decision: the best prediction, with the margin on its estimated
    /// part; the raw count itself before any report. Marked `estimated` while the raw count was an
    /// estimate and the calibration is not confirmed.
    pub fn predict(&self, raw: Count, fixed: Tokens, basis: Option<Basis>) -> Count {
        match self.parts(Raw { total: raw.tokens, fixed }, basis) {
            None => raw,
            Some((known, estimated)) => Count {
                tokens: ceil_tokens(known + estimated * (1.0 + self.margin())),
                estimated: raw.estimated && !self.confirmed(),
            },
        }
    }

    /// A piece of text or one message, counted raw as `raw`: scaled by the text ratio, margin
    /// included. Used for every size decision that is not a whole request (paging a result, bounding
    /// a handoff, the working files, the summariser's batches), so all of them agree with the fit.
    pub fn scale(&self, raw: Count) -> Count {
        match self.text_ratio() {
            None => raw,
            Some(ratio) => Count {
                tokens: ceil_tokens(raw.tokens.0 as f64 * ratio * (1.0 + self.margin())),
                estimated: raw.estimated && !self.confirmed(),
            },
        }
    }

    /// Learns from a report: the server counted `actual` for a request we counted `raw` (raw,
    /// uncalibrated; its fixed part too), whose basis was `basis`. The error of the prediction that was made for it (by
    /// this calibration as it stood) is recorded first.
    pub fn observe(&mut self, raw: Raw, basis: Option<Basis>, actual: Tokens) -> Observed {
        self.largest = self.largest.max(actual.0);
        if raw.total == Tokens::ZERO || actual == Tokens::ZERO {
            return Observed::Rejected;
        }
        let ratio = actual.0 as f64 / raw.total.0 as f64;
        if !(RATIO_BOUNDS.0..=RATIO_BOUNDS.1).contains(&ratio) {
            return Observed::Rejected;
        }
        let informed = self.informed(basis);
        let error = self.parts(raw, basis).map(|(known, estimated)| {
            let miss = actual.0 as f64 - (known + estimated);
            // An estimated part of a few tokens (a one-line answer) is mostly framing: its relative
            // error says nothing about the next one.
            if estimated >= MIN_DELTA_RAW as f64 / 2.0 {
                let residual = Residual {
                    of_total: miss / actual.0 as f64,
                    of_estimated: (miss / estimated).clamp(-1.0, 1.0),
                    informed,
                };
                push_bounded(&mut self.residuals, residual, RESIDUAL_SAMPLES * 2);
            }
            -miss / actual.0 as f64
        });
        push_bounded(&mut self.whole, (raw.total.0, actual.0, raw.fixed.0.min(raw.total.0)), RATIO_SAMPLES);
        if let Some(b) = basis {
            let raw_delta = raw.total.saturating_sub(b.raw).0;
            let actual_delta = actual.saturating_sub(b.actual).0;
            let delta_ratio = actual_delta as f64 / raw_delta.max(1) as f64;
            if raw_delta >= MIN_DELTA_RAW && (RATIO_BOUNDS.0..=RATIO_BOUNDS.1).contains(&delta_ratio) {
                push_bounded(&mut self.delta, (raw_delta, actual_delta), RATIO_SAMPLES);
            }
        }
        self.reports += 1;
        Observed::Learned { error }
    }

    /// The server refused, as over a `window` of tokens, a request we had counted as `counted`
    /// (which fitted): the real size was over the window, so the count was too low by at least the
    /// gap, as a fraction of the window, plus two points for the unknown rest above it. Recorded
    /// with [`Calibration::refused`].
    pub fn refused_at(&mut self, window: Tokens, counted: Tokens) {
        let gap = window.0.saturating_sub(counted.0) as f64 / window.0.max(1) as f64;
        self.refused(gap + REFUSAL_SLACK);
    }

    /// The server refused a request we had predicted would fit: our count was too low by at least
    /// `under` (a fraction of the refused request's real size). Recorded as an error of that size, so
    /// the margin grows and the confirmation is withdrawn.
    pub fn refused(&mut self, under: f64) {
        if under.is_finite() && under > 0.0 {
            let under = under.min(1.0);
            let residual = Residual { of_total: under, of_estimated: under, informed: true };
            push_bounded(&mut self.residuals, residual, RESIDUAL_SAMPLES * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A raw count whose fixed part is a tenth of it.
    fn raw(total: u64) -> Raw {
        Raw { total: Tokens(total), fixed: Tokens(total / 10) }
    }

    #[test]
    fn a_template_that_drops_the_tool_schemas_is_learned_as_the_fixed_part() {
        // The server counts messages 1:1 with us but its template drops our 900-token fixed part
        // (tool schemas) almost entirely: 100 of them.
        let mut c = Calibration::default();
        let mut basis = None;
        let mut messages = 500u64;
        for _ in 0..6 {
            let r = Raw { total: Tokens(900 + messages), fixed: Tokens(900) };
            let actual = Tokens(100 + messages);
            c.observe(r, basis, actual);
            basis = Some(Basis { raw: r.total, actual });
            messages += 700;
        }
        // A rebuilt request with 2,000 tokens of messages: about 2,100 by the server.
        let p = c.predict(Count::measured(2_900), Tokens(900), None).tokens.0;
        assert!((2_100..2_200).contains(&p), "{p}");
        let fixed = c.fixed_ratio().unwrap();
        assert!((fixed - 100.0 / 900.0).abs() < 0.01, "{fixed}");
    }

    #[test]
    fn uncalibrated_counts_pass_through() {
        let c = Calibration::default();
        assert!(!c.is_calibrated());
        assert_eq!(c.predict(Count::estimated(1000), Tokens(100), None), Count::estimated(1000));
        assert_eq!(c.scale(Count::measured(10)), Count::measured(10));
    }

    #[test]
    fn a_basis_makes_only_the_appended_part_an_estimate() {
        let mut c = Calibration::default();
        // Our estimate is 1.7× the server's count.
        assert_eq!(c.observe(raw(17_000), None, Tokens(10_000)), Observed::Learned { error: None });
        let basis = Basis { raw: Tokens(17_000), actual: Tokens(10_000) };
        let p = c.predict(Count::estimated(22_100), Tokens(1_000), Some(basis));
        // No appended part measured yet: 10,000 + the raw 5,100 with the first margin of 5 %.
        assert_eq!(p.tokens, Tokens(15_355));
        assert!(p.estimated, "not confirmed after one report");
        // Once one is: 13,000 + 5,100 / 1.7 = 16,000, the margin on the appended 3,000 only.
        c.observe(Raw { total: Tokens(22_100), fixed: Tokens(1_000) }, Some(basis), Tokens(13_000));
        let basis = Basis { raw: Tokens(22_100), actual: Tokens(13_000) };
        let p = c.predict(Count::estimated(27_200), Tokens(1_000), Some(basis));
        assert_eq!(p.tokens, Tokens(16_150), "{c:?}");
    }

    #[test]
    fn three_close_predictions_confirm_and_the_margin_shrinks() {
        let mut c = Calibration::default();
        let mut basis = None;
        let mut raw = 5_000u64;
        for _ in 0..5 {
            let actual = raw * 10 / 17;
            c.observe(Raw { total: Tokens(raw), fixed: Tokens(1_000) }, basis, Tokens(actual));
            basis = Some(Basis { raw: Tokens(raw), actual: Tokens(actual) });
            raw += 5_100;
        }
        assert!(c.confirmed(), "{c:?}");
        assert!(c.margin() < 0.01, "{}", c.margin());
        let p = c.predict(Count::estimated(raw), Tokens(1_000), basis);
        assert!(!p.estimated);
        let truth = raw * 10 / 17;
        assert!(p.tokens.0 >= truth && p.tokens.0 <= truth + truth / 50, "{} vs {truth}", p.tokens);
        assert_eq!(c.standing().reports, 5);
        assert!(c.standing().to_string().starts_with("calibrated from 5 usage reports, ±"));
    }

    #[test]
    fn absurd_reports_are_not_learned() {
        let mut c = Calibration::default();
        assert_eq!(c.observe(raw(10_000), None, Tokens(100)), Observed::Rejected);
        assert_eq!(c.observe(raw(0), None, Tokens(100)), Observed::Rejected);
        assert_eq!(c.observe(raw(100), None, Tokens(0)), Observed::Rejected);
        assert!(!c.is_calibrated());
    }

    #[test]
    fn a_refusal_widens_the_margin_and_withdraws_confirmation() {
        let mut c = Calibration::default();
        let mut basis = None;
        for n in [1_000u64, 2_000, 3_000, 4_000, 5_000, 6_000] {
            c.observe(raw(n), basis, Tokens(n / 2));
            basis = Some(Basis { raw: Tokens(n), actual: Tokens(n / 2) });
        }
        assert!(c.confirmed());
        c.refused(0.04);
        assert!(!c.confirmed());
        assert!(c.margin() >= 0.04);
    }

    #[test]
    fn it_survives_serialisation() {
        let mut c = Calibration::default();
        c.observe(raw(3_000), None, Tokens(2_000));
        let back: Calibration = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    proptest! {
        /// Whatever the true ratio (a tokenizer between 1.5 and 6 bytes a token against our three) and
        /// however the appended sizes vary (±20 % noise in the ratio of each part), once confirmed a
        /// prediction never falls more than the noise below the truth, and stays within a few percent
        /// above it.
        #[test]
        fn predictions_track_the_server(
            ratio in 0.5f64..2.0,
            parts in proptest::collection::vec((200u64..6_000, -0.02f64..0.02), 6..40),
        ) {
            let mut c = Calibration::default();
            let fixed = 1_500u64;
            let (mut raw, mut actual) = (fixed, (fixed as f64 * ratio) as u64);
            let r = |total: u64| Raw { total: Tokens(total), fixed: Tokens(fixed) };
            c.observe(r(raw), None, Tokens(actual));
            let mut basis = Basis { raw: Tokens(raw), actual: Tokens(actual) };
            for (i, (part, noise)) in parts.iter().enumerate() {
                raw += part;
                actual += (*part as f64 * ratio * (1.0 + noise)) as u64;
                let predicted = c.predict(Count::estimated(raw), Tokens(fixed), Some(basis)).tokens.0 as f64;
                if i >= 4 {
                    let err = (predicted - actual as f64) / actual as f64;
                    prop_assert!(err > -0.02, "under by {err} at {i}");
                    prop_assert!(err < 0.05, "over by {err} at {i}");
                }
                c.observe(r(raw), Some(basis), Tokens(actual));
                basis = Basis { raw: Tokens(raw), actual: Tokens(actual) };
            }
        }
    }
}
