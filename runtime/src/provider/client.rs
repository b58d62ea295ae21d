//! The provider a role talks to, whatever its wire protocol: one type the rest of the runtime holds,
//! dispatching to the protocol's client.

use super::{AnthropicClient, ChatRequest, ChatResponse, OpenAiClient, ProviderError};
use agentd_policies::Tokens;
use tokio_util::sync::CancellationToken;

pub enum Client {
    /// OpenAI chat completions: OpenAI, vLLM, llama.cpp, Ollama, LM Studio …
    OpenAi(OpenAiClient),
    /// Anthropic Messages (`x-api-key`, `anthropic-version: 2023-06-01`).
    Anthropic(AnthropicClient),
}

impl Client {
    /// The server's base URL: with the model name, the key windows are remembered under.
    pub fn base_url(&self) -> &str {
        match self {
            Client::OpenAi(c) => c.base_url(),
            Client::Anthropic(c) => c.base_url(),
        }
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        match self {
            Client::OpenAi(c) => c.chat(req, cancel).await,
            Client::Anthropic(c) => c.chat(req, cancel).await,
        }
    }

    /// The output room a request claims inside the window: what the wire says the answer may take.
    /// The fitter lowers the trigger so that this still fits above it.
    pub fn output_reserve(&self, req: &ChatRequest) -> Tokens {
        match self {
            Client::OpenAi(_) => Tokens(u64::from(req.max_tokens.unwrap_or(0))),
            Client::Anthropic(_) => Tokens(u64::from(AnthropicClient::max_tokens(req))),
        }
    }

    /// The window the server declares for `model`, if it declares one.
    pub async fn probe_window(&self, model: &str) -> Result<Option<Tokens>, ProviderError> {
        match self {
            Client::OpenAi(c) => c.probe_window(model).await,
            Client::Anthropic(c) => c.probe_window(model).await,
        }
    }

    /// The tokens of `text` for `model`, counted by the server's own tokenizer (no special tokens),
    /// when the server offers a counting endpoint; `None` when it has none.
    pub async fn count_text(&self, model: &str, text: &str) -> Result<Option<u64>, ProviderError> {
        match self {
            // vLLM and llama.cpp `POST /tokenize`.
            Client::OpenAi(c) => c.tokenize(model, text).await,
            // Anthropic `POST /v1/messages/count_tokens`: a user message of the text, less its
            // framing.
            Client::Anthropic(c) => c.count_text(model, text).await,
        }
    }
}
