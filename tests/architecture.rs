//! ARCHITECTURE.md's invariants that the compiler cannot hold, checked.
//!
//! - **The rooms' dependencies** (`cargo metadata`): which agentd crates each crate may depend on,
//!   and the crates that must stay out of a room's whole normal dependency tree — the engine links
//!   no actix, actix-web, sled, rmcp or reqwest; the protocol, the policies and the client no async
//!   runtime or HTTP stack.
//! - **The codemap is true**: every file the "Where is X decided" table cites exists, and every
//!   function, type or constant it cites there is defined in the file cited with it.
//! - **One clock**: in the engine and the daemon, only `runtime/engine/src/clock.rs` reads the system time
//!   or sleeps on it; every other deliberate wait goes through that clock.
//! - **No import cycles between files**: within each crate, no file uses a module that (through
//!   others) uses it back.
//! - **Test and fuzz support stays out of release builds**: the modules that serve only tests and
//!   fuzzers are behind `cfg(test)` or a feature no release build enables.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The runtime's crates, under `runtime/`.
const RUNTIME: [&str; 5] =
    ["runtime/providers", "runtime/engine", "runtime/cluster", "runtime/daemon", "runtime/client"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace as cargo resolves it: each package by name with its resolved normal dependencies.
struct Graph {
    /// Package id → (name, ids of its normal dependencies).
    nodes: BTreeMap<String, (String, Vec<String>)>,
    /// Name → id, for the workspace's own packages.
    members: BTreeMap<String, String>,
}

impl Graph {
    fn load() -> Graph {
        // The host's packages only: other platforms' would need their manifests downloaded.
        let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .arg("-vV")
            .output()
            .expect("rustc -vV runs");
        let version = String::from_utf8_lossy(&rustc.stdout).into_owned();
        let host = version.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc names its host");
        let out = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", host])
            .current_dir(root())
            .output()
            .expect("cargo metadata runs");
        assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
        let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: BTreeMap<String, String> = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["id"].as_str().unwrap().to_string(), p["name"].as_str().unwrap().to_string()))
            .collect();
        let mut nodes = BTreeMap::new();
        for node in meta["resolve"]["nodes"].as_array().unwrap() {
            let id = node["id"].as_str().unwrap().to_string();
            let deps = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
                .map(|d| d["pkg"].as_str().unwrap().to_string())
                .collect();
            nodes.insert(id.clone(), (names[&id].clone(), deps));
        }
        let members = meta["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| (names[id.as_str().unwrap()].clone(), id.as_str().unwrap().to_string()))
            .collect();
        Graph { nodes, members }
    }

    /// The names of every package in `crate_name`'s normal dependency tree (itself excluded).
    fn tree(&self, crate_name: &str) -> BTreeSet<String> {
        let start = &self.members[crate_name];
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.clone()];
        while let Some(id) = todo.pop() {
            for dep in &self.nodes[&id].1 {
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen.iter().map(|id| self.nodes[id].0.clone()).collect()
    }

    /// The agentd crates `crate_name` depends on directly (normal dependencies).
    fn direct_agentd(&self, crate_name: &str) -> BTreeSet<String> {
        let id = &self.members[crate_name];
        self.nodes[id]
            .1
            .iter()
            .map(|d| self.nodes[d].0.clone())
            .filter(|n| n.starts_with("agentd-"))
            .collect()
    }
}

#[test]
fn each_room_depends_only_on_the_rooms_below_it() {
    let graph = Graph::load();
    let allowed: &[(&str, &[&str])] = &[
        ("agentd-protocol", &[]),
        ("agentd-policies", &["agentd-protocol"]),
        ("agentd-evidence", &["agentd-protocol", "agentd-policies"]),
        ("agentd-agents", &["agentd-protocol", "agentd-policies"]),
        ("agentd-providers", &["agentd-protocol"]),
        ("agentd-client", &["agentd-protocol"]),
        ("agentd-engine", &["agentd-protocol", "agentd-policies", "agentd-agents"]),
        ("agentd-cluster", &["agentd-protocol", "agentd-policies", "agentd-engine"]),
        (
            "agentd-daemon",
            &[
                "agentd-protocol",
                "agentd-policies",
                "agentd-evidence",
                "agentd-agents",
                "agentd-providers",
                "agentd-engine",
                "agentd-cluster",
                "agentd-client",
            ],
        ),
        ("agentd", &["agentd-protocol", "agentd-daemon", "agentd-client"]),
    ];
    for (name, may) in allowed {
        let may: BTreeSet<String> = may.iter().map(|s| s.to_string()).collect();
        let has = graph.direct_agentd(name);
        let extra: Vec<&String> = has.difference(&may).collect();
        assert!(extra.is_empty(), "{name} depends on {extra:?}, which ARCHITECTURE.md does not allow it");
    }
}

#[test]
fn the_engine_links_no_actor_system_database_mcp_sdk_or_http_client() {
    let graph = Graph::load();
    let forbidden: &[(&str, &[&str])] = &[
        ("agentd-engine", &["actix", "actix-web", "sled", "rmcp", "reqwest", "hyper"]),
        ("agentd-providers", &["actix", "actix-web", "sled", "rmcp"]),
        ("agentd-protocol", &["tokio", "reqwest", "sled", "actix"]),
        ("agentd-policies", &["tokio", "reqwest", "sled", "actix"]),
        ("agentd-client", &["reqwest", "sled", "actix", "hyper", "rmcp"]),
        ("agentd-cluster", &["actix", "actix-web", "sled", "rmcp", "reqwest"]),
    ];
    for (name, never) in forbidden {
        let tree = graph.tree(name);
        let found: Vec<&&str> = never.iter().filter(|n| tree.contains(**n)).collect();
        assert!(found.is_empty(), "{name}'s dependency tree holds {found:?}");
    }
}

/// The rows of ARCHITECTURE.md's "Where is X decided" table: (decision, file column, function
/// column).
fn decisions() -> Vec<(String, String, String)> {
    let text = read(&root().join("ARCHITECTURE.md"));
    let table = text.split("## Where is X decided").nth(1).expect("the table's section");
    table
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| decision"))
        .map(|l| {
            let cells: Vec<String> = l.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {l}");
            (cells[0].clone(), cells[1].clone(), cells[2].clone())
        })
        .collect()
}

/// The `backticked` words of a cell, in order.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

fn is_path(word: &str) -> bool {
    word.ends_with(".rs") && word.contains('/')
}

/// Whether `source` defines `name`: a function, type, trait, module, constant, an enum variant, or
/// a trait implementation for it.
fn defines(source: &str, name: &str) -> bool {
    let words = ["fn", "struct", "enum", "trait", "mod", "const", "static", "type", "macro_rules!"];
    source.lines().any(|line| {
        let l = line.trim_start();
        let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub(super) ")).unwrap_or(l);
        let l = l.strip_prefix("pub ").unwrap_or(l);
        let l = l.strip_prefix("async ").unwrap_or(l);
        words.iter().any(|w| {
            l.strip_prefix(w)
                .and_then(|rest| rest.trim_start().strip_prefix(name))
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        }) || l
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(" {") || rest.starts_with('(') || rest.starts_with(','))
            || (l.starts_with("impl") && l.contains(&format!(" for {name} ")))
    })
}

#[test]
fn every_file_and_function_the_decision_table_cites_exists() {
    let rows = decisions();
    assert!(rows.len() >= 15, "the table has its rows: {}", rows.len());
    for (decision, files, functions) in rows {
        let mut cited: Vec<String> = ticked(&files).into_iter().filter(|w| is_path(w)).collect();
        assert!(!cited.is_empty(), "{decision}: the file column names a file");
        cited.extend(ticked(&functions).into_iter().filter(|w| is_path(w)));
        for file in &cited {
            assert!(root().join(file).is_file(), "{decision}: {file} does not exist");
        }
        let sources: Vec<String> = cited.iter().map(|f| read(&root().join(f))).collect();
        for word in ticked(&functions).into_iter().filter(|w| !is_path(w)) {
            // `Type::method`, `module::function` or a bare name: the last segment is defined in
            // one of the files the row cites.
            let name = word.rsplit("::").next().unwrap().trim_end_matches("()");
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                panic!("{decision}: cannot read the cited name `{word}`");
            }
            let found = sources.iter().any(|source| defines(source, name));
            assert!(found, "{decision}: `{word}` is not defined in any of {cited:?}");
        }
    }
}

/// The non-test part of a source file: everything before its `#[cfg(test)]` module.
fn shipped(source: &str) -> &str {
    source.split("#[cfg(test)]").next().unwrap_or(source)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn only_the_clock_module_reads_the_system_time_or_sleeps_on_it() {
    let clock = root().join("runtime/engine/src/clock.rs");
    let banned =
        ["SystemTime::now", "tokio::time::sleep", "tokio::time::timeout", "thread::sleep", "time::sleep("];
    for dir in ["runtime/engine/src", "runtime/daemon/src", "runtime/cluster/src"] {
        for file in rust_files(&root().join(dir)) {
            // Test modules (declared `#[cfg(test)] mod tests;`) and the test rigs wait as tests do.
            if file == clock || file.ends_with("testing.rs") || file.ends_with("tests.rs") {
                continue;
            }
            let source = read(&file);
            for word in banned {
                assert!(
                    !shipped(&source).contains(word),
                    "{} uses {word}: deliberate waits and the time go through agentd_engine::clock",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn the_binary_prints_only_through_its_one_writer() {
    // `say!` (made safe for a terminal) and `raw!` (for `--json`) in `src/print.rs`: a model's text
    // printed with `println!` could act on the terminal, and a closed stdout would panic.
    for file in rust_files(&root().join("src")) {
        let source = read(&file);
        for word in ["println!", "print!(", "eprintln!", "eprint!(", "std::io::stdout()"] {
            let allowed = file.ends_with("print.rs") && word == "std::io::stdout()";
            assert!(
                allowed || !source.contains(word),
                "{} uses {word}: print through say!/raw!",
                file.display()
            );
        }
    }
}

#[test]
fn every_type_has_one_path_no_library_re_exports_another_crates_items() {
    // A crate may gather its own modules' items at its root; it never hands out another crate's
    // (`pub use agentd_protocol::Role` in `agents` made one type reachable by two paths).
    for krate in [
        "protocol",
        "policies",
        "evidence",
        "agents",
        "runtime/providers",
        "runtime/engine",
        "runtime/cluster",
        "runtime/daemon",
        "runtime/client",
        "src",
    ] {
        let dir = if krate == "src" { root().join("src") } else { root().join(krate).join("src") };
        for file in rust_files(&dir) {
            for (n, line) in read(&file).lines().enumerate() {
                let line = line.trim_start();
                let foreign = line.strip_prefix("pub use ").is_some_and(|path| {
                    !path.starts_with("crate::")
                        && !path.starts_with("self::")
                        && !path.starts_with("super::")
                        && path.contains("::")
                        && !is_own_module(&file, path)
                });
                assert!(
                    !foreign,
                    "{}:{}: `{line}` re-exports another crate's item; use it by its own path",
                    file.display(),
                    n + 1
                );
            }
        }
    }
}

/// Whether `path` of a `pub use` in `file` starts at one of the file's own modules (`fit::Fit` in
/// `fitter/mod.rs`), not at a crate.
fn is_own_module(file: &Path, path: &str) -> bool {
    let first = path.split("::").next().unwrap_or_default();
    let dir = file.parent().unwrap();
    let here = if file.ends_with("mod.rs") || file.ends_with("lib.rs") || file.ends_with("main.rs") {
        dir.to_path_buf()
    } else {
        dir.join(file.file_stem().unwrap())
    };
    here.join(format!("{first}.rs")).exists() || here.join(first).join("mod.rs").exists()
}

/// The modules of a crate's `src/`, each with the crate modules it uses (`crate::a::b` → `a`, or
/// `a::b` for a directory module's children).
fn module_uses(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let module_of = |file: &Path| -> String {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        match parts.as_slice() {
            [only] if only == "lib" || only == "main" => String::new(),
            [dirs @ .., last] if last == "mod" => dirs.join("::"),
            all => all.join("::"),
        }
    };
    let files = rust_files(src);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut uses = BTreeMap::new();
    for file in &files {
        let me = module_of(file);
        let source = read(file);
        let mut used = BTreeSet::new();
        for line in shipped(&source).lines() {
            let line = line.trim();
            if line.starts_with("//") {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                let path: String = rest[at + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                // The longest module prefix of the path.
                let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                for n in (1..=segments.len()).rev() {
                    let candidate = segments[..n].join("::");
                    if modules.contains(&candidate) {
                        if candidate != me && !me.starts_with(&format!("{candidate}::")) {
                            used.insert(candidate);
                        }
                        break;
                    }
                }
                rest = &rest[at + 7..];
            }
        }
        uses.insert(me, used);
    }
    uses
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    for krate in ["protocol", "policies", "evidence", "agents"].into_iter().chain(RUNTIME.iter().copied()) {
        let uses = module_uses(&root().join(krate).join("src"));
        // Depth-first search for a cycle.
        fn visit<'a>(
            m: &'a str,
            uses: &'a BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) -> Option<Vec<String>> {
            if let Some(at) = path.iter().position(|p| *p == m) {
                return Some(path[at..].iter().map(|s| s.to_string()).chain([m.to_string()]).collect());
            }
            if !done.insert(m) {
                return None;
            }
            path.push(m);
            for next in uses.get(m).into_iter().flatten() {
                if let Some(cycle) = visit(next, uses, path, done) {
                    return Some(cycle);
                }
            }
            path.pop();
            None
        }
        let mut done = BTreeSet::new();
        for m in uses.keys() {
            if let Some(cycle) = visit(m, &uses, &mut Vec::new(), &mut done) {
                panic!("{krate}: modules import each other in a circle: {}", cycle.join(" → "));
            }
        }
    }
}

#[test]
fn test_and_fuzz_support_ships_in_no_release_library() {
    for (lib, module, gate) in [
        ("runtime/engine/src/lib.rs", "pub mod memory;", "#[cfg(any(test, feature = \"testing\"))]"),
        ("runtime/engine/src/lib.rs", "mod testing;", "#[cfg(test)]"),
        ("runtime/daemon/src/lib.rs", "pub mod fuzzing;", "#[cfg(feature = \"fuzzing\")]"),
        ("runtime/daemon/src/lib.rs", "mod testing;", "#[cfg(test)]"),
        ("runtime/providers/src/lib.rs", "pub mod fuzzing;", "#[cfg(feature = \"fuzzing\")]"),
    ] {
        let source = read(&root().join(lib));
        let at = source.find(module).unwrap_or_else(|| panic!("{lib} declares {module}"));
        let before = &source[..at];
        assert!(
            before.lines().rev().take(3).any(|l| l.trim() == gate),
            "{lib}: {module} is not behind {gate}"
        );
    }
    // No release build enables a test or fuzz feature: only dev-dependencies and the fuzz crate do.
    for manifest in [
        "Cargo.toml",
        "runtime/daemon/Cargo.toml",
        "runtime/engine/Cargo.toml",
        "runtime/providers/Cargo.toml",
    ] {
        let text = read(&root().join(manifest));
        let normal = text.split("[dev-dependencies]").next().unwrap();
        for feature in ["\"testing\"", "\"fuzzing\""] {
            let uses = normal.lines().filter(|l| l.contains("features") && l.contains(feature)).count();
            assert_eq!(uses, 0, "{manifest} enables {feature} outside its dev-dependencies");
        }
    }
}
