//! The one measure every size decision uses: a model's counter (its tokenizer, the server's counting
//! endpoint, or the estimate) calibrated by that server's usage reports
//! ([`agentd_policies::calibration`]).
//!
//! The fit of a request, the paging of a tool result, the bounds of a handoff, the coder's working
//! files and the summariser's batches all measure through a [`Meter`], so two parts of the daemon never
//! disagree about one text. A meter is a cheap snapshot (a shared counter and a copy of the
//! calibration as it stood): the fitter hands one out ([`crate::fitter::MeterOf`]) and keeps the
//! calibration itself up to date.

use crate::counter::{prepare_text, Fingerprint, RequestCount, TokenCounter};
use agentd_policies::calibration::{Basis, Calibration};
use agentd_protocol::tokens::Standing;
use agentd_protocol::CountSource;
use agentd_protocol::{ChatRequest, Model};
use agentd_protocol::{Count, Measured, Message, Tokens};
use std::sync::Arc;

/// A server/model's measure: its token counter and a snapshot of its calibration. Cheap to clone (the counter
/// is shared); the fitter keeps the calibration current and hands out fresh meters.
#[derive(Debug, Clone)]
pub struct Meter {
    counter: Arc<TokenCounter>,
    calibration: Calibration,
}

/// A request measured by a meter: the calibrated count every decision uses, and the raw count it was
/// derived from (what a usage report is later compared with).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Calibrated; its categories scaled so that they add up to the total.
    pub count: RequestCount,
    /// The counter's own count of the whole request.
    pub raw: Count,
    /// The counter's own count of its fixed part (system prompt, tools, priming).
    pub raw_fixed: Tokens,
}

impl Meter {
    /// A meter counting with `counter`, calibrated by `calibration` as it stands now.
    pub fn new(counter: Arc<TokenCounter>, calibration: Calibration) -> Meter {
        Meter { counter, calibration }
    }

    /// The calibration this meter scales counts by.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// Where the raw counts come from.
    pub fn source(&self) -> CountSource {
        self.counter.source()
    }

    /// What a decision measured with this meter says in its event.
    pub fn measured(&self) -> Measured {
        Measured { source: self.source(), calibrated_by: self.calibration.reports() }
    }

    /// The calibration's standing, once a report has been learned from.
    pub fn standing(&self) -> Option<Standing> {
        self.calibration.is_calibrated().then(|| self.calibration.standing())
    }

    /// How the gauge names this measure: `estimate, calibrated from 12 usage reports, ±1.4 %`.
    pub fn describe(&self) -> String {
        match self.standing() {
            Some(standing) => format!("{}, {standing}", self.source().as_str()),
            None => self.source().as_str().to_string(),
        }
    }

    /// A bare text, calibrated.
    pub fn count_text(&self, text: &str) -> Count {
        self.calibration.scale(self.counter.count_text(text))
    }

    /// One message as sent, calibrated.
    pub fn count_message(&self, message: &Message) -> Count {
        self.calibration.scale(self.counter.count_message(message))
    }

    /// A text measured for a decision: learned from the server's counting endpoint first when the
    /// counter has one, so that it is measured rather than estimated.
    pub async fn measure_text(&self, client: &dyn Model, model: &str, text: &str) -> Count {
        prepare_text(&self.counter, client, model, text).await;
        self.count_text(text)
    }

    /// A whole request; `basis` is the server's report of the last request this one extends.
    pub fn count_request(&self, request: &ChatRequest, basis: Option<Basis>) -> Measurement {
        self.calibrate(self.counter.count_request(request), basis)
    }

    /// A request's raw count and its fingerprint, in one pass over its messages: what the fitter
    /// needs to find the request's basis before calibrating ([`calibrate`](Self::calibrate)).
    pub fn count_raw(&self, request: &ChatRequest) -> (RequestCount, Fingerprint) {
        self.counter.count_and_fingerprint(request)
    }

    /// A raw count calibrated; `basis` is the server's report of the last request this one extends.
    pub fn calibrate(&self, raw: RequestCount, basis: Option<Basis>) -> Measurement {
        let total = self.calibration.predict(raw.total, fixed_part(&raw), basis);
        Measurement { count: scaled(raw, total), raw: raw.total, raw_fixed: fixed_part(&raw) }
    }
}

/// The fixed part of a request's count: system prompt, tool schemas and the reply's priming.
pub fn fixed_part(count: &RequestCount) -> Tokens {
    count.total.tokens.saturating_sub(count.messages.tokens)
}

/// `raw`'s categories scaled to add up to `total` (rounding goes to the messages).
fn scaled(raw: RequestCount, total: Count) -> RequestCount {
    if raw.total.tokens == total.tokens || raw.total.tokens == Tokens::ZERO {
        let mark = |c: Count| Count { tokens: c.tokens, estimated: c.estimated && total.estimated };
        return RequestCount {
            total,
            system: mark(raw.system),
            tools: mark(raw.tools),
            messages: mark(raw.messages),
            thinking: mark(raw.thinking),
        };
    }
    let factor = total.tokens.0 as f64 / raw.total.tokens.0 as f64;
    let scale = |c: Count| Count {
        tokens: Tokens((c.tokens.0 as f64 * factor).round() as u64),
        estimated: c.estimated && total.estimated,
    };
    let system = scale(raw.system);
    let tools = scale(raw.tools);
    let thinking = scale(raw.thinking);
    let priming = raw.total.tokens.saturating_sub(raw.system.tokens + raw.tools.tokens + raw.messages.tokens);
    let priming = Tokens((priming.0 as f64 * factor).round() as u64);
    let messages = Count {
        tokens: total.tokens.saturating_sub(system.tokens + tools.tokens + priming),
        estimated: raw.messages.estimated && total.estimated,
    };
    RequestCount {
        total,
        system,
        tools,
        messages,
        thinking: Count { tokens: thinking.tokens.min(messages.tokens), ..thinking },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_policies::calibration::{Basis, Raw};
    use agentd_protocol::ToolSchema;

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: "qwen3-coder".into(),
            system: "You are terse.".into(),
            messages,
            tools: vec![ToolSchema {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: serde_json::json!({"type": "object"}),
            }],
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
            cache_key: None,
        }
    }

    #[test]
    fn an_uncalibrated_meter_is_the_counter() {
        let counter = Arc::new(TokenCounter::new("qwen3-coder"));
        let meter = Meter::new(counter.clone(), Calibration::default());
        let req = request(vec![Message::user("hello world, how are you")]);
        let m = meter.count_request(&req, None);
        assert_eq!(m.count, counter.count_request(&req));
        assert_eq!(m.raw, counter.count_request(&req).total);
        assert_eq!(m.raw_fixed, fixed_part(&counter.count_request(&req)));
        assert_eq!(meter.describe(), "estimate");
        assert_eq!(meter.measured(), Measured { source: CountSource::Estimate, calibrated_by: 0 });
    }

    #[test]
    fn a_calibrated_meter_scales_every_measure_alike() {
        let counter = Arc::new(TokenCounter::new("qwen3-coder"));
        let text = "lorem ipsum dolor sit amet ".repeat(200);
        let req = request(vec![Message::user(text.clone())]);
        let raw = counter.count_request(&req);
        let mut calibration = Calibration::default();
        let fixed = fixed_part(&raw);
        calibration.observe(Raw { total: raw.total.tokens, fixed }, None, Tokens(raw.total.tokens.0 / 2));
        let meter = Meter::new(counter.clone(), calibration);
        let m = meter.count_request(&req, None);
        // Half, plus the first margin of 5 %.
        let expected = (raw.total.tokens.0 as f64 / 2.0 * 1.05).ceil() as u64;
        assert_eq!(m.count.total.tokens, Tokens(expected));
        assert!(m.count.total.estimated, "one report does not confirm a calibration");
        let parts = m.count.system.tokens + m.count.tools.tokens + m.count.messages.tokens;
        assert!(parts <= m.count.total.tokens && parts + Tokens(3) >= m.count.total.tokens, "{m:?}");
        // No appended text measured yet: a text is its raw count, with the margin.
        let t = meter.count_text(&text).tokens.0 as f64;
        let raw_t = counter.count_text(&text).tokens.0 as f64;
        assert!((t / raw_t - 1.05).abs() < 0.01, "{t} vs {raw_t}");
        assert!(meter.describe().starts_with("estimate, calibrated from 1 usage report, ±0.0 %"));
        // With a basis, only the appended part is estimated (and carries the margin).
        let basis = Basis { raw: Tokens(100), actual: Tokens(90) };
        let b = meter.count_request(&req, Some(basis));
        let appended = (raw.total.tokens.0 - 100) as f64;
        assert_eq!(b.count.total.tokens, Tokens((90.0 + appended * 1.05).ceil() as u64));
    }
}
