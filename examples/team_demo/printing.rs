//! What the demo prints besides the events: section rules, a minimal line diff, the tail of a
//! log, the CLI's standard output, and text without its terminal colours.

use crate::common::{Daemon, Result};
use std::path::Path;

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

pub fn section(title: &str) {
    println!("\n── {title} {}", "─".repeat(60usize.saturating_sub(title.chars().count())));
}

pub fn cli_stdout(d: &Daemon, args: &[&str]) -> Result<String> {
    let out = d.cli(args)?;
    if !out.status.success() {
        return Err(format!(
            "agentd {} exited with {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A minimal line diff (longest common subsequence; the files are small): changed lines only, numbered.
pub fn print_diff(before: &str, after: &str) {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut changed) = (0, 0, false);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            println!("{:>4} - {}", i + 1, a[i]);
            i += 1;
            changed = true;
        } else {
            println!("{:>4} + {}", j + 1, b[j]);
            j += 1;
            changed = true;
        }
    }
    if !changed {
        println!("(no change)");
    }
}
