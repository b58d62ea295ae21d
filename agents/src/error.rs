//! The one error type of tool execution. Every variant's message is meant to be shown to the model
//! as a tool result, so each names the path or field at fault and why.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ToolError {
    #[error("empty path; use \".\" for the workspace root")]
    EmptyPath,
    #[error("absolute paths are not allowed: {0}")]
    Absolute(String),
    #[error("path escapes the workspace: {0}")]
    Escapes(String),
    #[error("symlink leaves the workspace: {link} -> {target}")]
    SymlinkEscape { link: String, target: String },
    #[error("broken symlink: {link} -> {target}")]
    BrokenSymlink { link: String, target: String },
    #[error("too many symlinks (more than {hops}) while resolving {path}")]
    SymlinkLoop { path: String, hops: usize },
    /// A regular file with more than one link: its other names may be outside the workspace.
    #[error(
        "{path} has {links} hard links; a hard-linked file may also be reachable from outside the \
         workspace, so it is neither read nor written"
    )]
    HardLink { path: String, links: u64 },
    /// The path kept changing (a symlink appearing) while it was being opened.
    #[error("{0} changed while it was being opened (a symlink appeared); refused")]
    Raced(String),
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("not a usable workspace: {path}: {reason}")]
    BadWorkspace { path: String, reason: String },
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments { tool: String, message: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// A tool ran but could not do what was asked (the message says why).
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// An IO error on `path` (as the model named it), with `NotFound` kept distinct.
    pub fn io(path: &str, err: &std::io::Error) -> ToolError {
        if err.kind() == std::io::ErrorKind::NotFound {
            ToolError::NotFound(path.to_string())
        } else {
            ToolError::Io { path: path.to_string(), message: err.to_string() }
        }
    }
}
