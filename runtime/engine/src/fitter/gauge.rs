//! The gauge: the fitter's last measurement of each task's role, what `context` and `status` show —
//! one measurement, one owner, so the events and the gauge cannot disagree. It is kept as a
//! setting, so it outlives a restart until the role measures again.

use super::{Fitter, State};
use crate::counter::RequestCount;
use crate::meter::Meter;
use crate::storage::Settings;
use agentd_policies::settings::LastGauge;
use agentd_policies::Thresholds;
use agentd_protocol::{ChatRequest, MessageKind, Role};
use agentd_protocol::{Tokens, Window};

use agentd_protocol::gauge::{Categories, Gauge, GaugeCache};

impl State {
    /// The gauge is the fitter's last measurement of a role: what `context` and `status` show.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_gauge(
        &self,
        task_id: &str,
        role: &Role,
        request: &ChatRequest,
        count: &RequestCount,
        meter: &Meter,
        window: Window,
        thresholds: Thresholds,
        compact_at: u8,
        trigger_priced: bool,
        prompt_cache: Option<GaugeCache>,
    ) {
        let gauge = Gauge {
            role: role.clone(),
            model: request.model.clone(),
            count_source: meter.source(),
            calibration: meter.standing(),
            measured_by: meter.describe(),
            window: window.tokens,
            window_source: window.source,
            tokens: count.total.tokens,
            estimated: count.total.estimated,
            categories: categories(request, count, meter),
            compact_at,
            trigger_tokens: thresholds.trigger,
            trigger_priced,
            destination_tokens: thresholds.destination,
            free_tokens: window.tokens.saturating_sub(count.total.tokens),
            prompt_cache,
        };
        // The gauge survives a restart: `status` and `context` show the last measurement until the
        // role measures again.
        if let Err(e) = self.storage.cache(&LastGauge { task_id, role }, &gauge) {
            tracing::warn!(error = %e, "could not keep the gauge");
        }
        self.gauges.lock().insert((task_id.to_string(), role.clone()), gauge);
    }
}

/// The gauge's categories: the request's messages sorted by what they are, scaled so that they add
/// up to the (calibrated) count of the messages.
fn categories(request: &ChatRequest, count: &RequestCount, meter: &Meter) -> Categories {
    let mut c = Categories {
        system: count.system.tokens,
        tools: count.tools.tokens,
        instructions: Tokens::ZERO,
        memory: Tokens::ZERO,
        objective: Tokens::ZERO,
        checkpoint: Tokens::ZERO,
        observations: Tokens::ZERO,
        files: Tokens::ZERO,
        messages: Tokens::ZERO,
        thinking: count.thinking.tokens,
    };
    let each: Vec<Tokens> = request.messages.iter().map(|m| meter.count_message(m).tokens).collect();
    let sum: Tokens = each.iter().copied().sum();
    let factor = if sum.0 == 0 { 1.0 } else { count.messages.tokens.0 as f64 / sum.0 as f64 };
    for (m, tokens) in request.messages.iter().zip(each) {
        let slot = match m.kind {
            MessageKind::Checkpoint => &mut c.checkpoint,
            MessageKind::Observations => &mut c.observations,
            MessageKind::WorkingFiles => &mut c.files,
            MessageKind::Objective => &mut c.objective,
            MessageKind::Instructions => &mut c.instructions,
            MessageKind::Memory => &mut c.memory,
            MessageKind::Plain | MessageKind::Notice => continue,
        };
        *slot += Tokens((tokens.0 as f64 * factor).round() as u64);
    }
    let named =
        c.instructions + c.memory + c.objective + c.checkpoint + c.observations + c.files + c.thinking;
    c.messages = count.messages.tokens.saturating_sub(named);
    c
}

/// The last measurement of a task's role, if it has made a request.
pub struct GaugeOf {
    /// The task whose gauge to read.
    pub task_id: String,
    /// The role measured.
    pub role: Role,
}

impl Fitter {
    /// The gauge of a task's role: its last measurement, kept across restarts.
    pub fn gauge_of(&self, msg: GaugeOf) -> Option<Gauge> {
        if let Some(g) = self.state.gauges.lock().get(&(msg.task_id.clone(), msg.role.clone())) {
            return Some(g.clone());
        }
        let gauge =
            self.state.storage.get(&LastGauge { task_id: &msg.task_id, role: &msg.role }).ok().flatten()?;
        self.state.gauges.lock().insert((msg.task_id, msg.role), gauge.clone());
        Some(gauge)
    }
}
