//! Webhooks over REST (`/api/v1/stable/tenants/{tenant}/webhooks`): create, list, get,
//! update and delete by name, and the receive route (`POST .../webhooks/{name}`, without the
//! bearer token: the webhook's own scheme authenticates it) that turns a request into an event.
//! Shapes and statuses as the real engine answers them (see `webhooks.rs`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use super::{Params, Rest, err, message};
use crate::store::webhooks::{Auth, SOURCES, Webhook};

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new()
        .route(
            "/api/v1/stable/tenants/{tenant}/webhooks",
            get(list).post(create),
        )
        .route(
            "/api/v1/stable/tenants/{tenant}/webhooks/{name}",
            get(read).patch(update).delete(remove).post(receive),
        )
}

/// Whether a request is a webhook's receive (it carries no bearer token).
pub(super) fn is_receive(method: &axum::http::Method, path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    method == axum::http::Method::POST
        && parts.len() == 7
        && parts[..4] == ["api", "v1", "stable", "tenants"]
        && parts[5] == "webhooks"
}

fn not_found() -> Response {
    message(StatusCode::NOT_FOUND, "not found")
}

/// The real engine's answer to what its store refuses (a duplicate name, a bad enum).
fn refused() -> Response {
    message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
}

async fn create(AxState(s): AxState<Rest>, body: Option<Json<Value>>) -> Response {
    let Some(Json(b)) = body else {
        return err(
            StatusCode::BAD_REQUEST,
            "the request body must be a JSON object",
        );
    };
    let auth = match Auth::from_json(b["authType"].as_str(), &b["auth"]) {
        Ok(a) => a,
        Err(why) => {
            return err(
                StatusCode::BAD_REQUEST,
                &format!("failed to construct webhook create params: {why}"),
            );
        }
    };
    let text = |k: &str| b[k].as_str().unwrap_or_default().to_string();
    let (name, source, key) = (text("name"), text("sourceName"), text("eventKeyExpression"));
    if name.is_empty() || key.is_empty() || !SOURCES.contains(&source.as_str()) {
        return refused();
    }
    let now = s.engine.clock.system_now();
    let hook = Webhook {
        name: name.clone(),
        source,
        event_key_expression: key,
        scope_expression: b["scopeExpression"]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        static_payload: b.get("staticPayload").filter(|v| v.is_object()).cloned(),
        auth,
        return_event: b["returnEventAsResponsePayload"].as_bool().unwrap_or(true),
        created_at: now,
        updated_at: now,
    };
    let answer = hook.to_json(&s.engine.tenant_id);
    if !s.engine.add_webhook(&name, hook) {
        return refused();
    }
    Json(answer).into_response()
}

/// `GET .../webhooks`: newest first, every row (no pagination object, as on the real engine).
async fn list(AxState(s): AxState<Rest>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let p = Params(q);
    let (offset, limit) = match (p.number("offset", 0), p.number("limit", 20_000)) {
        (Ok(o), Ok(l)) if l > 0 => (o, l),
        _ => return err(StatusCode::BAD_REQUEST, "failed to list webhooks"),
    };
    let (sources, names) = (p.all("sourceNames"), p.all("webhookNames"));
    let st = s.engine.view();
    let mut hooks: Vec<&Webhook> = st
        .webhooks()
        .iter()
        .filter(|h| sources.is_empty() || sources.contains(&h.source))
        .filter(|h| names.is_empty() || names.contains(&h.name))
        .collect();
    hooks.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.name.cmp(&b.name)));
    let rows: Vec<Value> = hooks
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|h| h.to_json(&s.engine.tenant_id))
        .collect();
    Json(json!({ "rows": rows })).into_response()
}

async fn read(AxState(s): AxState<Rest>, Path((_, name)): Path<(String, String)>) -> Response {
    match s.engine.view().webhooks().get(&name) {
        Some(h) => Json(h.to_json(&s.engine.tenant_id)).into_response(),
        None => not_found(),
    }
}

/// `PATCH`: the fields given change (an empty scope clears it); auth and source stay.
async fn update(
    AxState(s): AxState<Rest>,
    Path((_, name)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    let b = body.map(|Json(b)| b).unwrap_or_default();
    let now = s.engine.clock.system_now();
    let changed = s.engine.update_webhook(&name, |h| {
        if let Some(k) = b["eventKeyExpression"].as_str() {
            if k.is_empty() {
                return Err("failed to update webhook");
            }
            h.event_key_expression = k.to_string();
        }
        if let Some(scope) = b["scopeExpression"].as_str() {
            h.scope_expression = (!scope.is_empty()).then(|| scope.to_string());
        }
        if let Some(p) = b.get("staticPayload").filter(|p| p.is_object()) {
            h.static_payload = Some(p.clone());
        }
        if let Some(r) = b["returnEventAsResponsePayload"].as_bool() {
            h.return_event = r;
        }
        h.updated_at = now;
        Ok(h.to_json(&s.engine.tenant_id))
    });
    match changed {
        Some(Ok(v)) => Json(v).into_response(),
        Some(Err(why)) => err(StatusCode::BAD_REQUEST, why),
        None => not_found(),
    }
}

/// `DELETE`: 200 with the deleted webhook.
async fn remove(AxState(s): AxState<Rest>, Path((_, name)): Path<(String, String)>) -> Response {
    match s.engine.remove_webhook(&name) {
        Some(h) => Json(h.to_json(&s.engine.tenant_id)).into_response(),
        None => not_found(),
    }
}

/// `POST .../webhooks/{name}`: checks the request, pushes its event, answers it (or 204).
async fn receive(
    AxState(s): AxState<Rest>,
    Path((tenant, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if tenant != s.engine.tenant_id {
        return not_found();
    }
    let Some(hook) = s.engine.view().webhooks().get(&name).cloned() else {
        return not_found();
    };
    // Slack's URL verification is answered before any check, as the real engine does.
    if hook.source == "SLACK"
        && let Ok(v) = serde_json::from_slice::<Value>(&body)
        && let Some(c) = v["challenge"].as_str().filter(|c| !c.is_empty())
    {
        return Json(json!({ "challenge": c })).into_response();
    }
    let lowered: Map<String, Value> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_lowercase(), json!(v.to_str().ok()?))))
        .fold(Map::new(), |mut m, (k, v)| {
            m.entry(k).or_insert(v);
            m
        });
    let now = s
        .engine
        .clock
        .system_now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if let Err((status, why)) = hook.check(&lowered, &body, now) {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
        return err(code, &why);
    }
    let content_type = lowered
        .get("content-type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let crate::store::webhooks::Incoming {
        key,
        payload,
        scope,
    } = match hook.event(content_type, &lowered, &body) {
        Ok(e) => e,
        Err(why) => return err(StatusCode::BAD_REQUEST, &why),
    };
    let req = hatchet_runtime::protocol::PushEventRequest {
        key: key.clone(),
        payload: Value::Object(payload.clone()).to_string(),
        event_timestamp: None,
        additional_metadata: None,
        priority: None,
        scope,
    };
    let pushed = match s.engine.push(&req) {
        Ok(e) => e,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.message()),
    };
    s.engine.mark_webhook_event(&pushed.event_id, &name);
    if !hook.return_event {
        return StatusCode::NO_CONTENT.into_response();
    }
    let at = hatchet_runtime::protocol::rfc3339(s.engine.clock.system_now());
    let summary = json!({"cancelled": 0, "failed": 0, "queued": 0, "running": 0, "succeeded": 0});
    Json(json!({"message": "ok", "event": {
        "metadata": {"id": pushed.event_id, "createdAt": at, "updatedAt": at},
        "key": key, "tenantId": s.engine.tenant_id, "payload": payload,
        "workflowRunSummary": summary,
    }}))
    .into_response()
}
