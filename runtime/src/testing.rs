//! The in-process test rig of the runtime's unit tests: a daemon's shared parts without its socket or
//! its binary.
//!
//! [`Rig::start`] parses a real configuration pointing the team at a [`ScriptedServer`] (the real
//! OpenAI wire protocol over real HTTP), opens a sled [`Store`] in a temp home, and starts the real
//! fitter and scheduler actors in the test's actix `System` (`#[actix::test]`). [`Rig::task`] adds a
//! task record and its context, as `task.submit` would, so an agent's steps can run against it and a
//! test can read back what they logged.

use crate::bus::EventBus;
use crate::config::Config;
use crate::fitter::Fitter;
use crate::provider::{Client, OpenAiClient};
use crate::scheduler::Scheduler;
use crate::task::{Shared, TaskCtx};
use actix::prelude::*;
use agentd_agents::workspace::Workspace;
use agentd_evidence::{Store, TaskMeta};
use agentd_policies::{Event, Message, Part, Record, Speaker, TaskState};
use agentd_test_support::daemon::team_config;
use agentd_test_support::ScriptedServer;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The name the rig's configuration gives the scripted server's provider (as `team_config` does).
pub const PROVIDER: &str = "scripted";

pub struct Rig {
    pub server: ScriptedServer,
    pub shared: Arc<Shared>,
    pub workspace: tempfile::TempDir,
    /// Held, not read: the home (its database) lives as long as the rig.
    _home: tempfile::TempDir,
}

impl Rig {
    /// A lead and a coder on `server`'s model, plus `extra` configuration (e.g. a `[retry]` table).
    /// Must run inside an actix `System`.
    pub async fn start(server: ScriptedServer, extra: &str) -> Rig {
        let text = team_config(&server.base_url(), server.model(), extra);
        Rig::start_with(server, &text).await
    }

    /// A rig with this whole configuration; its provider must be named [`PROVIDER`] and point at
    /// `server`.
    pub async fn start_with(server: ScriptedServer, text: &str) -> Rig {
        let home = tempfile::Builder::new().prefix("agentd-rig").tempdir().expect("a temp home");
        let workspace = tempfile::Builder::new().prefix("agentd-ws").tempdir().expect("a temp workspace");
        let path = home.path().join("agentd.toml");
        let config = Arc::new(Config::parse(text, &path).expect("the rig's configuration"));
        let store = Store::open(&home.path().join("db")).expect("a store");
        let bus = EventBus::new(store.clone());
        let fitter = Fitter::new(store.clone(), bus.clone(), config.retry);
        let scheduler = Scheduler::new(Vec::new(), store.clone(), home.path().to_path_buf()).start();
        let mut clients = HashMap::new();
        let client = OpenAiClient::new(&server.base_url(), None).with_deadlines(config.deadlines);
        clients.insert(PROVIDER.to_string(), Arc::new(Client::from(client)));
        let shared = Arc::new(Shared {
            home: home.path().to_path_buf(),
            redactor: agentd_policies::redact::Redactor::new(Vec::new()),
            store,
            bus,
            config: config.clone(),
            fitter,
            scheduler,
            retry: config.retry,
            clients,
            ends: crate::ends::Ends::default(),
        });
        Rig { server, shared, workspace, _home: home }
    }

    /// A running task in the rig's workspace, recorded as `task.submit` records one.
    pub fn task(&self, objective: &str) -> Arc<TaskCtx> {
        self.task_with(objective, CancellationToken::new())
    }

    pub fn task_with(&self, objective: &str, cancel: CancellationToken) -> Arc<TaskCtx> {
        let task_id = uuid::Uuid::now_v7().to_string();
        let now = crate::clock::now_rfc3339();
        let meta = TaskMeta {
            task_id: task_id.clone(),
            objective: objective.to_string(),
            workspace: self.workspace.path().display().to_string(),
            team: None,
            state: TaskState::Running,
            created_at: now.clone(),
            updated_at: now,
            result: None,
            error: None,
        };
        self.shared.store.put_task(&meta).expect("the task record");
        let workspace = Workspace::new(self.workspace.path()).expect("the workspace");
        Arc::new(TaskCtx::new(task_id, workspace, cancel, self.shared.clone()))
    }

    /// Every event of a task, in order.
    pub fn events(&self, task_id: &str) -> Vec<Event> {
        self.shared.store.events(task_id, 0, 100_000).expect("the task's events")
    }

    /// The kinds of a task's events (`request_sent`, `tool_finished`, …), in order.
    pub fn kinds(&self, task_id: &str) -> Vec<String> {
        self.events(task_id).iter().map(|e| e.kind.name().to_string()).collect()
    }

    /// The task's state as recorded.
    pub fn state(&self, task_id: &str) -> TaskState {
        self.shared.store.task(task_id).expect("a readable task").expect("the task").state
    }

    /// The messages of a role, as its log holds them.
    pub fn history(&self, task_id: &str, role: &str) -> Vec<Message> {
        self.shared.store.history(task_id, &agentd_protocol::Role::from(role)).expect("the role's history")
    }

    /// Every record of a task's log, in order.
    pub fn records(&self, task_id: &str) -> Vec<Record> {
        let page = self.shared.store.records(task_id, 0, 100_000).expect("the task's records");
        page.into_iter().map(|(_, r)| r).collect()
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
