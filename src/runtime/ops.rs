//! The worker's operations endpoints, for probes and dashboards: `GET /health` and
//! `GET /metrics` (Prometheus / OpenMetrics text), switched on as the official Python SDK switches
//! them (`HATCHET_CLIENT_WORKER_HEALTHCHECK_ENABLED`, `..._PORT`, or the config builder).
//!
//! # Invariants
//!
//! 1. What a probe sees is decided by pure functions over snapshots ([`health`],
//!    [`metrics_text`]); the server only reads snapshots (short locks, no awaits on the network),
//!    so a probe never blocks the runtime and a slow runtime never blocks a probe.
//! 2. Two probes, as Kubernetes reads them. `/live` (liveness) is 200 while the process and
//!    its actor tree work: the runtime is not shut down, its supervisors and worker actor run,
//!    and no listener stopped with an error (a deaf part, which a restart may cure). An engine
//!    outage never fails it: a reconnecting listener is alive. `/ready` (readiness) is 200
//!    while the process is live and the worker's actions stream is connected, so work can
//!    reach it. `/health` answers as `/ready` does, with every listener's state in the body
//!    (the Python SDK's one endpoint, which users probe for readiness).
//! 3. Other paths are 404; other methods on the endpoints are 405 with `Allow: GET`.
//! 4. The server lives until the runtime's lifecycle token is cancelled.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::RuntimeHandle;
use crate::listener::health::{ListenerKind, ListenerState};
use crate::retry::MethodCounters;
use crate::worker::TaskCounts;

/// Everything the two endpoints show, read at once.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// Each listener's state.
    pub listeners: BTreeMap<ListenerKind, ListenerState>,
    /// Reconnects per listener.
    pub reconnects: BTreeMap<ListenerKind, u64>,
    /// The worker's task counts.
    pub tasks: TaskCounts,
    /// The worker id, once registered.
    pub worker_id: Option<String>,
    /// Attempt counters per method (unary gRPC and REST).
    pub methods: BTreeMap<String, MethodCounters>,
    /// Task log lines dropped.
    pub logs_dropped: u64,
    /// Whether the runtime is up and its actor tree runs (supervisors and the worker actor).
    pub tree_alive: bool,
}

impl Snapshot {
    /// Reads it from a runtime.
    pub(crate) fn of(rt: &RuntimeHandle) -> Snapshot {
        Snapshot {
            listeners: rt
                .health()
                .into_iter()
                .map(|(k, rx)| (k, rx.borrow().clone()))
                .collect(),
            reconnects: rt.reconnects(),
            tasks: rt.task_counts(),
            worker_id: rt.worker_id(),
            methods: rt.counters(),
            logs_dropped: rt.logs_dropped(),
            tree_alive: rt.actor_tree_alive(),
        }
    }
}

fn state_name(s: &ListenerState) -> &'static str {
    match s {
        ListenerState::Idle => "idle",
        ListenerState::Connecting => "connecting",
        ListenerState::Connected { .. } => "connected",
        ListenerState::Reconnecting { .. } => "reconnecting",
        ListenerState::Stopped { .. } => "stopped",
    }
}

/// What the probes decide (invariant 2): whether the process is live, why not, and whether it
/// is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probes {
    /// Live: the actor tree works and no listener stopped with an error.
    pub live: bool,
    /// Ready: live, and the worker's actions stream is connected.
    pub ready: bool,
    /// Why it is not live or not ready (empty when it is both).
    pub reason: String,
}

/// Decides both probes from a snapshot.
pub(crate) fn probes(s: &Snapshot) -> Probes {
    let stopped: Vec<&str> = s
        .listeners
        .iter()
        .filter(|(_, l)| matches!(l, ListenerState::Stopped { error: Some(_) }))
        .map(|(k, _)| k.as_str())
        .collect();
    let actions_connected = matches!(
        s.listeners.get(&ListenerKind::WorkerActions),
        Some(ListenerState::Connected { .. })
    );
    let live = s.tree_alive && stopped.is_empty();
    let reason = if !s.tree_alive {
        "the runtime is shut down or its actor tree is not running".to_string()
    } else if !stopped.is_empty() {
        format!("stopped with an error: {}", stopped.join(", "))
    } else if !actions_connected {
        "the worker's actions stream is not connected (not started yet, or reconnecting)".into()
    } else {
        String::new()
    };
    Probes {
        live,
        ready: live && actions_connected,
        reason,
    }
}

fn code(ok: bool) -> StatusCode {
    if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// One probe's answer: 200 and `yes`, or 503, `no` and the reason.
fn probe(ok: bool, yes: &str, no: &str, reason: String) -> (StatusCode, serde_json::Value) {
    let mut body = serde_json::json!({ "status": if ok { yes } else { no } });
    if !ok {
        body["reason"] = reason.into();
    }
    (code(ok), body)
}

/// `/live` (invariant 2): the status code and the JSON body.
pub(crate) fn live(s: &Snapshot) -> (StatusCode, serde_json::Value) {
    let p = probes(s);
    probe(p.live, "live", "not_live", p.reason)
}

/// `/ready` (invariant 2): the status code and the JSON body.
pub(crate) fn ready(s: &Snapshot) -> (StatusCode, serde_json::Value) {
    let p = probes(s);
    probe(p.ready, "ready", "not_ready", p.reason)
}

/// `/health` (invariant 2): answers as `/ready`, with every listener's state.
pub(crate) fn health(s: &Snapshot) -> (StatusCode, serde_json::Value) {
    let p = probes(s);
    let listeners: serde_json::Map<String, serde_json::Value> = s
        .listeners
        .iter()
        .map(|(k, l)| {
            let mut v = serde_json::json!({ "state": state_name(l) });
            match l {
                ListenerState::Reconnecting {
                    attempts,
                    last_error,
                    ..
                } => {
                    v["attempts"] = (*attempts).into();
                    v["last_error"] = last_error.clone().into();
                }
                ListenerState::Stopped { error: Some(e) } => v["error"] = e.clone().into(),
                _ => {}
            }
            (k.as_str().to_string(), v)
        })
        .collect();
    let mut body = serde_json::json!({
        "status": if p.ready { "healthy" } else { "unhealthy" },
        "live": p.live,
        "ready": p.ready,
        "worker_id": s.worker_id,
        "slots": { "total": s.tasks.slots, "in_use": s.tasks.running },
        "listeners": listeners,
    });
    if !p.ready {
        body["reason"] = p.reason.into();
    }
    (code(p.ready), body)
}

type Labels = Vec<(String, String)>;

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `/metrics` (OpenMetrics text, which Prometheus reads), rendered from a snapshot.
pub(crate) fn metrics_text(s: &Snapshot) -> String {
    let mut r = Registry::with_prefix("hatchet");
    let tasks = Family::<Labels, Counter>::default();
    for (outcome, n) in [
        ("started", s.tasks.started),
        ("completed", s.tasks.completed),
        ("failed", s.tasks.failed),
        ("cancelled", s.tasks.cancelled),
    ] {
        tasks.get_or_create(&label(&[("event", outcome)])).inc_by(n);
    }
    r.register("tasks", "Task attempts by what happened to them", tasks);
    let slots = Family::<Labels, Gauge>::default();
    slots
        .get_or_create(&label(&[("state", "in_use")]))
        .set(s.tasks.running as i64);
    slots
        .get_or_create(&label(&[("state", "free")]))
        .set(s.tasks.slots.saturating_sub(s.tasks.running) as i64);
    r.register("worker_slots", "Worker slots in use and free", slots);
    let attempts = Family::<Labels, Counter>::default();
    let retries = Family::<Labels, Counter>::default();
    let refusals = Family::<Labels, Counter>::default();
    let outcomes = Family::<Labels, Counter>::default();
    for (method, c) in &s.methods {
        attempts
            .get_or_create(&label(&[("method", method)]))
            .inc_by(c.attempts);
        retries
            .get_or_create(&label(&[("method", method)]))
            .inc_by(c.retries);
        refusals
            .get_or_create(&label(&[("method", method)]))
            .inc_by(c.budget_refusals);
        for (outcome, n) in &c.outcomes {
            outcomes
                .get_or_create(&label(&[("method", method), ("outcome", outcome)]))
                .inc_by(*n);
        }
    }
    r.register(
        "network_attempts",
        "Network attempts (first attempts and retries) by method",
        attempts,
    );
    r.register("retries", "Retries by method", retries);
    r.register(
        "retry_budget_refusals",
        "Retries refused because the endpoint's retry budget was spent",
        refusals,
    );
    r.register(
        "operations",
        "Finished operations by method and outcome",
        outcomes,
    );
    let reconnects = Family::<Labels, Counter>::default();
    for (k, n) in &s.reconnects {
        reconnects
            .get_or_create(&label(&[("listener", k.as_str())]))
            .inc_by(*n);
    }
    r.register(
        "listener_reconnects",
        "Stream reconnects by listener",
        reconnects,
    );
    let states = Family::<Labels, Gauge>::default();
    for (k, l) in &s.listeners {
        for name in ["idle", "connecting", "connected", "reconnecting", "stopped"] {
            states
                .get_or_create(&label(&[("listener", k.as_str()), ("state", name)]))
                .set(i64::from(state_name(l) == name));
        }
    }
    r.register(
        "listener_state",
        "1 for each listener's current state, 0 for the others",
        states,
    );
    let dropped = Counter::<u64>::default();
    dropped.inc_by(s.logs_dropped);
    r.register(
        "log_lines_dropped",
        "Task log lines dropped because the engine did not take them fast enough",
        dropped,
    );
    let mut out = String::new();
    // Writing into a String cannot fail; an empty body is the fallback all the same.
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

fn reply(code: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// Answers one request (invariant 3).
fn answer(rt: &RuntimeHandle, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/health" | "/live" | "/ready" | "/metrics") {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /live, /ready, /health or /metrics\n".into(),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET is allowed here\n".into(),
        );
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET"),
        );
        return r;
    }
    let snapshot = Snapshot::of(rt);
    let probe = match path {
        "/health" => Some(health(&snapshot)),
        "/live" => Some(live(&snapshot)),
        "/ready" => Some(ready(&snapshot)),
        _ => None,
    };
    if let Some((code, body)) = probe {
        reply(code, "application/json", body.to_string())
    } else {
        reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics_text(&snapshot),
        )
    }
}

/// Binds `addr` and serves the endpoints until `life` is cancelled; the bound address.
///
/// # Errors
/// The address cannot be bound (in use, not allowed).
///
/// # Cancel safety
///
/// Cancel safe: dropping it before it returns binds nothing that outlives it.
pub(crate) async fn serve(
    rt: std::sync::Weak<super::Inner>,
    addr: SocketAddr,
    life: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = life.cancelled() => return,
            };
            let stream = match accepted {
                Ok((s, _)) => {
                    failures = 0;
                    s
                }
                Err(e) => {
                    // Out of file descriptors, say: accept fails at once, again and again, so
                    // the loop pauses instead of spinning a core.
                    failures = failures.saturating_add(1);
                    if failures == 1 {
                        tracing::warn!(error = %e, "the ops endpoint cannot accept connections; pausing between tries");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(accept_pause(failures)) => continue,
                        _ = life.cancelled() => return,
                    }
                }
            };
            let _ = stream.set_nodelay(true);
            let (rt, life) = (rt.clone(), life.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let r = match RuntimeHandle::upgrade(&rt) {
                        Some(rt) => answer(&rt, &req),
                        None => reply(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "text/plain",
                            "the runtime has stopped\n".into(),
                        ),
                    };
                    async move { Ok::<_, Infallible>(r) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                tokio::select! {
                    _ = conn => {}
                    _ = life.cancelled() => {}
                }
            });
        }
    });
    Ok(bound)
}

/// How long the ops endpoint pauses after `failures` accept errors in a row (a pure rule):
/// 10 ms, doubling, at most 1 s.
fn accept_pause(failures: u32) -> std::time::Duration {
    let ms = 10u64.saturating_mul(1 << failures.saturating_sub(1).min(10));
    std::time::Duration::from_millis(ms.min(1_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors_pause_the_loop_longer_each_time_up_to_a_second() {
        let ms = |n| accept_pause(n).as_millis();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(7), ms(8)],
            [10, 20, 40, 640, 1_000]
        );
        assert_eq!(ms(u32::MAX), 1_000);
    }

    fn snapshot(actions: ListenerState, runs: ListenerState) -> Snapshot {
        Snapshot {
            listeners: BTreeMap::from([
                (ListenerKind::WorkerActions, actions),
                (ListenerKind::WorkflowRuns, runs),
            ]),
            tree_alive: true,
            ..Snapshot::default()
        }
    }

    #[test]
    fn an_engine_outage_fails_readiness_and_never_liveness() {
        let connected = ListenerState::Connected {
            since: tokio::time::Instant::now(),
        };
        let reconnecting = ListenerState::Reconnecting {
            since: tokio::time::Instant::now(),
            attempts: 7,
            last_error: "status Unavailable".into(),
        };
        let (code, body) = health(&snapshot(connected.clone(), ListenerState::Idle));
        assert_eq!(
            code,
            StatusCode::OK,
            "an idle listener nobody needs is healthy"
        );
        assert_eq!(body["status"], "healthy");
        assert_eq!(body["listeners"]["workflow_runs"]["state"], "idle");
        assert_eq!(
            live(&snapshot(connected.clone(), ListenerState::Idle)).0,
            StatusCode::OK
        );
        assert_eq!(
            ready(&snapshot(connected.clone(), ListenerState::Idle)).0,
            StatusCode::OK
        );

        // The engine is down: every listener reconnects. Alive, not ready.
        let outage = snapshot(reconnecting.clone(), reconnecting.clone());
        assert_eq!(
            live(&outage).0,
            StatusCode::OK,
            "an outage never fails liveness"
        );
        let (code, body) = ready(&outage);
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body["reason"]
                .as_str()
                .is_some_and(|r| r.contains("actions stream")),
            "{body}"
        );
        let (code, body) = health(&outage);
        assert_eq!(
            code,
            StatusCode::SERVICE_UNAVAILABLE,
            "/health answers as /ready"
        );
        assert_eq!(
            (body["live"].clone(), body["ready"].clone()),
            (true.into(), false.into())
        );
        assert_eq!(body["listeners"]["worker_actions"]["attempts"], 7);
        // Another listener reconnecting while the actions stream is up: still ready.
        assert_eq!(
            ready(&snapshot(connected.clone(), reconnecting)).0,
            StatusCode::OK
        );

        // A listener stopped with an error is a deaf part: not live.
        let deaf = snapshot(
            connected.clone(),
            ListenerState::Stopped {
                error: Some("permanent error: Unauthenticated".into()),
            },
        );
        let (code, body) = live(&deaf);
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body["reason"]
                .as_str()
                .is_some_and(|r| r.contains("workflow_runs")),
            "{body}"
        );
        let (code, body) = health(&deaf);
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body["listeners"]["workflow_runs"]["error"],
            "permanent error: Unauthenticated"
        );
        let (code, _) = health(&snapshot(ListenerState::Idle, ListenerState::Idle));
        assert_eq!(
            code,
            StatusCode::SERVICE_UNAVAILABLE,
            "no worker stream yet"
        );

        // A runtime whose actor tree is gone is not live, whatever the listeners say.
        let mut gone = snapshot(connected, ListenerState::Idle);
        gone.tree_alive = false;
        assert_eq!(live(&gone).0, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn metrics_render_every_family_in_text_format() {
        let mut s = snapshot(ListenerState::Idle, ListenerState::Idle);
        s.tasks = TaskCounts {
            started: 3,
            completed: 2,
            failed: 1,
            slots: 8,
            running: 1,
            ..TaskCounts::default()
        };
        s.reconnects.insert(ListenerKind::WorkflowRuns, 4);
        s.logs_dropped = 5;
        let text = metrics_text(&s);
        for line in [
            "hatchet_tasks_total{event=\"completed\"} 2",
            "hatchet_tasks_total{event=\"failed\"} 1",
            "hatchet_worker_slots{state=\"free\"} 7",
            "hatchet_listener_reconnects_total{listener=\"workflow_runs\"} 4",
            "hatchet_listener_state{listener=\"worker_actions\",state=\"idle\"} 1",
            "hatchet_log_lines_dropped_total 5",
            "# EOF",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
