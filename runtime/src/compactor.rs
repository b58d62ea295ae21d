//! Compaction, as the fitter runs it: the pure plan from `policies::compaction`, with real summaries
//! from the model, a real archive in the evidence store and a full recount of every candidate.
//!
//! The loop: plan (as many recent rounds as fit), fold what leaves the request into the summary in
//! batches sized in tokens against the summariser's window (so the summary request always fits, even
//! when the conversation is already over the window), archive what leaves whole, assemble, count the
//! candidate in full, judge. On a retry the plan keeps fewer rounds, and only the newly removed
//! messages are folded into the summary made so far.

use crate::counter::TokenCounter;
use crate::provider::{ChatRequest, Client, ProviderError, ToolSpec};
use agentd_evidence::{NewEvidence, Source, Store, Stored};
use agentd_policies::compaction::{
    assemble, batches, fold_prompt, judge, objective_message, plan, prefix_prompt, render_for_summary,
    Checkpoint, PlanInput, Verdict, WorkingFile,
};
use agentd_policies::retry::{decide, Decision, RetryPolicy};
use agentd_policies::{Count, Message, Thresholds, Tokens, Window};
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The summariser's instruction, as its system prompt.
pub const SUMMARISER_SYSTEM: &str =
    "You compact the working history of a software agent into a faithful, self-contained summary. \
     You never invent facts and never drop exact identifiers, paths, numbers or error messages.";

#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// `compaction_failed`: no candidate could be accepted; the reason names the numbers.
    #[error("compaction failed: {0}")]
    Failed(String),
    #[error("compaction cancelled")]
    Cancelled,
    #[error("the summariser failed: {0}")]
    Provider(#[from] ProviderError),
    #[error("cannot archive the compacted steps: {0}")]
    Archive(String),
}

/// What a compaction needs to know.
pub struct Job<'a> {
    pub task_id: &'a str,
    pub role: &'a str,
    pub client: &'a Client,
    pub model: &'a str,
    pub counter: &'a TokenCounter,
    pub store: &'a Store,
    pub history: &'a [Message],
    /// The role's system prompt and tools: the first summary reuses them as the cached prefix.
    pub system: &'a str,
    pub tools: &'a [ToolSpec],
    pub objective: &'a str,
    /// System prompt + tool schemas + reply priming, as counted for the request.
    pub fixed: Tokens,
    pub before: Tokens,
    pub window: Window,
    pub thresholds: Thresholds,
    pub working_files: Vec<WorkingFile>,
    /// Where evidence goes when the database cannot take it: the workspace's evidence folder.
    pub fallback_dir: PathBuf,
    pub retry: RetryPolicy,
    pub cancel: &'a CancellationToken,
    pub at: String,
}

/// An accepted candidate.
#[derive(Debug, Clone)]
pub struct Compacted {
    pub history: Vec<Message>,
    pub archive_id: String,
    pub batches: u32,
    /// The candidate's history, counted in full (without system and tools).
    pub history_tokens: Count,
}

/// The objective as the summariser sees it: at most a sixteenth of the window (about three bytes a
/// token), cut at a character boundary and marked.
fn objective_for_prompt(objective: &str, window: Tokens) -> String {
    let max_bytes = (window.0 / 16 * 3) as usize;
    if objective.len() <= max_bytes {
        return objective.to_string();
    }
    let mut cut = max_bytes;
    while !objective.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… (cut)", &objective[..cut])
}

/// The summary a role may carry: a tenth of the window, between 256 and 4,096 tokens.
pub fn summary_reserve(window: Tokens) -> Tokens {
    Tokens((window.0 / 10).clamp(256, 4096))
}

pub async fn compact(job: Job<'_>) -> Result<Compacted, CompactError> {
    let counter = job.counter;
    let message_tokens: Vec<Tokens> = job.history.iter().map(|m| counter.count_message(m).tokens).collect();
    let count_message = |m: &Message| counter.count_message(m).tokens;
    let count_text = |t: &str| counter.count_text(t).tokens;
    let reserve = summary_reserve(job.window.tokens);
    // A folding request: the instruction, the objective, the summary so far (≤ reserve) and a batch,
    // answered in ≤ reserve tokens, all within half the summariser's window.
    // What no compaction can remove: system, tools and the objective. Over the trigger, summarising
    // would only spend tokens.
    let floor = job.fixed + count_message(&objective_message(job.objective));
    if floor >= job.thresholds.trigger {
        return Err(CompactError::Failed(format!(
            "the system prompt, tools and objective alone are {floor} tokens, over the trigger of {} in the \
             {}-token window; nothing that can be compacted away would make the request fit",
            job.thresholds.trigger, job.window.tokens
        )));
    }
    // The objective is context for the summariser, not the thing summarised: a long one is cut.
    let objective = objective_for_prompt(job.objective, job.window.tokens);
    let overhead =
        count_text(SUMMARISER_SYSTEM) + count_text(&fold_prompt(None, "", &objective)) + Tokens(64);
    // A folding request carries the summary so far (≤ reserve) and a batch, and its answer takes
    // ≤ reserve: all of it within 90 % of the summariser's window.
    let usable = job.window.tokens.percent(90);
    let batch_budget = usable.saturating_sub(overhead + reserve + reserve);
    if batch_budget < Tokens(64) {
        return Err(CompactError::Failed(format!(
            "the {}-token window leaves no room to summarise: the summary request alone needs {} tokens",
            job.window.tokens,
            overhead + reserve + reserve
        )));
    }
    let mut limit = None;
    let mut summary: Option<String> = None;
    let mut folded_upto = 0usize;
    let mut folds = 0u32;
    loop {
        let input = PlanInput {
            history: job.history,
            message_tokens: &message_tokens,
            fixed: job.fixed,
            objective: job.objective,
            destination: job.thresholds.destination,
            working_files: &job.working_files,
            keep_rounds_limit: limit,
            summary_reserve: reserve,
            count: &count_message,
        };
        let plan = plan(&input);
        if plan.keep_from_message > folded_upto {
            // First, in place when it fits (the cached prefix is reused); else, and on every later
            // retry, by folding token-sized batches of what newly leaves into the summary so far.
            let in_place = match folded_upto {
                0 => summarise_in_place(&job, &objective, plan.keep_from_message, reserve).await?,
                _ => None,
            };
            if let Some(text) = in_place {
                summary = Some(text);
                folds += 1;
            } else {
                let text = render_for_summary(&job.history[folded_upto..plan.keep_from_message]);
                for batch in batches(&text, batch_budget, &count_text) {
                    summary = Some(fold(&job, &objective, summary.as_deref(), &batch, reserve).await?);
                    folds += 1;
                }
            }
            folded_upto = plan.keep_from_message;
        }
        let archive_id = archive(&job, &job.history[..plan.keep_from_message])?;
        let checkpoint = Checkpoint {
            summary: summary.clone().unwrap_or_default(),
            archive_ref: Some(archive_id.clone()),
            batches: folds,
        };
        let assembled = assemble(&input, &plan, &checkpoint);
        let mut history_tokens = Count::default();
        for m in &assembled {
            history_tokens += counter.count_message(m);
        }
        let candidate = job.fixed + history_tokens.tokens;
        match judge(
            candidate,
            job.before,
            job.thresholds.destination,
            job.thresholds.trigger,
            plan.kept_rounds,
        ) {
            Verdict::Accept => {
                return Ok(Compacted { history: assembled, archive_id, batches: folds, history_tokens });
            }
            Verdict::RetryWithFewerRounds => limit = Some(plan.kept_rounds.saturating_sub(1)),
            Verdict::Fail { reason } => return Err(CompactError::Failed(reason)),
        }
    }
}

/// One folding step: the summary so far + the next batch → the new summary.
async fn fold(
    job: &Job<'_>,
    objective: &str,
    so_far: Option<&str>,
    batch: &str,
    reserve: Tokens,
) -> Result<String, CompactError> {
    let request = ChatRequest {
        model: job.model.to_string(),
        system: SUMMARISER_SYSTEM.to_string(),
        messages: vec![Message::user(fold_prompt(so_far, batch, objective))],
        tools: Vec::<ToolSpec>::new(),
        tool_choice_none: false,
        max_tokens: Some(reserve.0.min(u64::from(u32::MAX)) as u32),
        thinking_budget: None,
    };
    // The summariser's request passes the same measurement: it must fit its window.
    let count = job.counter.count_request(&request);
    if count.total.tokens + reserve > job.window.tokens {
        return Err(CompactError::Failed(format!(
            "a summary request of {} tokens would not fit the {}-token window",
            count.total, job.window.tokens
        )));
    }
    let text = summarise(job, &request).await?;
    // A summariser that says nothing still leaves the archive; say so in the checkpoint.
    Ok(match (text.is_empty(), so_far) {
        (false, _) => text,
        (true, Some(before)) => before.to_string(),
        (true, None) => "(the summariser returned nothing)".into(),
    })
}

/// The first summary as a continuation of the request itself: the same system prompt, tools and
/// messages (so a provider's prompt cache serves them), then the instruction, with tools forbidden.
/// `None` when that request would not fit comfortably (the conversation is already at or over the
/// window): then the batches do the work.
async fn summarise_in_place(
    job: &Job<'_>,
    objective: &str,
    leaving: usize,
    reserve: Tokens,
) -> Result<Option<String>, CompactError> {
    let kept = job.history.len() - leaving;
    let mut messages = job.history.to_vec();
    messages.push(Message::user(prefix_prompt(kept, objective)));
    let request = ChatRequest {
        model: job.model.to_string(),
        system: job.system.to_string(),
        messages,
        tools: job.tools.to_vec(),
        tool_choice_none: true,
        max_tokens: Some(reserve.0.min(u64::from(u32::MAX)) as u32),
        thinking_budget: None,
    };
    let count = job.counter.count_request(&request);
    // Measured, never estimated: the request is the one just judged to cross the trigger, so it
    // fits when the instruction and the answer still fit in the window above it.
    if count.total.estimated || count.total.tokens + reserve > job.window.tokens.percent(98) {
        return Ok(None);
    }
    let text = summarise(job, &request).await?;
    Ok((!text.is_empty()).then_some(text))
}

/// Sends a summary request, retrying by the retry policy on the daemon's clock; the answer's text.
async fn summarise(job: &Job<'_>, request: &ChatRequest) -> Result<String, CompactError> {
    let mut failures = 0u32;
    loop {
        let error = match job.client.chat(request, job.cancel).await {
            Ok(response) => return Ok(response.message.text().trim().to_string()),
            Err(_) if job.cancel.is_cancelled() => return Err(CompactError::Cancelled),
            Err(e) => e,
        };
        let Some(failure) = error.retry_failure() else { return Err(error.into()) };
        failures += 1;
        match decide(&job.retry, failure, failures) {
            Decision::GiveUp => return Err(error.into()),
            Decision::Retry { delay_ms, .. } => {
                let clock = crate::clock::clock();
                tokio::select! {
                    _ = clock.sleep(Duration::from_millis(delay_ms)) => {}
                    _ = job.cancel.cancelled() => return Err(CompactError::Cancelled),
                }
            }
        }
    }
}

/// Stores the messages that leave the request, whole, one JSON message per line.
fn archive(job: &Job<'_>, removed: &[Message]) -> Result<String, CompactError> {
    let mut data = Vec::new();
    for m in removed {
        serde_json::to_writer(&mut data, m).map_err(|e| CompactError::Archive(e.to_string()))?;
        data.push(b'\n');
    }
    let stored = job
        .store
        .put_evidence(
            NewEvidence {
                data: &data,
                media_type: "application/x-ndjson",
                source: Source {
                    task_id: job.task_id.to_string(),
                    role: job.role.to_string(),
                    tool: "compaction".into(),
                    call_id: None,
                    detail: Some(format!(
                        "{} messages compacted out of the {} history",
                        removed.len(),
                        job.role
                    )),
                },
                complete: true,
                incomplete_reason: None,
                created_at: &job.at,
            },
            &job.fallback_dir,
        )
        .map_err(|e| CompactError::Archive(e.to_string()))?;
    Ok(match stored {
        Stored::InStore(meta) => meta.id,
        Stored::Fallback { path, .. } => path.display().to_string(),
    })
}
