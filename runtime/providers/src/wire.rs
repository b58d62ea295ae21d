//! The provider seam: [`WireFormat`], the one trait a wire format implements — its request body,
//! its HTTP and stream error classification, its stream assembler, the output room a request
//! claims, its window probe and its counting endpoint — over the shared [`Http`] client; and the
//! chat call every format makes through it ([`chat`]). Also what formats' answers share beyond
//! HTTP: a declared window number, read the same way from any server's probe answer.
//!
//! Adding a wire format: a module under `provider/` with a client type implementing
//! [`WireFormat`] (its body as serde structs, its [`Assemble`] implementation, its classifiers),
//! `From<ItsClient> for Client`, and one line in the `kinds!` table in `provider/mod.rs`, which is
//! where the config's `kind` names are parsed.

use super::http::{cancellable, send_streaming, send_whole, Answer, Http};
use super::sse::{drive_within, stalled, Assemble};
use agentd_protocol::{ChatRequest, ChatResponse, ProviderError, RetryAfter};
use agentd_protocol::{Message, Part, PromptCache, Tokens};
use futures_util::StreamExt;
use reqwest::header::ACCEPT;
use reqwest::RequestBuilder;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;
use tokio_util::sync::CancellationToken;

/// One wire format: what a [`ChatRequest`] looks like on it, what its answers and refusals mean,
/// and how its server declares a window and counts tokens. Implemented by each format's client
/// type (which holds its [`Http`] and whatever the format remembers about its server); [`chat`]
/// and [`Client`](super::Client) do the rest.
pub(crate) trait WireFormat: Send + Sync + Sized + 'static {
    /// The chat request's body: its serialisation is what is POSTed.
    type Body<'a>: Serialize + Send + Sync;
    /// Reads the event stream of an accepted chat request into an answer.
    type Assembler: Assemble + Default + Send;
    /// The chat endpoint, below the base URL (`/chat/completions`, `/messages`).
    const CHAT_PATH: &'static str;
    /// The prompt cache every server of this format has, when the format implies one (Anthropic's,
    /// which agentd marks with `cache_control`); `None`: only a declared `cache` prices one.
    const PROMPT_CACHE: Option<PromptCache> = None;

    /// A client of this format for the server `http` talks to.
    fn connect(http: Http) -> Self;
    /// The HTTP client it sends with.
    fn http(&self) -> &Http;
    /// `request` with the format's key and version headers.
    fn authorize(&self, request: RequestBuilder) -> RequestBuilder;
    /// The streamed request for `req`, with the optional fields this server has not refused.
    fn body<'a>(&self, req: &'a ChatRequest) -> Self::Body<'a>;
    /// Whether `error` is the server refusing an optional field the body carried (see
    /// [`Optional`](crate::optional::Optional)): it is left out from now on, and the request is asked
    /// once more without it. The format has none by default.
    fn refused_optional(&self, _error: &ProviderError) -> bool {
        false
    }
    /// The same request without streaming, for a server that accepted the stream and then sent not
    /// one byte; `None` when the format asks nothing more, and an empty stream is an empty answer.
    fn unstreamed<'a>(_body: Self::Body<'a>) -> Option<Self::Body<'a>> {
        None
    }
    /// A non-2xx answer: its status, `Retry-After` and body, as the error the caller acts on. By
    /// default the shapes any server's refusal takes (OpenAI's error bodies and the others
    /// [`crate::error`] reads); a format with bodies of its own reads them first.
    fn classify_http(status: u16, retry_after: Option<RetryAfter>, body: &str) -> ProviderError {
        crate::error::classify_http(status, retry_after, body)
    }
    /// A server that ignored `stream: true` and answered in one JSON piece.
    fn from_json_body(body: &str) -> Result<ChatResponse, ProviderError>;
    /// The output room `req` claims inside the window: what its body says the answer may take. By
    /// default the request's `max_tokens` as the body sends it, and none claimed when none is sent.
    fn output_reserve(req: &ChatRequest) -> Tokens {
        Tokens(u64::from(req.max_tokens.unwrap_or(0)))
    }
    /// The window the server declares for `model`, if it declares one.
    fn probe_window(&self, model: &str)
        -> impl Future<Output = Result<Option<Tokens>, ProviderError>> + Send;
    /// The tokens of `text` for `model` by the server's own count (no special tokens); `None` when
    /// the server has no counting endpoint.
    fn count_text(
        &self,
        model: &str,
        text: &str,
    ) -> impl Future<Output = Result<Option<u64>, ProviderError>> + Send;
}

/// Sends `req` to `format`'s chat endpoint, streaming, and assembles the answer. Cancelling
/// `cancel` drops the call at once ([`ProviderError::Cancelled`]); the whole call is bounded by the
/// request deadline, and each wait for the next part of an event by the idle deadline (a `Stalled`
/// anomaly).
pub(crate) async fn chat<F: WireFormat>(
    format: &F,
    req: &ChatRequest,
    cancel: &CancellationToken,
) -> Result<ChatResponse, ProviderError> {
    let http = format.http();
    let url = http.url(F::CHAT_PATH);
    cancellable(url.clone(), cancel, http.deadlines().total, send_chat(format, req, &url)).await
}

async fn send_chat<F: WireFormat>(
    format: &F,
    req: &ChatRequest,
    url: &str,
) -> Result<ChatResponse, ProviderError> {
    match send_body(format, req, url).await {
        // Refused for a field it may do without: asked once more, without it (the refusal came
        // before any answer, so nothing is said twice).
        Err(error) if format.refused_optional(&error) => send_body(format, req, url).await,
        other => other,
    }
}

async fn send_body<F: WireFormat>(
    format: &F,
    req: &ChatRequest,
    url: &str,
) -> Result<ChatResponse, ProviderError> {
    let http = format.http();
    let body = format.body(req);
    let request = format.authorize(http.post(url)).header(ACCEPT, "text/event-stream").json(&body);
    let response = match send_streaming(request, url, F::classify_http).await? {
        Answer::Whole(text) => return F::from_json_body(&text),
        Answer::Stream(response) => response,
    };
    let idle = http.deadlines().idle;
    let Some(unstreamed) = F::unstreamed(body) else {
        return drive_within(response.bytes_stream(), F::Assembler::default(), Some(idle)).await;
    };
    let mut bytes = response.bytes_stream();
    let first = tokio::time::timeout(idle, bytes.next()).await.map_err(|_| stalled(idle))?;
    match first {
        // An accepted stream with no byte in it: llama-cpp-python answers an over-long prompt this
        // way (its error is raised after the headers went out). Ask once more without streaming,
        // which carries the server's real answer or its real error.
        None => {
            tracing::debug!(%url, "empty stream; asking again without streaming");
            let send =
                || send_whole(format.authorize(http.post(url)).json(&unstreamed), url, F::classify_http);
            // The empty stream's connection went back to the pool as the server closed it, and the
            // question may go out on it and die unsent: a send that fails to reach the server at
            // all is made once more, on a fresh connection (the dead one is gone from the pool).
            let text = match send().await {
                Err(ProviderError::Transport { message, .. }) => {
                    tracing::debug!(%url, %message, "the unstreamed question did not go out; sending it again");
                    send().await?
                }
                other => other?,
            };
            F::from_json_body(&text)
        }
        Some(first) => {
            let bytes = futures_util::stream::iter([first]).chain(bytes);
            drive_within(bytes, F::Assembler::default(), Some(idle)).await
        }
    }
}

/// A run of a message's text, or one of its images: what a user message says, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece<'a> {
    /// Consecutive text parts, joined.
    Text(String),
    /// An image: its media type and base64 data.
    Image { media_type: &'a str, data: &'a str },
}

/// An image as a `data:` URL, as OpenAI's formats take it.
pub(crate) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

/// A message's text runs and images in order (its other parts left out).
pub(crate) fn pieces(message: &Message) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut pending = String::new();
    for part in &message.parts {
        match part {
            Part::Text { text } => pending.push_str(text),
            Part::Image { media_type, data } => {
                if !pending.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut pending)));
                }
                pieces.push(Piece::Image { media_type, data });
            }
            _ => {}
        }
    }
    if !pending.is_empty() {
        pieces.push(Piece::Text(pending));
    }
    pieces
}

/// A declared window: a positive integer, given as a number (an integral float counts) or a string
/// of digits. Every format's probe reads its numbers with this.
pub(crate) fn window_number(value: Option<&Value>) -> Option<Tokens> {
    let n = match value? {
        Value::Number(n) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f > 0.0).map(|f| f as u64))
        }
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    (n > 0).then_some(Tokens(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::MAX_ERROR_CHARS;
    use crate::{AnthropicClient, OpenAiClient};
    use agentd_protocol::AnomalyKind;
    use agentd_protocol::{Message, Tokens};
    use serde_json::json;
    use std::time::Duration;

    fn request() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            system: "be brief".into(),
            messages: vec![Message::user("hi")],
            tools: vec![],
            tool_choice_none: false,
            max_tokens: None,
            thinking_budget: None,
            cache_key: None,
        }
    }

    fn client<F: WireFormat>(key: Option<&str>) -> F {
        F::connect(Http::new("http://127.0.0.1:9/v1/", key.map(str::to_string)))
    }

    /// The headers `authorize` puts on a request.
    fn headers<F: WireFormat>(key: Option<&str>) -> Vec<(String, String)> {
        crate::install_tls_provider();
        let request = client::<F>(key).authorize(reqwest::Client::new().post("http://127.0.0.1:9/v1/x"));
        let request = request.build().unwrap();
        let mut out: Vec<(String, String)> =
            request.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string())).collect();
        out.sort();
        out
    }

    /// What every format does with a refusal that is not in its own shape: the status decides.
    fn refusals_by_status<F: WireFormat>() {
        assert_eq!(
            F::classify_http(429, Some(RetryAfter::new(Duration::from_secs(3), "retry-after")), "slow down"),
            ProviderError::RateLimited {
                retry_after: Some(RetryAfter::new(Duration::from_secs(3), "retry-after")),
                message: "slow down".into()
            }
        );
        assert!(matches!(
            F::classify_http(529, None, ""),
            ProviderError::Overloaded { retry_after: None, .. }
        ));
        assert_eq!(
            F::classify_http(502, None, "<html>Bad Gateway</html>"),
            ProviderError::Server { status: 502, message: "<html>Bad Gateway</html>".into() }
        );
        assert_eq!(
            F::classify_http(503, None, ""),
            ProviderError::Server { status: 503, message: "HTTP 503 with an empty body".into() }
        );
        assert_eq!(
            F::classify_http(401, None, "no such key"),
            ProviderError::Rejected { status: 401, message: "no such key".into() }
        );
        assert!(matches!(
            F::classify_http(413, None, "request body too long: prompt exceeds token limit"),
            ProviderError::ContextOverflow { limit: None, .. }
        ));
        match F::classify_http(500, None, &"x".repeat(5000)) {
            ProviderError::Server { message, .. } => assert_eq!(message.chars().count(), MAX_ERROR_CHARS),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_format_classifies_a_bare_status_alike() {
        refusals_by_status::<OpenAiClient>();
        refusals_by_status::<AnthropicClient>();
    }

    #[test]
    fn each_format_reads_its_own_error_bodies() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 16384 tokens. However, you requested 20012 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            OpenAiClient::classify_http(400, None, openai),
            ProviderError::ContextOverflow { limit: Some(Tokens(16384)), .. }
        ));
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210034 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            AnthropicClient::classify_http(400, None, anthropic),
            ProviderError::ContextOverflow { limit: Some(Tokens(200000)), .. }
        ));
        // Anthropic's own reading matters: its output-limit refusal names a number before
        // "maximum", which the shape-agnostic reading would take for a window.
        let output = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for claude-opus-4"}}"#;
        assert!(matches!(
            AnthropicClient::classify_http(400, None, output),
            ProviderError::Rejected { status: 400, .. }
        ));
        assert!(matches!(
            OpenAiClient::classify_http(400, None, output),
            ProviderError::ContextOverflow { .. }
        ));
        let overloaded = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            AnthropicClient::classify_http(529, None, overloaded),
            ProviderError::Overloaded { retry_after: None, message: "Overloaded".into() }
        );
    }

    #[test]
    fn each_format_reads_its_own_stream_errors() {
        assert!(matches!(
            crate::openai::refusals::classify_stream_error(
                &json!({"message": "Rate limit exceeded", "code": 429})
            ),
            ProviderError::RateLimited { retry_after: None, .. }
        ));
        assert!(matches!(
            crate::anthropic::refusals::classify_anthropic_error(
                &json!({"type": "rate_limit_error", "message": "slow down"})
            ),
            ProviderError::RateLimited { retry_after: None, .. }
        ));
        assert!(matches!(
            crate::anthropic::refusals::classify_anthropic_error(
                &json!({"type": "overloaded_error", "message": "Overloaded"})
            ),
            ProviderError::Overloaded { .. }
        ));
        let overflow =
            json!({"code": 400, "message": "the request exceeds the available context size (2048 tokens)"});
        assert!(matches!(
            crate::openai::refusals::classify_stream_error(&overflow),
            ProviderError::ContextOverflow { limit: Some(Tokens(2048)), .. }
        ));
        for classify in [
            crate::openai::refusals::classify_stream_error,
            crate::anthropic::refusals::classify_anthropic_error,
        ] {
            assert!(matches!(classify(&json!("boom")), ProviderError::Server { status: 500, .. }));
        }
    }

    #[test]
    fn each_format_reads_a_whole_json_answer() {
        let openai = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}]}"#;
        assert_eq!(OpenAiClient::from_json_body(openai).unwrap().message, Message::assistant_text("done"));
        let anthropic =
            r#"{"type":"message","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn"}"#;
        let answer = AnthropicClient::from_json_body(anthropic).unwrap();
        assert_eq!(
            (answer.message, answer.finish_reason.as_str()),
            (Message::assistant_text("done"), "stop")
        );
        for parse in [OpenAiClient::from_json_body, AnthropicClient::from_json_body] {
            assert!(matches!(
                parse("<html>"),
                Err(ProviderError::StreamAnomaly { kind: AnomalyKind::Parse, .. })
            ));
        }
    }

    #[test]
    fn output_reserve_is_what_the_body_lets_the_answer_take() {
        let mut req = request();
        assert_eq!(OpenAiClient::output_reserve(&req), Tokens(0), "no max_tokens sent, none claimed");
        assert_eq!(AnthropicClient::output_reserve(&req), Tokens(8192), "Anthropic always sends one");
        req.max_tokens = Some(256);
        assert_eq!(OpenAiClient::output_reserve(&req), Tokens(256));
        assert_eq!(AnthropicClient::output_reserve(&req), Tokens(256));
        req.thinking_budget = Some(1024);
        assert_eq!(OpenAiClient::output_reserve(&req), Tokens(256), "OpenAI's wire has no thinking budget");
        assert_eq!(AnthropicClient::output_reserve(&req), Tokens(5120), "above the budget");
        for (reserve, body) in [
            (
                OpenAiClient::output_reserve(&req),
                serde_json::to_value(WireFormat::body(&client::<OpenAiClient>(None), &req)).unwrap(),
            ),
            (
                AnthropicClient::output_reserve(&req),
                serde_json::to_value(WireFormat::body(&client::<AnthropicClient>(None), &req)).unwrap(),
            ),
        ] {
            assert_eq!(body["max_tokens"], json!(reserve.0), "the reserve is the body's max_tokens");
        }
    }

    #[test]
    fn bodies_and_the_unstreamed_retry() {
        let req = request();
        let openai = client::<OpenAiClient>(None);
        assert_eq!(
            WireFormat::body(&client::<OpenAiClient>(None), &req),
            openai.body(&req),
            "the seam's body is the client's"
        );
        let anthropic = client::<AnthropicClient>(None);
        assert_eq!(WireFormat::body(&client::<AnthropicClient>(None), &req), anthropic.body(&req));
        let unstreamed = serde_json::to_value(OpenAiClient::unstreamed(WireFormat::body(
            &client::<OpenAiClient>(None),
            &req,
        )))
        .unwrap();
        assert_eq!(unstreamed["stream"], json!(false));
        assert!(unstreamed.get("stream_options").is_none());
        assert_eq!(
            unstreamed["messages"],
            serde_json::to_value(WireFormat::body(&client::<OpenAiClient>(None), &req)).unwrap()["messages"]
        );
        assert!(
            AnthropicClient::unstreamed(WireFormat::body(&client::<AnthropicClient>(None), &req)).is_none(),
            "an empty stream is final"
        );
    }

    #[test]
    fn endpoints_and_headers() {
        assert_eq!(OpenAiClient::CHAT_PATH, "/chat/completions");
        assert_eq!(AnthropicClient::CHAT_PATH, "/messages");
        assert_eq!(
            client::<OpenAiClient>(None).http().url(OpenAiClient::CHAT_PATH),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        assert_eq!(headers::<OpenAiClient>(Some("sk")), [("authorization".into(), "Bearer sk".into())]);
        assert_eq!(headers::<OpenAiClient>(None), []);
        assert_eq!(headers::<OpenAiClient>(Some("")), [], "an empty key is no key");
        assert_eq!(
            headers::<AnthropicClient>(Some("sk-ant")),
            [("anthropic-version".into(), "2023-06-01".into()), ("x-api-key".into(), "sk-ant".into())]
        );
        assert_eq!(
            headers::<AnthropicClient>(None),
            [("anthropic-version".to_string(), "2023-06-01".to_string())]
        );
    }

    #[test]
    fn window_numbers_as_numbers_or_digits() {
        assert_eq!(window_number(Some(&json!(32768))), Some(Tokens(32768)));
        assert_eq!(window_number(Some(&json!(" 4096 "))), Some(Tokens(4096)));
        assert_eq!(window_number(Some(&json!(8192.0))), Some(Tokens(8192)), "an integral float");
        assert_eq!(window_number(Some(&json!(8192.5))), None);
        assert_eq!(window_number(Some(&json!(0))), None);
        assert_eq!(window_number(Some(&json!("0"))), None);
        assert_eq!(window_number(Some(&json!(-1))), None);
        assert_eq!(window_number(Some(&json!("128k"))), None);
        assert_eq!(window_number(Some(&json!(null))), None);
        assert_eq!(window_number(Some(&json!({"n": 1}))), None);
        assert_eq!(window_number(None), None);
    }
}
