//! The fitter: the one owner of "how big is this request and does it fit".
//!
//! Every request of every agent passes through this actor. It knows the window of each server/model
//! (probed on first use, learned from refusals, persisted), counts the fully materialised request with
//! the model's tokenizer (or a marked estimate), and keeps the last measurement of each task and role
//! as the gauge that `context` and `status` show — one measurement, one owner, so the events and the
//! gauge cannot disagree.

use crate::counter::{RequestCount, TokenCounter};
use crate::provider::{ChatRequest, OpenAiClient};
use actix::prelude::*;
use agentd_evidence::{Store, StoreError};
use agentd_policies::{Count, Thresholds, Tokens, Window, WindowSource};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(
        "the request is {count} tokens, over the {window}-token window of {model} ({window_source}); \
         it was not sent"
    )]
    OverWindow {
        count: Count,
        window: Tokens,
        window_source: &'static str,
        model: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A measured request that may be sent.
#[derive(Debug, Clone)]
pub struct Fitted {
    pub count: RequestCount,
    pub window: Window,
    pub thresholds: Thresholds,
}

/// The gauge of one role of one task: the last request the fitter measured for it.
#[derive(Debug, Clone, Serialize)]
pub struct Gauge {
    pub role: String,
    pub model: String,
    pub window: Tokens,
    pub window_source: WindowSource,
    pub tokens: Tokens,
    pub estimated: bool,
    pub categories: Categories,
    pub compact_at: u8,
    pub trigger_tokens: Tokens,
    pub destination_tokens: Tokens,
    pub free_tokens: Tokens,
}

#[derive(Debug, Clone, Serialize)]
pub struct Categories {
    pub system: Tokens,
    pub tools: Tokens,
    pub messages: Tokens,
    pub thinking: Tokens,
}

struct State {
    store: Store,
    counters: Mutex<HashMap<String, Arc<TokenCounter>>>,
    windows: Mutex<HashMap<(String, String), Window>>,
    gauges: Mutex<HashMap<(String, String), Gauge>>,
}

impl State {
    fn counter(&self, model: &str) -> Arc<TokenCounter> {
        let mut counters = lock(&self.counters);
        counters
            .entry(model.to_string())
            .or_insert_with(|| Arc::new(TokenCounter::new(model)))
            .clone()
    }

    fn known_window(&self, server: &str, model: &str) -> Result<Option<Window>, StoreError> {
        let key = (server.to_string(), model.to_string());
        if let Some(w) = lock(&self.windows).get(&key) {
            return Ok(Some(*w));
        }
        let stored = self.store.window(server, model)?;
        if let Some(w) = stored {
            lock(&self.windows).insert(key, w);
        }
        Ok(stored)
    }

    fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StoreError> {
        self.store.set_window(server, model, window)?;
        lock(&self.windows).insert((server.to_string(), model.to_string()), window);
        Ok(())
    }

    /// The window of a server/model: remembered, or probed from the server, or assumed.
    async fn window(&self, client: &OpenAiClient, model: &str) -> Result<Window, StoreError> {
        let server = client.base_url();
        if let Some(w) = self.known_window(server, model)? {
            return Ok(w);
        }
        let window = match client.probe_window(model).await {
            Ok(Some(tokens)) => Window {
                tokens,
                source: WindowSource::Declared,
            },
            Ok(None) => Window::assumed(),
            Err(e) => {
                tracing::warn!(server, model, error = %e, "window probe failed; assuming the default");
                Window::assumed()
            }
        };
        self.set_window(server, model, window)?;
        Ok(window)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere mid-update of a cache; the data is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Fitter {
    state: Arc<State>,
}

impl Fitter {
    pub fn new(store: Store) -> Fitter {
        Fitter {
            state: Arc::new(State {
                store,
                counters: Mutex::new(HashMap::new()),
                windows: Mutex::new(HashMap::new()),
                gauges: Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl Actor for Fitter {
    type Context = Context<Self>;
}

/// Measure a request and say whether it may be sent.
#[derive(Message)]
#[rtype(result = "Result<Fitted, FitError>")]
pub struct Fit {
    pub task_id: String,
    pub role: String,
    pub client: Arc<OpenAiClient>,
    pub request: ChatRequest,
    pub compact_at: u8,
}

impl Handler<Fit> for Fitter {
    type Result = ResponseFuture<Result<Fitted, FitError>>;

    fn handle(&mut self, msg: Fit, _: &mut Context<Self>) -> Self::Result {
        let state = self.state.clone();
        Box::pin(async move {
            let window = state.window(&msg.client, &msg.request.model).await?;
            let counter = state.counter(&msg.request.model);
            let count = counter.count_request(&msg.request);
            let reserve = Tokens(u64::from(msg.request.max_tokens.unwrap_or(0)));
            let thresholds = Thresholds::new(window.tokens, msg.compact_at, reserve);
            let gauge = Gauge {
                role: msg.role.clone(),
                model: msg.request.model.clone(),
                window: window.tokens,
                window_source: window.source,
                tokens: count.total.tokens,
                estimated: count.total.estimated,
                categories: Categories {
                    system: count.system.tokens,
                    tools: count.tools.tokens,
                    messages: count.messages.tokens.saturating_sub(count.thinking.tokens),
                    thinking: count.thinking.tokens,
                },
                compact_at: msg.compact_at,
                trigger_tokens: thresholds.trigger,
                destination_tokens: thresholds.destination,
                free_tokens: window.tokens.saturating_sub(count.total.tokens),
            };
            lock(&state.gauges).insert((msg.task_id.clone(), msg.role.clone()), gauge);
            if thresholds.over_window(count.total.tokens) {
                return Err(FitError::OverWindow {
                    count: count.total,
                    window: window.tokens,
                    window_source: window.source.as_str(),
                    model: msg.request.model.clone(),
                });
            }
            Ok(Fitted {
                count,
                window,
                thresholds,
            })
        })
    }
}

/// A refusal stated the window: remember it. Returns the window believed before.
#[derive(Message)]
#[rtype(result = "Result<Window, StoreError>")]
pub struct Learn {
    pub server: String,
    pub model: String,
    pub window: Window,
}

impl Handler<Learn> for Fitter {
    type Result = Result<Window, StoreError>;

    fn handle(&mut self, msg: Learn, _: &mut Context<Self>) -> Self::Result {
        let old = self
            .state
            .known_window(&msg.server, &msg.model)?
            .unwrap_or_else(Window::assumed);
        self.state.set_window(&msg.server, &msg.model, msg.window)?;
        Ok(old)
    }
}

/// Probe (or recall) the window of a server/model without counting anything.
#[derive(Message)]
#[rtype(result = "Result<Window, StoreError>")]
pub struct WindowOf {
    pub client: Arc<OpenAiClient>,
    pub model: String,
    /// Ask the server again even when a window is remembered (`models probe`).
    pub fresh: bool,
}

impl Handler<WindowOf> for Fitter {
    type Result = ResponseFuture<Result<Window, StoreError>>;

    fn handle(&mut self, msg: WindowOf, _: &mut Context<Self>) -> Self::Result {
        let state = self.state.clone();
        Box::pin(async move {
            if msg.fresh {
                if let Ok(Some(tokens)) = msg.client.probe_window(&msg.model).await {
                    let w = Window {
                        tokens,
                        source: WindowSource::Declared,
                    };
                    state.set_window(msg.client.base_url(), &msg.model, w)?;
                    return Ok(w);
                }
            }
            state.window(&msg.client, &msg.model).await
        })
    }
}

/// The last measurement of a task's role, if it has made a request.
#[derive(Message)]
#[rtype(result = "Option<Gauge>")]
pub struct GaugeOf {
    pub task_id: String,
    pub role: String,
}

impl Handler<GaugeOf> for Fitter {
    type Result = Option<Gauge>;

    fn handle(&mut self, msg: GaugeOf, _: &mut Context<Self>) -> Self::Result {
        lock(&self.state.gauges)
            .get(&(msg.task_id, msg.role))
            .cloned()
    }
}
