//! The real `agentd` binary in a temporary home, for end-to-end tests and demos: writes a config that
//! points the team at a scripted server, starts `agentd serve`, waits for its socket, and talks to it
//! with a minimal JSON-RPC line client (the same wire a user's script would use).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A config for a team whose lead and coder both use one OpenAI-compatible server.
pub fn team_config(base_url: &str, model: &str, extra: &str) -> String {
    format!(
        "[providers.scripted]\nkind = \"openai\"\nbase_url = \"{base_url}\"\n\n\
         [team.lead]\nprovider = \"scripted\"\nmodel = \"{model}\"\n\n\
         [team.coder]\nprovider = \"scripted\"\nmodel = \"{model}\"\n\n{extra}"
    )
}

/// `config` (from [`team_config`]) with its provider declaring a prompt cache that bills a cached token at
/// `read_factor` and caches prefixes of `min_tokens` or more (`[providers.scripted] cache`).
pub fn with_prompt_cache(config: &str, read_factor: f64, min_tokens: u64) -> String {
    config.replacen(
        "kind = \"openai\"\n",
        &format!("kind = \"openai\"\ncache = {{ read_factor = {read_factor}, min_tokens = {min_tokens} }}\n"),
        1,
    )
}

/// The real `agentd` binary serving a temporary home: prepared with a config, started and stopped by the
/// test, its log (stderr) kept in `<home>/serve.log`. Dropping it kills a daemon still running.
pub struct TestDaemon {
    /// The `agentd` binary that is run.
    pub bin: PathBuf,
    /// The temporary home (`--home`), removed when the value is dropped.
    pub home: tempfile::TempDir,
    child: Option<Child>,
    env: Vec<(String, String)>,
    serve_args: Vec<String>,
    /// How long [`TestDaemon::try_serve`] waits for the daemon to be ready (30 s unless set).
    pub start_within: Duration,
}

impl TestDaemon {
    /// A home holding `config` as its `agentd.toml`, with no daemon yet.
    pub fn prepare(bin: &Path, config: &str) -> TestDaemon {
        let home = tempfile::Builder::new().prefix("agentd-home").tempdir().expect("a temp home");
        std::fs::write(home.path().join("agentd.toml"), config).expect("write the config");
        TestDaemon::in_home(bin, home)
    }

    /// A daemon of `bin` for a home made by the caller, not started yet.
    pub fn in_home(bin: &Path, home: tempfile::TempDir) -> TestDaemon {
        TestDaemon {
            bin: bin.to_path_buf(),
            home,
            child: None,
            env: Vec::new(),
            serve_args: Vec::new(),
            start_within: Duration::from_secs(30),
        }
    }

    /// Prepares a home and starts `agentd serve` in it, waiting until the socket answers.
    pub fn start(bin: &Path, config: &str) -> TestDaemon {
        let mut d = TestDaemon::prepare(bin, config);
        d.serve();
        d
    }

    /// The home directory.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The daemon's socket: `<home>/agentd.sock`.
    pub fn socket(&self) -> PathBuf {
        self.home.path().join("agentd.sock")
    }

    /// The daemon's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `agentd --home HOME ARGS…`, run to completion.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run the agentd binary")
    }

    /// The command `agentd --home HOME ARGS…`, not run yet.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command.arg("--home").arg(self.home.path()).args(args).env_remove("AGENTD_HOME");
        command
    }

    /// Starts (or restarts) the daemon and waits for its socket to answer.
    pub fn serve(&mut self) {
        if let Err(e) = self.try_serve() {
            panic!("{e}");
        }
    }

    /// [`serve`](Self::serve), answering what went wrong (with the daemon's log) instead of
    /// panicking. `RUST_LOG` is `info,agentd_engine=debug,agentd_daemon=debug,agentd_providers=debug` unless [`set_env`](Self::set_env)
    /// names another.
    pub fn try_serve(&mut self) -> Result<(), String> {
        let log_path = self.home.path().join("serve.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let child = Command::new(&self.bin)
            .arg("--home")
            .arg(self.home.path())
            .arg("serve")
            .args(&self.serve_args)
            .env_remove("AGENTD_HOME")
            .env("RUST_LOG", "info,agentd_engine=debug,agentd_daemon=debug,agentd_providers=debug")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {} serve: {e}", self.bin.display()))?;
        self.child = Some(child);
        // A node of a fleet answers `daemon.status` while it joins (`cluster.starting`): ready once
        // it has joined.
        let deadline = Instant::now() + self.start_within;
        loop {
            if let Ok(mut c) = RpcClient::connect(&self.socket()) {
                if c.call("daemon.status", json!({})).is_ok_and(|s| s["cluster"]["starting"].is_null()) {
                    return Ok(());
                }
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err(format!(
                    "agentd serve exited at start ({status}); its log:\n{}",
                    self.serve_log()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "agentd serve did not answer on {} within {:?}; its log:\n{}",
                    self.socket().display(),
                    self.start_within,
                    self.serve_log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What `agentd serve` logged so far (its stderr), empty before it started.
    pub fn serve_log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("serve.log")).unwrap_or_default()
    }

    /// A new connection to the daemon's socket; panics when the daemon does not answer.
    pub fn client(&self) -> RpcClient {
        RpcClient::connect(&self.socket()).expect("connect to the daemon")
    }

    /// SIGTERM, then wait for the daemon to exit (up to 30 s, then SIGKILL). Returns its exit
    /// status code.
    pub fn stop(&mut self) -> Option<i32> {
        self.stop_within(Duration::from_secs(30))
    }

    /// SIGTERM, then wait up to `grace` for the daemon to exit; then SIGKILL, saying so on stderr.
    /// Returns its exit status code.
    pub fn stop_within(&mut self, grace: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        // SAFETY: signalling our own child process by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("agentd did not stop within {grace:?} of SIGTERM; killing it");
        let _ = child.kill();
        child.wait().ok().and_then(|s| s.code())
    }

    /// SIGKILL: the daemon dies with no chance to flush or mark anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Submits a task over the socket and returns its id.
    pub fn submit(&self, objective: &str, workspace: &Path) -> String {
        let r = self
            .client()
            .call("task.submit", json!({"objective": objective, "workspace": workspace}))
            .expect("task.submit");
        r["task_id"].as_str().expect("a task id").to_string()
    }

    /// Every event of a task as its log holds it (`log.get`), in order.
    pub fn logged_events(&self, task_id: &str) -> Vec<Value> {
        let log = self.client().call("log.get", json!({"task_id": task_id})).expect("log.get");
        log["records"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["type"] == "event")
            .map(|r| r["event"].clone())
            .collect()
    }

    /// Follows a task's events until its terminal event (or the timeout), returning all of them.
    pub fn events_until_end(&self, task_id: &str, timeout: Duration) -> Vec<Value> {
        self.events_after(task_id, 0, timeout)
    }

    /// Follows a task's events after `after_seq` until the daemon marks the end (`task.end`, after
    /// the terminal event that nothing follows): an end the task has since been resumed or followed
    /// up from is passed over.
    pub fn events_after(&self, task_id: &str, after_seq: u64, timeout: Duration) -> Vec<Value> {
        let mut c = self.client();
        c.set_timeout(Some(timeout));
        c.call("task.subscribe", json!({"task_id": task_id, "after_seq": after_seq})).expect("subscribe");
        let mut events = Vec::new();
        loop {
            match c.next_notification() {
                Ok(n) if n["method"] == "task.end" => {
                    let last = events.last().map(|e: &Value| e["seq"].clone());
                    assert_eq!(
                        last.as_ref(),
                        Some(&n["params"]["seq"]),
                        "task.end names the last event: {n}"
                    );
                    return events;
                }
                Ok(n) => events.push(n["params"].clone()),
                Err(e) => panic!("waiting for the end of {task_id}: {e}; events so far: {events:#?}"),
            }
        }
    }

    /// The seq of a task's last logged event (0 before any).
    pub fn last_seq(&self, task_id: &str) -> u64 {
        self.logged_events(task_id).iter().filter_map(|e| e["seq"].as_u64()).max().unwrap_or(0)
    }

    /// Sends a follow-up message to a finished task (`task.message`) and returns the events until it
    /// ends again (within 30 s).
    pub fn follow_up(&self, task_id: &str, text: &str) -> Vec<Value> {
        let after = self.last_seq(task_id);
        let r = self.client().call("task.message", json!({"task_id": task_id, "text": text})).unwrap();
        assert_eq!(r["state"], "running", "{r}");
        self.events_after(task_id, after, Duration::from_secs(30))
    }

    /// Starts the daemon with extra environment variables (e.g. `AGENTD_CLOCK=manual`).
    pub fn serve_with_env(&mut self, env: &[(&str, &str)]) {
        self.set_env(env);
        self.serve();
    }

    /// The extra arguments of `serve` every later start of the daemon gets (e.g. `--log-format
    /// json`), replacing earlier ones.
    pub fn set_serve_args(&mut self, args: &[&str]) {
        self.serve_args = args.iter().map(|a| a.to_string()).collect();
    }

    /// The extra environment variables every later start of the daemon gets (replacing earlier ones).
    pub fn set_env(&mut self, env: &[(&str, &str)]) {
        self.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    }

    /// The HTTP API's base URL (`http://127.0.0.1:PORT`), from `daemon.status`; panics when the
    /// daemon serves no HTTP.
    pub fn http_base(&self) -> String {
        let status = self.client().call("daemon.status", json!({})).expect("daemon.status");
        let listen = status["http"]["listen"].as_str().unwrap_or_else(|| panic!("no HTTP server: {status}"));
        format!("http://{listen}")
    }

    /// The token in `<home>/http.token`.
    pub fn http_token(&self) -> String {
        let path = self.home.path().join("http.token");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_string()
    }

    /// Polls `task.status` until the state is anything but `state`.
    pub fn wait_for_state_not(&self, task_id: &str, state: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = Value::Null;
        while Instant::now() < deadline {
            last = self.client().call("task.status", json!({"task_id": task_id})).expect("status");
            if last["state"] != state {
                return last;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("task {task_id} stayed {state}; last status {last}");
    }

    /// Polls `task.status` until the state is `state`.
    pub fn wait_for_state(&self, task_id: &str, state: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = Value::Null;
        while Instant::now() < deadline {
            last = self.client().call("task.status", json!({"task_id": task_id})).expect("status");
            if last["state"] == state {
                return last;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("task {task_id} did not reach {state}; last status {last}");
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A JSON-RPC 2.0 line client over the daemon's Unix socket.
pub struct RpcClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    pending: Vec<Value>,
}

/// A JSON-RPC error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC error code; 0 when the connection failed before an answer came.
    pub code: i64,
    /// The daemon's message (or the connection's error).
    pub message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl RpcClient {
    /// Connects to the socket, with a 60 s read timeout.
    pub fn connect(socket: &Path) -> std::io::Result<RpcClient> {
        let s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(RpcClient { reader: BufReader::new(s.try_clone()?), writer: s, next_id: 1, pending: Vec::new() })
    }

    /// Sets how long a read may wait for the daemon (`None`: forever).
    pub fn set_timeout(&mut self, t: Option<Duration>) {
        let _ = self.writer.set_read_timeout(t);
    }

    /// Writes raw bytes (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write to the socket");
    }

    /// Reads the next line as JSON.
    pub fn read_value(&mut self) -> std::io::Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        serde_json::from_str(&line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Calls `method` with `params` and waits for its answer, keeping notifications that arrive meanwhile for
    /// later reads.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        // A connection the daemon closed (it stopped, or handed its socket over) is an error to
        // answer, like one closed before its answer came.
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| RpcError { code: 0, message: e.to_string() })?;
        loop {
            let v = self.read_value().map_err(|e| RpcError { code: 0, message: e.to_string() })?;
            if v.get("id") == Some(&json!(id)) {
                if let Some(e) = v.get("error") {
                    return Err(RpcError {
                        code: e["code"].as_i64().unwrap_or(0),
                        message: e["message"].as_str().unwrap_or("").to_string(),
                    });
                }
                return Ok(v["result"].clone());
            }
            self.pending.push(v);
        }
    }

    /// The next notification (a line without an id).
    pub fn next_notification(&mut self) -> std::io::Result<Value> {
        if !self.pending.is_empty() {
            return Ok(self.pending.remove(0));
        }
        self.read_value()
    }
}
