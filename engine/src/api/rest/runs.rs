//! REST run reads, run control and task logs, in the shapes the real engine serves and the
//! official SDKs' strict models accept (`hatchet-engine-semantics.md` §0, §1, §3, §4).
//!
//! # Invariants
//!
//! 1. `input` and `output` are always JSON objects: nothing yet is `{}`, never `null`.
//! 2. Every id field is a UUID (step ids are derived from the workflow id and the step name).
//! 3. A run's `output` is the output of its task that finished last (`{}` before), not a map
//!    per task; a run's `startedAt`/`finishedAt` are the zero time when unset, a task's are
//!    omitted.
//! 4. A malformed id in a path is 400 and an unknown one 404, as `{"message": ...}`; a refused
//!    cancel or replay is 500 `{"message":"Internal Server Error"}` except a body that does not
//!    decode (400), as the real engine's proxy answers.

use std::time::SystemTime;

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{Rest, err, meta};
use crate::hub::queries::View;
use crate::store::control::{RunFilter, Targets};
use crate::store::model::{NextAttempt, PastEnd, Run, Status, Task};
use hatchet_runtime::protocol::rfc3339;

/// How an unset time reads on a run (Go's zero time).
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";
/// Default page size of run lists and per-task log reads.
const DEFAULT_LIMIT: usize = 50;
/// Largest `limit` a log read accepts.
const MAX_LOG_LIMIT: usize = 10_000;

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new()
        .route("/api/v1/stable/workflow-runs/{run}", get(run_details))
        .route("/api/v1/stable/workflow-runs/{run}/status", get(run_status))
        .route("/api/v1/stable/tasks/{task}", get(task_details))
        .route("/api/v1/stable/tasks/{task}/logs", get(task_logs))
        .route(
            "/api/v1/stable/tasks/{task}/task-events",
            get(task_event_list),
        )
        .route(
            "/api/v1/stable/workflow-runs/{run}/task-events",
            get(run_task_event_list),
        )
        .route("/api/v1/stable/tasks/{task}/restore", post(restore_task))
        .route(
            "/api/v1/stable/tenants/{tenant}/durable-tasks/branch",
            post(branch_durable_task),
        )
        .route(
            "/api/v1/stable/tenants/{tenant}/workflow-runs",
            get(list_runs),
        )
        .route(
            "/api/v1/stable/tenants/{tenant}/workflow-runs/external-ids",
            get(list_run_ids),
        )
        .route("/api/v1/stable/tenants/{tenant}/tasks/cancel", post(cancel))
        .route("/api/v1/stable/tenants/{tenant}/tasks/replay", post(replay))
}

use super::{Params, bad_id_or_missing, message};

/// A stable UUID for a workflow step (invariant 2).
pub(crate) fn step_id(run: &Run, readable: &str) -> String {
    crate::parse::step_id(&run.workflow_id, readable)
}

/// A stored output as a JSON value; `{}` when there is none (invariant 1).
/// A task's output as the real engine's REST reads show it: its transformer reads each output
/// into a map and drops the error, so an output that is not a JSON object (a string, a list, a
/// number) reads `{}` (v0.104.9). The gRPC details carry the real bytes.
fn output_of(t: &Task) -> Value {
    t.output
        .as_deref()
        .and_then(|o| serde_json::from_str::<Value>(o).ok())
        .map_or_else(|| json!({}), |v| object(&v))
}

fn object(v: &Value) -> Value {
    if v.is_object() { v.clone() } else { json!({}) }
}

fn millis(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => b.duration_since(a).map(|d| d.as_millis() as u64).ok(),
        _ => None,
    }
}

/// `<workflow>-<unix ms>` for a DAG, `<task>-<unix ms>` for a standalone run.
fn display_name(run: &Run, tasks: &[&Task]) -> String {
    let base = match tasks {
        [only] => only.readable_id.as_str(),
        _ => run.workflow_name.as_str(),
    };
    crate::parse::display_name(base, run.created_at)
}

/// The tasks of a run, in definition order.
fn tasks_of<'a>(st: &'a View<'a>, run: &Run) -> Vec<&'a Task> {
    run.tasks.iter().filter_map(|t| st.task(t)).collect()
}

/// Invariant 3: the output of the task that finished last.
fn run_output(st: &View<'_>, tasks: &[&Task]) -> Value {
    tasks
        .iter()
        .filter(|t| st.task_status(t) == Status::Completed)
        .max_by_key(|t| t.finished_at)
        .map(|t| output_of(t))
        .unwrap_or_else(|| json!({}))
}

/// `V1WorkflowRun`.
fn run_json(st: &View<'_>, run: &Run, tasks: &[&Task], tenant: &str) -> Value {
    let error = tasks
        .iter()
        .filter(|t| st.task_status(t) == Status::Failed)
        .find_map(|t| t.error.clone())
        .unwrap_or_default();
    let started = tasks.iter().filter_map(|t| t.started_at).min();
    let status = st.run_status(run);
    // Finished when REST reads it finished (the status pipeline, `store/readable.rs`).
    let finished = run.finished_at.filter(|_| status.is_terminal());
    let mut v = json!({
        "metadata": meta(&run.id, run.created_at),
        "status": status.rest(),
        "tenantId": tenant,
        "workflowId": run.workflow_id,
        "workflowVersionId": run.workflow_version_id,
        "displayName": display_name(run, tasks),
        // A one-task run is its task: its input reads as the task's stored input.
        "input": match tasks {
            [only] => st.task_input(&only.id),
            _ => object(&run.input),
        },
        "additionalMetadata": run.additional_metadata,
        "output": run_output(st, tasks),
        "errorMessage": error,
        "startedAt": started.map(rfc3339).unwrap_or_else(|| ZERO_TIME.into()),
        "finishedAt": finished.map(rfc3339).unwrap_or_else(|| ZERO_TIME.into()),
        "duration": millis(started, finished).unwrap_or(0),
        "createdAt": rfc3339(run.created_at),
    });
    if let Some(p) = &run.parent_task_id {
        v["parentTaskExternalId"] = json!(p);
    }
    v
}

/// `V1TaskSummary` of one task (`type: TASK`).
fn task_json(st: &View<'_>, t: &Task, run: &Run, tenant: &str, with_payloads: bool) -> Value {
    let mut v = json!({
        "metadata": meta(&t.id, t.created_at),
        "taskExternalId": t.id,
        "taskId": task_number(&t.id),
        "taskInsertedAt": rfc3339(t.created_at),
        "workflowRunExternalId": t.run_id,
        "tenantId": tenant,
        "workflowId": run.workflow_id,
        "workflowVersionId": run.workflow_version_id,
        "workflowName": run.workflow_name,
        "stepId": step_id(run, &t.readable_id),
        "actionId": t.action,
        // `<task>-<unix ms>`, as the real engine names a task.
        "displayName": crate::parse::display_name(&t.readable_id, t.created_at),
        "status": st.task_status(t).rest(),
        "type": "TASK",
        // The task's stored input (`input`, `parents`, `triggers`, ...), as the real engine's.
        "input": if with_payloads { st.task_input(&t.id) } else { json!({}) },
        "output": if with_payloads && !st.end_lost(t) {
            output_of(t)
        } else {
            json!({})
        },
        "errorMessage": t.error.clone().unwrap_or_default(),
        "additionalMetadata": run.additional_metadata,
        "retryCount": t.retry_count,
        "attempt": t.retry_count + 1,
        "isDurable": t.is_durable,
        "isEvicted": t.evicted,
        "numSpawnedChildren": t.children.len(),
        "createdAt": rfc3339(t.created_at),
    });
    if let Some(s) = t.started_at {
        v["startedAt"] = json!(rfc3339(s));
    }
    if let Some(f) = t.finished_at {
        v["finishedAt"] = json!(rfc3339(f));
    }
    if let Some(d) = millis(t.started_at, t.finished_at) {
        v["duration"] = json!(d);
    }
    if let Some(p) = &run.parent_task_id {
        v["parentTaskExternalId"] = json!(p);
    }
    v
}

/// A run as a row of a run list (`only_tasks=false`): always `type: DAG`, ids are the run id.
fn run_row(st: &View<'_>, run: &Run, tenant: &str, with_payloads: bool) -> Value {
    let tasks = tasks_of(st, run);
    let Some(first) = tasks.first() else {
        return Value::Null;
    };
    let mut v = task_json(st, first, run, tenant, with_payloads);
    let r = run_json(st, run, &tasks, tenant);
    for k in ["status", "displayName", "errorMessage"] {
        v[k] = r[k].clone();
    }
    v["metadata"] = meta(&run.id, run.created_at);
    v["taskExternalId"] = json!(run.id);
    v["workflowRunExternalId"] = json!(run.id);
    v["type"] = json!("DAG");
    v["output"] = if with_payloads {
        run_output(st, &tasks)
    } else {
        json!({})
    };
    match (
        tasks.iter().filter_map(|t| t.started_at).min(),
        run.finished_at,
    ) {
        (Some(s), f) => {
            v["startedAt"] = json!(rfc3339(s));
            if let Some(f) = f {
                v["finishedAt"] = json!(rfc3339(f));
                v["duration"] = json!(millis(Some(s), Some(f)).unwrap_or(0));
            }
        }
        (None, _) => v = super::without(v, &["startedAt", "finishedAt", "duration"]),
    }
    v["children"] = if tasks.len() > 1 {
        Value::Array(
            tasks
                .iter()
                .map(|t| list_row(task_json(st, t, run, tenant, with_payloads)))
                .collect(),
        )
    } else {
        json!([])
    };
    list_row(v)
}

/// A row as lists show it: the real engine leaves a false `isDurable` / `isEvicted` out there
/// (omitempty), while reads of one run or task carry them.
fn list_row(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["isDurable", "isEvicted"] {
            if o.get(k) == Some(&Value::Bool(false)) {
                o.remove(k);
            }
        }
    }
    v
}

/// A task as a read of one run or task shows it: the real engine leaves `workflowName` out.
fn read_row(v: Value) -> Value {
    super::without(v, &["workflowName"])
}

/// A small positive number standing for a task (the real engine's database id).
fn task_number(id: &str) -> u32 {
    uuid::Uuid::parse_str(id)
        .map(|u| u.as_u128() as u32 & 0x7fff_ffff)
        .unwrap_or(0)
}

async fn run_details(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    s.engine.clock.polled(&id);
    let st = s.engine.view();
    let Some(run) = st.runs().get(&id) else {
        return bad_id_or_missing(&id, "workflow run");
    };
    let tenant = &s.engine.tenant_id;
    let tasks = tasks_of(&st, run);
    let shape: Vec<Value> = tasks
        .iter()
        .map(|t| {
            let children: Vec<String> = tasks
                .iter()
                .filter(|c| c.parents.contains(&t.readable_id))
                .map(|c| step_id(run, &c.readable_id))
                .collect();
            json!({"taskExternalId": t.id, "stepId": step_id(run, &t.readable_id),
                   "childrenStepIds": children, "taskName": t.readable_id})
        })
        .collect();
    let events = run_task_events(&tasks);
    // Only the tasks that exist: the real engine creates a DAG's task when its parents have
    // completed (or its condition holds), and reads none before.
    let task_rows: Vec<Value> = tasks
        .iter()
        .filter(|t| t.status() != crate::store::model::Status::Pending)
        .map(|t| read_row(task_json(&st, t, run, tenant, true)))
        .collect();
    Json(json!({
        "run": run_json(&st, run, &tasks, tenant),
        "taskEvents": events,
        "shape": shape,
        "tasks": task_rows,
        "workflowConfig": config_of(&st, run),
    }))
    .into_response()
}

/// The `V1TaskEvent`s a task's record allows us to tell, every attempt's: the real engine
/// keeps one row per (attempt, event type). An attempt is `QUEUED`, then `ASSIGNED`,
/// `SENT_TO_WORKER` and `STARTED` when it goes to a worker, then ends `FINISHED`, `FAILED`,
/// `TIMED_OUT` or `CANCELLED`; what started the next one follows it (`RETRYING`,
/// `RETRIED_BY_USER`, `REASSIGNED`, counted to that attempt). `errorMessage` is always there
/// (empty unless it failed), `output` too (the output's JSON on the current attempt's FINISHED
/// event, else empty), and `workerId` on the events of an attempt that had a worker, as the
/// real engine's transformer fills them.
fn task_events(t: &Task) -> Vec<Value> {
    let mut out = Vec::new();
    let mut push =
        |kind: &str, at: SystemTime, attempt: i32, texts: (&str, &str, &str), worker: bool| {
            let (msg, error, output) = texts;
            let mut e = json!({
                "id": event_number(t, kind, attempt),
                "taskId": t.id,
                "timestamp": rfc3339(at),
                "eventType": kind,
                "message": msg,
                "errorMessage": error,
                "output": output,
                "retryCount": attempt,
                "attempt": attempt + 1,
                "taskDisplayName": t.readable_id,
            });
            if worker && let Some(w) = &t.worker_id {
                e["workerId"] = json!(w);
            }
            out.push(e);
        };
    let mut queued_at = t.released_at.unwrap_or(t.created_at);
    for a in &t.past_attempts {
        let rc = a.retry_count;
        push("QUEUED", queued_at, rc, ("", "", ""), false);
        if let Some(s) = a.started_at {
            for kind in ["ASSIGNED", "SENT_TO_WORKER", "STARTED"] {
                push(kind, s, rc, ("", "", ""), true);
            }
        }
        let message = a.end_message.as_deref().unwrap_or("");
        let error = a.error.as_deref().unwrap_or("");
        match a.end {
            PastEnd::Finished => push("FINISHED", a.ended_at, rc, ("", "", ""), true),
            PastEnd::Failed => {
                let (kind, error) = failure_event(message, error);
                push(kind, a.ended_at, rc, (message, error, ""), true);
            }
            PastEnd::Cancelled => push("CANCELLED", a.ended_at, rc, (message, "", ""), true),
            PastEnd::Requeued => {}
        }
        let (kind, msg) = match a.next {
            NextAttempt::Retry(n) => ("RETRYING", format!("This is retry number {n}.")),
            NextAttempt::Replay => ("RETRIED_BY_USER", String::new()),
            NextAttempt::Reassign => ("REASSIGNED", String::new()),
        };
        push(kind, a.ended_at, rc + 1, (&msg, "", ""), false);
        queued_at = a.ended_at;
    }
    let rc = t.retry_count;
    push("QUEUED", queued_at, rc, ("", "", ""), false);
    // A retry keeps the last attempt's start until it is sent again.
    let before = t.past_attempts.last().and_then(|a| a.started_at);
    if let Some(s) = t.started_at.filter(|s| Some(*s) != before) {
        for kind in ["ASSIGNED", "SENT_TO_WORKER", "STARTED"] {
            push(kind, s, rc, ("", "", ""), true);
        }
    }
    if let Some(f) = t.finished_at {
        let message = t.end_message.as_deref().unwrap_or("");
        let error = t.error.as_deref().unwrap_or("");
        match t.status() {
            Status::Completed => {
                push(
                    "FINISHED",
                    f,
                    rc,
                    ("", "", t.output.as_deref().unwrap_or("")),
                    true,
                );
            }
            Status::Failed => {
                let (kind, error) = failure_event(message, error);
                push(kind, f, rc, (message, error, ""), true);
            }
            Status::Cancelled => push("CANCELLED", f, rc, (message, "", ""), true),
            _ => {}
        }
    }
    out
}

/// A failure's event type and error text: `TIMED_OUT` for the engine's timeout, whose event
/// carries its words as the message and no error (the real engine fills `errorMessage` from a
/// FAILED event's payload only), else `FAILED` with the error.
fn failure_event<'a>(engine_message: &str, error: &'a str) -> (&'static str, &'a str) {
    if engine_message.starts_with("Task exceeded timeout") {
        ("TIMED_OUT", "")
    } else {
        ("FAILED", error)
    }
}

fn event_number(t: &Task, kind: &str, attempt: i32) -> u32 {
    let salt = kind.bytes().fold(attempt as u32, |h, b| {
        h.wrapping_mul(31).wrapping_add(u32::from(b))
    });
    task_number(&t.id).wrapping_add(salt) & 0x7fff_ffff
}

/// A run's task events, as its details and `/workflow-runs/{run}/task-events` list them: the
/// newest first. The real engine reads them through the run's DAG (its lookup row joined to the
/// DAG's tasks): a run of one task has no DAG, so it lists none; they are read per task
/// (`/tasks/{task}/task-events`) instead.
fn run_task_events(tasks: &[&Task]) -> Vec<Value> {
    if tasks.len() < 2 {
        return Vec::new();
    }
    newest_first(tasks.iter().flat_map(|t| task_events(t)).collect())
}

/// Events by their timestamp, the newest first (ties: the one told last first).
fn newest_first(mut events: Vec<Value>) -> Vec<Value> {
    let at = |e: &Value| {
        e["timestamp"]
            .as_str()
            .and_then(hatchet_runtime::protocol::calendar::parse_rfc3339)
    };
    events.reverse();
    events.sort_by_key(|e| std::cmp::Reverse(at(e)));
    events
}

async fn run_task_event_list(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    let st = s.engine.view();
    let Some(run) = st.runs().get(&id) else {
        return bad_id_or_missing(&id, "workflow run");
    };
    let tasks = tasks_of(&st, run);
    Json(json!({"rows": run_task_events(&tasks), "pagination": {}})).into_response()
}

/// `/tasks/{task}/task-events`: one task's events, the newest first, without outputs, paged by
/// `offset` and `limit`. The real engine passes a missing `limit` on as `LIMIT 0`, so a read
/// without one lists nothing; so does this one.
async fn task_event_list(
    AxState(s): AxState<Rest>,
    Path(id): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let p = Params(q);
    let (offset, limit) = match (p.number("offset", 0), p.number("limit", 0)) {
        (Ok(o), Ok(l)) => (o, l),
        (Err(why), _) | (_, Err(why)) => return super::err(StatusCode::BAD_REQUEST, &why),
    };
    let st = s.engine.view();
    let Some(t) = st.task(&id) else {
        return bad_id_or_missing(&id, "task");
    };
    let rows: Vec<Value> = newest_first(task_events(t))
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|e| super::without(e, &["output"]))
        .collect();
    Json(json!({"rows": rows, "pagination": {}})).into_response()
}

async fn run_status(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    s.engine.clock.polled(&id);
    let st = s.engine.view();
    match st.runs().get(&id) {
        Some(r) => Json(Value::String(st.run_status(r).rest().into())).into_response(),
        None => bad_id_or_missing(&id, "workflow run"),
    }
}

/// The definition of a run's workflow version, as the real engine shows it (`workflowConfig`).
fn config_of(st: &View<'_>, run: &Run) -> Value {
    st.workflow_config(&run.workflow_name, &run.workflow_version_id)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn task_details(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    let st = s.engine.view();
    let Some((t, run)) = st
        .task(&id)
        .and_then(|t| st.runs().get(&t.run_id).map(|r| (t, r)))
    else {
        return bad_id_or_missing(&id, "task");
    };
    let mut v = read_row(task_json(&st, t, run, &s.engine.tenant_id, true));
    if st.queued_stamped_late() && st.task_status(t) == Status::Running {
        v["status"] = json!("QUEUED");
    }
    // A standalone task's read shows the trigger's input; a DAG task's the stored object.
    if run.tasks.len() == 1 {
        v["input"] = object(&run.input);
    }
    v["workflowConfig"] = config_of(&st, run);
    Json(v).into_response()
}

/// A query string's values: `one("k")` the first, `all("k")` every `k` and `k[]`.
impl Params {
    /// The run filter of a run list: since/until, statuses, workflows, metadata (`k:v`
    /// strings; one without a colon is ignored, as the real engine does).
    fn run_filter(&self) -> Result<RunFilter, String> {
        Ok(RunFilter {
            since: self.time("since")?,
            until: self.time("until")?,
            statuses: self.all("statuses"),
            workflow_ids: self.all("workflow_ids"),
            metadata: self
                .all("additional_metadata")
                .iter()
                .filter_map(|kv| kv.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }
}

/// Runs (or tasks) the list's other parameters select.
/// Runs a list selects. The parent filter is read only by run lists (`by_parent`): the real
/// engine ignores it in a task list.
fn selected<'a>(st: &'a View<'a>, p: &Params, filter: &RunFilter, by_parent: bool) -> Vec<&'a Run> {
    let parent = p.one("parent_task_external_id").filter(|_| by_parent);
    let event = p.one("triggering_event_external_id");
    let any_metadata =
        p.one("additional_metadata_operator") == Some("OR") && filter.metadata.len() > 1;
    let by_metadata = |r: &Run| {
        let hit = |(k, v): &(String, String)| crate::store::control::has_metadata(r, k, v);
        if any_metadata {
            filter.metadata.iter().any(hit)
        } else {
            filter.metadata.iter().all(hit)
        }
    };
    let plain = RunFilter {
        metadata: Vec::new(),
        ..filter.clone()
    };
    st.runs()
        .newest_first()
        .filter(|r| plain.matches(r, st.run_status(r)) && by_metadata(r))
        .filter(|r| parent.is_none_or(|p| r.parent_task_id.as_deref() == Some(p)))
        .filter(|r| {
            event.is_none_or(|e| r.triggering_event.as_ref().is_some_and(|(id, _)| id == e))
        })
        .collect()
}

async fn list_runs(AxState(s): AxState<Rest>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let p = Params(q);
    let Some(only_tasks) = p.one("only_tasks").map(|v| v == "true") else {
        return super::err(StatusCode::BAD_REQUEST, "only_tasks is required");
    };
    if p.one("since").is_none() {
        return super::err(StatusCode::BAD_REQUEST, "since is required");
    }
    let parsed = p
        .run_filter()
        .and_then(|f| Ok((f, p.number("offset", 0)?, p.number("limit", DEFAULT_LIMIT)?)));
    let (filter, offset, limit) = match parsed {
        Ok((f, o, l)) => (f, o, l.max(1)),
        Err(why) => return super::err(StatusCode::BAD_REQUEST, &why),
    };
    let payloads = p.one("include_payloads") == Some("true");
    let worker = p.one("worker_id");
    let st = s.engine.view();
    let tenant = &s.engine.tenant_id;
    // With only_tasks the statuses select tasks, not runs.
    let run_filter = if only_tasks {
        RunFilter {
            statuses: Vec::new(),
            ..filter.clone()
        }
    } else {
        filter.clone()
    };
    let runs = selected(&st, &p, &run_filter, !only_tasks);
    let rows: Vec<Value> = if only_tasks {
        runs.iter()
            .flat_map(|r| tasks_of(&st, r).into_iter().map(move |t| (t, *r)))
            .filter(|(t, _)| worker.is_none_or(|w| t.worker_id.as_deref() == Some(w)))
            .filter(|(t, _)| {
                filter.statuses.is_empty()
                    || filter
                        .statuses
                        .iter()
                        .any(|x| x == st.task_status(t).rest())
            })
            .map(|(t, r)| list_row(task_json(&st, t, r, tenant, payloads)))
            .collect()
    } else {
        runs.iter()
            .map(|r| run_row(&st, r, tenant, payloads))
            .filter(|v| !v.is_null())
            .collect()
    };
    let total = rows.len();
    let page: Vec<Value> = rows.into_iter().skip(offset).take(limit).collect();
    let current = offset / limit + 1;
    Json(json!({
        "rows": page,
        "pagination": {"current_page": current, "next_page": current + 1, "num_pages": total.div_ceil(limit)},
    }))
    .into_response()
}

/// `GET .../workflow-runs/external-ids`: the run ids a filter selects (SDKs page bulk cancel
/// and replay with it).
async fn list_run_ids(
    AxState(s): AxState<Rest>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let p = Params(q);
    if p.one("since").is_none() {
        return super::err(StatusCode::BAD_REQUEST, "since is required");
    }
    let filter = match p.run_filter() {
        Ok(f) => f,
        Err(why) => return super::err(StatusCode::BAD_REQUEST, &why),
    };
    let st = s.engine.view();
    let ids: Vec<&str> = selected(&st, &p, &filter, true)
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    Json(json!(ids)).into_response()
}

/// The body of a cancel or replay: `{externalIds?, filter?}`.
/// A body that does not bind: the reason (a 400).
fn targets_of(body: &Value) -> Result<Targets, String> {
    let ids = match body.get("externalIds") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .filter(|s| uuid::Uuid::parse_str(s).is_ok())
                    .map(str::to_string)
                    .ok_or_else(|| format!("externalIds: {v} is not a UUID"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("externalIds must be an array of UUIDs".into()),
    };
    let filter = match body.get("filter") {
        None | Some(Value::Null) => None,
        Some(f) => Some(RunFilter::from_json(f)?),
    };
    Ok(Targets { ids, filter })
}

async fn cancel(AxState(s): AxState<Rest>, body: Option<Json<Value>>) -> Response {
    control(body, |t| s.engine.cancel(t))
}

async fn replay(AxState(s): AxState<Rest>, body: Option<Json<Value>>) -> Response {
    control(body, |t| s.engine.replay(t))
}

/// Invariant 4 for cancel and replay: `{"ids": [...]}` or the proxy's errors.
fn control(
    body: Option<Json<Value>>,
    run: impl FnOnce(Targets) -> Result<Vec<String>, tonic::Status>,
) -> Response {
    let Some(Json(body)) = body else {
        return message(StatusCode::BAD_REQUEST, "the body must be a JSON object");
    };
    let targets = match targets_of(&body) {
        Ok(t) => t,
        Err(why) => return message(StatusCode::BAD_REQUEST, &why),
    };
    match run(targets) {
        Ok(ids) => Json(json!({ "ids": ids })).into_response(),
        Err(status) => {
            tracing::info!(error = %status.message(), "cancel or replay refused");
            message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
        }
    }
}

/// `GET /api/v1/stable/tasks/{task}/logs` → `V1LogLineList`.
async fn task_logs(
    AxState(s): AxState<Rest>,
    Path(id): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let p = Params(q);
    let limit = match p.number("limit", DEFAULT_LIMIT) {
        Ok(l) if l <= MAX_LOG_LIMIT => l,
        Ok(l) => {
            return message(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("limit {l} is above {MAX_LOG_LIMIT}"),
            );
        }
        Err(why) => return super::err(StatusCode::BAD_REQUEST, &why),
    };
    let (since, until) = match (p.time("since"), p.time("until")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => return super::err(StatusCode::BAD_REQUEST, &why),
    };
    let search = p.one("search").map(str::to_lowercase);
    let levels: Vec<String> = p.all("levels").iter().map(|l| l.to_uppercase()).collect();
    let attempt: Option<i32> = p.one("attempt").and_then(|a| a.parse().ok());
    let descending = p.one("order_by_direction") == Some("DESC");
    let st = s.engine.view();
    let Some(t) = st.task(&id) else {
        return bad_id_or_missing(&id, "task");
    };
    let mut lines: Vec<&crate::store::model::LogLine> = t.logs.iter().collect();
    // By the time each was written (the order they arrived in breaks ties).
    lines.sort_by_key(|l| l.at);
    let mut rows: Vec<Value> = lines
        .into_iter()
        .filter(|l| since.is_none_or(|s| l.at > s) && until.is_none_or(|u| l.at < u))
        .filter(|l| {
            search
                .as_ref()
                .is_none_or(|s| l.message.to_lowercase().contains(s))
        })
        .filter(|l| levels.is_empty() || levels.contains(&l.level))
        .filter(|l| attempt.is_none_or(|a| l.retry_count == a - 1))
        .map(|l| {
            json!({
                "createdAt": rfc3339(l.at),
                "message": l.message,
                "metadata": l.metadata,
                "level": l.level,
                "retryCount": l.retry_count,
                "attempt": l.retry_count + 1,
                "taskExternalId": t.id,
                "taskDisplayName": t.readable_id,
            })
        })
        .collect();
    if descending {
        rows.reverse();
    }
    rows.truncate(limit);
    // The per-task route's pagination is always zeros.
    let zeros = json!({"current_page": 0, "next_page": 0, "num_pages": 0});
    Json(json!({"rows": rows, "pagination": zeros})).into_response()
}

/// `POST /api/v1/stable/tenants/{tenant}/durable-tasks/branch` with `{taskExternalId, nodeId,
/// branchId}`: the real engine's REST face of `BranchDurableTask` (the Python SDK's
/// `runs.reset_durable_task`); answers the same fields, `branchId` the new branch's.
async fn branch_durable_task(AxState(s): AxState<Rest>, body: Option<Json<Value>>) -> Response {
    let b = body.map(|Json(b)| b).unwrap_or_default();
    let (Some(task), Some(node), Some(branch)) = (
        b["taskExternalId"].as_str(),
        b["nodeId"].as_i64(),
        b["branchId"].as_i64(),
    ) else {
        return err(
            StatusCode::BAD_REQUEST,
            "taskExternalId, nodeId and branchId are required",
        );
    };
    let req = hatchet_runtime::protocol::v1::BranchDurableTaskRequest {
        task_external_id: task.to_string(),
        node_id: node,
        branch_id: branch,
    };
    match s.engine.branch_durable_task(&req) {
        Ok(r) => Json(json!({
            "taskExternalId": r.task_external_id,
            "nodeId": r.node_id,
            "branchId": r.branch_id,
        }))
        .into_response(),
        Err(e) if e.code() == tonic::Code::InvalidArgument => {
            err(StatusCode::BAD_REQUEST, e.message())
        }
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.message()),
    }
}

/// `POST /api/v1/stable/tasks/{task}/restore`: queues an evicted durable task again. The real
/// engine answers `{"requeued": true}` whatever the task's state (it only enqueues a message),
/// and so does this one.
async fn restore_task(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    if s.engine.restore_evicted(&id).is_some() {
        Json(json!({ "requeued": true })).into_response()
    } else {
        bad_id_or_missing(&id, "task")
    }
}
