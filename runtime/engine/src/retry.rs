//! Retries of provider calls: the one loop that resends a failed model request by the retry policy.
//!
//! An agent's turn and a compaction's summary request both go through [`with_retries`]. A call that
//! fails with a rate limit, an overload, a server error or a stream anomaly is made again after the
//! wait [`decide`] schedules for the how-many-th failure of that kind it is; anything else (a
//! refusal, a context overflow, a call that failed because the task was cancelled) ends the loop at
//! once with the provider's error. A retry resends the same request: nothing of a failed attempt was
//! kept.
//!
//! The loop owns the counting and the decisions; what happens around a wait belongs to the caller,
//! through [`Pause`]. An agent's turn announces the retry (`retry_scheduled`, the task
//! `waiting_retry`) and then waits; a summary request inside the fitter just waits
//! ([`OnTheClock`]). Every wait is [`wait`], on the daemon's clock, and ends at once when the task is
//! cancelled. A server that asks for a longer wait than any the policy makes (a usage limit,
//! [`Decision::WaitOut`]) is no retry: the loop ends with the caller's [`Pause::wait_out`], a halt the
//! task stops for and is woken from, durably, when the limit resets.

use crate::clock::clock;
use crate::halt::Halt;
use agentd_policies::retry::{decide, Decision, Failure, RetryPolicy};
use agentd_protocol::{ChatRequest, ChatResponse, Model, ProviderError, Role};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why the loop stopped without an answer.
#[derive(Debug, thiserror::Error)]
pub enum RetryError<E> {
    /// The caller's cancellation token fired: during a call or during a wait.
    #[error("cancelled")]
    Cancelled,
    /// Not worth resending, or the policy's attempts for its kind are used up: the last error.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The caller's [`Pause`] failed (an event that could not be stored, a scheduler that is gone).
    #[error(transparent)]
    Pause(E),
}

/// A retry the policy scheduled: what failed, the how-many-th retry of its kind it is, and the wait.
#[derive(Debug)]
pub struct Scheduled<'a> {
    /// The kind of failure, with the server's `Retry-After` when it sent one.
    pub failure: Failure,
    /// 1 for the first retry of this kind of failure.
    pub attempt: u32,
    /// How many retries the policy allows for this kind of failure.
    pub max_attempts: u32,
    /// How long to wait before resending.
    pub delay: Duration,
    /// The error that is being retried.
    pub error: &'a ProviderError,
}

impl Scheduled<'_> {
    /// The `reason` of the `retry_scheduled` event: `rate_limit`, `overloaded`, `server_error`,
    /// `stream_anomaly`.
    pub fn reason(&self) -> &'static str {
        self.failure.reason()
    }

    /// `delay` in whole milliseconds (as `retry_scheduled` carries it).
    pub fn delay_ms(&self) -> u64 {
        u64::try_from(self.delay.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A usage limit the server said resets later than any wait the policy makes
/// ([`Decision::WaitOut`]): no retry attempt, but a wait the task stops for.
#[derive(Debug)]
pub struct WaitOut<'a> {
    /// How long until the limit resets.
    pub delay: Duration,
    /// The header that said so (`retry-after`, `x-ratelimit-reset-tokens`, …).
    pub header: &'static str,
    /// The server asked for longer than [`agentd_protocol::MAX_PROVIDER_WAIT`]: `delay` is that ceiling.
    pub capped: bool,
    /// `rate_limit` or `overloaded`.
    pub reason: &'static str,
    /// The provider's refusal.
    pub error: &'a ProviderError,
}

/// What a caller does while a retry waits: announce it, wait out `retry.delay` (or until `cancel`
/// fires), and get ready for the next attempt.
pub trait Pause {
    /// Why a pause could fail (an event that could not be stored, a scheduler that is gone); it ends the
    /// retry loop as [`RetryError::Pause`].
    type Error;

    /// Waits out a scheduled retry. `Ok(Waited::Cancelled)` when `cancel` fired first.
    fn pause(
        &mut self,
        retry: &Scheduled<'_>,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<Waited, Self::Error>> + Send;

    /// A usage limit to wait out: an agent's turn and a compaction stop the task here (their error
    /// says until when), and it is woken, durably, when the limit resets.
    fn wait_out(&mut self, limit: &WaitOut<'_>) -> Self::Error;
}

/// Sends `req` to `model`, ended at once by `cancel` ([`ProviderError::Cancelled`]): the one way
/// the engine calls a model.
pub async fn ask(
    model: &dyn Model,
    req: &ChatRequest,
    cancel: &CancellationToken,
) -> Result<ChatResponse, ProviderError> {
    tokio::select! {
        answer = model.chat(req) => answer,
        _ = cancel.cancelled() => Err(ProviderError::Cancelled { url: model.server().to_string() }),
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The delay passed.
    Elapsed,
    /// The task was cancelled first.
    Cancelled,
}

/// Waits `delay` on the daemon's clock, or until `cancel` fires: the one deliberate wait of a turn.
pub async fn wait(delay: Duration, cancel: &CancellationToken) -> Waited {
    let clock = clock();
    tokio::select! {
        _ = clock.sleep(delay) => Waited::Elapsed,
        _ = cancel.cancelled() => Waited::Cancelled,
    }
}

impl WaitOut<'_> {
    /// The halt of `role`'s task until the limit resets, on the daemon's clock.
    pub fn halt(&self, role: Role) -> Halt {
        Halt::UsageLimit {
            role,
            resume_at: crate::clock::later(clock().now(), self.delay),
            source: self.header.to_string(),
            capped: self.capped,
            reason: self.reason.to_string(),
            message: self.error.to_string(),
        }
    }
}

/// A plain wait on the daemon's clock, announced nowhere: a compaction's summary requests (of the
/// role it holds) inside the fitter. A usage limit stops the task like a turn's does.
pub struct OnTheClock(pub Role);

impl Pause for OnTheClock {
    type Error = Box<Halt>;

    async fn pause(
        &mut self,
        retry: &Scheduled<'_>,
        cancel: &CancellationToken,
    ) -> Result<Waited, Box<Halt>> {
        Ok(wait(retry.delay, cancel).await)
    }

    fn wait_out(&mut self, limit: &WaitOut<'_>) -> Box<Halt> {
        Box::new(limit.halt(self.0.clone()))
    }
}

/// Makes `call` until it answers, retrying by `policy` with `pause` between attempts. Attempts are
/// counted per kind of failure: a rate limit after two server errors is the first rate limit.
pub async fn with_retries<T, P, F, Fut>(
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    pause: &mut P,
    mut call: F,
) -> Result<T, RetryError<P::Error>>
where
    P: Pause,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut failures: HashMap<&'static str, u32> = HashMap::new();
    loop {
        let error = match call().await {
            Ok(answer) => return Ok(answer),
            Err(_) if cancel.is_cancelled() => return Err(RetryError::Cancelled),
            Err(e) => e,
        };
        let Some(failure) = Failure::of(&error) else { return Err(error.into()) };
        let failed = failures.entry(failure.reason()).or_insert(0);
        *failed += 1;
        let (attempt, max_attempts, delay_ms) = match decide(policy, failure, *failed) {
            Decision::Retry { attempt, max_attempts, delay_ms } => (attempt, max_attempts, delay_ms),
            Decision::GiveUp => return Err(error.into()),
            Decision::WaitOut { delay_ms } => {
                // Not a retry attempt: the task stops until the limit resets.
                *failed -= 1;
                let (header, capped) = match &error {
                    ProviderError::RateLimited { retry_after: Some(r), .. }
                    | ProviderError::Overloaded { retry_after: Some(r), .. } => (r.header, r.capped),
                    _ => ("retry-after", false),
                };
                let limit = WaitOut {
                    delay: Duration::from_millis(delay_ms),
                    header,
                    capped,
                    reason: failure.reason(),
                    error: &error,
                };
                return Err(RetryError::Pause(pause.wait_out(&limit)));
            }
        };
        let retry = Scheduled {
            failure,
            attempt,
            max_attempts,
            delay: Duration::from_millis(delay_ms),
            error: &error,
        };
        match pause.pause(&retry, cancel).await.map_err(RetryError::Pause)? {
            Waited::Elapsed => {}
            Waited::Cancelled => return Err(RetryError::Cancelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_policies::retry::Schedule;
    use agentd_protocol::Message;
    use agentd_providers::OpenAiClient;
    use agentd_test_support::{empty_stream, rate_limited, server_error, sse, text, ScriptedServer};
    use std::time::Instant;

    fn request(model: &str) -> ChatRequest {
        ChatRequest {
            model: model.to_string(),
            system: "You are terse.".into(),
            messages: vec![Message::user("hi")],
            tools: Vec::new(),
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
            cache_key: None,
        }
    }

    /// Short schedules so the tests wait milliseconds, except where a wait is the point.
    fn policy() -> RetryPolicy {
        RetryPolicy {
            rate_limit: Schedule { attempts: 3, delay_ms: 30_000 },
            stream_anomaly: Schedule { attempts: 2, delay_ms: 10 },
            server_error: Schedule { attempts: 2, delay_ms: 10 },
            overloaded: Schedule { attempts: 2, delay_ms: 10 },
        }
    }

    async fn send(
        server: &ScriptedServer,
        policy: &RetryPolicy,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, RetryError<Box<Halt>>> {
        let client = OpenAiClient::new(&server.base_url(), None);
        let request = request(server.model());
        with_retries(policy, cancel, &mut OnTheClock(Role::Lead), || client.chat(&request, cancel)).await
    }

    #[tokio::test]
    async fn a_rate_limit_is_resent_after_the_servers_retry_after() {
        let server = ScriptedServer::start(vec![rate_limited(Some("1")), sse(vec![text("ok")])]).await;
        let started = Instant::now();
        let answer = send(&server, &policy(), &CancellationToken::new()).await.unwrap();
        assert_eq!(answer.message.text(), "ok");
        // Retry-After (1 s) wins over the configured 30 s, and it was waited out.
        let waited = started.elapsed();
        assert!(waited >= Duration::from_secs(1) && waited < Duration::from_secs(20), "{waited:?}");
        let sent = server.chat_requests();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0]["messages"], sent[1]["messages"], "a retry resends the same request");
    }

    #[tokio::test]
    async fn attempts_are_counted_per_kind_of_failure() {
        // Two server errors and two stream anomalies: four failures, but no kind over its two.
        let server = ScriptedServer::start(vec![
            server_error(503, "busy"),
            empty_stream(),
            server_error(502, "bad gateway"),
            empty_stream(),
            sse(vec![text("through")]),
        ])
        .await;
        let answer = send(&server, &policy(), &CancellationToken::new()).await.unwrap();
        assert_eq!(answer.message.text(), "through");
        assert_eq!(server.chat_requests().len(), 5);
    }

    #[tokio::test]
    async fn used_up_attempts_give_up_with_the_last_error() {
        let server = ScriptedServer::start(vec![empty_stream(), empty_stream(), empty_stream()]).await;
        let error = send(&server, &policy(), &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(error, RetryError::Provider(ProviderError::StreamAnomaly { .. })), "{error:?}");
        assert_eq!(server.chat_requests().len(), 3, "the first attempt and two retries");
    }

    #[tokio::test]
    async fn a_refusal_is_not_resent() {
        let server = ScriptedServer::start(vec![server_error(401, "Incorrect API key provided")]).await;
        let error = send(&server, &policy(), &CancellationToken::new()).await.unwrap_err();
        assert!(
            matches!(error, RetryError::Provider(ProviderError::Rejected { status: 401, .. })),
            "{error:?}"
        );
        assert_eq!(server.chat_requests().len(), 1);
    }

    #[tokio::test]
    async fn cancel_during_a_wait_ends_it_at_once() {
        let server = ScriptedServer::start(vec![rate_limited(Some("25"))]).await;
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            trigger.cancel();
        });
        let started = Instant::now();
        let error = send(&server, &policy(), &cancel).await.unwrap_err();
        assert!(matches!(error, RetryError::Cancelled), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "the 25 s wait was not sat out");
        assert_eq!(server.chat_requests().len(), 1);
    }

    #[tokio::test]
    async fn a_limit_longer_than_any_wait_of_the_policy_stops_the_loop_without_an_attempt() {
        // The policy waits 30 s at most; the server says an hour.
        let server = ScriptedServer::start(vec![rate_limited(Some("3600"))]).await;
        let started = Instant::now();
        let error = send(&server, &policy(), &CancellationToken::new()).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "nothing was sat out in memory");
        let RetryError::Pause(halt) = error else { panic!("{error:?}") };
        let Halt::UsageLimit { source, reason, resume_at, .. } = *halt else { panic!("not a usage limit") };
        assert_eq!((source.as_str(), reason.as_str()), ("retry-after", "rate_limit"));
        let ahead = resume_at.duration_since(clock().now()).unwrap();
        assert!(ahead > Duration::from_secs(3590) && ahead <= Duration::from_secs(3600), "{ahead:?}");
        assert_eq!(server.chat_requests().len(), 1);
    }

    /// 2^64/1000 seconds: cast to milliseconds `as u64` it wrapped into a 384 ms retry. It is the
    /// 30-day ceiling, waited out, and the halt says the wait was capped.
    #[tokio::test]
    async fn a_wait_too_long_to_count_is_the_ceiling_not_a_wrapped_retry() {
        let server = ScriptedServer::start(vec![rate_limited(Some("18446744073709552"))]).await;
        let error = send(&server, &policy(), &CancellationToken::new()).await.unwrap_err();
        let RetryError::Pause(halt) = error else { panic!("{error:?}") };
        let Halt::UsageLimit { resume_at, capped, .. } = *halt else { panic!("not a usage limit") };
        assert!(capped);
        let ahead = resume_at.duration_since(clock().now()).unwrap();
        let ceiling = agentd_protocol::MAX_PROVIDER_WAIT;
        assert!(ahead <= ceiling && ahead > ceiling - Duration::from_secs(60), "{ahead:?}");
        assert_eq!(server.chat_requests().len(), 1, "no retry");
    }
}
