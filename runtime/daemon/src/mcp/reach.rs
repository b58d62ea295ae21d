//! What a stdio MCP server's program needs to reach, so that it runs confined as users install it.
//!
//! `run_command`'s sandbox reads only the system's directories and the workspace. Almost no MCP
//! server lives there: it is a console script in a virtual environment (whose interpreter may itself
//! live in `~/.pyenv`), a package in a project's `node_modules`, something `npx`, `uvx` or `pipx`
//! fetches into a cache in the home. [`reach`] finds, before the server starts, what its program
//! needs — and nothing of the home beyond that:
//!
//! - the program, resolved on the daemon's `PATH` when it is a bare name;
//! - for the program and every interpreter its `#!` line names (through `/usr/bin/env`), its
//!   install: the virtual environment it belongs to (the directory with `pyvenv.cfg`), the outermost
//!   `node_modules` it lies in, the root of a version manager (`~/.pyenv`, `~/.nvm`, `~/.asdf`, …),
//!   or, for `PREFIX/bin/NAME`, `PREFIX`'s `bin`, `lib` and `lib64` — but never the home itself, so
//!   `~/.cargo/bin/x` grants `~/.cargo/bin`, not the cargo credentials beside it;
//! - a script named by an argument (`node /srv/mcp/index.js`): its project, the nearest directory
//!   above it with a `package.json`, `pyproject.toml`, `setup.py` or `.git`, else its directory;
//! - a launcher that fetches on first use: its cache, writable, and the variable that points the
//!   launcher at it (`HOME` is the sandbox's temp dir): `npx`/`npm` → `~/.npm`
//!   (`npm_config_cache`), `uvx`/`uv` → `~/.cache/uv` (`UV_CACHE_DIR`) and `~/.local/share/uv`,
//!   `pipx` → `~/.local/share/pipx` (`PIPX_HOME`); such a launcher gets the network unless the
//!   server says `network = false`.
//!
//! What the server's entry lists in `read` is added by the caller; paths that would expose the
//! daemon's home are left to the sandbox to refuse, by name.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the daemon runs: what [`reach`] reads of its environment.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// The daemon's `PATH`, where a bare command is looked up.
    pub path: Option<OsString>,
    /// The user's home (`HOME`): never granted whole.
    pub home: Option<PathBuf>,
    /// The launchers' own variables as the daemon has them (`npm_config_cache`, `UV_CACHE_DIR`,
    /// `XDG_CACHE_HOME`, `PIPX_HOME`, …), by name.
    pub vars: Vec<(String, OsString)>,
}

impl Host {
    /// The daemon's own environment.
    pub fn current() -> Host {
        let vars = LAUNCHER_VARS
            .iter()
            .filter_map(|name| std::env::var_os(name).map(|v| (name.to_string(), v)))
            .collect();
        Host {
            path: std::env::var_os("PATH"),
            home: std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()),
            vars,
        }
    }

    fn var(&self, name: &str) -> Option<PathBuf> {
        self.vars.iter().find(|(k, _)| k == name).map(|(_, v)| PathBuf::from(v)).filter(|p| p.is_absolute())
    }

    fn in_home(&self, rest: &str) -> Option<PathBuf> {
        self.home.as_ref().map(|h| h.join(rest))
    }
}

/// The variables of the launchers' caches that [`Host::current`] reads.
const LAUNCHER_VARS: &[&str] = &[
    "npm_config_cache",
    "UV_CACHE_DIR",
    "UV_TOOL_DIR",
    "UV_PYTHON_INSTALL_DIR",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "PIPX_HOME",
];

/// Directories of version managers, each holding its interpreters and shims (no secrets): granted
/// whole when a program lies beneath one.
const VERSION_MANAGERS: &[&str] =
    &[".pyenv", ".nvm", ".rbenv", ".asdf", ".volta", ".fnm", ".rustup", ".sdkman"];

/// Files that mark a project's root, for a script named by an argument.
const PROJECT_MARKERS: &[&str] = &["package.json", "pyproject.toml", "setup.py", ".git"];

/// What a server's program needs: added to the sandbox policy it starts under.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reach {
    /// The program, as found (a bare name resolved on `PATH`).
    pub program: PathBuf,
    /// Paths to read (and execute beneath).
    pub read: Vec<PathBuf>,
    /// A launcher's caches, to write beneath.
    pub write: Vec<PathBuf>,
    /// The variables that point a launcher at them.
    pub env: Vec<(String, OsString)>,
    /// The program is a launcher that fetches what it runs on first use (it needs the network).
    pub fetches: bool,
}

/// Why a server's program cannot be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReachError {
    /// A bare name not on the daemon's `PATH`.
    #[error("`{command}` is not on the daemon's PATH ({path}); give its absolute path in `command`")]
    NotOnPath {
        /// The configured command.
        command: String,
        /// The `PATH` searched.
        path: String,
    },
    /// A path that names no file.
    #[error("{path} does not exist")]
    Missing {
        /// The path, made absolute.
        path: PathBuf,
    },
}

/// What `command` (run with `args` in `workspace`) needs, on `host`.
pub fn reach(command: &str, args: &[String], workspace: &Path, host: &Host) -> Result<Reach, ReachError> {
    let program = find(command, workspace, host)?;
    let mut out = Reach { program: program.clone(), ..Reach::default() };
    let mut grants = Grants { host, read: Vec::new() };
    grants.program(&program, 0);
    for arg in args {
        let path = workspace.join(arg);
        if !arg.starts_with('-') && path.is_file() && !path.starts_with(workspace) {
            grants.project_of(&path);
        }
    }
    let name = Path::new(command).file_name().and_then(|n| n.to_str()).unwrap_or(command);
    launcher(name, host, &mut out);
    out.read = grants.read;
    Ok(out)
}

/// `command` as a file: a path (relative to the workspace), or a bare name on `PATH`.
fn find(command: &str, workspace: &Path, host: &Host) -> Result<PathBuf, ReachError> {
    if command.contains('/') {
        let path = workspace.join(command);
        return if path.exists() { Ok(path) } else { Err(ReachError::Missing { path }) };
    }
    let path = host.path.clone().unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(command))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| ReachError::NotOnPath {
            command: command.to_string(),
            path: path.to_string_lossy().into_owned(),
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The read grants, gathered without repeats.
struct Grants<'h> {
    host: &'h Host,
    read: Vec<PathBuf>,
}

impl Grants<'_> {
    fn add(&mut self, path: PathBuf) {
        if path.exists() && !self.read.iter().any(|p| path.starts_with(p)) {
            self.read.retain(|p| !p.starts_with(&path));
            self.read.push(path);
        }
    }

    /// A program: the file, its install as named and as resolved, then its `#!` interpreter's.
    fn program(&mut self, path: &Path, depth: u32) {
        self.install_of(path);
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if real != path {
            self.install_of(&real);
        }
        if depth >= 4 {
            return;
        }
        if let Some((interpreter, arg)) = shebang(&real) {
            if interpreter.ends_with("/env") {
                // `#!/usr/bin/env node` (or `env -S node --flag`): the first word that is not a flag.
                let word = arg.split_whitespace().find(|w| !w.starts_with('-') && !w.contains('='));
                if let Some(found) = word.and_then(|w| find(w, Path::new("/"), self.host).ok()) {
                    self.program(&found, depth + 1);
                }
            } else {
                self.program(Path::new(&interpreter), depth + 1);
            }
        }
    }

    /// What a program at `path` runs from.
    fn install_of(&mut self, path: &Path) {
        let home = self.host.home.as_deref();
        let Some(dir) = path.parent() else { return };
        // A version manager's root: its interpreters, shims and libexec.
        if let Some(root) = path
            .ancestors()
            .find(|a| a.file_name().and_then(|n| n.to_str()).is_some_and(|n| VERSION_MANAGERS.contains(&n)))
        {
            self.add(root.to_path_buf());
        }
        // A virtual environment: its site-packages and scripts.
        if let Some(venv) =
            dir.ancestors().take_while(|a| Some(*a) != home).find(|a| a.join("pyvenv.cfg").is_file())
        {
            self.add(venv.to_path_buf());
            return;
        }
        // The outermost node_modules: the package and the dependencies hoisted beside it.
        if let Some(modules) =
            path.ancestors().filter(|a| a.file_name().is_some_and(|n| n == "node_modules")).last()
        {
            self.add(modules.to_path_buf());
            return;
        }
        // PREFIX/bin/NAME: the prefix's programs and libraries (an interpreter's standard library).
        if dir.file_name().is_some_and(|n| n == "bin") {
            if let Some(prefix) = dir.parent().filter(|p| p.parent().is_some() && Some(*p) != home) {
                for sub in ["bin", "lib", "lib64"] {
                    self.add(prefix.join(sub));
                }
                return;
            }
        }
        if dir.parent().is_some() && Some(dir) != home {
            self.add(dir.to_path_buf());
        } else {
            self.add(path.to_path_buf());
        }
    }

    /// A script's project: the nearest directory above it, short of the home, with a project marker.
    fn project_of(&mut self, script: &Path) {
        let home = self.host.home.as_deref();
        let Some(dir) = script.parent() else { return };
        let root = dir
            .ancestors()
            .take_while(|a| a.parent().is_some() && Some(*a) != home)
            .find(|a| PROJECT_MARKERS.iter().any(|m| a.join(m).exists()))
            .unwrap_or(dir);
        if root.parent().is_some() && Some(root) != home {
            self.add(root.to_path_buf());
        } else {
            self.add(script.to_path_buf());
        }
        self.install_of(script);
    }
}

/// The interpreter and its argument text from a `#!` line, if the file has one.
fn shebang(path: &Path) -> Option<(String, String)> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim();
    let (interpreter, arg) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    interpreter.starts_with('/').then(|| (interpreter.to_string(), arg.trim().to_string()))
}

/// A launcher's caches (created if missing, so that a rule can name them) and the variables that
/// point it at them.
fn launcher(name: &str, host: &Host, out: &mut Reach) {
    let cache = |var: &str, path: Option<PathBuf>, out: &mut Reach| {
        let Some(path) = path else { return };
        let _ = std::fs::create_dir_all(&path);
        out.env.push((var.to_string(), path.clone().into_os_string()));
        out.write.push(path);
    };
    let xdg = |var: &str, rest: &str, default: &str| {
        host.var(var).map(|p| p.join(rest)).or_else(|| host.in_home(&format!("{default}/{rest}")))
    };
    match name {
        "npx" | "npm" => {
            cache("npm_config_cache", host.var("npm_config_cache").or_else(|| host.in_home(".npm")), out);
        }
        "uvx" | "uv" => {
            cache(
                "UV_CACHE_DIR",
                host.var("UV_CACHE_DIR").or_else(|| xdg("XDG_CACHE_HOME", "uv", ".cache")),
                out,
            );
            let data = xdg("XDG_DATA_HOME", "uv", ".local/share");
            cache(
                "UV_TOOL_DIR",
                host.var("UV_TOOL_DIR").or_else(|| data.as_ref().map(|d| d.join("tools"))),
                out,
            );
            cache(
                "UV_PYTHON_INSTALL_DIR",
                host.var("UV_PYTHON_INSTALL_DIR").or_else(|| data.map(|d| d.join("python"))),
                out,
            );
        }
        "pipx" => {
            cache(
                "PIPX_HOME",
                host.var("PIPX_HOME").or_else(|| xdg("XDG_DATA_HOME", "pipx", ".local/share")),
                out,
            );
        }
        _ => return,
    }
    out.fetches = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn write(path: &Path, text: &str, exec: bool) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        if exec {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    /// A home as users have it: pyenv's interpreter, a venv made from it with a console script, a
    /// compiled tool in ~/.cargo/bin beside the cargo credentials, a node project.
    fn home() -> (tempfile::TempDir, Host) {
        let t = tempfile::tempdir().unwrap();
        let h = t.path().canonicalize().unwrap();
        let py = h.join(".pyenv/versions/3.11.7");
        write(&py.join("bin/python3.11"), "\x7fELF", true);
        symlink("python3.11", py.join("bin/python3")).unwrap();
        write(&py.join("lib/python3.11/os.py"), "", false);
        let venv = h.join("venvs/time");
        write(&venv.join("pyvenv.cfg"), &format!("home = {}\n", py.join("bin").display()), false);
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        symlink(py.join("bin/python3"), venv.join("bin/python3")).unwrap();
        write(
            &venv.join("bin/mcp-server-time"),
            &format!("#!{}\nimport sys\n", venv.join("bin/python3").display()),
            true,
        );
        write(&h.join(".cargo/bin/mcp-rs"), "\x7fELF", true);
        write(&h.join(".cargo/credentials.toml"), "token = \"x\"", false);
        write(&h.join("srv/mcp/package.json"), "{}", false);
        write(&h.join("srv/mcp/dist/index.js"), "", false);
        write(&h.join("srv/mcp/node_modules/zod/index.js"), "", false);
        write(&h.join("bin/node"), "\x7fELF", true);
        let host = Host {
            path: Some(
                std::env::join_paths([h.join("bin"), h.join(".cargo/bin"), "/usr/bin".into()]).unwrap(),
            ),
            home: Some(h.clone()),
            vars: Vec::new(),
        };
        (t, host)
    }

    #[test]
    fn a_venv_console_script_reaches_its_venv_and_its_interpreters_install() {
        let (t, host) = home();
        let h = t.path().canonicalize().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let cmd = h.join("venvs/time/bin/mcp-server-time");
        let r = reach(cmd.to_str().unwrap(), &[], ws.path(), &host).unwrap();
        assert_eq!(r.program, cmd);
        assert_eq!(r.read, [h.join("venvs/time"), h.join(".pyenv")], "{:?}", r.read);
        assert!(r.write.is_empty() && r.env.is_empty() && !r.fetches);
        // The venv's python, named with `-m`: the same.
        let py = h.join("venvs/time/bin/python3");
        let args = ["-m".to_string(), "mcp_server_time".to_string()];
        let r = reach(py.to_str().unwrap(), &args, ws.path(), &host).unwrap();
        assert_eq!(r.read, [h.join("venvs/time"), h.join(".pyenv")]);
    }

    #[test]
    fn a_compiled_tool_in_the_home_reaches_its_bin_directory_only() {
        let (t, host) = home();
        let h = t.path().canonicalize().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let r = reach("mcp-rs", &[], ws.path(), &host).unwrap();
        assert_eq!(r.program, h.join(".cargo/bin/mcp-rs"));
        assert_eq!(r.read, [h.join(".cargo/bin")], "not ~/.cargo, which holds the credentials");
        // ~/bin/node: the home is no prefix, so only ~/bin; the script's project is reached whole.
        let script = h.join("srv/mcp/dist/index.js").display().to_string();
        let r = reach("node", &[script], ws.path(), &host).unwrap();
        assert_eq!(r.read, [h.join("bin"), h.join("srv/mcp")], "{:?}", r.read);
    }

    #[test]
    fn launchers_get_their_caches_the_variables_and_the_network() {
        let (t, mut host) = home();
        let h = t.path().canonicalize().unwrap();
        for name in ["npx", "uvx", "pipx"] {
            write(&h.join("bin").join(name), "\x7fELF", true);
        }
        let ws = tempfile::tempdir().unwrap();
        let r = reach("npx", &["-y".into(), "@modelcontextprotocol/server-memory".into()], ws.path(), &host)
            .unwrap();
        assert!(r.fetches);
        assert_eq!(r.write, [h.join(".npm")]);
        assert_eq!(r.env, [("npm_config_cache".to_string(), h.join(".npm").into_os_string())]);
        assert!(h.join(".npm").is_dir(), "made, so that a rule can name it");
        let r = reach("uvx", &["mcp-server-time".into()], ws.path(), &host).unwrap();
        assert_eq!(
            r.write,
            [h.join(".cache/uv"), h.join(".local/share/uv/tools"), h.join(".local/share/uv/python")]
        );
        host.vars.push(("PIPX_HOME".into(), h.join("px").into_os_string()));
        let r = reach("pipx", &["run".into(), "mcp-server-time".into()], ws.path(), &host).unwrap();
        assert_eq!(r.env, [("PIPX_HOME".to_string(), h.join("px").into_os_string())]);
    }

    #[test]
    fn a_program_that_is_not_there_is_named() {
        let (_t, host) = home();
        let ws = tempfile::tempdir().unwrap();
        let e = reach("no-such-mcp", &[], ws.path(), &host).unwrap_err();
        assert!(e.to_string().starts_with("`no-such-mcp` is not on the daemon's PATH ("), "{e}");
        let e = reach("/nowhere/venv/bin/python", &[], ws.path(), &host).unwrap_err();
        assert_eq!(e.to_string(), "/nowhere/venv/bin/python does not exist");
        // A relative path is the workspace's.
        write(&ws.path().join("tools/server"), "#!/bin/sh\n", true);
        let r = reach("tools/server", &[], ws.path(), &host).unwrap();
        assert_eq!(r.program, ws.path().join("tools/server"));
    }
}
