//! The `agentd` binary: command-line parsing and wiring only. The daemon lives in `agentd-runtime`;
//! every other command is a client of its socket.

use agentd_protocol::gauge::Gauge;
use agentd_protocol::rpc::{
    ContextParams, ContextResult, DaemonStatus, EndKind, EvidenceListParams, EvidenceReadParams, EvidenceRef,
    LogEntry, LogParams, LogResult, MessageParams, NoParams, ProbeResult, RoleParams, SettingKey,
    SettingParams, SettingResult, StateResult, SubmitParams, Submitted, SubscribeParams, Subscribed, TaskRef,
    TaskStatus, TaskSummary, VerifyResult,
};
use agentd_protocol::{ErrorCode, EventKind, EvidenceMeta, Page, Part, Record, Request, Role, Unit};
use agentd_runtime::client::{Client, ClientError, StreamItem};
use agentd_runtime::config::{Config, DEFAULT_CONFIG};
use agentd_runtime::daemon::{serve, DaemonError, Home};
use agentd_runtime::render::{estimate_mark, event_line};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "agentd", version, about = "Runs teams of LLM agents inside measured context windows")]
struct Cli {
    /// The home directory: config, socket, database and evidence.
    #[arg(long, global = true, env = "AGENTD_HOME", default_value = "./.agentd")]
    home: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a commented default agentd.toml (never overwrites one).
    Init,
    /// Run the daemon in the foreground until SIGINT/SIGTERM.
    Serve,
    /// Submit a task; prints its id.
    Submit {
        objective: String,
        /// The task's workspace (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[arg(long)]
        team: Option<String>,
        /// Stream the events until the task ends; exit 0 only if it finished.
        #[arg(long)]
        wait: bool,
        /// With --wait: one event per line as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List tasks.
    Tasks {
        #[arg(long)]
        json: bool,
    },
    /// Show a task.
    Status {
        task: String,
        #[arg(long)]
        json: bool,
    },
    /// Stream a task's events from the first until it ends.
    Watch {
        task: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop a task.
    Cancel { task: String },
    /// Continue an interrupted or failed task from its log.
    Resume { task: String },
    /// Send a follow-up request to a task that has stopped; the lead takes it up.
    Message {
        task: String,
        text: String,
        /// Stream the events until the task stops again.
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
    /// The context gauge of a task's role.
    Context {
        task: String,
        #[arg(long, default_value = "lead")]
        role: String,
        #[arg(long)]
        json: bool,
    },
    /// The transcript: messages, checkpoints and events.
    Log {
        task: String,
        #[arg(long)]
        role: Option<String>,
        /// One record per line as JSON.
        #[arg(long)]
        jsonl: bool,
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
    Settings { role: String, key: String, value: Option<u64> },
    /// The daemon's version, uptime and running tasks.
    Daemon,
    /// Serve MCP on stdin and stdout: tools with which another agent submits and follows tasks of
    /// the running daemon.
    Mcp,
}

#[derive(Subcommand)]
enum EvidenceCommand {
    /// List evidence, optionally of one task.
    List {
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one piece of evidence's metadata.
    Show { id: String },
    /// Print a page of evidence (bytes by default).
    Read {
        id: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long)]
        limit: Option<u64>,
        /// Count offset and limit in lines instead of bytes.
        #[arg(long)]
        lines: bool,
    },
    /// Re-hash every blob; exit 1 naming each one missing or altered.
    Verify,
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Ask the provider for the role's window and print it with its source.
    Probe {
        #[arg(long)]
        role: String,
    },
}

/// A failure and the exit code it maps to (1 task failed, 2 usage or config, 3 unreachable).
struct Failure {
    code: u8,
    message: String,
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        let code = match (&e, e.error_code()) {
            (ClientError::Connect { .. }, _) => 3,
            (
                _,
                Some(
                    ErrorCode::InvalidRequest
                    | ErrorCode::MethodNotFound
                    | ErrorCode::InvalidParams
                    | ErrorCode::BadWorkspace,
                ),
            ) => 2,
            _ => 1,
        };
        Failure { code, message: e.to_string() }
    }
}

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into() }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("agentd: {}", f.message);
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
    let server = agentd_runtime::mcp::server::AgentdMcp::new(home.socket(), cwd);
    agentd_runtime::mcp::server::run_stdio(server).map_err(|e| fail(1, e.to_string()))?;
    Ok(0)
}

/// Pretty JSON of a typed answer, for `--json`.
fn pretty<T: agentd_protocol::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn run(cli: Cli) -> Result<u8, Failure> {
    let home = Home::new(cli.home.clone());
    match cli.command {
        Command::Init => init(&home),
        Command::Serve => serve_command(&home),
        Command::Mcp => mcp_command(&home),
        Command::Submit { objective, workspace, team, wait, json } => {
            let workspace = match workspace {
                Some(w) => w,
                None => std::env::current_dir().map_err(|e| fail(2, format!("current directory: {e}")))?,
            };
            let workspace = std::fs::canonicalize(&workspace)
                .map_err(|e| fail(2, format!("workspace {}: {e}", workspace.display())))?;
            let mut client = connect(&home)?;
            let submit = SubmitParams { objective, workspace: workspace.display().to_string(), team };
            let Submitted { task_id } = client.request(&Request::TaskSubmit(submit))?;
            if !wait {
                println!("{task_id}");
                return Ok(0);
            }
            if !json {
                println!("task {task_id}");
            }
            follow(&mut client, &task_id, json)
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
                        agentd_runtime::render::one_line(&t.objective, 60)
                    );
                }
            }
            Ok(0)
        }
        Command::Status { task, json } => {
            let status: TaskStatus =
                connect(&home)?.request(&Request::TaskStatus(TaskRef { task_id: task }))?;
            if json {
                println!("{}", pretty(&status));
            } else {
                print_status(&status);
            }
            Ok(0)
        }
        Command::Watch { task, json } => {
            let mut client = connect(&home)?;
            follow(&mut client, &task, json)
        }
        Command::Cancel { task } => {
            let r: StateResult = connect(&home)?.request(&Request::TaskCancel(TaskRef { task_id: task }))?;
            println!("{}", r.state);
            Ok(0)
        }
        Command::Resume { task } => {
            let r: StateResult = connect(&home)?.request(&Request::TaskResume(TaskRef { task_id: task }))?;
            println!("{}", r.state);
            Ok(0)
        }
        Command::Message { task, text, wait, json } => {
            let mut client = connect(&home)?;
            let r: StateResult =
                client.request(&Request::TaskMessage(MessageParams { task_id: task.clone(), text }))?;
            if !wait {
                println!("{}", r.state);
                return Ok(0);
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
            Ok(0)
        }
        Command::Log { task, role, jsonl } => {
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
                    if jsonl {
                        println!("{}", serde_json::to_string(r).unwrap_or_default());
                    } else {
                        print_record(r);
                    }
                }
            }
            Ok(0)
        }
        Command::Evidence { command } => evidence(&home, command),
        Command::Models { command: ModelsCommand::Probe { role } } => {
            let params = RoleParams { role: Role::from(role) };
            let r: ProbeResult = connect(&home)?.request(&Request::ModelsProbe(params))?;
            println!(
                "{}: {} at {}: window {} tokens ({})",
                r.role,
                r.model,
                r.server,
                r.window,
                r.window_source.as_str()
            );
            Ok(0)
        }
        Command::Settings { role, key, value } => {
            let key: SettingKey = serde_json::from_value(serde_json::Value::String(key.clone()))
                .map_err(|_| fail(2, format!("unknown setting {key:?}; settable: compact_at")))?;
            let mut client = connect(&home)?;
            let params =
                SettingParams { role: Role::from(role), key, value: value.map(serde_json::Value::from) };
            let r: SettingResult = match params.value {
                Some(_) => client.request(&Request::SettingsSet(params))?,
                None => client.request(&Request::SettingsGet(params))?,
            };
            println!("{} {} = {}", r.role, r.key.as_str(), r.value);
            Ok(0)
        }
        Command::Daemon => {
            let r: DaemonStatus = connect(&home)?.request(&Request::DaemonStatus(NoParams {}))?;
            println!("{}", pretty(&r));
            if !r.storage.ok {
                eprintln!(
                    "storage is failing since {}: {}",
                    r.storage.since.as_deref().unwrap_or("?"),
                    r.storage.error.as_deref().unwrap_or("")
                );
            }
            Ok(0)
        }
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
                        agentd_runtime::render::one_line(e.source.detail.as_deref().unwrap_or(""), 50),
                        if e.complete { "" } else { "  (incomplete)" }
                    );
                }
            }
        }
        EvidenceCommand::Show { id } => {
            let meta: EvidenceMeta = client.request(&Request::EvidenceGet(EvidenceRef { id }))?;
            println!("{}", pretty(&meta));
        }
        EvidenceCommand::Read { id, offset, limit, lines } => {
            let unit = if lines { Unit::Lines } else { Unit::Bytes };
            let params = EvidenceReadParams { id, offset: Some(offset), limit, unit: Some(unit) };
            let page: Page = client.request(&Request::EvidenceRead(params))?;
            print!("{}", page.data);
            let _ = std::io::stdout().flush();
            if let Some(next) = page.next_offset {
                eprintln!("\n(more: --offset {next})");
            }
        }
        EvidenceCommand::Verify => {
            let r: VerifyResult = client.request(&Request::EvidenceVerify(NoParams {}))?;
            for p in &r.problems {
                println!("{}", p.problem);
            }
            println!("{} checked, {} problems", r.checked, r.problems.len());
            if !r.problems.is_empty() {
                return Ok(1);
            }
        }
    }
    Ok(0)
}

fn init(home: &Home) -> Result<u8, Failure> {
    home.ensure().map_err(|e| fail(2, format!("cannot create {}: {e}", home.dir.display())))?;
    let path = home.config();
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(mut f) => {
            f.write_all(DEFAULT_CONFIG.as_bytes())
                .map_err(|e| fail(2, format!("{}: {e}", path.display())))?;
            println!("wrote {}", path.display());
            Ok(0)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            println!("{} already exists; left unchanged", path.display());
            Ok(0)
        }
        Err(e) => Err(fail(2, format!("{}: {e}", path.display()))),
    }
}

fn serve_command(home: &Home) -> Result<u8, Failure> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Check the config before anything else, so a bad one is exit code 2 with the key named.
    let config = home.config();
    if config.exists() {
        Config::load(&config).map_err(|e| fail(2, e.to_string()))?;
    }
    match serve(home, |socket| eprintln!("agentd: serving on {}", socket.display())) {
        Ok(()) => Ok(0),
        Err(e @ (DaemonError::Config(_) | DaemonError::NoConfig(_))) => Err(fail(2, e.to_string())),
        Err(e) => Err(fail(1, e.to_string())),
    }
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
                return Ok(1);
            }
            StreamItem::End(end) => return Ok(if end.kind == EndKind::TaskFinished { 0 } else { 1 }),
        };
        if json {
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            println!("{}", event_line(&event));
        }
        let _ = std::io::stdout().flush();
    }
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
    let one_line = agentd_runtime::render::one_line;
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
