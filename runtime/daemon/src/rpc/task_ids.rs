//! Task ids as people type them: any unique prefix of six characters or more stands for the task
//! it begins, wherever a method takes a `task_id` (the socket and the HTTP API alike, so every
//! command of the CLI, `agentd mcp` and a script get it at once). An ambiguous prefix is refused
//! listing the tasks it begins; one that begins none is left for the method to refuse as the
//! unknown task it is.
//!
//! The choice is [`resolve`], a pure function over the ids the store holds; [`Methods::full_task_id`]
//! applies it to a request before it is dispatched. `task.submit`'s `task_id` is a new task's and is
//! never read as a prefix.

use super::{Answer, Methods, Refusal};
use agentd_protocol::rpc::Method;
use agentd_protocol::task::TaskMeta;
use agentd_protocol::{Request, RpcError};
use serde_json::Value;

/// The fewest characters a prefix may have. Task ids are UUID v7, which begin with the time they
/// were made: tasks made within minutes of each other share their first 8 characters, and the
/// refusal of an ambiguous prefix lists them, so the user sees how much more to type.
pub const MIN_PREFIX: usize = 6;

/// How many of the tasks an ambiguous prefix begins its refusal lists (the rest are counted).
const LISTED: usize = 20;

/// What a typed id stands for among the known ones.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolution<'a> {
    /// A whole id, a prefix too short to be one, or one that begins no id: used as typed.
    AsTyped,
    /// The one id the prefix begins.
    Unique(&'a str),
    /// Every id the prefix begins (two or more), in the order given.
    Ambiguous(Vec<&'a str>),
}

/// What `typed` stands for among `ids` (case-insensitively, as UUIDs are).
pub fn resolve<'a>(typed: &str, ids: impl IntoIterator<Item = &'a str>) -> Resolution<'a> {
    let typed = typed.trim();
    if typed.chars().count() < MIN_PREFIX {
        return Resolution::AsTyped;
    }
    let lower = typed.to_ascii_lowercase();
    let mut found = Vec::new();
    for id in ids {
        if id.eq_ignore_ascii_case(typed) {
            return Resolution::AsTyped;
        }
        if id.to_ascii_lowercase().starts_with(&lower) {
            found.push(id);
        }
    }
    match found.as_slice() {
        [] => Resolution::AsTyped,
        [one] => Resolution::Unique(one),
        _ => Resolution::Ambiguous(found),
    }
}

impl Methods {
    /// `request` with its `task_id` made whole when it is a unique prefix; an ambiguous prefix is
    /// -32602 listing the tasks it begins (id, state, objective).
    pub fn full_task_id(&self, request: Request) -> Result<Request, RpcError> {
        self.whole_id(request).map_err(|refusal| refusal.0)
    }

    fn whole_id(&self, request: Request) -> Answer<Request> {
        if request.method() == Method::TaskSubmit {
            return Ok(request);
        }
        let (name, mut params) = request.to_wire();
        let Some(Value::String(typed)) = params.get("task_id") else { return Ok(request) };
        // A whole id goes as it is, without a read; so does any id while the store cannot be read
        // (the method answers what it can of a task then, as it always did).
        if typed.chars().count() < MIN_PREFIX || agentd_protocol::text::is_uuid(typed) {
            return Ok(request);
        }
        let Ok(tasks) = self.shared.storage.tasks() else { return Ok(request) };
        let whole = match resolve(typed, tasks.iter().map(|t| t.task_id.as_str())) {
            Resolution::AsTyped => return Ok(request),
            Resolution::Unique(id) => id.to_string(),
            Resolution::Ambiguous(ids) => return Err(Refusal(ambiguous(typed, &ids, &tasks))),
        };
        params["task_id"] = Value::String(whole);
        super::request_of(name, params).map_err(Refusal)
    }
}

/// The refusal of an ambiguous prefix: the tasks it begins, one a line, the first [`LISTED`] of
/// them (a prefix of the time part may begin thousands).
fn ambiguous(typed: &str, ids: &[&str], tasks: &[TaskMeta]) -> RpcError {
    let mut lines: Vec<String> = ids
        .iter()
        .take(LISTED)
        .filter_map(|id| tasks.iter().find(|t| t.task_id == *id))
        .map(|t| {
            let objective = agentd_client::render::one_line(&t.objective, 60);
            format!("  {}  {:<13} {objective}", t.task_id, t.state.as_str())
        })
        .collect();
    if ids.len() > LISTED {
        lines.push(format!("  … and {} more", ids.len() - LISTED));
    }
    RpcError::invalid_params(format!(
        "task id `{typed}` is ambiguous: it begins {} tasks; type more of it:\n{}",
        ids.len(),
        lines.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const IDS: [&str; 3] = [
        "01a2430d-1111-4222-8333-444455556666",
        "01a2430e-1111-4222-8333-444455556666",
        "9f00aa11-1111-4222-8333-444455556666",
    ];

    #[test]
    fn a_unique_prefix_is_its_task_and_a_shared_one_lists_them() {
        assert_eq!(resolve("9f00aa", IDS), Resolution::Unique(IDS[2]));
        assert_eq!(resolve("9F00AA11-1", IDS), Resolution::Unique(IDS[2]));
        assert_eq!(resolve("01a243", IDS), Resolution::Ambiguous(vec![IDS[0], IDS[1]]));
        assert_eq!(resolve("01a2430d", IDS), Resolution::Unique(IDS[0]));
        assert_eq!(resolve(IDS[1], IDS), Resolution::AsTyped);
        assert_eq!(resolve("01a24", IDS), Resolution::AsTyped, "five characters are too few");
        assert_eq!(resolve("ffffff", IDS), Resolution::AsTyped, "no task: the method says so");
    }

    #[test]
    fn an_ambiguous_prefix_lists_twenty_tasks_and_counts_the_rest() {
        let ids: Vec<String> = (0..25).map(|n| format!("01a2430d-0000-7000-8000-{n:012}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let e = ambiguous("01a2430d", &refs, &[]);
        assert!(e.message.starts_with("task id `01a2430d` is ambiguous: it begins 25 tasks"), "{e}");
        assert!(e.message.ends_with("\n  … and 5 more"), "{e}");
    }

    proptest! {
        /// Whatever is typed, a resolution names only ids the prefix begins, a unique one is the
        /// only such id, and a whole id is never taken for another.
        #[test]
        fn a_resolution_names_only_what_the_prefix_begins(typed in "[0-9a-f-]{0,40}", n in 0usize..3) {
            let ids = &IDS[..=n];
            match resolve(&typed, ids.iter().copied()) {
                Resolution::Unique(id) => {
                    prop_assert!(id.starts_with(&typed));
                    prop_assert_eq!(ids.iter().filter(|i| i.starts_with(&typed)).count(), 1);
                }
                Resolution::Ambiguous(found) => {
                    prop_assert!(found.len() > 1 && found.iter().all(|i| i.starts_with(&typed)));
                }
                Resolution::AsTyped => prop_assert!(
                    typed.len() < MIN_PREFIX
                        || ids.contains(&typed.as_str())
                        || !ids.iter().any(|i| i.starts_with(&typed))
                ),
            }
        }
    }
}
