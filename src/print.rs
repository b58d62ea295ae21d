//! What the commands print on stdout: each answer of the daemon in words for a person, or with
//! `--json` as pretty JSON ([`pretty`]). The words are the interface a person reads and scripts
//! grep, so each renderer here is the one place its lines are spelled.
//!
//! Events have their own lines in `agentd_client::render` (`event_line`), shared with the demo;
//! long text is cut to one line with `agentd_client::render::one_line`.

use agentd_client::render::{estimate_mark, event_line, one_line};
use std::io::Write;

/// A line for a person on stdout: formatted, made safe for a terminal
/// ([`agentd_client::terminal::safe`]: what a model, a tool, a note or a file wrote cannot act on
/// it), and written by [`line`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::print::line(&agentd_client::terminal::safe(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// A line for a program on stdout (`--json`): written as it is, by [`line`].
macro_rules! raw {
    ($($arg:tt)*) => {
        $crate::print::line(&format!($($arg)*))
    };
}
pub(crate) use raw;

/// Writes `text` and a newline to stdout — or to the pager, while one runs ([`start_pager`]) —,
/// flushed: the one writer of the CLI's output. A reader that went away (`agentd log TASK | head
/// -1`, a pager quit early) is the end of the output: the program exits 0, quietly; another write
/// error is said on stderr, exit 1.
pub fn line(text: &str) {
    if let Some(pager) = PAGER.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_mut() {
        if let Some(input) = pager.stdin.as_mut() {
            let written = input.write_all(text.as_bytes()).and_then(|()| input.write_all(b"\n"));
            if let Err(e) = written {
                closed(e);
            }
            return;
        }
    }
    let mut out = std::io::stdout().lock();
    let written =
        out.write_all(text.as_bytes()).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
    if let Err(e) = written {
        closed(e);
    }
}

/// The pager the output goes through, while one runs.
static PAGER: std::sync::Mutex<Option<std::process::Child>> = std::sync::Mutex::new(None);

/// Sends what follows through a pager, as `git log` does: `$AGENTD_PAGER`, else `$PAGER`, else
/// `less` (with `LESS=FRX` unless `LESS` is set: it quits when the text fits the screen and keeps
/// it shown); run by `sh -c`, so it may carry arguments. An empty one, or one that does not start,
/// leaves the output on stdout. Only for a terminal: the caller checks [`to_a_terminal`].
pub fn start_pager() {
    let chosen =
        std::env::var("AGENTD_PAGER").or_else(|_| std::env::var("PAGER")).unwrap_or_else(|_| "less".into());
    if chosen.trim().is_empty() || chosen.trim() == "cat" {
        return;
    }
    let mut command = std::process::Command::new("sh");
    command.arg("-c").arg(&chosen).stdin(std::process::Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        command.env("LESS", "FRX");
    }
    if let Ok(child) = command.spawn() {
        *PAGER.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
    }
}

/// Ends the output to the pager and waits for the reader to quit it.
pub fn finish_pager() {
    let pager = PAGER.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(mut child) = pager {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}

/// Whether stdout is a terminal (a person reads it) rather than a file or a pipe.
pub fn to_a_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
}

/// Whether what goes to stderr may be coloured: only when it is a terminal, and `NO_COLOR` is not
/// set to anything (<https://no-color.org>). `serve 2>file` writes plain text.
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Writes `bytes` to stdout as they are, flushed (`evidence read`'s pages), as [`line`] does.
pub fn bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        closed(e);
    }
}

/// The end of the output: quietly when the reader went away, else said.
fn closed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    warn(&format!("agentd: cannot write to stdout: {e}"));
    std::process::exit(1);
}

/// A line for a person on stderr, made safe for a terminal; a closed stderr is not an error.
pub fn warn(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(agentd_client::terminal::safe(text).as_bytes()).and_then(|()| err.write_all(b"\n"));
}
use agentd_protocol::gauge::Gauge;
use agentd_protocol::rpc::{
    DaemonStatus, LogEntry, ProbeResult, SettingResult, StateResult, TaskStatus, TaskSummary, VerifyResult,
};
use agentd_protocol::{EvidenceMeta, Part, Record};

/// Pretty JSON of a typed answer, for `--json`.
pub fn pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// The state a task is in after `cancel`, `resume` or `message`.
pub fn print_state(r: &StateResult, json: bool) {
    if json {
        raw!("{}", pretty(r));
    } else {
        say!("{}", r.state);
    }
}

/// What a task spent, against its budget when it has one: `48210 tokens` or `48210/50000 tokens,
/// $0.41/$1.00`.
pub fn spent_of(spent: &agentd_protocol::Amount, budget: Option<&agentd_protocol::Budget>) -> String {
    let tokens = match budget.and_then(|b| b.tokens) {
        Some(max) => format!("{}/{max} tokens", spent.tokens),
        None => format!("{} tokens", spent.tokens),
    };
    let cost = match (spent.cost, budget.and_then(|b| b.cost)) {
        (c, Some(max)) => format!(", ${:.2}/${max:.2}", c.unwrap_or(0.0)),
        (Some(c), None) => format!(", ${c:.2}"),
        (None, None) => String::new(),
    };
    format!("{tokens}{cost}")
}

/// `agentd reload`: each key that changed, with its values and when it applies.
pub fn print_reload(r: &agentd_protocol::rpc::ReloadResult) {
    if r.changes.is_empty() {
        say!("{}: read again; nothing changed", r.path);
        return;
    }
    say!(
        "{}: read again; {} changed",
        r.path,
        if r.changes.len() == 1 { "1 key".to_string() } else { format!("{} keys", r.changes.len()) }
    );
    for c in &r.changes {
        let when = match c.applies {
            agentd_protocol::rpc::ConfigApplies::Now => "from the next turn",
            agentd_protocol::rpc::ConfigApplies::NextStart => "at the daemon's next start",
        };
        let before = c.before.as_deref().unwrap_or("(unset)");
        let after = c.after.as_deref().unwrap_or("(unset)");
        say!("  {}: {before} → {after} ({when})", c.key);
    }
}

/// `agentd tasks`' header, over the columns of [`print_task_line`]; then `no tasks` when there are
/// none.
pub fn print_task_header(empty: bool) {
    say!("{:<36}  {:<13} {:<20}  {:<24} OBJECTIVE", "ID", "STATE", "CREATED", "SPENT");
    if empty {
        say!("no tasks");
    }
}

/// `agentd evidence list`'s header, over the columns of [`print_evidence_line`]; then `no evidence`
/// when there is none.
pub fn print_evidence_header(empty: bool) {
    say!("{:<39}  {:>16}  {:<8} {:<12} DETAIL", "ID", "SIZE", "ROLE", "TOOL");
    if empty {
        say!("no evidence");
    }
}

/// `agentd tasks`: one task on one line (id, state, when created, spent against its budget, the
/// objective cut to 60).
pub fn print_task_line(t: &TaskSummary) {
    // In a fleet, the node running the task (or that last ran it) follows its state.
    let node = t.node.as_deref().map(|n| format!(" @{n}")).unwrap_or_default();
    // The agents at work on its delegations, while it runs.
    let branches = match t.branches.as_slice() {
        [] => String::new(),
        agents => format!(" [{}]", agents.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")),
    };
    say!(
        "{}  {:<13} {}  {:<24} {}{node}{branches}",
        t.task_id,
        t.state.as_str(),
        t.created_at,
        spent_of(&t.spent, t.budget.as_ref()),
        one_line(&t.objective, 60)
    );
}

/// `agentd evidence list`: one piece of evidence on one line, marked when incomplete.
pub fn print_evidence_line(e: &EvidenceMeta) {
    say!(
        "{}  {:>10} bytes  {:<8} {:<12} {}{}",
        e.id,
        e.bytes,
        e.source.role.name(),
        e.source.tool.as_str(),
        one_line(e.source.detail.as_deref().unwrap_or(""), 50),
        if e.complete { "" } else { "  (incomplete)" }
    );
}

/// `agentd evidence verify`: each problem, then the count.
pub fn print_verify(r: &VerifyResult) {
    for p in &r.problems {
        say!("{}", p.problem);
    }
    say!("{} checked, {} problems", r.checked, r.problems.len());
}

/// `agentd models probe`: the role's model, its server and the window with where it came from.
pub fn print_probe(r: &ProbeResult) {
    say!(
        "{}: {} at {}: window {} tokens ({})",
        r.role,
        r.model,
        r.server,
        r.window,
        r.window_source.as_str()
    );
}

/// `agentd settings`: the setting as `role key = value`.
pub fn print_setting(r: &SettingResult) {
    say!("{} {} = {}", r.role, r.key.as_str(), r.value);
}

/// `agentd daemon`: the daemon's status, a line a fact, one per scheduled job.
pub fn print_daemon(r: &DaemonStatus) {
    say!("version      {}", r.version);
    say!("uptime       {}s", r.uptime_s);
    say!("tasks        {} running", r.tasks_running);
    say!("clock        {}", r.clock);
    say!("time zone    {} (cron schedules)", r.tz);
    if r.storage.ok {
        say!("storage      ok");
    } else {
        say!(
            "storage      failing since {}: {} ({} task ends held in memory)",
            r.storage.since.as_deref().unwrap_or("?"),
            r.storage.error.as_deref().unwrap_or(""),
            r.storage.unrecorded_ends
        );
    }
    if let Some(c) = &r.cluster {
        if let Some(why) = &c.starting {
            say!("cluster      starting — {why}");
        }
        let link = if c.connected { "connected" } else { "not connected" };
        say!("node         {} ({link} to {})", c.node, c.servers.join(", "));
        if let Some(e) = &c.error {
            say!("fleet        failing: {e}");
        }
        for n in &c.nodes {
            say!(
                "  node       {} {}/{} tasks; reaches {}",
                n.node,
                n.running,
                n.max_tasks,
                n.workspaces.join(", ")
            );
        }
        for s in &c.streams {
            let lagging = if s.lagging.is_empty() {
                String::new()
            } else {
                format!("; behind: {}", s.lagging.join(", "))
            };
            say!("  stream     {} {} replicas, {} current{lagging}", s.name, s.replicas, s.current);
        }
    }
    if !r.today.day.is_empty() {
        say!(
            "today        {}: {} (the day turns at {})",
            r.today.day,
            spent_of(&r.today.spent, r.today.budget.as_ref()),
            r.today.next_day_at
        );
    }
    if !r.config.path.is_empty() {
        let differs =
            if r.config.differs { " — the file has changed since: `agentd reload` applies it" } else { "" };
        say!("config       {} (read {}){differs}", r.config.path, r.config.read_at);
    }
    if let Some(t) = &r.telemetry {
        let failed = match (&t.last_error, &t.last_error_at) {
            (Some(error), Some(at)) => {
                format!(", {} FAILED (the last at {at}: {error}) — their spans are lost", t.exports_failed)
            }
            _ => String::new(),
        };
        say!("telemetry    traces to {}: {} batches exported{failed}", t.endpoint, t.exports_ok);
    }
    for p in &r.providers {
        let verdict = match p.ok {
            None => "not asked yet",
            Some(true) => "ok",
            Some(false) => "UNREACHABLE",
        };
        say!("provider     {} ({} {}): {verdict}: {}", p.name, p.kind, p.base_url, p.detail);
    }
    for m in &r.mcp {
        let last = match &m.last_start {
            None => "not started yet".to_string(),
            Some(l) if l.ok => format!("started {} with {} tools", l.at, l.tools.unwrap_or(0)),
            Some(l) => format!("FAILED {}: {}", l.at, l.error.as_deref().unwrap_or("")),
        };
        say!("mcp          {} ({} {}): {last}", m.server, m.transport, m.target);
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
        say!(
            "job          {} `{}` {}: {} runs{last}; next {}",
            j.name,
            j.cron,
            j.action.as_str(),
            j.runs,
            j.next_run_at.as_deref().unwrap_or("never")
        );
    }
}

/// `agentd evidence show`: one piece of evidence's metadata.
pub fn print_meta(m: &EvidenceMeta) {
    say!("id         {}", m.id);
    say!("size       {} bytes, {} lines ({})", m.bytes, m.lines, m.media_type);
    say!("sha256     {}", m.sha256);
    say!("task       {}", m.source.task_id);
    let detail = m.source.detail.as_deref().map(|d| format!(" {d}")).unwrap_or_default();
    let call = m.source.call_id.as_deref().map(|c| format!(" (call {c})")).unwrap_or_default();
    say!("made by    {} {}{detail}{call}", m.source.role.name(), m.source.tool.as_str());
    match (&m.complete, &m.incomplete_reason) {
        (true, _) => say!("complete   yes"),
        (false, reason) => {
            say!("complete   no: {}", reason.as_deref().unwrap_or("the producer was cut off"))
        }
    }
    say!("created    {}", m.created_at);
}

/// `agentd status`: a task, with each role's context as tokens of its window.
pub fn print_status(s: &TaskStatus) {
    say!("task       {}", s.task_id);
    say!("state      {}", s.state);
    say!("objective  {}", s.objective);
    say!("workspace  {}", s.workspace);
    if let Some(node) = &s.node {
        say!("node       {node}");
    }
    if let Some(why) = &s.queued_because {
        say!("queued     {why}");
    }
    if let Some(why) = &s.waiting_because {
        say!("waiting    {why}");
    }
    for st in &s.stalled {
        say!(
            "stalled    {}: it {} (told once; stopped if it keeps on)",
            st.role.name(),
            one_line(&st.why, 100)
        );
    }
    for b in &s.branches {
        let copy = if b.working_copy.is_some() { " in a working copy" } else { "" };
        say!("branch     {} running{copy}: {}", b.role.name(), one_line(&b.objective, 80));
    }
    for (role, r) in &s.roles {
        say!(
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
        say!("result     {r}");
    }
    if let Some(e) = &s.error {
        say!("error      {e}");
    }
    if let Some(at) = &s.resume_at {
        say!("goes on    at {at} by itself (agentd resume {} goes on now)", s.task_id);
    }
    if let Some(budget) = &s.budget {
        say!("budget     {}", spent_of(&s.spent.amount(), Some(budget)));
    }
    if s.spent.requests > 0 {
        say!("spent      {}", spent_line(&s.spent));
        for (role, spent) in &s.spent_by_role {
            say!("  {:<8} {}", role.name(), spent_line(spent));
        }
    }
    for d in &s.mcp_down {
        let retry = d.retry_at.as_deref().map(|at| format!(" (tried again after {at})")).unwrap_or_default();
        say!("mcp down   {}: {}{retry}", d.server, d.error);
    }
    if !s.recorded {
        say!("recorded   no: the daemon holds this end in memory until its storage heals");
    }
}

/// A sum of requests in words: `12 requests: prompt 45000 tokens (30000 from the cache) / completion
/// 2000, $0.1234; 2 compactions: 3 summary requests, 9000 tokens, $0.0100`.
fn spent_line(s: &agentd_protocol::rpc::Spent) -> String {
    let cache = match (s.cache_read_tokens, s.cache_write_tokens) {
        (0, 0) => String::new(),
        (read, 0) => format!(" ({read} from the cache)"),
        (read, write) => format!(" ({read} from the cache, {write} written to it)"),
    };
    let cost = |c: Option<f64>| c.map(|c| format!(", {}", agentd_client::render::usd(c))).unwrap_or_default();
    let mut line = format!(
        "{} requests: prompt {} tokens{cache} / completion {}{}",
        s.requests,
        s.prompt_tokens,
        s.completion_tokens,
        cost(s.cost_usd)
    );
    let c = &s.compaction;
    if c.compactions > 0 {
        line.push_str(&format!(
            "; {} compactions: {} summary requests, {} tokens{}",
            c.compactions,
            c.requests,
            c.tokens,
            cost(c.cost_usd)
        ));
    }
    line
}

/// How a role's count was measured, in words (`estimate, calibrated from 12 usage reports, ±1.4 %`).
fn measure_of(measured_by: &str, source: agentd_protocol::CountSource) -> String {
    if measured_by.is_empty() {
        source.as_str().to_string()
    } else {
        measured_by.to_string()
    }
}

/// `agentd context`: a role's gauge, by category, with the trigger and the destination.
pub fn print_gauge(g: &Gauge) {
    let est = estimate_mark(g.estimated);
    say!("role         {} ({})", g.role, g.model);
    say!("window       {} tokens ({})", g.window, g.window_source.as_str());
    say!("counted by   {}", measure_of(&g.measured_by, g.count_source));
    let c = &g.categories;
    for (label, tokens) in [
        ("system", c.system),
        ("tools", c.tools),
        ("instructions", c.instructions),
        ("memory", c.memory),
        ("objective", c.objective),
        ("checkpoint", c.checkpoint),
        ("observations", c.observations),
        ("files", c.files),
        ("recent", c.messages),
        ("thinking", c.thinking),
    ] {
        say!("  {label:<12} {est}{tokens}");
    }
    say!("total        {est}{}", g.tokens);
    if g.trigger_priced {
        say!("trigger      {} (priced by the prompt cache; {}% is later)", g.trigger_tokens, g.compact_at);
    } else {
        say!("trigger      {} ({}%)", g.trigger_tokens, g.compact_at);
    }
    say!("destination  {}", g.destination_tokens);
    say!("free         {est}{}", g.free_tokens);
    if let Some(cache) = &g.prompt_cache {
        say!(
            "cache        {} (a cached token costs {:.2} of one uncached; prefixes of {} tokens or more)",
            cache.source,
            cache.read_factor,
            cache.min_tokens
        );
    }
}

/// `agentd log`: one record a line, in one numbering — the events' (`diff --since`, `revert --to`
/// and `watch` use it): an event is `SEQ  ROLE  what`, any other record (a message, a checkpoint,
/// the turn's settings, a receipt) sits under it in the same columns without a number of its own.
/// A message is cut to a line unless `full`, which prints each whole, its lines indented. Returns
/// whether anything was cut.
pub fn print_record(entry: &LogEntry, full: bool) -> bool {
    let cut = |text: &str, max: usize| if full { text.to_string() } else { one_line(text, max) };
    let mut was_cut = false;
    let shown = |what: String| {
        // An unnumbered record: blank where an event has its seq, indented as its lines go on.
        let text = what.replace('\n', &format!("\n{:>4}  {:<8} ", "", ""));
        say!("{:>4}  {text}", "");
    };
    match &entry.record {
        Record::Event { event } => say!("{}", event_line(event)),
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
            let joined = parts.join(if full { "\n" } else { " | " });
            let text = cut(&joined, 200);
            was_cut = text != joined;
            shown(format!("{:<8} {}: {text}", role.name(), message.role.as_str()));
        }
        Record::Checkpoint { role, subtype, history, .. } => {
            shown(format!("{:<8} checkpoint ({}): {} messages", role.name(), subtype.as_str(), history.len()))
        }
        Record::Settings { role, settings } => shown(format!(
            "{:<8} settings {}",
            role.name(),
            serde_json::to_string(settings).unwrap_or_default()
        )),
        Record::Receipt { role, receipt } => {
            let arguments = cut(&receipt.arguments, 60);
            was_cut = arguments != receipt.arguments;
            shown(format!(
                "{:<8} receipt: {} {arguments} → {}",
                role.name(),
                receipt.tool,
                if receipt.ok { "ok" } else { "failed" }
            ))
        }
    }
    was_cut
}
