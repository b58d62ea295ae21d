//! One tool call of the coder's and its result, drawn in realistic proportions: file reads (numbered
//! source), searches, commands (most succeed; a few failing ones stay unresolved), edits, writes,
//! directory listings and evidence reads (JSON).

use crate::gen::Gen;
use crate::words::{COMMANDS, TYPES};
use std::fmt::Write as _;

impl Gen {
    /// One tool call and its result: (tool, JSON arguments, result content, is_error).
    pub fn tool_exchange(&mut self) -> (&'static str, String, String, bool) {
        match self.below(20) {
            0..=6 => {
                let path = self.path();
                let args =
                    serde_json::json!({"path": path, "offset": self.below(300), "limit": 400}).to_string();
                (
                    "read_file",
                    args,
                    {
                        let n = 1_500 + self.below(14_000);
                        self.numbered_code(n)
                    },
                    false,
                )
            }
            7..=9 => {
                let pattern = format!("fn {}", self.ident());
                let args =
                    serde_json::json!({"pattern": pattern, "path": "src", "max_results": 50}).to_string();
                let mut out = String::new();
                for _ in 0..5 + self.below(40) {
                    writeln!(
                        out,
                        "{}:{}:    pub async fn {}_{}(&self, {}: &{}) -> Result<(), Error> {{",
                        self.path(),
                        1 + self.below(900),
                        self.ident(),
                        self.serial(),
                        self.ident(),
                        self.pick(TYPES)
                    )
                    .unwrap();
                }
                ("search", args, out, false)
            }
            10..=13 => {
                let failed = self.below(5) == 0;
                // Most commands come back (and a later success resolves an earlier failure); a few
                // failing ones are one-offs that stay unresolved observations.
                let command = if failed && self.below(4) == 0 {
                    format!("cargo test -p inventory --test {}_{}", self.ident(), self.serial())
                } else {
                    self.pick(COMMANDS).to_string()
                };
                let args = serde_json::json!({"command": command, "timeout_secs": 300}).to_string();
                let mut out = {
                    let n = 300 + self.below(6_000);
                    self.command_output(n)
                };
                if failed {
                    write!(out, "error: test failed, to rerun pass `-p inventory --lib`\nexit status: 101\n")
                        .unwrap();
                } else {
                    out.push_str("exit status: 0\n");
                }
                ("run_command", args, out, failed)
            }
            14..=15 => {
                let args = serde_json::json!({
                    "path": self.path(),
                    "old_text": ({ let n = 150 + self.below(500); self.code(n) }),
                    "new_text": ({ let n = 150 + self.below(700); self.code(n) }),
                })
                .to_string();
                (
                    "edit_file",
                    args,
                    format!("edited {}: 1 replacement, {} bytes", self.path(), self.below(40_000)),
                    false,
                )
            }
            16 => {
                let args =
                    serde_json::json!({"path": self.path(), "content": ({ let n = 500 + self.below(3_000); self.code(n) })})
                        .to_string();
                ("write_file", args, format!("wrote {} bytes", self.below(10_000)), false)
            }
            17 => {
                let args = serde_json::json!({"path": "src"}).to_string();
                let mut out = String::new();
                for _ in 0..10 + self.below(40) {
                    writeln!(out, "{}  {}", self.pick(&["file", "dir "]), self.path()).unwrap();
                }
                ("list_dir", args, out, false)
            }
            _ => {
                let args = serde_json::json!({"id": format!("ev-{:032x}", self.next() as u128 * 7919), "offset": 0, "limit": 200, "unit": "lines"}).to_string();
                (
                    "read_evidence",
                    args,
                    {
                        let n = 1_000 + self.below(8_000);
                        self.json(n)
                    },
                    false,
                )
            }
        }
    }
}
