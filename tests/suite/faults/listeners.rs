//! The listeners under faults, against the development engine: stream ends of every kind,
//! permanent errors, no-progress stops, restarts with many waiters, cancellation mid-reconnect,
//! shutdown mid-reconnect, heartbeat rejections, the Listen fallback, crashes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions, Fault};
use hatchet_runtime::health::{ListenerKind, ListenerState};
use hatchet_runtime::retries::Backoff;
use hatchet_runtime::retries::StreamBackoff;
use hatchet_runtime::{
    Context, Outcome, RuntimeHandle, RuntimeOptions, TaskError, WorkerOptions, Workflow,
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tonic::Code;

const RUNS: &str = "/Dispatcher/SubscribeToWorkflowRuns";

async fn setup() -> (DevEngine, RuntimeHandle) {
    setup_with(RuntimeOptions::new().stream_backoff(fast()).seed(3)).await
}

/// An engine and a runtime with `opts` that knows the `echo` workflow.
async fn setup_with(opts: RuntimeOptions) -> (DevEngine, RuntimeHandle) {
    let engine = crate::support::engine().await;
    let rt = crate::support::runtime_with(&engine, opts).await;
    rt.register(crate::support::echo()).await.expect("register");
    (engine, rt)
}

#[tokio::test]
async fn runs_stream_ends_with_transient_codes_or_eof_reconnect_and_deliver() {
    // CANCELLED with a live runtime is a transport event (a proxy's RST_STREAM): it reconnects.
    for end in [
        Some(Code::Unavailable),
        Some(Code::Internal),
        Some(Code::DeadlineExceeded),
        Some(Code::ResourceExhausted),
        Some(Code::Cancelled),
        None,
    ] {
        let (e, rt) = setup().await;
        crate::support::start_worker(&rt, 4).await;
        e.faults().inject(
            RUNS,
            1,
            Fault::EndStream {
                after: 0,
                code: end.map(|c| c as i32),
            },
        );
        let out: Value = rt
            .run("echo", &json!({"k": 1}))
            .await
            .expect("result despite the stream end");
        assert_eq!(out["k"], 1);
        assert!(e.faults().attempts(RUNS) >= 2, "{end:?}: reconnected");
        assert!(rt.reconnects()[&ListenerKind::WorkflowRuns] >= 1);
        rt.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn unauthenticated_stops_the_runs_listener_and_fails_waiters_with_their_run_id() {
    let (e, rt) = setup().await;
    e.faults().inject(
        RUNS,
        1,
        Fault::EndStream {
            after: 0,
            code: Some(Code::Unauthenticated as i32),
        },
    );
    let h = rt.run_no_wait("echo", &json!({})).await.expect("trigger");
    let err = tokio::time::timeout(Duration::from_secs(5), h.outputs())
        .await
        .expect("fails fast")
        .expect_err("stopped");
    assert_eq!(err.outcome(), Outcome::Stopped);
    assert_eq!(err.run_id(), Some(h.run_id()));
    assert_eq!(
        err.status().map(hatchet_runtime::errors::GrpcStatus::code),
        Some(hatchet_runtime::errors::GrpcCode::Unauthenticated),
        "the stream's status is kept as the cause"
    );
    assert!(matches!(
        *rt.health()[&ListenerKind::WorkflowRuns].borrow(),
        ListenerState::Stopped { error: Some(_) }
    ));
    assert_eq!(
        e.faults().attempts(RUNS),
        1,
        "a permanent error is not retried"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_stream_failing_at_once_with_other_errors_stops_after_ten_without_progress() {
    let (e, rt) = setup().await;
    e.faults().inject(
        RUNS,
        1000,
        Fault::EndStream {
            after: 0,
            code: Some(Code::NotFound as i32),
        },
    );
    let h = rt.run_no_wait("echo", &json!({})).await.expect("trigger");
    let err = tokio::time::timeout(Duration::from_secs(10), h.outputs())
        .await
        .expect("stops")
        .expect_err("stopped");
    assert_eq!(err.run_id(), Some(h.run_id()));
    assert_eq!(
        e.faults().attempts(RUNS),
        10,
        "ten attempts, then stop: not a hot loop"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_thousand_waiters_across_an_engine_restart_get_every_result_once() {
    let (e, rt) = setup().await;
    let handles: Vec<_> = rt
        .run_many(
            "echo",
            &(0..1000).map(|i| json!({"i": i})).collect::<Vec<_>>(),
        )
        .await;
    // Deliveries counted from the payloads themselves (each run echoes its own `i`), over
    // every waiter: every tenth run has a second waiter, so a result delivered twice shows as a
    // count off its waiters, and one delivered to the wrong waiter as a payload that is not
    // that waiter's.
    let got: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let wrong: Arc<Mutex<Vec<(u64, Value)>>> = Arc::default();
    let mut waiters_of: HashMap<u64, u32> = HashMap::new();
    let mut waits = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        let h = h.expect("trigger");
        let i = i as u64;
        let n = if i.is_multiple_of(10) { 2 } else { 1 };
        waiters_of.insert(i, n);
        for _ in 0..n {
            let (h, got, wrong) = (h.clone(), got.clone(), wrong.clone());
            waits.push(tokio::spawn(async move {
                if let Ok(outputs) = h.outputs().await {
                    match outputs.get("t").and_then(|o| o["i"].as_u64()) {
                        Some(delivered) if delivered == i => {
                            *got.lock().entry(delivered).or_default() += 1
                        }
                        _ => wrong.lock().push((i, Value::Object(outputs))),
                    }
                }
            }));
        }
    }
    while e.stats().pending_run_subscriptions < 1000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    e.restart().await.expect("restart");
    crate::support::start_worker(&rt, 64).await;
    for w in waits {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("in time")
            .expect("task");
    }
    assert!(
        wrong.lock().is_empty(),
        "wrong payloads: {:?}",
        wrong.lock()
    );
    assert_eq!(
        *got.lock(),
        waiters_of,
        "each waiter got its own result once, none lost"
    );
    assert_eq!(e.runs_by_workflow("echo"), 1000, "one run per trigger");
    assert_eq!(
        e.stats().run_subscribe_messages,
        2000,
        "each run id sent once, then replayed once on the stream after the restart"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_waiter_cancelled_mid_reconnect_is_not_replayed() {
    let (e, rt) = setup().await;
    let keep = rt
        .run_no_wait("echo", &json!({"keep": true}))
        .await
        .expect("trigger");
    let drop_me = rt
        .run_no_wait("echo", &json!({"drop": true}))
        .await
        .expect("trigger");
    let keep_wait = tokio::spawn({
        let keep = keep.clone();
        async move { keep.outputs().await }
    });
    let dropped = tokio::spawn({
        let d = drop_me.clone();
        async move { d.outputs().await }
    });
    while e.stats().pending_run_subscriptions < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    e.shutdown().await;
    dropped.abort(); // the caller gives up while the stream is down
    let _ = dropped.await;
    e.start_again().await.expect("start");
    while e.stats().pending_run_subscriptions < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        e.stats().pending_run_subscriptions,
        1,
        "only the live waiter is replayed"
    );
    crate::support::start_worker(&rt, 4).await;
    keep_wait.await.expect("task").expect("result");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn shutdown_during_reconnect_leaves_no_task_running() {
    let engine = crate::support::engine().await;
    engine.shutdown().await; // the engine is down for the whole test
    tokio::time::sleep(Duration::from_millis(100)).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let rt =
        crate::support::runtime_with(&engine, RuntimeOptions::new().stream_backoff(fast())).await;
    let h = rt.run_handle(uuid::Uuid::new_v4().to_string());
    let waiter = tokio::spawn(async move { h.outputs().await });
    // Let the runs listener fail and schedule reconnects.
    let mut health = rt.health()[&ListenerKind::WorkflowRuns].clone();
    while !matches!(
        *health.borrow_and_update(),
        ListenerState::Reconnecting { .. }
    ) {
        let _ = health.changed().await;
    }
    rt.shutdown(Duration::from_millis(100)).await;
    assert_eq!(
        waiter.await.expect("task").expect_err("closed").outcome(),
        Outcome::Closed
    );
    drop(rt);
    drop(health);
    assert_tasks_back_to(before).await;
}

/// Waits (2 s at most) until no more tokio tasks are alive than `before`.
async fn assert_tasks_back_to(before: usize) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = metrics.num_alive_tasks();
        if left <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        left <= before,
        "{left} tasks alive after shutdown, {before} before the runtime"
    );
}

#[tokio::test]
async fn shutdown_while_a_durable_task_waits_on_a_backing_off_stream_leaves_no_task_running() {
    let engine = crate::support::engine().await;
    engine
        .faults()
        .inject(DURABLE, u32::MAX, end(Code::Unavailable));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let rt = napping_runtime(&engine).await;
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("nap", &json!({})).await.expect("trigger");
    // The task waits for its sleep's ack while the durable stream keeps failing.
    until_listener(&rt, ListenerKind::DurableTask, |s| {
        matches!(s, ListenerState::Reconnecting { .. })
    })
    .await;
    rt.shutdown(Duration::from_millis(100)).await;
    let opens = engine.faults().attempts(DURABLE);
    drop((h, rt));
    assert_tasks_back_to(before).await;
    assert_eq!(
        engine.faults().attempts(DURABLE),
        opens,
        "no durable stream opens after shutdown"
    );
}

/// Fails the worker's next heartbeat NOT_FOUND (its row is gone) and waits for the worker to
/// register again; answers the new worker id.
async fn re_registered_after_not_found(e: &DevEngine, rt: &RuntimeHandle) -> String {
    let first = rt.worker_id().expect("registered");
    e.faults().inject(
        "/Dispatcher/Heartbeat",
        1,
        crate::support::fail(Code::NotFound, "worker gone"),
    );
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(id) = rt.worker_id().filter(|id| *id != first) {
            return id;
        }
    }
    panic!("no new worker id 12 s after NOT_FOUND");
}

#[tokio::test]
async fn heartbeat_not_found_registers_the_worker_again() {
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 4).await;
    let _: Value = rt.run("echo", &json!({})).await.expect("works");
    re_registered_after_not_found(&e, &rt).await;
    let out: Value = rt
        .run("echo", &json!({"after": 1}))
        .await
        .expect("still works");
    assert_eq!(out["after"], 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// The worker actor decides in order: a drain asked while the start is still registering the worker
/// waits for it and drains the worker it made (paused at the engine, its stream closed), where it
/// used to run beside the start, find no worker, and leave the started worker taking work; labels
/// upserted meanwhile reach the started worker.
#[tokio::test]
async fn a_drain_and_an_upsert_sent_while_the_worker_starts_apply_to_the_started_worker() {
    let (e, rt) = setup().await;
    e.faults()
        .inject("/Dispatcher/Register", 1, Fault::Delay { ms: 500 });
    let start = tokio::spawn({
        let rt = rt.clone();
        async move { rt.start_worker(WorkerOptions::new("w", 4)).await }
    });
    until("the start to reach the engine", || {
        e.faults().attempts("/Dispatcher/Register") == 1
    })
    .await;
    let upsert = tokio::spawn({
        let rt = rt.clone();
        async move { rt.upsert_labels([("region", "eu")]).await }
    });
    let drain = tokio::spawn({
        let rt = rt.clone();
        async move { rt.shutdown(Duration::from_secs(5)).await }
    });
    let id = start
        .await
        .expect("join")
        .expect("the start finishes before the drain");
    upsert
        .await
        .expect("join")
        .expect("the upsert waits for the start");
    drain.await.expect("join");
    let w = e.worker(&id).expect("registered");
    assert!(w.paused, "the drain paused the worker the start made");
    assert!(!w.listening, "and closed its stream");
    assert_eq!(
        w.labels.keys().collect::<Vec<_>>(),
        ["region"],
        "the upsert reached the started worker"
    );
}

/// The worker actor's effects reach the engine in the order its messages came: two upserts of
/// one key sent back to back end with the second's value even when the first is slow to
/// arrive (each upsert used to run in a task of its own, side by side).
#[tokio::test]
async fn two_upserts_of_one_key_reach_the_engine_in_the_order_they_were_sent() {
    let (e, rt) = setup().await;
    let id = rt
        .start_worker(WorkerOptions::new("w", 4))
        .await
        .expect("start");
    const UPSERT: &str = "/Dispatcher/UpsertWorkerLabels";
    e.faults().inject(UPSERT, 1, Fault::Delay { ms: 300 });
    let first = tokio::spawn({
        let rt = rt.clone();
        async move { rt.upsert_labels([("region", "eu")]).await }
    });
    until("the first upsert to reach the engine", || {
        e.faults().attempts(UPSERT) == 1
    })
    .await;
    rt.upsert_labels([("region", "us")])
        .await
        .expect("the second upsert");
    first.await.expect("join").expect("the first upsert");
    assert_eq!(e.faults().attempts(UPSERT), 2);
    let labels = e.worker(&id).expect("registered").labels;
    assert_eq!(
        labels.get("region").map(String::as_str),
        Some("us"),
        "the second upsert's value stands"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Labels invariant 1: a re-registration carries the labels the engine took, and not an
/// upsert it refused (the merge used to happen before the call).
#[tokio::test]
async fn a_re_registration_carries_the_upserted_labels_the_engine_took_only() {
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 4).await;
    rt.upsert_labels([("region", "eu")]).await.expect("upsert");
    e.faults().inject(
        "/Dispatcher/UpsertWorkerLabels",
        1,
        crate::support::fail(Code::InvalidArgument, "refused"),
    );
    rt.upsert_labels([("gpu", "a100")])
        .await
        .expect_err("the engine refuses it");
    let again = re_registered_after_not_found(&e, &rt).await;
    let labels = e.worker(&again).expect("registered").labels;
    let keys: Vec<_> = labels.keys().collect();
    assert_eq!(keys, ["region"], "the refused upsert is not carried");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn heartbeat_failed_precondition_reconnects_the_action_stream() {
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 4).await;
    let _: Value = rt.run("echo", &json!({})).await.expect("works");
    let opens = e.faults().attempts("/Dispatcher/ListenV2");
    e.faults().inject(
        "/Dispatcher/Heartbeat",
        1,
        crate::support::fail(Code::FailedPrecondition, "stream gone"),
    );
    let mut reopened = false;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if e.faults().attempts("/Dispatcher/ListenV2") > opens {
            reopened = true;
            break;
        }
    }
    assert!(reopened, "ListenV2 reopened after FAILED_PRECONDITION");
    assert_eq!(
        rt.worker_id(),
        Some(rt.worker_id().expect("id")),
        "same worker"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// When the first `n` calls of `path` reached the engine (recorded since `record_times`),
/// waiting up to 20 s for them.
async fn arrivals(e: &DevEngine, path: &str, n: usize) -> Vec<tokio::time::Instant> {
    let mut times = Vec::new();
    for _ in 0..200 {
        times = e.faults().attempt_times(path);
        if times.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(times.len() >= n, "{n} calls of {path} arrived: {times:?}");
    times
}

/// Heartbeat invariant 4, counted at the engine: a heartbeat that cannot reach the engine starts
/// the engine watch and keeps its interval (the runtime probes once a second, with GetVersion,
/// not with heartbeats too), and the next heartbeat goes the moment the watch sees the engine
/// answer, then the interval again. Without the watch's publication the second beat would come
/// a whole interval after the first; with the heartbeat probing on its own, beats would come
/// every second beside the probes.
#[tokio::test]
async fn a_heartbeat_that_cannot_reach_the_engine_lets_the_watch_probe_and_beats_on_its_answer() {
    const BEAT: &str = "/Dispatcher/Heartbeat";
    const PROBE: &str = "/Dispatcher/GetVersion";
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 4).await;
    let _: Value = rt.run("echo", &json!({})).await.expect("works");
    e.faults().record_times(BEAT);
    e.faults().record_times(PROBE);
    let unreachable = || crate::support::fail(Code::Unavailable, "unreachable");
    e.faults().inject(PROBE, 2, unreachable());
    e.faults().inject(BEAT, 1, unreachable());
    // The failed beat, the one on the watch's answer, and the next at the interval.
    let beats = arrivals(&e, BEAT, 3).await;
    let probes = e.faults().attempt_times(PROBE);
    let probes_before_second_beat: Vec<_> = probes.iter().filter(|t| **t <= beats[1]).collect();
    assert_eq!(
        probes_before_second_beat.len(),
        3,
        "two failed probes and the answered one came before the second beat: {probes:?} {beats:?}"
    );
    let answered = *probes_before_second_beat[2];
    let secs = Duration::from_secs_f64;
    assert!(
        beats[1] - answered < secs(0.5),
        "the second beat went on the watch's answer: {:?} after it",
        beats[1] - answered
    );
    assert!(
        beats[1] - beats[0] < secs(2.6),
        "sooner than the 4 s interval: {:?}",
        beats[1] - beats[0]
    );
    assert!(
        beats[2] - beats[1] > secs(3.0),
        "then the interval again: {:?}",
        beats[2] - beats[1]
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Heartbeat invariant 5, counted at the engine: while heartbeats fail UNAVAILABLE and the
/// engine answers the watch's GetVersion (its database restarting, say), the heartbeat goes again
/// within a second, and once one is accepted the 4 s interval is back. Without the retry, the
/// gaps after the failures would be the whole interval, and the engine, which assigns only to
/// workers heard from in the last 5 s, would hear the worker up to 4 s late.
#[tokio::test]
async fn a_heartbeat_the_engine_does_not_answer_while_it_answers_reads_goes_again_within_a_second()
{
    const BEAT: &str = "/Dispatcher/Heartbeat";
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 4).await;
    let _: Value = rt.run("echo", &json!({})).await.expect("works");
    e.faults().record_times(BEAT);
    e.faults().inject(
        BEAT,
        2,
        crate::support::fail(Code::Unavailable, "unreachable"),
    );
    // Two failed beats, the accepted one after them, and the next at the interval.
    let times = arrivals(&e, BEAT, 4).await;
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let secs = Duration::from_secs_f64;
    assert!(
        gaps[0] < secs(1.6),
        "after the first failed beat, within a second: {gaps:?}"
    );
    assert!(gaps[1] < secs(1.6), "after the second too: {gaps:?}");
    assert!(
        gaps[2] > secs(3.0),
        "after an accepted beat the interval is back: {gaps:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn listen_v2_unimplemented_falls_back_to_listen_for_good() {
    let (e, rt) = setup().await;
    e.faults().inject(
        "/Dispatcher/ListenV2",
        1,
        crate::support::fail(Code::Unimplemented, "old engine"),
    );
    crate::support::start_worker(&rt, 4).await;
    let out: Value = rt
        .run("echo", &json!({"via": "listen"}))
        .await
        .expect("works over Listen");
    assert_eq!(out["via"], "listen");
    assert_eq!(e.faults().attempts("/Dispatcher/ListenV2"), 1);
    assert!(e.faults().attempts("/Dispatcher/Listen") >= 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn one_empty_ok_end_resubscribes_and_two_register_the_worker_again() {
    // One OK end with no message: the engine restarted or a proxy hung up; listen again.
    // Two in a row: the worker row is gone; register again (new worker id), then listen.
    for (ends, registers) in [(1, 1), (2, 2)] {
        let (e, rt) = setup().await;
        e.faults().inject(
            "/Dispatcher/ListenV2",
            ends,
            Fault::EndStream {
                after: 0,
                code: None,
            },
        );
        crate::support::start_worker(&rt, 4).await;
        let out: Value = rt
            .run("echo", &json!({"n": ends}))
            .await
            .expect("the action is delivered on the next stream");
        assert_eq!(out["n"], ends);
        assert_eq!(
            e.faults().attempts("/Dispatcher/Register"),
            registers,
            "{ends} empty end(s)"
        );
        assert_eq!(
            e.faults().attempts("/Dispatcher/ListenV2"),
            u64::from(ends) + 1
        );
        rt.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn crashed_listeners_restart_with_their_waiters() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("slow").task("t", |_i: Value, _c: Context| async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok::<_, TaskError>(json!({"ok": true}))
    });
    rt.register(wf).await.expect("register");
    rt.register(Workflow::new("durable").durable_task(
        "d",
        Default::default(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_secs(1)).await?;
            Ok::<_, TaskError>(json!({"slept": true}))
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 8).await;
    let slow = rt.run_no_wait("slow", &json!({})).await.expect("trigger");
    let durable = rt
        .run_no_wait("durable", &json!({}))
        .await
        .expect("trigger");
    let a = tokio::spawn({
        let slow = slow.clone();
        async move { slow.outputs().await }
    });
    let b = tokio::spawn({
        let durable = durable.clone();
        async move { durable.outputs().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    rt.crash_listener(ListenerKind::WorkflowRuns);
    rt.crash_listener(ListenerKind::DurableTask);
    rt.crash_listener(ListenerKind::WorkerActions);
    assert_eq!(
        a.await.expect("task").expect("slow result")["t"]["ok"],
        true
    );
    assert_eq!(
        b.await.expect("task").expect("durable result")["d"]["slept"],
        true
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn without_a_result_stream_waiters_fall_back_to_polling_and_back() {
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 4).await;
    // The result stream fails at once, every time (a transient code: reconnect forever).
    e.faults().inject(
        RUNS,
        u32::MAX,
        Fault::EndStream {
            after: 0,
            code: Some(Code::Unavailable as i32),
        },
    );
    // And the engine writes the run 11 s after answering the trigger (its write backlog): the
    // polls read it missing for longer than the old unknown-run verdict (two misses 5 s
    // apart), and the wait must go on.
    e.defer_trigger_writes(Some(Duration::from_secs(11)));
    let out: Value = tokio::time::timeout(
        Duration::from_secs(25),
        rt.run("echo", &json!({"polled": true})),
    )
    .await
    .expect("in time")
    .expect("the result arrives by polling");
    assert_eq!(out["polled"], true);
    e.defer_trigger_writes(None);
    assert!(
        e.faults().attempts("/v1.AdminService/GetRunDetails") >= 1,
        "it was polled"
    );
    // The stream comes back: the next waiter re-arms it, results flow through it, polling stops.
    e.faults().clear();
    let out: Value = tokio::time::timeout(
        Duration::from_secs(10),
        rt.run("echo", &json!({"streamed": true})),
    )
    .await
    .expect("in time")
    .expect("result");
    assert_eq!(out["streamed"], true);
    assert!(e.faults().attempts(RUNS) > 1, "the stream was opened again");
    let polls = e.faults().attempts("/v1.AdminService/GetRunDetails");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        e.faults().attempts("/v1.AdminService/GetRunDetails") <= polls + 1,
        "polling stopped"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_durable_stream_cut_after_the_ack_recovers_the_completion() {
    let (e, rt) = setup().await;
    rt.register(Workflow::new("nap").durable_task(
        "d",
        Default::default(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_secs(1)).await?;
            Ok::<_, TaskError>(json!({"woke": true}))
        },
    ))
    .await
    .expect("register");
    // The first DurableTask stream dies right after the register echo and the wait ack.
    e.faults().inject(
        "/v1.V1Dispatcher/DurableTask",
        1,
        Fault::EndStream {
            after: 2,
            code: Some(Code::Unavailable as i32),
        },
    );
    crate::support::start_worker(&rt, 2).await;
    let out: Value = tokio::time::timeout(Duration::from_secs(20), rt.run("nap", &json!({})))
        .await
        .expect("in time")
        .expect("result");
    assert_eq!(out["woke"], true);
    assert!(
        e.faults().attempts("/v1.V1Dispatcher/DurableTask") >= 2,
        "the stream was reopened"
    );
    assert!(rt.reconnects()[&ListenerKind::DurableTask] >= 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

/// An engine before v0.80 (durable waits go through the durable-events listener) and a runtime
/// with fast stream backoff.
async fn legacy_durable_engine() -> (DevEngine, RuntimeHandle) {
    let engine = crate::support::engine_with(DevEngineOptions::default().version("v0.79.2")).await;
    let rt =
        crate::support::runtime_with(&engine, RuntimeOptions::new().stream_backoff(fast())).await;
    (engine, rt)
}

#[tokio::test]
async fn engines_before_v0_80_get_durable_waits_through_the_durable_events_listener() {
    let (engine, rt) = legacy_durable_engine().await;
    rt.register(Workflow::new("legacy").durable_task(
        "d",
        Default::default(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_millis(500)).await?;
            let ev = c.wait_for_event("legacy:go").await?;
            Ok::<_, TaskError>(json!({"event": ev}))
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("legacy", &json!({})).await.expect("trigger");
    let waiter = tokio::spawn({
        let h = h.clone();
        async move { h.result_within::<Value>(Duration::from_secs(30)).await }
    });
    // Restart the engine while the task waits: the events stream reconnects and replays.
    tokio::time::sleep(Duration::from_millis(800)).await;
    engine.restart().await.expect("restart");
    while !waiter.is_finished() {
        let _ = rt.push("legacy:go", &json!({"ok": true})).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = waiter.await.expect("task").expect("result");
    assert_eq!(out["event"]["ok"], true);
    assert!(
        engine
            .faults()
            .attempts("/v1.V1Dispatcher/RegisterDurableEvent")
            >= 2
    );
    assert!(
        engine
            .faults()
            .attempts("/v1.V1Dispatcher/ListenForDurableEvent")
            >= 1
    );
    assert_eq!(
        engine.faults().attempts("/v1.V1Dispatcher/DurableTask"),
        0,
        "the new protocol is not used"
    );
    assert!(
        rt.reconnects()[&ListenerKind::DurableEvents] >= 1,
        "the events stream reconnected after the restart"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

use crate::support::{end, fast, stopped, until, until_listener};

const LISTEN: &str = "/Dispatcher/ListenV2";
pub(crate) const DURABLE: &str = "/v1.V1Dispatcher/DurableTask";
const EVENTS: &str = "/v1.V1Dispatcher/ListenForDurableEvent";

fn napper() -> Workflow {
    Workflow::new("nap").durable_task(
        "d",
        Default::default(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_millis(200)).await?;
            Ok::<_, TaskError>(json!({"woke": true}))
        },
    )
}

/// Starts a worker under `faults` and waits until its actions listener stops; returns the engine
/// (its counters) after the runtime is shut down.
async fn actions_stopped_by(faults: &[(&str, u32, Fault)]) -> DevEngine {
    stopped_by(setup().await, ListenerKind::WorkerActions, faults, None).await
}

/// Injects `faults`, starts a worker (and a run of `trigger`, when given), waits until the
/// listener `kind` stops, and returns the engine (its counters) after the runtime is shut down.
async fn stopped_by(
    (e, rt): (DevEngine, RuntimeHandle),
    kind: ListenerKind,
    faults: &[(&str, u32, Fault)],
    trigger: Option<&str>,
) -> DevEngine {
    for (path, times, fault) in faults {
        e.faults().inject(*path, *times, fault.clone());
    }
    crate::support::start_worker(&rt, 2).await;
    if let Some(workflow) = trigger {
        let _ = rt.run_no_wait(workflow, &json!({})).await.expect("trigger");
    }
    until_listener(&rt, kind, stopped).await;
    rt.shutdown(Duration::from_secs(1)).await;
    e
}

#[tokio::test]
async fn the_actions_listener_under_every_kind_of_stream_end() {
    // UNKNOWN is how hyper/h2 report a lost connection: transient, like UNAVAILABLE.
    // Six transient ends in a row are still not a stop (transient codes never count).
    for code in [Code::Unavailable, Code::Internal, Code::Unknown] {
        let (e, rt) = setup().await;
        e.faults().inject(LISTEN, 6, end(code));
        crate::support::start_worker(&rt, 2).await;
        let out: Value = rt
            .run("echo", &json!({"c": code as i32}))
            .await
            .expect("works after the reconnect");
        assert_eq!(out["c"], code as i32);
        assert!(e.faults().attempts(LISTEN) >= 7, "{code:?}: reopened");
        rt.shutdown(Duration::from_secs(1)).await;
    }
    for code in [
        Code::Unauthenticated,
        Code::PermissionDenied,
        Code::InvalidArgument,
    ] {
        let e = actions_stopped_by(&[(LISTEN, 1, end(code))]).await;
        assert_eq!(e.faults().attempts(LISTEN), 1, "{code:?} is not retried");
    }
    let e = actions_stopped_by(&[(LISTEN, 1000, end(Code::FailedPrecondition))]).await;
    assert_eq!(
        e.faults().attempts(LISTEN),
        10,
        "ten ends without progress, then stop"
    );
    // After the fallback, UNIMPLEMENTED on Listen is not permanent: it counts toward the ten.
    let unimplemented = || crate::support::fail(Code::Unimplemented, "no such method");
    let e = actions_stopped_by(&[
        (LISTEN, 1, unimplemented()),
        ("/Dispatcher/Listen", 1000, unimplemented()),
    ])
    .await;
    assert_eq!(
        (
            e.faults().attempts(LISTEN),
            e.faults().attempts("/Dispatcher/Listen")
        ),
        (1, 10),
        "one ListenV2, then ten Listen attempts without progress"
    );
}

#[tokio::test]
async fn the_durable_task_listener_under_every_kind_of_stream_end() {
    // EOF and CANCELLED are transport events for a stream wanted while the worker runs.
    let eof = Fault::EndStream {
        after: 0,
        code: None,
    };
    for fault in [
        end(Code::Unavailable),
        end(Code::Internal),
        end(Code::Cancelled),
        eof,
    ] {
        let (e, rt) = setup().await;
        rt.register(napper()).await.expect("register");
        e.faults().inject(DURABLE, 1, fault.clone());
        crate::support::start_worker(&rt, 2).await;
        let out: Value = tokio::time::timeout(Duration::from_secs(20), rt.run("nap", &json!({})))
            .await
            .expect("in time")
            .expect("result");
        assert_eq!(out["woke"], true, "{fault:?}");
        assert!(e.faults().attempts(DURABLE) >= 2);
        assert!(rt.reconnects()[&ListenerKind::DurableTask] >= 1);
        until_listener(&rt, ListenerKind::DurableTask, |s| {
            matches!(s, ListenerState::Connected { .. })
        })
        .await;
        rt.shutdown(Duration::from_secs(1)).await;
    }
    for (code, opens) in [(Code::Unauthenticated, 1), (Code::NotFound, 10)] {
        let e = stopped_by(
            napping_setup(DevEngineOptions::default()).await,
            ListenerKind::DurableTask,
            &[(DURABLE, 1000, end(code))],
            Some("nap"),
        )
        .await;
        assert_eq!(e.faults().attempts(DURABLE), opens, "{code:?}");
    }
}

async fn legacy_setup() -> (DevEngine, RuntimeHandle) {
    napping_setup(DevEngineOptions::default().version("v0.79.0")).await
}

/// An engine with `options` and a runtime that knows the `nap` durable workflow.
async fn napping_setup(options: DevEngineOptions) -> (DevEngine, RuntimeHandle) {
    let engine = crate::support::engine_with(options).await;
    let rt = napping_runtime(&engine).await;
    (engine, rt)
}

/// A runtime on `engine` (fast backoff) that knows the `nap` durable workflow.
async fn napping_runtime(engine: &DevEngine) -> RuntimeHandle {
    let rt =
        crate::support::runtime_with(engine, RuntimeOptions::new().stream_backoff(fast())).await;
    rt.register(napper()).await.expect("register");
    rt
}

#[tokio::test]
async fn the_durable_events_listener_under_every_kind_of_stream_end() {
    let eof = Fault::EndStream {
        after: 0,
        code: None,
    };
    // Nine failed streams in a row, and the pending signal still arrives.
    for fault in [end(Code::Unavailable), end(Code::Internal), eof] {
        let (e, rt) = legacy_setup().await;
        e.faults().inject(EVENTS, 9, fault.clone());
        crate::support::start_worker(&rt, 2).await;
        let out: Value = tokio::time::timeout(Duration::from_secs(20), rt.run("nap", &json!({})))
            .await
            .expect("in time")
            .expect("result");
        assert_eq!(out["woke"], true, "{fault:?}");
        assert!(e.faults().attempts(EVENTS) >= 10);
        rt.shutdown(Duration::from_secs(1)).await;
    }
    let (e, rt) = legacy_setup().await;
    e.faults().inject(EVENTS, 1, end(Code::Unauthenticated));
    crate::support::start_worker(&rt, 2).await;
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        rt.run::<_, Value>("nap", &json!({})),
    )
    .await
    .expect("in time")
    .expect_err("fails");
    assert!(
        err.to_string().contains("durable event stream stopped"),
        "{err}"
    );
    assert_eq!(e.faults().attempts(EVENTS), 1);
    rt.shutdown(Duration::from_secs(1)).await;
    let e = stopped_by(
        legacy_setup().await,
        ListenerKind::DurableEvents,
        &[(EVENTS, 1000, end(Code::NotFound))],
        Some("nap"),
    )
    .await;
    assert_eq!(e.faults().attempts(EVENTS), 10);
}

#[tokio::test]
async fn concurrent_waiters_share_one_stream_and_one_subscription_per_run() {
    let (e, rt) = setup().await;
    let a = rt
        .run_no_wait("echo", &json!({"a": 1}))
        .await
        .expect("trigger");
    let b = rt
        .run_no_wait("echo", &json!({"b": 1}))
        .await
        .expect("trigger");
    let waits: Vec<_> = (0..20)
        .map(|i| {
            let h = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { h.outputs().await })
        })
        .collect();
    while e.stats().pending_run_subscriptions < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        e.faults().attempts(RUNS),
        1,
        "20 waiters arriving together open one stream"
    );
    assert_eq!(
        e.stats().pending_run_subscriptions,
        2,
        "one subscription per run id, not per waiter"
    );
    assert_eq!(
        e.stats().run_subscribe_messages,
        2,
        "one subscribe message per run id on the wire"
    );
    crate::support::start_worker(&rt, 2).await;
    for w in waits {
        w.await.expect("task").expect("result");
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_result_wait_with_a_deadline_ends_with_the_run_id_and_leaves_no_waiter() {
    let (_e, rt) = setup().await;
    let h = rt.run_no_wait("echo", &json!({})).await.expect("trigger"); // no worker: never finishes
    let err = h
        .result_within::<Value>(Duration::from_millis(300))
        .await
        .expect_err("deadline");
    assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
    assert_eq!(err.run_id(), Some(h.run_id()));
    assert_eq!(rt.pending_runs(), 0, "the waiter was removed");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_end_without_waiters_goes_idle_and_the_next_waiter_rearms() {
    let (e, rt) = setup().await;
    idle_then_rearmed(&e, &rt, RUNS, ListenerKind::WorkflowRuns, "echo").await;
    rt.shutdown(Duration::from_secs(1)).await;
}

/// The stream at `path` delivers one result, then ends with OK: with nobody else waiting the
/// listener `kind` goes idle (no reconnect), and the next run of `workflow` re-arms it.
async fn idle_then_rearmed(
    e: &DevEngine,
    rt: &RuntimeHandle,
    path: &str,
    kind: ListenerKind,
    workflow: &str,
) {
    e.faults().inject(
        path,
        1,
        Fault::EndStream {
            after: 1,
            code: None,
        },
    );
    crate::support::start_worker(rt, 2).await;
    let _: Value = rt.run(workflow, &json!({})).await.expect("first result");
    // Idle is the listener's decision on that end, made: a reconnect would show as
    // Reconnecting, with its timer armed, and the next open counted.
    until_listener(rt, kind, |s| matches!(s, ListenerState::Idle)).await;
    assert_eq!(e.faults().attempts(path), 1, "no waiter: no reconnect");
    let _: Value = rt
        .run(workflow, &json!({}))
        .await
        .expect("the next waiter re-arms the stream");
    assert_eq!(e.faults().attempts(path), 2);
}

#[tokio::test]
async fn waiters_arriving_during_an_outage_ride_the_scheduled_reconnect_instead_of_opening_streams()
{
    let second = Backoff {
        base: Duration::from_secs(1),
        factor: 2,
        cap: Duration::from_secs(1),
    };
    let backoff = StreamBackoff::new()
        .stream(second)
        .waiters(second)
        .poll_after(Duration::from_secs(60))
        .poll_every(Duration::from_secs(1));
    let (engine, rt) = setup_with(RuntimeOptions::new().stream_backoff(backoff).seed(11)).await;
    // Every stream open fails at once, while a new waiter arrives every 5 ms for a second.
    engine.faults().inject(RUNS, 1000, end(Code::Unavailable));
    let started = tokio::time::Instant::now();
    let mut waits = Vec::new();
    for i in 0..200 {
        let h = rt
            .run_no_wait("echo", &json!({ "i": i }))
            .await
            .expect("trigger");
        waits.push(tokio::spawn(async move { h.outputs().await }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let opens = engine.faults().attempts(RUNS);
    let window = started.elapsed();
    // Reconnects follow the 0-1 s backoff (a handful in the window), not the 200 arrivals.
    assert!(
        opens <= 12,
        "{opens} stream opens for 200 waiters in {window:?}: arrivals bypassed the backoff"
    );
    engine.faults().clear();
    crate::support::start_worker(&rt, 16).await;
    for (i, w) in waits.into_iter().enumerate() {
        let out = tokio::time::timeout(Duration::from_secs(20), w)
            .await
            .expect("in time")
            .expect("task")
            .expect("result");
        assert_eq!(out["t"]["i"], i, "each waiter gets its own run's result");
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_waiter_added_while_its_run_is_being_delivered_still_gets_the_result_once() {
    let (_e, rt) = setup().await;
    crate::support::start_worker(&rt, 16).await;
    // The second waiter of each run arrives at a different moment around the run's delivery
    // (the run takes a few milliseconds): before, during, or after the first waiter's result.
    let rounds: Vec<_> = (0..200u64)
        .map(|round| {
            let rt = rt.clone();
            tokio::spawn(async move {
                let h = rt
                    .run_no_wait("echo", &json!({ "r": round }))
                    .await
                    .expect("trigger");
                let early = tokio::spawn({
                    let h = h.clone();
                    async move { h.outputs().await }
                });
                tokio::time::sleep(Duration::from_micros(round * 37 % 4000)).await;
                let late = h.outputs().await.expect("the late waiter's result");
                let early = early
                    .await
                    .expect("task")
                    .expect("the early waiter's result");
                assert_eq!(early, late, "round {round}");
                assert_eq!(late["t"]["r"], round);
            })
        })
        .collect();
    for r in rounds {
        tokio::time::timeout(Duration::from_secs(30), r)
            .await
            .expect("in time")
            .expect("round");
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

/// Runs one `echo` under `faults` on the runs stream; returns the engine for its counters once
/// the listener is idle.
async fn runs_listener_after(faults: &[Fault]) -> (DevEngine, RuntimeHandle) {
    let (e, rt) = setup().await;
    crate::support::start_worker(&rt, 2).await;
    for f in faults {
        e.faults().inject(RUNS, 1, f.clone());
    }
    let out: Value = rt.run("echo", &json!({"n": 1})).await.expect("result");
    assert_eq!(out["n"], 1);
    until_listener(&rt, ListenerKind::WorkflowRuns, |s| {
        matches!(s, ListenerState::Idle)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    (e, rt)
}

#[tokio::test]
async fn each_end_is_judged_on_its_own_eof_with_a_waiter_reconnects_without_goes_idle() {
    let eof_after = |after| Fault::EndStream { after, code: None };
    // EOF while the waiter is pending: reconnect; the next stream delivers, then EOF: idle.
    let (e, rt) = runs_listener_after(&[eof_after(0), eof_after(1)]).await;
    assert_eq!(
        e.faults().attempts(RUNS),
        2,
        "one reconnect, and none after the idle EOF"
    );
    rt.shutdown(Duration::from_secs(1)).await;
    // A NOT_FOUND end (counted toward the ten) then a delivering stream ending with EOF: idle,
    // not stopped: the no-progress count never turns an EOF into a stop.
    let (e, rt) = runs_listener_after(&[end(Code::NotFound), eof_after(1)]).await;
    assert_eq!(e.faults().attempts(RUNS), 2);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn after_shutdown_every_listener_is_stopped_cleanly_and_nothing_reconnects() {
    let (e, rt) = setup().await;
    rt.register(napper()).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let _: Value = rt.run("nap", &json!({})).await.expect("a durable run");
    let pending = rt.run_no_wait("never-registered-here", &json!({})).await;
    let opens = |e: &DevEngine| [RUNS, DURABLE, LISTEN].map(|p| e.faults().attempts(p));
    rt.shutdown(Duration::from_secs(1)).await;
    let before = opens(&e);
    for (kind, rx) in rt.health() {
        assert!(
            matches!(*rx.borrow(), ListenerState::Stopped { error: None }),
            "{kind:?}: stopped without an error"
        );
    }
    // A wait after shutdown fails at once as closed, and arms nothing.
    if let Ok(h) = pending {
        let err = rt
            .run_handle(h.run_id())
            .outputs()
            .await
            .expect_err("closed");
        assert_eq!(err.outcome(), Outcome::Closed);
    }
    let err = rt
        .run_handle("00000000-0000-4000-8000-000000000000")
        .outputs()
        .await
        .expect_err("closed");
    assert_eq!(err.outcome(), Outcome::Closed);
    // Every listener is stopped (nothing left to reconnect), which is what "no stream opens"
    // rests on: checked state by state, then the engine's count of opens.
    for (kind, rx) in rt.health() {
        assert!(
            matches!(*rx.borrow(), ListenerState::Stopped { .. }),
            "{kind:?} is stopped"
        );
    }
    assert_eq!(opens(&e), before, "no stream opens after shutdown");
}

#[tokio::test]
async fn polling_passes_never_overlap_however_slow_the_engine_answers() {
    const DETAILS: &str = "/v1.AdminService/GetRunDetails";
    let ms = Duration::from_millis;
    let backoff = fast().poll_after(ms(50)).poll_every(ms(10));
    let (e, rt) = setup_with(RuntimeOptions::new().stream_backoff(backoff).seed(5)).await;
    e.faults().inject(RUNS, u32::MAX, end(Code::Unavailable));
    // Each GetRunDetails takes 200 ms; no worker, so the runs never finish.
    e.faults()
        .inject(DETAILS, u32::MAX, Fault::Delay { ms: 200 });
    let mut waits = Vec::new();
    for i in 0..3 {
        let h = rt
            .run_no_wait("echo", &json!({ "i": i }))
            .await
            .expect("trigger");
        waits.push(tokio::spawn(async move { h.outputs().await }));
    }
    tokio::time::sleep(ms(1500)).await;
    let calls = e.faults().attempts(DETAILS);
    // One pass at a time, one call at a time: at most ~1.5 s / 200 ms calls. Overlapping passes
    // (a new one every 10 ms) would have made well over a hundred.
    assert!(
        (1..=10).contains(&calls),
        "{calls} GetRunDetails calls in 1.5 s"
    );
    rt.shutdown(Duration::from_secs(1)).await;
    for w in waits {
        let _ = w.await;
    }
}

#[tokio::test]
async fn the_durable_events_stream_goes_idle_without_waiters_and_the_next_wait_rearms_it() {
    let (e, rt) = legacy_setup().await;
    idle_then_rearmed(&e, &rt, EVENTS, ListenerKind::DurableEvents, "nap").await;
    assert_eq!(
        e.stats().durable_event_listen_messages,
        2,
        "each signal sent once, on its own stream"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn concurrent_durable_event_waits_share_one_stream_and_send_each_signal_once() {
    let (e, rt) = legacy_setup().await;
    crate::support::start_worker(&rt, 8).await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move { rt.run::<_, Value>("nap", &json!({})).await })
        })
        .collect();
    for r in runs {
        let out = r.await.expect("task").expect("result");
        assert_eq!(out["woke"], true);
    }
    assert_eq!(e.faults().attempts(EVENTS), 1, "one stream for every wait");
    assert_eq!(
        e.stats().durable_event_listen_messages,
        4,
        "one signal per wait"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_legacy_durable_wait_dropped_by_its_task_leaves_no_waiter_behind() {
    // The task gives up on its own (a timeout drops the wait's future; no cancellation): the
    // wait must still leave the durable-events registry, or it would stay until shutdown.
    let (_engine, rt) = legacy_durable_engine().await;
    let seen = Arc::new(Mutex::new(None));
    rt.register(
        Workflow::new("gives-up").durable_task("d", Default::default(), {
            let seen = seen.clone();
            move |_i: Value, c: Context| {
                let seen = seen.clone();
                async move {
                    let waited =
                        tokio::time::timeout(Duration::from_millis(300), c.wait_for_event("never"))
                            .await;
                    *seen.lock() = Some(waited.is_err());
                    Ok::<_, TaskError>(json!({}))
                }
            }
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt
        .run_no_wait("gives-up", &json!({}))
        .await
        .expect("trigger");
    h.result_within::<Value>(Duration::from_secs(20))
        .await
        .expect("the task finishes");
    assert_eq!(*seen.lock(), Some(true), "the wait timed out in the task");
    assert_eq!(
        rt.pending_durable_event_waits(),
        0,
        "the dropped wait removed its waiter"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// `stream` invariant 8: with a rotation period of 600 ms, the actions stream and the results
/// stream move to fresh streams while work flows. Each successor opens before its predecessor
/// closes (the engine holds two actions sessions of the worker at once), the actions listener
/// reads connected throughout, and every run finishes, once.
#[tokio::test]
async fn rotating_streams_move_while_work_flows_and_lose_nothing() {
    let (engine, rt) = setup_with(
        RuntimeOptions::new()
            .stream_rotation(Some(Duration::from_millis(600)))
            .seed(3),
    )
    .await;
    let engine = Arc::new(engine);
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let x = ran.clone();
    rt.register(
        Workflow::new("rot").task("t", move |i: Value, _c: Context| {
            x.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok::<_, TaskError>(i) }
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 8).await;
    until_listener(&rt, ListenerKind::WorkerActions, |s| {
        matches!(s, ListenerState::Connected { .. })
    })
    .await;
    // Every state the actions listener reports from here on, and the most sessions the engine
    // held for the worker at once.
    let mut health = rt.health()[&ListenerKind::WorkerActions].clone();
    health.borrow_and_update();
    let states: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = states.clone();
    let watcher = tokio::spawn(async move {
        while health.changed().await.is_ok() {
            let s = format!("{:?}", *health.borrow_and_update());
            seen.lock().push(s);
        }
    });
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (m, e) = (most.clone(), engine.clone());
    let sampler = tokio::spawn(async move {
        loop {
            m.fetch_max(
                e.stats().listener_sessions,
                std::sync::atomic::Ordering::SeqCst,
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let mut n = 0;
    for _ in 0..12 {
        let mut batch = Vec::new();
        for _ in 0..5 {
            n += 1;
            batch.push(
                rt.run_no_wait("rot", &json!({"n": n}))
                    .await
                    .expect("trigger"),
            );
        }
        for (k, h) in batch.into_iter().enumerate() {
            let out: Value = h
                .result_within(Duration::from_secs(20))
                .await
                .expect("every run finishes across rotations");
            assert_eq!(out["n"], n - 4 + k as i64);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sampler.abort();
    watcher.abort();
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        60,
        "each run once"
    );
    assert!(
        most.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "a successor opened before its predecessor closed"
    );
    let states = states.lock().clone();
    assert!(
        states.iter().all(|s| s.starts_with("Connected")),
        "the actions listener read connected throughout: {states:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// The engine watch (docs/contract.md §3), counted at the engine: a client with no worker (so no
/// heartbeat) whose engine stops and comes back serves its runs stream again within a probe of
/// the return, however long the reconnect backoff the outage drew. Without the watch the
/// listener waits out its backoff (windows of 10 s, 20 s, 30 s here); with it the engine is
/// probed with GetVersion about every second and the first answer opens the stream.
#[tokio::test]
async fn a_listener_serves_within_a_probe_of_the_engine_s_return_however_long_its_backoff() {
    const PROBE: &str = "/Dispatcher/GetVersion";
    let slow = Backoff {
        base: Duration::from_secs(10),
        factor: 2,
        cap: Duration::from_secs(30),
    };
    let (e, rt) = setup_with(
        RuntimeOptions::new()
            .stream_backoff(StreamBackoff::new().stream(slow).waiters(slow))
            .seed(11),
    )
    .await;
    // A waiter with no worker: its run stays queued, so the runs stream stays wanted.
    let h = rt.run_no_wait("echo", &json!({})).await.expect("trigger");
    let waiter =
        tokio::spawn(async move { h.result_within::<Value>(Duration::from_secs(60)).await });
    let mut runs = rt.health()[&ListenerKind::WorkflowRuns].clone();
    let connected = |s: &ListenerState| matches!(s, ListenerState::Connected { .. });
    tokio::time::timeout(Duration::from_secs(10), runs.wait_for(connected))
        .await
        .expect("the runs stream serves")
        .expect("health");
    e.faults().record_times(PROBE);
    e.shutdown().await;
    tokio::time::timeout(Duration::from_secs(10), runs.wait_for(|s| !connected(s)))
        .await
        .expect("the stop is seen")
        .expect("health");
    tokio::time::sleep(Duration::from_secs(2)).await;
    e.start_again().await.expect("serve again");
    let back = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), runs.wait_for(connected))
        .await
        .expect("the runs stream serves again")
        .expect("health");
    let took = back.elapsed();
    let probes = e.faults().attempt_times(PROBE).len();
    assert!(probes >= 1, "the engine was probed after its return");
    assert!(
        took < Duration::from_secs(3),
        "served {took:?} after the engine's return (a probe a second), not after the backoff"
    );
    e.complete_queued("echo");
    let _ = waiter.await;
    rt.shutdown(Duration::from_secs(1)).await;
}
