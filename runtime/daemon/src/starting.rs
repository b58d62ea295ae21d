//! The socket while `serve` is still joining the fleet: a node started with its NATS servers (a
//! reboot, systemd) waits for JetStream to be ready — up to `[cluster] start_timeout` — and says so
//! on its socket meanwhile, instead of being silent or exiting on trouble that passes.
//!
//! [`Starting`] answers `daemon.status` with what the daemon is waiting for (`cluster.starting`) and
//! every other method with -32003 saying the same; connections from another uid are refused, as the
//! socket refuses them. It runs on a thread of its own (the daemon's runtime does not exist yet) and
//! hands its listener over when [`Starting::stop`] returns: the socket is never unbound between the
//! two, so a client that connects meanwhile waits in the backlog for the daemon's own server
//! instead of being refused.

use crate::config::Config;
use crate::rpc::{error_response, result_response};
use crate::socket::{decode_request, framing_error, same_uid, Frame, Lines, MAX_LINE};
use agentd_protocol::rpc::{ClusterStatus, DaemonStatus, DaySpending, StorageStatus};
use agentd_protocol::{ErrorCode, Request, RpcError};
use parking_lot::Mutex;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// The socket's answers while the daemon joins the fleet; see the module documentation.
pub struct Starting {
    why: Arc<Mutex<String>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<std::os::unix::net::UnixListener>>>,
    socket: PathBuf,
}

impl Starting {
    /// Binds `socket` (mode 0600) and answers on it until [`Starting::stop`].
    pub fn serve(socket: &Path, config: Arc<Config>) -> std::io::Result<Starting> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let listener = {
            let _entered = runtime.enter();
            // A socket file left by a daemon that died: the home's lock proves nobody serves it.
            let _ = std::fs::remove_file(socket);
            let listener = UnixListener::bind(socket)?;
            std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
            listener
        };
        let why = Arc::new(Mutex::new("connecting to NATS".to_string()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let answers = Answers { why: why.clone(), config, started: agentd_engine::clock::monotonic() };
        let thread = std::thread::Builder::new()
            .name("agentd-starting".into())
            .spawn(move || runtime.block_on(accept(listener, Arc::new(answers), stopped)))?;
        Ok(Starting { why, stop: Some(stop), thread: Some(thread), socket: socket.to_path_buf() })
    }

    /// What the daemon waits for now, as `daemon.status` says it.
    pub fn set(&self, why: impl Into<String>) {
        *self.why.lock() = why.into();
    }

    /// Stops answering and hands the bound listener to the daemon's own server (connections
    /// waiting to be accepted stay queued; those it had accepted are closed).
    pub fn stop(mut self) -> std::io::Result<std::os::unix::net::UnixListener> {
        self.halt()
    }

    fn halt(&mut self) -> std::io::Result<std::os::unix::net::UnixListener> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(listener)) => listener,
            Some(Err(_)) => Err(std::io::Error::other("the starting socket's thread panicked")),
            None => Err(std::io::Error::other("the starting socket was already stopped")),
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        // Not handed over (joining failed): the socket goes with it.
        if self.thread.is_some() {
            let _ = self.halt();
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// What the answers are made from.
struct Answers {
    why: Arc<Mutex<String>>,
    config: Arc<Config>,
    started: Instant,
}

impl Answers {
    /// `daemon.status` while starting: nothing runs yet, and the cluster says why.
    fn status(&self) -> DaemonStatus {
        let now = agentd_engine::clock::clock().now();
        let cluster = self.config.cluster.as_ref().map(|c| ClusterStatus {
            node: c.node.clone(),
            servers: c.nats.clone(),
            connected: false,
            nodes: Vec::new(),
            streams: Vec::new(),
            error: None,
            starting: Some(self.why.lock().clone()),
        });
        DaemonStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_s: self.started.elapsed().as_secs(),
            tasks_running: 0,
            jobs: Vec::new(),
            clock: agentd_engine::clock::rfc3339(now),
            tz: self.config.tz.describe(now),
            storage: StorageStatus { ok: true, error: None, since: None, unrecorded_ends: 0 },
            http: None,
            cluster,
            mcp: Vec::new(),
            today: DaySpending::default(),
            config: agentd_protocol::rpc::ConfigStatus {
                path: self.config.path.display().to_string(),
                ..Default::default()
            },
            providers: Vec::new(),
            telemetry: None,
        }
    }

    /// One request line's answer.
    fn answer(&self, text: &[u8]) -> String {
        match decode_request(text) {
            Err((id, e)) => error_response(id, &e),
            Ok((id, Request::DaemonStatus(_))) => {
                result_response(id, serde_json::to_value(self.status()).unwrap_or(Value::Null))
            }
            Ok((id, _)) => {
                let why = self.why.lock().clone();
                let e = RpcError::new(
                    ErrorCode::NotAllowed,
                    format!(
                        "agentd is starting: cluster: starting — {why}; `agentd daemon` shows how it goes"
                    ),
                );
                error_response(id, &e)
            }
        }
    }
}

async fn accept(
    listener: UnixListener,
    answers: Arc<Answers>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<std::os::unix::net::UnixListener> {
    loop {
        tokio::select! {
            _ = &mut stopped => return listener.into_std(),
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(connection(stream, answers.clone()));
                }
            }
        }
    }
}

async fn connection(mut stream: UnixStream, answers: Arc<Answers>) {
    if !same_uid(&stream) {
        let e = RpcError::new(ErrorCode::InvalidRequest, "connections from another user are refused");
        let _ = stream.write_all(format!("{}\n", error_response(Value::Null, &e)).as_bytes()).await;
        return;
    }
    let mut lines = Lines::new(MAX_LINE);
    loop {
        match stream.read_buf(lines.buffer(64 << 10)).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while let Some(frame) = lines.next_frame() {
            let line = match &frame {
                Frame::Line(text) => answers.answer(text.as_bytes()),
                other => match framing_error(other, MAX_LINE) {
                    Some(e) => error_response(Value::Null, &e),
                    None => continue,
                },
            };
            if stream.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                return;
            }
        }
    }
}
