//! A tiny sample project for demos and tests: a Rust crate whose `add`
//! function has a bug (`a - b`), a README and a notes file.

use std::path::Path;

/// `Cargo.toml` of the sample crate.
pub const CARGO_TOML: &str = r#"[package]
name = "sample"
version = "0.1.0"
edition = "2021"

[dependencies]
"#;

/// `src/lib.rs`: `add` subtracts instead of adding.
pub const LIB_RS: &str = r#"//! A tiny sample library.

/// Adds two numbers.
pub fn add(a: i64, b: i64) -> i64 {
    a - b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        assert_eq!(add(2, 3), 5);
    }
}
"#;

/// `README.md`.
pub const README_MD: &str = r#"# sample

A tiny sample crate. `add(a, b)` should return the sum of `a` and `b`.

Run the tests with `cargo test`.
"#;

/// `notes/todo.txt`.
pub const TODO_TXT: &str = "- fix add: it returns a - b instead of a + b\n\
- add a test for negative numbers\n";

/// Every file of the sample workspace as `(relative path, contents)`.
pub const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", CARGO_TOML),
    ("src/lib.rs", LIB_RS),
    ("README.md", README_MD),
    ("notes/todo.txt", TODO_TXT),
];

/// Writes the sample project into `dir` (created if missing; existing files
/// are overwritten). Panics on I/O errors: this is test support.
pub fn sample_workspace(dir: &Path) {
    for (rel, contents) in FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
        }
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

/// A temporary workspace of `n` files `docs/file_00.txt`, `docs/file_01.txt` … of about `tokens`
/// o200k tokens each: file `i` is `line(i, 1)`, `line(i, 2)` … until it is that long.
pub fn docs_workspace(n: usize, tokens: u64, line: impl Fn(usize, u64) -> String) -> tempfile::TempDir {
    let ws = tempfile::tempdir().expect("a temp dir");
    std::fs::create_dir_all(ws.path().join("docs")).expect("docs/");
    for i in 0..n {
        let mut text = String::new();
        let mut at = 0u64;
        while crate::count::tokens(&text) < tokens {
            at += 1;
            text.push_str(&line(i, at));
        }
        std::fs::write(ws.path().join(format!("docs/file_{i:02}.txt")), text).expect("a docs file");
    }
    ws
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_all_files() {
        let dir = std::env::temp_dir().join(format!("agentd-sample-{}-{}", std::process::id(), line!()));
        sample_workspace(&dir);
        for (rel, contents) in FILES {
            assert_eq!(std::fs::read_to_string(dir.join(rel)).unwrap(), *contents);
        }
        assert!(std::fs::read_to_string(dir.join("src/lib.rs")).unwrap().contains("a - b"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
