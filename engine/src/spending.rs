//! What the tasks spent, kept for the budgets: a task's and a day's tokens and cost, summed from
//! the providers' usage reports in the log (`response_received`, `compaction_finished`) by the same
//! fold `task.status` shows ([`agentd_protocol::rpc::spent`]), and the gate every request passes
//! before it is sent ([`Gate`]).
//!
//! The [`Ledger`] reads the log, never a second count: a task is folded once, then caught up from
//! the events after the last one it folded. A day is every task's events of that day, in the
//! scheduler's zone ([`Calendar`]): when a day is first asked about, every task that may have
//! spent in it (not ended before it began) is folded. In a fleet each daemon keeps its own ledger:
//! the day is counted from the fleet's history when first asked, then from the tasks this daemon
//! runs.

use crate::clock::{clock, parse_rfc3339};
use crate::halt::Halt;
use crate::storage::{Storage, StorageError};
use agentd_policies::cost::{priced, Price};
use agentd_policies::spending::{crossed, Ceiling};
use agentd_protocol::{Amount, Budget, BudgetScope, Event, Role, Tokens, Usage};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One day of the budgets' calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    /// `YYYY-MM-DD`, in the calendar's zone.
    pub key: String,
    /// When it began.
    pub starts: SystemTime,
    /// When the next one begins: when a task paused on the day's budget goes on.
    pub next: SystemTime,
}

/// Which day a moment falls in: the daemon reads it in `[scheduler] tz`.
pub trait Calendar: Send + Sync {
    /// The day `at` falls in.
    fn day(&self, at: SystemTime) -> Day;
}

/// Days in UTC.
pub struct UtcDays;

impl Calendar for UtcDays {
    fn day(&self, at: SystemTime) -> Day {
        let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let starts = UNIX_EPOCH + Duration::from_secs(secs - secs % 86_400);
        let key = humantime::format_rfc3339_seconds(starts).to_string()[..10].to_string();
        Day { key, starts, next: starts + Duration::from_secs(86_400) }
    }
}

/// The budgets in force for every task (`[budgets]`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budgets {
    /// A task's, unless it has its own (`task_tokens`, `task_cost`).
    pub task: Budget,
    /// Every task's requests of one day (`day_tokens`, `day_cost`).
    pub day: Budget,
}

impl Budgets {
    /// A task's budget in force: its `own` figures over `[budgets]`' task figures.
    pub fn for_task(&self, own: Option<Budget>) -> Budget {
        self.task.with(own.unwrap_or_default())
    }
}

/// What one task spent, as folded so far.
#[derive(Default)]
struct Folded {
    /// The last event folded.
    upto: u64,
    total: Amount,
    by_day: BTreeMap<String, Amount>,
}

#[derive(Default)]
struct State {
    tasks: HashMap<String, Folded>,
    /// The day whose every task has been folded.
    seeded: Option<String>,
}

/// What the tasks spent, by task and by day; see the module documentation.
pub struct Ledger {
    calendar: Arc<dyn Calendar>,
    state: Mutex<State>,
}

/// What a task spent, and the day it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// The task's spending, all days.
    pub task: Amount,
    /// Every task's spending today.
    pub day: Amount,
    /// Today.
    pub today: Day,
}

impl Ledger {
    /// A ledger whose days are `calendar`'s.
    pub fn new(calendar: Arc<dyn Calendar>) -> Ledger {
        Ledger { calendar, state: Mutex::default() }
    }

    /// What `task_id` spent, and what every task spent today, caught up from `storage` now.
    pub fn standing(&self, storage: &dyn Storage, task_id: &str) -> Result<Standing, StorageError> {
        let mut state = self.state.lock();
        let (today, _) = self.today_in(&mut state, storage)?;
        self.catch_up(&mut state, storage, task_id)?;
        let task = state.tasks.get(task_id).map(|f| f.total).unwrap_or_default();
        let day = day_total(&state, &today);
        Ok(Standing { task, day, today })
    }

    /// What `task_id` spent, caught up from `storage` now.
    pub fn task(&self, storage: &dyn Storage, task_id: &str) -> Result<Amount, StorageError> {
        let mut state = self.state.lock();
        self.catch_up(&mut state, storage, task_id)?;
        Ok(state.tasks.get(task_id).map(|f| f.total).unwrap_or_default())
    }

    /// Today, and what every task spent in it as far as this ledger has folded.
    pub fn today(&self, storage: &dyn Storage) -> Result<(Day, Amount), StorageError> {
        let mut state = self.state.lock();
        self.today_in(&mut state, storage)
    }

    /// Today, every task that may have spent in it folded (once a day).
    fn today_in(&self, state: &mut State, storage: &dyn Storage) -> Result<(Day, Amount), StorageError> {
        let today = self.calendar.day(clock().now());
        if state.seeded.as_deref() != Some(today.key.as_str()) {
            for meta in storage.tasks()? {
                let ended_before = meta.state.is_terminal()
                    && parse_rfc3339(&meta.updated_at).is_some_and(|at| at < today.starts);
                if !ended_before {
                    self.catch_up(state, storage, &meta.task_id)?;
                }
            }
            state.seeded = Some(today.key.clone());
        }
        let spent = day_total(state, &today);
        Ok((today, spent))
    }

    /// Folds the task's events after the last one folded.
    fn catch_up(&self, state: &mut State, storage: &dyn Storage, task_id: &str) -> Result<(), StorageError> {
        let folded = state.tasks.entry(task_id.to_string()).or_default();
        loop {
            let page = storage.events(task_id, folded.upto, 1_000)?;
            let Some(last) = page.last() else { return Ok(()) };
            folded.upto = last.seq;
            let mut days: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
            for event in &page {
                let at = parse_rfc3339(&event.at).unwrap_or(UNIX_EPOCH);
                days.entry(self.calendar.day(at).key).or_default().push(event);
            }
            for (day, events) in days {
                let (spent, _) = agentd_protocol::rpc::spent(events);
                let amount = spent.amount();
                folded.total = folded.total.plus(amount);
                let on_day = folded.by_day.entry(day).or_default();
                *on_day = on_day.plus(amount);
            }
        }
    }
}

fn day_total(state: &State, day: &Day) -> Amount {
    state.tasks.values().filter_map(|f| f.by_day.get(&day.key)).fold(Amount::default(), |sum, a| sum.plus(*a))
}

/// The budget check of one role's requests in one task: before a request is sent, what the task and
/// the day spent plus the request (its measured size, its `max_tokens`, and their cost) against the
/// task's budget and the day's. Made by [`crate::context::Engine::gate`]; cheap to clone.
#[derive(Clone)]
pub struct Gate {
    /// Where the task's log and record are.
    pub storage: Arc<dyn Storage>,
    /// What the tasks spent.
    pub ledger: Arc<Ledger>,
    /// Each model's prices, to cost the request.
    pub prices: Arc<BTreeMap<String, Price>>,
    /// The task's budget in force: its own over `[budgets]`'s `task_*`.
    pub task_budget: Budget,
    /// `[budgets]`'s `day_*`: every task's of the day.
    pub day_budget: Budget,
    /// The task.
    pub task_id: String,
    /// The role whose requests it checks.
    pub role: Role,
}

impl Gate {
    /// Whether a request of `input` tokens to `model`, with room for `max_tokens` of answer, may be
    /// sent; `pending`: what this step already spent and the log does not hold yet (the summary
    /// requests of a compaction under way, by the model that answered them).
    pub fn admit(
        &self,
        model: &str,
        input: Tokens,
        max_tokens: Option<u32>,
        pending: Option<(&str, Usage)>,
    ) -> Result<(), GateError> {
        if self.task_budget.is_empty() && self.day_budget.is_empty() {
            return Ok(());
        }
        let out = u64::from(max_tokens.unwrap_or(0));
        let request =
            Amount { tokens: input.0 + out, cost: priced(&self.prices, model, &Usage::new(input.0, out)) };
        let pending = pending.map_or(Amount::default(), |(model, usage)| Amount {
            tokens: usage.prompt_tokens + usage.completion_tokens,
            cost: priced(&self.prices, model, &usage),
        });
        let standing = self.ledger.standing(self.storage.as_ref(), &self.task_id)?;
        let ceilings = [
            Ceiling {
                scope: BudgetScope::Task,
                budget: self.task_budget,
                spent: standing.task.plus(pending),
            },
            Ceiling { scope: BudgetScope::Day, budget: self.day_budget, spent: standing.day.plus(pending) },
        ];
        match crossed(&ceilings, request) {
            None => Ok(()),
            Some(ceiling) => Err(GateError::Halt(Box::new(Halt::Budget {
                role: self.role.clone(),
                ceiling,
                request,
                resume_at: (ceiling.scope == BudgetScope::Day).then_some(standing.today.next),
            }))),
        }
    }
}

/// Why the gate did not let a request through.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// A budget would be crossed.
    #[error("{0}")]
    Halt(Box<Halt>),
    /// The log could not be read to know what was spent.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_days_begin_at_midnight() {
        let at = humantime::parse_rfc3339("2026-12-02T09:30:00Z").unwrap();
        let day = UtcDays.day(at);
        assert_eq!(day.key, "2026-12-02");
        assert_eq!(day.starts, humantime::parse_rfc3339("2026-12-02T00:00:00Z").unwrap());
        assert_eq!(day.next, humantime::parse_rfc3339("2026-12-03T00:00:00Z").unwrap());
    }
}
