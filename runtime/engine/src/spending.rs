//! What the tasks spent, kept for the budgets: a task's and a day's tokens and cost, summed from
//! the providers' usage reports in the log (`response_received`, `compaction_finished`) by the same
//! fold `task.status` shows ([`agentd_protocol::rpc::spent`]), and the gate every request passes
//! before it is sent ([`Gate`]).
//!
//! The [`Ledger`] reads the log, never a second count: a task is folded once, then caught up from
//! the events after the last one it folded. What the log cannot hold yet — requests admitted and not
//! answered, a compaction's summaries before its `compaction_finished` — the ledger holds as *in
//! flight* ([`Admitted`]), each at what it was admitted for (then at what it spent), until its usage
//! is in the log: tasks running at once are admitted against spent + in flight, one at a time, so
//! together they overshoot a budget by no more than one request's estimate is short. A day is every task's events of that day, in the
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
use std::collections::{BTreeMap, HashMap, HashSet};
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
    /// Requests admitted whose usage the log does not hold yet, by reservation.
    in_flight: HashMap<u64, InFlight>,
    /// Tasks whose requests left flight since they were last folded: their usage is in their log
    /// now, and is folded before the next standing, whichever task asks.
    landed: HashSet<String>,
    /// The next reservation's number.
    next: u64,
}

/// One admitted request not yet in the log.
struct InFlight {
    task_id: String,
    amount: Amount,
}

impl State {
    /// What is in flight: `task_id`'s, and every task's.
    fn in_flight(&self, task_id: &str) -> (Amount, Amount) {
        self.in_flight.values().fold((Amount::default(), Amount::default()), |(task, all), f| {
            let task = if f.task_id == task_id { task.plus(f.amount) } else { task };
            (task, all.plus(f.amount))
        })
    }
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
    /// The task's requests in flight (admitted, their usage not in the log yet).
    pub task_in_flight: Amount,
    /// Every task's requests in flight.
    pub day_in_flight: Amount,
}

/// A request's place in the ledger while it is in flight, from its admission until its usage is in
/// the log: dropping the last clone of it ends it. Cheap to clone; several can be joined into one
/// (a compaction's summary requests, held until `compaction_finished` records their usage).
#[derive(Clone, Default)]
pub struct Admitted {
    held: Vec<Arc<Reservation>>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted").field("requests", &self.held.len()).finish()
    }
}

struct Reservation {
    ledger: Arc<Ledger>,
    id: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = self.ledger.state.lock();
        if let Some(landed) = state.in_flight.remove(&self.id) {
            state.landed.insert(landed.task_id);
        }
    }
}

impl Admitted {
    /// Nothing held: a request no budget applies to.
    pub fn none() -> Admitted {
        Admitted::default()
    }

    /// From now on these requests count as what they spent (`spent`, from the answer's usage report)
    /// rather than what they were admitted for.
    pub fn settle(&self, spent: Amount) {
        for (i, r) in self.held.iter().enumerate() {
            let mut state = r.ledger.state.lock();
            if let Some(f) = state.in_flight.get_mut(&r.id) {
                f.amount = if i == 0 { spent } else { Amount::default() };
            }
        }
    }

    /// Holds `other`'s requests too, until this is dropped.
    pub fn join(&mut self, other: Admitted) {
        self.held.extend(other.held);
    }
}

impl Ledger {
    /// A ledger whose days are `calendar`'s.
    pub fn new(calendar: Arc<dyn Calendar>) -> Ledger {
        Ledger { calendar, state: Mutex::default() }
    }

    /// What `task_id` spent, and what every task spent today, caught up from `storage` now.
    pub fn standing(&self, storage: &dyn Storage, task_id: &str) -> Result<Standing, StorageError> {
        let mut state = self.state.lock();
        self.standing_in(&mut state, storage, task_id)
    }

    fn standing_in(
        &self,
        state: &mut State,
        storage: &dyn Storage,
        task_id: &str,
    ) -> Result<Standing, StorageError> {
        let (today, _) = self.today_in(state, storage)?;
        self.catch_up(state, storage, task_id)?;
        let landed: Vec<String> = state.landed.iter().cloned().collect();
        for task in landed {
            self.catch_up(state, storage, &task)?;
            state.landed.remove(&task);
        }
        let task = state.tasks.get(task_id).map(|f| f.total).unwrap_or_default();
        let day = day_total(state, &today);
        let (task_in_flight, day_in_flight) = state.in_flight(task_id);
        Ok(Standing { task, day, today, task_in_flight, day_in_flight })
    }

    /// Admits a request of `amount` for `task_id` when `judge`, given the standing (what was spent
    /// and what is in flight), lets it through: judged and held in one step, so two tasks cannot
    /// both take the last of a budget. Held as in flight until the [`Admitted`] is dropped.
    pub fn admit<E>(
        self: &Arc<Self>,
        storage: &dyn Storage,
        task_id: &str,
        amount: Amount,
        judge: impl FnOnce(&Standing) -> Result<(), E>,
    ) -> Result<Result<Admitted, E>, StorageError> {
        let mut state = self.state.lock();
        let standing = self.standing_in(&mut state, storage, task_id)?;
        if let Err(e) = judge(&standing) {
            return Ok(Err(e));
        }
        let id = state.next;
        state.next += 1;
        state.in_flight.insert(id, InFlight { task_id: task_id.to_string(), amount });
        drop(state);
        Ok(Ok(Admitted { held: vec![Arc::new(Reservation { ledger: self.clone(), id })] }))
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
    /// sent, against what was spent and what is in flight (this task's earlier summary requests of
    /// a compaction under way among them). Admitted, it is in flight until the [`Admitted`] is
    /// dropped: keep it until the answer's usage is in the log.
    pub fn admit(&self, model: &str, input: Tokens, max_tokens: Option<u32>) -> Result<Admitted, GateError> {
        if self.task_budget.is_empty() && self.day_budget.is_empty() {
            return Ok(Admitted::none());
        }
        let out = u64::from(max_tokens.unwrap_or(0));
        let request = self.amount(model, &Usage::new(input.0, out));
        let judge = |standing: &Standing| {
            let ceilings = [
                Ceiling {
                    scope: BudgetScope::Task,
                    budget: self.task_budget,
                    spent: standing.task,
                    in_flight: standing.task_in_flight,
                },
                Ceiling {
                    scope: BudgetScope::Day,
                    budget: self.day_budget,
                    spent: standing.day,
                    in_flight: standing.day_in_flight,
                },
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
        };
        self.ledger.admit(self.storage.as_ref(), &self.task_id, request, judge)?
    }

    /// What `usage` of `model` amounts to: its tokens, and their cost when the model is priced.
    pub fn amount(&self, model: &str, usage: &Usage) -> Amount {
        Amount {
            tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
            cost: priced(&self.prices, model, usage),
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

    fn gate(ledger: &Arc<Ledger>, storage: &Arc<crate::memory::MemoryStorage>, task: &str, day: u64) -> Gate {
        Gate {
            storage: storage.clone(),
            ledger: ledger.clone(),
            prices: Arc::default(),
            task_budget: Budget::default(),
            day_budget: Budget { tokens: Some(day), cost: None },
            task_id: task.to_string(),
            role: Role::Lead,
        }
    }

    /// Two tasks cannot both take the last of a day: what one was admitted for counts against the
    /// other until it is dropped, at what it spent once settled.
    #[test]
    fn requests_in_flight_count_against_every_task_until_they_land() {
        let storage = Arc::new(crate::memory::MemoryStorage::new());
        let ledger = Arc::new(Ledger::new(Arc::new(UtcDays)));
        let (a, b) = (gate(&ledger, &storage, "a", 1_000), gate(&ledger, &storage, "b", 1_000));
        let first = a.admit("m", Tokens(500), Some(100)).unwrap();
        let refused = b.admit("m", Tokens(300), Some(200)).unwrap_err();
        let GateError::Halt(halt) = refused else { panic!("{refused:?}") };
        let Halt::Budget { ceiling, .. } = *halt else { panic!("not a budget") };
        assert_eq!((ceiling.spent.tokens, ceiling.in_flight.tokens), (0, 600));
        // Settled at what it spent, the rest of the day is free again.
        first.settle(Amount { tokens: 420, cost: None });
        let second = b.admit("m", Tokens(380), Some(200)).unwrap();
        assert!(a.admit("m", Tokens(1), None).is_err(), "420 + 580 in flight: the day is taken");
        drop((first, second));
        assert!(a.admit("m", Tokens(1_000), None).is_ok(), "nothing in the log, nothing in flight");
    }

    #[test]
    fn utc_days_begin_at_midnight() {
        let at = humantime::parse_rfc3339("2026-12-02T09:30:00Z").unwrap();
        let day = UtcDays.day(at);
        assert_eq!(day.key, "2026-12-02");
        assert_eq!(day.starts, humantime::parse_rfc3339("2026-12-02T00:00:00Z").unwrap());
        assert_eq!(day.next, humantime::parse_rfc3339("2026-12-03T00:00:00Z").unwrap());
    }
}
