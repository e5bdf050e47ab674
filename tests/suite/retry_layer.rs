//! The retry core as a tower layer under the generated clients, against the development engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hatchet_dev_engine::Fault;
use hatchet_runtime::proto::{self, v1};
use hatchet_runtime::retry::class::ClassOverride;
use hatchet_runtime::retry::layer::{RetryChannel, RetryLayer};
use hatchet_runtime::retry::{BudgetConfig, Ledger, Policy, RetryCore};
use hatchet_runtime::transport::AuthInterceptor;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use hatchet_dev_engine::clients::RawClients;
use hatchet_dev_engine::{DevEngine, DevEngineOptions};

type Layered = RetryChannel<InterceptedService<Channel, AuthInterceptor>>;

fn layered(raw: &RawClients) -> Layered {
    let core = Arc::new(RetryCore::new(
        Policy::default(),
        BudgetConfig::default(),
        Arc::new(Ledger::default()),
        5,
    ));
    tower::ServiceBuilder::new()
        .layer(RetryLayer::new(core))
        .service(InterceptedService::new(
            raw.channel.clone(),
            raw.auth.clone(),
        ))
}

fn outage(code: Code) -> Fault {
    Fault::Fail {
        code: code as i32,
        message: "injected".into(),
        pushback_ms: None,
    }
}

#[tokio::test]
async fn generated_clients_get_retries_for_reads_and_none_for_writes_that_reached_the_engine() {
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    let raw = engine.raw_clients().expect("clients");
    let f = engine.faults();
    let mut d = proto::dispatcher_client::DispatcherClient::new(layered(&raw));
    f.inject("/Dispatcher/GetVersion", 2, outage(Code::Unavailable));
    let v = d
        .get_version(proto::GetVersionRequest {})
        .await
        .expect("third attempt succeeds");
    assert_eq!(v.into_inner().version, "v0.94.16");
    assert_eq!(f.attempts("/Dispatcher/GetVersion"), 3);

    raw.put_tasks("lw", &[("t", &[], 0, "")], &[])
        .await
        .expect("put");
    let mut w = proto::workflow_service_client::WorkflowServiceClient::new(layered(&raw));
    let trigger = || v1::TriggerWorkflowRequest {
        name: "lw".into(),
        input: "{}".into(),
        ..Default::default()
    };
    f.inject(
        "/WorkflowService/TriggerWorkflow",
        1,
        outage(Code::Unavailable),
    );
    let err = w
        .trigger_workflow(trigger())
        .await
        .expect_err("a write that reached the engine is sent once");
    assert_eq!(err.code(), Code::Unavailable, "the original status");
    assert_eq!(
        err.metadata()
            .get("x-hatchet-outcome")
            .and_then(|v| v.to_str().ok()),
        Some("maybe_executed")
    );
    assert_eq!(
        err.metadata()
            .get("x-hatchet-attempts")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(f.attempts("/WorkflowService/TriggerWorkflow"), 1);
    // A trigger the caller marks idempotent is retried.
    f.inject(
        "/WorkflowService/TriggerWorkflow",
        1,
        outage(Code::Unavailable),
    );
    let mut req = tonic::Request::new(trigger());
    req.extensions_mut().insert(ClassOverride::CallerIdempotent);
    w.trigger_workflow(req).await.expect("retried");
    assert_eq!(f.attempts("/WorkflowService/TriggerWorkflow"), 3);
}

#[tokio::test]
async fn streams_pass_through_and_the_callers_deadline_bounds_the_call() {
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    let raw = engine.raw_clients().expect("clients");
    let f = engine.faults();
    let mut d = proto::dispatcher_client::DispatcherClient::new(layered(&raw));
    f.inject("/Dispatcher/ListenV2", 1, outage(Code::Unavailable));
    let err = d
        .listen_v2(proto::WorkerListenRequest {
            worker_id: uuid::Uuid::new_v4().to_string(),
        })
        .await
        .expect_err("not retried");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.metadata().get("x-hatchet-outcome").is_none(),
        "streams never go through the retry core"
    );
    assert_eq!(f.attempts("/Dispatcher/ListenV2"), 1);

    f.inject("/Dispatcher/GetVersion", 5, Fault::Hang);
    let mut req = tonic::Request::new(proto::GetVersionRequest {});
    req.set_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let err = d.get_version(req).await.expect_err("deadline");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "bounded by the caller's deadline: {:?}",
        started.elapsed()
    );
    assert_eq!(
        err.metadata()
            .get("x-hatchet-outcome")
            .and_then(|v| v.to_str().ok()),
        Some("deadline_exceeded")
    );
    assert_eq!(f.attempts("/Dispatcher/GetVersion"), 1);
}
