//! Usage observation: the server's answer to the request last fitted for a role, paired with it.
//!
//! Its usage report either shows a silent truncation (the window is clamped, and nothing else is
//! learned from a cut prompt) or teaches the server/model's calibration; the answered request then
//! becomes the basis of the role's next one. A refusal of a request counted as fitting
//! ([`Underestimated`]) widens the calibration's margin instead.

use super::Fitter;
use crate::storage::Settings;
use crate::storage::StorageError;
use agentd_policies::cache::{learn, Learned, Lesson};
use agentd_policies::calibration::{Observed as Calibrated, Raw};
use agentd_policies::settings::WindowBeforeClamp;
use agentd_policies::usage::{correct_window, Correction, Expected};
use agentd_protocol::CountSource;
use agentd_protocol::Role;
use agentd_protocol::{Count, Tokens, Usage, Window, WindowSource};

/// The server answered the request last fitted for a task's role (with its usage report, when it
/// sent one). The report corrects the window when it shows a silent truncation, and otherwise teaches
/// the server/model's calibration, and its prompt cache when none is declared; the answered request
/// becomes the basis of the next one. Returns what was learned that is said aloud.
pub struct Observe {
    /// The task whose role's request was answered.
    pub task_id: String,
    /// The role that made it.
    pub role: Role,
    /// The server's usage report for the answer; `None` when it sent none, and nothing is learned.
    pub usage: Option<Usage>,
}

/// What a usage report taught that is said aloud (as events).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The window it corrected: old and new.
    pub window: Option<(Window, Window)>,
    /// What it taught of the server's prompt cache.
    pub cache: Option<CacheNews>,
}

/// A server/model's prompt cache learned, or forgotten.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheNews {
    /// Learned now: `cache_learned`.
    Learned {
        /// The server's base URL.
        server: String,
        /// The model.
        model: String,
        /// What was learned.
        learned: Learned,
    },
    /// No longer seen: `cache_forgotten`.
    Forgotten {
        /// The server's base URL.
        server: String,
        /// The model.
        model: String,
    },
}

impl CacheNews {
    /// The event that says it.
    pub fn event(&self) -> agentd_protocol::EventKind {
        match self.clone() {
            CacheNews::Learned { server, model, learned } => agentd_protocol::EventKind::CacheLearned {
                server,
                model,
                read_factor: learned.read_factor,
                min_tokens: Tokens(learned.min_tokens),
                source: learned.source.as_str().to_string(),
            },
            CacheNews::Forgotten { server, model } => {
                agentd_protocol::EventKind::CacheForgotten { server, model }
            }
        }
    }
}

impl Fitter {
    /// Pairs a server's answer (and its usage report) with the request last fitted for the role: a
    /// window correction, if the report shows one, and its prompt cache learned or forgotten.
    pub fn observe(&self, msg: Observe) -> Result<Observed, StorageError> {
        let state = &self.state;
        let key = (msg.task_id, msg.role);
        let Some(mut last) = state.pending.lock().remove(&key) else { return Ok(Observed::default()) };
        let mut news = None;
        if let Some(usage) = msg.usage.filter(|_| last.learns) {
            let (server, model) = (&last.server, &last.model);
            let known = state.learned_cache(server, model);
            match learn(known.as_ref(), &usage, state.price_factor(model)) {
                Lesson::Nothing => {}
                Lesson::Learned(learned) => {
                    state.keep_cache(server, model, Some(learned.clone()))?;
                    news = Some(CacheNews::Learned { server: server.clone(), model: model.clone(), learned });
                }
                Lesson::Kept(learned) => state.keep_cache(server, model, Some(learned))?,
                Lesson::Forgotten => {
                    state.keep_cache(server, model, None)?;
                    news = Some(CacheNews::Forgotten { server: server.clone(), model: model.clone() });
                }
            }
        }
        let (server, model) = (last.server.clone(), last.model.clone());
        let mut corrected = None;
        let raw = Raw { total: last.raw.tokens, fixed: last.raw_fixed };
        if let Some(usage) = msg.usage {
            if let Some(window) = state.known_window(&server, &model)? {
                let before_key = WindowBeforeClamp { server: &server, model: &model };
                let before_clamp = state.storage.get(&before_key)?;
                // Truncation is judged against what the server should have counted: a confirmed
                // calibration's best prediction (margin excluded), else the raw count, with the
                // tolerance its kind of count needs.
                let calibration = state.calibration(&server, &model);
                let expected = match calibration.best(raw, last.basis) {
                    Some(best) if calibration.confirmed() => {
                        Expected::calibrated(Count::measured(best.ceil() as u64))
                    }
                    _ if last.source == CountSource::Tiktoken => Expected::exact(last.raw, last.framing),
                    _ => Expected::approximate(last.raw),
                }
                .after(calibration.largest_reported());
                match correct_window(window, before_clamp, expected, usage) {
                    Correction::None => {}
                    Correction::Clamp(new) => {
                        if window.source != WindowSource::Usage {
                            state.storage.put(&before_key, &window)?;
                        }
                        state.set_window(&server, &model, new)?;
                        corrected = Some((window, new));
                    }
                    Correction::Lift(new) => {
                        state.set_window(&server, &model, new)?;
                        corrected = Some((window, new));
                    }
                }
            }
            let clamped = matches!(corrected, Some((old, new)) if new.tokens < old.tokens);
            // A truncated prompt's report measures what the server kept, not what was sent.
            if !clamped && usage.prompt_tokens > 0 {
                let actual = Tokens(usage.prompt_tokens);
                let observed =
                    state.update_calibration(&server, &model, |c| c.observe(raw, last.basis, actual));
                if let Calibrated::Learned { error: Some(error) } = observed {
                    tracing::debug!(
                        server = %server, model = %model, counted = %last.counted, reported = %actual,
                        error = format!("{:+.2}%", error * 100.0), "usage report"
                    );
                }
                last.reported = Some(actual);
            }
        }
        state.answered.lock().insert(key, last);
        Ok(Observed { window: corrected, cache: news })
    }
}

/// The server refused as too long a request the fitter had measured as fitting its known window: the
/// calibrated count was too low. The calibration records an error of that size (its margin grows and
/// it is no longer confirmed), so the request measured again is compacted before it is resent.
pub struct Underestimated {
    /// The task whose request was refused.
    pub task_id: String,
    /// The role that made it.
    pub role: Role,
    /// The window the request was refused at: the one the fitter believed it fitted.
    pub window: Tokens,
}

impl Fitter {
    /// A request counted as fitting was refused as too long: widen the calibration's margin.
    pub fn underestimated(&self, msg: Underestimated) {
        let key = (msg.task_id, msg.role);
        let Some(last) = self.state.pending.lock().remove(&key) else { return };
        // The real size was over the window: at least that far above what was counted.
        self.state.update_calibration(&last.server, &last.model, |c| c.refused_at(msg.window, last.counted));
    }
}
