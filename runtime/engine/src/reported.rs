//! A provider's usage report judged against the request it answers, for a turn's answer and for a
//! compaction's summary request alike: our counts of what was sent and of what came back, the
//! policy's verdict (`agentd_policies::reported::judge`), and the `usage_refused` event that says
//! aloud what was not believed. What learns from a report (the window, the calibration, the prompt
//! cache) gets [`Judged::believed`]; what counts it (budgets, prices, totals) gets
//! [`Judged::counted`].

use crate::meter::Meter;
use agentd_policies::reported::{judge, Judged, Sent};
use agentd_protocol::{ChatResponse, EventKind, Tokens};

/// A request as it was sent, by our count: what its answer's report is judged against.
pub struct Request<'a> {
    /// The model asked.
    pub model: &'a str,
    /// The answer's limit it set (`max_tokens`).
    pub max_output: Option<u32>,
    /// Our count of it, in tokens.
    pub sent: Tokens,
    /// The window it was fitted into.
    pub window: Tokens,
    /// The measure it was counted with, which counts the answer too.
    pub meter: &'a Meter,
}

/// The verdict on `response`'s usage report, the answer to `request`; `None` when the server sent
/// no report.
pub fn verdict(request: &Request<'_>, response: &ChatResponse) -> Option<Judged> {
    let raw = response.usage.as_ref()?;
    let sent = Sent {
        prompt: request.sent,
        answer: request.meter.count_message(&response.message).tokens,
        window: request.window,
        max_output: request.max_output,
    };
    let judged = judge(raw, &sent);
    if !judged.refused.is_empty() {
        tracing::warn!(
            model = %request.model, reasons = ?judged.reasons(), sent = %sent.prompt,
            "a usage report was refused; what was sent is counted instead"
        );
    }
    Some(judged)
}

/// `usage_refused`, when `judged` refused any of `response`'s report (`summary`: it came with a
/// compaction's summary request).
pub fn refused_event(
    response: &ChatResponse,
    judged: &Judged,
    sent: Tokens,
    summary: bool,
) -> Option<EventKind> {
    if judged.refused.is_empty() {
        return None;
    }
    Some(EventKind::UsageRefused {
        reported: response.usage.clone().unwrap_or_default(),
        reasons: judged.reasons(),
        sent_tokens: sent,
        counted: judged.counted,
        summary,
    })
}
