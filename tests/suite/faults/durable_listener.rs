//! The durable-task listener end to end: the bound on a request during an outage, the engine's
//! typed refusals (a nondeterministic replay, a server eviction) and what the worker does with
//! them, and a stopped listener failing its task instead of hanging it.

use std::sync::Arc;
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::durable::DurableError;
use hatchet_runtime::health::ListenerKind;
use hatchet_runtime::protocol::v1;
use hatchet_runtime::test_hooks::DURABLE_MAX_SEND_ATTEMPTS as MAX_SEND_ATTEMPTS;
use hatchet_runtime::{Context, RuntimeHandle, RuntimeOptions, TaskError, TaskOptions, Workflow};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tonic::Code;

use super::listeners::DURABLE;
use crate::support::until_listener;
use crate::support::{end, fast, stopped};

async fn runtime(engine: &DevEngine) -> RuntimeHandle {
    crate::support::runtime_with(engine, RuntimeOptions::new().stream_backoff(fast()).seed(5)).await
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what} in time"))
}

/// A durable task that reports how its one `sleep_for` ended instead of failing.
fn reporting_napper() -> Workflow {
    Workflow::new("nap").durable_task(
        "d",
        TaskOptions::new(),
        |_i: Value, c: Context| async move {
            Ok::<_, TaskError>(match c.sleep_for(Duration::from_millis(10)).await {
                Ok(()) => json!({"woke": true}),
                Err(e) => json!({"outcome": e.outcome().as_str(), "attempts": e.attempts(), "error": e.to_string()}),
            })
        },
    )
}

/// Runs [`reporting_napper`] once while the first `n` DurableTask opens end with `code`.
async fn nap_with_durable_opens_failing(n: u32, code: Code) -> (DevEngine, RuntimeHandle, Value) {
    let engine = crate::support::engine().await;
    let rt = runtime(&engine).await;
    rt.register(reporting_napper()).await.expect("register");
    engine.faults().inject(DURABLE, n, end(code));
    crate::support::start_worker(&rt, 2).await;
    let out: Value = within("the run", rt.run("nap", &json!({})))
        .await
        .expect("the task itself completes");
    (engine, rt, out)
}

#[tokio::test]
async fn a_durable_operation_during_an_outage_fails_after_five_streams_instead_of_blocking() {
    // Every DurableTask open fails at once: a transient end, so the listener keeps trying, but
    // the task's request is bounded (docs/contract.md §3, synchronous paths).
    let (engine, rt, out) = nap_with_durable_opens_failing(1000, Code::Unavailable).await;
    assert_eq!(out["outcome"], "exhausted", "{out}");
    assert_eq!(out["attempts"], MAX_SEND_ATTEMPTS, "{out}");
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.contains("retrying the task is safe")),
        "{out}"
    );
    assert!(engine.faults().attempts(DURABLE) >= u64::from(MAX_SEND_ATTEMPTS));
    // The outage ends: the listener, still reconnecting, serves the next run.
    engine.faults().clear();
    let out: Value = within("recovery", rt.run("nap", &json!({})))
        .await
        .expect("result");
    assert_eq!(out["woke"], true, "{out}");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_stopped_durable_listener_fails_the_waiting_task_instead_of_hanging_it() {
    let (engine, rt, out) = nap_with_durable_opens_failing(1, Code::Unauthenticated).await;
    assert_eq!(out["outcome"], "stopped", "{out}");
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.contains("stream stopped") && e.contains("Unauthenticated")),
        "{out}"
    );
    until_listener(&rt, ListenerKind::DurableTask, stopped).await;
    assert_eq!(engine.faults().attempts(DURABLE), 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_nondeterministic_replay_fails_the_task_with_a_typed_error_and_is_not_retried() {
    let engine = crate::support::engine().await;
    let rt = runtime(&engine).await;
    let seen: Arc<Mutex<Vec<Option<DurableError>>>> = Arc::default();
    let record = seen.clone();
    rt.register(Workflow::new("drift").durable_task(
        "d",
        TaskOptions::new().retries(3),
        move |_i: Value, c: Context| {
            let record = record.clone();
            async move {
                if c.retry_count() == 0 {
                    // Invocation 1 records a sleep at node 1, then fails (retryable).
                    c.sleep_for(Duration::from_millis(10)).await?;
                    return Err(TaskError::new("first attempt fails"));
                }
                // The replay asks for something else at node 1.
                let r = c.wait_for_event("drift:other").await;
                let err = r.expect_err("the engine refuses a different operation at node 1");
                record.lock().push(err.durable().cloned());
                Err::<Value, _>(TaskError::from(err))
            }
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let err = within("the failure", rt.run::<_, Value>("drift", &json!({})))
        .await
        .expect_err("the run fails");
    assert!(err.to_string().contains("nondeterministic replay"), "{err}");
    let seen = seen.lock().clone();
    assert_eq!(
        seen.len(),
        1,
        "not retried after the nondeterminism: {seen:?}"
    );
    let Some(DurableError::Nondeterminism {
        invocation, node, ..
    }) = &seen[0]
    else {
        panic!("a typed nondeterminism error: {seen:?}");
    };
    assert_eq!((*invocation, *node), (2, 1));
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_server_eviction_stops_the_evicted_invocation_and_the_next_one_finishes_the_run() {
    let engine = crate::support::engine().await;
    let raw = engine.raw_clients().expect("clients");
    let rt = runtime(&engine).await;
    let (started_tx, mut started) = mpsc::unbounded_channel::<(String, i32)>();
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<(i32, Result<(), DurableError>)>();
    let (gate_tx, gate) = watch::channel(false);
    rt.register(Workflow::new("evictee").durable_task(
        "d",
        TaskOptions::new(),
        move |_i: Value, c: Context| {
            let (started_tx, ended_tx, mut gate) =
                (started_tx.clone(), ended_tx.clone(), gate.clone());
            async move {
                let inv = c.durable_invocation().unwrap_or(0);
                let _ = started_tx.send((c.task_run_id().to_string(), inv));
                let _ = gate.wait_for(|open| *open).await;
                let r = c.sleep_for(Duration::from_millis(10)).await;
                let _ = ended_tx.send((
                    inv,
                    r.as_ref()
                        .map(|_| ())
                        .map_err(|e| e.durable().cloned().expect("a typed refusal")),
                ));
                r?;
                Ok::<_, TaskError>(json!({"invocation": inv}))
            }
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let run = rt
        .run_no_wait("evictee", &json!({}))
        .await
        .expect("trigger");
    let (task, first) = within("invocation 1", started.recv())
        .await
        .expect("started");
    assert_eq!(first, 1);
    // Another client evicts invocation 1 and restores the task: the engine starts invocation 2
    // (on this worker, which has a free durable slot) while invocation 1 still runs here.
    let (tx, mut acks) = raw.durable_stream().await.expect("open");
    tx.send(v1::DurableTaskRequest {
        message: Some(v1::durable_task_request::Message::EvictInvocation(
            v1::DurableTaskEvictInvocationRequest {
                invocation_count: 1,
                durable_task_external_id: task.clone(),
                reason: Some("moved".into()),
            },
        )),
    })
    .expect("send");
    let ack = within("the eviction ack", acks.message())
        .await
        .expect("stream")
        .and_then(|r| r.message);
    assert!(
        matches!(
            ack,
            Some(v1::durable_task_response::Message::EvictionAck(_))
        ),
        "{ack:?}"
    );
    assert!(raw.restore(&task).await.expect("restore"));
    let (again, second) = within("invocation 2", started.recv())
        .await
        .expect("started");
    assert_eq!((again.as_str(), second), (task.as_str(), 2));
    // Both invocations now ask for their sleep: the engine evicts the stale one.
    gate_tx.send(true).expect("gate");
    let mut ends = vec![
        within("an end", ended.recv()).await.expect("end"),
        within("an end", ended.recv()).await.expect("end"),
    ];
    ends.sort_by_key(|(inv, _)| *inv);
    assert!(
        matches!(&ends[0], (1, Err(DurableError::Evicted { task: t, invocation: 1, .. })) if *t == task),
        "{ends:?}"
    );
    assert!(matches!(ends[1], (2, Ok(()))), "{ends:?}");
    let out: Value = within("the result", run.result()).await.expect("result");
    assert_eq!(
        out["invocation"], 2,
        "the evicted invocation reported nothing"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_legacy_durable_wait_whose_registration_keeps_failing_errors_and_arms_no_stream() {
    const REGISTER: &str = "/v1.V1Dispatcher/RegisterDurableEvent";
    const EVENTS: &str = "/v1.V1Dispatcher/ListenForDurableEvent";
    let engine = crate::support::engine_with(DevEngineOptions::default().version("v0.79.0")).await;
    let rt = runtime(&engine).await;
    rt.register(reporting_napper()).await.expect("register");
    engine.faults().inject(
        REGISTER,
        5,
        crate::support::fail(Code::Unavailable, "engine down"),
    );
    crate::support::start_worker(&rt, 2).await;
    let out: Value = within("the failure", rt.run("nap", &json!({})))
        .await
        .expect("the task itself completes");
    assert_eq!(out["outcome"], "exhausted", "{out}");
    assert_eq!(out["attempts"], 5, "{out}");
    assert_eq!(engine.faults().attempts(REGISTER), 5);
    assert_eq!(
        engine.faults().attempts(EVENTS),
        0,
        "a wait whose registration failed leaves no waiter behind to arm the stream"
    );
    // The engine is back: the next wait registers once and its signal arrives.
    let out: Value = within("recovery", rt.run("nap", &json!({})))
        .await
        .expect("result");
    assert_eq!(out["woke"], true, "{out}");
    assert_eq!(engine.faults().attempts(REGISTER), 6);
    assert_eq!(
        engine.stats().durable_event_listen_messages,
        1,
        "one signal, sent once on one stream"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_completion_lost_by_the_engine_is_recovered_by_the_periodic_worker_status() {
    let engine = crate::support::engine().await;
    let rt = runtime(&engine).await;
    rt.register(reporting_napper()).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    engine.lose_next_durable_completions(1);
    // Without a later status the wait would never end (the stream stays up, nothing ends it).
    let out: Value = within("the recovered completion", rt.run("nap", &json!({})))
        .await
        .expect("result");
    assert_eq!(out["woke"], true, "{out}");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_retried_durable_task_replays_its_sleep_instead_of_diverging() {
    let engine = crate::support::engine().await;
    let rt = runtime(&engine).await;
    rt.register(Workflow::new("replayer").durable_task(
        "d",
        TaskOptions::new().retries(1),
        |_i: Value, c: Context| async move {
            // Each call makes fresh condition-group ids; the replay must still match node 1.
            c.sleep_for(Duration::from_millis(10)).await?;
            if c.retry_count() == 0 {
                return Err(TaskError::new("first attempt fails after its sleep"));
            }
            Ok::<_, TaskError>(json!({ "invocation": c.durable_invocation() }))
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let out: Value = within("the replayed run", rt.run("replayer", &json!({})))
        .await
        .expect("the replay of the same sleep is not a nondeterminism");
    assert_eq!(out["invocation"], 2);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// `durable_task` invariant 2 and `worker::restart`: an operation whose stream ends before its
/// ack is in doubt (the engine recorded it here); its invocation is evicted and restored, not
/// failed, so a task with no retries still finishes: the task never sees the doubt, the restored
/// invocation replays onto the one recorded node, and no retry is spent.
#[tokio::test]
async fn a_durable_ack_lost_with_its_stream_restarts_the_invocation_from_the_log_without_a_retry() {
    let engine = crate::support::engine().await;
    let rt = runtime(&engine).await;
    let executions = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (count, errors) = (executions.clone(), seen.clone());
    rt.register(Workflow::new("cut").durable_task(
        "d",
        TaskOptions::new(),
        move |_i: Value, c: Context| {
            let (count, errors) = (count.clone(), errors.clone());
            async move {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Err(e) = c.sleep_for(Duration::from_millis(300)).await {
                    errors.lock().push(format!("{}: {e}", e.outcome().as_str()));
                    return Err(e.into());
                }
                Ok::<_, TaskError>(json!({
                    "invocation": c.durable_invocation(),
                    "retry": c.retry_count(),
                }))
            }
        },
    ))
    .await
    .expect("register");
    // The engine records the first sleep, and its stream ends before the ack goes out.
    engine.lose_next_durable_acks(1);
    crate::support::start_worker(&rt, 2).await;
    let out: Value = within("the restarted run", rt.run("cut", &json!({})))
        .await
        .expect("the restored invocation replays onto the recorded sleep");
    assert_eq!(out["invocation"], 2, "{out}");
    assert_eq!(out["retry"], 0, "no retry was spent: {out}");
    assert_eq!(
        executions.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the invocation in doubt was cancelled; the restored one finished"
    );
    // The cancelled invocation sees its cancellation (as any cancelled task does), never the
    // doubt.
    let errors = seen.lock().clone();
    assert!(
        errors.iter().all(|e| e.starts_with("cancelled")),
        "the task never saw the doubt: {errors:?}"
    );
    assert_eq!(
        engine.stats().durable_nodes_recorded,
        1,
        "the sleep was never sent twice: one node, replayed by the restored invocation"
    );
    let counts = rt.task_counts();
    assert_eq!(
        (counts.restarted_from_log, counts.failed, counts.completed),
        (1, 0, 1),
        "{counts:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// `evict.rs` invariant 2: a wait that ends while its eviction is on its way is not lost. The
/// engine sends the sleep's completion, then acknowledges the eviction, so nothing would wake
/// the evicted task again; the worker sees the completion and asks for a restore at once. The
/// run finishes (an hour's sleep, ended by the fault), in two executions: the evicted one and
/// the restored one, whose replay finds the sleep done.
#[tokio::test]
async fn a_wait_that_ends_while_its_eviction_is_on_its_way_is_restored_not_lost() {
    let engine = crate::support::engine().await;
    engine.complete_durable_waits_on_next_evictions(1);
    let rt = runtime(&engine).await;
    let executions = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = executions.clone();
    rt.register(Workflow::new("raced").durable_task(
        "d",
        TaskOptions::new().evict_while_waiting(Duration::from_millis(100)),
        move |_i: Value, c: Context| {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                c.sleep_for(Duration::from_secs(3_600)).await?;
                Ok::<_, TaskError>(json!({ "invocation": c.durable_invocation() }))
            }
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let out: Value = within("the raced run", rt.run("raced", &json!({})))
        .await
        .expect("the restored invocation finds its sleep done");
    assert_eq!(out["invocation"], 2);
    assert_eq!(
        executions.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "evicted once, restored once"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn two_durable_operations_joined_in_one_invocation_get_their_own_answers() {
    let engine = crate::support::engine().await;
    // Requests sent within 200 ms of each other are numbered and answered newest first.
    engine.answer_durable_requests_out_of_order(Duration::from_millis(200));
    let rt = runtime(&engine).await;
    rt.register(Workflow::new("joined").durable_task(
        "d",
        TaskOptions::new(),
        |_i: Value, c: Context| async move {
            let (slept, event) = tokio::join!(
                c.sleep_for(Duration::from_millis(400)),
                c.wait_for_event("joined:go")
            );
            slept?;
            Ok::<_, TaskError>(json!({ "event": event? }))
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("joined", &json!({})).await.expect("trigger");
    let waiter = tokio::spawn({
        let h = h.clone();
        async move { h.result_within::<Value>(Duration::from_secs(20)).await }
    });
    let mut pushes = 0;
    while !waiter.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pushes += 1;
        rt.push("joined:go", &json!({ "push": pushes }))
            .await
            .expect("push");
    }
    let out = waiter.await.expect("task").expect("result");
    assert!(
        out["event"]["push"].as_u64().is_some(),
        "the event wait got the event, not the sleep's answer: {out}"
    );
    assert_eq!(engine.stats().durable_nodes_recorded, 2);
    rt.shutdown(Duration::from_secs(1)).await;
}
