//! `search`: ripgrep's behaviour as a model expects it, confined to the workspace.
//!
//! The pattern is a regular expression in the `regex` crate's syntax — ripgrep's (`fixed_strings`
//! searches for the text as it is; `case_insensitive` ignores case). Lines are printed as
//! `rg --line-number --no-heading --sort path` prints them: `path:line:text` for a matching line,
//! `path-line-text` for a context line, `--` between groups that are not adjacent. Like ripgrep,
//! the walk respects `.gitignore`, `.ignore` and `.rgignore` files (of the workspace's directories
//! from the root down: a subdirectory is searched under the rules of its parents), skips hidden
//! files and directories and binary files (a NUL byte), and takes `glob`s that include (`*.rs`) or
//! exclude (`!*.md`) files and override the ignore files; `hidden` and `no_ignore` turn the skipping
//! off. A `.git` directory is never searched. A path named explicitly is searched even when ignored.
//!
//! **Confinement.** The walk is the one of the other file tools: every directory is read through a
//! descriptor opened beneath the workspace's root, and every entry is opened relative to its
//! directory's descriptor with `O_NOFOLLOW`, so a symlink is never followed (and never reported; a
//! linked file is found under its real name), an entry swapped for a symlink mid-walk is skipped,
//! and hard-linked files are skipped. The ignore files are read the same way (a symlinked or
//! hard-linked ignore file is not read); the `ignore` crate only matches paths against them, it
//! opens nothing — no `.gitignore` above the workspace, no global git excludes.
//!
//! **Caps.** At most `max_results` matching lines (default [`DEFAULT_MAX_RESULTS`], at most
//! [`MAX_MAX_RESULTS`]) and [`MAX_SHOWN_BYTES`] of output are shown; lines are cut at
//! [`MAX_LINE_CHARS`] characters. The walk goes on past the cap, so the footer counts every matching
//! line and file, and the complete output (up to the context's `max_output_bytes`) goes with the
//! result as its [`Overflow`]: the runtime stores it as evidence and says how to read on from the
//! first line not shown.

use super::context::ToolContext;
use super::listing::entries_of;
use super::outcome::{Overflow, ToolOutcome};
use crate::error::ToolError;
use crate::workspace::{open_entry, refuse_hard_link, Workspace};
use agentd_policies::args::Args;
use agentd_protocol::text::truncate_chars;
use agentd_protocol::ToolName;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::Match;
use regex::bytes::{Regex, RegexBuilder};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{FileType, Stat};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Matching lines shown when the call names no `max_results`.
pub(crate) const DEFAULT_MAX_RESULTS: usize = 100;
/// The most matching lines one result may show.
pub(crate) const MAX_MAX_RESULTS: usize = 1000;
/// The most context lines before and after a match.
pub(crate) const MAX_CONTEXT: usize = 10;
/// Bytes of output a result shows, at most; the rest goes to the overflow.
pub(crate) const MAX_SHOWN_BYTES: usize = 32 << 10;
/// Characters of a line shown; a longer line is cut and ends with `…`.
pub(crate) const MAX_LINE_CHARS: usize = 500;
/// Bytes of one line kept for matching; the rest of a longer line is read and dropped.
const MAX_LINE_BYTES: usize = 1 << 20;
/// A NUL byte in this many leading bytes marks a file as binary.
const BINARY_SNIFF_BYTES: usize = 8192;
/// The ignore files of a directory, lowest precedence first (ripgrep's order).
const IGNORE_FILES: [&str; 3] = [".gitignore", ".ignore", ".rgignore"];
/// An ignore file larger than this is not read.
const MAX_IGNORE_FILE_BYTES: u64 = 1 << 20;

/// `search`'s arguments, checked: the pattern compiles, the globs parse, the numbers are in range.
#[derive(Debug)]
pub(crate) struct SearchArgs<'a> {
    pub(crate) pattern: &'a str,
    pub(crate) path: &'a str,
    regex: Regex,
    globs: Vec<&'a str>,
    context: usize,
    max_results: usize,
    hidden: bool,
    no_ignore: bool,
}

impl<'a> SearchArgs<'a> {
    pub(crate) fn parse(args: &'a Args) -> Result<SearchArgs<'a>, ToolError> {
        let invalid =
            |message: String| ToolError::InvalidArguments { tool: ToolName::Search.into(), message };
        let pattern = args.str("pattern")?;
        if pattern.is_empty() {
            return Err(invalid("`pattern` must not be empty".into()));
        }
        if pattern.contains('\n') {
            return Err(invalid("`pattern` contains a line break; search matches one line at a time".into()));
        }
        let fixed = args.opt_bool("fixed_strings")?.unwrap_or(false);
        let source = if fixed { regex::escape(pattern) } else { pattern.to_string() };
        let regex = RegexBuilder::new(&source)
            .case_insensitive(args.opt_bool("case_insensitive")?.unwrap_or(false))
            .build()
            .map_err(|e| {
                invalid(format!(
                    "`pattern` is not a valid regular expression: {e}\n(set \"fixed_strings\": true to \
                     search for the text as it is)"
                ))
            })?;
        let context = match args.opt_u64("context")? {
            None => 0,
            Some(n) if n as usize <= MAX_CONTEXT => n as usize,
            Some(n) => return Err(invalid(format!("`context` must be at most {MAX_CONTEXT}, got {n}"))),
        };
        let max_results = match args.opt_u64("max_results")? {
            None => DEFAULT_MAX_RESULTS,
            Some(n) if (1..=MAX_MAX_RESULTS as u64).contains(&n) => n as usize,
            Some(n) => {
                return Err(invalid(format!("`max_results` must be from 1 to {MAX_MAX_RESULTS}, got {n}")))
            }
        };
        let globs = args.opt_strs("glob")?;
        // Checked here, against any root: a bad glob is bad arguments, before anything is read.
        overrides(Path::new("/"), &globs)?;
        Ok(SearchArgs {
            pattern,
            path: args.opt_str("path")?.unwrap_or("."),
            regex,
            globs,
            context,
            max_results,
            hidden: args.opt_bool("hidden")?.unwrap_or(false),
            no_ignore: args.opt_bool("no_ignore")?.unwrap_or(false),
        })
    }
}

/// The globs as an override matcher rooted at `root`; a glob that does not parse is named.
fn overrides(root: &Path, globs: &[&str]) -> Result<Override, ToolError> {
    let invalid = |message: String| ToolError::InvalidArguments { tool: ToolName::Search.into(), message };
    let mut builder = OverrideBuilder::new(root);
    for glob in globs {
        builder.add(glob).map_err(|e| invalid(format!("bad glob {glob:?}: {e}")))?;
    }
    builder.build().map_err(|e| invalid(format!("bad glob: {e}")))
}

pub(crate) fn search(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let a = SearchArgs::parse(args)?;
    let ws = &ctx.workspace;
    let start = ws.open(a.path)?;
    let mut out = Output::new(a.max_results, ctx.max_output_bytes);
    let mut stats = Stats::default();
    match start.kind() {
        FileType::RegularFile => {
            if search_file(start.fd, &start.shown, &a, &mut out, &mut stats) == Searched::Binary {
                return Err(ToolError::Failed(format!(
                    "{} is a binary file (it holds a NUL byte); search reads text files",
                    a.path
                )));
            }
        }
        FileType::Directory => walk(ws, start.fd, &start.shown, &start.parts, &a, &mut out, &mut stats)?,
        _ => return Err(ToolError::Failed(format!("{} is not a file or a directory", a.path))),
    }
    Ok(out.finish(&a, &stats))
}

/// What the walk counted.
#[derive(Debug, Default)]
struct Stats {
    /// Matching lines, shown or not.
    matches: u64,
    /// Files with at least one matching line.
    files_matched: u64,
    /// Files read.
    files: u64,
    /// Files skipped as binary (or cut short at binary data).
    binary: u64,
    /// Entries skipped as hidden, ignored or outside the globs.
    skipped: u64,
}

/// The ignore rules of one directory and of every directory above it up to the root: the innermost
/// rule that matches decides, as in git.
/// (`crate::copies` walks a workspace under the same rules.)
pub(crate) struct Rules {
    pub(crate) here: Option<Gitignore>,
    pub(crate) parent: Option<Rc<Rules>>,
}

impl Rules {
    pub(crate) fn matched(&self, abs: &Path, is_dir: bool) -> Match<()> {
        let mut level = Some(self);
        while let Some(rules) = level {
            if let Some(gi) = &rules.here {
                match gi.matched(abs, is_dir) {
                    Match::None => {}
                    Match::Ignore(_) => return Match::Ignore(()),
                    Match::Whitelist(_) => return Match::Whitelist(()),
                }
            }
            level = rules.parent.as_deref();
        }
        Match::None
    }
}

/// The rules of the ignore files in the open directory `dir` (whose path is `abs`), each read
/// relative to the descriptor, no-follow; `None` when it has none.
pub(crate) fn ignore_rules(dir: &OwnedFd, abs: &Path) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(abs);
    let mut any = false;
    for name in IGNORE_FILES {
        let Some(text) = read_ignore_file(dir, name) else { continue };
        any = true;
        for line in text.lines() {
            // A line that is not a valid glob is passed over, as git and ripgrep do.
            let _ = builder.add_line(None, line);
        }
    }
    if !any {
        return None;
    }
    builder.build().ok()
}

fn read_ignore_file(dir: &OwnedFd, name: &str) -> Option<String> {
    let (fd, stat) = open_entry(dir.as_fd(), OsStr::new(name)).ok()?;
    let size = u64::try_from(stat.st_size).ok()?;
    if !is_regular(&stat) || refuse_hard_link(name, &stat).is_err() || size > MAX_IGNORE_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    fs::File::from(fd).take(MAX_IGNORE_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn is_regular(stat: &Stat) -> bool {
    FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
}

/// A directory being read: its descriptor, its path for display and for matching, its rules, and
/// its entries still to visit (sorted, last first).
struct Level {
    dir: OwnedFd,
    shown: String,
    abs: PathBuf,
    rules: Rc<Rules>,
    entries: Vec<(OsString, FileType)>,
}

/// The entries of `dir`, sorted by name and reversed (so popping visits them in order).
fn sorted_entries(shown: &str, dir: &OwnedFd) -> Vec<(OsString, FileType)> {
    let mut entries = entries_of(shown, dir).unwrap_or_default();
    entries.sort_by(|a, b| b.0.cmp(&a.0));
    entries
}

/// Visits the files under the open directory `start` (at `parts` from the root) depth first in
/// sorted order, as ripgrep's `--sort path` does, and searches each one that is not skipped. One
/// descriptor is held per level being read, and one file at a time.
fn walk(
    ws: &Workspace,
    start: OwnedFd,
    shown: &str,
    parts: &[OsString],
    a: &SearchArgs,
    out: &mut Output,
    stats: &mut Stats,
) -> Result<(), ToolError> {
    let root = ws.root();
    let globs = overrides(root, &a.globs)?;
    let abs_of = |parts: &[OsString]| parts.iter().fold(root.to_path_buf(), |p, part| p.join(part));
    // The rules of the start's ancestors, from the root down: a subdirectory is searched under them.
    let mut rules = Rc::new(Rules { here: None, parent: None });
    if !a.no_ignore {
        for depth in 0..parts.len() {
            let Ok(dir) = ws.open_exact(&parts[..depth]) else { continue };
            let here = ignore_rules(&dir.fd, &abs_of(&parts[..depth]));
            rules = Rc::new(Rules { here, parent: Some(rules) });
        }
        let here = ignore_rules(&start, &abs_of(parts));
        rules = Rc::new(Rules { here, parent: Some(rules) });
    }
    let entries = sorted_entries(shown, &start);
    let mut stack = vec![Level { dir: start, shown: shown.to_string(), abs: abs_of(parts), rules, entries }];
    while let Some(level) = stack.last_mut() {
        let Some((name, kind)) = level.entries.pop() else {
            stack.pop();
            continue;
        };
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::RegularFile => false,
            // Symlinks are never followed nor reported; sockets, FIFOs and devices are not text.
            _ => continue,
        };
        let abs = level.abs.join(&name);
        if !included(&name, &abs, is_dir, &level.rules, &globs, a) {
            stats.skipped += 1;
            continue;
        }
        let shown = join(&level.shown, &name);
        // Opened no-follow relative to the directory: an entry swapped for a symlink is skipped.
        let Ok((fd, stat)) = open_entry(level.dir.as_fd(), &name) else { continue };
        if is_dir {
            if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
                continue;
            }
            let rules = if a.no_ignore {
                level.rules.clone()
            } else {
                Rc::new(Rules { here: ignore_rules(&fd, &abs), parent: Some(level.rules.clone()) })
            };
            let entries = sorted_entries(&shown, &fd);
            stack.push(Level { dir: fd, shown, abs, rules, entries });
        } else if is_regular(&stat) && refuse_hard_link(&shown, &stat).is_ok() {
            search_file(fd, &shown, a, out, stats);
        }
    }
    Ok(())
}

/// Whether the walk takes an entry: never a `.git` directory; then the globs decide if one
/// matches; then the ignore files; then a hidden name is skipped unless `hidden`.
fn included(name: &OsStr, abs: &Path, is_dir: bool, rules: &Rules, globs: &Override, a: &SearchArgs) -> bool {
    if is_dir && name == ".git" {
        return false;
    }
    match globs.matched(abs, is_dir) {
        Match::Ignore(_) => return false,
        Match::Whitelist(_) => return true,
        Match::None => {}
    }
    if !a.no_ignore {
        match rules.matched(abs, is_dir) {
            Match::Ignore(()) => return false,
            Match::Whitelist(()) => return true,
            Match::None => {}
        }
    }
    a.hidden || !name.as_bytes().starts_with(b".")
}

fn join(dir: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if dir == "." {
        name.into_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// How a file's search went.
#[derive(Debug, PartialEq, Eq)]
enum Searched {
    /// Read as text (to its end, or to binary data further on).
    Text,
    /// A NUL byte near the start: binary, not searched.
    Binary,
}

/// Searches one open file line by line (streaming: any size), writing its matches and context.
fn search_file(fd: OwnedFd, shown: &str, a: &SearchArgs, out: &mut Output, stats: &mut Stats) -> Searched {
    stats.files += 1;
    let file = stats.files;
    let mut reader = BufReader::with_capacity(64 << 10, fs::File::from(fd));
    match reader.fill_buf() {
        Ok(head) if head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0) => {
            stats.binary += 1;
            return Searched::Binary;
        }
        Ok(_) => {}
        Err(_) => return Searched::Text,
    }
    let mut before: VecDeque<(u64, String)> = VecDeque::new();
    let mut after = 0usize;
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut matched = false;
    while let Ok(true) = next_line(&mut reader, &mut line) {
        number += 1;
        if line.contains(&0) {
            // Binary data after text: what matched before it stands, the rest is not searched.
            stats.binary += 1;
            break;
        }
        let text = &line[..];
        if a.regex.is_match(text) {
            stats.matches += 1;
            if !matched {
                matched = true;
                stats.files_matched += 1;
            }
            out.start_match();
            let first = before.front().map_or(number, |(n, _)| *n);
            if a.context > 0 && out.written && out.last != (file, first.saturating_sub(1)) {
                out.line("--".to_string(), false);
            }
            for (n, context) in before.drain(..) {
                out.line(format!("{shown}-{n}-{context}"), false);
            }
            out.line(format!("{shown}:{number}:{}", render(text)), true);
            out.last = (file, number);
            after = a.context;
        } else if after > 0 {
            out.line(format!("{shown}-{number}-{}", render(text)), false);
            out.last = (file, number);
            after -= 1;
        } else if a.context > 0 {
            before.push_back((number, render(text)));
            if before.len() > a.context {
                before.pop_front();
            }
        }
    }
    Searched::Text
}

/// A line as shown: UTF-8 (invalid bytes replaced), at most [`MAX_LINE_CHARS`] characters.
fn render(line: &[u8]) -> String {
    truncate_chars(&String::from_utf8_lossy(line), MAX_LINE_CHARS)
}

/// Reads the next line into `line` without its `\n` (or `\r\n`), keeping at most
/// [`MAX_LINE_BYTES`] of it. False at the end of the file (or on a read error).
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<bool> {
    line.clear();
    let mut any = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        any = true;
        let (chunk, used, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        reader.consume(used);
        if ended {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(any)
}

/// The output: what the result shows (capped in matches and bytes) and the complete output (capped
/// only by the memory bound), the first a prefix of the second in whole lines.
struct Output {
    shown: String,
    shown_lines: u64,
    shown_matches: usize,
    showing: bool,
    max_results: usize,
    full: String,
    full_lines: u64,
    full_cut: bool,
    max_full: usize,
    /// Whether any line was written, and the file and line number of the last one.
    written: bool,
    last: (u64, u64),
}

impl Output {
    fn new(max_results: usize, max_full: usize) -> Output {
        Output {
            shown: String::new(),
            shown_lines: 0,
            shown_matches: 0,
            showing: true,
            max_results,
            full: String::new(),
            full_lines: 0,
            full_cut: false,
            max_full,
            written: false,
            last: (0, 0),
        }
    }

    /// A new matching line is about to be written: past `max_results`, nothing more is shown.
    fn start_match(&mut self) {
        if self.shown_matches >= self.max_results {
            self.showing = false;
        }
    }

    fn line(&mut self, text: String, is_match: bool) {
        self.written = true;
        if self.showing && self.shown_lines > 0 && self.shown.len() + text.len() + 1 > MAX_SHOWN_BYTES {
            self.showing = false;
        }
        if self.showing {
            self.shown.push_str(&text);
            self.shown.push('\n');
            self.shown_lines += 1;
            if is_match {
                self.shown_matches += 1;
            }
        }
        if !self.full_cut {
            if self.full.len() + text.len() + 1 > self.max_full {
                self.full_cut = true;
            } else {
                self.full.push_str(&text);
                self.full.push('\n');
                self.full_lines += 1;
            }
        }
    }

    fn finish(mut self, a: &SearchArgs, stats: &Stats) -> ToolOutcome {
        if stats.matches == 0 {
            let mut content = format!("no matches for {:?} in {}", a.pattern, a.path);
            let mut notes = Vec::new();
            if stats.skipped > 0 {
                notes.push(format!(
                    "{} hidden or ignored entries were not searched (\"hidden\": true and \"no_ignore\": \
                     true search them)",
                    stats.skipped
                ));
            }
            if stats.binary > 0 {
                notes.push(format!("{} binary files were not searched", stats.binary));
            }
            if !notes.is_empty() {
                content.push_str(&format!(" ({})", notes.join("; ")));
            }
            return ToolOutcome::ok(content);
        }
        if self.shown_lines == self.full_lines && !self.full_cut {
            self.shown.pop();
            return ToolOutcome::ok(self.shown);
        }
        let files = if stats.files_matched == 1 { "file" } else { "files" };
        let mut footer = format!(
            "[search: {} matching lines in {} {files}; the first {} shown",
            stats.matches, stats.files_matched, self.shown_matches
        );
        if self.shown_matches < a.max_results {
            footer.push_str(&format!(" (output shown is capped at {} KiB)", MAX_SHOWN_BYTES >> 10));
        } else {
            footer.push_str(&format!(" (max_results {})", a.max_results));
        }
        footer.push('.');
        if stats.binary > 0 {
            footer.push_str(&format!(" {} binary files were not searched.", stats.binary));
        }
        if self.full_cut {
            footer.push_str(&format!(
                " The complete output stops at {} bytes: narrow the path, the glob or the pattern.",
                self.max_full
            ));
        }
        footer.push(']');
        let content = format!("{}{footer}", self.shown);
        ToolOutcome {
            ok: true,
            content,
            complete: !self.full_cut,
            overflow: Some(Overflow { full: self.full, shown_lines: self.shown_lines }),
        }
    }
}
