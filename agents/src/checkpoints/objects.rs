//! [`Objects`]: where checkpoint objects are kept, named by the sha256 of their bytes.

use sha2::{Digest, Sha256};

/// A content-addressed object store: every object is named by the sha256 of its bytes (lowercase
/// hex). The engine implements it over its storage seam.
pub trait Objects {
    /// The store's own error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Whether the object `id` is stored.
    fn has(&self, id: &str) -> Result<bool, Self::Error>;
    /// Stores `bytes` as the object `id` (their sha256). It need not be durable before [`Objects::sync`].
    fn put(&self, id: &str, bytes: &[u8]) -> Result<(), Self::Error>;
    /// The bytes of object `id`, checked against its name.
    fn get(&self, id: &str) -> Result<Vec<u8>, Self::Error>;
    /// Makes every object put so far durable.
    fn sync(&self) -> Result<(), Self::Error>;
}

/// The sha256 of `bytes`, lowercase hex: an object's name.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The object a special file's entry names (a FIFO, a socket, a device): the empty object, whose
/// bytes are never stored — the entry is marked unkept, its content being no bytes at all.
pub(super) fn no_content() -> String {
    sha256_hex(b"")
}
