//! The supervision tree as designed: a crashed stream supervisor brings back every listener, a
//! listener crashing past the restart intensity limit is stopped with a clear error, a crash hits
//! the listener it names, `start_worker` means registered, and a drain keeps the worker alive in
//! the engine's eyes until its last task has reported.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::health::{ListenerKind, ListenerState};
use hatchet_runtime::test_hooks::LISTENER_MAX_RESTARTS as MAX_RESTARTS;
use hatchet_runtime::{
    Context, Outcome, RuntimeHandle, RuntimeOptions, TaskError, TaskOptions, WorkerOptions,
    Workflow,
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tonic::Code;

use crate::support::fast;
use crate::support::until_listener;

const ALL: [ListenerKind; 4] = [
    ListenerKind::WorkerActions,
    ListenerKind::WorkflowRuns,
    ListenerKind::DurableEvents,
    ListenerKind::DurableTask,
];

use crate::support::{engine_with as engine, runtime_with as runtime};

/// `echo` (returns its input) and `nap` (a durable task that sleeps 10 ms).
async fn register_echo_and_nap(rt: &RuntimeHandle) {
    rt.register(crate::support::echo())
        .await
        .expect("register echo");
    rt.register(Workflow::new("nap").durable_task(
        "d",
        TaskOptions::new(),
        |_i: Value, c: Context| async move {
            c.sleep_for(Duration::from_millis(10)).await?;
            Ok::<_, TaskError>(json!({"napped": true}))
        },
    ))
    .await
    .expect("register nap");
}

/// An engine and a runtime (fast reconnects) with `echo` and `nap` and a started worker of 2
/// slots; the worker id.
async fn started() -> (DevEngine, RuntimeHandle, String) {
    let e = engine(DevEngineOptions::default()).await;
    let rt = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    register_echo_and_nap(&rt).await;
    let id = rt
        .start_worker(WorkerOptions::new("w", 2))
        .await
        .expect("start");
    (e, rt, id)
}

/// Waits (up to 10 s) until `listener`'s restarts reach `n`.
async fn restarts_reach(rt: &RuntimeHandle, listener: ListenerKind, n: u64) -> bool {
    tokio::time::timeout(Duration::from_secs(10), async {
        while rt.listener_restarts()[&listener] < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok()
}

/// Crashes `listener` until its restart count reaches `n` (a crash sent while the previous
/// restart is still spawning its actor may find no actor: it is sent again).
async fn crash_until(rt: &RuntimeHandle, listener: ListenerKind, n: u64) {
    for _ in 0..100 {
        if rt.listener_restarts()[&listener] >= n {
            return;
        }
        rt.crash_listener(listener);
        let _ = tokio::time::timeout(Duration::from_millis(200), async {
            while rt.listener_restarts()[&listener] < n {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
    }
    panic!("{listener:?} did not reach {n} restarts");
}

#[tokio::test]
async fn crash_listener_hits_the_listener_it_names() {
    let (_e, rt, _) = started().await;
    for (i, kind) in ALL.into_iter().enumerate() {
        rt.crash_listener(kind);
        assert!(restarts_reach(&rt, kind, 1).await, "{kind:?} restarted");
        let restarts = rt.listener_restarts();
        for other in ALL {
            let expected = u64::from(ALL[..=i].contains(&other));
            assert_eq!(
                restarts[&other], expected,
                "after crashing {kind:?}: {other:?} restarted {} times",
                restarts[&other]
            );
        }
    }
    // Every listener still works after its restart.
    let out: Value = rt.run("echo", &json!({"x": 1})).await.expect("echo");
    assert_eq!(out, json!({"x": 1}));
    let out: Value = rt.run("nap", &json!({})).await.expect("nap");
    assert_eq!(out, json!({"napped": true}));
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_crashed_stream_supervisor_brings_back_every_listener_the_worker_s_included() {
    let (e, rt, _) = started().await;
    let out: Value = rt.run("nap", &json!({})).await.expect("nap before");
    assert_eq!(out, json!({"napped": true}));
    let listens = e.faults().attempts("/Dispatcher/ListenV2");
    let durable = e.faults().attempts("/v1.V1Dispatcher/DurableTask");

    rt.crash_stream_supervisor();
    // The new supervisor spawns the actions listener again, which opens a new ListenV2 (the old
    // actor died with its supervisor: before the fix the worker went deaf here).
    tokio::time::timeout(Duration::from_secs(10), async {
        while e.faults().attempts("/Dispatcher/ListenV2") == listens
            || e.faults().attempts("/v1.V1Dispatcher/DurableTask") == durable
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the actions and durable-task listeners reopen their streams");

    // A run triggered afterwards is executed and its result delivered; so is a durable one.
    let out: Value = rt.run("echo", &json!({"after": true})).await.expect("echo");
    assert_eq!(out, json!({"after": true}));
    let out: Value = rt.run("nap", &json!({})).await.expect("nap after");
    assert_eq!(out, json!({"napped": true}));
    // All four have a live actor under the new supervisor: each one it is asked to crash
    // is restarted by it.
    for kind in ALL {
        let before = rt.listener_restarts()[&kind];
        rt.crash_listener(kind);
        assert!(
            restarts_reach(&rt, kind, before + 1).await,
            "{kind:?} is supervised again"
        );
    }
    let out: Value = rt.run("echo", &json!({"last": 1})).await.expect("echo");
    assert_eq!(out, json!({"last": 1}));
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_listener_crashing_past_the_intensity_limit_is_stopped_and_its_waiters_say_why() {
    let e = engine(DevEngineOptions::default()).await;
    let rt = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    register_echo_and_nap(&rt).await;
    // No worker: the run stays queued, so its waiter waits.
    let run = rt.run_no_wait("echo", &json!({})).await.expect("trigger");
    let waiting = {
        let run = run.clone();
        tokio::spawn(async move { run.result::<Value>().await })
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while rt.pending_runs() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the waiter is registered");

    crash_until(&rt, ListenerKind::WorkflowRuns, MAX_RESTARTS as u64).await;
    assert!(
        !waiting.is_finished(),
        "ten restarts keep the waiter (the registry survives)"
    );
    crash_until(&rt, ListenerKind::WorkflowRuns, MAX_RESTARTS as u64 + 1).await;
    until_listener(&rt, ListenerKind::WorkflowRuns, |s| {
        matches!(s, ListenerState::Stopped { error: Some(_) })
    })
    .await;
    let ListenerState::Stopped { error: Some(why) } =
        rt.health()[&ListenerKind::WorkflowRuns].borrow().clone()
    else {
        panic!("stopped with a reason");
    };
    assert!(why.contains("failed more than 10 times"), "{why}");

    let err = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter fails at once")
        .expect("joined")
        .expect_err("the listener is gone");
    assert_eq!(err.run_id(), Some(run.run_id()), "the run id is kept");
    assert!(
        err.to_string().contains("failed more than 10 times"),
        "{err}"
    );
    // A new waiter is refused at once with the same reason, never left hanging.
    let err = tokio::time::timeout(Duration::from_secs(1), run.result::<Value>())
        .await
        .expect("refused at once")
        .expect_err("refused");
    assert!(
        err.to_string().contains("failed more than 10 times"),
        "{err}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn start_worker_resolves_with_the_registered_id_and_a_refused_token_fails_at_once() {
    let e = engine(DevEngineOptions::default()).await;
    let rt = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    register_echo_and_nap(&rt).await;
    e.faults().inject(
        "/Dispatcher/Register",
        1,
        crate::support::fail(Code::Unauthenticated, "invalid token"),
    );
    let err = rt
        .start_worker(WorkerOptions::new("w", 2))
        .await
        .expect_err("a refused token fails the start");
    assert_eq!(
        e.faults().attempts("/Dispatcher/Register"),
        1,
        "one attempt"
    );
    assert_eq!(err.outcome(), Outcome::Rejected);
    assert_eq!(
        err.status().map(hatchet_runtime::errors::GrpcStatus::code),
        Some(hatchet_runtime::errors::GrpcCode::Unauthenticated)
    );
    assert!(err.to_string().contains("HATCHET_CLIENT_TOKEN"), "{err}");
    assert_eq!(rt.worker_id(), None);

    // Once the engine accepts the token, start_worker returns the id the engine registered.
    let id = rt
        .start_worker(WorkerOptions::new("w", 2))
        .await
        .expect("started");
    assert_eq!(rt.worker_id().as_deref(), Some(id.as_str()));
    assert!(e.worker(&id).is_some(), "the engine knows the worker");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_drain_longer_than_the_heartbeat_window_keeps_the_task_on_its_worker() {
    // Scaled down 15x: the engine reassigns a worker's tasks after 2 s without a heartbeat, the
    // worker heartbeats every 200 ms, the task runs 3 s and the drain allows 5 s. Before the fix
    // the drain stopped the heartbeat with the actions stream, and the second worker ran the
    // task again.
    let e = engine(DevEngineOptions::default().reassign_after(Duration::from_secs(2))).await;
    let executions: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<i64>();
    let slow = {
        let executions = executions.clone();
        move || {
            let (executions, started_tx) = (executions.clone(), started_tx.clone());
            Workflow::new("slow").task("t", move |i: Value, _c: Context| {
                let (executions, started_tx) = (executions.clone(), started_tx.clone());
                async move {
                    let n = i["n"].as_i64().unwrap_or(-1);
                    *executions.lock().entry(n).or_default() += 1;
                    let _ = started_tx.send(n);
                    if n == 1 {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                    }
                    Ok::<_, TaskError>(json!({"n": n}))
                }
            })
        }
    };
    let opts = RuntimeOptions::new()
        .stream_backoff(fast())
        .heartbeat_every(Duration::from_millis(200));
    let draining = runtime(&e, opts.clone()).await;
    draining.register(slow()).await.expect("register");
    let a = draining
        .start_worker(WorkerOptions::new("draining", 2))
        .await
        .expect("start");
    let first = draining
        .run_no_wait("slow", &json!({"n": 1}))
        .await
        .expect("trigger");
    assert_eq!(started.recv().await, Some(1), "the first run starts on A");
    // Only now a second worker joins: anything the engine takes from A goes to it.
    let other = runtime(&e, opts).await;
    other.register(slow()).await.expect("register");
    other
        .start_worker(WorkerOptions::new("other", 2))
        .await
        .expect("start");

    let drain = {
        let draining = draining.clone();
        tokio::spawn(async move { draining.shutdown(Duration::from_secs(5)).await })
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while !e.worker(&a).is_some_and(|w| w.paused) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the drain pauses the worker first");
    let at_pause = e.worker(&a).expect("known");
    assert_eq!(at_pause.assignments, 1);

    // A run triggered during the drain goes to the other worker, never to the paused one.
    let second: Value = other.run("slow", &json!({"n": 2})).await.expect("second");
    assert_eq!(second, json!({"n": 2}));
    // The first run's result arrives, and it ran exactly once across both workers. It is read
    // through the runtime that stays: the draining one stops once its worker is drained, which
    // may come before the engine publishes the run's end (its status lag), and a stopped
    // runtime's waits end `Closed`.
    let first = other.run_handle(first.run_id());
    let out: Value = tokio::time::timeout(Duration::from_secs(10), first.result())
        .await
        .expect("in time")
        .expect("the first run completes");
    assert_eq!(out, json!({"n": 1}));
    tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("the drain ends")
        .expect("joined");
    let after = e.worker(&a).expect("known");
    assert_eq!(
        after.assignments, 1,
        "nothing new was assigned after the pause"
    );
    assert!(
        after.heartbeats >= at_pause.heartbeats + 5,
        "heartbeats went on through the drain ({} at the pause, {} after)",
        at_pause.heartbeats,
        after.heartbeats
    );
    assert_eq!(
        executions.lock().clone(),
        HashMap::from([(1, 1), (2, 1)]),
        "each run executed once"
    );
    other.shutdown(Duration::from_secs(1)).await;
}

/// Set in the child process the signal test runs in, so that its SIGTERMs reach no other test.
#[cfg(unix)]
const SIGNAL_CHILD: &str = "HATCHET_SIGNAL_TEST_CHILD";

/// `run_until_signal` under real signals, in a process of its own (this test binary again, with
/// only [`signals_child`] selected): a SIGTERM sent to it can reach no test running beside it.
#[cfg(unix)]
#[test]
fn run_until_signal_under_real_signals_in_its_own_process() {
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "faults::supervision::signals_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(SIGNAL_CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let pid = child.id().to_string();
    let sigterm = || {
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
    };
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // The harness may print its "test ... " prefix on the same line.
            if let Some(at) = line.find("SIG:") {
                let _ = tx.send(line[at + 4..].trim().to_string());
            }
        }
    });
    let expect = |step: &str| {
        let got = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the child did not reach {step:?}"));
        assert_eq!(got, step);
    };
    // 1. Dropped before a signal: the runtime serves on, and a SIGTERM afterwards does not end
    //    the process (the handlers stay: the doc says so). The child answers after the kill
    //    returned, which it could not do had the signal taken its default action.
    expect("dropped");
    assert!(sigterm().success());
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "ping").expect("ping");
    expect("alive");
    // 2. Serving until a signal with a task that runs until cancelled: the first SIGTERM starts
    //    the drain (sent until the engine shows the worker paused), the second cuts it.
    expect("serving");
    let mut draining = false;
    for _ in 0..50 {
        sigterm();
        if let Ok(step) = lines.recv_timeout(Duration::from_millis(200)) {
            assert_eq!(step, "draining");
            draining = true;
            break;
        }
    }
    assert!(draining, "the first SIGTERM starts the drain");
    assert!(sigterm().success());
    expect("stopped");
    let status = child.wait().expect("the child ends");
    assert!(status.success(), "the child's checks hold: {status}");
}

/// The child half of [`run_until_signal_under_real_signals_in_its_own_process`]; it does
/// nothing unless that test started it.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs in its own process, started by run_until_signal_under_real_signals_in_its_own_process"]
async fn signals_child() {
    use tokio::io::AsyncBufReadExt;
    if std::env::var_os(SIGNAL_CHILD).is_none() {
        return;
    }
    let step = |s: &str| println!("SIG:{s}");
    let (e, rt, id) = started().await;
    let dropped = tokio::time::timeout(
        Duration::from_millis(50),
        rt.run_until_signal(Duration::from_secs(1)),
    )
    .await;
    assert!(dropped.is_err(), "no signal came: it was still waiting");
    step("dropped");
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let ping = stdin.next_line().await.expect("stdin");
    assert_eq!(ping.as_deref(), Some("ping"));
    assert!(
        !rt.is_closed(),
        "dropping it stopped nothing, nor did the SIGTERM after it"
    );
    let out: Value = rt
        .run("echo", &json!({"still": "serving"}))
        .await
        .expect("run");
    assert_eq!(out, json!({"still": "serving"}));
    step("alive");

    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel::<()>();
    let other = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    other
        .register(
            Workflow::new("stuck").task("t", move |_i: Value, c: Context| {
                let (started_tx, cancelled_tx) = (started_tx.clone(), cancelled_tx.clone());
                async move {
                    let _ = started_tx.send(());
                    // Runs until cancelled: only the second signal can end the drain early.
                    c.cancellation().cancelled().await;
                    let _ = cancelled_tx.send(());
                    Ok::<_, TaskError>(json!({}))
                }
            }),
        )
        .await
        .expect("register");
    let stuck_worker = other
        .start_worker(WorkerOptions::new("stuck", 2))
        .await
        .expect("start");
    rt.shutdown(Duration::from_secs(1)).await;
    drop(id);
    other
        .run_no_wait("stuck", &json!({}))
        .await
        .expect("trigger");
    started_rx.recv().await.expect("the task runs");
    let serving = {
        let rt = other.clone();
        tokio::spawn(async move { rt.run_until_signal(Duration::from_secs(60)).await })
    };
    step("serving");
    tokio::time::timeout(Duration::from_secs(15), async {
        while !e.worker(&stuck_worker).is_some_and(|w| w.paused) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the first SIGTERM starts the drain");
    assert!(
        !serving.is_finished(),
        "the drain waits for the running task"
    );
    assert!(!other.is_closed());
    step("draining");
    // The second signal cancels the running task and ends the shutdown at once (the drain
    // would otherwise wait 60 s).
    let stopped = tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("stopped at once")
        .expect("joined")
        .expect("handlers installed");
    assert_eq!(stopped, hatchet_runtime::health::StopSignal::Terminate);
    cancelled
        .recv()
        .await
        .expect("the running task was cancelled");
    assert!(other.is_closed());
    step("stopped");
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_runtime_and_fails_its_waits_closed() {
    let e = engine(DevEngineOptions::default()).await;
    let rt = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel::<()>();
    rt.register(
        Workflow::new("stuck").task("t", move |_i: Value, c: Context| {
            let (started_tx, cancelled_tx) = (started_tx.clone(), cancelled_tx.clone());
            async move {
                let _ = started_tx.send(());
                c.cancellation().cancelled().await;
                let _ = cancelled_tx.send(());
                Ok::<_, TaskError>(json!({}))
            }
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("stuck", &json!({})).await.expect("trigger");
    started_rx.recv().await.expect("the task runs");
    assert_eq!(e.stats().listener_sessions, 1);
    let clone = rt.clone();
    drop(rt);
    assert_eq!(
        e.stats().listener_sessions,
        1,
        "a clone keeps the runtime alive"
    );
    drop(clone);
    tokio::time::timeout(Duration::from_secs(10), cancelled.recv())
        .await
        .expect("the running task is cancelled at once")
        .expect("cancelled");
    let err = tokio::time::timeout(Duration::from_secs(10), h.result::<Value>())
        .await
        .expect("the wait ends")
        .expect_err("nothing delivers it any more");
    assert_eq!(err.outcome(), hatchet_runtime::Outcome::Closed, "{err}");
    tokio::time::timeout(Duration::from_secs(10), async {
        while e.stats().listener_sessions > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the worker's stream closes");
}

/// A handler that triggers another workflow through `Context::runtime` does not keep the runtime
/// alive once the user's last handle is dropped: the running task is cancelled and the wait on it
/// fails closed, as with a handler that holds nothing.
#[tokio::test]
async fn a_handler_using_the_context_s_runtime_does_not_keep_the_runtime_alive() {
    let e = engine(DevEngineOptions::default()).await;
    let rt = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (triggered_tx, mut triggered) = tokio::sync::mpsc::unbounded_channel::<String>();
    rt.register(
        Workflow::new("leaf").task("t", |_i: Value, c: Context| async move {
            c.cancellation().cancelled().await;
            Ok::<_, TaskError>(json!({}))
        }),
    )
    .await
    .expect("register");
    rt.register(
        Workflow::new("fanout").task("t", move |_i: Value, c: Context| {
            let (cancelled_tx, triggered_tx) = (cancelled_tx.clone(), triggered_tx.clone());
            async move {
                let leaf = c.runtime()?.run_no_wait("leaf", &json!({})).await?;
                let _ = triggered_tx.send(leaf.run_id().to_string());
                c.cancellation().cancelled().await;
                let _ = cancelled_tx.send(());
                Ok::<_, TaskError>(json!({}))
            }
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 4).await;
    let h = rt.run_no_wait("fanout", &json!({})).await.expect("trigger");
    let leaf = triggered
        .recv()
        .await
        .expect("the handler triggered through its context");
    assert!(!leaf.is_empty());
    drop(rt);
    tokio::time::timeout(Duration::from_secs(10), cancelled.recv())
        .await
        .expect("the running task is cancelled at once: nothing keeps the runtime alive")
        .expect("cancelled");
    let err = tokio::time::timeout(Duration::from_secs(10), h.result::<Value>())
        .await
        .expect("the wait ends")
        .expect_err("nothing delivers it any more");
    assert_eq!(err.outcome(), hatchet_runtime::Outcome::Closed, "{err}");
}

/// Asks until the child answers (`Ok`) or says it is stopped for good (`Err` of `Stopped`); a
/// `Closed` while its restart is on its way is asked again.
async fn ask_until_settled<F, Fut>(ask: F) -> Result<(), hatchet_runtime::Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), hatchet_runtime::Error>>,
{
    for _ in 0..500 {
        match ask().await {
            Err(e) if e.outcome() == hatchet_runtime::Outcome::Closed => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return other,
        }
    }
    panic!("the child neither answered nor stopped");
}

/// Every child of the root restarts within the same intensity limit as the listeners. The worker
/// actor and the retry service used to restart forever; past the limit each stays stopped, and what
/// asks it answers `Stopped` with the reason.
#[tokio::test]
async fn the_worker_actor_and_the_retry_service_restart_within_the_limit_then_stop() {
    let e = engine(DevEngineOptions::default()).await;
    let rt = runtime(&e, RuntimeOptions::new().stream_backoff(fast())).await;
    let mut restarts = 0;
    loop {
        rt.crash_retry_service();
        tokio::time::sleep(Duration::from_millis(5)).await;
        match ask_until_settled(|| async { rt.retries().await.map(|_| ()) }).await {
            Ok(()) => restarts += 1,
            Err(e) => {
                assert_eq!(e.outcome(), hatchet_runtime::Outcome::Stopped, "{e}");
                assert!(
                    e.to_string().contains("retry service failed more than"),
                    "{e}"
                );
                break;
            }
        }
        assert!(restarts <= MAX_RESTARTS, "restarted past the limit");
    }
    assert_eq!(
        restarts, MAX_RESTARTS,
        "restarted up to the limit, then stopped"
    );
    let mut restarts = 0;
    for n in 0.. {
        rt.crash_worker_actor();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let name = format!("after-crash-{n}");
        let asked = ask_until_settled(|| {
            let rt = rt.clone();
            let name = name.clone();
            async move {
                match rt
                    .register(
                        Workflow::new(name).task("t", |_: Value, _c: Context| async move {
                            Ok::<_, TaskError>(json!({}))
                        }),
                    )
                    .await
                {
                    // A registration that raced the crash, sent again under the same name.
                    Err(e) if e.to_string().contains("already registered") => Ok(()),
                    other => other.map(|_| ()),
                }
            }
        })
        .await;
        match asked {
            Ok(()) => restarts += 1,
            Err(e) => {
                assert_eq!(e.outcome(), hatchet_runtime::Outcome::Stopped, "{e}");
                assert!(
                    e.to_string().contains("worker actor failed more than"),
                    "{e}"
                );
                break;
            }
        }
        assert!(restarts <= MAX_RESTARTS, "restarted past the limit");
    }
    assert_eq!(restarts, MAX_RESTARTS);
    rt.shutdown(Duration::from_secs(1)).await;
}
