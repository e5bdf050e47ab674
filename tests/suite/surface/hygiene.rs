//! Token hygiene: every log line of a quickstart-like run, captured at TRACE level (ours and our
//! dependencies': tonic, h2, hyper, reqwest, ractor), never contains the token.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use hatchet_runtime::{Context, TaskError, TaskOptions, WorkerOptions, Workflow};
use parking_lot::Mutex;
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_token_never_appears_in_trace_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Other tests of this process register callsites while no subscriber of theirs wants
    // TRACE; a callsite cached as "never" in that race would skip this thread's subscriber
    // (seen once in a full run: a line of ours missing). Recompute every callsite's interest
    // now that this subscriber exists.
    tracing::callsite::rebuild_interest_cache();

    let engine = crate::support::engine().await;
    let token = engine.client_config().env_lines()[0].1.clone();
    let rt = crate::support::runtime(&engine).await;
    rt.register(
        Workflow::new("hyg")
            .task("a", |i: Value, c: Context| async move {
                c.log("hello from a task");
                Ok::<_, TaskError>(i)
            })
            .task_with(
                "b",
                TaskOptions::new().parents(["a"]),
                |_i: Value, _c: Context| async move { Ok::<_, TaskError>(json!({})) },
            ),
    )
    .await
    .expect("register");
    rt.register(Workflow::new("hyg-durable").durable_task(
        "d",
        TaskOptions::new(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_secs(1)).await?;
            Ok::<_, TaskError>(json!({}))
        },
    ))
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("hyg", 8))
        .await
        .expect("start");
    for i in 0..5 {
        let _: Value = rt.run("hyg", &json!({"i": i})).await.expect("run");
    }
    let d = rt
        .run_no_wait("hyg-durable", &json!({}))
        .await
        .expect("trigger");
    // A START lost in the restart: the real engine leaves that attempt to run out its timeout;
    // this test is about the waiters, so the engine offers it again (its fault, on here).
    engine.reoffer_unanswered_assignments(true);
    // The first reopen of the actions stream after the restart is refused, so its reconnect
    // path logs whatever the timing (a restart faster than the runtime notices would let the
    // stream reopen at once, with no reconnect line to check).
    engine.faults().inject(
        "/Dispatcher/ListenV2",
        1,
        crate::support::fail(tonic::Code::Unavailable, "refused once after the restart"),
    );
    engine.restart().await.expect("restart");
    let _: Value = d
        .result_within(Duration::from_secs(30))
        .await
        .expect("durable run");
    rt.push("some:event", &json!({})).await.expect("push");
    let _ = rt.api().workers().await.expect("rest read");
    let _ = rt.api().run(d.run_id()).await.expect("rest read");
    // A failing call's error is logged too.
    let _ = rt.run_no_wait("no-such-workflow", &json!({})).await;
    rt.shutdown(Duration::from_secs(1)).await;

    let logs = String::from_utf8_lossy(&capture.0.lock()).into_owned();
    assert!(
        logs.len() > 10_000,
        "the capture works ({} bytes)",
        logs.len()
    );
    // Our own lines reach the capture. One of the two is enough: twice in a full parallel run
    // one line of ours was missing (another test's thread registering its callsite at the same
    // moment; tracing caches a callsite's interest process-wide), never both.
    let ours = ["retry ceiling", "listener reconnecting"];
    let captured: Vec<&str> = ours.iter().copied().filter(|l| logs.contains(l)).collect();
    assert!(
        !captured.is_empty(),
        "none of our own lines {ours:?} was captured; the last lines:\n{}",
        logs.lines().rev().take(40).collect::<Vec<_>>().join("\n")
    );
    if captured.len() < ours.len() {
        eprintln!("hygiene: only {captured:?} of our lines {ours:?} were captured");
    }
    assert!(!logs.contains(&token), "the token leaked into the logs");
    // Neither the claims nor the signature segment appear on their own.
    for segment in token.split('.').skip(1) {
        assert!(
            !logs.contains(segment),
            "a token segment leaked into the logs"
        );
    }
}

#[tokio::test]
async fn every_unary_call_the_engine_sees_is_in_the_runtime_s_ledger() {
    // A workload that makes every kind of unary call the runtime makes: registration, triggers,
    // step events, logs, stream chunks, child runs, durable and legacy-free waits, pushes, rate
    // limits, reads, heartbeats, the drain's unsubscribe. Then the engine's count of each unary
    // method must equal the ledger's: a call that bypassed the retry core would show here.
    let engine = crate::support::engine().await;
    let rt = crate::support::runtime(&engine).await;
    rt.register(
        Workflow::new("kid").task(
            "k",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        ),
    )
    .await
    .expect("register");
    rt.register(
        Workflow::new("busy").task("t", |_i: Value, c: Context| async move {
            c.log("a line");
            c.put_stream("a chunk").await?;
            let kid: Value = c
                .spawn_child("kid", &json!({"k": 1}))
                .await?
                .result()
                .await?;
            Ok::<_, TaskError>(json!({"kid": kid}))
        }),
    )
    .await
    .expect("register");
    rt.register(Workflow::new("nap").durable_task(
        "d",
        TaskOptions::new(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_millis(10)).await?;
            Ok::<_, TaskError>(json!({}))
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 4).await;
    let h = rt.run_no_wait("busy", &json!({})).await.expect("trigger");
    let _: Value = h.result().await.expect("busy");
    let _: Value = rt.run("nap", &json!({})).await.expect("nap");
    rt.push("some:event", &json!({})).await.expect("push");
    rt.put_rate_limit("k", 5, hatchet_runtime::task::RateLimitWindow::Second)
        .await
        .expect("rate limit");
    rt.run_details(h.run_id()).await.expect("details");
    rt.shutdown(Duration::from_secs(2)).await;

    let ledger = rt.counters();
    let seen = engine.faults().counters();
    let mut checked = 0;
    for path in hatchet_runtime::test_hooks::unary_methods() {
        let at_engine = seen.get(path).copied().unwrap_or(0);
        let in_ledger = ledger.get(path).map_or(0, |c| c.attempts);
        assert_eq!(
            at_engine, in_ledger,
            "{path}: engine {at_engine}, ledger {in_ledger}"
        );
        checked += u64::from(at_engine > 0);
    }
    assert!(
        checked >= 10,
        "the workload made {checked} kinds of unary call"
    );
}

/// Dropping the last handle without `shutdown()` warns only where it loses something (tasks running
/// here, cancelled and reported to nobody); a client's `main` that ends with `?`, or a worker with
/// nothing running, stops quietly.
#[tokio::test]
async fn the_last_handle_dropped_warns_only_when_tasks_are_running() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let warned = |c: &Capture| {
        String::from_utf8_lossy(&c.0.lock())
            .lines()
            .filter(|l| l.contains("the last RuntimeHandle was dropped"))
            .count()
    };
    let engine = crate::support::engine().await;
    // A client: nothing is lost.
    let client = crate::support::runtime(&engine).await;
    drop(client);
    // A worker with nothing running: nothing is lost.
    let idle = crate::support::runtime(&engine).await;
    idle.register(
        Workflow::new("idle").task("t", |_: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({}))
        }),
    )
    .await
    .expect("register");
    idle.start_worker(WorkerOptions::new("idle", 1))
        .await
        .expect("start");
    drop(idle);
    assert_eq!(warned(&capture), 0, "no warning where nothing is lost");
    // A worker with a task running: it is cancelled and reported to nobody.
    let busy = crate::support::runtime(&engine).await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    busy.register(
        Workflow::new("busy").task("t", move |_: Value, c: Context| {
            let started_tx = started_tx.clone();
            async move {
                let _ = started_tx.send(());
                c.cancellation().cancelled().await;
                Ok::<_, TaskError>(json!({}))
            }
        }),
    )
    .await
    .expect("register");
    busy.start_worker(WorkerOptions::new("busy", 1))
        .await
        .expect("start");
    let _run = busy.run_no_wait("busy", &json!({})).await.expect("trigger");
    started.recv().await.expect("the task runs");
    drop(busy);
    assert_eq!(warned(&capture), 1, "one warning: a running task was lost");
}
