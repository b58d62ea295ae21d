//! The `delegate` calls of one answer, run at once.
//!
//! Each `delegate` call starts a *branch*: a whole turn of a teammate, spawned at once, while the
//! lead goes on down its answer's calls. The rules, decided for the whole answer before anything
//! starts ([`plan`], a pure function over the calls and the team):
//!
//! - **Which agent.** A call to a role goes to the lowest-numbered agent of the role not running at
//!   that point — `coder`, then `coder#2` … up to `[team.coder] max_instances` (default 1) — or,
//!   when all are busy, to the one that started first, once it is done. A call naming an instance
//!   (`coder#2`) goes to it.
//! - **When.** A branch starts when its call is reached, unless its agent is still busy with an
//!   earlier call of the answer: that call (and every call before it) is settled first. Any other
//!   tool call settles every branch before it first. So a plain answer — one `delegate`, or two to a
//!   role of one agent — runs exactly as one call after the other did.
//! - **Where.** While two or more writers (a role with `write_file`, `edit_file` or `run_command`)
//!   run at once, each works in a working copy of its own (see `working_copy`); a writer alone, and
//!   every reader, works in the task's workspace.
//! - **Results.** Settled in call order: the teammate's summary is its call's result, after its
//!   working copy's patch is merged back (the merge said in the result). A branch that fails while
//!   another runs beside it is a failure result the lead reads; a lone branch's failure fails the
//!   turn, as it always has. A cancel, a usage-limit wait or a storage failure stops the turn once
//!   every branch has ended.
//!
//! After a restart, [`Agent::resume_delegations`] continues the branches of the lead's last answer
//! that had not returned: each from its own history, in its own working copy; one that had not
//! started starts.

use super::limits::{Asked, Limit};
use super::resumed::{Resumed, Started};
use super::tools::{failure, CallOutcome, DelegateArgs};
use super::turn::{calls_of, Call, Ran, Turn};
use super::working_copy::{Copy, Merge};
use super::Agent;
use crate::error::TurnError;
use crate::fitter::Fitted;
use agentd_agents::tools::ToolOutcome;
use agentd_protocol::{EventKind, Message, Role, Tokens, ToolName, TurnSettings};
use std::collections::VecDeque;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// What a `delegate` call of an answer does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// A branch: `instance` takes `objective`, in a working copy when `copy`, within `asked`.
    Branch { instance: Role, objective: String, copy: bool, asked: Asked },
    /// Refused before anything runs (bad arguments, no such teammate): the error result.
    Refused(String),
}

impl Plan {
    /// The agent the branch runs on.
    pub(super) fn instance(&self) -> Option<&Role> {
        match self {
            Plan::Branch { instance, .. } => Some(instance),
            Plan::Refused(_) => None,
        }
    }
}

/// The plan of each call of an answer: `Some` for a `delegate` call (when `delegating` — the role has
/// the tool), `None` for every other call. Pure: the same answer and team give the same plan, which is
/// what lets a resume find the branches a crash interrupted.
pub(super) fn plan(
    calls: &[Call],
    delegating: bool,
    from: &Role,
    team: &crate::team::TeamConfig,
) -> Vec<Option<Plan>> {
    // The branches running at each point: (call index, agent, writes).
    let mut running: Vec<(usize, Role, bool)> = Vec::new();
    let mut plans: Vec<Option<Plan>> = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        if !(delegating && call.name == ToolName::Delegate) {
            running.clear();
            plans.push(None);
            continue;
        }
        let args = match DelegateArgs::parse(&call.arguments) {
            Ok(a) => a,
            Err(e) => {
                plans.push(Some(Plan::Refused(e.to_string())));
                continue;
            }
        };
        let to = Role::from(args.to);
        let Some(config) = team.role(to.base()) else {
            let names: Vec<String> =
                team.roles().filter(|r| *r != Role::Lead).map(|r| r.to_string()).collect();
            let refused = format!("no team member {:?}; delegate to one of: {}", to.name(), names.join(", "));
            plans.push(Some(Plan::Refused(refused)));
            continue;
        };
        if to.base() == from.base() {
            plans.push(Some(Plan::Refused("an agent cannot delegate to itself".into())));
            continue;
        }
        let max = config.instances();
        let instance = if to.number() > 1 {
            if to.number() > max {
                let refused = format!(
                    "{} is past {}'s max_instances ({max}); delegate to {} or an instance up to {}#{max}",
                    to.name(),
                    to.base(),
                    to.base(),
                    to.base()
                );
                plans.push(Some(Plan::Refused(refused)));
                continue;
            }
            to.clone()
        } else {
            // The lowest-numbered agent of the role not running now; all running: the one that
            // started first, which this call then waits for.
            let free = (1..=max).map(|n| to.instance(n)).find(|i| !running.iter().any(|(_, r, _)| r == i));
            match free {
                Some(instance) => instance,
                None => running
                    .iter()
                    .find(|(_, r, _)| r.base() == to.base())
                    .map_or_else(|| to.instance(1), |(_, r, _)| r.clone()),
            }
        };
        // Its agent busy with an earlier call: everything up to that call settles first.
        if let Some(at) = running.iter().position(|(_, r, _)| *r == instance) {
            running.drain(..=at);
        }
        let writes = team.writes(&instance);
        running.push((i, instance.clone(), writes));
        let asked = Asked {
            tokens: args.asked.tokens.or(config.delegation_budget_tokens),
            deadline: args.asked.deadline.or(config.delegation_deadline),
        };
        plans.push(Some(Plan::Branch { instance, objective: args.objective, copy: false, asked }));
        if running.iter().filter(|(_, _, w)| *w).count() >= 2 {
            for (at, _, _) in running.iter().filter(|(_, _, w)| *w) {
                if let Some(Some(Plan::Branch { copy, .. })) = plans.get_mut(*at) {
                    *copy = true;
                }
            }
        }
    }
    plans
}

/// A branch started and not yet settled.
struct Branch {
    call: Call,
    /// The agent it runs on; `None` for a call refused before it ran.
    instance: Option<Role>,
    work: Work,
    /// Whether another branch ran beside it: then its failure is a result, not the turn's.
    alongside: bool,
    copy: Option<Copy>,
}

enum Work {
    /// Its outcome is known already (refused, or its working copy could not be made).
    Ready(ToolOutcome),
    /// The teammate's turn, running.
    Running(JoinHandle<Result<String, TurnError>>),
}

/// The branches of an answer that have started and not been settled, oldest first.
#[derive(Default)]
pub(super) struct Running(VecDeque<Branch>);

impl Running {
    /// A branch spawned: when another is running, each runs beside the others (their failures become
    /// results, never the turn's).
    fn push(&mut self, call: &Call, instance: Role, work: Work, copy: Option<Copy>) {
        let alongside = self.0.iter().any(|b| matches!(b.work, Work::Running(_)));
        if alongside {
            for b in self.0.iter_mut() {
                b.alongside = true;
            }
        }
        self.0.push_back(Branch { call: call.clone(), instance: Some(instance), work, alongside, copy });
    }

    /// How many branches, from the oldest, must settle before `instance` is free: through the one it
    /// runs; none when it runs none.
    fn through(&self, instance: &Role) -> usize {
        self.0.iter().position(|b| b.instance.as_ref() == Some(instance)).map_or(0, |at| at + 1)
    }

    /// A call whose result is known before any branch runs (refused, or its copy not made): it
    /// waits its turn in call order like the rest. One whose copy failed counts as running beside
    /// others (its failure is a result, never the turn's).
    fn ready(&mut self, call: &Call, instance: Option<Role>, outcome: ToolOutcome) {
        let alongside = instance.is_some();
        self.0.push_back(Branch {
            call: call.clone(),
            instance,
            work: Work::Ready(outcome),
            alongside,
            copy: None,
        });
    }
}

impl Agent {
    /// One call run here, not on a branch: checkpointed around, asked about first when the task's
    /// client approves calls of its tool, and its result logged.
    async fn run_call(
        &mut self,
        turn: &Turn,
        fitted: &Fitted,
        carried: Tokens,
        call: &Call,
    ) -> Result<Ran, TurnError> {
        let before = self.checkpoint_before(call).await?;
        let call_seq = self.begin_call(call, before.clone())?;
        let ran = match self.permitted(call).await {
            Ok(Ok(())) => self.call_tool(&turn.snapshot, &call.name, &call.arguments).await,
            Ok(Err(refused)) => {
                super::tools::plain(failure(format!("{}: not run, {refused}", call.name.as_str())))
            }
            Err(e) => Err(e),
        };
        // Whatever the call did, even when it failed, is known before its result.
        let checked = self.checkpoint_after(call, call_seq, before).await;
        let result = checked.and(ran)?;
        self.end_call(turn, fitted, carried, call, result).await
    }

    /// Runs the calls of an answer (already logged) in order — its `delegate` calls at once, each on a
    /// branch of its own (see [`super::branches`]) — and logs their results in call order; the
    /// `finish` summary when one was accepted.
    pub(super) async fn run_tools(
        &mut self,
        turn: &Turn,
        fitted: &Fitted,
        answer: &Message,
    ) -> Result<Option<String>, TurnError> {
        let calls = calls_of(answer);
        let plans = self.plan(&turn.snapshot, &calls);
        let mut finished = None;
        // What the next request carries before the results: this one and the answer.
        let mut carried = fitted.count.total.tokens + fitted.meter.count_message(answer).tokens;
        let mut branches = Running::default();
        let mut outcome = Ok(());
        for (call, plan) in calls.iter().zip(plans) {
            let step = match plan {
                Some(plan) => {
                    // Its agent busy with an earlier call of this answer: that call is settled first.
                    let busy = plan.instance().map_or(0, |instance| branches.through(instance));
                    let busy =
                        self.settle_first(busy, &mut branches, Some((turn, fitted, &mut carried))).await;
                    match busy {
                        Ok(()) => self.start_branch(call, plan, &mut branches).await,
                        Err(e) => Err(e),
                    }
                }
                None => match self
                    .settle_first(branches.0.len(), &mut branches, Some((turn, fitted, &mut carried)))
                    .await
                {
                    Ok(()) => {
                        let span = crate::spans::tool(call.name.as_str(), &call.id);
                        self.run_call(turn, fitted, carried, call).instrument(span).await.map(|ran| {
                            carried += ran.tokens;
                            if ran.finished.is_some() {
                                finished = ran.finished;
                            }
                        })
                    }
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = step {
                outcome = Err(e);
                break;
            }
        }
        // Every branch started is waited for, even when a step failed: none outlives the turn.
        let settled =
            self.settle_first(branches.0.len(), &mut branches, Some((turn, fitted, &mut carried))).await;
        outcome?;
        settled?;
        Ok(finished)
    }

    /// The plan of each call of an answer (see [`plan`]).
    pub(super) fn plan(&self, snapshot: &TurnSettings, calls: &[Call]) -> Vec<Option<Plan>> {
        let delegating = snapshot.tools.contains(&ToolName::Delegate);
        plan(calls, delegating, &self.role, &self.task.engine.team())
    }

    /// Starts a `delegate` call's branch: `tool_called`, then [`Agent::start_planned`].
    pub(super) async fn start_branch(
        &mut self,
        call: &Call,
        plan: Plan,
        running: &mut Running,
    ) -> Result<(), TurnError> {
        self.begin_call(call, None)?;
        self.start_planned(call, plan, running).await
    }

    /// A planned branch started: its working copy when it has one, the handoff, `delegated`, and the
    /// teammate's turn spawned. A call refused by its plan, or whose copy cannot be made, is a ready
    /// error result instead.
    async fn start_planned(
        &mut self,
        call: &Call,
        plan: Plan,
        running: &mut Running,
    ) -> Result<(), TurnError> {
        let (instance, objective, copy, asked) = match plan {
            Plan::Refused(why) => {
                running.ready(call, None, failure(why));
                return Ok(());
            }
            Plan::Branch { instance, objective, copy, asked } => (instance, objective, copy, asked),
        };
        let made = match copy {
            true => match self.working_copy(&call.id, &instance) {
                Ok(copy) => Some(copy),
                Err(why) => {
                    let text = format!("delegation to {instance} not started: {why}");
                    running.ready(call, Some(instance), failure(text));
                    return Ok(());
                }
            },
            false => None,
        };
        let work = self
            .spawn_branch(&call.id, &instance, &objective, made.as_ref(), asked.starting_now(), true)
            .await?;
        running.push(call, instance, work, made);
        Ok(())
    }

    /// The handoff, `delegated`, and the teammate's turn spawned within `limit` (handed the objective
    /// when `fresh`, continuing its history otherwise).
    async fn spawn_branch(
        &mut self,
        call_id: &str,
        instance: &Role,
        objective: &str,
        copy: Option<&Copy>,
        limit: Limit,
        fresh: bool,
    ) -> Result<Work, TurnError> {
        let Some(target) = self.team.upgrade().and_then(|team| team.member_or_join(instance)) else {
            return Ok(Work::Ready(failure(format!("no team member {:?}", instance.name()))));
        };
        let input = if fresh {
            let handoff = self.handoff(instance, objective).await?;
            let not_copied = copy.map(|c| c.left_out().to_vec()).unwrap_or_default();
            self.emit(EventKind::Delegated {
                to_role: instance.clone(),
                call_id: Some(call_id.to_string()),
                working_copy: copy.map(|c| c.work_path().display().to_string()),
                objective: objective.to_string(),
                receipts_id: handoff.receipts_id,
                budget_tokens: Some(handoff.budget),
                measured_by: Some(handoff.measured_by),
                limit_tokens: limit.tokens,
                deadline: limit.deadline_text(),
                not_copied: not_copied.clone(),
            })?;
            let mut text = handoff.text;
            if !not_copied.is_empty() {
                text.push_str(&format!(
                    "\n\n[working copy: you work in a copy of the workspace; these paths of the workspace are not in it: {}]",
                    agentd_protocol::NotHeld::listed(&not_copied, super::working_copy::NAMED)
                ));
            }
            Some(text)
        } else {
            None
        };
        let mut inherited = self.inherited.clone();
        inherited.extend(self.receipts.iter().cloned());
        let place = copy.map(|c| c.workspace().clone());
        let limit = limit.is_set().then_some(limit);
        Ok(Work::Running(tokio::spawn(
            target.run_turn_within(input, inherited, place, limit).in_current_span(),
        )))
    }

    /// Settles the `n` oldest branches, in call order: each is waited for even when one before it
    /// failed (none outlives its turn), and the first error is the answer. Results are sized against
    /// the turn's request when `sized` holds it, logged whole (as a resume does) otherwise.
    async fn settle_first(
        &mut self,
        n: usize,
        running: &mut Running,
        mut sized: Option<(&Turn, &Fitted, &mut Tokens)>,
    ) -> Result<(), TurnError> {
        let mut first_error = None;
        for branch in running.0.drain(..n.min(running.0.len())).collect::<Vec<_>>() {
            let sized = sized.as_mut().map(|(turn, fitted, carried)| (*turn, *fitted, &mut **carried));
            if let Err(e) = self.settle(branch, sized).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Waits for a branch, merges its working copy back, and logs its result: sized as any result
    /// when `sized` holds the turn's request, whole (as a resume does) otherwise.
    async fn settle(
        &mut self,
        branch: Branch,
        sized: Option<(&Turn, &Fitted, &mut Tokens)>,
    ) -> Result<(), TurnError> {
        let Branch { call, instance, work, alongside, copy } = branch;
        // Only a branch that ran says it returned (one refused, or whose copy could not be made,
        // never said it was delegated).
        let ran = matches!(work, Work::Running(_));
        let ended = match work {
            Work::Ready(outcome) => Ok(outcome),
            Work::Running(handle) => match handle.await {
                Ok(Ok(summary)) => Ok(ToolOutcome::ok(summary)),
                // A teammate stopped for going in circles, or at its delegation's limit, is its
                // caller's to judge, alone or not.
                Ok(Err(e @ (TurnError::Stalled { .. } | TurnError::OverLimit { .. }))) => {
                    Ok(failure(e.to_string()))
                }
                Ok(Err(e)) if stops_the_turn(&e) || !alongside => Err(e),
                Ok(Err(e)) => Ok(failure(format!("{}'s turn failed: {e}", role_name(&instance)))),
                Err(e) if !alongside => Err(TurnError::Stopped(e)),
                Err(e) => Ok(failure(format!("{}'s turn stopped: {e}", role_name(&instance)))),
            },
        };
        // A branch that stops the turn leaves its copy for the resume that continues it.
        let mut outcome = ended?;
        let merged = match &copy {
            Some(copy) => {
                let from = instance.clone().unwrap_or(Role::Lead);
                let before = match outcome.ok {
                    true => self.checkpoint_merge_before(&call.id, &from).await?,
                    false => None,
                };
                let merged = self.merge_back(&call.id, instance.as_ref(), copy, outcome.ok)?;
                self.checkpoint_merge_after(&call.id, &from, before).await?;
                Some(merged)
            }
            None => None,
        };
        if let Some(merge) = &merged {
            outcome.content.push_str(&merge.told());
        }
        if let Some(from) = instance.filter(|_| ran) {
            self.emit(returned_event(from, &call.id, &outcome, merged.as_ref()))?;
        }
        let result = CallOutcome { outcome, finished: None, images: Vec::new() };
        match sized {
            Some((turn, fitted, carried)) => {
                let ran = self.end_call(turn, fitted, *carried, &call, result).await?;
                *carried += ran.tokens;
            }
            None => {
                let ok = result.outcome.ok;
                self.persist(Message::tool_result(&call.id, &result.outcome.content, !ok))?;
                self.emit(EventKind::tool_ended(&ToolName::Delegate, &call.id, ok, false))?;
            }
        }
        // A copy whose changes are archived (and merged, or left for the lead) goes; one that could
        // not be read or merged stays where the result said.
        if let (Some(copy), Some(None)) = (copy, merged.as_ref().map(|m| m.not_merged.as_ref())) {
            copy.remove();
        }
        Ok(())
    }

    /// After a restart: the branches of the lead's last answer that had not returned, continued —
    /// each from its own history, in its own working copy — or started; their results logged whole in
    /// call order.
    pub(super) async fn resume_delegations(&mut self, resumed: Resumed) -> Result<(), TurnError> {
        let Some(answer) =
            self.history.iter().rev().find(|m| m.role == agentd_protocol::Speaker::Assistant).cloned()
        else {
            return Ok(());
        };
        let calls = calls_of(&answer);
        let snapshot = self.task.snapshot(&self.role)?;
        let plans = self.plan(&snapshot, &calls);
        let mut running = Running::default();
        let mut outcome = Ok(());
        for (call, plan) in calls.iter().zip(plans) {
            let Some(plan) = plan.filter(|_| resumed.pending.contains(&call.id)) else { continue };
            // Its agent busy with an earlier pending call: that one settles first.
            let busy = plan.instance().map_or(0, |instance| running.through(instance));
            if let Err(e) = self.settle_first(busy, &mut running, None).await {
                outcome = Err(e);
                break;
            }
            let step = match (resumed.started.get(&call.id), plan) {
                (Some(started), Plan::Branch { objective, .. }) => {
                    self.continue_branch(call, started, &objective, &mut running).await
                }
                (None, plan) => {
                    // Never started: it starts now, as it would have (`tool_called` was logged before).
                    self.start_planned(call, plan, &mut running).await
                }
                (Some(_), Plan::Refused(why)) => {
                    running.ready(call, None, failure(why));
                    Ok(())
                }
            };
            if let Err(e) = step {
                outcome = Err(e);
                break;
            }
        }
        let settled = self.settle_first(running.0.len(), &mut running, None).await;
        outcome?;
        settled
    }

    /// A branch a resume continues: its agent goes on from its history (or, if it never logged the
    /// handoff, is handed the objective again), in the working copy it had.
    async fn continue_branch(
        &mut self,
        call: &Call,
        started: &Started,
        objective: &str,
        running: &mut Running,
    ) -> Result<(), TurnError> {
        let copy = match &started.working_copy {
            None => None,
            Some(path) => match self.reopen_copy(&call.id, std::path::Path::new(path)) {
                Ok(copy) => Some(copy),
                Err(why) => {
                    let text = format!("delegation to {} could not go on: {why}", started.instance);
                    running.ready(call, Some(started.instance.clone()), failure(text));
                    return Ok(());
                }
            },
        };
        let fresh = !started.handed_over;
        let limit = started.limit.clone();
        let work =
            self.spawn_branch(&call.id, &started.instance, objective, copy.as_ref(), limit, fresh).await?;
        running.push(call, started.instance.clone(), work, copy);
        Ok(())
    }
}

/// A branch's error that stops the lead's turn whatever runs beside it: a cancel, a usage-limit or
/// budget halt (the task waits, and a resume continues the branch), a store that cannot write.
fn stops_the_turn(e: &TurnError) -> bool {
    matches!(e, TurnError::Cancelled | TurnError::Halted(_) | TurnError::Storage(_))
}

fn role_name(role: &Option<Role>) -> String {
    role.as_ref().map_or_else(|| "the teammate".to_string(), |r| r.to_string())
}

/// `delegation_returned` for a settled branch.
fn returned_event(from: Role, call_id: &str, outcome: &ToolOutcome, merged: Option<&Merge>) -> EventKind {
    let mut event = EventKind::returned(from, outcome.content.clone());
    if let EventKind::DelegationReturned {
        call_id: id,
        failed,
        patch_evidence_id,
        files_changed,
        lines_added,
        lines_removed,
        conflicts,
        not_carried,
        ..
    } = &mut event
    {
        *id = Some(call_id.to_string());
        *failed = !outcome.ok;
        if let Some(merge) = merged {
            *patch_evidence_id = merge.evidence_id.clone();
            *files_changed = merge.files_changed;
            *lines_added = merge.lines_added;
            *lines_removed = merge.lines_removed;
            *conflicts = merge.conflicts.clone();
            *not_carried = merge.not_carried.clone();
        }
    }
    event
}

#[cfg(test)]
mod tests;
