//! ARCHITECTURE.md's claims that the compiler cannot hold, checked.
//!
//! - **The rooms' dependencies** (`cargo metadata`): which agentd crates each crate may depend on,
//!   and the crates that must stay out of a room's whole dependency tree.
//! - **The codemap is true**: the read-first paths exist; each crate's paragraph states an
//!   invariant and names the tests that hold it, and those tests exist; every file and function the
//!   "Where is X decided" table cites exists.
//! - **Time**: only the files the **Time** paragraph names read the wall or the monotonic clock or
//!   sleep on one (`Instant::now` included).
//! - **No module knot**: within each crate no file uses a module that, through others, uses it
//!   back — `super::`, `self::` and child-module paths counted, a child and its parent included.
//! - **Test and fuzz support stays out of release builds**: every `tests`, `*_tests`, `testing` and
//!   `fuzzing` module (and the engine's in-memory storage) is behind a `cfg` gate, and no release
//!   manifest enables a test or fuzz feature.
//! - **One path a type**: no library re-exports another crate's items; **one writer**: the binary
//!   prints only through `say!`/`raw!`.

// A test: a failed expectation panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Every crate's `src/`, the binary's included.
const SOURCES: [&str; 10] = [
    "protocol/src",
    "policies/src",
    "evidence/src",
    "agents/src",
    "runtime/providers/src",
    "runtime/engine/src",
    "runtime/cluster/src",
    "runtime/daemon/src",
    "runtime/client/src",
    "src",
];

/// Whether a file under `src/` is a test module of its own (`tests.rs`, `sandbox_tests.rs`) or a
/// test rig (`testing.rs`): code that waits as tests do.
fn is_test_file(file: &Path) -> bool {
    let name = file.file_name().unwrap().to_string_lossy();
    name.ends_with("tests.rs") || name == "testing.rs"
}

/// The backticked paths of the ARCHITECTURE.md paragraph that starts with `**{title}**`.
fn paragraph_paths(title: &str) -> BTreeSet<String> {
    let text = read(&root().join("ARCHITECTURE.md"));
    let start =
        text.find(&format!("\n**{title}**")).unwrap_or_else(|| panic!("ARCHITECTURE.md has no **{title}**"));
    let paragraph = text[start..].split("\n\n").next().unwrap();
    ticked(paragraph).into_iter().filter(|w| is_path(w)).collect()
}

#[test]
fn the_read_first_list_names_paths_that_exist() {
    let text = read(&root().join("ARCHITECTURE.md"));
    let start = text.find("**Read first**").expect("a read-first list");
    let paragraph = text[start..].split("\n\n").next().unwrap();
    let paths: Vec<String> = ticked(paragraph).into_iter().filter(|w| w.contains('/')).collect();
    assert!(paths.len() >= 5, "{paths:?}");
    for path in paths {
        assert!(root().join(&path).exists(), "read first: {path} does not exist");
    }
}

#[test]
fn each_crate_has_an_invariant_held_by_a_test_that_exists() {
    let text = read(&root().join("ARCHITECTURE.md"));
    let codemap = text.split("## Codemap").nth(1).unwrap().split("\n## ").next().unwrap();
    let mut crates = 0;
    for paragraph in codemap.split("\n\n").filter(|p| p.starts_with("**`")) {
        let name = ticked(paragraph).into_iter().next().unwrap();
        if name == "tests/" {
            continue;
        }
        crates += 1;
        let (claim, held) = paragraph
            .split_once("*Invariant:*")
            .and_then(|(_, rest)| rest.split_once("Held by"))
            .unwrap_or_else(|| panic!("{name}: no *Invariant:* … Held by …"));
        assert!(!claim.trim().is_empty(), "{name}: the invariant says nothing");
        let mut file: Option<String> = None;
        let mut tests = 0;
        for word in ticked(held) {
            if is_path(&word) {
                assert!(root().join(&word).is_file(), "{name}: {word} does not exist");
                file = Some(word);
                continue;
            }
            let file = file.as_ref().unwrap_or_else(|| panic!("{name}: `{word}` before any file"));
            let source = read(&root().join(file));
            let defined =
                [format!("fn {word}("), format!("fn {word}<")].iter().any(|f| source.contains(f.as_str()));
            assert!(defined, "{name}: the test `{word}` is not in {file}");
            tests += 1;
        }
        assert!(tests > 0, "{name}: no test holds its invariant");
    }
    assert!(crates >= 10, "every crate has its paragraph: {crates}");
}

#[test]
fn the_time_is_read_only_where_the_codemap_says() {
    // The wall clock, the monotonic clock, and waits on either: the daemon's own go through
    // `agentd_engine::clock` (manual in tests); the crates below the engine read real time where
    // ARCHITECTURE.md's **Time** paragraph names them, each for a reason given there.
    let words = [
        "SystemTime::now",
        "Instant::now",
        "tokio::time::sleep",
        "tokio::time::timeout",
        "thread::sleep",
        "time::sleep(",
    ];
    let mut readers = BTreeSet::new();
    for dir in SOURCES {
        for file in rust_files(&root().join(dir)) {
            if is_test_file(&file) {
                continue;
            }
            let code = code_only(shipped(&read(&file)));
            if words.iter().any(|w| code.contains(w)) {
                readers.insert(file.strip_prefix(root()).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(
        readers,
        paragraph_paths("Time"),
        "the files that read the time, and the ones ARCHITECTURE.md names"
    );
}

#[test]
fn every_module_that_serves_only_tests_or_fuzzers_is_behind_a_gate() {
    // All of them, found by name: `tests`, `*_tests`, `testing` and `fuzzing` modules, and the
    // engine's in-memory storage (a backend for tests only).
    let mut found = 0;
    for dir in SOURCES {
        for file in rust_files(&root().join(dir)) {
            let source = read(&file);
            let lines: Vec<&str> = source.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                let decl = line.trim_start().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
                let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) else {
                    continue;
                };
                let engine_memory = file.ends_with("runtime/engine/src/lib.rs") && name == "memory";
                let support =
                    name == "tests" || name.ends_with("_tests") || name == "testing" || name == "fuzzing";
                if !(support || engine_memory) {
                    continue;
                }
                found += 1;
                let gated = lines[n.saturating_sub(3)..n].iter().any(|l| {
                    let l = l.trim();
                    l.starts_with("#[cfg(")
                        && (l.contains("test")
                            || l.contains("feature = \"fuzzing\"")
                            || l.contains("feature = \"testing\""))
                });
                assert!(
                    gated,
                    "{}:{}: `{}` serves tests or fuzzers and is not behind a cfg gate",
                    file.display(),
                    n + 1,
                    line.trim()
                );
            }
        }
    }
    assert!(found >= 10, "the test support modules are found: {found}");
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
    for dir in SOURCES {
        let dir = root().join(dir);
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

/// A module's path from its file: `a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` is `""`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.as_slice() {
        [only] if only == "lib" || only == "main" => String::new(),
        [dirs @ .., last] if last == "mod" => dirs.join("::"),
        all => all.join("::"),
    }
}

/// `source` without comments and string literals: what is left names only code.
fn code_only(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        // A module's declaration is not a use of it.
        let declared = line.trim_start().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
        if declared.starts_with("mod ") && declared.ends_with(';') {
            out.push('\n');
            continue;
        }
        let mut in_string = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if in_string => {
                    chars.next();
                }
                '"' => in_string = !in_string,
                '/' if !in_string && chars.peek() == Some(&'/') => break,
                _ if in_string => {}
                _ => out.push(c),
            }
        }
        out.push('\n');
    }
    out
}

/// Every path written in `code`, with brace groups spread (`super::{a::B, C}` → `super::a::B`,
/// `super::C`), as lists of segments.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    fn ident(chars: &[char], at: &mut usize) -> Option<String> {
        let start = *at;
        while *at < chars.len() && (chars[*at].is_alphanumeric() || chars[*at] == '_') {
            *at += 1;
        }
        (*at > start).then(|| chars[start..*at].iter().collect())
    }
    fn skip_ws(chars: &[char], at: &mut usize) {
        while *at < chars.len() && chars[*at].is_whitespace() {
            *at += 1;
        }
    }
    /// Reads `ident(::ident)*(::{…})?` from `at`, pushing each full path onto `out`.
    fn path(chars: &[char], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut segments = prefix.to_vec();
        loop {
            skip_ws(chars, at);
            if chars.get(*at) == Some(&'{') {
                *at += 1;
                loop {
                    skip_ws(chars, at);
                    match chars.get(*at) {
                        None => return,
                        Some('}') => {
                            *at += 1;
                            return;
                        }
                        Some(',') => *at += 1,
                        Some(_) => {
                            let before = *at;
                            path(chars, at, &segments, out);
                            if *at == before {
                                *at += 1;
                            }
                        }
                    }
                }
            }
            match ident(chars, at) {
                Some(name) => segments.push(name),
                None => break,
            }
            if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
                *at += 2;
            } else {
                break;
            }
        }
        if segments.len() > prefix.len() {
            out.push(segments);
        }
    }
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let starts = (c.is_alphabetic() || c == '_')
            && (at == 0
                || !(chars[at - 1].is_alphanumeric() || chars[at - 1] == '_' || chars[at - 1] == ':'));
        if starts {
            let before = at;
            path(&chars, &mut at, &[], &mut out);
            if at == before {
                at += 1;
            }
        } else {
            at += 1;
        }
    }
    out
}

/// The modules of a crate's `src/`, each with the crate modules it uses: through `crate::`,
/// `super::` and `self::` paths and through the names of its own child modules — a child using its
/// parent's items counts as much as a parent using its child's. The crate root (`lib.rs`, which
/// only gathers) is left out.
fn module_uses(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let join = |base: &[String]| base.join("::");
    let mut uses = BTreeMap::new();
    for file in &files {
        let me = module_of(src, file);
        if me.is_empty() {
            continue;
        }
        let here: Vec<String> = me.split("::").map(str::to_string).collect();
        let mut used = BTreeSet::new();
        for segments in paths_in(&code_only(shipped(&read(file)))) {
            // Where the path starts.
            let (mut base, rest): (Vec<String>, &[String]) = match segments[0].as_str() {
                "crate" => (Vec::new(), &segments[1..]),
                "self" => (here.clone(), &segments[1..]),
                "super" => {
                    let ups = segments.iter().take_while(|s| *s == "super").count();
                    (here[..here.len().saturating_sub(ups)].to_vec(), &segments[ups..])
                }
                first => {
                    let mut child = here.clone();
                    child.push(first.to_string());
                    // A bare name is a path only with `::` after it (`fleet::pull`).
                    if segments.len() < 2 || !modules.contains(&join(&child)) {
                        continue;
                    }
                    (here.clone(), &segments[..])
                }
            };
            // `pub(super)`, `pub(crate)`: a visibility, not a use.
            if rest.is_empty() {
                continue;
            }
            // The longest module along the path; an item's module is where the path stops being
            // one.
            for s in rest {
                let mut next = base.clone();
                next.push(s.clone());
                if !modules.contains(&join(&next)) {
                    break;
                }
                base = next;
            }
            let target = join(&base);
            if target != me && !target.is_empty() {
                used.insert(target);
            }
        }
        uses.insert(me, used);
    }
    uses
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    for krate in SOURCES {
        let uses = module_uses(&root().join(krate));
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
