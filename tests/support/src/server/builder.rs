//! [`ServerBuilder`]: what a test can set before the server starts (model, declared and enforced
//! windows, the optional endpoints, usage reports, the script and the responder), and `start`, which
//! binds a port and spawns the accept loop.

use std::sync::Arc;

use serde_json::Value;
use tokio::net::TcpListener;

use super::routing::accept_loop;
use super::ScriptedServer;
use crate::script::{Config, Responder, State, Step};

/// Configures a [`ScriptedServer`].
pub struct ServerBuilder {
    model: String,
    max_model_len: Option<u64>,
    window: Option<u64>,
    silent_truncation_at: Option<u64>,
    tokenize_endpoint: bool,
    ollama_num_ctx: Option<u64>,
    props_n_ctx: Option<u64>,
    report_usage: bool,
    script: Vec<Step>,
    responder: Option<Responder>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            model: crate::DEFAULT_MODEL.to_string(),
            max_model_len: None,
            window: None,
            silent_truncation_at: None,
            tokenize_endpoint: false,
            ollama_num_ctx: None,
            props_n_ctx: None,
            report_usage: false,
            script: Vec::new(),
            responder: None,
        }
    }
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("model", &self.model)
            .field("max_model_len", &self.max_model_len)
            .field("script", &self.script)
            .field("responder", &self.responder.is_some())
            .finish()
    }
}

impl ServerBuilder {
    /// Model id reported by `/v1/models` and echoed in completions
    /// (default `"gpt-4o"`).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// `max_model_len` reported by `/v1/models` (omitted when `None`).
    /// Accepts `Some(n)`, `None` or a bare `n`.
    pub fn max_model_len(mut self, len: impl Into<Option<u64>>) -> Self {
        self.max_model_len = len.into();
        self
    }

    /// Enforces a context window with the server's own count (see `count`): a request over it is
    /// refused with OpenAI's `context_length_exceeded`, stating the limit, and consumes no step.
    /// Independent of what `/v1/models` declares.
    pub fn window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// Accepts over-long prompts silently, processing only `tokens` of them, and reports that in
    /// `usage.prompt_tokens` (Ollama's behaviour with its default `num_ctx`).
    pub fn silent_truncation_at(mut self, tokens: u64) -> Self {
        self.silent_truncation_at = Some(tokens);
        self
    }

    /// Serves vLLM's `POST /tokenize` (default off: a 404, as on a server without one). It answers
    /// `{"count": n, "tokens": [0, 1, …], "max_model_len": …}` with `n` the o200k tokens of `prompt`
    /// (or llama.cpp's `content`), as [`count_text_tokens`](crate::count_text_tokens) counts them.
    pub fn tokenize_endpoint(mut self, on: bool) -> Self {
        self.tokenize_endpoint = on;
        self
    }

    /// Serves Ollama's `POST /api/show` (default off: a 404), answering
    /// `{"parameters": "num_ctx {n}", "model_info": {"llama.context_length": 131072}}`: the model
    /// runs with `num_ctx` `n`, below what the model itself could take.
    pub fn ollama_num_ctx(mut self, n: u64) -> Self {
        self.ollama_num_ctx = Some(n);
        self
    }

    /// Serves llama.cpp's `GET /props` (default off: a 404), answering
    /// `{"default_generation_settings": {"n_ctx": n}}`.
    pub fn props_n_ctx(mut self, n: u64) -> Self {
        self.props_n_ctx = Some(n);
        self
    }

    /// Reports usage on every successful chat reply, as a real provider does (default off: only a
    /// scripted [`sse_with_usage`](crate::sse_with_usage) reports any). The prompt figure is the
    /// server's own count of the request ([`count_request`](crate::count_request), the count the
    /// window is enforced with), overriding a scripted one; the completion figure is the scripted one,
    /// else the o200k tokens of the reply's text, reasoning and tool calls. The prompt-cache figure
    /// ([`ScriptedServer::cached`]) goes in OpenAI's `usage.prompt_tokens_details.cached_tokens`, and
    /// on `/v1/messages` in `cache_read_input_tokens`, with `input_tokens` the uncached rest.
    pub fn report_usage(mut self, on: bool) -> Self {
        self.report_usage = on;
        self
    }

    /// Appends steps to the initial script.
    pub fn script(mut self, steps: impl IntoIterator<Item = Step>) -> Self {
        self.script.extend(steps);
        self
    }

    /// Computes the answer when the script queue is empty.
    pub fn responder<F>(mut self, f: F) -> Self
    where
        F: Fn(&Value) -> Step + Send + Sync + 'static,
    {
        self.responder = Some(Arc::new(f));
        self
    }

    /// Binds `127.0.0.1:0` and spawns the accept loop on the current tokio
    /// runtime.
    pub async fn start(self) -> ScriptedServer {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("scripted server: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("scripted server: local_addr");
        let config = Config {
            model: self.model,
            max_model_len: self.max_model_len,
            responder: self.responder,
            window: self.window,
            silent_truncation_at: self.silent_truncation_at,
            tokenize_endpoint: self.tokenize_endpoint,
            ollama_num_ctx: self.ollama_num_ctx,
            props_n_ctx: self.props_n_ctx,
            report_usage: self.report_usage,
        };
        let state = Arc::new(State::new(config, self.script));
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        ScriptedServer { state, addr, task }
    }
}
