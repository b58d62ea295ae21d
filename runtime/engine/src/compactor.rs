//! Compaction, as the fitter runs it: the IO of the pure machine in `policies::compaction::machine`.
//!
//! The machine decides everything — what leaves the request, in which batches it is summarised, when
//! the first summary may continue the request already sent (so a provider's prompt cache serves it),
//! what is kept, when to retry with fewer rounds and when to give up. This module only does what it
//! asks: summary requests to the model (retried by [`crate::retry`] on the daemon's clock), the
//! archive in the evidence store, and measurements with the role's [`Meter`].

use crate::halt::Halt;
use crate::meter::Meter;
use crate::reported::{refused_event, verdict, Request};
use crate::retry::{ask, with_retries, OnTheClock, RetryError};
use crate::spending::{Admitted, Gate, GateError};
use crate::storage::Storage;
use agentd_policies::budget::summary_reserve;
use agentd_policies::compaction::{Answer, Brief, Compaction, Measure, Need, SentPrefix, Setup, WorkingFile};
use agentd_policies::retry::RetryPolicy;
use agentd_policies::summary::SUMMARISER_SYSTEM;
use agentd_policies::Thresholds;
use agentd_protocol::{ChatRequest, Model, ProviderError};
use agentd_protocol::{Message, Tokens, Usage};
use agentd_protocol::{NewEvidence, Source, Stored};
use agentd_protocol::{Producer, Role};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// Why a compaction did not produce an accepted history. The fitter reports it as `compaction_failed` (except
/// a cancel) and the turn fails.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// `compaction_failed`: no candidate could be accepted; the reason names the numbers.
    #[error("compaction failed: {0}")]
    Failed(String),
    /// The task was cancelled during a summary request or a wait for its retry.
    #[error("compaction cancelled")]
    Cancelled,
    /// A summary request must wait for a usage limit, or would cross a budget: the task stops.
    #[error("{0}")]
    Halted(Box<Halt>),
    /// A summary request failed past what the retry policy retries.
    #[error("the summariser failed: {0}")]
    Provider(#[from] ProviderError),
    /// The removed messages could not be archived (neither in the store nor in the fallback file).
    #[error("cannot archive the compacted steps: {0}")]
    Archive(String),
}

/// A role's own summariser, as a compaction uses it: where its summary requests go, and how they are
/// measured and bounded.
pub struct SummariserJob<'a> {
    /// Its provider's client.
    pub client: &'a dyn Model,
    /// Its model.
    pub model: &'a str,
    /// Its measure: the batches and summary requests are counted with it.
    pub meter: &'a Meter,
    /// Its window, which every summary request must fit.
    pub window: Tokens,
}

/// What a compaction needs to know.
pub struct Job<'a> {
    /// The task compacted.
    pub task_id: &'a str,
    /// The role whose request is compacted.
    pub role: &'a Role,
    /// The role's provider client, which the summary requests go to unless the role has a summariser.
    pub client: &'a dyn Model,
    /// The role's summariser (`compaction = {provider, model}`), if it has one.
    pub summariser: Option<SummariserJob<'a>>,
    /// The role's measure: every candidate is counted with it, as the fitter counts the request.
    pub meter: &'a Meter,
    /// Where the archive of what leaves the request is stored, as evidence.
    pub storage: &'a dyn Storage,
    /// The request that crossed the trigger: its system prompt and tools are reused by a summary that
    /// continues it, and its messages are the history compacted.
    pub request: &'a ChatRequest,
    /// The task's objective, re-inserted at the head of the rebuilt history.
    pub objective: &'a str,
    /// The instructions and memory blocks as they read now: first in the rebuilt history, verbatim.
    pub pinned: &'a [Message],
    /// What the user asked this compaction to keep in particular, given to the summariser.
    pub focus: Option<&'a str>,
    /// System prompt + tool schemas + reply priming, as counted for the request.
    pub fixed: Tokens,
    /// The request's size before the compaction, counted in full, in tokens.
    pub before: Tokens,
    /// Whether `before` is an estimate (the history is then not summarised in place, whose fit an estimate
    /// cannot vouch for).
    pub before_estimated: bool,
    /// The request last sent for this role, when the history starts with its messages.
    pub sent_prefix: Option<SentPrefix>,
    /// The role's window, trigger and destination.
    pub thresholds: Thresholds,
    /// The role's server's prompt cache, declared or learned: the rebuilt request then lands where the
    /// coming turns cost least.
    pub cache: Option<agentd_protocol::model::PromptCache>,
    /// The coder's working files (the files it wrote or edited, as they are now); empty for other roles.
    pub working_files: Vec<WorkingFile>,
    /// Where evidence goes when the database cannot take it: the workspace's evidence folder.
    pub fallback_dir: PathBuf,
    /// How summary requests are retried.
    pub retry: RetryPolicy,
    /// Fires when the task is cancelled: summary requests and their waits stop at once.
    pub cancel: &'a CancellationToken,
    /// The budgets' check each summary request passes before it is sent; `None`: none (a
    /// compaction of a stopped task the user asked for).
    pub gate: Option<Gate>,
    /// When the compaction started (RFC 3339): the archive's `created_at`.
    pub at: String,
}

/// An accepted candidate.
#[derive(Debug, Clone)]
pub struct CompactedHistory {
    /// The rebuilt history: objective, checkpoint, observations, working files, then the kept rounds.
    pub history: Vec<Message>,
    /// The evidence item holding, one message per JSON line, what left the request.
    pub archive_id: String,
    /// How many summary requests made the checkpoint's summary.
    pub batches: u32,
    /// Whether the first summary continued the request already sent (its prefix cached).
    pub in_place: bool,
    /// The request's size before, counted in full.
    pub tokens_before: Tokens,
    /// The summary requests' usage, summed over those the server reported one for; `None` when it
    /// reported none.
    pub summary_usage: Option<Usage>,
    /// With a prompt cache, where the role's next compaction comes (`Compacted::next_trigger`).
    pub next_trigger: Option<Tokens>,
    /// The summary requests, in flight for the budgets (at what they spent) until this is dropped:
    /// after `compaction_finished` has logged their usage.
    pub held: Admitted,
}

/// The machine's measurements: the role's meter, and for a candidate the whole request it would be
/// (the same count the fitter makes of it once it is accepted).
struct JobMeasure<'a> {
    meter: &'a Meter,
    /// The summariser's measure (the role's own when it has none).
    summariser: &'a Meter,
    /// The summariser's model.
    summary_model: &'a str,
    request: &'a ChatRequest,
    fixed: Tokens,
}

impl Measure for JobMeasure<'_> {
    fn text(&self, text: &str) -> Tokens {
        self.summariser.count_text(text).tokens
    }

    fn message(&self, message: &Message) -> Tokens {
        self.meter.count_message(message).tokens
    }

    fn summary_request(&self, system: &str, messages: &[Message]) -> Tokens {
        let request = summary_request(self.summary_model, system.to_string(), messages.to_vec(), None);
        self.summariser.count_request(&request, None).count.total.tokens
    }

    fn history(&self, messages: &[Message]) -> Tokens {
        let request = with_messages(self.request, messages.to_vec());
        self.meter.count_request(&request, None).count.total.tokens.saturating_sub(self.fixed)
    }
}

/// Runs one compaction to its end: drives the policies' compaction machine, sending the summary requests it
/// asks for (retried on the daemon's clock) and storing the archive.
pub async fn compact(job: Job<'_>) -> Result<CompactedHistory, CompactError> {
    let measure = JobMeasure {
        meter: job.meter,
        summariser: job.summariser.as_ref().map_or(job.meter, |s| s.meter),
        summary_model: job.summariser.as_ref().map_or(job.request.model.as_str(), |s| s.model),
        request: job.request,
        fixed: job.fixed,
    };
    let history = &job.request.messages;
    let setup = Setup {
        thresholds: job.thresholds,
        fixed: job.fixed,
        before: job.before,
        before_estimated: job.before_estimated,
        // The summary is written by the summariser: it must fit its window as well as the role's.
        summary_reserve: summary_reserve(
            job.summariser.as_ref().map_or(job.thresholds.window, |s| s.window.min(job.thresholds.window)),
        ),
        sent_prefix: job.sent_prefix,
        summariser_window: job.summariser.as_ref().map(|s| s.window),
        cache: job.cache,
    };
    let (mut machine, mut need) = Compaction::start(
        history,
        Brief { objective: job.objective, pinned: job.pinned, focus: job.focus },
        &job.working_files,
        setup,
        &measure,
    );
    let mut spent: Option<Usage> = None;
    // The summary requests stay in flight for the budgets until `compaction_finished` logs them.
    let mut held = Admitted::none();
    loop {
        let answer = match need {
            Need::Done(done) => {
                return Ok(CompactedHistory {
                    next_trigger: done.next_trigger(),
                    history: done.history,
                    archive_id: done.archive_ref,
                    batches: done.batches,
                    in_place: done.in_place,
                    tokens_before: job.before,
                    summary_usage: spent,
                    held,
                })
            }
            Need::Failed(reason) => return Err(CompactError::Failed(reason)),
            Need::InPlace { messages, instruction, max_tokens } => {
                // The same system prompt, tools and leading messages as the request already sent,
                // then the instruction; tools forbidden.
                let mut continued = history[..messages.min(history.len())].to_vec();
                continued.push(Message::user(instruction));
                let request = ChatRequest {
                    tool_choice_none: true,
                    max_tokens: Some(clamp_u32(max_tokens)),
                    thinking_budget: None,
                    ..with_messages(job.request, continued)
                };
                Answer::Summary(Some(summarise(&job, &request, &mut spent, &mut held).await?))
            }
            Need::Fold { prompt, max_tokens } => {
                let request = summary_request(
                    measure.summary_model,
                    SUMMARISER_SYSTEM.to_string(),
                    vec![Message::user(prompt)],
                    Some(clamp_u32(max_tokens)),
                );
                Answer::Summary(Some(summarise(&job, &request, &mut spent, &mut held).await?))
            }
            Need::Archive { upto } => Answer::Archived(archive(&job, &history[..upto.min(history.len())])?),
        };
        need = machine.answer(answer, &measure);
    }
}

fn clamp_u32(tokens: Tokens) -> u32 {
    u32::try_from(tokens.0).unwrap_or(u32::MAX)
}

/// The role's request (its model, system prompt, tools and settings) with these messages instead.
fn with_messages(role: &ChatRequest, messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        model: role.model.clone(),
        system: role.system.clone(),
        messages,
        tools: role.tools.clone(),
        tool_choice_none: role.tool_choice_none,
        max_tokens: role.max_tokens,
        thinking_budget: role.thinking_budget,
        cache_key: role.cache_key.clone(),
    }
}

/// A folding summary request to `model` (the role's, or its summariser's): its own system prompt,
/// no tools, no thinking.
fn summary_request(
    model: &str,
    system: String,
    messages: Vec<Message>,
    max_tokens: Option<u32>,
) -> ChatRequest {
    ChatRequest {
        model: model.to_string(),
        system,
        messages,
        tools: Vec::new(),
        tool_choice_none: false,
        max_tokens,
        thinking_budget: None,
        cache_key: None,
    }
}

/// Sends a summary request, retried by the retry policy on the daemon's clock (see
/// [`crate::retry`]); the answer's text. Its usage is added to `spent`, and its admission (settled
/// to that usage) to `held`.
async fn summarise(
    job: &Job<'_>,
    request: &ChatRequest,
    spent: &mut Option<Usage>,
    held: &mut Admitted,
) -> Result<String, CompactError> {
    let client = job.summariser.as_ref().map_or(job.client, |s| s.client);
    let meter = job.summariser.as_ref().map_or(job.meter, |s| s.meter);
    let window = job.summariser.as_ref().map_or(job.thresholds.window, |s| s.window);
    let input = meter.count_request(request, None).count.total.tokens;
    let mut admitted = Admitted::none();
    if let Some(gate) = &job.gate {
        admitted = gate.admit(&request.model, input, request.max_tokens).map_err(|e| match e {
            GateError::Halt(h) => CompactError::Halted(h),
            GateError::Storage(e) => CompactError::Failed(format!("cannot read what the task spent: {e}")),
        })?;
    }
    let mut pause = OnTheClock(job.role.clone());
    let response = with_retries(&job.retry, job.cancel, &mut pause, || ask(client, request, job.cancel))
        .await
        .map_err(|e| match e {
            RetryError::Cancelled => CompactError::Cancelled,
            RetryError::Provider(e) => CompactError::Provider(e),
            RetryError::Pause(halt) => CompactError::Halted(halt),
        })?;
    // Judged as a turn's answer is: refused, said so, and what was sent counted instead.
    let asked = Request { model: &request.model, max_output: request.max_tokens, sent: input, window, meter };
    let judged = verdict(&asked, &response);
    if let Some(refused) = judged.as_ref().and_then(|j| refused_event(&response, j, input, true)) {
        let stored = job.storage.emit(job.task_id, job.role, refused);
        stored.map_err(|e| CompactError::Failed(format!("cannot record a refused usage report: {e}")))?;
    }
    let usage = judged.map(|j| j.counted);
    if let (Some(u), Some(gate)) = (usage, &job.gate) {
        admitted.settle(gate.amount(&request.model, &u));
    }
    held.join(admitted);
    if let Some(u) = usage {
        let sum = spent.get_or_insert_with(Usage::default);
        sum.prompt_tokens = sum.prompt_tokens.saturating_add(u.prompt_tokens);
        sum.completion_tokens = sum.completion_tokens.saturating_add(u.completion_tokens);
        sum.cache_read_tokens = sum.cache_read_tokens.saturating_add(u.cache_read_tokens);
        sum.cache_write_tokens = sum.cache_write_tokens.saturating_add(u.cache_write_tokens);
    }
    Ok(response.message.text().trim().to_string())
}

/// Stores the messages that leave the request, whole, one JSON message per line.
fn archive(job: &Job<'_>, removed: &[Message]) -> Result<String, CompactError> {
    let mut data = Vec::new();
    for m in removed {
        serde_json::to_writer(&mut data, m).map_err(|e| CompactError::Archive(e.to_string()))?;
        data.push(b'\n');
    }
    let stored = job
        .storage
        .put_evidence(
            NewEvidence {
                data: &data,
                media_type: "application/x-ndjson",
                source: Source {
                    task_id: job.task_id.to_string(),
                    role: job.role.clone(),
                    tool: Producer::Compaction,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::TokenCounter;
    use crate::memory::MemoryStorage;
    use crate::meter::fixed_part;
    use crate::storage::Storage;
    use crate::testing::rounds;
    use agentd_policies::calibration::Calibration;
    use agentd_policies::retry::Schedule;
    use agentd_protocol::Unit;
    use agentd_providers::{Client, OpenAiClient};
    use agentd_test_support::{
        hang, is_summary_request, server_error, sse, text, ScriptedServer, SUMMARISER_SYSTEM_START,
    };
    use std::sync::Arc;
    use std::time::Duration;

    const SUMMARY: &str = "Summary: the files were read one by one.";

    /// What a compaction runs with, apart from the job itself.
    struct Bench {
        server: ScriptedServer,
        client: Client,
        meter: Meter,
        storage: MemoryStorage,
        request: ChatRequest,
        objective: String,
        dir: tempfile::TempDir,
        cancel: CancellationToken,
    }

    impl Bench {
        async fn new(server: ScriptedServer, history: Vec<Message>) -> Bench {
            let dir = tempfile::tempdir().unwrap();
            let storage = MemoryStorage::new();
            let client = Client::from(OpenAiClient::new(&server.base_url(), None));
            let meter =
                Meter::new(Arc::new(TokenCounter::with_endpoint(server.model())), Calibration::default());
            let request = ChatRequest {
                model: server.model().to_string(),
                system: "You are the coder.".into(),
                messages: history,
                tools: Vec::new(),
                tool_choice_none: false,
                max_tokens: None,
                thinking_budget: None,
                cache_key: None,
            };
            let objective = request.messages.first().map(Message::text).unwrap_or_default();
            Bench {
                server,
                client,
                meter,
                storage,
                request,
                objective,
                dir,
                cancel: CancellationToken::new(),
            }
        }

        /// The job of compacting the bench's request into a window of `window` tokens.
        fn job(&self, window: u64, retry: RetryPolicy) -> Job<'_> {
            let count = self.meter.count_request(&self.request, None).count;
            Job {
                task_id: "t1",
                role: &Role::Coder,
                client: &self.client,
                summariser: None,
                meter: &self.meter,
                storage: &self.storage,
                request: &self.request,
                objective: &self.objective,
                pinned: &[],
                focus: None,
                fixed: fixed_part(&count),
                before: count.total.tokens,
                before_estimated: count.total.estimated,
                sent_prefix: None,
                thresholds: Thresholds::new(Tokens(window), 80, Tokens::ZERO),
                cache: agentd_protocol::Model::prompt_cache(&self.client),
                working_files: Vec::new(),
                fallback_dir: self.dir.path().join("fallback"),
                retry,
                cancel: &self.cancel,
                gate: None,
                at: "2025-01-01T00:00:00.000Z".into(),
            }
        }
    }

    fn quick_retries() -> RetryPolicy {
        RetryPolicy { server_error: Schedule { attempts: 2, delay_ms: 10 }, ..RetryPolicy::default() }
    }

    async fn summariser(script: Vec<agentd_test_support::Step>) -> ScriptedServer {
        ScriptedServer::builder().script(script).responder(|_| sse(vec![text(SUMMARY)])).start().await
    }

    #[tokio::test]
    async fn a_history_past_the_trigger_is_summarised_and_what_left_it_archived_whole() {
        let history = rounds(12, 300);
        let bench = Bench::new(summariser(Vec::new()).await, history.clone()).await;
        let job = bench.job(4_000, quick_retries());
        let thresholds = job.thresholds;
        assert!(thresholds.crosses_trigger(job.before), "the bench's history is past the trigger");
        let done = compact(job).await.unwrap();

        let after = bench
            .meter
            .count_request(&ChatRequest { messages: done.history.clone(), ..bench.request.clone() }, None);
        assert!(
            after.count.total.tokens <= thresholds.destination,
            "{} over {}",
            after.count.total.tokens,
            thresholds.destination
        );
        assert!(done.batches >= 1 && !done.in_place);
        assert!(done.history.iter().any(|m| m.text().contains(SUMMARY)), "the summary is in the history");
        let sent = bench.server.chat_requests();
        assert!(!sent.is_empty() && sent.iter().all(is_summary_request));
        assert!(sent[0]["messages"][0]["content"].as_str().unwrap().starts_with(SUMMARISER_SYSTEM_START));
        // The archive holds what left the request, whole, one message per line, in order.
        let archive = bench.storage.read_evidence(&done.archive_id, 0, 10_000, Unit::Lines).unwrap();
        let archived: Vec<Message> = archive.data.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(!archived.is_empty());
        assert_eq!(archived[..], history[..archived.len()]);
        assert_eq!(bench.storage.evidence(&done.archive_id).unwrap().source.tool, Producer::Compaction);
    }

    #[tokio::test]
    async fn a_summary_request_is_retried_on_the_daemons_clock() {
        let server = summariser(vec![server_error(503, "busy")]).await;
        let bench = Bench::new(server, rounds(12, 300)).await;
        let done = compact(bench.job(4_000, quick_retries())).await.unwrap();
        assert!(done.history.iter().any(|m| m.text().contains(SUMMARY)));
        let sent = bench.server.chat_requests();
        assert_eq!(sent[0], sent[1], "the refused summary request is resent as it was");
    }

    #[tokio::test]
    async fn a_summariser_that_refuses_fails_the_compaction_with_its_words() {
        let server = summariser(vec![server_error(401, "Incorrect API key provided")]).await;
        let bench = Bench::new(server, rounds(12, 300)).await;
        let error = compact(bench.job(4_000, quick_retries())).await.unwrap_err();
        assert!(
            matches!(&error, CompactError::Provider(ProviderError::Rejected { status: 401, .. })),
            "{error:?}"
        );
        assert!(error.to_string().contains("Incorrect API key provided"), "{error}");
        assert_eq!(bench.server.chat_requests().len(), 1, "a refusal is not resent");
    }

    #[tokio::test]
    async fn a_cancelled_compaction_stops_at_once() {
        let server = summariser(vec![hang()]).await;
        let bench = Bench::new(server, rounds(12, 300)).await;
        let trigger = bench.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            trigger.cancel();
        });
        let outcome =
            tokio::time::timeout(Duration::from_secs(10), compact(bench.job(4_000, quick_retries())));
        assert!(matches!(outcome.await, Ok(Err(CompactError::Cancelled))));
    }

    #[tokio::test]
    async fn what_no_compaction_can_bring_under_the_window_fails_with_the_numbers() {
        // The objective alone is over the window: it is never summarised away.
        let huge = vec![Message::user("please consider this detail carefully. ".repeat(600))];
        let bench = Bench::new(summariser(Vec::new()).await, huge).await;
        let error = compact(bench.job(1_000, quick_retries())).await.unwrap_err();
        let CompactError::Failed(reason) = &error else { panic!("{error:?}") };
        assert!(reason.contains("1000-token window"), "{reason}");
        assert!(bench.server.chat_requests().is_empty());
    }
}
