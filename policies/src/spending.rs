//! Budgets: whether the next request may be sent. Pure: the engine keeps what was spent (the
//! providers' usage reports, summed) and measures the request; this decides.
//!
//! A request is counted before it is sent as its measured size plus the answer's `max_tokens`, so
//! a budget is never crossed by what a request was allowed to bring back. A money ceiling counts
//! what is priced (`[prices."MODEL"]`): a model without prices costs nothing to it. Requests already
//! admitted whose usage the log does not hold yet (in flight, in this task or another) count as
//! their admitted amount: tasks running at once cannot each take the last of a budget.

use agentd_protocol::{Amount, Budget, BudgetScope};

/// One budget in force and what was spent against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    /// The task's or the day's.
    pub scope: BudgetScope,
    /// Its ceilings.
    pub budget: Budget,
    /// What was spent against it so far, as the log holds it.
    pub spent: Amount,
    /// What requests admitted against it and not yet in the log may spend.
    pub in_flight: Amount,
}

impl Ceiling {
    /// Whether `request`, on top of what was spent and what is in flight, goes over a ceiling of
    /// this budget.
    pub fn crossed_by(&self, request: Amount) -> bool {
        let after = self.spent.plus(self.in_flight).plus(request);
        let tokens = self.budget.tokens.is_some_and(|max| after.tokens > max);
        let cost = self.budget.cost.is_some_and(|max| after.cost.unwrap_or(0.0) > max);
        tokens || cost
    }
}

/// The first of `ceilings` (the task's before the day's, as given) that `request` would cross;
/// `None`: it may be sent.
pub fn crossed(ceilings: &[Ceiling], request: Amount) -> Option<Ceiling> {
    ceilings.iter().find(|c| c.crossed_by(request)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ceiling(scope: BudgetScope, tokens: Option<u64>, cost: Option<f64>, spent: Amount) -> Ceiling {
        Ceiling { scope, budget: Budget { tokens, cost }, spent, in_flight: Amount::default() }
    }

    #[test]
    fn what_is_in_flight_counts_as_spent() {
        let spent = Amount { tokens: 600, cost: None };
        let mut task = ceiling(BudgetScope::Task, Some(1_000), None, spent);
        task.in_flight = Amount { tokens: 300, cost: None };
        assert_eq!(crossed(&[task], Amount { tokens: 100, cost: None }), None);
        assert_eq!(crossed(&[task], Amount { tokens: 101, cost: None }), Some(task));
    }

    #[test]
    fn the_request_that_would_cross_is_the_one_refused() {
        let spent = Amount { tokens: 900, cost: None };
        let task = ceiling(BudgetScope::Task, Some(1_000), None, spent);
        assert_eq!(crossed(&[task], Amount { tokens: 100, cost: None }), None, "landing on it is allowed");
        assert_eq!(crossed(&[task], Amount { tokens: 101, cost: None }), Some(task));
    }

    #[test]
    fn money_counts_what_is_priced_and_the_task_is_named_before_the_day() {
        let spent = Amount { tokens: 10, cost: Some(0.9) };
        let task = ceiling(BudgetScope::Task, None, Some(1.0), spent);
        let day = ceiling(BudgetScope::Day, Some(5), None, spent);
        assert_eq!(crossed(&[task, day], Amount { tokens: 1, cost: Some(0.2) }), Some(task));
        assert_eq!(crossed(&[task, day], Amount { tokens: 1, cost: None }), Some(day));
        let unpriced = ceiling(BudgetScope::Task, None, Some(1.0), Amount { tokens: 10, cost: None });
        assert_eq!(crossed(&[unpriced], Amount { tokens: 1_000_000, cost: None }), None);
    }

    proptest! {
        #[test]
        fn what_is_admitted_never_takes_spending_over_a_budget(
            budget in 1u64..1_000_000,
            spent in 0u64..1_000_000,
            request in 0u64..1_000_000,
            max_cost in 0.01f64..100.0,
            spent_cost in 0.0f64..100.0,
            request_cost in 0.0f64..100.0,
        ) {
            let c = ceiling(BudgetScope::Task, Some(budget), Some(max_cost), Amount { tokens: spent, cost: Some(spent_cost) });
            let r = Amount { tokens: request, cost: Some(request_cost) };
            if crossed(&[c], r).is_none() {
                prop_assert!(spent + request <= budget);
                prop_assert!(spent_cost + request_cost <= max_cost);
            } else {
                prop_assert!(spent + request > budget || spent_cost + request_cost > max_cost);
            }
        }
    }
}
