//! Whether the server at a provider's `base_url` speaks the API its kind says: `GET {base}/models`
//! answers, with every kind, a JSON object listing models (`{"data": [{"id": …}, …]}`; Ollama's
//! native `{"models": [{"name": …}]}` is read too). A 404, an HTML page, a JSON answer that lists
//! nothing, a refused connection or a TLS failure each mean the `base_url` is wrong or the server
//! is not running — `agentd doctor` and `serve`'s start say so before a task finds out.
//!
//! The verdict on an answer is [`judge`], pure; [`list_models`] makes the request.

use crate::http::{exchange, Http};
use agentd_protocol::ProviderError;
use reqwest::RequestBuilder;
use serde_json::Value;

/// How much of an answer that is not the API is quoted back.
const QUOTED: usize = 120;

/// Why the server at `base_url` is not the API its kind speaks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotTheApi {
    /// The request got no answer, or an answer that refuses it (a bad key: 401, 403).
    #[error("{0}")]
    Provider(ProviderError),
    /// `GET {url}` answered with an error status (404: nothing is served at that path).
    #[error("GET {url} answered {status}{}: not the API this kind speaks", quote(body))]
    Status {
        /// The URL asked.
        url: String,
        /// The status it answered.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// `GET {url}` answered with something that is not JSON (an HTML page: a web server, a proxy's
    /// login page, the server's web UI).
    #[error("GET {url} answered {}, not JSON{}: not the API this kind speaks", what_page(body), quote(body))]
    NotJson {
        /// The URL asked.
        url: String,
        /// The start of its body.
        body: String,
    },
    /// `GET {url}` answered JSON, but no list of models.
    #[error("GET {url} answered JSON with no list of models (`data` or `models`){}", quote(body))]
    NoList {
        /// The URL asked.
        url: String,
        /// The start of its body.
        body: String,
    },
}

/// The models a server lists: their ids, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The URL asked.
    pub url: String,
    /// The models' ids (`id`, else `name`).
    pub models: Vec<String>,
}

/// `GET {base}/models`, authorized as the kind sends its key, judged by [`judge`].
pub(crate) async fn list_models(
    http: &Http,
    authorize: impl FnOnce(RequestBuilder) -> RequestBuilder,
) -> Result<Listed, NotTheApi> {
    let url = http.url("/models");
    let reply = exchange(authorize(http.get(&url)), &url).await.map_err(NotTheApi::Provider)?;
    judge(&url, reply.status, &reply.body).map_err(|e| match e {
        // A refusal the kind's own error body explains (a bad key) is the provider's words.
        NotTheApi::Status { status: 401 | 403, body, .. } => {
            NotTheApi::Provider(crate::error::classify_http(reply.status, reply.retry_after, &body))
        }
        e => e,
    })
}

/// The verdict on `GET url`'s answer: the models it lists, or why it is not the API.
pub fn judge(url: &str, status: u16, body: &str) -> Result<Listed, NotTheApi> {
    let start = agentd_protocol::text::truncate_chars(body.trim(), QUOTED);
    if !(200..=299).contains(&status) {
        return Err(NotTheApi::Status { url: url.to_string(), status, body: start });
    }
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return Err(NotTheApi::NotJson { url: url.to_string(), body: start });
    };
    let entries = value.get("data").or_else(|| value.get("models")).and_then(Value::as_array);
    let Some(entries) = entries else { return Err(NotTheApi::NoList { url: url.to_string(), body: start }) };
    let models = entries
        .iter()
        .filter_map(|e| e.get("id").or_else(|| e.get("name")).and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    Ok(Listed { url: url.to_string(), models })
}

/// ` ("…")`: the start of a body, escaped, when there is one.
fn quote(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(" ({body:?})")
    }
}

/// What kind of page a body that is not JSON looks like.
fn what_page(body: &str) -> &'static str {
    let head = body.trim_start().get(..15).unwrap_or(body).to_ascii_lowercase();
    if head.starts_with("<!doctype html") || head.starts_with("<html") {
        "an HTML page"
    } else {
        "a page"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:1/api/models";

    #[test]
    fn a_list_of_models_is_the_api_and_anything_else_is_named() {
        let openai = r#"{"object":"list","data":[{"id":"gpt-4o"},{"id":"o3"}]}"#;
        assert_eq!(judge(URL, 200, openai).unwrap().models, ["gpt-4o", "o3"]);
        let ollama = r#"{"models":[{"name":"llama3:8b"}]}"#;
        assert_eq!(judge(URL, 200, ollama).unwrap().models, ["llama3:8b"]);
        let e = judge(URL, 404, "404 page not found").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("GET {URL} answered 404 (\"404 page not found\"): not the API this kind speaks")
        );
        let e = judge(URL, 200, "<!DOCTYPE html><html><body>Welcome</body></html>").unwrap_err();
        assert!(e.to_string().starts_with(&format!("GET {URL} answered an HTML page, not JSON")), "{e}");
        assert!(matches!(judge(URL, 200, r#"{"status":"ok"}"#), Err(NotTheApi::NoList { .. })));
        assert!(matches!(judge(URL, 200, "[]"), Err(NotTheApi::NoList { .. })));
        let long = "x".repeat(10_000);
        assert!(judge(URL, 500, &long).unwrap_err().to_string().len() < 400, "quoted, not copied");
    }
}
