//! Context windows learned per server and model: tree `windows`, key `"{server}\n{model}"`.

use crate::codec::{decode, encode};
use crate::error::StoreError;
use crate::store::Store;
use crate::trees::WINDOWS;
use agentd_protocol::Window;

fn key(server: &str, model: &str) -> String {
    format!("{server}\n{model}")
}

impl Store {
    /// The window last learned for a server (its base URL) and model, `None` when none was.
    pub fn window(&self, server: &str, model: &str) -> Result<Option<Window>, StoreError> {
        let key = key(server, model);
        match self.trees()?.windows.get(key.as_bytes())? {
            Some(bytes) => Ok(Some(decode(WINDOWS, || key.clone(), &bytes)?)),
            None => Ok(None),
        }
    }

    /// Remembers the window of a server/model pair; flushed before returning.
    pub fn set_window(&self, server: &str, model: &str, window: Window) -> Result<(), StoreError> {
        let key = key(server, model);
        let bytes = encode(WINDOWS, || key.clone(), &window)?;
        let trees = self.writing()?;
        let inserted = trees.windows.insert(key.as_bytes(), bytes).map_err(StoreError::from);
        self.noted(&trees, inserted)?;
        self.flush_on(&trees)
    }
}
