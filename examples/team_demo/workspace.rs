//! The workspace: a small bookkeeping crate whose `money::add` subtracts, so every monthly total
//! comes out negated. Each module has per-account totals, largest entries and counts with a test of
//! each; `./check.sh` prints the report `cargo test` would give for the current `src/money.rs`, so
//! no compiler is needed.

use crate::common::Result;
use crate::{ACCOUNTS_PER_MODULE, BUGGY_ADD, MODULES, MONEY};
use std::path::Path;

/// One module of the crate: per account a total, a largest entry and a count, and a test of each.
fn module_source(name: &str, about: &str, index: u32) -> String {
    let mut s = format!(
        "//! {about}: per account, the total, the largest entry and the number of entries of a period.\n\
         //!\n\
         //! Amounts are in cents ([`Cents`]); every sum goes through [`crate::money::add`], so the\n\
         //! rounding and overflow rules live in one place.\n\n\
         use crate::money::{{add, Cents}};\n\
         use crate::Entry;\n\n"
    );
    for k in 0..ACCOUNTS_PER_MODULE {
        let account = 100 * (index + 1) + 3 * k + 1;
        s.push_str(&format!(
            "/// {about}: the total of account {account} in `period`, in cents (every entry of the account\n\
             /// booked in that period, credits positive, debits negative).\n\
             pub fn {name}_total_{account}(entries: &[Entry], period: u32) -> Cents {{\n    \
                 entries\n        .iter()\n        .filter(|e| e.account == {account} && e.period == period)\n        \
                 .fold(0, |sum, e| add(sum, e.amount))\n\
             }}\n\n\
             /// {about}: the largest single entry of account {account} in `period`, or 0 when there is none.\n\
             pub fn {name}_largest_{account}(entries: &[Entry], period: u32) -> Cents {{\n    \
                 entries\n        .iter()\n        .filter(|e| e.account == {account} && e.period == period)\n        \
                 .map(|e| e.amount)\n        .max()\n        .unwrap_or(0)\n\
             }}\n\n\
             /// {about}: how many entries account {account} has in `period`.\n\
             pub fn {name}_count_{account}(entries: &[Entry], period: u32) -> usize {{\n    \
                 entries.iter().filter(|e| e.account == {account} && e.period == period).count()\n\
             }}\n\n"
        ));
    }
    let first = 100 * (index + 1) + 1;
    s.push_str(&format!(
        "#[cfg(test)]\nmod tests {{\n    use super::*;\n\n    \
             fn entries() -> Vec<Entry> {{\n        vec![\n            \
                 Entry {{ account: {first}, period: 1, amount: 500 }},\n            \
                 Entry {{ account: {first}, period: 1, amount: 700 }},\n            \
                 Entry {{ account: {first}, period: 2, amount: 900 }},\n        ]\n    }}\n\n    \
             #[test]\n    fn total_of_account_{first}() {{\n        \
                 assert_eq!({name}_total_{first}(&entries(), 1), 1200);\n    }}\n\n    \
             #[test]\n    fn largest_of_account_{first}() {{\n        \
                 assert_eq!({name}_largest_{first}(&entries(), 1), 700);\n    }}\n\n    \
             #[test]\n    fn count_of_account_{first}() {{\n        \
                 assert_eq!({name}_count_{first}(&entries(), 1), 2);\n    }}\n\
         }}\n"
    ));
    s
}

/// `./check.sh`'s output: what `cargo test` prints for this crate, with `add` broken or fixed.
fn test_report(broken: bool) -> String {
    let mut out = format!("running {} tests\n", MODULES.len() * 3 + 2);
    let mut failures = String::new();
    for (i, (name, _)) in MODULES.iter().enumerate() {
        let first = 100 * (i + 1) + 1;
        for (test, fails) in [("count", false), ("largest", false), ("total", broken)] {
            let result = if fails { "FAILED" } else { "ok" };
            out.push_str(&format!("test {name}::tests::{test}_of_account_{first} ... {result}\n"));
        }
        if broken {
            // The line of the failing assertion in the generated module.
            let call = format!("{name}_total_{first}(&entries()");
            let line =
                module_source(name, "", i as u32).lines().position(|l| l.contains(&call)).unwrap_or(0) + 1;
            failures.push_str(&format!(
                "\n---- {name}::tests::total_of_account_{first} stdout ----\n\
                 thread '{name}::tests::total_of_account_{first}' panicked at src/{name}.rs:{line}:9:\n\
                 assertion `left == right` failed\n  left: -1200\n right: 1200\n"
            ));
        }
    }
    out.push_str(
        "test money::tests::sub_subtracts ... ok\ntest money::tests::sum_of_nothing_is_zero ... ok\n",
    );
    let total = MODULES.len() * 3 + 2;
    if broken {
        out.push_str(&format!("\nfailures:\n{failures}\nfailures:\n"));
        for (i, (name, _)) in MODULES.iter().enumerate() {
            out.push_str(&format!("    {name}::tests::total_of_account_{}\n", 100 * (i + 1) + 1));
        }
        out.push_str(&format!(
            "\ntest result: FAILED. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s\n",
            total - MODULES.len(),
            MODULES.len()
        ));
    } else {
        out.push_str(&format!(
            "\ntest result: ok. {total} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s\n"
        ));
    }
    out
}

/// Writes the crate into `dir`.
pub fn write_workspace(dir: &Path) -> Result<()> {
    let write = |rel: &str, text: &str| -> Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write(
        "Cargo.toml",
        "[package]\nname = \"ledger\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )?;
    let mut lib = String::from("//! ledger: the bookkeeping behind the monthly report.\n\npub mod money;\n");
    for (name, _) in MODULES {
        lib.push_str(&format!("pub mod {name};\n"));
    }
    lib.push_str(
        "\n/// One booked amount.\n#[derive(Debug, Clone, Copy, PartialEq, Eq)]\npub struct Entry {\n    \
         pub account: u32,\n    pub period: u32,\n    pub amount: money::Cents,\n}\n",
    );
    write("src/lib.rs", &lib)?;
    write(
        MONEY,
        &format!(
            "//! Money in cents, and the arithmetic every module sums with.\n\n\
             /// An amount in cents: credits positive, debits negative.\npub type Cents = i64;\n\n\
             /// Adds two amounts.\n{BUGGY_ADD}\n\n\
             /// Subtracts `b` from `a`.\npub fn sub(a: Cents, b: Cents) -> Cents {{\n    a - b\n}}\n\n\
             /// The sum of `amounts`.\npub fn sum(amounts: &[Cents]) -> Cents {{\n    \
             amounts.iter().fold(0, |s, &a| add(s, a))\n}}\n\n\
             #[cfg(test)]\nmod tests {{\n    use super::*;\n\n    #[test]\n    fn sub_subtracts() {{\n        \
             assert_eq!(sub(5, 3), 2);\n    }}\n\n    #[test]\n    fn sum_of_nothing_is_zero() {{\n        \
             assert_eq!(sum(&[]), 0);\n    }}\n}}\n"
        ),
    )?;
    for (i, (name, about)) in MODULES.iter().enumerate() {
        write(&format!("src/{name}.rs"), &module_source(name, about, i as u32))?;
    }
    let modules: Vec<&str> = MODULES.iter().map(|(n, _)| *n).collect();
    write(
        "README.md",
        &format!(
            "# ledger\n\nThe bookkeeping behind the monthly report: one module per book ({}), all summing \
             amounts with `money::add` (`src/money.rs`).\n\nRun the tests with `./check.sh`.\n",
            modules.join(", ")
        ),
    )?;
    write(
        "check.sh",
        &format!(
            "#!/bin/sh\n\
             # The test suite. In this demo it stands in for `cargo test`, so that no compiler is needed:\n\
             # it prints the report `cargo test` gives for the current src/money.rs.\n\
             if grep -A2 'pub fn add' src/money.rs | grep -q 'a - b'; then\n\
             cat <<'EOF'\n{}EOF\nexit 101\nfi\ncat <<'EOF'\n{}EOF\n",
            test_report(true),
            test_report(false)
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("check.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", script.display()))
}
