//! The compaction machine: every decision of a compaction, as a state machine over plain data.
//!
//! The runtime drives it and does the IO: it asks for what the machine needs ([`Need`]) — a summary
//! that continues the request already sent, a folding step, an archive — and answers with what came
//! back ([`Answer`]). Measurements are synchronous and passed in ([`Measure`]), so the machine counts
//! every candidate in full itself. The property tests drive this same machine with a synchronous
//! summariser ([`compact_with`]); nothing of the loop lives in the runtime.
//!
//! The order of work:
//! 1. Refuse early, with the numbers, when nothing can help: the system prompt, tools and objective
//!    alone cross the trigger, or the window leaves no room for a summary request.
//! 2. Plan ([`super::plan`]) as many recent rounds as fit below the destination (with a prompt
//!    cache, as many as land cheapest: [`super::price`]).
//! 3. Summarise what newly leaves the request. The first summary **continues the request that was
//!    last sent** (its messages are the start of the history), with the instruction appended: the
//!    provider has that prefix cached, so it is billed at the cached rate, and it fits, since the
//!    server took it. Failing that (nothing sent yet, or it would not fit), the current history
//!    itself when its count is measured and fits; failing that, and for what later retries remove,
//!    token-sized batches are folded into the summary so far in requests of their own.
//! 4. Assemble the candidate, count it in full, judge it; retry with one round fewer, or fail —
//!    having written nothing.
//! 5. Archive everything that leaves the accepted candidate, whole, and count it again with the
//!    archive's real reference.

use super::candidate::{
    assemble, judge, objective_message, plan, Checkpoint, Plan, PlanInput, Pricing, Verdict, WorkingFile,
    ARCHIVE_REF_PLACEHOLDER,
};
use super::price::next_trigger;
use crate::budget::{objective_bytes_for_summary, Thresholds, FOLD_REQUEST_PERCENT, IN_PLACE_PERCENT};
use crate::summary::{batches, fold_prompt, prefix_prompt, render_for_summary, SUMMARISER_SYSTEM};
use agentd_protocol::message::Message;
use agentd_protocol::model::PromptCache;
use agentd_protocol::tokens::Tokens;
use std::collections::VecDeque;

/// Synchronous measurements, by the same counter the fitter uses for the request itself — and, for
/// what the summariser reads, by the summariser's when the role has one of its own.
pub trait Measure {
    /// A bare text, as the summariser reads it (a batch, the summarising instructions).
    fn text(&self, text: &str) -> Tokens;
    /// One message as sent, framing included.
    fn message(&self, message: &Message) -> Tokens;
    /// A request with this system prompt and these messages, no tools, to the summariser: a folding
    /// summary request.
    fn summary_request(&self, system: &str, messages: &[Message]) -> Tokens;
    /// The messages of a request as sent (system prompt and tools excluded).
    fn history(&self, messages: &[Message]) -> Tokens {
        messages.iter().map(|m| self.message(m)).sum()
    }
}

/// The request last sent for this role, when the history still starts with its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentPrefix {
    /// How many leading messages of the history it carried.
    pub messages: usize,
    /// Its size, as the server reported it when it did, else as counted.
    pub tokens: Tokens,
}

/// Everything a compaction is decided from, besides the history itself.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The role's window, trigger and destination.
    pub thresholds: Thresholds,
    /// System prompt + tool schemas + reply priming, as counted for the request.
    pub fixed: Tokens,
    /// The request being compacted, counted in full.
    pub before: Tokens,
    /// Whether `before` is an estimate (the current history is then not summarised in place).
    pub before_estimated: bool,
    /// Tokens reserved for the summary in the checkpoint, and the summariser's `max_tokens`.
    pub summary_reserve: Tokens,
    /// The request last sent for the role, when the history still starts with its messages: the first summary
    /// then continues it, served from the provider's prompt cache. `None` when nothing was sent yet or the
    /// history has changed since.
    pub sent_prefix: Option<SentPrefix>,
    /// The window of the role's own summariser (`compaction = {provider, model}`), which the folding
    /// requests are sized to; `None`: the role's model summarises. With a summariser of its own
    /// nothing is summarised in place (another model cannot continue the role's request).
    pub summariser_window: Option<Tokens>,
    /// How the role's provider's prompt cache bills a prefix, when it has one: the recent rounds kept
    /// are then the cheapest landing over the coming turns ([`super::price`]); `None`: as many as fit.
    pub cache: Option<PromptCache>,
}

impl Setup {
    /// The window the summary requests must fit: the summariser's.
    fn summary_window(&self) -> Tokens {
        self.summariser_window.unwrap_or(self.thresholds.window)
    }
}

/// What the machine needs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Need {
    /// A summary continuing the role's own request: the same system prompt and tools, the first
    /// `messages` messages of the history, then `instruction` as a user message; tools forbidden,
    /// `max_tokens` = `max_tokens`. Answer with [`Answer::Summary`] (`None` if it could not be made).
    InPlace {
        /// How many leading messages of the history the summary request carries.
        messages: usize,
        /// The `[compaction]` instruction, sent as the last user message.
        instruction: String,
        /// The summary's `max_tokens`: the room reserved for it in the checkpoint.
        max_tokens: Tokens,
    },
    /// One folding step: a request with [`SUMMARISER_SYSTEM`] as its system prompt and `prompt` as
    /// its one user message, no tools. Answer with [`Answer::Summary`].
    Fold {
        /// The user message: the instruction, the objective, the summary so far and the batch.
        prompt: String,
        /// The summary's `max_tokens`: the room reserved for it in the checkpoint.
        max_tokens: Tokens,
    },
    /// Store `history[..upto]` whole; answer with [`Answer::Archived`] and its reference.
    Archive {
        /// How many leading messages of the history leave the request and are archived.
        upto: usize,
    },
    /// Accepted.
    Done(Box<Compacted>),
    /// `compaction_failed`, with the numbers.
    Failed(String),
}

/// What the runtime brings back.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A summary's text; `None` or empty when none could be made.
    Summary(Option<String>),
    /// The reference of the archive just written.
    Archived(String),
}

/// An accepted candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    /// The rebuilt history: objective, checkpoint, observations, working files, then the kept rounds.
    pub history: Vec<Message>,
    /// The plan the candidate was assembled from.
    pub plan: Plan,
    /// The archive's reference, as [`Answer::Archived`] gave it (an evidence id).
    pub archive_ref: String,
    /// How many summary requests made the summary.
    pub batches: u32,
    /// The candidate counted in full, `fixed` included.
    pub tokens: Tokens,
    /// Whether the first summary continued a request (its prefix cached).
    pub in_place: bool,
}

impl Compacted {
    /// With a prompt cache, where the next compaction should come: the trigger that prices this
    /// candidate, as counted, lowest ([`next_trigger`]) with what its plan was priced with, between
    /// the destination and the role's trigger. `None` without a cache: at the role's trigger.
    pub fn next_trigger(&self) -> Option<Tokens> {
        self.plan.outlook.map(|o| next_trigger(self.tokens, &o))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// Waiting for the in-place summary covering `history[..covers]`.
    InPlace {
        covers: usize,
    },
    /// Waiting for a fold; `queue` holds the batches after it, `covers` the end of what they cover.
    Folding {
        queue: VecDeque<String>,
        covers: usize,
    },
    /// Waiting for the archive of `history[..upto]`.
    Archiving {
        upto: usize,
    },
    Finished,
}

/// What a compaction is told besides the history and the numbers.
#[derive(Debug, Clone, Copy)]
pub struct Brief<'a> {
    /// The task's objective, re-inserted at the head of the rebuilt history.
    pub objective: &'a str,
    /// The blocks every request starts with (instructions, memory), as they read now: first in the
    /// rebuilt history, verbatim, never summarised.
    pub pinned: &'a [Message],
    /// What the user asked this compaction to keep in particular (`agentd compact --focus`), given
    /// to the summariser.
    pub focus: Option<&'a str>,
}

/// One compaction in progress.
pub struct Compaction<'a> {
    history: &'a [Message],
    message_tokens: Vec<Tokens>,
    objective: &'a str,
    pinned: &'a [Message],
    focus: Option<&'a str>,
    working_files: &'a [WorkingFile],
    setup: Setup,
    /// The objective as the summariser sees it (cut to a sixteenth of the window).
    objective_for_summary: String,
    batch_budget: Tokens,
    limit: Option<usize>,
    plan: Option<Plan>,
    summary: Option<String>,
    folded_upto: usize,
    folds: u32,
    in_place: bool,
    archive: Option<(usize, String)>,
    stage: Stage,
}

impl<'a> Compaction<'a> {
    /// Starts a compaction of `history` (the role's messages, without system and tools), and says
    /// what it needs first.
    pub fn start(
        history: &'a [Message],
        brief: Brief<'a>,
        working_files: &'a [WorkingFile],
        setup: Setup,
        measure: &dyn Measure,
    ) -> (Compaction<'a>, Need) {
        let window = setup.thresholds.window;
        let Brief { objective, pinned, focus } = brief;
        let objective_for_summary = cut_objective(objective, setup.summary_window());
        let mut c = Compaction {
            history,
            message_tokens: history.iter().map(|m| measure.message(m)).collect(),
            objective,
            pinned,
            focus,
            working_files,
            setup,
            objective_for_summary,
            batch_budget: Tokens::ZERO,
            limit: None,
            plan: None,
            summary: None,
            folded_upto: 0,
            folds: 0,
            in_place: false,
            archive: None,
            stage: Stage::Finished,
        };
        // What no compaction can remove: system, tools, the pinned blocks and the objective. Over the
        // trigger, summarising would only spend tokens.
        let pinned_tokens: Tokens = pinned.iter().map(|m| measure.message(m)).sum();
        let floor = setup.fixed + pinned_tokens + measure.message(&objective_message(objective));
        if floor >= setup.thresholds.trigger {
            let parts = if pinned.is_empty() { "" } else { ", the instructions and memory blocks" };
            return (
                c,
                Need::Failed(format!(
                    "the system prompt, tools{parts} and objective alone are {floor} tokens, over the trigger of {} in \
                     the {window}-token window; nothing that can be compacted away would make the request fit",
                    setup.thresholds.trigger
                )),
            );
        }
        // A folding request carries the summary so far (≤ reserve) and a batch, and its answer takes
        // ≤ reserve: all of it within 90 % of the summariser's window.
        let overhead = measure.text(SUMMARISER_SYSTEM)
            + measure.text(&with_focus(fold_prompt(None, "", &c.objective_for_summary), c.focus))
            + Tokens(64);
        let reserve = setup.summary_reserve;
        let summary_window = setup.summary_window();
        c.batch_budget =
            summary_window.percent(FOLD_REQUEST_PERCENT).saturating_sub(overhead + reserve + reserve);
        if c.batch_budget < Tokens(64) {
            return (
                c,
                Need::Failed(format!(
                    "the {summary_window}-token window leaves no room to summarise: the summary request alone needs {} \
                     tokens",
                    overhead + reserve + reserve
                )),
            );
        }
        let need = c.replan(measure);
        (c, need)
    }

    /// Takes the runtime's answer to the last [`Need`] and says what is needed next.
    pub fn answer(&mut self, answer: Answer, measure: &dyn Measure) -> Need {
        match (std::mem::replace(&mut self.stage, Stage::Finished), answer) {
            (Stage::InPlace { covers }, Answer::Summary(text)) => match text.filter(|t| !t.trim().is_empty())
            {
                Some(text) => {
                    self.summary = Some(text);
                    self.folds += 1;
                    self.in_place = true;
                    self.folded_upto = covers;
                    self.summarise_or_judge(measure)
                }
                // No summary in place: fold batches instead.
                None => self.fold_from(self.folded_upto, measure),
            },
            (Stage::Folding { mut queue, covers }, Answer::Summary(text)) => {
                let text = text.map(|t| t.trim().to_string()).unwrap_or_default();
                // A summariser that says nothing still leaves the archive; the checkpoint says so.
                if !text.is_empty() {
                    self.summary = Some(text);
                } else if self.summary.is_none() {
                    self.summary = Some("(the summariser returned nothing)".into());
                }
                self.folds += 1;
                match queue.pop_front() {
                    Some(batch) => {
                        let need = self.fold_need(&batch, measure);
                        self.stage = Stage::Folding { queue, covers };
                        need
                    }
                    None => {
                        self.folded_upto = covers;
                        self.summarise_or_judge(measure)
                    }
                }
            }
            (Stage::Archiving { upto }, Answer::Archived(reference)) => {
                self.archive = Some((upto, reference));
                self.judge(measure)
            }
            (stage, answer) => {
                Need::Failed(format!("compaction: answer {answer:?} does not fit the stage {stage:?}"))
            }
        }
    }

    /// Plans with the current round limit and goes on from there.
    fn replan(&mut self, measure: &dyn Measure) -> Need {
        let count = |m: &Message| measure.message(m);
        self.plan = Some(plan(&self.input(&count)));
        self.summarise_or_judge(measure)
    }

    /// The plan's input as it stands (the current round limit).
    fn input<'s>(&'s self, count: &'s dyn Fn(&Message) -> Tokens) -> PlanInput<'s> {
        PlanInput {
            history: self.history,
            message_tokens: &self.message_tokens,
            fixed: self.setup.fixed,
            objective: self.objective,
            pinned: self.pinned,
            destination: self.setup.thresholds.destination,
            working_files: self.working_files,
            keep_rounds_limit: self.limit,
            summary_reserve: self.setup.summary_reserve,
            count,
            pricing: self.setup.cache.map(|cache| Pricing { cache, trigger: self.setup.thresholds.trigger }),
        }
    }

    fn keep_from(&self) -> usize {
        self.plan.as_ref().map_or(0, |p| p.keep_from_message)
    }

    /// Summarises what newly leaves the request, else judges the candidate (which archives it once
    /// accepted).
    fn summarise_or_judge(&mut self, measure: &dyn Measure) -> Need {
        let keep_from = self.keep_from();
        if keep_from > self.folded_upto {
            if self.folded_upto == 0 {
                if let Some(need) = self.in_place(keep_from, measure) {
                    return need;
                }
            }
            return self.fold_from(self.folded_upto, measure);
        }
        self.judge(measure)
    }

    /// The first summary, continuing a request, when one fits: the one last sent (cached), else the
    /// current history when it is measured.
    fn in_place(&mut self, keep_from: usize, measure: &dyn Measure) -> Option<Need> {
        if self.setup.summariser_window.is_some() {
            return None;
        }
        let reserve = self.setup.summary_reserve;
        let ceiling = self.setup.thresholds.window.percent(IN_PLACE_PERCENT);
        let fits = |tokens: Tokens, kept: usize| {
            let instruction = with_focus(prefix_prompt(kept, &self.objective_for_summary), self.focus);
            let cost = tokens + measure.message(&Message::user(instruction.clone())) + reserve;
            (cost <= ceiling).then_some(instruction)
        };
        let (messages, instruction) = match self.setup.sent_prefix {
            Some(sent) if sent.messages > 0 && sent.messages <= self.history.len() => {
                let covers = keep_from.min(sent.messages);
                (sent.messages, fits(sent.tokens, sent.messages - covers)?)
            }
            _ if !self.setup.before_estimated => {
                let all = self.history.len();
                (all, fits(self.setup.before, all - keep_from)?)
            }
            _ => return None,
        };
        let covers = keep_from.min(messages);
        self.stage = Stage::InPlace { covers };
        Some(Need::InPlace { messages, instruction, max_tokens: reserve })
    }

    /// Folds `history[from..keep_from]` into the summary so far, batch by batch.
    fn fold_from(&mut self, from: usize, measure: &dyn Measure) -> Need {
        let keep_from = self.keep_from();
        // The pinned blocks are put back as they read, not summarised.
        let leaving: Vec<Message> =
            self.history[from..keep_from].iter().filter(|m| !m.kind.is_pinned()).cloned().collect();
        let text = render_for_summary(&leaving);
        let mut queue: VecDeque<String> = batches(&text, self.batch_budget, &|t| measure.text(t)).into();
        let Some(first) = queue.pop_front() else {
            // Nothing to say about what leaves (no text at all): it is archived all the same.
            self.folded_upto = keep_from;
            return self.summarise_or_judge(measure);
        };
        let need = self.fold_need(&first, measure);
        self.stage = Stage::Folding { queue, covers: keep_from };
        need
    }

    fn fold_need(&mut self, batch: &str, measure: &dyn Measure) -> Need {
        let prompt =
            with_focus(fold_prompt(self.summary.as_deref(), batch, &self.objective_for_summary), self.focus);
        let reserve = self.setup.summary_reserve;
        let window = self.setup.summary_window();
        // The summariser's request passes the same measurement: it must fit its window.
        let tokens = measure.summary_request(SUMMARISER_SYSTEM, &[Message::user(prompt.clone())]);
        if tokens + reserve > window {
            self.stage = Stage::Finished;
            return Need::Failed(format!(
                "a summary request of {tokens} tokens would not fit the {window}-token window"
            ));
        }
        Need::Fold { prompt, max_tokens: reserve }
    }

    /// Assembles the candidate, counts it in full and judges it. Until what leaves is archived, the
    /// candidate names the archive by [`ARCHIVE_REF_PLACEHOLDER`] (no shorter than an evidence id):
    /// only a candidate accepted so is archived, then assembled with the real reference and judged
    /// again — so a refused compaction has written nothing.
    fn judge(&mut self, measure: &dyn Measure) -> Need {
        let Some(plan) = self.plan.clone() else { return Need::Failed("compaction: no plan".into()) };
        let archived = match &self.archive {
            Some((upto, reference)) if *upto == plan.keep_from_message => Some(reference.clone()),
            _ => None,
        };
        let checkpoint = Checkpoint {
            summary: self.summary.clone().unwrap_or_default(),
            archive_ref: Some(archived.clone().unwrap_or_else(|| ARCHIVE_REF_PLACEHOLDER.to_string())),
            batches: self.folds,
        };
        let count = |m: &Message| measure.message(m);
        let input = self.input(&count);
        let assembled = assemble(&input, &plan, &checkpoint);
        let tokens = self.setup.fixed + measure.history(&assembled);
        let t = self.setup.thresholds;
        match judge(tokens, self.setup.before, t.destination, t.trigger, plan.kept_rounds) {
            Verdict::Accept if archived.is_none() => {
                self.stage = Stage::Archiving { upto: plan.keep_from_message };
                Need::Archive { upto: plan.keep_from_message }
            }
            Verdict::Accept => Need::Done(Box::new(Compacted {
                history: assembled,
                plan,
                archive_ref: archived.unwrap_or_default(),
                batches: self.folds,
                tokens,
                in_place: self.in_place,
            })),
            Verdict::RetryWithFewerRounds => {
                self.limit = Some(plan.kept_rounds.saturating_sub(1));
                self.replan(measure)
            }
            Verdict::Fail { reason } => Need::Failed(reason),
        }
    }
}

/// The whole compaction machine driven to its end with a synchronous `respond` (summaries and
/// archives): the accepted candidate, or the reason for `compaction_failed`.
pub fn compact_with(
    history: &[Message],
    brief: Brief<'_>,
    working_files: &[WorkingFile],
    setup: Setup,
    measure: &dyn Measure,
    respond: &mut dyn FnMut(&Need) -> Answer,
) -> Result<Compacted, String> {
    let (mut machine, mut need) = Compaction::start(history, brief, working_files, setup, measure);
    loop {
        need = match need {
            Need::Done(done) => return Ok(*done),
            Need::Failed(reason) => return Err(reason),
            other => {
                let answer = respond(&other);
                machine.answer(answer, measure)
            }
        };
    }
}

/// A summary prompt with the user's focus, when one was given, after its instructions.
pub fn with_focus(prompt: String, focus: Option<&str>) -> String {
    match focus.map(str::trim).filter(|f| !f.is_empty()) {
        Some(focus) => format!(
            "{prompt}\n\n<focus>\nThe user asked this compaction to keep, in particular and in full detail: \
             {focus}\n</focus>"
        ),
        None => prompt,
    }
}

/// The objective as the summariser sees it: at most a sixteenth of the window (about three bytes a
/// token), cut at a character boundary and marked.
pub fn cut_objective(objective: &str, window: Tokens) -> String {
    let max_bytes = objective_bytes_for_summary(window);
    if objective.len() <= max_bytes {
        return objective.to_string();
    }
    format!("{}… (cut)", &objective[..agentd_protocol::text::floor_boundary(objective, max_bytes)])
}
