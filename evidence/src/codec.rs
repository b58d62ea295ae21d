//! JSON encoding of stored values: decode failures name their tree and key.

use crate::error::StoreError;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub(crate) fn encode<T: Serialize>(
    tree: &'static str,
    what: impl FnOnce() -> String,
    value: &T,
) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|source| StoreError::Encode { tree, what: what(), source })
}

pub(crate) fn decode<T: DeserializeOwned>(
    tree: &'static str,
    key: impl FnOnce() -> String,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Corrupt { tree, key: key(), source })
}

/// A key for error messages: the UTF-8 text, lossily.
pub(crate) fn show_key(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
