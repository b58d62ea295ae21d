//! The `agentd` binary: command-line parsing and wiring only. The daemon lives in `agentd-runtime`;
//! every other command is a client of its socket.

use agentd_client::render::{estimate_mark, event_line};
use agentd_client::{Client, ClientError, StreamItem};
use agentd_daemon::config::{parse_listen, Config, DEFAULT_CONFIG};
use agentd_daemon::daemon::{serve, DaemonError, Home, ServeOptions};
use agentd_protocol::event::EndKind;
use agentd_protocol::gauge::Gauge;
use agentd_protocol::rpc::{
    ContextParams, ContextResult, DaemonStatus, EvidenceListParams, EvidenceReadParams, EvidenceRef,
    LogEntry, LogParams, LogResult, MessageParams, NoParams, ProbeResult, RoleParams, SettingKey,
    SettingParams, SettingResult, StateResult, SubmitParams, Submitted, SubscribeParams, Subscribed, TaskRef,
    TaskStatus, TaskSummary, VerifyResult,
};
use agentd_protocol::{ErrorCode, EventKind, EvidenceMeta, Page, Part, Record, Request, Role, Unit};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit codes (`docs/interface.md`): what a script can tell apart without reading the message.
mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The task failed or was cancelled, or the command could not do what it was asked.
    pub const FAILED: u8 = 1;
    /// Bad usage or bad config (the message names the argument, or the key and the file).
    pub const USAGE: u8 = 2;
    /// The daemon cannot be reached (the message names the socket).
    pub const UNREACHABLE: u8 = 3;
    /// No such task or evidence: the id names nothing the daemon knows.
    pub const NOT_FOUND: u8 = 4;
}

#[derive(Parser)]
#[command(
    name = "agentd",
    version,
    about = "Runs teams of LLM agents inside measured context windows",
    after_help = "Exit codes: 0 success; 1 the task failed or was cancelled; 2 bad usage or config; \
                  3 the daemon cannot be reached; 4 no such task or evidence."
)]
struct Cli {
    /// The home directory: config, socket, database and evidence (default: $AGENTD_HOME, else
    /// ~/.agentd).
    #[arg(long, global = true, env = "AGENTD_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How `serve` writes its log (to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for journald or a log shipper.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Write a commented default agentd.toml (never overwrites one).
    Init {
        /// Print what was done as JSON: {"config": PATH, "written": BOOL}.
        #[arg(long)]
        json: bool,
    },
    /// Run the daemon in the foreground until SIGINT/SIGTERM.
    Serve {
        /// The log's format on stderr.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Also serve the dashboard and HTTP API here (PORT, IP:PORT or [IPv6]:PORT; a port alone
        /// is 127.0.0.1), whatever `[http] listen` says.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
    },
    /// Print the dashboard's URL with its login token (the daemon must serve HTTP).
    Dashboard {
        /// Print `{url}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Submit a task; prints its id.
    Submit {
        /// What the team should do, in words.
        objective: String,
        /// The task's workspace (default: the current directory).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// The team to run it (default: the configured one).
        #[arg(long, value_name = "NAME")]
        team: Option<String>,
        /// Stream the events until the task ends; exit 0 only if it finished.
        #[arg(long)]
        wait: bool,
        /// Print JSON: the task id as {"task_id": ...}, or with --wait one event per line.
        #[arg(long)]
        json: bool,
    },
    /// List tasks.
    Tasks {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a task.
    Status {
        /// The task's id.
        task: String,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stream a task's events from the first until it ends.
    Watch {
        /// The task's id.
        task: String,
        /// Print one event per line as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a task.
    Cancel {
        /// The task's id.
        task: String,
        /// Print the new state as JSON: {"state": ...}.
        #[arg(long)]
        json: bool,
    },
    /// Continue an interrupted or failed task from its log.
    Resume {
        /// The task's id.
        task: String,
        /// Print the new state as JSON: {"state": ...}.
        #[arg(long)]
        json: bool,
    },
    /// Send a follow-up request to a task that has stopped; the lead takes it up.
    Message {
        /// The task's id.
        task: String,
        /// The follow-up request, in words.
        text: String,
        /// Stream the events until the task stops again.
        #[arg(long)]
        wait: bool,
        /// Print JSON: the new state as {"state": ...}, or with --wait one event per line.
        #[arg(long)]
        json: bool,
    },
    /// The context gauge of a task's role.
    Context {
        /// The task's id.
        task: String,
        /// The role: lead, coder or a specialist's name.
        #[arg(long, default_value = "lead")]
        role: String,
        /// Print the gauge as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The transcript: messages, checkpoints and events.
    Log {
        /// The task's id.
        task: String,
        /// Only this role's records: lead, coder or a specialist's name.
        #[arg(long)]
        role: Option<String>,
        /// Print one record per line as JSON.
        #[arg(long, visible_alias = "jsonl")]
        json: bool,
    },
    /// Inspect the evidence archive.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
    /// Ask the providers.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// Read or change a role's setting (compact_at).
    Settings {
        /// The role: lead, coder or a specialist's name.
        role: String,
        /// The setting: compact_at (the percent of the window at which a request is compacted).
        key: String,
        /// The new value; without it the current value is printed.
        value: Option<u64>,
        /// Print the setting as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The daemon's version, uptime, running tasks, jobs, time zone and storage.
    Daemon {
        /// Print daemon.status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: `agentd completions bash > ~/.local/share/bash-completion/completions/agentd`.
    Completions {
        /// The shell: bash, zsh or fish (elvish and powershell work too).
        shell: clap_complete::Shell,
    },
    /// Serve MCP on stdin and stdout: tools with which another agent submits and follows tasks of
    /// the running daemon.
    Mcp,
}

#[derive(Subcommand)]
enum EvidenceCommand {
    /// List evidence, optionally of one task.
    List {
        /// Only this task's evidence.
        #[arg(long)]
        task: Option<String>,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one piece of evidence's metadata.
    Show {
        /// The evidence id (ev-…).
        id: String,
        /// Print the metadata as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a page of evidence (bytes by default).
    Read {
        /// The evidence id (ev-…).
        id: String,
        /// Where the page starts, in bytes (or lines with --lines), from 0.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// How much to print, in bytes (or lines with --lines); default 64 KiB.
        #[arg(long)]
        limit: Option<u64>,
        /// Count offset and limit in lines instead of bytes.
        #[arg(long)]
        lines: bool,
        /// Print the page as JSON: {data, offset, len, total_bytes, complete, next_offset}.
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every blob; exit 1 naming each one missing or altered.
    Verify {
        /// Print the report as JSON: {checked, problems}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Ask the provider for the role's window and print it with its source.
    Probe {
        /// The role whose provider and model are asked: lead, coder or a specialist's name.
        #[arg(long)]
        role: String,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A failure and the exit code it maps to (see [`exit`]).
#[derive(Debug)]
struct Failure {
    code: u8,
    message: String,
    /// Already written to the log (`serve --log-format json`): not printed again.
    logged: bool,
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        let code = match (&e, e.error_code()) {
            (ClientError::Connect { .. }, _) => exit::UNREACHABLE,
            (ClientError::RequestTooLong { .. }, _) => exit::USAGE,
            (_, Some(ErrorCode::UnknownTask | ErrorCode::UnknownEvidence)) => exit::NOT_FOUND,
            (
                _,
                Some(
                    ErrorCode::InvalidRequest
                    | ErrorCode::MethodNotFound
                    | ErrorCode::InvalidParams
                    | ErrorCode::BadWorkspace,
                ),
            ) => exit::USAGE,
            _ => exit::FAILED,
        };
        fail(code, e.to_string())
    }
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into(), logged: false }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if !f.logged {
                eprintln!("agentd: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

/// `agentd mcp`: stdout is the MCP channel, so the log goes to stderr; a task submitted without a
/// workspace runs in the directory this was started in.
fn mcp_command(home: &Home) -> Result<u8, Failure> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cwd = std::env::current_dir().map_err(|e| fail(2, format!("current directory: {e}")))?;
    let server = agentd_daemon::mcp::server::AgentdMcp::new(home.socket(), cwd);
    agentd_daemon::mcp::server::run_stdio(server).map_err(|e| fail(1, e.to_string()))?;
    Ok(0)
}

/// Pretty JSON of a typed answer, for `--json`.
fn pretty<T: agentd_protocol::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// The home: `--home`, else `$AGENTD_HOME` (clap reads both), else `~/.agentd` — never the
/// current directory.
fn home_of(cli_home: Option<PathBuf>) -> Result<Home, Failure> {
    match cli_home.or_else(Home::default_dir) {
        Some(dir) => Ok(Home::new(dir)),
        None => {
            Err(fail(exit::USAGE, "no home directory: HOME is not set; pass --home DIR or set AGENTD_HOME"))
        }
    }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "agentd", &mut std::io::stdout());
        return Ok(exit::OK);
    }
    let home = home_of(cli.home)?;
    match cli.command {
        Command::Completions { .. } => Ok(exit::OK),
        Command::Init { json } => init(&home, json),
        Command::Serve { log_format, http } => serve_command(&home, log_format, http.as_deref()),
        Command::Dashboard { json } => dashboard(&home, json),
        Command::Mcp => mcp_command(&home),
        Command::Submit { objective, workspace, team, wait, json } => {
            let workspace = match workspace {
                Some(w) => w,
                None => std::env::current_dir()
                    .map_err(|e| fail(exit::USAGE, format!("current directory: {e}")))?,
            };
            let workspace = std::fs::canonicalize(&workspace)
                .map_err(|e| fail(exit::USAGE, format!("workspace {}: {e}", workspace.display())))?;
            let mut client = connect(&home)?;
            let submit = SubmitParams { objective, workspace: workspace.display().to_string(), team };
            let submitted: Submitted = client.request(&Request::TaskSubmit(submit))?;
            if !wait {
                if json {
                    println!("{}", pretty(&submitted));
                } else {
                    println!("{}", submitted.task_id);
                }
                return Ok(exit::OK);
            }
            if !json {
                println!("task {}", submitted.task_id);
            }
            follow(&mut client, &submitted.task_id, json)
        }
        Command::Tasks { json } => {
            let tasks: Vec<TaskSummary> = connect(&home)?.request(&Request::TaskList(NoParams {}))?;
            if json {
                println!("{}", pretty(&tasks));
            } else {
                for t in &tasks {
                    println!(
                        "{}  {:<13} {}  {}",
                        t.task_id,
                        t.state.as_str(),
                        t.created_at,
                        agentd_client::render::one_line(&t.objective, 60)
                    );
                }
            }
            Ok(exit::OK)
        }
        Command::Status { task, json } => {
            let status: TaskStatus =
                connect(&home)?.request(&Request::TaskStatus(TaskRef { task_id: task }))?;
            if json {
                println!("{}", pretty(&status));
            } else {
                print_status(&status);
            }
            Ok(exit::OK)
        }
        Command::Watch { task, json } => {
            let mut client = connect(&home)?;
            follow(&mut client, &task, json)
        }
        Command::Cancel { task, json } => {
            let r: StateResult = connect(&home)?.request(&Request::TaskCancel(TaskRef { task_id: task }))?;
            print_state(&r, json);
            Ok(exit::OK)
        }
        Command::Resume { task, json } => {
            let r: StateResult = connect(&home)?.request(&Request::TaskResume(TaskRef { task_id: task }))?;
            print_state(&r, json);
            Ok(exit::OK)
        }
        Command::Message { task, text, wait, json } => {
            let mut client = connect(&home)?;
            let r: StateResult =
                client.request(&Request::TaskMessage(MessageParams { task_id: task.clone(), text }))?;
            if !wait {
                print_state(&r, json);
                return Ok(exit::OK);
            }
            follow_from(&mut client, &task, json, true)
        }
        Command::Context { task, role, json } => {
            let params = ContextParams { task_id: task, role: Some(Role::from(role)) };
            let g: ContextResult = connect(&home)?.request(&Request::ContextGet(params))?;
            if json {
                println!("{}", pretty(&g));
            } else {
                match g {
                    ContextResult::Measured(g) => print_gauge(&g),
                    ContextResult::Unmeasured(u) => println!("{}: {}", u.role, u.note),
                }
            }
            Ok(exit::OK)
        }
        Command::Log { task, role, json } => {
            let mut client = connect(&home)?;
            let mut after = 0u64;
            loop {
                let params = LogParams {
                    task_id: task.clone(),
                    role: role.clone().map(Role::from),
                    after_seq: Some(after),
                    limit: Some(1000),
                };
                let page: LogResult = client.request(&Request::LogGet(params))?;
                if page.records.is_empty() {
                    break;
                }
                for r in &page.records {
                    after = after.max(r.seq);
                    if json {
                        println!("{}", serde_json::to_string(r).unwrap_or_default());
                    } else {
                        print_record(r);
                    }
                }
            }
            Ok(exit::OK)
        }
        Command::Evidence { command } => evidence(&home, command),
        Command::Models { command: ModelsCommand::Probe { role, json } } => {
            let params = RoleParams { role: Role::from(role) };
            let r: ProbeResult = connect(&home)?.request(&Request::ModelsProbe(params))?;
            if json {
                println!("{}", pretty(&r));
            } else {
                println!(
                    "{}: {} at {}: window {} tokens ({})",
                    r.role,
                    r.model,
                    r.server,
                    r.window,
                    r.window_source.as_str()
                );
            }
            Ok(exit::OK)
        }
        Command::Settings { role, key, value, json } => {
            let key: SettingKey = serde_json::from_value(serde_json::Value::String(key.clone()))
                .map_err(|_| fail(exit::USAGE, format!("unknown setting {key:?}; settable: compact_at")))?;
            let mut client = connect(&home)?;
            let params =
                SettingParams { role: Role::from(role), key, value: value.map(serde_json::Value::from) };
            let r: SettingResult = match params.value {
                Some(_) => client.request(&Request::SettingsSet(params))?,
                None => client.request(&Request::SettingsGet(params))?,
            };
            if json {
                println!("{}", pretty(&r));
            } else {
                println!("{} {} = {}", r.role, r.key.as_str(), r.value);
            }
            Ok(exit::OK)
        }
        Command::Daemon { json } => {
            let r: DaemonStatus = connect(&home)?.request(&Request::DaemonStatus(NoParams {}))?;
            if json {
                println!("{}", pretty(&r));
            } else {
                print_daemon(&r);
            }
            if !r.storage.ok {
                eprintln!(
                    "storage is failing since {}: {}",
                    r.storage.since.as_deref().unwrap_or("?"),
                    r.storage.error.as_deref().unwrap_or("")
                );
            }
            Ok(exit::OK)
        }
    }
}

fn print_state(r: &StateResult, json: bool) {
    if json {
        println!("{}", pretty(r));
    } else {
        println!("{}", r.state);
    }
}

fn evidence(home: &Home, command: EvidenceCommand) -> Result<u8, Failure> {
    let mut client = connect(home)?;
    match command {
        EvidenceCommand::List { task, json } => {
            let list: Vec<EvidenceMeta> =
                client.request(&Request::EvidenceList(EvidenceListParams { task_id: task }))?;
            if json {
                println!("{}", pretty(&list));
            } else {
                for e in &list {
                    println!(
                        "{}  {:>10} bytes  {:<8} {:<12} {}{}",
                        e.id,
                        e.bytes,
                        e.source.role.name(),
                        e.source.tool.as_str(),
                        agentd_client::render::one_line(e.source.detail.as_deref().unwrap_or(""), 50),
                        if e.complete { "" } else { "  (incomplete)" }
                    );
                }
            }
        }
        EvidenceCommand::Show { id, json } => {
            let meta: EvidenceMeta = client.request(&Request::EvidenceGet(EvidenceRef { id }))?;
            if json {
                println!("{}", pretty(&meta));
            } else {
                print_meta(&meta);
            }
        }
        EvidenceCommand::Read { id, offset, limit, lines, json } => {
            let unit = if lines { Unit::Lines } else { Unit::Bytes };
            let params = EvidenceReadParams { id, offset: Some(offset), limit, unit: Some(unit) };
            let page: Page = client.request(&Request::EvidenceRead(params))?;
            if json {
                println!("{}", pretty(&page));
                return Ok(exit::OK);
            }
            print!("{}", page.data);
            let _ = std::io::stdout().flush();
            if let Some(next) = page.next_offset {
                eprintln!("\n(more: --offset {next})");
            }
        }
        EvidenceCommand::Verify { json } => {
            let r: VerifyResult = client.request(&Request::EvidenceVerify(NoParams {}))?;
            if json {
                println!("{}", pretty(&r));
            } else {
                for p in &r.problems {
                    println!("{}", p.problem);
                }
                println!("{} checked, {} problems", r.checked, r.problems.len());
            }
            if !r.problems.is_empty() {
                return Ok(exit::FAILED);
            }
        }
    }
    Ok(exit::OK)
}

fn init(home: &Home, json: bool) -> Result<u8, Failure> {
    home.ensure().map_err(|e| fail(exit::USAGE, format!("cannot create {}: {e}", home.dir.display())))?;
    let path = home.config();
    let report = |written: bool| {
        if json {
            println!("{}", pretty(&serde_json::json!({"config": path, "written": written})));
        } else if written {
            println!("wrote {}", path.display());
        } else {
            println!("{} already exists; left unchanged", path.display());
        }
    };
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(mut f) => {
            f.write_all(DEFAULT_CONFIG.as_bytes())
                .map_err(|e| fail(exit::USAGE, format!("{}: {e}", path.display())))?;
            report(true);
            Ok(exit::OK)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            report(false);
            Ok(exit::OK)
        }
        Err(e) => Err(fail(exit::USAGE, format!("{}: {e}", path.display()))),
    }
}

fn serve_command(home: &Home, log_format: LogFormat, http: Option<&str>) -> Result<u8, Failure> {
    let http = match http {
        None => None,
        Some(text) => Some(parse_listen(text).map_err(|e| fail(exit::USAGE, format!("--http: {e}")))?),
    };
    let options = ServeOptions { http };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = log_format == LogFormat::Json;
    if json {
        tracing_subscriber::fmt().json().with_env_filter(filter).with_writer(std::io::stderr).init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let outcome = serve_in(home, json, &options);
    match outcome {
        // With JSON logs every line of stderr is JSON: the failure is a log record too.
        Err(mut f) if json => {
            tracing::error!(exit_code = f.code, error = %f.message, "agentd serve failed");
            f.logged = true;
            Err(f)
        }
        other => other,
    }
}

fn serve_in(home: &Home, json: bool, options: &ServeOptions) -> Result<u8, Failure> {
    // Check the config before anything else, so a bad one is exit code 2 with the key named.
    let config = home.config();
    if config.exists() {
        let loaded = Config::load(&config).map_err(|e| fail(exit::USAGE, e.to_string()))?;
        loaded.check_keys(|name| std::env::var_os(name)).map_err(|e| fail(exit::USAGE, e.to_string()))?;
    }
    let ready = move |socket: &std::path::Path| {
        // The JSON log already says so ("agentd is serving", with the socket).
        if !json {
            eprintln!("agentd: serving on {}", socket.display());
        }
    };
    match serve(home, options, ready) {
        Ok(()) => Ok(exit::OK),
        Err(e @ (DaemonError::Config(_) | DaemonError::NoConfig(_))) => Err(fail(exit::USAGE, e.to_string())),
        Err(e) => Err(fail(exit::FAILED, e.to_string())),
    }
}

/// `agentd dashboard`: the URL that logs a browser in, from the daemon's HTTP address and the token.
fn dashboard(home: &Home, json: bool) -> Result<u8, Failure> {
    let status: DaemonStatus = connect(home)?.request(&Request::DaemonStatus(NoParams {}))?;
    let Some(http) = status.http else {
        return Err(fail(
            2,
            format!(
                "the daemon serves no dashboard: set `[http] listen = \"127.0.0.1:7878\"` in {} or run `agentd serve --http 127.0.0.1:7878`",
                home.config().display()
            ),
        ));
    };
    let path = home.http_token();
    let token = std::fs::read_to_string(&path).map_err(|e| fail(1, format!("{}: {e}", path.display())))?;
    let addr: std::net::SocketAddr = http
        .listen
        .parse()
        .map_err(|e| fail(1, format!("the daemon's HTTP address {:?}: {e}", http.listen)))?;
    // Listening on every address: this machine reaches it on loopback.
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => {
            std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
        }
        ip if ip.is_unspecified() => std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    };
    let url = format!("http://{host}/?{}={}", agentd_protocol::http::TOKEN_QUERY, token.trim());
    if json {
        println!("{}", serde_json::json!({ "url": url }));
    } else {
        println!("{url}");
    }
    Ok(exit::OK)
}

fn connect(home: &Home) -> Result<Client, Failure> {
    Ok(Client::connect(&home.socket())?)
}

/// Streams a task's events until its terminal event; exit 0 only when it finished.
fn follow(client: &mut Client, task_id: &str, json: bool) -> Result<u8, Failure> {
    follow_from(client, task_id, json, false)
}

/// Like [`follow`]; with `latest`, from the last `task_message` on (a follow-up's own events).
fn follow_from(client: &mut Client, task_id: &str, json: bool, latest: bool) -> Result<u8, Failure> {
    let mut after = 0;
    if latest {
        let params = LogParams { task_id: task_id.to_string(), role: None, after_seq: None, limit: None };
        let log: LogResult = client.request(&Request::LogGet(params))?;
        for entry in &log.records {
            if let Record::Event { event } = &entry.record {
                if matches!(event.kind, EventKind::TaskMessage { .. }) {
                    after = event.seq.saturating_sub(1);
                }
            }
        }
    }
    let _: Subscribed = client.request(&Request::TaskSubscribe(SubscribeParams {
        task_id: task_id.to_string(),
        after_seq: Some(after),
    }))?;
    loop {
        // An end in the history that was later resumed or followed up is not the end: the daemon
        // marks the real one (`task.end`) after the terminal event that nothing follows.
        let event = match client.next_item()? {
            StreamItem::Event(event) => event,
            // An end the daemon could not record (its storage failed) is never a success.
            StreamItem::End(end) if !end.recorded => {
                eprintln!(
                    "task {task_id} ended {} but its end is not recorded: {}",
                    end.state.map_or("?", |s| s.as_str()),
                    end.error.as_deref().unwrap_or("")
                );
                return Ok(exit::FAILED);
            }
            StreamItem::End(end) => {
                return Ok(if end.kind == EndKind::TaskFinished { exit::OK } else { exit::FAILED })
            }
        };
        if json {
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            println!("{}", event_line(&event));
        }
        let _ = std::io::stdout().flush();
    }
}

fn print_daemon(r: &DaemonStatus) {
    println!("version      {}", r.version);
    println!("uptime       {}s", r.uptime_s);
    println!("tasks        {} running", r.tasks_running);
    println!("clock        {}", r.clock);
    println!("time zone    {} (cron schedules)", r.tz);
    if r.storage.ok {
        println!("storage      ok");
    } else {
        println!(
            "storage      failing since {}: {} ({} task ends held in memory)",
            r.storage.since.as_deref().unwrap_or("?"),
            r.storage.error.as_deref().unwrap_or(""),
            r.storage.unrecorded_ends
        );
    }
    for j in &r.jobs {
        let last = match (&j.last_run_at, j.last_ok) {
            (Some(at), Some(ok)) => format!(
                "; last {at} {}: {}",
                if ok { "ok" } else { "failed" },
                j.last_outcome.as_deref().unwrap_or("")
            ),
            _ => String::new(),
        };
        println!(
            "job          {} `{}` {}: {} runs{last}; next {}",
            j.name,
            j.cron,
            j.action.as_str(),
            j.runs,
            j.next_run_at.as_deref().unwrap_or("never")
        );
    }
}

fn print_meta(m: &EvidenceMeta) {
    println!("id         {}", m.id);
    println!("size       {} bytes, {} lines ({})", m.bytes, m.lines, m.media_type);
    println!("sha256     {}", m.sha256);
    println!("task       {}", m.source.task_id);
    let detail = m.source.detail.as_deref().map(|d| format!(" {d}")).unwrap_or_default();
    let call = m.source.call_id.as_deref().map(|c| format!(" (call {c})")).unwrap_or_default();
    println!("made by    {} {}{detail}{call}", m.source.role.name(), m.source.tool.as_str());
    match (&m.complete, &m.incomplete_reason) {
        (true, _) => println!("complete   yes"),
        (false, reason) => {
            println!("complete   no: {}", reason.as_deref().unwrap_or("the producer was cut off"))
        }
    }
    println!("created    {}", m.created_at);
}

fn print_status(s: &TaskStatus) {
    println!("task       {}", s.task_id);
    println!("state      {}", s.state);
    println!("objective  {}", s.objective);
    println!("workspace  {}", s.workspace);
    for (role, r) in &s.roles {
        println!(
            "{:<10} {}{} of {} tokens ({}); counted by {}",
            role.name(),
            estimate_mark(r.estimated),
            r.tokens,
            r.window,
            r.window_source.as_str(),
            measure_of(&r.measured_by, r.count_source)
        );
    }
    if let Some(r) = &s.result {
        println!("result     {r}");
    }
    if let Some(e) = &s.error {
        println!("error      {e}");
    }
    if !s.recorded {
        println!("recorded   no: the daemon holds this end in memory until its storage heals");
    }
}

/// How a role's count was measured, in words (`estimate, calibrated from 12 usage reports, ±1.4 %`).
fn measure_of(measured_by: &str, source: agentd_protocol::CountSource) -> String {
    if measured_by.is_empty() {
        source.as_str().to_string()
    } else {
        measured_by.to_string()
    }
}

fn print_gauge(g: &Gauge) {
    let est = estimate_mark(g.estimated);
    println!("role         {} ({})", g.role, g.model);
    println!("window       {} tokens ({})", g.window, g.window_source.as_str());
    println!("counted by   {}", measure_of(&g.measured_by, g.count_source));
    let c = &g.categories;
    for (label, tokens) in [
        ("system", c.system),
        ("tools", c.tools),
        ("objective", c.objective),
        ("checkpoint", c.checkpoint),
        ("observations", c.observations),
        ("files", c.files),
        ("recent", c.messages),
        ("thinking", c.thinking),
    ] {
        println!("  {label:<12} {est}{tokens}");
    }
    println!("total        {est}{}", g.tokens);
    println!("trigger      {} ({}%)", g.trigger_tokens, g.compact_at);
    println!("destination  {}", g.destination_tokens);
    println!("free         {est}{}", g.free_tokens);
}

fn print_record(entry: &LogEntry) {
    let seq = entry.seq;
    let one_line = agentd_client::render::one_line;
    match &entry.record {
        Record::Event { event } => println!("{}", event_line(event)),
        Record::Message { role, message } => {
            let parts: Vec<String> = message
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text { text } => text.clone(),
                    Part::Thinking { text, .. } => format!("(thinking) {text}"),
                    Part::ToolCall { name, arguments, .. } => format!("call {name} {arguments}"),
                    Part::ToolResult { call_id, content, .. } => format!("result {call_id}: {content}"),
                    Part::Image { media_type, .. } => format!("(image {media_type})"),
                })
                .collect();
            println!("#{seq} {role} {}: {}", message.role.as_str(), one_line(&parts.join(" | "), 200));
        }
        Record::Checkpoint { role, subtype, history, .. } => {
            println!("#{seq} {role} checkpoint ({}): {} messages", subtype.as_str(), history.len())
        }
        Record::Settings { role, settings } => {
            println!("#{seq} {role} settings {}", serde_json::to_string(settings).unwrap_or_default())
        }
        Record::Receipt { role, receipt } => println!(
            "#{seq} {role} receipt: {} {} → {}",
            receipt.tool,
            one_line(&receipt.arguments, 60),
            if receipt.ok { "ok" } else { "failed" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand at any depth, with its path (`evidence read`).
    fn leaves(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        if cmd.get_subcommands().next().is_none() {
            out.push((path, cmd.clone()));
            return;
        }
        for sub in cmd.get_subcommands() {
            let name = format!("{path} {}", sub.get_name()).trim().to_string();
            leaves(sub, name, out);
        }
    }

    fn commands() -> Vec<(String, clap::Command)> {
        let mut out = Vec::new();
        leaves(&Cli::command(), String::new(), &mut out);
        out
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_argument_and_flag_has_a_help_text() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        for arg in cmd.get_arguments() {
            if arg.get_help().is_none() && !matches!(arg.get_id().as_str(), "help" | "version") {
                missing.push(format!("agentd --{}", arg.get_id()));
            }
        }
        for (path, sub) in commands() {
            if sub.get_about().is_none() {
                missing.push(format!("agentd {path} (about)"));
            }
            for arg in sub.get_arguments() {
                if arg.get_help().is_none() && !matches!(arg.get_id().as_str(), "help" | "home") {
                    missing.push(format!("agentd {path} {}", arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn every_command_that_prints_takes_json() {
        // `serve` prints a log (see --log-format), `completions` a shell script, `mcp` speaks MCP's
        // own JSON-RPC on stdout.
        let exempt = ["serve", "completions", "mcp"];
        let without: Vec<String> = commands()
            .into_iter()
            .filter(|(path, _)| !exempt.contains(&path.as_str()))
            .filter(|(_, sub)| !sub.get_arguments().any(|a| a.get_long() == Some("json")))
            .map(|(path, _)| path)
            .collect();
        assert!(without.is_empty(), "no --json: {without:?}");
        assert!(commands().len() > 15, "the walk found the commands");
    }

    #[test]
    fn the_home_is_never_the_current_directory() {
        let home = home_of(None).unwrap();
        assert!(home.dir.is_absolute() && home.dir.ends_with(".agentd"), "{}", home.dir.display());
        assert_eq!(home_of(Some(PathBuf::from("/srv/agentd"))).unwrap().dir, PathBuf::from("/srv/agentd"));
    }
}
