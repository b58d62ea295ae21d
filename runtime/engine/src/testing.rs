//! The in-process rig of the engine's unit tests: an [`Engine`] over [`MemoryStorage`], talking to a
//! [`ScriptedServer`] (the real OpenAI wire protocol over real HTTP) through the real provider
//! client — the storage is the seam under test's own in-memory implementation, the model is not a
//! mock. [`Rig::task`] records a task and its context, as `task.submit` would, so an agent's steps
//! can run against it and a test can read back what they logged.

use crate::context::{Engine, TaskCtx};
use crate::memory::MemoryStorage;
use crate::storage::Storage;
use crate::team::{RoleConfig, TeamConfig};
use crate::tool_servers::NoToolServers;
use agentd_agents::tools::SandboxPolicy;
use agentd_agents::workspace::Workspace;
use agentd_policies::redact::Redactor;
use agentd_policies::retry::RetryPolicy;
use agentd_protocol::{Event, Message, Model, Part, Record, Role, Speaker, TaskMeta, TaskState};
use agentd_providers::{Deadlines, OpenAiClient};
use agentd_test_support::ScriptedServer;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The name the rig gives the scripted server's provider.
pub const PROVIDER: &str = "scripted";

pub struct Rig {
    pub server: ScriptedServer,
    pub engine: Arc<Engine>,
    pub storage: Arc<MemoryStorage>,
    pub workspace: tempfile::TempDir,
}

/// A role on the rig's provider and model, with nothing else set.
pub fn role(model: &str) -> RoleConfig {
    RoleConfig {
        provider: PROVIDER.into(),
        model: model.into(),
        compact_at: None,
        verify: None,
        prompt: None,
        tools: None,
        thinking_budget: None,
        max_output_tokens: None,
        summariser: None,
        max_instances: 1,
        delegation_budget_tokens: None,
        delegation_deadline: None,
    }
}

/// A lead and a coder on `model`, with the daemon's defaults for the rest.
pub fn team(model: &str) -> TeamConfig {
    TeamConfig {
        lead: role(model),
        coder: role(model),
        specialists: BTreeMap::new(),
        command_timeout: Duration::from_secs(120),
        sandbox: SandboxPolicy::default(),
        retry: RetryPolicy::default(),
        idle_thinking_cleanup_after: agentd_policies::thinking::DEFAULT_IDLE_THRESHOLD,
        idle_thinking_clear_at_least: agentd_policies::thinking::DEFAULT_CLEAR_AT_LEAST,
        blocks: Default::default(),
        prices: Default::default(),
        budgets: Default::default(),
        copies: std::env::temp_dir().join("agentd-test-copies"),
        checkpoint_bytes: crate::checkpoints::DEFAULT_MAX_BYTES,
        trace_content: false,
        stall: Default::default(),
    }
}

impl Rig {
    /// A lead and a coder on `server`'s model.
    pub async fn start(server: ScriptedServer) -> Rig {
        Rig::start_with(server, |_| {}).await
    }

    /// A rig whose team settings `change` adjusts first.
    pub async fn start_with(server: ScriptedServer, change: impl FnOnce(&mut TeamConfig)) -> Rig {
        let workspace = tempfile::Builder::new().prefix("agentd-ws").tempdir().expect("a temp workspace");
        let mut settings = team(server.model());
        change(&mut settings);
        let storage = Arc::new(MemoryStorage::new());
        let client = OpenAiClient::new(&server.base_url(), None).with_deadlines(Deadlines::default());
        let model: Arc<dyn Model> = Arc::new(agentd_providers::Client::from(client));
        let models = HashMap::from([(PROVIDER.to_string(), model)]);
        let engine = Arc::new(Engine::new(storage.clone(), settings, models, Redactor::new(Vec::new())));
        Rig { server, engine, storage, workspace }
    }

    /// A running task in the rig's workspace, recorded as `task.submit` records one.
    pub fn task(&self, objective: &str) -> Arc<TaskCtx> {
        self.task_with(objective, CancellationToken::new())
    }

    pub fn task_with(&self, objective: &str, cancel: CancellationToken) -> Arc<TaskCtx> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let task_id = format!("task-{}", NEXT.fetch_add(1, Ordering::SeqCst));
        let now = crate::clock::now_rfc3339();
        self.storage.put_task(TaskMeta {
            task_id: task_id.clone(),
            objective: objective.to_string(),
            workspace: self.workspace.path().display().to_string(),
            team: None,
            state: TaskState::Running,
            created_at: now.clone(),
            updated_at: now,
            result: None,
            error: None,
            node: None,
            budget: None,
            resume_at: None,
            ask: Vec::new(),
        });
        let workspace = Workspace::new(self.workspace.path()).expect("the workspace");
        let ctx = TaskCtx::new(task_id, workspace, cancel, self.engine.clone(), Arc::new(NoToolServers));
        Arc::new(ctx.expect("the task's record reads"))
    }

    /// Every event of a task, in order.
    pub fn events(&self, task_id: &str) -> Vec<Event> {
        self.storage.all_events(task_id)
    }

    /// The kinds of a task's events (`request_sent`, `tool_finished`, …), in order.
    pub fn kinds(&self, task_id: &str) -> Vec<String> {
        self.events(task_id).iter().map(|e| e.kind.name().to_string()).collect()
    }

    /// The task's state as recorded.
    pub fn state(&self, task_id: &str) -> TaskState {
        self.storage.task(task_id).expect("a readable task").expect("the task").state
    }

    /// The messages of a role, as its log holds them.
    pub fn history(&self, task_id: &str, role: &str) -> Vec<Message> {
        self.storage.history(task_id, &Role::from(role)).expect("the role's history")
    }

    /// Every record of a task's log, in order.
    pub fn records(&self, task_id: &str) -> Vec<Record> {
        self.storage.all_records(task_id)
    }
}

/// The objective, then `n` rounds of `read_file`, each result about `words` tokens: a history to
/// compact.
pub fn rounds(n: usize, words: usize) -> Vec<Message> {
    let mut history = vec![Message::user("Read the files")];
    for i in 0..n {
        let id = format!("r{i}");
        let arguments = serde_json::json!({ "path": format!("f{i}.txt") }).to_string();
        history.push(Message::new(
            Speaker::Assistant,
            vec![Part::ToolCall { id: id.clone(), name: "read_file".into(), arguments }],
        ));
        history.push(Message::tool_result(&id, format!("file {i}: {}", "data ".repeat(words)), false));
    }
    history
}
