//! `agentd serve`: the home directory, the single-instance lock, the actor system and the socket, and an
//! orderly stop on SIGINT/SIGTERM (stop accepting, mark running tasks `interrupted`, flush).

use crate::config::{Config, ConfigError};
use crate::rpc::Methods;
use crate::shared::{Backing, Shared};
use crate::supervisor::{Shutdown, Supervisor};
use actix::prelude::*;
use agentd_evidence::{Store, StoreError};
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The files of a home directory.
#[derive(Debug, Clone)]
pub struct Home {
    /// The home directory itself (`--home`, `AGENTD_HOME`, default `./.agentd`).
    pub dir: PathBuf,
}

impl Home {
    /// The home at `dir` (nothing is created until [`Home::ensure`]).
    pub fn new(dir: impl Into<PathBuf>) -> Home {
        Home { dir: dir.into() }
    }
    /// The configuration file: `<home>/agentd.toml`.
    pub fn config(&self) -> PathBuf {
        self.dir.join("agentd.toml")
    }
    /// The socket the daemon listens on: `<home>/agentd.sock`.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("agentd.sock")
    }
    /// The sled database's directory: `<home>/db` (evidence blobs go beside it, in `<home>/evidence`).
    pub fn db(&self) -> PathBuf {
        self.dir.join("db")
    }
    /// The single-instance lock file: `<home>/agentd.lock`, held by the serving daemon.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("agentd.lock")
    }
    /// The HTTP API's token (see [`crate::http::token`]), made by `serve` when HTTP is on.
    pub fn http_token(&self) -> PathBuf {
        self.dir.join("http.token")
    }

    /// Creates the home if it does not exist: mode 0700, and so are the missing parents agentd
    /// makes on the way. A directory that exists is left as it is — agentd never changes the mode
    /// of a directory it did not create (see [`Home::loose_mode`] for saying so instead). A path
    /// that exists and is not a directory is an error.
    pub fn ensure(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::metadata(&self.dir) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => {
                Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "exists and is not a directory"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)
            }
            Err(e) => Err(e),
        }
    }

    /// The home's mode when others than its owner may enter or read it (any group or other bit
    /// set): agentd leaves such a directory as it is and the daemon warns at start. `None` when
    /// the home is private or cannot be read.
    pub fn loose_mode(&self) -> Option<u32> {
        let mode = std::fs::metadata(&self.dir).ok()?.permissions().mode() & 0o7777;
        (mode & 0o077 != 0).then_some(mode)
    }

    /// Where the home is when no `--home` or `AGENTD_HOME` names one: `~/.agentd`, from `$HOME`.
    /// `None` when `HOME` is unset or empty — never the current directory, so a command run from
    /// another directory finds the same daemon.
    pub fn default_dir() -> Option<PathBuf> {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
        Some(PathBuf::from(home).join(".agentd"))
    }
}

/// Why `agentd serve` could not start, or stopped uncleanly.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The home could not be created, locked or tightened.
    #[error("cannot prepare the home {path}: {source}")]
    Home {
        /// The home, or its file, concerned.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// Another daemon holds the home's lock.
    #[error("another agentd is already serving {home} (it holds {lock})")]
    AlreadyServing {
        /// The home directory.
        home: PathBuf,
        /// The lock file the other daemon holds.
        lock: PathBuf,
    },
    /// The home has no `agentd.toml`. Holds the path looked for.
    #[error("no configuration at {0}; run `agentd init` first")]
    NoConfig(PathBuf),
    /// The configuration is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be opened (another process holding it shows as [`DaemonError::AlreadyServing`]
    /// first).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The fleet (`[cluster]`) could not be joined: NATS unreachable at its URLs, a login refused, the
    /// node name taken.
    #[error("[cluster] in {config}: {source}")]
    Cluster {
        /// The configuration file.
        config: PathBuf,
        /// Why.
        source: agentd_cluster::ClusterError,
    },
    /// The socket could not be bound or given its mode.
    #[error("cannot listen on {path}: {source}")]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The async runtime could not start, or the actors stopped before the shutdown was done.
    #[error("{0}")]
    Runtime(String),
    /// The HTTP address could not be bound (in use, not this machine's, not permitted).
    #[error("cannot listen for HTTP on {addr}: {source}")]
    Http {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it could not be bound.
        source: std::io::Error,
    },
    /// The HTTP token could not be read or made.
    #[error(transparent)]
    Token(#[from] crate::http::TokenError),
}

/// What `agentd serve`'s command line adds to the configuration.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// `--http ADDR`: serve the dashboard and API here, whatever `[http] listen` says.
    pub http: Option<SocketAddr>,
    /// How the exports of traces fare, when this process exports them (made by
    /// [`crate::telemetry::Telemetry::start`] before the daemon starts).
    pub exports: Option<crate::telemetry::Exports>,
}

/// Takes the home's lock, exclusively and without waiting. Held for the daemon's life.
fn take_lock(home: &Home) -> Result<File, DaemonError> {
    let path = home.lock();
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| DaemonError::Home { path: path.clone(), source })?;
    // A POSIX record lock, not flock(2): it belongs to this process alone. An flock lock belongs to
    // the open file description, which every fork shares until it execs — so a command being started
    // (sandboxed commands fork, set up, then exec) would hold the lock for a few milliseconds after a
    // killed daemon died, and a restart in that window would be refused.
    // SAFETY: fcntl(F_SETLK) on a valid, owned file descriptor with a zeroed, filled-in flock struct.
    let rc = unsafe {
        let mut lock: libc::flock = std::mem::zeroed();
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock)
    };
    if rc != 0 {
        let source = std::io::Error::last_os_error();
        let held = matches!(source.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES));
        if !held {
            return Err(DaemonError::Home { path, source });
        }
        return Err(DaemonError::AlreadyServing { home: home.dir.clone(), lock: path });
    }
    Ok(file)
}

/// Runs the daemon until SIGINT/SIGTERM. `ready` is called once the socket accepts connections (and
/// the HTTP server, when one is asked for by `options` or the configuration, is listening).
pub fn serve(
    home: &Home,
    options: &ServeOptions,
    ready: impl FnOnce(&Path) + Send + 'static,
) -> Result<(), DaemonError> {
    home.ensure().map_err(|source| DaemonError::Home { path: home.dir.clone(), source })?;
    let _lock = take_lock(home)?;
    let config_path = home.config();
    if !config_path.exists() {
        return Err(DaemonError::NoConfig(config_path));
    }
    let config = Config::load(&config_path)?;
    // A key the environment does not hold would fail every request with a 401: refuse to start.
    config.check_keys(|name| std::env::var_os(name))?;
    let config = Arc::new(config);
    report_sandbox(&config);
    if let Some(mode) = home.loose_mode() {
        tracing::warn!(
            home = %home.dir.display(),
            mode = format!("{mode:o}"),
            "the home may be read by other users; agentd leaves the mode of a directory it did not \
             create as it is (chmod 700 it to make it private)"
        );
    }
    // One machine keeps its tasks in sled; a node of a fleet keeps them in the fleet's JetStream
    // only (a local copy would be a second truth to keep in step; see docs/cluster.md).
    let (backing, bound) = match &config.cluster {
        None => (Backing::Sled(Store::open(&home.db())?), None),
        Some(cluster) => {
            // Joining may wait for NATS and JetStream (servers starting with this one): the socket
            // says why meanwhile, and is handed to the daemon's own server once joined.
            let starting = crate::starting::Starting::serve(&home.socket(), config.clone())
                .map_err(|source| DaemonError::Socket { path: home.socket(), source })?;
            let fleet = crate::fleet::connect(
                cluster,
                |var| std::env::var(var).ok(),
                |joining| starting.set(joining.to_string()),
            )
            .map_err(|source| DaemonError::Cluster { config: config_path.clone(), source })?;
            let bound =
                starting.stop().map_err(|source| DaemonError::Socket { path: home.socket(), source })?;
            tracing::info!(node = %cluster.node, nats = %cluster.nats.join(","), "joined the fleet");
            (Backing::Fleet(Arc::new(fleet)), Some(bound))
        }
    };
    // Bound before anything starts, so a busy port fails the start; the token with it.
    let http = match options.http.or(config.http_listen) {
        None => None,
        Some(addr) => {
            let token = crate::http::Token::load_or_create(&home.http_token())?;
            let listener =
                std::net::TcpListener::bind(addr).map_err(|source| DaemonError::Http { addr, source })?;
            let bound = listener.local_addr().map_err(|source| DaemonError::Http { addr, source })?;
            if !bound.ip().is_loopback() {
                tracing::warn!(
                    %bound,
                    "the dashboard and API listen beyond this machine (plain HTTP, token only), as configured"
                );
            }
            Some((listener, bound, token))
        }
    };
    let socket_path = home.socket();
    let home_dir = home.dir.clone();
    // Tests drive time over the socket instead of sleeping; users run on the system clock.
    if std::env::var("AGENTD_CLOCK").as_deref() == Ok("manual") {
        agentd_engine::clock::install(agentd_engine::clock::Clock::manual());
    }
    // More workers than cores: an append waits for its fsync (group commit) on the thread that
    // made it, and with one worker per core two waiting appends would stall every other task.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2) * 4;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| DaemonError::Runtime(format!("cannot start the async runtime: {e}")))?;
    let system = actix::System::with_tokio_rt(move || runtime);
    let outcome: Result<(), DaemonError> = system.block_on(async move {
        let home = std::fs::canonicalize(&home_dir).unwrap_or_else(|_| home_dir.clone());
        let exports = options.exports.clone().unwrap_or_default();
        let shared =
            Arc::new(Shared::start(home, backing, config.clone(), |var| std::env::var(var).ok(), exports));
        let supervisor = Supervisor::new(shared.clone());
        let recovered = supervisor.recover().map_err(|e| DaemonError::Runtime(e.to_string()))?;
        if recovered > 0 {
            tracing::info!(recovered, "tasks left running by a previous daemon are now interrupted");
        }
        report_interrupted(&shared);
        tokio::spawn(crate::reload::check_providers(shared.clone()));
        let supervisor = supervisor.start();
        let listener = match bound {
            // A fleet's node: the socket that answered while it joined, with whoever waits on it.
            Some(bound) => tokio::net::UnixListener::from_std(bound),
            None => {
                // A socket file left by a daemon that died: the lock proves nobody serves it.
                let _ = std::fs::remove_file(&socket_path);
                tokio::net::UnixListener::bind(&socket_path).and_then(|listener| {
                    std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o600))
                        .map(|()| listener)
                })
            }
        }
        .map_err(|source| DaemonError::Socket { path: socket_path.clone(), source })?;
        let methods = Arc::new(Methods {
            shared: shared.clone(),
            supervisor: supervisor.clone(),
            started: agentd_engine::clock::monotonic(),
            http: http.as_ref().map(|(_, bound, _)| *bound),
        });
        let stop = CancellationToken::new();
        let web = match http {
            None => None,
            Some((listener, bound, token)) => {
                let web = crate::http::start(listener, methods.clone(), token)
                    .map_err(|source| DaemonError::Http { addr: bound, source })?;
                let handle = web.handle();
                tokio::spawn(web);
                tracing::info!(url = %format!("http://{bound}/"), "dashboard and HTTP API (`agentd dashboard` prints the URL that logs in)");
                Some(handle)
            }
        };
        let server = tokio::spawn(crate::socket::serve(listener, methods, stop.clone()));
        tokio::spawn(storage_checks(shared.clone(), stop.clone()));
        tracing::info!(socket = %socket_path.display(), "agentd is serving");
        ready(&socket_path);
        wait_for_signal(&shared).await;
        tracing::info!("stopping: no new connections; running tasks become interrupted");
        stop.cancel();
        if let Some(web) = web {
            // Not gracefully: an event stream would hold a graceful stop for its whole timeout.
            web.stop(false).await;
        }
        let _ = server.await;
        let _ = std::fs::remove_file(&socket_path);
        supervisor.send(Shutdown).await.map_err(|e| DaemonError::Runtime(e.to_string()))?;
        crate::storage::check_storage(shared.storage.as_ref(), &shared.ends);
        if !shared.ends.is_empty() {
            tracing::error!(tasks = shared.ends.len(), "stopping with task ends the store could not record");
        }
        if let Err(e) = shared.storage.flush() {
            tracing::error!(error = %e, "the final flush failed");
        }
        System::current().stop();
        Ok(())
    });
    outcome
}

/// Once a second: heal an unhealthy store and record the ends it refused (see [`crate::ends`]).
async fn storage_checks(shared: Arc<Shared>, stop: CancellationToken) {
    let clock = agentd_engine::clock::clock();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = clock.sleep(std::time::Duration::from_secs(1)) => {}
        }
        let shared = shared.clone();
        let checked = tokio::task::spawn_blocking(move || {
            crate::storage::check_storage(shared.storage.as_ref(), &shared.ends)
        });
        if let Err(e) = checked.await {
            tracing::error!(error = %e, "the storage check failed");
        }
    }
}

async fn wait_for_signal(shared: &Arc<Shared>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    else {
        tracing::error!("cannot install signal handlers; waiting for ctrl-c");
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            // SIGHUP: `agentd.toml` read again, as `agentd reload` does.
            _ = hup.recv() => if let Err(e) = shared.reload_and_check() {
                tracing::error!(error = %e, "SIGHUP: agentd.toml not applied; the daemon goes on with what it runs");
            },
        }
    }
}

/// Says, at the start, which tasks wait to be resumed — interrupted by the previous daemon's
/// stop or crash — each with the command that resumes it.
fn report_interrupted(shared: &Shared) {
    let tasks = match shared.storage.tasks() {
        Ok(tasks) => tasks,
        Err(e) => return tracing::error!(error = %e, "cannot list the tasks to say which were interrupted"),
    };
    for t in tasks.iter().filter(|t| t.state == agentd_protocol::TaskState::Interrupted) {
        let objective = agentd_client::render::one_line(&t.objective, 60);
        tracing::warn!(
            task = %t.task_id,
            objective = %objective,
            resume = %format!("agentd resume {}", t.task_id),
            "interrupted: it goes on with the command given"
        );
    }
}

/// Makes the daemon unreadable to its commands (see `protect_daemon_process`) and says what the
/// command sandbox can enforce on this machine.
fn report_sandbox(config: &Config) {
    use agentd_agents::tools::sandbox;
    sandbox::protect_daemon_process();
    let reaped = sandbox::reap_stale_cgroups();
    if reaped > 0 {
        tracing::info!(reaped, "killed what commands of a daemon that died had left running");
    }
    let policy = &config.team.sandbox;
    if policy.mode == agentd_agents::tools::SandboxMode::Off {
        tracing::warn!("tools.sandbox.mode = \"off\": commands run with the daemon's rights and environment");
        return;
    }
    let abi = sandbox::kernel_abi();
    if abi < 1 {
        tracing::error!(
            "this kernel does not enforce Landlock: run_command and verify will be refused \
             (set tools.sandbox.mode = \"off\" to run them unsandboxed)"
        );
        return;
    }
    let network_namespace = !policy.network && sandbox::can_unshare_network();
    let mount_namespace = sandbox::can_unshare_mounts();
    let cgroup = sandbox::cgroup_available();
    tracing::info!(
        mode = policy.mode.as_str(),
        landlock_abi = abi,
        network = policy.network,
        network_namespace,
        mount_namespace,
        cgroup,
        "command sandbox"
    );
    if !policy.network && !network_namespace {
        tracing::warn!("no network namespace for commands: Landlock denies TCP, but UDP is not stopped");
    }
    if !mount_namespace {
        tracing::warn!(
            "no mount namespace for commands: the home is unreadable, but its socket can be connected \
             (the peer check still refuses other uids)"
        );
    }
    if !cgroup {
        tracing::warn!("no cgroup for commands: a process that calls setsid can outlive its call");
    }
}
