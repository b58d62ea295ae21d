//! The HTTP API's token: `<home>/http.token`, created by `agentd serve` (mode 0600) when missing.
//!
//! Only the daemon's user (and root) can read a 0600 file in the 0700 home, so presenting the token
//! means what the socket's peer-uid check means: the request comes from the user who runs the
//! daemon. A token is 32 random bytes from the kernel, as 64 hex digits.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why the token could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file exists and could not be read, or its mode could not be tightened.
    #[error("cannot read the HTTP token {path}: {source}")]
    Read {
        /// The token file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A new token could not be written.
    #[error("cannot create the HTTP token {path}: {source}")]
    Write {
        /// The token file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The kernel gave no random bytes.
    #[error("cannot draw random bytes for the HTTP token: {0}")]
    Random(std::io::Error),
    /// The file holds no token (blank, or not one line of printable ASCII).
    #[error("the HTTP token {path} holds no token (expected one line of printable characters); delete it and restart to make a new one")]
    Malformed {
        /// The token file.
        path: PathBuf,
    },
}

/// The secret every HTTP request must present. Compared in constant time; never printed by
/// `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// A token of this text (a test's, or one read from the file).
    pub fn new(text: impl Into<String>) -> Token {
        Token(text.into())
    }

    /// The token's text: what the bearer header and the cookie carry.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token. Takes the same time for every candidate of the token's
    /// length, so a wrong guess says nothing about how much of it was right.
    pub fn matches(&self, candidate: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), candidate.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// Reads the token at `path`, or creates one there (mode 0600, never replacing a file that
    /// appeared meanwhile). An existing file's mode is tightened to 0600.
    pub fn load_or_create(path: &Path) -> Result<Token, TokenError> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|source| TokenError::Read { path: path.to_path_buf(), source })?;
                let token = text.trim();
                let printable = token.bytes().all(|b| b.is_ascii_graphic());
                if token.is_empty() || !printable {
                    return Err(TokenError::Malformed { path: path.to_path_buf() });
                }
                Ok(Token(token.to_string()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let token = Token(random_hex()?);
                let write = |token: &Token| -> std::io::Result<()> {
                    let mut file =
                        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
                    file.write_all(format!("{}\n", token.0).as_bytes())?;
                    file.sync_all()
                };
                match write(&token) {
                    Ok(()) => Ok(token),
                    // Another process made it first: theirs is the token.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Token::load_or_create(path),
                    Err(source) => Err(TokenError::Write { path: path.to_path_buf(), source }),
                }
            }
            Err(source) => Err(TokenError::Read { path: path.to_path_buf(), source }),
        }
    }
}

/// 32 bytes from `getrandom(2)`, as hex.
fn random_hex() -> Result<String, TokenError> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: the pointer and length describe `rest`, a live, writable buffer.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(TokenError::Random(e));
        }
        filled += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_token_is_created_0600_and_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("http.token");
        let made = Token::load_or_create(&path).unwrap();
        assert_eq!(made.as_str().len(), 64);
        assert!(made.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Token::load_or_create(&path).unwrap(), made);
        assert_ne!(Token::load_or_create(&dir.path().join("other")).unwrap(), made, "tokens are random");
    }

    #[test]
    fn an_existing_token_is_kept_and_tightened_and_a_blank_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("http.token");
        std::fs::write(&path, "my-own-token\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(Token::load_or_create(&path).unwrap().as_str(), "my-own-token");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::write(&path, "  \n").unwrap();
        let e = Token::load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("http.token") && e.contains("holds no token"), "{e}");
    }

    #[test]
    fn only_the_token_itself_matches() {
        let t = Token::new("abc123");
        assert!(t.matches("abc123"));
        assert!(!t.matches("abc124") && !t.matches("abc12") && !t.matches("") && !t.matches("abc1234"));
        assert_eq!(format!("{t:?}"), "Token(…)");
    }
}
