//! A workflow's definition as the real engine keeps it and shows it (`workflowConfig` on run and
//! task details): its registration options in the real engine's own shape, field names and
//! all (`Name`, `Tasks[].ReadableId`, `Timeout`, `isDurable`, `slotRequests`, ...), built once
//! from the registration request.
//!
//! # Invariants
//!
//! 1. An option the request leaves unset reads as the real engine shows it: `null` for an
//!    unset pointer (`Timeout`, `Sticky`, `DefaultPriority`, a list the request does not
//!    carry), left out for an empty optional list or map (`concurrency`, `slotRequests`,
//!    `defaultFilters`, a `slotRequests` of one `default` slot), `[]` where the real engine
//!    always fills a list (`Parents`, `RateLimits`, `TriggerConditions`).

use base64::Engine as _;
use serde_json::{Map, Value, json};

use hatchet_runtime::protocol::v1;

/// What the real engine's validator finds wrong with a registration, `(field, condition)` in
/// its field order (`Name`, `CronTriggers[i]`, `DefaultPriority`, `Idempotency.*`); empty when
/// nothing is. Answered as `InvalidArgument` in its words (`answers::validation_failed`).
pub(crate) fn validation_problems(req: &v1::CreateWorkflowVersionRequest) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if req.name.is_empty() {
        out.push(("Name".into(), "on condition 'required'".into()));
    }
    for (i, c) in req.cron_triggers.iter().enumerate() {
        if crate::time::cron::Cron::parse(c).is_err() {
            out.push((
                format!("CronTriggers[{i}]"),
                "Invalid cron expression".into(),
            ));
        }
    }
    match req.default_priority {
        Some(p) if p < 1 => out.push((
            "DefaultPriority".into(),
            "on condition 'min' [ 1 ]: got invalid type".into(),
        )),
        Some(p) if p > 3 => out.push((
            "DefaultPriority".into(),
            "on condition 'max' [ 3 ]: got invalid type".into(),
        )),
        _ => {}
    }
    if let Some(i) = &req.idempotency {
        out.extend(crate::store::workflows::idempotency_config_problems(i));
    }
    out
}

/// A registration whose tasks do not make a DAG, which the real engine fails past its
/// validator with a bare `Internal` ("An internal error occurred."): no task, a task without
/// a readable id or action, two tasks of one id, or a cycle of parents. The reason, for the log.
pub(crate) fn shape_problem(req: &v1::CreateWorkflowVersionRequest) -> Option<String> {
    if req.tasks.is_empty() {
        return Some("a workflow needs at least one task".into());
    }
    let mut seen = std::collections::HashSet::new();
    for t in req.tasks.iter().chain(req.on_failure_task.as_ref()) {
        if t.readable_id.is_empty() || t.action.is_empty() {
            return Some("every task needs readable_id and action".into());
        }
    }
    for t in &req.tasks {
        if !seen.insert(t.readable_id.as_str()) {
            return Some(format!("two tasks are named {}", t.readable_id));
        }
    }
    // A cycle: a task reached again while its own parents are being walked.
    let parents: std::collections::HashMap<&str, &[String]> = req
        .tasks
        .iter()
        .map(|t| (t.readable_id.as_str(), t.parents.as_slice()))
        .collect();
    fn walk<'a>(
        t: &'a str,
        parents: &std::collections::HashMap<&'a str, &'a [String]>,
        on_path: &mut Vec<&'a str>,
        done: &mut std::collections::HashSet<&'a str>,
    ) -> bool {
        if on_path.contains(&t) {
            return true;
        }
        if !done.insert(t) {
            return false;
        }
        on_path.push(t);
        let cyclic = parents
            .get(t)
            .is_some_and(|ps| ps.iter().any(|p| walk(p, parents, on_path, done)));
        on_path.pop();
        cyclic
    }
    let mut done = std::collections::HashSet::new();
    req.tasks
        .iter()
        .any(|t| walk(&t.readable_id, &parents, &mut Vec::new(), &mut done))
        .then(|| "the tasks' parents make a cycle".to_string())
}

/// The `workflowConfig` of a registration.
pub(crate) fn workflow_config(req: &v1::CreateWorkflowVersionRequest) -> Value {
    let list = |v: &[String]| {
        if v.is_empty() { Value::Null } else { json!(v) }
    };
    let mut c = Map::new();
    c.insert("Name".into(), json!(req.name));
    c.insert("description".into(), json!(req.description));
    c.insert("EventTriggers".into(), list(&req.event_triggers));
    c.insert("CronTriggers".into(), list(&req.cron_triggers));
    c.insert(
        "CronInput".into(),
        req.cron_input.as_ref().map_or(Value::Null, |i| {
            json!(base64::engine::general_purpose::STANDARD.encode(i.as_bytes()))
        }),
    );
    c.insert(
        "Tasks".into(),
        Value::Array(req.tasks.iter().map(task_config).collect()),
    );
    if let Some(f) = &req.on_failure_task {
        c.insert("onFailureJob".into(), task_config(f));
    }
    let limits: Vec<Value> = req
        .concurrency
        .iter()
        .chain(&req.concurrency_arr)
        .map(concurrency)
        .collect();
    if !limits.is_empty() {
        c.insert("concurrency".into(), Value::Array(limits));
    }
    c.insert(
        "Sticky".into(),
        req.sticky
            .and_then(|s| v1::StickyStrategy::try_from(s).ok())
            .map_or(Value::Null, |s| json!(s.as_str_name())),
    );
    c.insert("DefaultPriority".into(), json!(req.default_priority));
    let filters: Vec<Value> = req
        .default_filters
        .iter()
        .map(|f| {
            let mut m = Map::new();
            m.insert("expression".into(), json!(f.expression));
            m.insert("scope".into(), json!(f.scope));
            if let Some(p) = f
                .payload
                .as_deref()
                .and_then(|p| serde_json::from_slice::<Value>(p).ok())
                .filter(|p| p.as_object().is_some_and(|o| !o.is_empty()))
            {
                m.insert("payload".into(), p);
            }
            Value::Object(m)
        })
        .collect();
    if !filters.is_empty() {
        c.insert("defaultFilters".into(), Value::Array(filters));
    }
    if let Some(s) = req.input_json_schema.as_ref().filter(|s| !s.is_empty()) {
        c.insert(
            "inputJsonSchema".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(s)),
        );
    }
    if let Some(i) = &req.idempotency {
        let method = i
            .method
            .and_then(|m| v1::IdempotencyMethod::try_from(m).ok())
            .map_or("TTL", |m| m.as_str_name());
        c.insert(
            "idempotency".into(),
            json!({"expression": i.expression, "ttlMs": i.ttl_ms, "method": method}),
        );
    }
    Value::Object(c)
}

fn concurrency(c: &v1::Concurrency) -> Value {
    let strategy = c
        .limit_strategy
        .and_then(|s| v1::ConcurrencyLimitStrategy::try_from(s).ok())
        .map_or(Value::Null, |s| json!(s.as_str_name()));
    json!({"MaxRuns": c.max_runs, "LimitStrategy": strategy, "Expression": c.expression})
}

fn task_config(t: &v1::CreateTaskOpts) -> Value {
    let mut m = Map::new();
    m.insert("ReadableId".into(), json!(t.readable_id));
    m.insert("Action".into(), json!(t.action.to_lowercase()));
    m.insert(
        "Timeout".into(),
        if t.timeout.is_empty() {
            Value::Null
        } else {
            json!(t.timeout)
        },
    );
    m.insert("ScheduleTimeout".into(), json!(t.schedule_timeout));
    m.insert("Parents".into(), json!(t.parents));
    m.insert("Retries".into(), json!(t.retries));
    let rate_limits: Vec<Value> = t
        .rate_limits
        .iter()
        .map(|r| {
            let duration = r
                .duration
                .and_then(|d| v1::RateLimitDuration::try_from(d).ok())
                .map_or(Value::Null, |d| json!(d.as_str_name()));
            json!({
                "Key": r.key, "KeyExpr": r.key_expr, "Units": r.units, "UnitsExpr": r.units_expr,
                "LimitExpr": r.limit_values_expr, "Duration": duration,
            })
        })
        .collect();
    m.insert("RateLimits".into(), Value::Array(rate_limits));
    m.insert(
        "DesiredWorkerLabels".into(),
        if t.worker_labels.is_empty() {
            Value::Null
        } else {
            Value::Object(
                t.worker_labels
                    .iter()
                    .map(|(k, l)| {
                        let comparator = l
                            .comparator
                            .and_then(|c| v1::WorkerLabelComparator::try_from(c).ok())
                            .map_or(Value::Null, |c| json!(c.as_str_name()));
                        let label = json!({
                            "Key": k, "IntValue": l.int_value, "StrValue": l.str_value,
                            "Required": l.required, "Weight": l.weight, "Comparator": comparator,
                        });
                        (k.clone(), label)
                    })
                    .collect(),
            )
        },
    );
    // The real engine keeps a factor as a double, and a cap only with a factor (a day when
    // the request names none).
    let (factor, cap) = match t.backoff_factor {
        Some(f) => (
            json!(f64::from(f)),
            json!(t.backoff_max_seconds.unwrap_or(86_400)),
        ),
        None => (Value::Null, Value::Null),
    };
    m.insert("RetryBackoffFactor".into(), factor);
    m.insert("RetryBackoffMaxSeconds".into(), cap);
    if t.is_durable {
        m.insert("isDurable".into(), json!(true));
    }
    // Left out when empty or the default (one `default` slot): seen on the real engine, which
    // shows `{"durable": 1}` for a durable task and nothing for a plain one.
    let default_slot = t.slot_requests.len() == 1 && t.slot_requests.get("default") == Some(&1);
    if !t.slot_requests.is_empty() && !default_slot {
        m.insert("slotRequests".into(), json!(t.slot_requests));
    }
    m.insert(
        "TriggerConditions".into(),
        conditions(t.conditions.as_ref()),
    );
    let limits: Vec<Value> = t.concurrency.iter().map(concurrency).collect();
    if !limits.is_empty() {
        m.insert("concurrency".into(), Value::Array(limits));
    }
    if let Some(b) = &t.batch {
        let mut batch = Map::new();
        batch.insert("batchMaxSize".into(), json!(b.batch_max_size));
        batch.insert(
            "batchMaxInterval".into(),
            json!(b.batch_max_interval_ms.unwrap_or(1_000)),
        );
        batch.insert(
            "batchGroupKey".into(),
            json!(
                b.batch_group_key
                    .clone()
                    .filter(|k| !k.is_empty())
                    .unwrap_or_else(|| "'default'".into())
            ),
        );
        batch.insert(
            "batchGroupMaxRuns".into(),
            json!(b.batch_group_max_runs.unwrap_or(100)),
        );
        if b.broadcast_output == Some(true) {
            batch.insert("broadcastOutput".into(), json!(true));
        }
        m.insert("batchConfig".into(), Value::Object(batch));
    }
    Value::Object(m)
}

/// A task's conditions as the real engine lists them: user events, then sleeps, then parent
/// overrides, each with its kind, data key, action and expression (the OR group's id is not
/// shown; its index is).
fn conditions(c: Option<&v1::TaskConditions>) -> Value {
    let Some(c) = c else {
        return json!([]);
    };
    let action = |b: &v1::BaseMatchCondition| {
        v1::Action::try_from(b.action).map_or("QUEUE", |a| a.as_str_name())
    };
    let row = |kind: &str, b: &v1::BaseMatchCondition, extra: (&str, Value)| {
        let mut m = Map::new();
        m.insert("SleepDuration".into(), Value::Null);
        m.insert("EventKey".into(), Value::Null);
        m.insert("ParentReadableId".into(), Value::Null);
        m.insert("MatchConditionKind".into(), json!(kind));
        m.insert("ReadableDataKey".into(), json!(b.readable_data_key));
        m.insert("Action".into(), json!(action(b)));
        m.insert("Expression".into(), json!(b.expression));
        m.insert("OrGroupIdIndex".into(), json!(0));
        m.insert(extra.0.into(), extra.1);
        Value::Object(m)
    };
    let mut out = Vec::new();
    for e in &c.user_event_conditions {
        if let Some(b) = &e.base {
            out.push(row("USER_EVENT", b, ("EventKey", json!(e.user_event_key))));
        }
    }
    for s in &c.sleep_conditions {
        if let Some(b) = &s.base {
            out.push(row("SLEEP", b, ("SleepDuration", json!(s.sleep_for))));
        }
    }
    for p in &c.parent_override_conditions {
        if let Some(b) = &p.base {
            let mut r = row(
                "PARENT_OVERRIDE",
                b,
                ("ParentReadableId", json!(p.parent_readable_id)),
            );
            r["ReadableDataKey"] = json!(p.parent_readable_id);
            out.push(r);
        }
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_task_reads_as_the_real_engine_shows_it() {
        let req = v1::CreateWorkflowVersionRequest {
            name: "wf".into(),
            tasks: vec![v1::CreateTaskOpts {
                readable_id: "d".into(),
                action: "wf:d".into(),
                is_durable: true,
                slot_requests: [("durable".to_string(), 1)].into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        // Seen on the real engine (v0.104.9) for this registration.
        let want = json!({
            "CronInput": null, "CronTriggers": null, "DefaultPriority": null, "EventTriggers": null,
            "Name": "wf", "Sticky": null, "description": "",
            "Tasks": [{
                "Action": "wf:d", "DesiredWorkerLabels": null, "Parents": [], "RateLimits": [],
                "ReadableId": "d", "Retries": 0, "RetryBackoffFactor": null,
                "RetryBackoffMaxSeconds": null, "ScheduleTimeout": null, "Timeout": null,
                "TriggerConditions": [], "isDurable": true, "slotRequests": {"durable": 1},
            }],
        });
        assert_eq!(workflow_config(&req), want);
        // A plain task's one default slot is not shown (seen on the real engine too).
        let mut plain = req.clone();
        plain.tasks[0].is_durable = false;
        plain.tasks[0].slot_requests = [("default".to_string(), 1)].into();
        let task = &workflow_config(&plain)["Tasks"][0];
        assert!(task.get("slotRequests").is_none() && task.get("isDurable").is_none());
    }
}
