//! Shared by the examples: find (or build) the `agentd` binary, run `agentd serve` in a temporary home,
//! call its command line, submit a task and follow its events, and stop it with SIGTERM; and the benchmarks' figures (medians, percentiles,
//! durations and sizes as text). Errors are messages a person can act on.

#![allow(dead_code)] // each example uses a different part of this module

pub mod workspace;

use agentd_test_support::daemon::{RpcClient, TestDaemon};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

pub type Result<T> = std::result::Result<T, String>;

/// The `agentd` binary of the same cargo profile as this example (`target/<profile>/agentd`; examples live in
/// `target/<profile>/examples/`). `AGENTD_BIN` overrides it. When the binary is missing or older than
/// this example, it is (re)built with cargo first, so the demo never runs a stale daemon.
pub fn agentd_binary() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("AGENTD_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(format!("AGENTD_BIN={} is not a file", p.display())) };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this example's executable: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("unexpected example location {}", exe.display()))?;
    let bin = profile_dir.join("agentd");
    let modified =
        |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
    let stale = !bin.is_file() || modified(&bin) < modified(&exe);
    if stale {
        let profile = profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_string();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "--quiet", "--bin", "agentd"]).current_dir(env!("CARGO_MANIFEST_DIR"));
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        // Build into the same target directory as this example.
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let missing = !bin.is_file();
        if missing {
            eprintln!("agentd binary not found at {}; building it first: cargo build --bin agentd ({profile} profile)…", bin.display());
            let status = cmd
                .status()
                .map_err(|e| format!("cannot run {cargo} to build agentd: {e}; set AGENTD_BIN"))?;
            if !status.success() || !bin.is_file() {
                return Err(format!(
                    "`cargo build --bin agentd` failed ({status}); build it yourself or set AGENTD_BIN"
                ));
            }
        } else {
            // It exists but is older than this example: rebuild quietly (a no-op when nothing changed),
            // and keep the existing binary if that fails.
            match cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    let first = stderr.lines().find(|l| l.starts_with("error")).unwrap_or("").to_string();
                    eprintln!(
                        "note: rebuilding agentd failed ({first}); using the existing {}",
                        bin.display()
                    );
                }
                Err(e) => eprintln!("note: cannot run {cargo} ({e}); using the existing {}", bin.display()),
            }
        }
    }
    Ok(bin)
}

/// The tokio runtime the examples run their scripted model server on (two workers).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))
}

/// A config for a team whose lead and coder both use one OpenAI-compatible server.
pub fn team_config(base_url: &str, model: &str, extra: &str) -> String {
    agentd_test_support::daemon::team_config(base_url, model, extra)
}

/// `config` with the stall watch off (`[team.stall]` thresholds 0): a benchmark whose scripted
/// teammate repeats one cheap call on purpose (its load) must not be stopped for going in circles.
pub fn without_stall_watch(config: &str) -> String {
    format!("{config}\n[team.stall]\nrepeats = 0\nidle_requests = 0\n")
}

/// `config` with the provider's bound on requests in flight (`max_concurrent`, default 4) set to
/// `n`: a benchmark of the daemon's own overhead with many tasks at once measures the daemon, not
/// the queue for the provider's four slots.
pub fn with_max_concurrent(config: &str, n: usize) -> String {
    config.replacen("kind = \"openai\"\n", &format!("kind = \"openai\"\nmax_concurrent = {n}\n"), 1)
}

/// `agentd serve` running in a temporary home (removed when dropped): a [`TestDaemon`] whose
/// failures are messages rather than panics, and which is stopped with SIGTERM when dropped.
pub struct Daemon(TestDaemon);

impl Daemon {
    /// Writes `config` into a fresh home and starts the daemon, waiting until its socket answers.
    pub fn start(bin: &Path, config: &str) -> Result<Daemon> {
        let home = tempfile::Builder::new()
            .prefix("agentd-example-home")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary home: {e}"))?;
        let cfg = home.path().join("agentd.toml");
        std::fs::write(&cfg, config).map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
        let mut d = Daemon(TestDaemon::in_home(bin, home));
        d.0.set_env(&[("RUST_LOG", "info")]);
        d.0.try_serve()?;
        Ok(d)
    }

    pub fn home(&self) -> &Path {
        self.0.home()
    }

    pub fn socket(&self) -> PathBuf {
        self.0.socket()
    }

    pub fn pid(&self) -> Option<u32> {
        self.0.pid()
    }

    pub fn serve_log(&self) -> String {
        self.0.serve_log()
    }

    pub fn client(&self) -> Result<RpcClient> {
        RpcClient::connect(&self.socket())
            .map_err(|e| format!("cannot connect to {}: {e}", self.socket().display()))
    }

    /// `agentd --home HOME ARGS…`, run to completion.
    pub fn cli(&self, args: &[&str]) -> Result<Output> {
        self.0.command(args).output().map_err(|e| format!("cannot run agentd {}: {e}", args.join(" ")))
    }

    /// Submits a task over the socket (`task.submit`) and returns its id.
    pub fn submit(&self, objective: &str, workspace: &Path) -> Result<String> {
        let r = self
            .client()?
            .call("task.submit", serde_json::json!({"objective": objective, "workspace": workspace}))
            .map_err(|e| format!("task.submit failed: {e}"))?;
        r["task_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("task.submit returned no task_id: {r}"))
    }

    /// Follows a task's events from the first (`task.subscribe`) until its terminal event, and returns
    /// them all. Waiting more than `quiet` for any one event is an error naming the last one seen and
    /// the tail of the daemon's log.
    pub fn events_until_end(&self, task_id: &str, quiet: Duration) -> Result<Vec<serde_json::Value>> {
        let mut c = self.client()?;
        c.set_timeout(Some(quiet));
        c.call("task.subscribe", serde_json::json!({"task_id": task_id, "after_seq": 0}))
            .map_err(|e| format!("task.subscribe {task_id} failed: {e}"))?;
        let mut events: Vec<serde_json::Value> = Vec::new();
        loop {
            let n = c.next_notification().map_err(|e| {
                let last = events.last().map_or("none".to_string(), |e| e["kind"].to_string());
                let log = self.serve_log();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                format!(
                    "no event of task {task_id} for {quiet:?} ({e}); last event {last}; the daemon's log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })?;
            let e = n["params"].clone();
            let end = is_terminal(&e);
            events.push(e);
            if end {
                return Ok(events);
            }
        }
    }

    /// SIGKILL: the daemon dies with no chance to hand anything over.
    pub fn kill9(&mut self) {
        self.0.kill9();
    }

    /// SIGTERM, then wait (up to 15 s, then SIGKILL). Returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        self.0.stop_within(Duration::from_secs(15))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The resident set size of a process in KiB (`VmRSS` in `/proc/PID/status`).
pub fn rss_kib(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no VmRSS line in {path}"))
}

/// The CPU time (user + system) a process has used, in ms (`/proc/PID/stat`, clock-tick resolution).
pub fn cpu_ms(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    // Fields after the parenthesised command name start at field 3 (state); utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| format!("unexpected {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (utime, stime) = ticks(11).zip(ticks(12)).ok_or_else(|| format!("no utime/stime in {path}"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((utime + stime) as f64 * 1000.0 / hz)
}

/// Whether an event (as the socket sends it) ends its task: the protocol's own rule.
pub fn is_terminal(event: &serde_json::Value) -> bool {
    serde_json::from_value::<agentd_protocol::Event>(event.clone()).is_ok_and(|e| e.kind.is_terminal())
}

// ---------------------------------------------------------------------------------------------
// Figures

/// The middle value (the upper one of an even count); sorts `xs`.
pub fn median(xs: &mut [Duration]) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Nearest-rank percentile; sorts `xs`.
pub fn percentile(xs: &mut [Duration], p: f64) -> Duration {
    xs.sort();
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

/// `a / b`.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// `1.23 ms`.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// `12.3 µs`.
pub fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Bytes in MB (10^6 bytes).
pub fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

/// 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// splitmix64: a small deterministic generator, so every run of a benchmark sees the same data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}
