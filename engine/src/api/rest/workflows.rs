//! Workflows over REST: list, get, delete (a soft delete, as the real engine's) and pause or
//! unpause (`PATCH` with `pause`, see `pause.rs`).

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::{Rest, bad_id_or_missing, err, meta, page, paged};
use crate::hub::queries::View;
use crate::store::model::Workflow;
use crate::store::pause::PauseRule;

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new()
        .route("/api/v1/tenants/{tenant}/workflows", get(list_workflows))
        .route(
            "/api/v1/workflows/{workflow}",
            get(get_workflow)
                .delete(delete_workflow)
                .patch(patch_workflow),
        )
}

/// A `Workflow` object as the SDKs' strict models take it: every version entry has `order` and
/// `workflowId`; a paused one names its behaviours.
fn workflow_json(st: &View<'_>, w: &Workflow, tenant: &str) -> Value {
    let version = json!({"metadata": meta(&w.version_id, w.created_at), "version": "",
                         "order": 1, "workflowId": w.id});
    let mut v = json!({"metadata": meta(&w.id, w.created_at), "name": w.name,
                       "description": w.description, "isPaused": false,
                       "versions": [version], "tenantId": tenant});
    if let Some(rule) = st.pauses().rule(&w.name) {
        let (crons, schedules) = rule.behaviours();
        v["isPaused"] = json!(true);
        v["pausedWorkflowCronRunQueueBehavior"] = json!(crons);
        v["pausedWorkflowScheduledRunQueueBehavior"] = json!(schedules);
    }
    v
}

/// `GET /api/v1/workflows/{workflow}`: one workflow by id (400 for a malformed id, 404 for an
/// unknown or deleted one).
async fn get_workflow(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    let st = s.engine.view();
    match st.live_workflow(&id) {
        Some(w) => Json(workflow_json(&st, w, &s.engine.tenant_id)).into_response(),
        None => bad_id_or_missing(&id, "workflow"),
    }
}

/// `GET /api/v1/tenants/{tenant}/workflows`: newest first; `name` is a case-insensitive
/// substring (the real engine's ILIKE).
async fn list_workflows(AxState(s): AxState<Rest>, Query(q): Query<Value>) -> Response {
    let (offset, limit) = page(&q);
    let name = q
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_lowercase();
    let st = s.engine.view();
    let mut live: Vec<&Workflow> = st
        .workflows()
        .filter(|w| !w.deleted)
        .filter(|w| name.is_empty() || w.name.to_lowercase().contains(&name))
        .collect();
    live.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.name.cmp(&b.name)));
    // The real engine's list rows carry no versions and an empty tenantId (a read of one
    // workflow has both).
    let rows = live
        .into_iter()
        .map(|w| super::without(workflow_json(&st, w, ""), &["versions"]))
        .collect();
    paged(rows, offset, limit)
}

/// `DELETE /api/v1/workflows/{workflow}`: 204; the workflow leaves the lists and cannot be
/// triggered, its crons and schedules go, what it held while paused is cancelled, its runs
/// finish and stay readable.
async fn delete_workflow(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    if !s.engine.delete_workflow(&id) {
        return bad_id_or_missing(&id, "workflow");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `PATCH /api/v1/workflows/{workflow}` with `{"pause": {"action": "pause" | "unpause", ...}}`:
/// answers the workflow as it now is.
async fn patch_workflow(
    AxState(s): AxState<Rest>,
    Path(id): Path<String>,
    body: Option<Json<Value>>,
) -> Response {
    let Some(Json(b)) = body else {
        return err(StatusCode::BAD_REQUEST, "the request body must be non-null");
    };
    let rule = match b.get("pause").map(PauseRule::from_json) {
        Some(Ok(rule)) => rule,
        // The real engine fails a bad pause with a bare 500.
        Some(Err(why)) => return err(StatusCode::INTERNAL_SERVER_ERROR, &why),
        None => {
            return err(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the request names no pause",
            );
        }
    };
    let Some(name) = s.engine.pause_workflow(&id, rule) else {
        return bad_id_or_missing(&id, "workflow");
    };
    let st = s.engine.view();
    let answer = st
        .workflow(&name)
        .map(|w| workflow_json(&st, w, &s.engine.tenant_id));
    match answer {
        Some(v) => Json(v).into_response(),
        None => bad_id_or_missing(&id, "workflow"),
    }
}
