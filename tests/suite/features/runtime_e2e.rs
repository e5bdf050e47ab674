//! The user-facing runtime against the development engine: register, run, await, DAGs, durable
//! tasks, children, idempotent triggers, failures, panics, cancellation and shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hatchet_runtime::health::{ListenerKind, ListenerState};
use hatchet_runtime::{Context, Outcome, TaskError, TaskOptions, TriggerOptions, Workflow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Num {
    n: i64,
}

use crate::support::engine_and_runtime as setup;

fn doubler() -> Workflow {
    Workflow::new("doubler").task("double", |i: Num, _ctx: Context| async move {
        Ok::<_, TaskError>(Num { n: i.n * 2 })
    })
}

#[tokio::test]
async fn run_returns_the_typed_output() {
    let (_e, rt) = setup().await;
    rt.register(doubler()).await.expect("register");
    crate::support::start_worker(&rt, 8).await;
    let out: Num = rt.run("doubler", &Num { n: 21 }).await.expect("run");
    assert_eq!(out, Num { n: 42 });
    // Many concurrently, each result to its own caller.
    let handles = rt
        .run_many("doubler", &(0..50).map(|n| Num { n }).collect::<Vec<_>>())
        .await;
    for (n, h) in handles.into_iter().enumerate() {
        let out: Num = h.expect("trigger").result().await.expect("result");
        assert_eq!(out.n, 2 * n as i64);
    }
    assert!(rt.worker_id().is_some());
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_dag_child_reads_its_parents_outputs() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("dag")
        .task("a", |i: Num, _c: Context| async move {
            Ok::<_, TaskError>(Num { n: i.n + 1 })
        })
        .task("b", |i: Num, _c: Context| async move {
            Ok::<_, TaskError>(Num { n: i.n + 2 })
        })
        .task_with(
            "sum",
            TaskOptions::new().parents(["a", "b"]),
            |_i: Value, c: Context| async move {
                let a: Num = c.parent_output("a")?;
                let b: Num = c.parent_output("b")?;
                Ok::<_, TaskError>(Num { n: a.n + b.n })
            },
        );
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 4).await;
    let out: Value = rt.run("dag", &Num { n: 10 }).await.expect("run");
    assert_eq!(out["sum"]["n"], 23);
    assert_eq!(out["a"]["n"], 11);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn failures_retries_non_retryable_errors_and_panics() {
    let (_e, rt) = setup().await;
    let tries = Arc::new(AtomicU32::new(0));
    let t2 = tries.clone();
    let wf = Workflow::new("flaky").task_with(
        "t",
        TaskOptions::new().retries(2),
        move |_i: Value, c: Context| {
            let tries = t2.clone();
            async move {
                tries.fetch_add(1, Ordering::SeqCst);
                if c.retry_count() < 2 {
                    Err(TaskError::new("not yet"))
                } else {
                    Ok(json!({"attempt": c.retry_count()}))
                }
            }
        },
    );
    let fatal = Workflow::new("fatal").task_with(
        "t",
        TaskOptions::new().retries(5),
        |_i: Value, _c: Context| async move {
            Err::<Value, _>(TaskError::non_retryable("bad input, do not retry"))
        },
    );
    let panics = Workflow::new("panics").task("t", |_i: Value, _c: Context| async move {
        if true {
            panic!("user bug");
        }
        Ok::<Value, TaskError>(Value::Null)
    });
    for wf in [wf, fatal, panics] {
        rt.register(wf).await.expect("register");
    }
    crate::support::start_worker(&rt, 4).await;
    let out: Value = rt
        .run("flaky", &json!({}))
        .await
        .expect("third attempt succeeds");
    assert_eq!(out["attempt"], 2);
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    let err = rt
        .run::<_, Value>("fatal", &json!({}))
        .await
        .expect_err("fails");
    // A failed run has its own outcome, distinct from a refused call, with each task's error.
    assert_eq!(err.outcome(), Outcome::RunFailed);
    assert!(err.to_string().contains("bad input, do not retry"), "{err}");
    assert!(err.to_string().contains("run_failed"), "{err}");
    assert!(err.run_id().is_some(), "the error carries the run id");
    let failures = err.run_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].task, "t");
    assert!(failures[0].error.contains("bad input, do not retry"));
    assert!(!failures[0].task_run_id.is_empty());
    let err = rt
        .run::<_, Value>("panics", &json!({}))
        .await
        .expect_err("panic becomes a failure");
    assert!(err.to_string().contains("user bug"), "{err}");
    // The worker survived: it still runs work.
    let err = rt
        .run::<_, Value>("fatal", &json!({}))
        .await
        .expect_err("fails again");
    assert_eq!(err.outcome(), Outcome::RunFailed, "{err}");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn durable_tasks_sleep_wait_for_events_and_memoize() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("durable").durable_task(
        "d",
        TaskOptions::new(),
        |_i: Value, c: Context| async move {
            let stamp: u64 = c.memo("stamp", || async { 7u64 }).await?;
            c.sleep_for(Duration::from_secs(1)).await?;
            let ev = c.wait_for_event("approval:granted").await?;
            Ok::<_, TaskError>(json!({"stamp": stamp, "event": ev}))
        },
    );
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 4).await;
    let h = rt
        .run_no_wait("durable", &json!({}))
        .await
        .expect("trigger");
    // Push the event once the wait is registered (after the 1 s sleep).
    let rt2 = rt.clone();
    tokio::spawn(async move {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = rt2.push("approval:granted", &json!({"by": "ops"})).await;
        }
    });
    let out: Value = h
        .result_within(Duration::from_secs(20))
        .await
        .expect("completes");
    assert_eq!(out["stamp"], 7);
    assert_eq!(out["event"]["by"], "ops");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn child_runs_from_a_task_are_not_duplicated_by_retries() {
    let (e, rt) = setup().await;
    let child = Workflow::new("child").task("c", |i: Num, _c: Context| async move {
        Ok::<_, TaskError>(Num { n: i.n * 10 })
    });
    let parent = Workflow::new("parent").task_with(
        "p",
        TaskOptions::new().retries(1),
        |_i: Value, c: Context| async move {
            let h = c.spawn_child("child", &Num { n: 4 }).await?;
            let out: Num = h.result().await?;
            if c.retry_count() == 0 {
                return Err(TaskError::new("fail once after spawning"));
            }
            Ok::<_, TaskError>(out)
        },
    );
    rt.register(child).await.expect("register");
    rt.register(parent).await.expect("register");
    crate::support::start_worker(&rt, 4).await;
    let out: Num = rt.run("parent", &json!({})).await.expect("run");
    assert_eq!(out, Num { n: 40 });
    assert_eq!(
        e.runs_by_workflow("child"),
        1,
        "the retry got the same child back"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn idempotent_triggers_resolve_to_the_existing_run() {
    let (e, rt) = setup().await;
    let wf = Workflow::new("orders")
        .task(
            "o",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        )
        .idempotency("input.order_id", Duration::from_secs(60));
    rt.register(wf).await.expect("register");
    let opts = TriggerOptions::new().idempotent();
    let a = rt
        .run_no_wait_with("orders", &json!({"order_id": "A"}), opts.clone())
        .await
        .expect("first");
    let b = rt
        .run_no_wait_with("orders", &json!({"order_id": "A"}), opts)
        .await
        .expect("repeat resolves");
    assert_eq!(a.run_id(), b.run_id());
    assert_eq!(e.runs_by_workflow("orders"), 1);
    // Without the option the collision is an error that says so.
    let err = rt
        .run_no_wait("orders", &json!({"order_id": "A"}))
        .await
        .expect_err("collision");
    assert_eq!(
        err.status().map(|s| s.code()),
        Some(hatchet_runtime::errors::GrpcCode::AlreadyExists)
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn cancelling_a_result_wait_removes_only_that_waiter() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("slow").task("s", |_i: Value, _c: Context| async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        Ok::<_, TaskError>(json!({"done": true}))
    });
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("slow", &json!({})).await.expect("trigger");
    // A waiter that stays, and one that gives up: dropping it removes it and nothing else.
    let stays = tokio::spawn({
        let h = h.clone();
        async move { h.result::<Value>().await }
    });
    let short = tokio::time::timeout(Duration::from_millis(100), h.result::<Value>()).await;
    assert!(short.is_err(), "timed out: its future was dropped");
    assert_eq!(
        rt.pending_runs(),
        1,
        "the other waiter keeps the run pending"
    );
    stays.abort();
    let _ = stays.await;
    // With both gone, nothing is left: a leaking drop guard would keep the run pending here
    // (before the run finishes, so delivery cannot be what clears it).
    assert_eq!(
        rt.pending_runs(),
        0,
        "dropped waiters leave no entry behind"
    );
    let out: Value = h.result().await.expect("a new waiter still gets it");
    assert_eq!(out["done"], true);
    assert_eq!(rt.pending_runs(), 0);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn shutdown_fails_pending_waiters_with_closed_at_once() {
    let (_e, rt) = setup().await;
    rt.register(doubler()).await.expect("register");
    // No worker: the run never finishes.
    let h = rt
        .run_no_wait("doubler", &Num { n: 1 })
        .await
        .expect("trigger");
    let waiter = tokio::spawn({
        let h = h.clone();
        async move { h.result::<Num>().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    rt.shutdown(Duration::from_millis(100)).await;
    let err = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("at once")
        .expect("task")
        .expect_err("closed");
    assert_eq!(err.outcome(), Outcome::Closed);
    assert_eq!(err.run_id(), Some(h.run_id()));
    let err = rt
        .run_no_wait("doubler", &Num { n: 1 })
        .await
        .expect_err("closed runtime");
    assert_eq!(err.outcome(), Outcome::Closed);
    for (_, rx) in rt.health() {
        assert!(matches!(*rx.borrow(), ListenerState::Stopped { .. }));
    }
}

#[tokio::test]
async fn results_survive_an_engine_restart_and_a_listener_crash() {
    let (e, rt) = setup().await;
    let wf = Workflow::new("slowish").task("s", |i: Num, _c: Context| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, TaskError>(Num { n: i.n + 1 })
    });
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 64).await;
    let handles: Vec<_> = rt
        .run_many("slowish", &(0..40).map(|n| Num { n }).collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|h| h.expect("trigger"))
        .collect();
    let waits: Vec<_> = handles
        .iter()
        .map(|h| {
            let h = h.clone();
            tokio::spawn(async move { h.result_within::<Num>(Duration::from_secs(60)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    rt.crash_listener(ListenerKind::WorkflowRuns);
    // A START lost in the restart: the real engine leaves that attempt to run out its timeout;
    // this test is about the waiters, so the engine offers it again (its fault, on here).
    e.reoffer_unanswered_assignments(true);
    e.restart().await.expect("restart");
    for (n, w) in waits.into_iter().enumerate() {
        let out = w.await.expect("task").expect("result arrives");
        assert_eq!(out.n, n as i64 + 1);
    }
    assert!(rt.reconnects()[&ListenerKind::WorkflowRuns] >= 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_attempt_assigned_twice_is_executed_once() {
    // The worker contract (worker invariant 5): a repeated assignment of an attempt that already
    // runs is ignored. The engine sends each of the next 20 assignments twice.
    let (e, rt) = setup().await;
    let executions: Arc<parking_lot::Mutex<std::collections::HashMap<i64, u32>>> = Arc::default();
    let counted = executions.clone();
    rt.register(Workflow::new("once").task("t", move |i: Num, _c: Context| {
        let counted = counted.clone();
        async move {
            *counted.lock().entry(i.n).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, TaskError>(i)
        }
    }))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 32).await;
    e.duplicate_next_assignments(20);
    let handles = rt
        .run_many("once", &(0..20).map(|n| Num { n }).collect::<Vec<_>>())
        .await;
    for h in handles {
        let _: Num = h.expect("trigger").result().await.expect("result");
    }
    assert_eq!(
        e.stats().duplicated_assignments,
        20,
        "the engine offered every attempt twice"
    );
    let executions = executions.lock().clone();
    assert_eq!(executions.len(), 20);
    assert!(
        executions.values().all(|n| *n == 1),
        "each attempt executed once: {executions:?}"
    );
    assert_eq!(e.runs_by_workflow("once"), 20, "one run per trigger");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_attempt_offered_again_after_it_finished_is_not_run_again() {
    // The engine re-offers an attempt whose STARTED it never heard (its stream broke); the copy
    // can arrive after the worker has finished it. It must not run twice (worker invariant 5).
    let (e, rt) = setup().await;
    let executions: Arc<parking_lot::Mutex<std::collections::HashMap<i64, u32>>> = Arc::default();
    let counted = executions.clone();
    rt.register(Workflow::new("late").task("t", move |i: Num, _c: Context| {
        let counted = counted.clone();
        async move {
            *counted.lock().entry(i.n).or_default() += 1;
            Ok::<_, TaskError>(i)
        }
    }))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 8).await;
    e.duplicate_next_assignments_late(10);
    let handles = rt
        .run_many("late", &(0..10).map(|n| Num { n }).collect::<Vec<_>>())
        .await;
    for h in handles {
        let _: Num = h.expect("trigger").result().await.expect("result");
    }
    // Every late copy is on the stream (the engine counts them as it sends them) ...
    tokio::time::timeout(Duration::from_secs(10), async {
        while e.stats().late_duplicates_sent < 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the engine sends the late copies");
    // ... and the worker reads its stream in order: once a run assigned after them has
    // finished, every copy has been dispatched (and ignored, or run).
    let _: Num = rt.run("late", &Num { n: 100 }).await.expect("a later run");
    let executions = executions.lock().clone();
    assert_eq!(executions.len(), 11);
    assert!(
        executions.values().all(|n| *n == 1),
        "each attempt executed once: {executions:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// docs/contract.md §1 (Timing): the caller's deadline is sent to the server as `grpc-timeout`; the
/// 30 s backstop of a call without one is kept locally and never sent.
#[tokio::test]
async fn only_a_callers_deadline_goes_on_the_wire() {
    let (engine, rt) = setup().await;
    const TRIGGER: &str = "/WorkflowService/TriggerWorkflow";
    let faults = engine.faults();
    rt.engine_version().await.expect("version");
    assert_eq!(faults.attempts("/Dispatcher/GetVersion"), 1);
    assert_eq!(faults.calls_with_deadline("/Dispatcher/GetVersion"), 0);

    // What matters is what each trigger carried.
    rt.register(doubler()).await.expect("register");
    let _ = rt.run_no_wait("doubler", &Num { n: 1 }).await;
    let bounded = TriggerOptions::new().timeout(Duration::from_secs(5));
    let _ = rt.run_no_wait_with("doubler", &Num { n: 1 }, bounded).await;
    assert_eq!(
        faults.attempts(TRIGGER),
        2,
        "both triggers reached the engine"
    );
    assert_eq!(
        faults.calls_with_deadline(TRIGGER),
        1,
        "only the bounded trigger carried grpc-timeout"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn register_after_start_worker_is_refused_and_sends_nothing() {
    let (e, rt) = setup().await;
    rt.register(doubler()).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let puts = e.faults().attempts("/v1.AdminService/PutWorkflow");
    let late =
        Workflow::new("late").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        );
    let err = rt.register(late).await.expect_err("the worker is started");
    assert_eq!(err.outcome(), Outcome::Invalid, "{err}");
    assert!(err.to_string().contains("before start_worker"), "{err}");
    assert_eq!(
        e.faults().attempts("/v1.AdminService/PutWorkflow"),
        puts,
        "nothing was sent"
    );
    // The worker goes on serving what it registered.
    let out: Num = rt.run("doubler", &Num { n: 2 }).await.expect("run");
    assert_eq!(out, Num { n: 4 });
    rt.shutdown(Duration::from_secs(1)).await;
}

/// The real engine answers UNAUTHENTICATED `invalid auth token` for any error of its token
/// check, its database being unreachable included (the chaos suite saw a PostgreSQL restart
/// refuse every trigger so). Once the engine has accepted the token, such an answer is retried
/// as a request that never ran (the check answers before any handler), and a refusal that
/// lasts ends `NotSent` saying what it may be; a token never accepted stays refused at once.
#[tokio::test]
async fn a_token_refused_after_the_engine_accepted_it_is_retried_as_never_sent() {
    const TRIGGER: &str = "/WorkflowService/TriggerWorkflow";
    let (engine, rt) = setup().await;
    let faults = engine.faults();
    rt.register(doubler()).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let _: Num = rt.run("doubler", &Num { n: 1 }).await.expect("accepted");
    let refuse = |times| {
        faults.inject(
            TRIGGER,
            times,
            hatchet_dev_engine::Fault::Fail {
                code: 16,
                message: "invalid auth token".into(),
                pushback_ms: None,
            },
        )
    };
    refuse(2);
    let before = faults.attempts(TRIGGER);
    let out: Num = rt
        .run("doubler", &Num { n: 2 })
        .await
        .expect("retried through two refusals");
    assert_eq!(out.n, 4);
    assert_eq!(
        faults.attempts(TRIGGER) - before,
        3,
        "two refusals, then the run"
    );
    refuse(100);
    let err = rt
        .run_no_wait("doubler", &Num { n: 3 })
        .await
        .expect_err("refused on every attempt");
    assert_eq!(err.outcome(), Outcome::NotSent, "{err}");
    assert!(err.to_string().contains("accepted before"), "{err}");
    faults.clear();
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Two registrations of one name sent side by side: the first to take the name passes, the
/// other is refused before it is sent, even while the first one's PutWorkflow is still on its
/// way (the engine answers it 300 ms late here).
#[tokio::test]
async fn two_registrations_of_one_name_side_by_side_pass_once() {
    let (engine, rt) = setup().await;
    engine.faults().inject(
        "/v1.AdminService/PutWorkflow",
        2,
        hatchet_dev_engine::Fault::Delay { ms: 300 },
    );
    let other = Workflow::new("doubler").task("triple", |i: Num, _c: Context| async move {
        Ok::<_, TaskError>(Num { n: i.n * 3 })
    });
    let (a, b) = tokio::join!(rt.register(doubler()), rt.register(other));
    assert!(a.is_ok() != b.is_ok(), "exactly one passes: {a:?} {b:?}");
    let err = a.err().or(b.err()).expect("one refused");
    assert!(err.to_string().contains("already registered"), "{err}");
    assert_eq!(
        engine.faults().attempts("/v1.AdminService/PutWorkflow"),
        1,
        "one PutWorkflow sent"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Registering a second workflow under a name this runtime already holds is refused before
/// anything is sent (it would silently replace the first one's handlers); runs go to the first.
#[tokio::test]
async fn a_second_workflow_under_a_registered_name_is_refused() {
    let (engine, rt) = setup().await;
    rt.register(doubler()).await.expect("register");
    let puts = engine.faults().attempts("/v1.AdminService/PutWorkflow");
    let other = Workflow::new("doubler").task("triple", |i: Num, _c: Context| async move {
        Ok::<_, TaskError>(Num { n: i.n * 3 })
    });
    let err = rt.register(other).await.expect_err("the name is taken");
    assert_eq!(err.outcome(), Outcome::Invalid, "{err}");
    assert!(err.to_string().contains("already registered"), "{err}");
    assert_eq!(
        engine.faults().attempts("/v1.AdminService/PutWorkflow"),
        puts,
        "nothing sent"
    );
    crate::support::start_worker(&rt, 2).await;
    let out: Num = rt.run("doubler", &Num { n: 2 }).await.expect("run");
    assert_eq!(out.n, 4, "the first registration's handler");
    rt.shutdown(Duration::from_secs(1)).await;
}
