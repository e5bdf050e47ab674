//! Metrics over REST: runs counted by status (`task-metrics`) and tasks waiting per queue
//! (`step-run-queue-metrics`), shaped as the real engine answers them.

use std::collections::{BTreeMap, HashSet};

use axum::Json;
use axum::extract::{Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::{Params, Rest, err};
use crate::store::model::Status;

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new()
        .route(
            "/api/v1/stable/tenants/{tenant}/task-metrics",
            get(task_metrics),
        )
        .route(
            "/api/v1/tenants/{tenant}/step-run-queue-metrics",
            get(queue_metrics),
        )
}

/// `GET .../task-metrics`: the five statuses in the engine's order, each run counted once
/// (a DAG as one), evicted tasks inside RUNNING.
async fn task_metrics(
    AxState(s): AxState<Rest>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let p = Params(q);
    let (since, until) = match (p.time("since"), p.time("until")) {
        (Ok(Some(a)), Ok(b)) => (a, b),
        (Ok(None), _) => return err(StatusCode::BAD_REQUEST, "since is required"),
        (Err(why), _) | (_, Err(why)) => return err(StatusCode::BAD_REQUEST, &why),
    };
    let workflows = p.all("workflow_ids");
    let parent = p.one("parent_task_external_id");
    let event = p.one("triggering_event_external_id");
    let metadata: Vec<(String, String)> = p
        .all("additional_metadata")
        .iter()
        .filter_map(|kv| kv.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let st = s.engine.view();
    let mut counts: BTreeMap<&str, u64> = ["CANCELLED", "COMPLETED", "FAILED", "QUEUED", "RUNNING"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    let runs = st
        .runs()
        .values()
        .filter(|r| r.created_at >= since && until.is_none_or(|u| r.created_at <= u))
        .filter(|r| workflows.is_empty() || workflows.contains(&r.workflow_id))
        .filter(|r| parent.is_none_or(|p| r.parent_task_id.as_deref() == Some(p)))
        .filter(|r| {
            event.is_none_or(|e| r.triggering_event.as_ref().is_some_and(|(id, _)| id == e))
        })
        .filter(|r| {
            metadata.is_empty()
                || metadata
                    .iter()
                    .any(|(k, v)| crate::store::control::has_metadata(r, k, v))
        });
    let mut running = 0;
    for r in runs {
        let status = match st.run_status(r) {
            Status::Pending => Status::Queued,
            s => s,
        };
        if status == Status::Running {
            running += 1;
        }
        *counts.entry(status.rest()).or_default() += 1;
    }
    let rows: Vec<Value> = counts
        .into_iter()
        .map(|(status, count)| {
            let mut row = json!({"status": status, "count": count});
            if status == "RUNNING" {
                row["runningDetailCount"] = json!({"evicted": 0, "onWorker": running});
            }
            row
        })
        .collect();
    Json(Value::Array(rows)).into_response()
}

/// `GET .../step-run-queue-metrics`: tasks waiting for a worker, by action (tasks a paused
/// workflow holds are not in a queue, as on the real engine).
async fn queue_metrics(AxState(s): AxState<Rest>) -> Response {
    let st = s.engine.view();
    let held: HashSet<&str> = st.pauses().held_ids().collect();
    let mut queues: BTreeMap<&str, u64> = BTreeMap::new();
    for t in st.tasks() {
        if t.status() == Status::Queued && !held.contains(t.id.as_str()) {
            *queues.entry(t.action.as_str()).or_default() += 1;
        }
    }
    Json(json!({ "queues": queues })).into_response()
}
