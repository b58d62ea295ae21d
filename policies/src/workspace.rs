//! Which directories may be a task's workspace. A workspace is where the model's tools write: the
//! root filesystem, the system's own directories and the daemon's home (or any directory that holds
//! it) are never one — a task could otherwise rewrite `/etc`, or `agentd.toml` and the database.
//!
//! Pure: the caller passes canonical paths (symlinks resolved), so `/tmp/../etc` and a link to the
//! home are judged as what they are.

use std::path::Path;

/// Directories that are refused as a workspace themselves (their subdirectories may be used: a
/// project under `/var/lib/build` or `/opt/src` is an ordinary workspace).
const SYSTEM_DIRS: &[&str] =
    &["/", "/usr", "/var", "/opt", "/home", "/root", "/srv", "/mnt", "/media", "/tmp"];

/// Trees refused whole: the system's programs, libraries, configuration and kernel interfaces.
const SYSTEM_TREES: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/sbin",
    "/usr/share",
];

/// Why `workspace` may not be a workspace of the daemon whose home is `home`, or `None` when it
/// may. Both paths canonical.
pub fn refusal(workspace: &Path, home: &Path) -> Option<String> {
    if SYSTEM_DIRS.iter().any(|d| workspace == Path::new(d)) {
        return Some(format!(
            "{} is a system directory, not a project: name the project's own directory",
            workspace.display()
        ));
    }
    if let Some(tree) = SYSTEM_TREES.iter().find(|t| workspace.starts_with(t)) {
        return Some(format!("{} is inside {tree}, the system's own files", workspace.display()));
    }
    if workspace.starts_with(home) {
        return Some(format!("{} is inside the agentd home {}", workspace.display(), home.display()));
    }
    if home.starts_with(workspace) {
        return Some(format!("{} holds the agentd home {}", workspace.display(), home.display()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOME: &str = "/home/ada/.agentd";

    fn refused(ws: &str) -> Option<String> {
        refusal(Path::new(ws), Path::new(HOME))
    }

    #[test]
    fn the_root_system_directories_and_the_home_are_refused() {
        for ws in
            ["/", "/etc", "/etc/nginx", "/usr", "/usr/lib/python3", "/proc/self", "/tmp", "/home", "/root"]
        {
            assert!(refused(ws).is_some(), "{ws}");
        }
        assert!(refused(HOME).unwrap().contains("inside the agentd home"));
        assert!(refused("/home/ada/.agentd/evidence").unwrap().contains("inside the agentd home"));
        assert!(refused("/home/ada").unwrap().contains("holds the agentd home"));
        assert!(refused("/").unwrap().contains("system directory"));
        assert!(refused("/etc").unwrap().contains("the system's own files"));
    }

    #[test]
    fn projects_are_accepted() {
        for ws in [
            "/home/ada/src/parser",
            "/tmp/scratch",
            "/srv/build/app",
            "/usr/local/src/tool",
            "/opt/work",
            "/var/lib/ci/job-7",
            "/home/ada/.agentd-other",
        ] {
            assert_eq!(refused(ws), None, "{ws}");
        }
    }

    proptest! {
        /// Whatever the paths, the home and every directory holding it are refused.
        #[test]
        fn the_home_and_its_parents_are_never_workspaces(parts in prop::collection::vec("[a-z]{1,6}", 1..5), cut in 0usize..5) {
            let home = format!("/{}", parts.join("/"));
            let cut = cut.min(parts.len());
            let parent = format!("/{}", parts[..cut].join("/"));
            prop_assert!(refusal(Path::new(&parent), Path::new(&home)).is_some());
            let inside = format!("{}/x", home);
            prop_assert!(refusal(Path::new(&inside), Path::new(&home)).is_some());
        }
    }
}
