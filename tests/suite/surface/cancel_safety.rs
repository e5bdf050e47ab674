//! Every `# Cancel safety` claim of the public API, proved by dropping the future at its await
//! points and checking what the claim promises (counted at the engine where it matters).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hatchet_dev_engine::Fault;
use hatchet_runtime::{Context, Outcome, TaskError, WorkerOptions, Workflow};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::support::echo;
use crate::support::engine_and_runtime as setup;
use crate::support::until as eventually;

#[tokio::test]
async fn shutdown_dropped_mid_drain_still_shuts_down() {
    let (e, rt) = setup().await;
    let (gate_tx, gate) = watch::channel(false);
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    rt.register(
        Workflow::new("gated").task("t", move |_i: Value, _c: Context| {
            let (mut gate, started_tx) = (gate.clone(), started_tx.clone());
            async move {
                let _ = started_tx.send(());
                let _ = gate.wait_for(|open| *open).await;
                Ok::<_, TaskError>(json!({}))
            }
        }),
    )
    .await
    .expect("register");
    // A workflow no worker of this runtime runs: its waiter can only end by shutdown.
    e.raw_clients()
        .expect("clients")
        .put_tasks("orphan", &[("t", &[], 0, "")], &[])
        .await
        .expect("put");
    crate::support::start_worker(&rt, 2).await;
    rt.run_no_wait("gated", &json!({})).await.expect("trigger");
    started.recv().await.expect("the task runs");
    let orphan = rt.run_no_wait("orphan", &json!({})).await.expect("trigger");
    let waiter = tokio::spawn(async move { orphan.result::<Value>().await });

    // The caller gives up while the drain waits for the gated task: the future is dropped.
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        rt.shutdown(Duration::from_secs(30)),
    )
    .await;
    assert!(dropped.is_err(), "dropped mid-drain");
    assert!(!rt.is_closed(), "the drain is still waiting for the task");
    gate_tx.send(true).expect("open the gate");
    // The shutdown goes on without its caller: the runtime closes and waiters fail.
    eventually("the runtime closes", || rt.is_closed()).await;
    let err = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter ends")
        .expect("joined")
        .expect_err("closed");
    assert_eq!(err.outcome(), Outcome::Closed);
    // A second call waits for the same shutdown and returns.
    tokio::time::timeout(Duration::from_secs(5), rt.shutdown(Duration::from_secs(1)))
        .await
        .expect("returns");
}

#[tokio::test]
async fn spawn_child_dropped_at_each_await_point_and_called_again_yields_one_child() {
    const TRIGGER: &str = "/WorkflowService/TriggerWorkflow";
    let (e, rt) = setup().await;
    let kid_runs = Arc::new(AtomicU32::new(0));
    let kid_runs2 = kid_runs.clone();
    rt.register(
        Workflow::new("kid").task("k", move |_i: Value, _c: Context| {
            let kid_runs = kid_runs2.clone();
            async move {
                kid_runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, TaskError>(json!({"kid": true}))
            }
        }),
    )
    .await
    .expect("register kid");
    let (go_tx, go) = watch::channel(false);
    let (ready_tx, mut ready) = mpsc::unbounded_channel::<()>();
    rt.register(
        Workflow::new("parent").task("p", move |_i: Value, c: Context| {
            let (mut go, ready_tx) = (go.clone(), ready_tx.clone());
            async move {
                let _ = ready_tx.send(());
                let _ = go.wait_for(|g| *g).await;
                // Await point 1, before the engine acts: the trigger hangs, the caller gives up.
                let hung = tokio::time::timeout(
                    Duration::from_millis(200),
                    c.spawn_child("kid", &json!({})),
                )
                .await;
                assert!(hung.is_err(), "dropped while the request hangs");
                // Await point 1, after the engine acted: the child exists, its answer is late, the
                // caller gives up.
                let late = tokio::time::timeout(
                    Duration::from_millis(200),
                    c.spawn_child("kid", &json!({})),
                )
                .await;
                assert!(late.is_err(), "dropped while the answer is held back");
                // Called again: the same index, so the engine answers with the same child.
                let child = c.spawn_child("kid", &json!({})).await?;
                let out: Value = child.result().await?;
                Ok::<_, TaskError>(json!({"child": child.run_id(), "out": out}))
            }
        }),
    )
    .await
    .expect("register parent");
    crate::support::start_worker(&rt, 4).await;
    let parent = rt.run_no_wait("parent", &json!({})).await.expect("trigger");
    ready.recv().await.expect("the parent runs");
    let f = e.faults();
    f.inject(TRIGGER, 1, Fault::Hang);
    f.inject(TRIGGER, 1, Fault::DelayAnswer { ms: 1000 });
    go_tx.send(true).expect("go");
    let out: Value = tokio::time::timeout(Duration::from_secs(20), parent.result())
        .await
        .expect("in time")
        .expect("the parent completes");
    assert_eq!(out["out"], json!({"kid": true}));
    assert_eq!(
        e.runs_by_workflow("kid"),
        1,
        "one child run at the engine for three calls"
    );
    assert_eq!(kid_runs.load(Ordering::SeqCst), 1, "the child ran once");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_dropped_spawn_never_hands_its_index_to_a_spawn_of_another_workflow() {
    const TRIGGER: &str = "/WorkflowService/TriggerWorkflow";
    let (e, rt) = setup().await;
    for name in ["first", "second"] {
        rt.register(
            Workflow::new(name).task("k", move |_i: Value, _c: Context| async move {
                Ok::<_, TaskError>(json!({ "ran": name }))
            }),
        )
        .await
        .expect("register");
    }
    let (go_tx, go) = watch::channel(false);
    rt.register(
        Workflow::new("parent").task("p", move |_i: Value, c: Context| {
            let mut go = go.clone();
            async move {
                let _ = go.wait_for(|g| *g).await;
                // The engine creates the child; its answer is late and the caller gives up.
                let late = tokio::time::timeout(
                    Duration::from_millis(200),
                    c.spawn_child("first", &json!({})),
                )
                .await;
                assert!(late.is_err(), "dropped while the answer is held back");
                let other = c.spawn_child("second", &json!({})).await?;
                let out: Value = other.result().await?;
                Ok::<_, TaskError>(out)
            }
        }),
    )
    .await
    .expect("register parent");
    crate::support::start_worker(&rt, 4).await;
    let parent = rt.run_no_wait("parent", &json!({})).await.expect("trigger");
    e.faults()
        .inject(TRIGGER, 1, Fault::DelayAnswer { ms: 1000 });
    go_tx.send(true).expect("go");
    let out: Value = tokio::time::timeout(Duration::from_secs(20), parent.result())
        .await
        .expect("in time")
        .expect("the parent completes");
    assert_eq!(
        out,
        json!({ "ran": "second" }),
        "the second spawn got its own workflow's run, not the dropped spawn's child"
    );
    assert_eq!(e.runs_by_workflow("first"), 1);
    assert_eq!(e.runs_by_workflow("second"), 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn register_and_start_worker_dropped_after_they_were_sent_still_take_effect() {
    let (e, rt) = setup().await;
    // Dropped after its first poll (the message is with the worker actor): the definition is
    // registered anyway, and a start that follows includes it.
    let dropped = tokio::time::timeout(Duration::ZERO, rt.register(echo())).await;
    assert!(dropped.is_err(), "dropped before it answered");
    // start_worker dropped the same way: the worker starts anyway, with that workflow.
    let dropped =
        tokio::time::timeout(Duration::ZERO, rt.start_worker(WorkerOptions::new("w", 2))).await;
    assert!(dropped.is_err(), "dropped before it answered");
    eventually("the worker registers without its caller", || {
        rt.worker_id().is_some()
    })
    .await;
    let out: Value = rt.run("echo", &json!({"x": 7})).await.expect("runs");
    assert_eq!(out, json!({"x": 7}));
    assert_eq!(e.faults().attempts("/v1.AdminService/PutWorkflow"), 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_read_dropped_mid_attempt_starts_no_other_attempt() {
    const PATH: &str = "/Dispatcher/GetVersion";
    let (e, rt) = setup().await;
    e.faults().inject(PATH, 1, Fault::Hang);
    let dropped = tokio::time::timeout(Duration::from_millis(100), rt.engine_version()).await;
    assert!(dropped.is_err(), "dropped mid-attempt");
    assert_eq!(e.faults().attempts(PATH), 1);
    // The next read is one attempt of its own: nothing of the dropped one went on retrying.
    let v = rt.engine_version().await.expect("read");
    assert!(!v.is_empty());
    assert_eq!(e.faults().attempts(PATH), 2);
    rt.shutdown(Duration::from_secs(1)).await;
}
