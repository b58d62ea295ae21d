//! Rust-like source from the generator: `use` lines, documented structs, tokio tests and async
//! methods with queries, loops and error paths; and the same numbered, as `read_file` returns it.

use crate::gen::Gen;
use crate::words::TYPES;
use std::fmt::Write as _;

impl Gen {
    /// Rust-like source of about `bytes` bytes: functions, structs, comments, tests.
    pub fn code(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 400);
        writeln!(out, "use crate::{}::{{{}, {}}};", self.ident(), self.pick(TYPES), self.pick(TYPES))
            .unwrap();
        writeln!(out, "use std::sync::Arc;\n").unwrap();
        while out.len() < bytes {
            match self.below(5) {
                0 => {
                    let ty = self.pick(TYPES).replace(['<', '>', ',', ' '], "");
                    writeln!(out, "/// {}", self.sentence()).unwrap();
                    writeln!(out, "#[derive(Debug, Clone, PartialEq)]\npub struct {ty}{} {{", self.serial())
                        .unwrap();
                    for _ in 0..2 + self.below(5) {
                        writeln!(out, "    pub {}: {},", self.ident(), self.pick(TYPES)).unwrap();
                    }
                    out.push_str("}\n\n");
                }
                1 => {
                    let name = self.ident();
                    writeln!(out, "#[tokio::test]\nasync fn {name}_{}() {{", self.serial()).unwrap();
                    writeln!(out, "    let store = test_store().await;").unwrap();
                    writeln!(
                        out,
                        "    let {} = store.reserve(Sku::new(\"SKU-{:05}\"), {}).await.unwrap();",
                        self.ident(),
                        self.below(100_000),
                        1 + self.below(50)
                    )
                    .unwrap();
                    writeln!(out, "    assert_eq!({}.{}, {});", self.ident(), self.ident(), self.below(1000))
                        .unwrap();
                    out.push_str("}\n\n");
                }
                _ => {
                    let name = self.ident();
                    writeln!(out, "    /// {}", self.sentence()).unwrap();
                    writeln!(
                        out,
                        "    pub async fn {name}_{}(&self, {}: &{}, {}: u32) -> Result<{}, Error> {{",
                        self.serial(),
                        self.ident(),
                        self.pick(TYPES),
                        self.ident(),
                        self.pick(TYPES)
                    )
                    .unwrap();
                    for _ in 0..2 + self.below(8) {
                        match self.below(6) {
                            0 => writeln!(out, "        // {}", self.sentence()).unwrap(),
                            1 => writeln!(
                                out,
                                "        if {}.len() > {} {{\n            return Err(Error::{}(\"{}\".into()));\n        }}",
                                self.ident(),
                                self.below(4096),
                                self.pick(TYPES).replace(['<', '>', ',', ' '], ""),
                                self.sentence()
                            )
                            .unwrap(),
                            2 => writeln!(
                                out,
                                "        let {} = sqlx::query_as!({}, \"SELECT * FROM {} WHERE {} = $1 FOR UPDATE\", {})\n            .fetch_optional(&mut *{})\n            .await?;",
                                self.ident(),
                                self.pick(TYPES).replace(['<', '>', ',', ' '], ""),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident()
                            )
                            .unwrap(),
                            3 => writeln!(
                                out,
                                "        for ({}, {}) in self.{}.iter().enumerate() {{\n            {} += {} * {};\n        }}",
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.below(100)
                            )
                            .unwrap(),
                            _ => writeln!(
                                out,
                                "        let {} = self.{}.{}(&{}).await.map_err(|e| Error::{}(e.to_string()))?;",
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.ident(),
                                self.pick(TYPES).replace(['<', '>', ',', ' '], "")
                            )
                            .unwrap(),
                        }
                    }
                    writeln!(out, "        Ok({})\n    }}\n", self.ident()).unwrap();
                }
            }
        }
        out
    }

    /// `read_file` output: the file's lines, numbered.
    pub fn numbered_code(&mut self, bytes: usize) -> String {
        let code = self.code(bytes);
        let mut out = String::with_capacity(code.len() + code.len() / 6);
        let start = 1 + self.below(400);
        for (i, line) in code.lines().enumerate() {
            writeln!(out, "{:>5}\t{line}", start + i).unwrap();
        }
        out
    }
}
