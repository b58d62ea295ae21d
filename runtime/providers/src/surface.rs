//! What every wire format's client offers its callers, written once: [`client_surface!`] gives a
//! format's client type its constructor, its deadlines, its base URL, its chat call and its
//! conversion into [`Client`](crate::Client). These are the same decision for every format — a
//! client is its [`WireFormat`](crate::wire::WireFormat) over an [`Http`](crate::http::Http), and
//! chatting is [`wire::chat`](crate::wire::chat) — so they live here rather than in each format's
//! module. What does differ (how the key is sent, the body, the probes, the counting endpoint)
//! stays with the format.

/// The public surface shared by every format's client type. `$client` must be a struct with an
/// `http: Http` field that implements `WireFormat`; `example` is its API root as the docs show it,
/// and any doc lines after it say what `new` does with the key, where the format says something.
///
/// ```ignore
/// client_surface! {
///     AnthropicClient,
///     example: "https://api.anthropic.com/v1",
///     /// The key is sent as `x-api-key`.
/// }
/// ```
macro_rules! client_surface {
    ($client:ident, example: $example:literal, $(#[$key_doc:meta])*) => {
        impl $client {
            #[doc = concat!(
                " `base_url` is the API root including its version, e.g. `",
                $example,
                "`."
            )]
            $(#[$key_doc])*
            /// Connecting times out after 10 s; a stream may run as long as it keeps sending (a
            /// read waits at most 300 s).
            pub fn new(base_url: &str, api_key: Option<String>) -> $client {
                <$client as $crate::wire::WireFormat>::connect($crate::http::Http::new(base_url, api_key))
            }

            /// The same client with these request deadlines.
            pub fn with_deadlines(self, deadlines: $crate::http::Deadlines) -> $client {
                $client { http: self.http.with_deadlines(deadlines), ..self }
            }

            #[doc = concat!(" The server's base URL, as configured (`", $example, "`).")]
            pub fn base_url(&self) -> &str {
                self.http.base_url()
            }

            /// Sends the request, streaming, and assembles the answer. Cancelling `cancel` aborts
            /// the call at once with [`ProviderError::Cancelled`](agentd_protocol::ProviderError::Cancelled).
            pub async fn chat(
                &self,
                req: &agentd_protocol::ChatRequest,
                cancel: &tokio_util::sync::CancellationToken,
            ) -> Result<agentd_protocol::ChatResponse, agentd_protocol::ProviderError> {
                $crate::wire::chat(self, req, cancel).await
            }
        }

        impl From<$client> for $crate::Client {
            fn from(client: $client) -> $crate::Client {
                $crate::Client::new(client)
            }
        }
    };
}

pub(crate) use client_surface;
