//! Why making, diffing or merging a working copy failed ([`CopyError`]).

use crate::error::WorkspaceRefusal;
use std::io;
use std::path::{Path, PathBuf};

/// Why [`make_copy`](super::make_copy), [`changes`](super::changes) or [`merge`](super::merge) could
/// not finish. Each names the path and the operation; the cause is kept as the source.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A file-system operation on a copy, its base or the directory copied from failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done ("read the directory", "copy the file", …).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The workspace refused a read or a change of the merge; files merged before it stay merged.
    #[error(transparent)]
    Workspace(#[from] WorkspaceRefusal),
}

impl CopyError {
    /// A closure turning an `io::Error` of `op` on `path` into a [`CopyError::Io`].
    pub(crate) fn io(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CopyError {
        let path = path.to_path_buf();
        move |source| CopyError::Io { op, path, source }
    }

    /// A closure turning an errno of `op` on `path` into a [`CopyError::Io`].
    pub(crate) fn errno(op: &'static str, path: &Path) -> impl FnOnce(rustix::io::Errno) -> CopyError {
        let path = path.to_path_buf();
        move |e| CopyError::Io { op, path, source: e.into() }
    }
}
