//! The tenant's events over REST (`/api/v1/stable/tenants/{tenant}/events`): the list, newest
//! first, with the runs each event started, and one event by id.

use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::{Params, Rest, bad_id_or_missing, err, message, meta};
use crate::hub::queries::View;
use crate::store::model::{Status, StoredEvent};
use hatchet_runtime::protocol::rfc3339;

/// How far back a list looks when it names no `since` (the real engine's default).
const DEFAULT_LOOK_BACK: Duration = Duration::from_secs(24 * 3_600);

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new()
        .route("/api/v1/stable/tenants/{tenant}/events", get(list_events))
        .route(
            "/api/v1/stable/tenants/{tenant}/events/{event}",
            get(get_event),
        )
}

/// A `V1Event` row: the tenant id reads `""` in lists, as on the real engine; no runs read
/// `null`.
fn event_json(st: &View<'_>, e: &StoredEvent) -> Value {
    let mut summary =
        json!({"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0});
    for run in e.runs.iter().filter_map(|id| st.runs().get(id)) {
        let k = match st.run_status(run) {
            Status::Pending | Status::Queued => "queued",
            Status::Running => "running",
            Status::Completed => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        };
        summary[k] = json!(summary[k].as_u64().unwrap_or(0) + 1);
    }
    let runs: Value = if e.runs.is_empty() {
        Value::Null
    } else {
        e.runs
            .iter()
            .map(|id| json!({"workflowRunId": id}))
            .collect()
    };
    let mut v = json!({"metadata": meta(&e.id, e.at), "key": e.key, "tenantId": "",
                       "seenAt": rfc3339(e.at), "additionalMetadata": e.metadata,
                       "payload": e.payload, "triggeredRuns": runs,
                       "workflowRunSummary": summary});
    if let Some(scope) = &e.scope {
        v["scope"] = json!(scope);
    }
    if let Some(hook) = &e.webhook {
        v["triggeringWebhookName"] = json!(hook);
    }
    v
}

/// Which events a list selects.
struct EventFilter {
    since: SystemTime,
    until: Option<SystemTime>,
    keys: Vec<String>,
    ids: Vec<String>,
    workflow_ids: Vec<String>,
    statuses: Vec<String>,
    scopes: Vec<String>,
    metadata: Vec<(String, String)>,
}

impl EventFilter {
    /// From the query: `Err(Some(why))` for a bad time (a 400), `Err(None)` for a metadata
    /// filter without both sides (the real engine's bare 500).
    fn from_params(p: &Params, now: SystemTime) -> Result<Self, Option<String>> {
        let since = p.time("since").map_err(Some)?;
        let until = p.time("until").map_err(Some)?;
        let mut metadata = Vec::new();
        for kv in p.all("additionalMetadata") {
            match kv.split_once(':') {
                Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                    metadata.push((k.to_string(), v.to_string()));
                }
                _ => return Err(None),
            }
        }
        Ok(EventFilter {
            since: since.unwrap_or_else(|| now - DEFAULT_LOOK_BACK),
            until,
            keys: p.all("keys"),
            ids: p.all("eventIds"),
            workflow_ids: p.all("workflowIds"),
            statuses: p.all("workflowRunStatuses"),
            scopes: p.all("scopes"),
            metadata,
        })
    }

    fn matches(&self, st: &View<'_>, e: &StoredEvent) -> bool {
        let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
        let runs = || e.runs.iter().filter_map(|id| st.runs().get(id));
        e.at >= self.since
            && self.until.is_none_or(|u| e.at <= u)
            && any(&self.keys, &e.key)
            && any(&self.ids, &e.id)
            && (self.scopes.is_empty() || e.scope.as_deref().is_some_and(|s| any(&self.scopes, s)))
            && self.metadata.iter().all(|(k, v)| {
                e.metadata
                    .get(k)
                    .is_some_and(|m| m.as_str() == Some(v.as_str()))
            })
            && (self.workflow_ids.is_empty()
                || runs().any(|r| self.workflow_ids.contains(&r.workflow_id)))
            && (self.statuses.is_empty()
                || runs().any(|r| self.statuses.iter().any(|s| s == st.run_status(r).rest())))
    }
}

/// `GET /api/v1/stable/tenants/{tenant}/events`: newest first, 50 to a page.
async fn list_events(
    AxState(s): AxState<Rest>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let p = Params(q);
    let filter = match EventFilter::from_params(&p, s.engine.clock.system_now()) {
        Ok(f) => f,
        Err(Some(why)) => return err(StatusCode::BAD_REQUEST, &why),
        Err(None) => return message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
    };
    let (offset, limit) = match (p.number("offset", 0), p.number("limit", 50)) {
        (Ok(o), Ok(l)) => (o, l),
        (Err(why), _) | (_, Err(why)) => return err(StatusCode::BAD_REQUEST, &why),
    };
    if limit == 0 {
        // The real engine divides by the limit for its pagination.
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    }
    let st = s.engine.view();
    let hits: Vec<&StoredEvent> = st
        .events()
        .iter()
        .rev()
        .filter(|e| filter.matches(&st, e))
        .collect();
    let total = hits.len();
    let rows: Vec<Value> = hits
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|e| event_json(&st, e))
        .collect();
    let current = offset / limit + 1;
    let next = if total < offset + limit {
        current
    } else {
        current + 1
    };
    Json(
        json!({"rows": rows, "pagination": {"current_page": current, "next_page": next,
                                             "num_pages": total.div_ceil(limit)}}),
    )
    .into_response()
}

/// `GET /api/v1/stable/tenants/{tenant}/events/{event}`.
async fn get_event(AxState(s): AxState<Rest>, Path((_, id)): Path<(String, String)>) -> Response {
    let st = s.engine.view();
    match st.events().get(&id) {
        Some(e) => {
            // A single read names the webhook always ("" for a pushed event); a list row only
            // when there is one, as v0.104.9 answers them.
            let mut v = event_json(&st, e);
            if v.get("triggeringWebhookName").is_none() {
                v["triggeringWebhookName"] = json!("");
            }
            Json(v).into_response()
        }
        None => bad_id_or_missing(&id, "event"),
    }
}
