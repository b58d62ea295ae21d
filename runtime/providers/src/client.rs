//! The provider a role talks to, whatever its wire format: [`Client`], the one type the rest of the
//! runtime holds, calling its format's [`WireFormat`] through a boxed, object-safe view of it.

use super::api_check::{Listed, NotTheApi};
use super::wire::{self, WireFormat};
use agentd_protocol::{ChatRequest, ChatResponse, ProviderError};
use agentd_protocol::{PromptCache, Tokens};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// A client of one provider's server, in whichever wire format it speaks. Made by
/// [`ProviderKind::connect`](super::ProviderKind::connect), or from a format's client
/// (`Client::from(OpenAiClient::new(…))`).
pub struct Client {
    format: Box<dyn Dispatch>,
    /// How the server's prompt cache bills a prefix: the format's own, or as declared.
    cache: Option<PromptCache>,
    /// Whether its cache may be learned from its usage reports when none is declared.
    learns_cache: bool,
    /// The chat requests that may be in flight at once (`[providers.NAME] max_concurrent`): one
    /// permit per request, taken before it is sent (and before its deadlines start), given back when
    /// its answer is in. A request beyond the bound waits for a permit; it never fails for want of one.
    permits: Option<Arc<Semaphore>>,
}

impl Client {
    pub(crate) fn new<F: WireFormat>(format: F) -> Client {
        Client { format: Box::new(format), cache: F::PROMPT_CACHE, learns_cache: true, permits: None }
    }

    /// The same client with at most `n` chat requests in flight at once (at least 1); the others wait
    /// their turn, first come first served.
    pub fn with_max_concurrent(mut self, n: usize) -> Client {
        self.permits = Some(Arc::new(Semaphore::new(n.max(1))));
        self
    }

    /// Sends through the bound: waits for a permit (cancellable, by `cancel` or by dropping the future),
    /// then holds it for the one exchange.
    async fn bounded_chat(
        &self,
        req: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let _permit = match &self.permits {
            None => None,
            Some(permits) => tokio::select! {
                permit = permits.clone().acquire_owned() => permit.ok(),
                _ = cancel.cancelled() => {
                    return Err(ProviderError::Cancelled { url: self.base_url().to_string() })
                }
            },
        };
        self.format.chat(req, cancel).await
    }

    /// The same client with the prompt cache the provider's configuration declares
    /// (`[providers.NAME] cache`), in place of its format's default.
    pub fn with_cache(mut self, cache: Option<PromptCache>) -> Client {
        if cache.is_some() {
            self.cache = cache;
        }
        self
    }

    /// The same client with no prompt cache at all (`cache = false`): none priced, none learned, the
    /// format's own default dropped too.
    pub fn without_cache(mut self) -> Client {
        self.cache = None;
        self.learns_cache = false;
        self
    }

    /// How the server's prompt cache bills a prefix it has seen: declared, or its format's own.
    pub fn prompt_cache(&self) -> Option<PromptCache> {
        self.cache
    }

    /// Whether the server's cache may be learned from its usage reports when none is declared.
    pub fn learns_prompt_cache(&self) -> bool {
        self.learns_cache
    }

    /// The server's base URL: with the model name, the key windows are remembered under.
    pub fn base_url(&self) -> &str {
        self.format.base_url()
    }

    /// Sends the request, streaming, and assembles the answer. Cancelling `cancel` aborts the call
    /// at once with [`ProviderError::Cancelled`].
    pub async fn chat(
        &self,
        req: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        self.bounded_chat(req, cancel).await
    }

    /// The output room a request claims inside the window: what the wire says the answer may take.
    /// The fitter lowers the trigger so that this still fits above it.
    pub fn output_reserve(&self, req: &ChatRequest) -> Tokens {
        self.format.output_reserve(req)
    }

    /// The window the server declares for `model`, if it declares one.
    pub async fn probe_window(&self, model: &str) -> Result<Option<Tokens>, ProviderError> {
        self.format.probe_window(model).await
    }

    /// The tokens of `text` for `model`, counted by the server's own tokenizer (no special tokens),
    /// when the server offers a counting endpoint; `None` when it has none.
    pub async fn count_text(&self, model: &str, text: &str) -> Result<Option<u64>, ProviderError> {
        self.format.count_text(model, text).await
    }

    /// Whether the server is the API its kind speaks: `GET {base}/models` lists models
    /// ([`crate::api_check`]); else why not, naming what answered.
    pub async fn list_models(&self) -> Result<Listed, NotTheApi> {
        self.format.list_models().await
    }
}

/// [`WireFormat`] as a trait object: its calls with their futures boxed.
trait Dispatch: Send + Sync {
    fn base_url(&self) -> &str;
    fn chat<'a>(
        &'a self,
        req: &'a ChatRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>>;
    fn output_reserve(&self, req: &ChatRequest) -> Tokens;
    fn probe_window<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Result<Option<Tokens>, ProviderError>>;
    fn count_text<'a>(
        &'a self,
        model: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, ProviderError>>;
    fn list_models(&self) -> BoxFuture<'_, Result<Listed, NotTheApi>>;
}

impl<F: WireFormat> Dispatch for F {
    fn base_url(&self) -> &str {
        self.http().base_url()
    }

    fn chat<'a>(
        &'a self,
        req: &'a ChatRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(wire::chat(self, req, cancel))
    }

    fn output_reserve(&self, req: &ChatRequest) -> Tokens {
        F::output_reserve(req)
    }

    fn probe_window<'a>(&'a self, model: &'a str) -> BoxFuture<'a, Result<Option<Tokens>, ProviderError>> {
        Box::pin(WireFormat::probe_window(self, model))
    }

    fn count_text<'a>(
        &'a self,
        model: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, ProviderError>> {
        Box::pin(WireFormat::count_text(self, model, text))
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Listed, NotTheApi>> {
        Box::pin(crate::api_check::list_models(self.http(), |r| self.authorize(r)))
    }
}

/// The engine's view of a provider: [`Client`]'s calls, with cancellation by dropping the future.
impl agentd_protocol::Model for Client {
    fn server(&self) -> &str {
        self.base_url()
    }

    fn chat<'a>(&'a self, req: &'a ChatRequest) -> agentd_protocol::model::ModelCall<'a, ChatResponse> {
        Box::pin(async move { self.bounded_chat(req, &CancellationToken::new()).await })
    }

    fn output_reserve(&self, req: &ChatRequest) -> Tokens {
        Client::output_reserve(self, req)
    }

    fn probe_window<'a>(&'a self, model: &'a str) -> agentd_protocol::model::ModelCall<'a, Option<Tokens>> {
        Box::pin(Client::probe_window(self, model))
    }

    fn count_text<'a>(
        &'a self,
        model: &'a str,
        text: &'a str,
    ) -> agentd_protocol::model::ModelCall<'a, Option<u64>> {
        Box::pin(Client::count_text(self, model, text))
    }

    fn prompt_cache(&self) -> Option<PromptCache> {
        Client::prompt_cache(self)
    }

    fn learns_prompt_cache(&self) -> bool {
        Client::learns_prompt_cache(self)
    }
}
