//! The scripted model server: the handle a test holds ([`ScriptedServer`]) and how it is configured
//! ([`ServerBuilder`]).
//!
//! A request goes through these modules in order: `routing` accepts the connection, reads the HTTP
//! request, records it and picks the answer by method and path; `chat` answers a chat request of
//! either wire protocol from the script (refusing it first when it is over the window); `faults`
//! renders a scripted failure in the protocol's own shapes; `send` holds the ways an answer goes
//! out on the connection (SSE streams, half a body, silence). What the answers say is rendered by
//! the crate's `openai` and `anthropic` modules; what is scripted and recorded lives in `script`.

mod builder;
mod chat;
mod faults;
mod routing;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::script::{RecordedRequest, State, Step};

pub use builder::ServerBuilder;

/// A scripted OpenAI-compatible model server on `127.0.0.1:<random port>`.
///
/// Dropping the handle stops the server and aborts every open connection.
pub struct ScriptedServer {
    state: Arc<State>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .field("model", &self.state.config.model)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl ScriptedServer {
    /// Starts a server with the default configuration and this script.
    /// Must be called from within a tokio runtime.
    pub async fn start(script: Vec<Step>) -> ScriptedServer {
        Self::builder().script(script).start().await
    }

    /// A builder for model name, `max_model_len`, script and responder.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// `http://127.0.0.1:PORT/v1`: the value for an OpenAI `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The model id served (and echoed in completions).
    pub fn model(&self) -> &str {
        &self.state.config.model
    }

    /// Appends steps to the script.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.state.push(steps);
    }

    /// The server's own token count of every chat request, in order (refused ones included).
    pub fn counted(&self) -> Vec<u64> {
        self.state.counted()
    }

    /// The prompt tokens the server's prompt cache served for every chat request, parallel to
    /// [`counted`](Self::counted) (0 for a refused one): the longest prefix shared with an earlier
    /// accepted request — tools, system, then the leading JSON-equal messages — or 0 when that is
    /// under [`MIN_CACHED_PREFIX`](crate::MIN_CACHED_PREFIX) tokens. Recorded whether or not
    /// [`report_usage`](ServerBuilder::report_usage) puts it on the wire.
    pub fn cached(&self) -> Vec<u64> {
        self.state.cached()
    }

    /// From now on the server's prompt cache serves nothing: every usage report says 0 cached
    /// tokens, as a server whose cache was turned off (or lost) does.
    pub fn stop_caching(&self) {
        self.state.stop_caching();
    }

    /// How many chat requests were refused as over the window.
    pub fn refused(&self) -> usize {
        self.state.refused()
    }

    /// Every request received so far (including malformed-JSON ones, but not
    /// requests whose HTTP framing could not be parsed).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests()
    }

    /// Bodies of the chat requests (`POST /v1/chat/completions` and `POST /v1/messages`), in order.
    pub fn chat_requests(&self) -> Vec<Value> {
        self.state.requests().into_iter().filter(RecordedRequest::is_chat).map(|r| r.body).collect()
    }

    /// Scripted steps not yet consumed.
    pub fn remaining(&self) -> usize {
        self.state.remaining()
    }

    /// Connections currently open (useful to assert that a cancelled client
    /// really hung up on a [`Fault::Hang`]).
    pub fn active_connections(&self) -> usize {
        self.state.active_connections()
    }

    /// Waits until at least `n` chat requests have been received; returns
    /// `false` on timeout.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.chat_request_count() >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until no connection is open; returns `false` on timeout.
    pub async fn wait_for_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.state.active_connections() == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        // Dropping the accept loop drops its JoinSet, aborting connections.
        self.task.abort();
    }
}
