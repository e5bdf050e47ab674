//! A worked test of a user's own workflow on the development engine: copy this module into your
//! service's tests (with `hatchet-dev-engine` as a dev-dependency) and change the workflow.
//!
//! It starts an engine, spawns a runtime with a worker, registers a workflow, runs it, then injects
//! two faults (a refused read, an engine restart right after a trigger) and asserts that the
//! caller saw neither and that the handler ran exactly once per run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions, Fault};
use hatchet_runtime::{Context, Runtime, TaskError, WorkerOptions, Workflow};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Order {
    id: u32,
    amount: u64,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Receipt {
    id: u32,
    total: u64,
}

/// The workflow under test: one task that prices an order, counting its executions.
fn pricing(executions: Arc<AtomicUsize>) -> Workflow {
    Workflow::new("pricing").task("price", move |o: Order, _c: Context| {
        let executions = executions.clone();
        async move {
            executions.fetch_add(1, Ordering::SeqCst);
            Ok::<_, TaskError>(Receipt {
                id: o.id,
                total: o.amount * 110 / 100,
            })
        }
    })
}

#[tokio::test]
async fn my_workflow_prices_orders_and_survives_an_engine_blip() {
    // 1. An engine of your own, on loopback, with a fresh tenant and token.
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("the engine starts");

    // 2. A runtime pointed at it, with the workflow registered and a worker of 4 slots.
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("the runtime starts");
    let executions = Arc::new(AtomicUsize::new(0));
    rt.register(pricing(executions.clone()))
        .await
        .expect("the workflow registers");
    rt.start_worker(WorkerOptions::new("test-worker", 4))
        .await
        .expect("the worker starts");

    // 3. Run it and check the typed result: the output of the workflow's one task.
    let receipt: Receipt = rt
        .run("pricing", &Order { id: 1, amount: 100 })
        .await
        .expect("the run completes");
    assert_eq!(receipt, Receipt { id: 1, total: 110 });

    // 4. Inject faults. First, the engine refuses the next two GetVersion calls with
    //    UNAVAILABLE: a read, so the runtime retries it and the caller sees the answer.
    let get_version = "/Dispatcher/GetVersion";
    let before = engine.faults().attempts(get_version);
    engine.faults().inject(
        get_version,
        2,
        Fault::Fail {
            code: tonic::Code::Unavailable as i32,
            message: "blip".into(),
            pushback_ms: None,
        },
    );
    let version = rt.engine_version().await.expect("the read is retried");
    assert!(!version.is_empty());
    assert_eq!(engine.faults().attempts(get_version) - before, 3);

    //    Second, the engine restarts right after a trigger: every stream is hung up, the runtime
    //    reconnects and re-subscribes, and the result still arrives.
    let run = rt
        .run_no_wait("pricing", &Order { id: 2, amount: 200 })
        .await
        .expect("the trigger is accepted");
    engine.restart().await.expect("the engine restarts");
    let receipt: Receipt = tokio::time::timeout(Duration::from_secs(30), run.result())
        .await
        .expect("the result arrives within 30 s")
        .expect("the run completes");
    assert_eq!(receipt, Receipt { id: 2, total: 220 });

    // 5. Assert what happened, counted where it happened: the engine holds two runs and the
    //    handler ran once per run (no duplicate execution across the restart).
    assert_eq!(engine.runs_by_workflow("pricing"), 2);
    assert_eq!(executions.load(Ordering::SeqCst), 2);

    rt.shutdown(Duration::from_secs(1)).await;
    engine.shutdown().await;
}
