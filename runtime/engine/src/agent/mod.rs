//! One agent per role per task (a [`Member`]): it owns that role's history and runs its turns.
//!
//! A turn takes a settings snapshot when it starts (a `settings.set` applies from the next turn, never
//! mid-turn), then loops: build the request, pass it through the fitter, send it, persist the answer,
//! run the tools it called and persist their results — until the model calls `finish` or answers
//! without a tool call. Every message is in the task's log before anything depending on it happens.
//!
//! This file holds the member handle, the agent's state and its errors, with the few operations every step
//! shares (log a message, emit an event, ask the fitter). The steps live beside it:
//!
//! - `turn`: the turn loop, one small step per function — start, fit, send (with retries), learn
//!   from a refusal, record usage, run the tools.
//! - `refusals`: what a context-overflow refusal teaches, each lesson once between two answers.
//! - `tools`: one tool call — the team's own tools (`finish`, `delegate`, `read_evidence`) and the
//!   workspace tools of `agentd-agents`.
//! - `results`: a tool result sized for the model: whole, or stored as evidence with its first page.
//! - `branches`: the `delegate` calls of one answer, run at once — each teammate (or each instance of
//!   one, `coder#2`) on a branch of its own, writers in working copies — their results logged in
//!   call order.
//! - `handoff`: the first message of a delegation, bounded by the receiver's measure.
//! - `thinking`: clearing old thinking after an idle spell.

mod branches;
mod checkpoints;
mod handoff;
mod limited;
pub mod limits;
mod memory;
mod permission;
mod refusals;
mod results;
mod resumed;
mod servers;
mod stall;
mod thinking;
mod tools;
mod turn;
mod working_copy;

use crate::context::TaskCtx;
use crate::error::{TurnError, TurnResult};
use crate::fitter::{MeterOf, Requested, RequestedDone};
use crate::meter::Meter;
use crate::storage::StorageError;
use agentd_agents::workspace::Workspace;
use agentd_policies::compaction::OBJECTIVE_PREFIX;
use agentd_policies::Thresholds;
use agentd_protocol::Receipt;
use agentd_protocol::{EventKind, Message, Part, Record, Speaker, Tokens};
use agentd_protocol::{MessageKind, Role, ToolName, TurnSettings};
use futures_util::future::BoxFuture;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::SystemTime;
use tracing::Instrument;

/// A turn may take at most this many model round-trips before it is failed as a runaway loop.
pub const MAX_STEPS_PER_TURN: usize = 400;

/// `finish`'s summary, read as every tool call's arguments are ([`agentd_policies::args`]).
fn finish_summary(arguments: &str) -> Result<String, agentd_policies::args::ArgsError> {
    Ok(agentd_policies::args::Args::parse(ToolName::Finish.as_str(), arguments)?.str("summary")?.to_string())
}

/// One role of one task: its agent behind a lock, so the role's turns run one at a time and its
/// history has one writer. A cheap handle (clones share the agent), called directly by the task's
/// runner and by a delegating teammate. It is not an actor: a mailbox would add nothing the lock
/// does not already give, and the turn must run on the multi-thread runtime, not on an arbiter.
#[derive(Clone)]
pub struct Member {
    agent: Arc<tokio::sync::Mutex<Agent>>,
}

impl Member {
    /// The member of `role`, resuming with its history, receipts, changed files and the time it
    /// last answered (all read back from the task's log). It sees its `team` without keeping it: the
    /// team holds its members, and the run that formed it holds the team, so when the run ends every
    /// agent goes with it — histories, the task's context, the descriptors of its workspace and
    /// working copies.
    pub fn new(
        role: Role,
        history: Vec<Message>,
        receipts: Vec<Receipt>,
        changed_files: Vec<String>,
        last_answer_at: Option<SystemTime>,
        task: Arc<TaskCtx>,
        team: Weak<Team>,
    ) -> Member {
        let agent = Agent::new(role, history, receipts, changed_files, last_answer_at, task, team);
        Member { agent: Arc::new(tokio::sync::Mutex::new(agent)) }
    }

    /// Runs one turn. `input` is the new user message (an objective or a delegation); `None`
    /// continues from the history as it stands (resume). `inherited`: the caller's receipts, handed
    /// to a delegated agent. `place`: the working copy the turn works in instead of the task's
    /// workspace (a writer running beside another). Waits for a turn of this role already under way
    /// to end first.
    ///
    /// Boxed: a turn can delegate, and a delegation runs another member's turn, so the future is
    /// recursive and needs a name the compiler can prove `Send` through.
    pub fn run_turn(
        &self,
        input: Option<String>,
        inherited: Vec<Receipt>,
        place: Option<Workspace>,
    ) -> BoxFuture<'static, TurnResult> {
        self.run_turn_within(input, inherited, place, None)
    }

    /// [`Member::run_turn`] as a delegation's branch with its own budget and deadline, when `limit`
    /// sets any (see `limits`).
    pub fn run_turn_within(
        &self,
        input: Option<String>,
        inherited: Vec<Receipt>,
        place: Option<Workspace>,
        limit: Option<limits::Limit>,
    ) -> BoxFuture<'static, TurnResult> {
        let agent = self.agent.clone();
        Box::pin(async move {
            // Its own tokio task: a panic in a turn is a failed turn, not a dead runner.
            let handle = tokio::spawn(
                async move {
                    let mut agent = agent.lock().await;
                    agent.inherited = inherited;
                    agent.place = place;
                    let from = agent.receipts.len();
                    agent.limit = limit.map(|l| limits::Limit { from, ..l });
                    let result = agent.run_turn(input).await;
                    // The working copy is the turn's: its descriptor goes when the turn ends.
                    agent.place = None;
                    result
                }
                .in_current_span(),
            );
            match handle.await {
                Ok(result) => result,
                Err(e) => Err(TurnError::Stopped(e)),
            }
        })
    }

    /// Compacts this role's history now, as the user asked (`agentd compact`), between its turns:
    /// waits for a turn under way to end first. The same events and archive as a compaction the
    /// trigger makes; refused, with nothing written, when there is nothing to compact.
    pub async fn compact(&self, requested: Requested) -> Result<RequestedDone, TurnError> {
        let mut agent = self.agent.lock().await;
        agent.compact_on_request(requested).await
    }

    /// The `delegate` calls this (lead) agent was waiting on when the daemon stopped, continued after
    /// a resume: each branch from its own history (in its own working copy), the ones that had not
    /// started started; their results stored in call order.
    pub async fn resume_delegations(&self, resumed: Resumed) -> Result<(), TurnError> {
        let mut agent = self.agent.lock().await;
        agent.resume_delegations(resumed).await
    }
}

pub use resumed::{Resumed, Started as StartedBranch};

/// A task's team: its members by role (the lead, the coder, the specialists, and the instances of a
/// role a resumed log names), formed once when the task's run starts, so a member can find the
/// teammate it delegates to; an instance first delegated to later joins it then.
#[derive(Default)]
pub struct Team {
    members: parking_lot::Mutex<BTreeMap<Role, Member>>,
    task: OnceLock<Arc<TaskCtx>>,
}

impl Team {
    /// Forms the team; a second call changes nothing.
    pub fn form(&self, members: BTreeMap<Role, Member>, task: Arc<TaskCtx>) {
        if self.task.set(task).is_ok() {
            *self.members.lock() = members;
        }
    }

    /// The member of `role`; `None` before the team is formed or for a role the team lacks.
    pub fn member(&self, role: &Role) -> Option<Member> {
        self.members.lock().get(role).cloned()
    }

    /// The member of `role`, an instance (`coder#2`) joining with an empty history the first time it
    /// is delegated to; `None` for a role the configuration lacks (or past its `max_instances`).
    pub fn member_or_join(self: &Arc<Team>, role: &Role) -> Option<Member> {
        let task = self.task.get()?;
        task.engine.team().role(role)?;
        let mut members = self.members.lock();
        let member = members.entry(role.clone()).or_insert_with(|| {
            let team = Arc::downgrade(self);
            Member::new(role.clone(), Vec::new(), Vec::new(), Vec::new(), None, task.clone(), team)
        });
        Some(member.clone())
    }
}

struct Agent {
    role: Role,
    history: Vec<Message>,
    task: Arc<TaskCtx>,
    /// The task's team: the teammates this agent may delegate to. Weak: the team holds this agent.
    team: Weak<Team>,
    /// The objective of the current turn (the task's, or the delegation's).
    objective: Option<String>,
    /// The last request's thresholds, size and measure: what a result or an evidence page is kept
    /// whole against.
    last_fit: Option<LastFit>,
    /// This role's own operations in this task, oldest first.
    receipts: Vec<Receipt>,
    /// The files this role wrote or edited in this task, newest last: its working files.
    changed_files: Vec<String>,
    /// What the delegating agent had done when it handed over.
    inherited: Vec<Receipt>,
    /// When this agent last answered (by the daemon's clock): idleness is measured from here.
    last_answer_at: Option<SystemTime>,
    /// The role's MCP servers that offer no tools this turn, with why.
    unavailable: Vec<crate::tool_servers::Unavailable>,
    /// The working copy this turn works in, when it is a writer running beside another; `None`: the
    /// task's workspace.
    place: Option<Workspace>,
    /// Whether the agent goes in circles this turn (rebuilt from the history when a turn starts).
    watch: agentd_policies::stall::Watch,
    /// This turn's delegation budget and deadline, when it is a branch that has them.
    limit: Option<limits::Limit>,
}

/// What a result is sized against: the thresholds of the request it answers, that request's size and
/// the measure it was counted with.
#[derive(Clone)]
struct LastFit {
    thresholds: Thresholds,
    tokens: Tokens,
    meter: Meter,
}

impl Agent {
    fn new(
        role: Role,
        history: Vec<Message>,
        receipts: Vec<Receipt>,
        changed_files: Vec<String>,
        last_answer_at: Option<SystemTime>,
        task: Arc<TaskCtx>,
        team: Weak<Team>,
    ) -> Agent {
        Agent {
            role,
            history,
            task,
            team,
            objective: None,
            last_fit: None,
            receipts,
            changed_files,
            inherited: Vec::new(),
            last_answer_at,
            unavailable: Vec::new(),
            place: None,
            watch: Default::default(),
            limit: None,
        }
    }

    /// Where this turn's tools work: its working copy, or the task's workspace.
    fn workspace(&self) -> &Workspace {
        self.place.as_ref().unwrap_or(&self.task.workspace)
    }

    fn name(&self) -> &str {
        self.role.name()
    }

    /// The summary of a turn whose end is already in the history: a final answer with no tool call,
    /// or a `finish` call that was accepted.
    fn already_finished(&self) -> Option<String> {
        let (i, last) = self.history.iter().enumerate().rev().find(|(_, m)| m.role == Speaker::Assistant)?;
        if i + 1 == self.history.len() && last.tool_calls().next().is_none() {
            return Some(last.text());
        }
        let (id, _, args) =
            last.tool_calls().find(|(_, name, _)| ToolName::parse(name) == ToolName::Finish)?;
        let accepted = self.history[i + 1..]
            .iter()
            .flat_map(|m| &m.parts)
            .any(|p| matches!(p, Part::ToolResult { call_id, is_error: false, .. } if call_id == id));
        if !accepted {
            return None;
        }
        finish_summary(args).ok()
    }

    /// The current turn's objective; after a resume, the newest plain user message of the history.
    fn objective(&self) -> String {
        if let Some(o) = &self.objective {
            return o.clone();
        }
        self.history
            .iter()
            .rev()
            .find(|m| {
                m.role == Speaker::User && matches!(m.kind, MessageKind::Plain | MessageKind::Objective)
            })
            .map(|m| {
                let text = m.text();
                match (m.kind, text.strip_prefix(OBJECTIVE_PREFIX)) {
                    (MessageKind::Objective, Some(objective)) => objective.to_string(),
                    _ => text,
                }
            })
            .unwrap_or_default()
    }

    fn emit(&self, kind: EventKind) -> Result<(), StorageError> {
        self.task.engine.storage().emit(&self.task.task_id, &self.role, kind).map(|_| ())
    }

    fn persist(&mut self, message: Message) -> Result<(), StorageError> {
        let record = Record::Message { role: self.role.clone(), message: message.clone() };
        self.task.engine.storage().append(&self.task.task_id, &record)?;
        self.history.push(message);
        Ok(())
    }

    fn receipt(&mut self, receipt: Receipt) -> Result<(), StorageError> {
        let record = Record::Receipt { role: self.role.clone(), receipt: receipt.clone() };
        self.task.engine.storage().append(&self.task.task_id, &record)?;
        self.receipts.push(receipt);
        Ok(())
    }

    /// The measure of this role's model (the fitter's: the same one every size decision uses).
    fn meter(&self, snapshot: &TurnSettings) -> Meter {
        self.task
            .engine
            .fitter()
            .meter_of(MeterOf { server: snapshot.server.clone(), model: snapshot.model.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Storage;
    use crate::testing::Rig;
    use agentd_test_support::ScriptedServer;

    fn call(id: &str, name: &str, args: &str) -> Part {
        Part::ToolCall { id: id.into(), name: name.into(), arguments: args.into() }
    }

    #[tokio::test]
    async fn a_turn_is_over_when_its_end_is_in_the_history() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let task = rig.task("Fix it");
        let agent = |history: Vec<Message>| {
            Agent::new(
                Role::Lead,
                history,
                Vec::new(),
                Vec::new(),
                None,
                task.clone(),
                std::sync::Weak::new(),
            )
        };
        // A final answer without a tool call.
        let answered = agent(vec![Message::user("Fix it"), Message::assistant_text("fixed")]);
        assert_eq!(answered.already_finished().as_deref(), Some("fixed"));
        // A finish call whose result was an error (rejected by verify) is no end; an accepted one is.
        let finish =
            Message::new(Speaker::Assistant, vec![call("c1", "finish", r#"{"summary":"all done"}"#)]);
        let rejected = agent(vec![
            Message::user("Fix it"),
            finish.clone(),
            Message::tool_result("c1", "finish rejected", true),
        ]);
        assert_eq!(rejected.already_finished(), None);
        let accepted =
            agent(vec![Message::user("Fix it"), finish, Message::tool_result("c1", "finished", false)]);
        assert_eq!(accepted.already_finished().as_deref(), Some("all done"));
        // A tool call waiting for its result is work in progress.
        let busy = agent(vec![
            Message::user("Fix it"),
            Message::new(Speaker::Assistant, vec![call("c2", "read_file", r#"{"path":"a"}"#)]),
        ]);
        assert_eq!(busy.already_finished(), None);
    }

    #[tokio::test]
    async fn after_a_resume_the_objective_is_the_newest_plain_user_message() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let history = vec![
            agentd_policies::compaction::objective_message("Fix the adder"),
            Message::assistant_text("looking"),
            Message::user("[checkpoint: what was done]").with_kind(MessageKind::Checkpoint),
        ];
        let mut agent = Agent::new(
            Role::Lead,
            history,
            Vec::new(),
            Vec::new(),
            None,
            rig.task("x"),
            std::sync::Weak::new(),
        );
        assert_eq!(agent.objective(), "Fix the adder", "a checkpoint is not an objective");
        agent.objective = Some("Now add tests".into());
        assert_eq!(agent.objective(), "Now add tests");
    }

    #[tokio::test]
    async fn messages_and_receipts_are_logged_before_they_are_kept() {
        let rig = Rig::start(ScriptedServer::start(vec![]).await).await;
        let task = rig.task("Fix it");
        let mut agent = Agent::new(
            Role::Coder,
            Vec::new(),
            Vec::new(),
            Vec::new(),
            None,
            task.clone(),
            std::sync::Weak::new(),
        );
        agent.persist(Message::user("Fix it")).unwrap();
        let outcome = agentd_agents::tools::ToolOutcome::ok("1 line");
        let read =
            agentd_agents::receipts::receipt(ToolName::ReadFile, r#"{"path":"a.txt"}"#, &outcome, None);
        agent.receipt(read).unwrap();
        assert_eq!(rig.storage.history(&task.task_id, &Role::Coder).unwrap(), agent.history);
        assert_eq!(agent.receipts.len(), 1);
        let logged = rig
            .storage
            .records(&task.task_id, 0, 100)
            .unwrap()
            .into_iter()
            .filter(|(_, r)| matches!(r, Record::Receipt { role, .. } if *role == Role::Coder))
            .count();
        assert_eq!(logged, 1);
        // A store that cannot take the message keeps it out of the history too.
        rig.storage.fail_writes(true);
        assert!(agent.persist(Message::user("lost")).is_err());
        assert_eq!(agent.history.len(), 1);
    }
}
