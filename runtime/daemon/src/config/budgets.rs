//! `[budgets]`: what a task, and all tasks in a day, may spend — `task_tokens`, `task_cost`,
//! `day_tokens`, `day_cost` (cost in USD, at `[prices."MODEL"]`; the day in `[scheduler] tz`). A
//! task's own budget (`task.submit`'s `budget`) replaces the task figures it gives.

use super::error::ConfigError;
use super::error::Invalid;
use super::raw::RawBudgets;
use agentd_engine::spending::Budgets;
use agentd_protocol::Budget;

/// Checks each figure by the one check of a budget's figures ([`Budget::check_tokens`],
/// [`Budget::check_cost`]), naming the key.
pub(super) fn budgets(raw: RawBudgets, invalid: Invalid) -> Result<Budgets, ConfigError> {
    let tokens = |key: &str, v: Option<i64>| -> Result<Option<u64>, ConfigError> {
        let Some(n) = v else { return Ok(None) };
        Budget::check_tokens(n).map(Some).map_err(|e| invalid(format!("budgets.{key}"), e.message))
    };
    let cost = |key: &str, v: Option<f64>| -> Result<Option<f64>, ConfigError> {
        let Some(c) = v else { return Ok(None) };
        Budget::check_cost(c).map(Some).map_err(|e| invalid(format!("budgets.{key}"), e.message))
    };
    Ok(Budgets {
        task: Budget {
            tokens: tokens("task_tokens", raw.task_tokens)?,
            cost: cost("task_cost", raw.task_cost)?,
        },
        day: Budget { tokens: tokens("day_tokens", raw.day_tokens)?, cost: cost("day_cost", raw.day_cost)? },
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::DEFAULT_CONFIG;
    use agentd_protocol::Budget;

    #[test]
    fn budgets_parse_and_bad_figures_are_named() {
        let text = format!("{DEFAULT_CONFIG}\n[budgets]\ntask_tokens = 200000\nday_cost = 5.5\n");
        let c = parse(&text).unwrap();
        assert_eq!(c.team.budgets.task, Budget { tokens: Some(200_000), cost: None });
        assert_eq!(c.team.budgets.day, Budget { tokens: None, cost: Some(5.5) });
        assert!(parse(DEFAULT_CONFIG).unwrap().team.budgets.task.is_empty());
        for (table, key, says) in [
            ("task_tokens = 0", "budgets.task_tokens", "from 1 to"),
            ("day_tokens = -5", "budgets.day_tokens", "got -5"),
            ("task_cost = 0.0", "budgets.task_cost", "above 0"),
            ("day_cost = inf", "budgets.day_cost", "USD"),
            ("day_cost = nan", "budgets.day_cost", "got NaN"),
            ("task_cost = 1e308", "budgets.task_cost", "at most"),
            ("task_cost = 2000000.0", "budgets.task_cost", "at most 1000000"),
            ("task_tokens = 1000000000001", "budgets.task_tokens", "from 1 to 1000000000000"),
            ("week_tokens = 1", "week_tokens", "week_tokens"),
        ] {
            let e = parse(&format!("{DEFAULT_CONFIG}\n[budgets]\n{table}\n")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says) && e.contains("/h/agentd.toml"), "{table}: {e}");
        }
    }
}
