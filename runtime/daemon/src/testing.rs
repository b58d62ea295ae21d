//! The in-process test rig of the daemon's unit tests: a daemon's shared parts without its socket or
//! its binary.
//!
//! [`Rig::start`] parses a real configuration pointing the team at a [`ScriptedServer`] (the real
//! OpenAI wire protocol over real HTTP), opens a sled [`Store`] in a temp home, and builds the
//! daemon's [`Shared`] in the test's actix `System` (`#[actix::test]`); [`Rig::on_fleet`] makes it a
//! node of a fleet on a real NATS server instead. [`Rig::task`] records a task
//! as `task.submit` would.

use crate::config::Config;
use crate::shared::{Backing, Shared};
use crate::supervisor::Submit;
use agentd_evidence::Store;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{Event, Message, Role, TaskState};
use agentd_test_support::daemon::team_config;
use agentd_test_support::ScriptedServer;
use std::sync::Arc;

pub struct Rig {
    pub server: ScriptedServer,
    pub shared: Arc<Shared>,
    pub workspace: tempfile::TempDir,
    /// Held, not read: the home (its database) lives as long as the rig.
    _home: tempfile::TempDir,
}

/// A recorded task of the rig.
pub struct RigTask {
    pub task_id: String,
}

impl Rig {
    /// A lead and a coder on `server`'s model, plus `extra` configuration (e.g. a `[retry]` table).
    /// Must run inside an actix `System`.
    pub async fn start(server: ScriptedServer, extra: &str) -> Rig {
        let text = team_config(&server.base_url(), server.model(), extra);
        let home = tempfile::Builder::new().prefix("agentd-rig").tempdir().expect("a temp home");
        let workspace = tempfile::Builder::new().prefix("agentd-ws").tempdir().expect("a temp workspace");
        let path = home.path().join("agentd.toml");
        let config = Arc::new(Config::parse(&text, &path).expect("the rig's configuration"));
        let store = Store::open(&home.path().join("db")).expect("a store");
        let shared = Arc::new(Shared::start(
            home.path().to_path_buf(),
            Backing::Sled(store),
            config,
            |_| None,
            Default::default(),
        ));
        Rig { server, shared, workspace, _home: home }
    }

    /// [`Rig::start`]'s team as node `contract` of the fleet on the NATS server at `nats` (any
    /// workspace reached, leases of 3 s): the daemon's parts over the fleet's JetStream.
    pub async fn on_fleet(server: ScriptedServer, nats: &str) -> Rig {
        let cluster =
            format!("[cluster]\nnats = [\"{nats}\"]\nnode = \"contract\"\nmax_tasks = 4\nlease = \"3s\"\n");
        let text = team_config(&server.base_url(), server.model(), &cluster);
        let home = tempfile::Builder::new().prefix("agentd-rig").tempdir().expect("a temp home");
        let workspace = tempfile::Builder::new().prefix("agentd-ws").tempdir().expect("a temp workspace");
        let path = home.path().join("agentd.toml");
        let config = Arc::new(Config::parse(&text, &path).expect("the rig's configuration"));
        let settings = config.cluster.clone().expect("the rig's [cluster]");
        let fleet = crate::fleet::connect(&settings, |_| None, |_| {}).expect("the rig joins the fleet");
        let backing = Backing::Fleet(Arc::new(fleet));
        let shared =
            Arc::new(Shared::start(home.path().to_path_buf(), backing, config, |_| None, Default::default()));
        Rig { server, shared, workspace, _home: home }
    }

    /// `task.submit` of `objective` in the rig's workspace, no team or budget named.
    pub fn submit(&self, objective: &str) -> Submit {
        Submit {
            objective: objective.into(),
            workspace: self.workspace.path().display().to_string(),
            team: None,
            budget: None,
            task_id: None,
            ask: Vec::new(),
        }
    }

    /// A running task in the rig's workspace, recorded as `task.submit` records one.
    pub fn task(&self, objective: &str) -> RigTask {
        let task_id = uuid::Uuid::now_v7().to_string();
        let now = agentd_engine::clock::now_rfc3339();
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
            node: None,
            budget: None,
            resume_at: None,
            ask: Vec::new(),
        };
        self.shared.storage.create_task(&meta).expect("the task record");
        RigTask { task_id }
    }

    /// Every event of a task, in order.
    pub fn events(&self, task_id: &str) -> Vec<Event> {
        self.shared.storage.events(task_id, 0, 100_000).expect("the task's events")
    }

    /// The kinds of a task's events (`request_sent`, `tool_finished`, …), in order.
    pub fn kinds(&self, task_id: &str) -> Vec<String> {
        self.events(task_id).iter().map(|e| e.kind.name().to_string()).collect()
    }

    /// The task's state as recorded.
    pub fn state(&self, task_id: &str) -> TaskState {
        self.shared.storage.task(task_id).expect("a readable task").expect("the task").state
    }

    /// The messages of a role, as its log holds them.
    pub fn history(&self, task_id: &str, role: &str) -> Vec<Message> {
        self.shared.storage.history(task_id, &Role::from(role)).expect("the role's history")
    }
}
