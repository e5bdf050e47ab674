//! Workflow concurrency limits: runs grouped by a key expression (`input.user_id`), at most
//! `max_runs` active per group, and a strategy for the runs over the limit.
//!
//! # Invariants
//!
//! 1. A run is *active* from admission until it is terminal; a *held* run has its root tasks
//!    parked (Pending, not in the assignment queue) until its groups have room.
//! 2. `GROUP_ROUND_ROBIN` and `QUEUE_NEWEST` (and an unset strategy) hold the newcomer; each group
//!    admits its held runs in arrival order as its active runs finish, so groups never wait on
//!    each other. `CANCEL_NEWEST` and `DROP_NEWEST` cancel the newcomer. `CANCEL_IN_PROGRESS`
//!    cancels the group's oldest active runs (running tasks get CANCEL_STEP_RUN) and admits it.
//! 3. With several limits, a run is admitted only when every group it belongs to has room.
//!    Task-level limits count per run too (exact for one-task workflows, stricter for a DAG).
//! 4. A held run that is cancelled (CancelTasks) is skipped when its turn comes.
//! 5. A group is the string the limit's CEL expression gives over `input`,
//!    `additional_metadata` and `workflow_run_id` ([`group_key`]). An expression that fails
//!    on a run's input, or gives anything but a string, fails the run's root tasks at once with
//!    the real engine's reason ("failed to parse step expression (...): ..."), as the real
//!    engine creates such a task FAILED; it joins no group.

use serde_json::{Map, Value};

use hatchet_runtime::protocol::{self as proto, v1::ConcurrencyLimitStrategy as Strategy};

/// The group a run belongs to under a limit's `expression` (invariant 5), or the reason its
/// tasks fail, in the real engine's words.
pub(crate) fn group_key(
    expression: &str,
    input: &Value,
    meta: &Map<String, Value>,
    run_id: &str,
) -> Result<String, String> {
    let failed = |why: String| format!("failed to parse step expression ({expression}): {why}");
    let mut vars = Map::new();
    vars.insert("input".into(), input.clone());
    vars.insert("additional_metadata".into(), Value::Object(meta.clone()));
    vars.insert("workflow_run_id".into(), Value::String(run_id.into()));
    let value = crate::dag::expr::Expr::parse(expression)
        .and_then(|e| e.eval(&vars))
        .map_err(|e| failed(e.0))?;
    match value {
        Value::String(s) => Ok(s),
        Value::Number(n) if n.is_i64() || n.is_u64() => Err(failed(
            "expected string output for concurrency key, got int".into(),
        )),
        _ => Err(failed(
            "expected string output for concurrency key, got unknown type".into(),
        )),
    }
}

/// One limit of a workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limit {
    /// The key expression.
    pub expression: String,
    /// Active runs allowed per group (at least 1).
    pub max_runs: usize,
    /// What happens to runs over the limit.
    pub strategy: Strategy,
}

impl Limit {
    /// The limits a workflow declares (`concurrency` and `concurrency_arr`).
    pub(crate) fn from_proto(list: impl IntoIterator<Item = proto::v1::Concurrency>) -> Vec<Limit> {
        list.into_iter()
            .map(|c| Limit {
                expression: c.expression,
                max_runs: c.max_runs.unwrap_or(1).max(1) as usize,
                strategy: c
                    .limit_strategy
                    .and_then(|s| Strategy::try_from(s).ok())
                    .unwrap_or(Strategy::GroupRoundRobin),
            })
            .collect()
    }
}

/// A group: the workflow, the limit's index, the key.
pub(crate) type Group = (String, usize, String);

/// The runs each full group holds, in arrival order: each group admits its own line in order
/// (invariant 2), and a group with an empty line is forgotten.
#[derive(Debug, Default)]
pub(crate) struct Held {
    lines: std::collections::HashMap<Group, std::collections::VecDeque<String>>,
}

impl Held {
    /// `run` waits at the back of `group`'s line.
    pub(crate) fn push_back(&mut self, group: Group, run: String) {
        self.lines.entry(group).or_default().push_back(run);
    }

    /// `run` goes back to the front of `group`'s line (its turn came, and the group is full).
    pub(crate) fn push_front(&mut self, group: Group, run: String) {
        self.lines.entry(group).or_default().push_front(run);
    }

    /// The first run in `group`'s line; an emptied line is forgotten.
    pub(crate) fn pop_front(&mut self, group: &Group) -> Option<String> {
        let line = self.lines.get_mut(group)?;
        let next = line.pop_front();
        if line.is_empty() {
            self.lines.remove(group);
        }
        next
    }

    /// Whether no group holds a run.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

#[cfg(test)]
mod group_key_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_group_is_the_expression_s_string_and_anything_else_fails_the_run() {
        let meta = json!({"team": "a"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let input = json!({"user": "u1", "n": 3});
        let key = |e: &str| group_key(e, &input, &meta, "run-1");
        assert_eq!(key("input.user"), Ok("u1".into()));
        assert_eq!(key("'user-' + input.user"), Ok("user-u1".into()));
        assert_eq!(key("additional_metadata.team"), Ok("a".into()));
        assert_eq!(key("workflow_run_id"), Ok("run-1".into()));
        assert_eq!(
            key("input.n"),
            Err("failed to parse step expression (input.n): expected string output for concurrency key, got int".into())
        );
        assert!(
            key("input.missing")
                .is_err_and(|e| e.starts_with("failed to parse step expression (input.missing): "))
        );
    }
}
