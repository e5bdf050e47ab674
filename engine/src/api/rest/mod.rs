//! The REST side of the development engine: the read endpoints SDKs use (runs, tasks, workflows,
//! crons, schedules, workers, rate limits) and the fault-injection control endpoint.
//!
//! Every route needs `Authorization: Bearer <token>`; the fault middleware counts each request
//! (by path) and applies HTTP faults before auth, like the gRPC gate.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::extract::{Path, Query, Request, State as AxState};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

mod calendar;
mod events;
mod filters;
mod metrics;
mod runs;
mod traces;
mod webhooks;
mod workflows;

use crate::api::gate::bearer_ok;
use crate::faults::{Fault, FaultRule, Faults};
use crate::hub::Engine;
use crate::hub::queries::View;
use hatchet_runtime::protocol::rfc3339;

/// Shared by the handlers.
#[derive(Clone)]
pub(crate) struct Rest {
    pub engine: Arc<Engine>,
    pub faults: Faults,
    pub token: Arc<str>,
    /// Reads the dashboard's data and nothing else (see `api::dashboard`, invariant 1).
    pub dashboard_key: Arc<str>,
    /// The REST API's own URL (the tenant's `serverUrl`).
    pub server_url: Arc<str>,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rest(..)")
    }
}

pub(crate) fn err(status: StatusCode, description: &str) -> Response {
    (
        status,
        Json(json!({"errors": [{"description": description}]})),
    )
        .into_response()
}

/// `{"message": ...}`, the shape of the real engine's path and proxy errors.
pub(crate) fn message(status: StatusCode, text: &str) -> Response {
    (status, Json(json!({ "message": text }))).into_response()
}

/// What the real engine answers for a path id it cannot find: 400 for a malformed one (not a
/// UUID), 404 for an unknown one.
pub(crate) fn bad_id_or_missing(id: &str, what: &str) -> Response {
    if uuid::Uuid::parse_str(id).is_err() {
        message(
            StatusCode::BAD_REQUEST,
            &format!("invalid {what} id {id:?}"),
        )
    } else {
        message(StatusCode::NOT_FOUND, &format!("{what} {id} not found"))
    }
}

/// Query parameters as sent (repeated names kept), read the way the real engine reads them.
pub(crate) struct Params(pub(crate) Vec<(String, String)>);

impl Params {
    pub(crate) fn one(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
    }

    pub(crate) fn all(&self, k: &str) -> Vec<String> {
        let bracketed = format!("{k}[]");
        self.0
            .iter()
            .filter(|(a, _)| a == k || *a == bracketed)
            .flat_map(|(_, v)| v.split(',').map(str::to_string))
            .filter(|v| !v.is_empty())
            .collect()
    }

    pub(crate) fn number(&self, k: &str, default: usize) -> Result<usize, String> {
        match self.one(k) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{k} must be a whole number, got {v:?}")),
        }
    }

    pub(crate) fn time(&self, k: &str) -> Result<Option<SystemTime>, String> {
        match self.one(k) {
            None => Ok(None),
            Some(v) => hatchet_runtime::protocol::calendar::parse_rfc3339(v)
                .map(Some)
                .ok_or_else(|| format!("{k} must be an RFC 3339 time, got {v:?}")),
        }
    }
}

pub(crate) fn meta(id: &str, created: SystemTime) -> Value {
    json!({"id": id, "createdAt": rfc3339(created), "updatedAt": rfc3339(created)})
}

fn pagination(total: usize, offset: usize, limit: usize) -> Value {
    let limit = limit.max(1);
    let pages = total.div_ceil(limit).max(1);
    let current = offset / limit + 1;
    json!({"current_page": current, "next_page": if current < pages { current + 1 } else { current }, "num_pages": pages})
}

/// One page of `rows` with its pagination, as every list endpoint answers.
pub(crate) fn paged(rows: Vec<Value>, offset: usize, limit: usize) -> Response {
    let total = rows.len();
    let rows: Vec<Value> = rows.into_iter().skip(offset).take(limit).collect();
    Json(json!({"rows": rows, "pagination": pagination(total, offset, limit)})).into_response()
}

pub(crate) fn page(q: &Value) -> (usize, usize) {
    let n = |k: &str, d: usize| {
        q.get(k)
            .and_then(|v| v.as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    (n("offset", 0), n("limit", 50).min(1000))
}

/// The tenant a path names (`.../tenants/{tenant}/...`), if any.
fn path_tenant(path: &str) -> Option<&str> {
    let mut segments = path.split('/');
    segments.find(|s| *s == "tenants")?;
    segments.next()
}

/// A tenant route of a tenant the engine does not have is refused before its handler runs, as
/// the real engine's tenant lookup does (v0.104.9): 400 `invalid tenant id` when the path's
/// tenant is not a UUID, 404 `not found` when it is another tenant's (the engine has one, the
/// token's). A route layer, so a path no route matches still reads 404, and after [`gate`]
/// (authentication and faults first). A webhook's receive is the sender's (see [`gate`]).
async fn tenant_gate(AxState(s): AxState<Rest>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if !webhooks::is_receive(req.method(), path)
        && let Some(tenant) = path_tenant(path)
        && tenant != s.engine.tenant_id
    {
        return if uuid::Uuid::parse_str(tenant).is_err() {
            message(StatusCode::BAD_REQUEST, "invalid tenant id")
        } else {
            message(StatusCode::NOT_FOUND, "not found")
        };
    }
    next.run(req).await
}

/// `GET /api/v1/tenants/{tenant}`: the tenant, on the v1 engine (the TypeScript SDK reads
/// `version` at start and warns about anything but `V1`).
async fn get_tenant(AxState(s): AxState<Rest>) -> Response {
    let id = &s.engine.tenant_id;
    Json(json!({"metadata": meta(id, SystemTime::UNIX_EPOCH), "name": "development", "slug": "development",
                "analyticsOptOut": true, "alertMemberEmails": false, "version": "V1",
                "environment": "development", "serverUrl": &*s.server_url}))
    .into_response()
}

/// The common part of a cron or schedule created through the API, from its request body.
fn planned(s: &Rest, workflow: &str, body: &Value) -> crate::time::schedules::Planned {
    crate::time::schedules::Planned {
        tenant: s.engine.tenant_id.clone(),
        workflow: workflow.to_string(),
        input: body.get("input").cloned().unwrap_or(json!({})),
        metadata: body.get("additionalMetadata").cloned().unwrap_or(json!({})),
        method: "API",
        priority: body.get("priority").cloned().unwrap_or(json!(1)),
    }
}

async fn list_crons(AxState(s): AxState<Rest>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let p = Params(q);
    let st = s.engine.view();
    let rows = st.calendar().crons().iter().cloned();
    calendar_page(calendar::select(calendar::Kind::Crons, rows, &p), &p)
}

/// A cron or schedule list's answer (`calendar.rs`).
fn calendar_page(selected: Result<(Vec<Value>, usize), String>, p: &Params) -> Response {
    match selected {
        Ok((rows, total)) => {
            let (offset, limit) = (
                p.number("offset", 0).unwrap_or(0),
                p.number("limit", 50).unwrap_or(50),
            );
            Json(json!({"rows": rows, "pagination": calendar::pagination(total, offset, limit)}))
                .into_response()
        }
        Err(e) => err(StatusCode::BAD_REQUEST, &e),
    }
}

async fn create_cron(
    AxState(s): AxState<Rest>,
    Path((_, wf)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    let Some(Json(b)) = body else {
        return err(StatusCode::BAD_REQUEST, "body must be a JSON object");
    };
    let (Some(name), Some(expr)) = (
        b.get("cronName").and_then(Value::as_str),
        b.get("cronExpression").and_then(Value::as_str),
    ) else {
        return err(
            StatusCode::BAD_REQUEST,
            "cronName and cronExpression are required",
        );
    };
    let added = s.engine.add_cron(&planned(&s, &wf, &b), name, expr);
    match added {
        Ok(row) => Json(row).into_response(),
        Err(e) if e.contains("not found") => err(StatusCode::NOT_FOUND, &e),
        Err(e) => err(StatusCode::BAD_REQUEST, &e),
    }
}

async fn list_scheduled(
    AxState(s): AxState<Rest>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let p = Params(q);
    let st = s.engine.view();
    let rows = st
        .calendar()
        .schedules()
        .iter()
        .map(|r| st.scheduled_view(r));
    calendar_page(calendar::select(calendar::Kind::Schedules, rows, &p), &p)
}

async fn create_scheduled(
    AxState(s): AxState<Rest>,
    Path((_, wf)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    let Some(Json(b)) = body else {
        return err(StatusCode::BAD_REQUEST, "body must be a JSON object");
    };
    let Some(text) = b.get("triggerAt").and_then(Value::as_str) else {
        return err(StatusCode::BAD_REQUEST, "triggerAt is required");
    };
    let Some(at) = hatchet_runtime::protocol::calendar::parse_rfc3339(text) else {
        return err(
            StatusCode::BAD_REQUEST,
            "triggerAt must be an RFC 3339 time such as 2026-12-01T09:30:00Z",
        );
    };
    let added = s.engine.add_schedules(&planned(&s, &wf, &b), [at]);
    match added.map(|mut rows| rows.pop()) {
        Ok(Some(row)) => Json(s.engine.view().scheduled_view(&row)).into_response(),
        Ok(None) => err(StatusCode::INTERNAL_SERVER_ERROR, "no schedule was added"),
        Err(e) => err(StatusCode::NOT_FOUND, &e),
    }
}

/// How the real engine answers a calendar row's id it cannot use: a malformed one (400) and an
/// unknown one (v0.104.9: a cron's lookup error is a bare 500, a schedule's a 404).
struct Misses {
    malformed: &'static str,
    unknown: (StatusCode, &'static str),
}

impl Misses {
    /// The answer for `id` when no row has it.
    fn answer(&self, id: &str) -> Response {
        if uuid::Uuid::parse_str(id).is_err() {
            message(StatusCode::BAD_REQUEST, self.malformed)
        } else {
            message(self.unknown.0, self.unknown.1)
        }
    }
}

const CRON: Misses = Misses {
    malformed: "invalid cron workflow id",
    unknown: (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
};

const SCHEDULE: Misses = Misses {
    malformed: "invalid scheduled workflow run id",
    unknown: (StatusCode::NOT_FOUND, "scheduled workflow run not found"),
};

/// Answers a GET of one calendar row: the row `view` makes, or what `misses` says.
fn get_row(
    s: &Rest,
    id: &str,
    misses: &Misses,
    view: impl FnOnce(&View<'_>) -> Option<Value>,
) -> Response {
    match view(&s.engine.view()) {
        Some(row) => Json(row).into_response(),
        None => misses.answer(id),
    }
}

/// Answers a DELETE of one calendar row (`remove` says whether there was one): 204, or what
/// `misses` says.
fn delete_row(
    s: &Rest,
    id: &str,
    misses: &Misses,
    remove: impl FnOnce(&Engine) -> bool,
) -> Response {
    if !remove(&s.engine) {
        misses.answer(id)
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

async fn get_cron(AxState(s): AxState<Rest>, Path((_, id)): Path<(String, String)>) -> Response {
    get_row(&s, &id, &CRON, |st| st.calendar().cron(&id).cloned())
}

async fn delete_cron(AxState(s): AxState<Rest>, Path((_, id)): Path<(String, String)>) -> Response {
    delete_row(&s, &id, &CRON, |e| e.remove_cron(&id))
}

/// `POST .../workflows/crons/{id}`: runs the cron now; answers the run's id.
async fn trigger_cron(
    AxState(s): AxState<Rest>,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    match s.engine.trigger_cron(&id) {
        Some(Ok(run)) => Json(json!({ "externalId": run })).into_response(),
        Some(Err(why)) => err(StatusCode::INTERNAL_SERVER_ERROR, &why),
        None => CRON.answer(&id),
    }
}

async fn get_scheduled(
    AxState(s): AxState<Rest>,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    get_row(&s, &id, &SCHEDULE, |st| {
        st.calendar().schedule(&id).map(|r| st.scheduled_view(r))
    })
}

async fn delete_scheduled(
    AxState(s): AxState<Rest>,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    delete_row(&s, &id, &SCHEDULE, |e| e.remove_schedule(&id))
}

/// The development engine's one dispatcher (the REST models require a UUID).
const DISPATCHER_ID: &str = "6b0f3a8e-1d4c-4c8a-9a63-2d7e5f0c1b11";

fn label_id(worker: &str, key: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{worker}/{key}").as_bytes(),
    )
    .to_string()
}

/// A worker as the real engine lists it (its status: [`crate::store::model::Worker::status`]).
fn worker_json(w: &crate::store::model::Worker, now: tokio::time::Instant) -> Value {
    let status = w.status(now);
    let slot_config: serde_json::Map<String, Value> = w
        .slot_limits
        .iter()
        .map(|(k, lim)| {
            (
                k.clone(),
                json!({"limit": lim, "available": lim - w.slots_used.get(k).copied().unwrap_or(0)}),
            )
        })
        .collect();
    json!({"metadata": meta(&w.id, w.created_at), "name": w.name, "type": "SELFHOSTED", "status": status,
        "lastHeartbeatAt": rfc3339(w.last_heartbeat_at),
        "actions": w.actions.iter().collect::<Vec<_>>(), "slotConfig": slot_config,
        "dispatcherId": DISPATCHER_ID,
        "labels": w.labels.iter().map(|(k, v)| json!({"metadata": meta(&label_id(&w.id, k), w.created_at), "key": k, "value": v.to_string()})).collect::<Vec<_>>(),
        "runtimeInfo": w.runtime_info.as_ref().map(|r| json!({"sdkVersion": r.sdk_version, "languageVersion": r.language_version, "os": r.os, "runtimeExtra": r.extra.clone().unwrap_or_default()}))})
}

/// One worker as the real engine reads it (`GET` and `PATCH /api/v1/workers/{id}`): its list
/// row, plus the live workflows it registered actions of (`{id, name}`) and `recentStepRuns`,
/// which v0.104.9 answers empty.
fn worker_read(st: &View<'_>, w: &crate::store::model::Worker, now: tokio::time::Instant) -> Value {
    let mut v = worker_json(w, now);
    let registered: Vec<Value> = st
        .workflows()
        .filter(|wf| !wf.deleted)
        .filter(|wf| {
            wf.tasks.iter().any(|t| {
                w.actions.contains(&t.action.to_lowercase()) || w.actions.contains(&t.action)
            })
        })
        .map(|wf| json!({"id": wf.id, "name": wf.name}))
        .collect();
    v["registeredWorkflows"] = json!(registered);
    v["recentStepRuns"] = json!([]);
    v
}

/// `v` without `keys`: where the real engine's answer leaves fields out (a list row, say) that
/// another answer about the same thing carries.
pub(crate) fn without(mut v: Value, keys: &[&str]) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    v
}

async fn list_workers(AxState(s): AxState<Rest>, Query(q): Query<Value>) -> Response {
    let (offset, limit) = page(&q);
    let now = s.engine.clock.now();
    let st = s.engine.view();
    let rows: Vec<Value> = st.workers().map(|w| worker_json(w, now)).collect();
    paged(rows, offset, limit)
}

async fn get_worker(AxState(s): AxState<Rest>, Path(id): Path<String>) -> Response {
    let now = s.engine.clock.now();
    let st = s.engine.view();
    match st.worker(&id) {
        Some(w) => Json(worker_read(&st, w, now)).into_response(),
        None => bad_id_or_missing(&id, "worker"),
    }
}

async fn patch_worker(
    AxState(s): AxState<Rest>,
    Path(id): Path<String>,
    body: Option<Json<Value>>,
) -> Response {
    let Some(Json(b)) = body else {
        return err(StatusCode::BAD_REQUEST, "body must be a JSON object");
    };
    let found = s.engine.update_worker(&id, |w| {
        if let Some(p) = b.get("isPaused").and_then(Value::as_bool) {
            w.paused = p;
        }
    });
    if found.is_none() {
        return bad_id_or_missing(&id, "worker");
    }
    // An unpaused worker takes what waited for it at once.
    s.engine.wake.notify_one();
    get_worker(AxState(s), Path(id)).await
}

async fn list_rate_limits(AxState(s): AxState<Rest>, Query(q): Query<Value>) -> Response {
    let (offset, limit) = page(&q);
    let search = q
        .get("search")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let now = s.engine.clock.now();
    let st = s.engine.view();
    let rows: Vec<Value> = st
        .rate_limits()
        .iter()
        .filter(|r| search.is_empty() || r.key.contains(&search))
        .map(|r| json!({"key": r.key, "tenantId": s.engine.tenant_id, "limitValue": r.limit, "value": r.remaining_at(now), "window": r.duration, "lastRefill": rfc3339(r.refilled_at)}))
        .collect();
    paged(rows, offset, limit)
}

// ===== control endpoint (faults) =====

async fn add_fault(AxState(s): AxState<Rest>, body: Option<Json<FaultRule>>) -> Response {
    let Some(Json(rule)) = body else {
        return err(StatusCode::BAD_REQUEST, "body must be a FaultRule");
    };
    s.faults.inject(rule.target, rule.times, rule.fault);
    StatusCode::NO_CONTENT.into_response()
}

async fn clear_faults(AxState(s): AxState<Rest>) -> Response {
    s.faults.clear();
    StatusCode::NO_CONTENT.into_response()
}

async fn counters(AxState(s): AxState<Rest>) -> Response {
    Json(json!(s.faults.counters())).into_response()
}

async fn dashboard_page() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        crate::api::dashboard::PAGE,
    )
        .into_response()
}

async fn dashboard_data(AxState(s): AxState<Rest>) -> Response {
    let (wall, now) = (s.engine.clock.system_now(), s.engine.clock.now());
    let data = crate::api::dashboard::data(&s.engine.view(), wall, now);
    Json(data).into_response()
}

async fn drop_connections(AxState(s): AxState<Rest>) -> Response {
    s.faults.drop_connections();
    StatusCode::NO_CONTENT.into_response()
}

/// The dashboard's data route, the one route its key opens.
const DASHBOARD_DATA: &str = "/_dev/dashboard.json";

async fn gate(AxState(s): AxState<Rest>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    s.faults.count(&path);
    // The dashboard page holds no data; its data route needs the token or the dashboard's key.
    if path == "/dashboard" {
        return next.run(req).await;
    }
    // A webhook's receive carries the sender's credentials, not the tenant's token.
    if webhooks::is_receive(req.method(), &path) {
        return next.run(req).await;
    }
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    let dashboard_read = path == DASHBOARD_DATA && req.method() == axum::http::Method::GET;
    let allowed =
        bearer_ok(auth, &s.token) || (dashboard_read && bearer_ok(auth, &s.dashboard_key));
    if !allowed {
        return err(StatusCode::UNAUTHORIZED, "missing or invalid bearer token");
    }
    match s.faults.take(&path) {
        Some(Fault::HttpFail {
            status,
            retry_after,
        }) => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let mut r = err(code, "injected fault");
            if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
                r.headers_mut().insert("retry-after", v);
            }
            r
        }
        Some(Fault::Delay { ms }) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            next.run(req).await
        }
        Some(Fault::DelayAnswer { ms }) => {
            let answer = next.run(req).await;
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            answer
        }
        Some(Fault::Hang) => std::future::pending().await,
        _ => next.run(req).await,
    }
}

/// `POST /_dev/advance?seconds=N`: moves the engine's clock forward (see `clock.rs`); answers
/// how far it is ahead of the wall clock in all.
async fn advance_clock(AxState(s): AxState<Rest>, Query(q): Query<Value>) -> Response {
    let secs = q
        .get("seconds")
        .and_then(|v| v.as_str())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|n| n.is_finite() && *n >= 0.0);
    let Some(secs) = secs else {
        return err(
            StatusCode::BAD_REQUEST,
            "seconds must be a number of seconds, 0 or more: /_dev/advance?seconds=3600",
        );
    };
    s.engine
        .advance_clock(std::time::Duration::from_secs_f64(secs));
    Json(json!({ "skipped_seconds": s.engine.clock.skew().as_secs_f64() })).into_response()
}

/// The REST router.
pub(crate) fn router(state: Rest) -> axum::Router {
    axum::Router::new()
        .merge(runs::routes())
        .merge(filters::routes())
        .merge(workflows::routes())
        .merge(events::routes())
        .merge(metrics::routes())
        .merge(webhooks::routes())
        .merge(traces::routes())
        .route("/api/v1/tenants/{tenant}", get(get_tenant))
        .route("/api/v1/tenants/{tenant}/workflows/crons", get(list_crons))
        .route(
            "/api/v1/tenants/{tenant}/workflows/{wf}/crons",
            post(create_cron),
        )
        .route(
            "/api/v1/tenants/{tenant}/workflows/crons/{id}",
            get(get_cron).delete(delete_cron).post(trigger_cron),
        )
        .route(
            "/api/v1/tenants/{tenant}/workflows/scheduled",
            get(list_scheduled),
        )
        .route(
            "/api/v1/tenants/{tenant}/workflows/{wf}/scheduled",
            post(create_scheduled),
        )
        .route(
            "/api/v1/tenants/{tenant}/workflows/scheduled/{id}",
            get(get_scheduled).delete(delete_scheduled),
        )
        .route("/api/v1/tenants/{tenant}/worker", get(list_workers))
        .route(
            "/api/v1/workers/{worker}",
            get(get_worker).patch(patch_worker),
        )
        .route(
            "/api/v1/tenants/{tenant}/rate-limits",
            get(list_rate_limits),
        )
        .route("/dashboard", get(dashboard_page))
        .route(DASHBOARD_DATA, get(dashboard_data))
        .route("/_dev/faults", post(add_fault).delete(clear_faults))
        .route("/_dev/counters", get(counters))
        .route("/_dev/drop-connections", post(drop_connections))
        .route("/_dev/advance", post(advance_clock))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            tenant_gate,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            hatchet_runtime::protocol::MAX_MESSAGE_BYTES,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use tokio::time::Instant;

    use crate::store::model::{Session, Worker};

    fn worker(paused: bool, beat: Instant, sessions: usize) -> Worker {
        let (tx, _rx) = tokio::sync::mpsc::channel(1);
        Worker {
            id: "w".into(),
            name: "w".into(),
            actions: Default::default(),
            slot_limits: Default::default(),
            slots_used: Default::default(),
            sessions: (0..sessions)
                .map(|i| Session {
                    id: i as u64,
                    tx: tx.clone(),
                    legacy: false,
                })
                .collect(),
            forgotten: Vec::new(),
            last_heartbeat: beat,
            last_heartbeat_at: SystemTime::now(),
            ever_listened: true,
            labels: Default::default(),
            runtime_info: None,
            paused,
            created_at: SystemTime::now(),
            last_listener_established: None,
            assignments: 0,
            heartbeats: 0,
        }
    }

    #[test]
    fn a_worker_s_status_is_inactive_once_its_heartbeat_is_old_paused_or_not() {
        let t0 = Instant::now();
        let status = |w: &Worker, now: Instant| super::worker_json(w, now)["status"].clone();
        let fresh = t0 + Duration::from_secs(1);
        let stale = t0 + Duration::from_secs(6);
        assert_eq!(status(&worker(false, t0, 1), fresh), "ACTIVE");
        assert_eq!(status(&worker(true, t0, 1), fresh), "PAUSED");
        assert_eq!(status(&worker(false, t0, 1), stale), "INACTIVE");
        assert_eq!(
            status(&worker(true, t0, 1), stale),
            "INACTIVE",
            "the real transformer decides INACTIVE last"
        );
        assert_eq!(
            status(&worker(true, t0, 0), fresh),
            "PAUSED",
            "a stream just closed: read by the heartbeat, as there"
        );
    }
}
