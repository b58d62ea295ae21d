//! The one error type of tool execution. Every variant's message is meant to be shown to the model
//! as a tool result, so each names the path or field at fault and why.

use thiserror::Error;

/// Why a tool call could not do what the model asked. The message (`Display`) is what the model gets as the
/// call's error result, so every variant names the path or field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ToolError {
    /// The call named an empty path.
    #[error("empty path; use \".\" for the workspace root")]
    EmptyPath,
    /// The call named an absolute path; paths are relative to the workspace. Holds the path as given.
    #[error("absolute paths are not allowed: {0}")]
    Absolute(String),
    /// The path has a `..` component (refused even where it would stay inside), or the kernel found it
    /// leading out of the workspace. Holds the path as given.
    #[error("path escapes the workspace: {0}")]
    Escapes(String),
    /// A symlink inside the workspace points outside it.
    #[error("symlink leaves the workspace: {link} -> {target}")]
    SymlinkEscape {
        /// The symlink's path, relative to the workspace.
        link: String,
        /// Where it points, as the link says.
        target: String,
    },
    /// A symlink on the path points at nothing.
    #[error("broken symlink: {link} -> {target}")]
    BrokenSymlink {
        /// The symlink's path, relative to the workspace.
        link: String,
        /// Where it points, as the link says.
        target: String,
    },
    /// Resolving the path followed more symlinks than the kernel would.
    #[error("too many symlinks (more than {hops}) while resolving {path}")]
    SymlinkLoop {
        /// The path being resolved, as the model named it.
        path: String,
        /// The limit that was passed.
        hops: usize,
    },
    /// A regular file with more than one link: its other names may be outside the workspace.
    #[error(
        "{path} has {links} hard links; a hard-linked file may also be reachable from outside the \
         workspace, so it is neither read nor written"
    )]
    HardLink {
        /// The file's path, relative to the workspace.
        path: String,
        /// How many hard links the file has.
        links: u64,
    },
    /// The path kept changing (a symlink appearing) while it was being opened.
    #[error("{0} changed while it was being opened (a symlink appeared); refused")]
    Raced(String),
    /// Nothing exists at the path (as the model named it).
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// The workspace directory itself cannot be used (missing, not a directory, not openable).
    #[error("not a usable workspace: {path}: {reason}")]
    BadWorkspace {
        /// The workspace directory, as given.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The call's arguments are not what the tool takes (bad JSON, a missing or mistyped field).
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments {
        /// The tool called.
        tool: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// Reading or writing failed for another reason than a missing file.
    #[error("{path}: {message}")]
    Io {
        /// The path, as the model named it.
        path: String,
        /// The operating system's error, in words.
        message: String,
    },
    /// A tool ran but could not do what was asked (the message says why).
    #[error("{0}")]
    Failed(String),
}

impl From<agentd_policies::args::ArgsError> for ToolError {
    fn from(e: agentd_policies::args::ArgsError) -> ToolError {
        ToolError::InvalidArguments { tool: e.tool, message: e.message }
    }
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

/// The workspace refused one step of a merge or a restore (a symlink or a file on the path, a
/// directory in a file's place, a failed write): what was being done, to which path, and why. Both
/// a working copy's merge and a checkpoint's restore say it in these words.
#[derive(Debug, Error)]
#[error("cannot {op} {path} in the workspace: {source}")]
pub struct WorkspaceRefusal {
    /// What was being done ("write", "remove", "set the mode of", "read" …).
    pub op: &'static str,
    /// The path, relative to the workspace.
    pub path: String,
    /// The workspace's refusal.
    #[source]
    pub source: ToolError,
}

impl WorkspaceRefusal {
    /// A closure turning the workspace's refusal of `op` on `path` into a [`WorkspaceRefusal`].
    pub(crate) fn of<'a>(op: &'static str, path: &'a str) -> impl FnOnce(ToolError) -> WorkspaceRefusal + 'a {
        move |source| WorkspaceRefusal { op, path: path.to_string(), source }
    }
}
