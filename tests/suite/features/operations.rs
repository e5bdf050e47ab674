//! Operating a worker: the `/live`, `/ready`, `/health` and `/metrics` endpoints, switched on by the config, over
//! real HTTP against a worker on the development engine.

use std::time::Duration;

use hatchet_dev_engine::Fault;
use hatchet_runtime::config::ClientConfig;
use hatchet_runtime::health::ListenerKind;
use hatchet_runtime::{Context, RuntimeOptions, TaskError, WorkerOptions, Workflow};
use serde_json::{Value, json};
use tonic::Code;

use crate::support::until_listener;
use crate::support::{fast, stopped};

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().expect("client")
}

/// Our engine and a runtime whose worker (`echo` and `boom`, 4 slots) serves the health and
/// metrics endpoints, its actions stream connected; with the endpoints' base URL.
async fn served() -> (
    hatchet_dev_engine::DevEngine,
    hatchet_runtime::RuntimeHandle,
    String,
) {
    let e = crate::support::engine().await;
    let mut config = e.client_config();
    config.healthcheck = Some(([127, 0, 0, 1], 0).into());
    let rt =
        crate::support::runtime_from(config, RuntimeOptions::new().stream_backoff(fast())).await;
    rt.register(crate::support::echo()).await.expect("register");
    rt.register(
        Workflow::new("boom").task("t", |_i: Value, _c: Context| async move {
            Err::<Value, _>(TaskError::non_retryable("boom"))
        }),
    )
    .await
    .expect("register");
    assert_eq!(rt.ops_addr(), None, "served once the worker starts");
    crate::support::start_worker(&rt, 4).await;
    let addr = rt.ops_addr().expect("serving");
    until_listener(&rt, ListenerKind::WorkerActions, |s| {
        matches!(s, hatchet_runtime::health::ListenerState::Connected { .. })
    })
    .await;
    (e, rt, format!("http://{addr}"))
}

/// An endpoint's status code and JSON body.
async fn probe(base: &str, path: &str) -> (u16, Value) {
    let r = http()
        .get(format!("{base}{path}"))
        .send()
        .await
        .expect("get");
    let code = r.status().as_u16();
    (code, r.json::<Value>().await.expect("json"))
}

#[tokio::test]
async fn health_and_metrics_endpoints_report_the_worker() {
    let (_e, rt, base) = served().await;
    let client = http();
    let (code, body) = probe(&base, "/health").await;
    assert_eq!(code, 200);
    assert_eq!(body["status"], "healthy");
    assert_eq!(body["listeners"]["worker_actions"]["state"], "connected");
    assert_eq!(body["worker_id"], json!(rt.worker_id()));
    // 4 default slots; no durable pool: none of its tasks is durable (as the official SDKs).
    assert_eq!(body["slots"]["total"], 4, "4 default, no durable pool");

    let _: Value = rt.run("echo", &json!({"x": 1})).await.expect("echo");
    let _ = rt.run::<_, Value>("boom", &json!({})).await;
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("text");
    for line in [
        "hatchet_tasks_total{event=\"started\"} 2",
        "hatchet_tasks_total{event=\"completed\"} 1",
        "hatchet_tasks_total{event=\"failed\"} 1",
        "hatchet_worker_slots{state=\"free\"} 4",
        "hatchet_network_attempts_total{method=\"/WorkflowService/TriggerWorkflow\"} 2",
        "hatchet_listener_state{listener=\"worker_actions\",state=\"connected\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    // Bad requests: another method, another path.
    let r = client
        .post(format!("{base}/health"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET");
    let r = client
        .get(format!("{base}/nope"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
    rt.shutdown(Duration::from_secs(1)).await;
    // The server ends with the runtime.
    assert!(client.get(format!("{base}/health")).send().await.is_err());
}

/// The engine goes away: the actions stream reconnects. Not ready; still live (a liveness
/// probe that failed here would restart every worker of a fleet during an engine outage); ready
/// again once reconnected.
#[tokio::test]
async fn while_the_engine_is_away_the_worker_is_live_but_not_ready() {
    let (e, rt, base) = served().await;
    assert_eq!(probe(&base, "/live").await.0, 200);
    assert_eq!(probe(&base, "/ready").await.0, 200);
    e.faults().inject(
        "/Dispatcher/ListenV2",
        1_000,
        crate::support::fail(Code::Unavailable, "engine down"),
    );
    e.faults().drop_connections();
    until_listener(&rt, ListenerKind::WorkerActions, |s| {
        matches!(
            s,
            hatchet_runtime::health::ListenerState::Reconnecting { .. }
        )
    })
    .await;
    let (code, body) = probe(&base, "/ready").await;
    assert_eq!(
        (code, body["status"].as_str()),
        (503, Some("not_ready")),
        "{body}"
    );
    let (code, body) = probe(&base, "/live").await;
    assert_eq!(
        (code, body["status"].as_str()),
        (200, Some("live")),
        "{body}"
    );
    assert_eq!(
        probe(&base, "/health").await.0,
        503,
        "/health answers as /ready"
    );
    e.faults().clear();
    until_listener(&rt, ListenerKind::WorkerActions, |s| {
        matches!(s, hatchet_runtime::health::ListenerState::Connected { .. })
    })
    .await;
    assert_eq!(
        probe(&base, "/ready").await.0,
        200,
        "ready again once reconnected"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A listener that stops for good makes the probes fail, and says which and why: a deaf worker
/// is neither healthy nor live.
#[tokio::test]
async fn a_listener_stopped_for_good_fails_health_and_liveness_and_says_why() {
    let (e, rt, base) = served().await;
    e.faults().inject(
        "/Dispatcher/ListenV2",
        1,
        Fault::EndStream {
            after: 0,
            code: Some(Code::PermissionDenied as i32),
        },
    );
    e.faults().drop_connections();
    until_listener(&rt, ListenerKind::WorkerActions, stopped).await;
    let (code, body) = probe(&base, "/health").await;
    assert_eq!(code, 503);
    assert_eq!(body["status"], "unhealthy");
    assert_eq!(body["listeners"]["worker_actions"]["state"], "stopped");
    assert!(
        body["listeners"]["worker_actions"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("PermissionDenied")),
        "{body}"
    );
    let (code, body) = probe(&base, "/live").await;
    assert_eq!(
        code, 503,
        "a listener stopped for good is a deaf worker: {body}"
    );
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("worker_actions")),
        "{body}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[test]
fn the_healthcheck_is_switched_on_like_the_python_sdk_s() {
    let token = hatchet_runtime::config::encode_dev_token(
        "00000000-0000-0000-0000-000000000001",
        "http://127.0.0.1:8080",
        "127.0.0.1:7077",
        4_102_444_800,
        "t",
    )
    .expose()
    .to_string();
    let env = |extra: &[(&str, &str)]| {
        let mut vars = vec![("HATCHET_CLIENT_TOKEN".to_string(), token.clone())];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    };
    let off = ClientConfig::from_lookup(env(&[])).expect("config");
    assert_eq!(off.healthcheck, None);
    let on = ClientConfig::from_lookup(env(&[(
        "HATCHET_CLIENT_WORKER_HEALTHCHECK_ENABLED",
        "true",
    )]))
    .expect("config");
    assert_eq!(on.healthcheck, Some(([0, 0, 0, 0], 8001).into()));
    let port = ClientConfig::from_lookup(env(&[
        ("HATCHET_CLIENT_WORKER_HEALTHCHECK_ENABLED", "true"),
        ("HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT", "9100"),
    ]))
    .expect("config");
    assert_eq!(port.healthcheck, Some(([0, 0, 0, 0], 9100).into()));
    let err = ClientConfig::from_lookup(env(&[
        ("HATCHET_CLIENT_WORKER_HEALTHCHECK_ENABLED", "true"),
        ("HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT", "eighty"),
    ]))
    .expect_err("not a port");
    assert!(
        err.to_string()
            .contains("HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT = \"eighty\" is not a port number"),
        "{err}"
    );
}

#[tokio::test]
async fn a_task_s_tracing_events_reach_the_engine_as_its_logs_with_the_layer() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let subscriber = tracing_subscriber::registry().with(hatchet_runtime::task::TaskLogLayer);
    // The test runtime is current-thread: every task of this test sees this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);
    let e = crate::support::engine().await;
    let rt = crate::support::runtime(&e).await;
    let (id_tx, mut id_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    rt.register(
        Workflow::new("chatty").task("t", move |_i: Value, c: Context| {
            let id_tx = id_tx.clone();
            async move {
                let _ = id_tx.send(c.task_run_id().to_string());
                tracing::warn!(free_gb = 3, "disk almost full");
                c.log_at(tracing::Level::ERROR, "explicit line");
                Ok::<_, TaskError>(json!({}))
            }
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let _: Value = rt.run("chatty", &json!({})).await.expect("run");
    // Outside a task nothing is forwarded (and nothing panics).
    tracing::warn!("not inside a task");
    let task = id_rx.recv().await.expect("task id");
    let want = vec![
        ("WARN".to_string(), "disk almost full free_gb=3".to_string()),
        ("ERROR".to_string(), "explicit line".to_string()),
    ];
    tokio::time::timeout(Duration::from_secs(5), async {
        while e.task_logs(&task).len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("both lines arrive");
    let mut got = e.task_logs(&task);
    got.sort();
    let mut want = want;
    want.sort();
    assert_eq!(got, want);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Records the fields of every span named `task`.
#[derive(Clone, Default)]
struct TaskSpans(
    std::sync::Arc<parking_lot::Mutex<Vec<std::collections::BTreeMap<String, String>>>>,
);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for TaskSpans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Fields<'a>(&'a mut std::collections::BTreeMap<String, String>);
        impl tracing::field::Visit for Fields<'_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.insert(f.name().to_string(), format!("{v:?}"));
            }
        }
        if attrs.metadata().name() == "task" {
            let mut fields = std::collections::BTreeMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().push(fields);
        }
    }
}

#[tokio::test]
async fn each_task_execution_runs_in_a_span_naming_its_run_and_worker() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let spans = TaskSpans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let e = crate::support::engine().await;
    let rt = crate::support::runtime(&e).await;
    rt.register(
        Workflow::new("spanned").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        ),
    )
    .await
    .expect("register");
    let worker = rt
        .start_worker(WorkerOptions::new("w", 2))
        .await
        .expect("start");
    let run = rt
        .run_no_wait("spanned", &json!({}))
        .await
        .expect("trigger");
    let _: Value = run.result().await.expect("run");
    let spans = spans.0.lock().clone();
    assert_eq!(spans.len(), 1, "one span per execution: {spans:?}");
    let s = &spans[0];
    assert_eq!(s["workflow"], "spanned");
    assert_eq!(s["task"], "spanned:t");
    assert_eq!(s["run_id"], run.run_id());
    assert_eq!(s["retry_count"], "0");
    assert_eq!(s["worker_id"], worker);
    rt.shutdown(Duration::from_secs(1)).await;
}
