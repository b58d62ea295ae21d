//! Settings: tree `settings`, a JSON value per string key.

use crate::codec::{decode, encode};
use crate::error::StoreError;
use crate::store::Store;
use crate::trees::SETTINGS;

impl Store {
    /// The setting stored under `key` (a [`agentd_policies::settings::SettingKey`] spelled out), `None` when
    /// it was never set.
    pub fn setting(&self, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        match self.trees()?.settings.get(key.as_bytes())? {
            Some(bytes) => Ok(Some(decode(SETTINGS, || key.to_string(), &bytes)?)),
            None => Ok(None),
        }
    }

    /// Sets (replaces) a setting; flushed before returning.
    pub fn set_setting(&self, key: &str, value: &serde_json::Value) -> Result<(), StoreError> {
        let bytes = encode(SETTINGS, || key.to_string(), value)?;
        let trees = self.writing()?;
        self.room(&trees, bytes.len())?;
        let inserted = trees.settings.insert(key.as_bytes(), bytes).map_err(StoreError::from);
        self.noted(&trees, inserted)?;
        self.flush_on(&trees)
    }

    /// Sets a value that is only a cache of something recomputable (a gauge): written, not flushed,
    /// so it costs no fsync; the next flush of anything else makes it durable too.
    pub fn cache_setting(&self, key: &str, value: &serde_json::Value) -> Result<(), StoreError> {
        let bytes = encode(SETTINGS, || key.to_string(), value)?;
        let trees = self.writing()?;
        self.room(&trees, bytes.len())?;
        let inserted = trees.settings.insert(key.as_bytes(), bytes).map_err(StoreError::from);
        self.noted(&trees, inserted)?;
        Ok(())
    }
}
