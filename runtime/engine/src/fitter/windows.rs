//! Windows: what the fitter believes each server/model's context window is — remembered, else
//! probed from the server on first use (`declared`), else assumed; replaced by what a refusal states
//! (`error`, [`Learn`]) or a usage report shows (`usage`); persisted, so a restarted daemon knows
//! them.

use super::{Fitter, State};
use crate::storage::StorageError;
use agentd_protocol::Model;
use agentd_protocol::{Window, WindowSource};
use std::sync::Arc;

impl State {
    /// The window remembered for a server/model: in memory, else as stored.
    pub(super) fn known_window(&self, server: &str, model: &str) -> Result<Option<Window>, StorageError> {
        let key = (server.to_string(), model.to_string());
        if let Some(w) = self.windows.lock().get(&key) {
            return Ok(Some(*w));
        }
        let stored = self.storage.window(server, model)?;
        if let Some(w) = stored {
            self.windows.lock().insert(key, w);
        }
        Ok(stored)
    }

    pub(super) fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StorageError> {
        self.storage.set_window(server, model, window)?;
        self.windows.lock().insert((server.to_string(), model.to_string()), window);
        Ok(())
    }

    /// The window of a server/model: remembered, or probed from the server, or assumed.
    pub(super) async fn window(&self, client: &dyn Model, model: &str) -> Result<Window, StorageError> {
        let server = client.server();
        if let Some(w) = self.known_window(server, model)? {
            return Ok(w);
        }
        let window = match client.probe_window(model).await {
            Ok(Some(tokens)) => Window { tokens, source: WindowSource::Declared },
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

/// A refusal stated the window: remember it. Returns the window believed before.
pub struct Learn {
    /// The server's base URL.
    pub server: String,
    /// The model refused.
    pub model: String,
    /// The window the refusal stated, marked `error`.
    pub window: Window,
}

impl Fitter {
    /// Remembers the window a refusal stated; returns the window believed before.
    pub fn learn(&self, msg: Learn) -> Result<Window, StorageError> {
        let old = self.state.known_window(&msg.server, &msg.model)?.unwrap_or_else(Window::assumed);
        self.state.set_window(&msg.server, &msg.model, msg.window)?;
        Ok(old)
    }
}

/// Probe (or recall) the window of a server/model without counting anything.
pub struct WindowOf {
    /// The provider client of the server to probe.
    pub client: Arc<dyn Model>,
    /// The model whose window to learn.
    pub model: String,
    /// Ask the server again even when a window is remembered (`models probe`).
    pub fresh: bool,
}

impl Fitter {
    /// The window of a server/model: remembered, or probed (`fresh`: probed again).
    pub async fn window_of(&self, msg: WindowOf) -> Result<Window, StorageError> {
        if msg.fresh {
            if let Ok(Some(tokens)) = msg.client.probe_window(&msg.model).await {
                let w = Window { tokens, source: WindowSource::Declared };
                self.state.set_window(msg.client.server(), &msg.model, w)?;
                return Ok(w);
            }
        }
        self.state.window(msg.client.as_ref(), &msg.model).await
    }
}
