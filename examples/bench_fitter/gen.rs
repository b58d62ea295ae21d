//! The seeded text generator (splitmix64, so every run sees the same text): identifiers, paths,
//! call ids, English-like sentences and prose, pretty JSON records, and build, test and log output.
//! Rust-like source is in `code`, tool calls and their results in `tools`.

use crate::words::{IDENTS, WORDS};
use std::fmt::Write as _;

/// A generator of about `n` bytes of one kind of text.
pub type TextMaker = fn(&mut Gen, usize) -> String;

/// The generator: a splitmix64 state and a serial for names that must not repeat.
pub struct Gen {
    state: u64,
    serial: u64,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { state: seed, serial: 0 }
    }

    /// splitmix64.
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }

    pub fn serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    pub fn call_id(&mut self) -> String {
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut id = String::from("call_");
        for _ in 0..24 {
            id.push(ALNUM[self.below(ALNUM.len())] as char);
        }
        id
    }

    pub fn ident(&mut self) -> String {
        match self.below(3) {
            0 => self.pick(IDENTS).to_string(),
            1 => format!("{}_{}", self.pick(IDENTS), self.pick(IDENTS)),
            _ => format!("{}_{}{}", self.pick(IDENTS), self.pick(IDENTS), self.below(10)),
        }
    }

    pub fn path(&mut self) -> String {
        let dir = ["src", "src/reservation", "src/store", "src/api", "tests", "crates/inventory/src"];
        let dir = dir[self.below(dir.len())];
        format!("{dir}/{}.rs", self.ident())
    }

    pub fn sentence(&mut self) -> String {
        let n = 6 + self.below(16);
        let mut s = String::new();
        for i in 0..n {
            let w = self.pick(WORDS);
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    s.extend(f.to_uppercase());
                    s.push_str(c.as_str());
                }
            } else {
                s.push(' ');
                match self.below(40) {
                    0 => write!(s, "`{}()`", self.ident()).unwrap(),
                    1 => write!(s, "{}", self.below(10_000)).unwrap(),
                    2 => s.push_str(&self.path()),
                    _ => s.push_str(w),
                }
                if self.below(12) == 0 {
                    s.push(',');
                }
            }
        }
        s.push(match self.below(10) {
            0 => '?',
            1 => ':',
            _ => '.',
        });
        s
    }

    /// English-like prose of about `bytes` bytes, in paragraphs.
    pub fn prose(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 200);
        while out.len() < bytes {
            if !out.is_empty() {
                out.push_str(if self.below(5) == 0 { "\n\n" } else { " " });
            }
            let s = self.sentence();
            out.push_str(&s);
        }
        out
    }

    /// Pretty JSON of about `bytes` bytes: an array of records, as an API or a tool might return.
    pub fn json(&mut self, bytes: usize) -> String {
        let mut records = Vec::new();
        let mut size = 0usize;
        while size < bytes {
            let r = serde_json::json!({
                "id": format!("{:08x}-{:04x}-{:04x}", self.next() as u32, self.below(65536), self.below(65536)),
                "sku": format!("SKU-{:05}", self.below(100_000)),
                "warehouse": self.pick(&["FRA-1", "AMS-2", "DUB-1", "IAD-3", "SFO-2"]),
                "quantity": self.below(500),
                "reserved": self.below(50),
                "status": self.pick(&["pending", "reserved", "shipped", "cancelled", "failed"]),
                "updated_at": format!("2025-0{}-{:02}T{:02}:{:02}:{:02}.{:03}Z", 1 + self.below(9), 1 + self.below(28), self.below(24), self.below(60), self.below(60), self.below(1000)),
                "note": self.sentence(),
                "tags": [self.pick(IDENTS), self.pick(IDENTS)],
                "price": {"amount": self.below(100_000) as f64 / 100.0, "currency": self.pick(&["EUR", "USD", "GBP"])},
            });
            let s = serde_json::to_string_pretty(&r).expect("json");
            size += s.len() + 2;
            records.push(r);
        }
        serde_json::to_string_pretty(&records).expect("json")
    }

    /// Build or test output of about `bytes` bytes.
    pub fn command_output(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 200);
        while out.len() < bytes {
            match self.below(4) {
                0 => writeln!(
                    out,
                    "   Compiling {} v0.{}.{} (/home/dev/projects/inventory-service/crates/{})",
                    self.ident(),
                    self.below(10),
                    self.below(30),
                    self.ident()
                )
                .unwrap(),
                1 => writeln!(
                    out,
                    "test {}::{}::{} ... {}",
                    self.ident(),
                    self.ident(),
                    self.ident(),
                    self.pick(&["ok", "ok", "ok", "FAILED", "ignored"])
                )
                .unwrap(),
                2 => writeln!(
                    out,
                    "2025-06-{:02}T{:02}:{:02}:{:02}.{:06}Z {} inventory::{}: {} sku=SKU-{:05} order={}",
                    1 + self.below(28),
                    self.below(24),
                    self.below(60),
                    self.below(60),
                    self.below(1_000_000),
                    self.pick(&["INFO", "WARN", "ERROR", "DEBUG"]),
                    self.ident(),
                    self.sentence(),
                    self.below(100_000),
                    self.next() % 10_000_000
                )
                .unwrap(),
                _ => writeln!(
                    out,
                    "warning: unused variable: `{}`\n  --> {}:{}:{}\n   |",
                    self.ident(),
                    self.path(),
                    1 + self.below(900),
                    1 + self.below(80)
                )
                .unwrap(),
            }
        }
        out
    }
}
