//! The `agentd` binary: command-line parsing and wiring only. The daemon lives in `agentd-runtime`;
//! every other command is a client of its socket.

use agentd_runtime::client::{Client, ClientError, StreamItem};
use agentd_runtime::config::{Config, DEFAULT_CONFIG};
use agentd_runtime::daemon::{serve, DaemonError, Home};
use agentd_runtime::render::event_line;
use clap::{Parser, Subcommand};
use serde_json::{json, Value};
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
        let code = match &e {
            ClientError::Connect { .. } => 3,
            ClientError::Rpc { code, .. } if (-32602..=-32600).contains(code) || *code == -32004 => 2,
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

fn run(cli: Cli) -> Result<u8, Failure> {
    let home = Home::new(cli.home.clone());
    match cli.command {
        Command::Init => init(&home),
        Command::Serve => serve_command(&home),
        Command::Submit { objective, workspace, team, wait, json } => {
            let workspace = match workspace {
                Some(w) => w,
                None => std::env::current_dir().map_err(|e| fail(2, format!("current directory: {e}")))?,
            };
            let workspace = std::fs::canonicalize(&workspace)
                .map_err(|e| fail(2, format!("workspace {}: {e}", workspace.display())))?;
            let mut client = connect(&home)?;
            let mut params = json!({"objective": objective, "workspace": workspace});
            if let Some(t) = team {
                params["team"] = json!(t);
            }
            let result = client.call("task.submit", params)?;
            let task_id = result["task_id"].as_str().unwrap_or_default().to_string();
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
            let tasks = connect(&home)?.call("task.list", json!({}))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tasks).unwrap_or_default());
            } else {
                for t in tasks.as_array().into_iter().flatten() {
                    println!(
                        "{}  {:<13} {}  {}",
                        str_of(t, "task_id"),
                        str_of(t, "state"),
                        str_of(t, "created_at"),
                        agentd_runtime::render::one_line(str_of(t, "objective"), 60)
                    );
                }
            }
            Ok(0)
        }
        Command::Status { task, json } => {
            let status = connect(&home)?.call("task.status", json!({"task_id": task}))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status).unwrap_or_default());
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
            let r = connect(&home)?.call("task.cancel", json!({"task_id": task}))?;
            println!("{}", str_of(&r, "state"));
            Ok(0)
        }
        Command::Resume { task } => {
            let r = connect(&home)?.call("task.resume", json!({"task_id": task}))?;
            println!("{}", str_of(&r, "state"));
            Ok(0)
        }
        Command::Message { task, text, wait, json } => {
            let mut client = connect(&home)?;
            let r = client.call("task.message", json!({"task_id": task, "text": text}))?;
            if !wait {
                println!("{}", str_of(&r, "state"));
                return Ok(0);
            }
            follow_from(&mut client, &task, json, true)
        }
        Command::Context { task, role, json } => {
            let g = connect(&home)?.call("context.get", json!({"task_id": task, "role": role}))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&g).unwrap_or_default());
            } else {
                print_gauge(&g);
            }
            Ok(0)
        }
        Command::Log { task, role, jsonl } => {
            let mut client = connect(&home)?;
            let mut after = 0u64;
            loop {
                let mut params = json!({"task_id": task, "after_seq": after, "limit": 1000});
                if let Some(r) = &role {
                    params["role"] = json!(r);
                }
                let page = client.call("log.get", params)?;
                let records = page["records"].as_array().cloned().unwrap_or_default();
                if records.is_empty() {
                    break;
                }
                for r in &records {
                    after = after.max(r["seq"].as_u64().unwrap_or(after));
                    if jsonl {
                        println!("{r}");
                    } else {
                        print_record(r);
                    }
                }
            }
            Ok(0)
        }
        Command::Evidence { command } => evidence(&home, command),
        Command::Models { command: ModelsCommand::Probe { role } } => {
            let r = connect(&home)?.call("models.probe", json!({"role": role}))?;
            println!(
                "{}: {} at {}: window {} tokens ({})",
                role,
                str_of(&r, "model"),
                str_of(&r, "server"),
                r["window"],
                str_of(&r, "window_source")
            );
            Ok(0)
        }
        Command::Settings { role, key, value } => {
            let mut client = connect(&home)?;
            let r = match value {
                Some(v) => client.call("settings.set", json!({"role": role, "key": key, "value": v}))?,
                None => client.call("settings.get", json!({"role": role, "key": key}))?,
            };
            println!("{} {} = {}", role, key, r["value"]);
            Ok(0)
        }
        Command::Daemon => {
            let r = connect(&home)?.call("daemon.status", json!({}))?;
            println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            let storage = &r["storage"];
            if storage["ok"] == Value::Bool(false) {
                eprintln!(
                    "storage is failing since {}: {}",
                    str_of(storage, "since"),
                    str_of(storage, "error")
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
            let params = match task {
                Some(t) => json!({"task_id": t}),
                None => json!({}),
            };
            let list = client.call("evidence.list", params)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default());
            } else {
                for e in list.as_array().into_iter().flatten() {
                    let source = &e["source"];
                    println!(
                        "{}  {:>10} bytes  {:<8} {:<12} {}{}",
                        str_of(e, "id"),
                        e["bytes"],
                        str_of(source, "role"),
                        str_of(source, "tool"),
                        agentd_runtime::render::one_line(str_of(source, "detail"), 50),
                        if e["complete"] == json!(false) { "  (incomplete)" } else { "" }
                    );
                }
            }
        }
        EvidenceCommand::Show { id } => {
            let meta = client.call("evidence.get", json!({"id": id}))?;
            println!("{}", serde_json::to_string_pretty(&meta).unwrap_or_default());
        }
        EvidenceCommand::Read { id, offset, limit, lines } => {
            let mut params =
                json!({"id": id, "offset": offset, "unit": if lines { "lines" } else { "bytes" }});
            if let Some(l) = limit {
                params["limit"] = json!(l);
            }
            let page = client.call("evidence.read", params)?;
            print!("{}", str_of(&page, "data"));
            let _ = std::io::stdout().flush();
            if let Some(next) = page["next_offset"].as_u64() {
                eprintln!("\n(more: --offset {next})");
            }
        }
        EvidenceCommand::Verify => {
            let r = client.call("evidence.verify", json!({}))?;
            let problems = r["problems"].as_array().cloned().unwrap_or_default();
            for p in &problems {
                println!("{}", str_of(p, "problem"));
            }
            println!("{} checked, {} problems", r["checked"], problems.len());
            if !problems.is_empty() {
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

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Streams a task's events until its terminal event; exit 0 only when it finished.
fn follow(client: &mut Client, task_id: &str, json: bool) -> Result<u8, Failure> {
    follow_from(client, task_id, json, false)
}

/// Like [`follow`]; with `latest`, from the last `task_message` on (a follow-up's own events).
fn follow_from(client: &mut Client, task_id: &str, json: bool, latest: bool) -> Result<u8, Failure> {
    let mut after = 0;
    if latest {
        let log = client.call("log.get", json!({"task_id": task_id}))?;
        for r in log["records"].as_array().into_iter().flatten() {
            if r["type"] == "event" && r["event"]["kind"] == "task_message" {
                after = r["event"]["seq"].as_u64().unwrap_or(0).saturating_sub(1);
            }
        }
    }
    client.call("task.subscribe", json!({"task_id": task_id, "after_seq": after}))?;
    loop {
        // An end in the history that was later resumed or followed up is not the end: the daemon
        // marks the real one (`task.end`) after the terminal event that nothing follows.
        let event = match client.next_item()? {
            StreamItem::Event(event) => event,
            // An end the daemon could not record (its storage failed) is never a success.
            StreamItem::End(end) if !agentd_runtime::client::end_is_recorded(&end) => {
                eprintln!(
                    "task {task_id} ended {} but its end is not recorded: {}",
                    end.get("state").and_then(Value::as_str).unwrap_or("?"),
                    str_of(&end, "error")
                );
                return Ok(1);
            }
            StreamItem::End(end) => return Ok(if str_of(&end, "kind") == "task_finished" { 0 } else { 1 }),
        };
        if json {
            println!("{event}");
        } else {
            println!("{}", event_line(&event));
        }
        let _ = std::io::stdout().flush();
    }
}

fn print_status(s: &Value) {
    println!("task       {}", str_of(s, "task_id"));
    println!("state      {}", str_of(s, "state"));
    println!("objective  {}", str_of(s, "objective"));
    println!("workspace  {}", str_of(s, "workspace"));
    if let Some(roles) = s["roles"].as_object() {
        for (role, r) in roles {
            let est = if r["estimated"].as_bool() == Some(true) { "~" } else { "" };
            println!(
                "{:<10} {est}{} of {} tokens ({}); counted by {}",
                role,
                r["tokens"],
                r["window"],
                r["window_source"].as_str().unwrap_or(""),
                measure_of(r)
            );
        }
    }
    if let Some(r) = s["result"].as_str() {
        println!("result     {r}");
    }
    if let Some(e) = s["error"].as_str() {
        println!("error      {e}");
    }
    if s["recorded"] == Value::Bool(false) {
        println!("recorded   no: the daemon holds this end in memory until its storage heals");
    }
}

/// How a role's count was measured, in words (`estimate, calibrated from 12 usage reports, ±1.4 %`).
fn measure_of(g: &Value) -> String {
    match g["measured_by"].as_str() {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => str_of(g, "count_source").to_string(),
    }
}

fn print_gauge(g: &Value) {
    if g.get("measured") == Some(&json!(false)) {
        println!("{}: {}", str_of(g, "role"), str_of(g, "note"));
        return;
    }
    let est = if g["estimated"].as_bool() == Some(true) { "~" } else { "" };
    let window = g["window"].as_u64().unwrap_or(0);
    println!("role         {} ({})", str_of(g, "role"), str_of(g, "model"));
    println!("window       {} tokens ({})", window, str_of(g, "window_source"));
    println!("counted by   {}", measure_of(g));
    let c = &g["categories"];
    for (cat, label) in [
        ("system", "system"),
        ("tools", "tools"),
        ("objective", "objective"),
        ("checkpoint", "checkpoint"),
        ("observations", "observations"),
        ("files", "files"),
        ("messages", "recent"),
        ("thinking", "thinking"),
    ] {
        println!("  {label:<12} {est}{}", c[cat]);
    }
    println!("total        {est}{}", g["tokens"]);
    println!("trigger      {} ({}%)", g["trigger_tokens"], g["compact_at"]);
    println!("destination  {}", g["destination_tokens"]);
    println!("free         {est}{}", g["free_tokens"]);
}

fn print_record(r: &Value) {
    let seq = r["seq"].as_u64().unwrap_or(0);
    match str_of(r, "type") {
        "event" => println!("{}", event_line(&r["event"])),
        "message" => {
            let m = &r["message"];
            let mut parts = Vec::new();
            for p in m["parts"].as_array().into_iter().flatten() {
                parts.push(match str_of(p, "type") {
                    "text" => str_of(p, "text").to_string(),
                    "thinking" => format!("(thinking) {}", str_of(p, "text")),
                    "tool_call" => format!("call {} {}", str_of(p, "name"), str_of(p, "arguments")),
                    "tool_result" => {
                        format!("result {}: {}", str_of(p, "call_id"), str_of(p, "content"))
                    }
                    other => format!("({other})"),
                });
            }
            println!(
                "#{seq} {} {}: {}",
                str_of(r, "role"),
                str_of(m, "role"),
                agentd_runtime::render::one_line(&parts.join(" | "), 200)
            );
        }
        "system" => println!(
            "#{seq} {} checkpoint ({}): {} messages",
            str_of(r, "role"),
            str_of(r, "subtype"),
            r["history"].as_array().map_or(0, Vec::len)
        ),
        "settings" => println!("#{seq} {} settings {}", str_of(r, "role"), r["settings"]),
        "receipt" => {
            let rc = &r["receipt"];
            println!(
                "#{seq} {} receipt: {} {} → {}",
                str_of(r, "role"),
                str_of(rc, "tool"),
                agentd_runtime::render::one_line(str_of(rc, "arguments"), 60),
                if rc["ok"] == json!(true) { "ok" } else { "failed" }
            );
        }
        other => println!("#{seq} {other}"),
    }
}
