//! The workflows table: every registered workflow by name, its latest version; and the
//! idempotency keys its runs claim.
//!
//! # Invariants
//!
//! 1. A new version of a live workflow keeps the workflow's id and gets a new version id; a
//!    deleted workflow's name registers a new workflow (a new id). A registration that
//!    declares what the live version declares is that version again (its id and time kept),
//!    as the real engine reuses a version whose checksum matches: a worker that starts again
//!    adds no version.
//! 4. Every version's definition stays readable by its id (a run shows its own version's,
//!    not the latest).
//! 2. A deleted workflow stays readable by name (its runs name it), but is not live: it is
//!    not listed, triggered or found by id.
//! 3. An idempotency key is the tenant's, not a workflow's (the real engine's
//!    `v1_idempotency_key` is keyed by tenant and key): a run of any workflow whose key
//!    expression gives the same string collides. It is held by the run that claimed it until its
//!    TTL ends, or (keys by status) until its TTL or the first end of a task that carries it,
//!    whichever comes first: the real engine releases a status key when a task carrying it
//!    reaches any terminal state, completed included (`ReleaseIdempotencyKeys`), and a run's
//!    root tasks carry it, so a DAG frees its key when its first root task ends.
//! 5. A key is what the workflow's expression gives as a string, evaluated over `input`,
//!    `additional_metadata` and `workflow_run_id` ([`idempotency_key`]); an expression that
//!    fails on a trigger's input, or gives anything but a string, or a string with the reserved
//!    prefix, claims nothing and creates no run (the real engine skips the trigger and records
//!    an evaluation failure, answering the caller with the id it would have had).

use std::collections::HashMap;

use tokio::time::Instant;

use crate::store::model::Workflow;

/// Every workflow by name, and every version's definition.
#[derive(Debug, Default)]
pub(crate) struct Workflows {
    by_name: HashMap<String, Workflow>,
    /// The definitions (`workflowConfig`) of versions a newer one replaced, by version id.
    past_configs: HashMap<String, serde_json::Value>,
}

impl Workflows {
    /// The id a new version of `name` takes (invariant 1): the live workflow's, or `new`.
    pub(crate) fn id_for(&self, name: &str, new: impl FnOnce() -> String) -> String {
        self.live(name).map(|w| w.id.clone()).unwrap_or_else(new)
    }

    /// Stores `w` as the latest version of its name.
    /// Answers the version id it has: the live version's when `w` declares the same (invariant
    /// 1), else its own.
    pub(crate) fn put(&mut self, mut w: Workflow) -> String {
        if let Some(old) = self.by_name.get(&w.name) {
            if !old.deleted && old.config == w.config {
                w.version_id = old.version_id.clone();
                w.created_at = old.created_at;
            } else {
                self.past_configs
                    .insert(old.version_id.clone(), old.config.clone());
            }
        }
        let version = w.version_id.clone();
        self.by_name.insert(w.name.clone(), w);
        version
    }

    /// The definition of version `version` of workflow `name` (invariant 4).
    pub(crate) fn config_of(&self, name: &str, version: &str) -> Option<&serde_json::Value> {
        match self.by_name.get(name) {
            Some(w) if w.version_id == version => Some(&w.config),
            _ => self.past_configs.get(version),
        }
    }

    /// Workflow `name`, live or deleted.
    pub(crate) fn get(&self, name: &str) -> Option<&Workflow> {
        self.by_name.get(name)
    }

    /// The live workflow `name` (invariant 2).
    pub(crate) fn live(&self, name: &str) -> Option<&Workflow> {
        self.by_name.get(name).filter(|w| !w.deleted)
    }

    /// The live workflow whose id is `id`.
    pub(crate) fn live_by_id(&self, id: &str) -> Option<&Workflow> {
        self.by_name.values().find(|w| w.id == id && !w.deleted)
    }

    /// Deletes the live workflow `name` (invariant 2); whether there was one.
    pub(crate) fn delete(&mut self, name: &str) -> bool {
        match self.by_name.get_mut(name).filter(|w| !w.deleted) {
            Some(w) => {
                w.deleted = true;
                true
            }
            None => false,
        }
    }

    /// Every workflow, live or deleted, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Workflow> {
        self.by_name.values()
    }

    /// Every live workflow, in no order.
    pub(crate) fn live_ones(&self) -> impl Iterator<Item = &Workflow> {
        self.by_name.values().filter(|w| !w.deleted)
    }
}

/// The idempotency keys claimed, by key (the tenant's): who holds each and until when.
#[derive(Debug, Default)]
pub(crate) struct IdempotencyKeys {
    claims: HashMap<String, Claim>,
}

/// One claim of a key.
#[derive(Debug)]
struct Claim {
    run: String,
    until: Instant,
    /// The tasks that carry the key (the run's root tasks): a status key ends with the first.
    tasks: Vec<String>,
}

impl IdempotencyKeys {
    /// The run holding `key` at `now` (invariant 3): a claim holds until its TTL, and with
    /// `by_status` only while no task carrying it has ended (`ended(task)`).
    pub(crate) fn holder(
        &self,
        key: &str,
        now: Instant,
        by_status: bool,
        ended: impl Fn(&str) -> bool,
    ) -> Option<String> {
        self.claims
            .get(key)
            .filter(|c| c.until > now && !(by_status && c.tasks.iter().any(|t| ended(t))))
            .map(|c| c.run.clone())
    }

    /// `run` claims `key` until `until`, carried by `tasks`.
    pub(crate) fn claim(&mut self, key: String, run: &str, until: Instant, tasks: Vec<String>) {
        self.claims.insert(
            key,
            Claim {
                run: run.to_string(),
                until,
                tasks,
            },
        );
    }
}

/// What is wrong with a workflow's idempotency config, as the real engine's validator names it
/// (field, condition), in its field order; empty when it is fine.
pub(crate) fn idempotency_config_problems(
    c: &hatchet_runtime::protocol::v1::IdempotencyConfig,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if c.expression.is_empty() {
        out.push((
            "Idempotency.Expression".into(),
            "on condition 'required'".into(),
        ));
    } else if crate::dag::expr::Expr::parse(&c.expression).is_err() {
        out.push((
            "Idempotency.Expression".into(),
            "Invalid CEL expression".into(),
        ));
    }
    match c.ttl_ms {
        0 => out.push(("Idempotency.TTLMs".into(), "on condition 'required'".into())),
        t if t < 1 => out.push((
            "Idempotency.TTLMs".into(),
            "on condition 'min' [ 1 ]: got invalid type".into(),
        )),
        _ => {}
    }
    out
}

/// The prefix the real engine keeps for its own keys: a key that starts with it is refused.
pub(crate) const RESERVED_KEY_PREFIX: &str = "hatchet_internal_";

/// The key a workflow's idempotency `expression` gives for one trigger (invariant 5), or why
/// it gives none.
pub(crate) fn idempotency_key(
    expression: &str,
    input: &serde_json::Value,
    meta: &serde_json::Map<String, serde_json::Value>,
    run_id: &str,
) -> Result<String, String> {
    use serde_json::Value;
    let mut vars = serde_json::Map::new();
    // The real engine reads the input into a map: anything else is no input at all.
    let input = match input {
        Value::Object(_) => input.clone(),
        Value::Null => Value::Object(Default::default()),
        _ => return Err("the input is not a JSON object".into()),
    };
    vars.insert("input".into(), input);
    vars.insert("additional_metadata".into(), Value::Object(meta.clone()));
    vars.insert("workflow_run_id".into(), Value::String(run_id.into()));
    let value = crate::dag::expr::Expr::parse(expression)
        .and_then(|e| e.eval(&vars))
        .map_err(|e| {
            format!(
                "failed to evaluate idempotency key expression {expression:?}: {}",
                e.0
            )
        })?;
    match value {
        Value::String(key) if key.starts_with(RESERVED_KEY_PREFIX) => Err(format!(
            "idempotency key {key:?} uses reserved prefix {RESERVED_KEY_PREFIX:?}"
        )),
        Value::String(key) => Ok(key),
        other => Err(format!(
            "failed to evaluate idempotency key expression {expression:?}: output must evaluate to a string: got {}",
            match other {
                Value::Null => "null_type",
                Value::Bool(_) => "bool",
                Value::Number(n) if n.is_f64() => "double",
                Value::Number(_) => "int",
                Value::Array(_) => "list",
                Value::Object(_) => "map",
                Value::String(_) => "string",
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_version_keeps_the_id_and_a_deleted_name_starts_a_new_workflow() {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        let first = st.workflows.live("wf").map(|w| w.id.clone()).expect("live");
        assert_eq!(st.workflows.id_for("wf", || "new".into()), first);
        assert!(st.workflows.delete("wf"));
        assert!(!st.workflows.delete("wf"), "deleted once");
        assert!(st.workflows.live("wf").is_none() && st.workflows.live_by_id(&first).is_none());
        assert!(st.workflows.get("wf").is_some(), "still readable by name");
        assert_eq!(st.workflows.id_for("wf", || "new".into()), "new");
        assert_eq!(st.workflows.live_ones().count(), 0);
    }

    #[test]
    fn an_idempotency_key_is_the_tenant_s_and_held_until_its_ttl_or_a_carrying_task_ends() {
        let now = Instant::now();
        let mut keys = IdempotencyKeys::default();
        keys.claim(
            "k".into(),
            "run",
            now + std::time::Duration::from_secs(1),
            vec!["a".into(), "b".into()],
        );
        assert_eq!(keys.holder("k", now, false, |_| true), Some("run".into()));
        let later = now + std::time::Duration::from_secs(1);
        assert_eq!(keys.holder("k", later, false, |_| false), None, "TTL over");
        assert_eq!(
            keys.holder("k", later, true, |_| false),
            None,
            "a status key ends at its TTL too"
        );
        assert_eq!(keys.holder("k", now, true, |_| false), Some("run".into()));
        assert_eq!(
            keys.holder("k", now, true, |t| t == "b"),
            None,
            "released by the first carrying task's end"
        );
        assert_eq!(keys.holder("other", now, false, |_| false), None);
    }

    #[test]
    fn an_idempotency_config_is_refused_in_the_real_engine_s_words() {
        use hatchet_runtime::protocol::v1::IdempotencyConfig;
        let problems = |expression: &str, ttl_ms: i64| {
            crate::answers::validation_failed(&idempotency_config_problems(&IdempotencyConfig {
                expression: expression.into(),
                ttl_ms,
                method: None,
            }))
        };
        // Each as v0.104.9 answered it (InvalidArgument), read off the live engine.
        let head = "Validation failed with the following errors:\n0: validation failed on field 'CreateWorkflowVersionOpts.Idempotency.";
        assert_eq!(
            problems("input.k", 0),
            format!("{head}TTLMs': on condition 'required'\n")
        );
        assert_eq!(
            problems("input.k +", 1000),
            format!("{head}Expression': Invalid CEL expression\n")
        );
        assert_eq!(
            problems("", 1000),
            format!("{head}Expression': on condition 'required'\n")
        );
        assert_eq!(
            problems("input.k", -5),
            format!("{head}TTLMs': on condition 'min' [ 1 ]: got invalid type\n")
        );
        assert!(
            idempotency_config_problems(&IdempotencyConfig {
                expression: "input.k".into(),
                ttl_ms: 1,
                method: Some(1),
            })
            .is_empty()
        );
    }

    #[test]
    fn a_key_is_the_expression_s_string_and_anything_else_claims_nothing() {
        use serde_json::json;
        let meta = json!({"tenant": "acme"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let input = json!({"a": "x", "b": "y", "n": 5});
        let key = |e: &str| idempotency_key(e, &input, &meta, "run-1");
        assert_eq!(key("input.a"), Ok("x".into()));
        assert_eq!(key("input.a + '-' + input.b"), Ok("x-y".into()));
        assert_eq!(key("additional_metadata.tenant"), Ok("acme".into()));
        assert_eq!(key("workflow_run_id"), Ok("run-1".into()));
        assert_eq!(key("'order'"), Ok("order".into()));
        for bad in [
            "input.missing",
            "input.n",
            "input",
            "'hatchet_internal_x'",
            "input.a +",
        ] {
            assert!(key(bad).is_err(), "{bad} gives no key");
        }
        assert!(
            key("input.n").is_err_and(|e| e.ends_with("output must evaluate to a string: got int"))
        );
        assert!(idempotency_key("input.a", &json!([1]), &meta, "r").is_err());
        assert!(idempotency_key("'k'", &serde_json::Value::Null, &meta, "r").is_ok());
    }
}
