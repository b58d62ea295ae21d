//! OpenAI's Responses API (`kind = "openai-responses"`): the reasoning models' endpoint, also served
//! by vLLM and others. The streamed call to `{base}/responses` with nothing stored at the server,
//! the reasoning kept encrypted and sent back within a chain of tool calls, the request's cache key
//! as `prompt_cache_key`; OpenAI's error bodies (read as chat completions' are). The window probe
//! and the count are the OpenAI-compatible server's (`/models`, `/tokenize`). The body is
//! [`body`]'s, the event assembler [`stream`]'s.
//!
//! When the reasoning is cleared is not decided here: thinking parts are sent back as long as the
//! history holds them, and the engine's idle cleanup (under its persisted latch) is what removes
//! them, as it does Anthropic's thinking blocks.

pub(crate) mod body;
pub(crate) mod stream;

use crate::http::Http;
use crate::optional::Optional;
use crate::surface::client_surface;
use crate::wire::WireFormat;
use crate::OpenAiClient;
use agentd_protocol::Tokens;
use agentd_protocol::{ChatRequest, ChatResponse, ProviderError};
use body::ResponsesBody;
use reqwest::RequestBuilder;
use std::future::Future;

/// A client for one server of OpenAI's Responses API.
#[derive(Debug, Clone)]
pub struct ResponsesClient {
    http: Http,
    /// The same server as an OpenAI-compatible one: its window probe and its counting endpoint.
    compatible: OpenAiClient,
    /// `include: ["reasoning.encrypted_content"]`, until the model refuses it (one that does not
    /// reason: "Encrypted content is not supported with this model").
    include: Optional,
    /// `prompt_cache_key`, until the server refuses it.
    cache_key: Optional,
}

client_surface! {
    ResponsesClient,
    example: "https://api.openai.com/v1",
    /// The key is sent as a bearer token.
}

impl ResponsesClient {
    /// What [`chat`](Self::chat) POSTs to `{base}/responses`; its serialisation is the wire.
    pub fn body<'a>(&self, req: &'a ChatRequest) -> ResponsesBody<'a> {
        ResponsesBody::new(req, self.include.sent(), self.cache_key.sent())
    }
}

/// The Responses API: a bearer key, `POST {base}/responses` streamed, asked once more unstreamed
/// when the stream comes back without a byte; no output room unless the request names
/// `max_tokens` (sent as `max_output_tokens`); the OpenAI-compatible probes and `/tokenize`.
impl WireFormat for ResponsesClient {
    type Body<'a> = ResponsesBody<'a>;
    type Assembler = stream::Assembler;
    const CHAT_PATH: &'static str = "/responses";

    fn connect(http: Http) -> ResponsesClient {
        ResponsesClient {
            compatible: <OpenAiClient as WireFormat>::connect(http.clone()),
            http,
            include: Optional::new("include", &["encrypted content", body::ENCRYPTED_REASONING]),
            cache_key: Optional::new("prompt_cache_key", &[]),
        }
    }

    fn http(&self) -> &Http {
        &self.http
    }

    fn authorize(&self, request: RequestBuilder) -> RequestBuilder {
        self.compatible.authorize(request)
    }

    fn body<'a>(&self, req: &'a ChatRequest) -> ResponsesBody<'a> {
        ResponsesClient::body(self, req)
    }

    fn unstreamed<'a>(body: Self::Body<'a>) -> Option<Self::Body<'a>> {
        Some(body.unstreamed())
    }

    fn refused_optional(&self, error: &ProviderError) -> bool {
        self.include.refused_by(error) || self.cache_key.refused_by(error)
    }

    fn from_json_body(body: &str) -> Result<ChatResponse, ProviderError> {
        stream::from_json_body(body)
    }

    fn probe_window(
        &self,
        model: &str,
    ) -> impl Future<Output = Result<Option<Tokens>, ProviderError>> + Send {
        self.compatible.probe_window(model)
    }

    fn count_text(
        &self,
        model: &str,
        text: &str,
    ) -> impl Future<Output = Result<Option<u64>, ProviderError>> + Send {
        self.compatible.tokenize(model, text)
    }
}
