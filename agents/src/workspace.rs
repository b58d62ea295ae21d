//! The workspace: the one directory a task's tools may touch.
//!
//! Every path a model gives is relative to the workspace root. A path is refused when it is empty,
//! absolute, contains a `..` component, or reaches through a symlink to somewhere outside the root
//! (symlinks are resolved component by component, so the error names the link at fault). `"."` is the
//! root itself.
//!
//! The checks run when a path is resolved; a process outside agentd that swaps a directory for a
//! symlink between the check and the use is not defended against.

use crate::error::ToolError;
use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical: absolute, symlinks resolved.
    root: PathBuf,
}

impl Workspace {
    /// A workspace rooted at `root`, which must exist and be a directory.
    pub fn new(root: &Path) -> Result<Workspace, ToolError> {
        let bad = |reason: String| ToolError::BadWorkspace { path: root.display().to_string(), reason };
        let canonical = fs::canonicalize(root).map_err(|e| bad(e.to_string()))?;
        if !canonical.is_dir() {
            return Err(bad("not a directory".into()));
        }
        Ok(Workspace { root: canonical })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical path of an existing file or directory inside the workspace.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let parts = components(rel)?;
        let (found, rest) = self.walk(rel, &parts)?;
        if !rest.is_empty() {
            return Err(ToolError::NotFound(rel.to_string()));
        }
        Ok(found)
    }

    /// Where a file that may not exist yet would live. Its nearest existing ancestor must resolve
    /// inside the workspace; the missing components are appended to that ancestor's canonical path.
    /// Nothing is created here: the writer creates the missing parent directories.
    pub fn resolve_for_write(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let parts = components(rel)?;
        let (mut path, rest) = self.walk(rel, &parts)?;
        for part in rest {
            path.push(part);
        }
        Ok(path)
    }

    /// `abs` relative to the root, for display (`"."` for the root itself).
    pub fn display_relative(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }

    /// Follows `parts` from the root while they exist. Returns the canonical path reached and the
    /// components that do not exist (empty when the whole path exists).
    fn walk<'p>(&self, rel: &str, parts: &'p [OsString]) -> Result<(PathBuf, &'p [OsString]), ToolError> {
        let mut current = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            let next = current.join(part);
            let meta = match fs::symlink_metadata(&next) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok((current, &parts[i..])),
                Err(e) => return Err(ToolError::io(rel, &e)),
            };
            if meta.file_type().is_symlink() {
                let link = shown(&parts[..=i]);
                let target =
                    fs::read_link(&next).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
                let resolved = match fs::canonicalize(&next) {
                    Ok(resolved) => resolved,
                    Err(_) => return Err(ToolError::BrokenSymlink { link, target }),
                };
                if !resolved.starts_with(&self.root) {
                    return Err(ToolError::SymlinkEscape { link, target });
                }
                current = resolved;
            } else {
                current = next;
            }
        }
        Ok((current, &[]))
    }
}

/// The normal components of `rel`, after refusing empty, absolute and `..` paths.
fn components(rel: &str) -> Result<Vec<OsString>, ToolError> {
    if rel.is_empty() {
        return Err(ToolError::EmptyPath);
    }
    let mut parts = Vec::new();
    for component in Path::new(rel).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => return Err(ToolError::Absolute(rel.to_string())),
            Component::ParentDir => return Err(ToolError::Escapes(rel.to_string())),
            Component::CurDir => {}
            Component::Normal(part) => parts.push(part.to_os_string()),
        }
    }
    Ok(parts)
}

fn shown(parts: &[OsString]) -> String {
    parts.iter().collect::<PathBuf>().display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src/inner")).unwrap();
        fs::write(dir.path().join("src/main.rs"), "fn main() {}\n").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn new_requires_an_existing_dir() {
        let (dir, _) = setup();
        assert!(matches!(Workspace::new(&dir.path().join("missing")), Err(ToolError::BadWorkspace { .. })));
        assert!(matches!(
            Workspace::new(&dir.path().join("src/main.rs")),
            Err(ToolError::BadWorkspace { .. })
        ));
    }

    #[test]
    fn resolves_inside() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        assert_eq!(ws.resolve("./src/main.rs").unwrap(), ws.root().join("src/main.rs"));
        assert_eq!(ws.resolve("src/").unwrap(), ws.root().join("src"));
        assert_eq!(ws.display_relative(&ws.root().join("src/main.rs")), "src/main.rs");
        assert_eq!(ws.display_relative(ws.root()), ".");
    }

    #[test]
    fn refuses_escapes() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve("").unwrap_err(), ToolError::EmptyPath);
        let e = ws.resolve("../x").unwrap_err();
        assert_eq!(e.to_string(), "path escapes the workspace: ../x");
        assert!(matches!(ws.resolve("src/../src/main.rs"), Err(ToolError::Escapes(_))));
        assert!(matches!(ws.resolve_for_write("a/../../b"), Err(ToolError::Escapes(_))));
        let e = ws.resolve("/etc/passwd").unwrap_err();
        assert_eq!(e.to_string(), "absolute paths are not allowed: /etc/passwd");
        assert!(matches!(ws.resolve_for_write("/tmp/new"), Err(ToolError::Absolute(_))));
    }

    #[test]
    fn missing_paths() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve("nope.txt").unwrap_err(), ToolError::NotFound("nope.txt".into()));
        assert_eq!(ws.resolve_for_write("new/dir/file.txt").unwrap(), ws.root().join("new/dir/file.txt"));
        assert_eq!(ws.resolve_for_write("src/main.rs").unwrap(), ws.root().join("src/main.rs"));
    }

    #[test]
    fn symlink_out_is_refused() {
        let (_dir, ws) = setup();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path(), ws.root().join("link")).unwrap();
        let e = ws.resolve("link").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("symlink leaves the workspace: link -> {}", outside.path().display())
        );
        assert!(matches!(ws.resolve("link/secret"), Err(ToolError::SymlinkEscape { .. })));
        assert!(matches!(ws.resolve_for_write("link/new.txt"), Err(ToolError::SymlinkEscape { .. })));
        // A link whose target goes up and out.
        symlink("../../..", ws.root().join("src/up")).unwrap();
        assert!(
            matches!(ws.resolve("src/up"), Err(ToolError::SymlinkEscape { link, .. }) if link == "src/up")
        );
    }

    #[test]
    fn dangling_symlink_is_refused_for_write() {
        let (_dir, ws) = setup();
        symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
        assert!(matches!(ws.resolve_for_write("dangling"), Err(ToolError::BrokenSymlink { .. })));
    }

    #[test]
    fn symlink_inside_is_allowed() {
        let (_dir, ws) = setup();
        symlink("src", ws.root().join("alias")).unwrap();
        assert_eq!(ws.resolve("alias/main.rs").unwrap(), ws.root().join("src/main.rs"));
        assert_eq!(ws.resolve_for_write("alias/new.rs").unwrap(), ws.root().join("src/new.rs"));
        symlink("../main.rs", ws.root().join("src/inner/m")).unwrap();
        assert_eq!(ws.resolve("src/inner/m").unwrap(), ws.root().join("src/main.rs"));
    }

    #[test]
    fn root_behind_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        fs::write(dir.path().join("real/a"), "a").unwrap();
        symlink(dir.path().join("real"), dir.path().join("via")).unwrap();
        let ws = Workspace::new(&dir.path().join("via")).unwrap();
        assert_eq!(ws.resolve("a").unwrap(), fs::canonicalize(dir.path().join("real/a")).unwrap());
    }
}
