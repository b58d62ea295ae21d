//! The provider a role talks to, whatever its wire protocol: one type the rest of the runtime holds,
//! dispatching to the protocol's client.

use super::{ChatRequest, ChatResponse, OpenAiClient, ProviderError};
use agentd_policies::Tokens;
use tokio_util::sync::CancellationToken;

pub enum Client {
    /// OpenAI chat completions: OpenAI, vLLM, llama.cpp, Ollama, LM Studio …
    OpenAi(OpenAiClient),
}

impl Client {
    /// The server's base URL: with the model name, the key windows are remembered under.
    pub fn base_url(&self) -> &str {
        match self {
            Client::OpenAi(c) => c.base_url(),
        }
    }

    pub async fn chat(
        &self,
        req: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        match self {
            Client::OpenAi(c) => c.chat(req, cancel).await,
        }
    }

    /// The window the server declares for `model`, if it declares one.
    pub async fn probe_window(&self, model: &str) -> Result<Option<Tokens>, ProviderError> {
        match self {
            Client::OpenAi(c) => c.probe_window(model).await,
        }
    }
}
