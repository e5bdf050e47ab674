//! REST event filters: list, create, get, update, delete (`hatchet-engine-semantics.md` §10).
//!
//! # Invariants
//!
//! 1. Create needs a non-empty `scope` and `expression` (400 otherwise); the expression is not
//!    compiled here; the payload defaults to `{}`.
//! 2. PATCH keeps the fields it does not name; DELETE answers with the deleted filter.
//! 3. Lists page 0-based (`current_page = offset / limit`), default limit 20,000.

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::{Rest, err};
use crate::dag::filters::{Filter, Filters};

const DEFAULT_LIMIT: usize = 20_000;

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new()
        .route(
            "/api/v1/stable/tenants/{tenant}/filters",
            get(list).post(create),
        )
        .route(
            "/api/v1/stable/tenants/{tenant}/filters/{filter}",
            get(read).patch(update).delete(remove),
        )
}

fn all<'a>(q: &'a [(String, String)], k: &str) -> Vec<&'a str> {
    let bracketed = format!("{k}[]");
    q.iter()
        .filter(|(a, _)| a == k || *a == bracketed)
        .map(|(_, v)| v.as_str())
        .collect()
}

async fn list(AxState(s): AxState<Rest>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let num = |k: &str, d: usize| {
        q.iter()
            .find(|(a, _)| a == k)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(d)
    };
    let (offset, limit) = (num("offset", 0), num("limit", DEFAULT_LIMIT).max(1));
    let (workflows, scopes) = (all(&q, "workflowIds"), all(&q, "scopes"));
    let st = s.engine.view();
    let rows: Vec<Value> = st
        .filters()
        .iter()
        .filter(|f| workflows.is_empty() || workflows.contains(&f.workflow_id.as_str()))
        .filter(|f| scopes.is_empty() || scopes.contains(&f.scope.as_str()))
        .map(|f| f.to_json(&s.engine.tenant_id))
        .collect();
    let total = rows.len();
    let page: Vec<Value> = rows.into_iter().skip(offset).take(limit).collect();
    let current = offset / limit;
    Json(json!({
        "rows": page,
        "pagination": {"current_page": current, "next_page": current + 1, "num_pages": total.div_ceil(limit)},
    }))
    .into_response()
}

fn text(body: &Value, k: &str) -> Option<String> {
    body.get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string)
}

async fn create(AxState(s): AxState<Rest>, body: Option<Json<Value>>) -> Response {
    let Some(Json(body)) = body else {
        return err(StatusCode::BAD_REQUEST, "the body must be a JSON object");
    };
    let (Some(workflow_id), Some(scope), Some(expression)) = (
        text(&body, "workflowId"),
        text(&body, "scope"),
        text(&body, "expression"),
    ) else {
        return err(
            StatusCode::BAD_REQUEST,
            "workflowId, scope and expression are required and must not be empty",
        );
    };
    if uuid::Uuid::parse_str(&workflow_id).is_err() {
        return err(StatusCode::BAD_REQUEST, "workflowId must be a UUID");
    }
    let now = s.engine.clock.system_now();
    let f = Filter {
        id: crate::parse::new_id(),
        workflow_id,
        scope,
        expression,
        payload: body
            .get("payload")
            .cloned()
            .filter(|p| !p.is_null())
            .unwrap_or_else(|| json!({})),
        created_at: now,
        updated_at: now,
        declarative: false,
    };
    let out = f.to_json(&s.engine.tenant_id);
    s.engine.add_filter(f);
    Json(out).into_response()
}

/// Runs `f` on the filter `id`, or answers 403 (another tenant), 400 (a malformed id) or 404.
fn with_filter(
    s: &Rest,
    id: &str,
    f: impl FnOnce(&mut Filters, &str) -> Option<Value>,
) -> Response {
    match s.engine.with_filters(|fs| f(fs, id)) {
        Some(v) => Json(v).into_response(),
        None if uuid::Uuid::parse_str(id).is_err() => {
            err(StatusCode::BAD_REQUEST, "the filter id is not a UUID")
        }
        None => err(StatusCode::NOT_FOUND, "filter not found"),
    }
}

async fn read(AxState(s): AxState<Rest>, Path((_, id)): Path<(String, String)>) -> Response {
    let tenant_id = s.engine.tenant_id.clone();
    with_filter(&s, &id, |fs, id| {
        fs.get_mut(id).map(|f| f.to_json(&tenant_id))
    })
}

async fn remove(AxState(s): AxState<Rest>, Path((_, id)): Path<(String, String)>) -> Response {
    let tenant_id = s.engine.tenant_id.clone();
    with_filter(&s, &id, |fs, id| {
        fs.remove(id).map(|f| f.to_json(&tenant_id))
    })
}

async fn update(
    AxState(s): AxState<Rest>,
    Path((_, id)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    let Some(Json(body)) = body else {
        return err(StatusCode::BAD_REQUEST, "the body must be a JSON object");
    };
    let tenant_id = s.engine.tenant_id.clone();
    let now = s.engine.clock.system_now();
    with_filter(&s, &id, |fs, id| {
        let f = fs.get_mut(id)?;
        if let Some(e) = text(&body, "expression") {
            f.expression = e;
        }
        if let Some(sc) = text(&body, "scope") {
            f.scope = sc;
        }
        if let Some(p) = body.get("payload").filter(|p| !p.is_null()) {
            f.payload = p.clone();
        }
        f.updated_at = now;
        Some(f.to_json(&tenant_id))
    })
}
