//! What users of the official SDKs expect (1), through our public API against the development
//! engine: on_failure tasks, cancel and replay (by handle, ids and filter), priorities, bulk
//! triggers and pushes, the task context's run controls, typed workflow references and the one
//! typed run model. Executions are counted in the handlers, where a duplicate would show.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use hatchet_runtime::run::{BulkEvent, BulkRun, RunFilter};
use hatchet_runtime::{
    Context, Outcome, RunStatus, RuntimeHandle, TaskError, TaskOptions, TriggerOptions,
    WorkerOptions, Workflow,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{engine_and_runtime as setup, until};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order: u32,
    total: u32,
}

fn meta(k: &str, v: &str) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(k.into(), json!(v));
    m
}

/// A task that waits for its cancellation and counts how often it ran and saw the token fire.
fn slow(name: &str, ran: Arc<AtomicUsize>, saw_cancel: Arc<AtomicUsize>) -> Workflow {
    Workflow::new(name).task("wait", move |_: Value, c: Context| {
        let (ran, saw_cancel) = (ran.clone(), saw_cancel.clone());
        async move {
            ran.fetch_add(1, Ordering::SeqCst);
            c.cancellation().cancelled().await;
            saw_cancel.fetch_add(1, Ordering::SeqCst);
            Ok::<_, TaskError>(json!({}))
        }
    })
}

#[tokio::test]
async fn on_failure_runs_once_after_a_final_failure_and_reads_the_error() {
    let (_e, rt) = setup().await;
    let charged = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<BTreeMap<String, String>>>> = Arc::default();
    let (c2, s2) = (charged.clone(), seen.clone());
    let wf = Workflow::new("checkout")
        .task_with(
            "charge",
            TaskOptions::new().retries(1),
            move |_: Order, _c: Context| {
                let c2 = c2.clone();
                async move {
                    c2.fetch_add(1, Ordering::SeqCst);
                    Err::<Receipt, _>(TaskError::new("card declined"))
                }
            },
        )
        .on_failure("refund", TaskOptions::new(), move |_: Value, c: Context| {
            let s2 = s2.clone();
            async move {
                s2.lock().push(c.task_run_errors().clone());
                Ok::<_, TaskError>(json!({"refunded": true}))
            }
        });
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 4).await;
    let h = rt
        .run_no_wait("checkout", &Order { id: 1 })
        .await
        .expect("trigger");
    let err = h.outputs().await.expect_err("the run fails");
    assert_eq!(err.outcome(), Outcome::RunFailed);
    assert_eq!(charged.load(Ordering::SeqCst), 2, "one try and one retry");
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 1, "on_failure ran exactly once: {seen:?}");
    assert!(seen[0]["charge"].contains("card declined"), "{seen:?}");
    // The run reads FAILED even though on_failure completed.
    let view = rt.run_details(h.run_id()).await.expect("details");
    assert_eq!(view.status, RunStatus::Failed);
    assert_eq!(view.tasks["refund"].status, RunStatus::Completed);
    assert_eq!(view.tasks["refund"].output, Some(json!({"refunded": true})));
}

#[tokio::test]
async fn on_failure_is_skipped_when_every_task_completes_and_a_typed_result_ignores_it() {
    let (_e, rt) = setup().await;
    let hooks = Arc::new(AtomicUsize::new(0));
    let h2 = hooks.clone();
    let wf = Workflow::new("checkout-ok")
        .task("charge", |o: Order, _c: Context| async move {
            Ok::<_, TaskError>(Receipt {
                order: o.id,
                total: 10,
            })
        })
        .on_failure(
            "refund",
            TaskOptions::new(),
            move |_: Value, _c: Context| {
                h2.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, TaskError>(json!({})) }
            },
        );
    let orders = rt
        .register(wf)
        .await
        .expect("register")
        .returning::<Order, Receipt>("charge")
        .expect("types match");
    crate::support::start_worker(&rt, 4).await;
    let run = orders.run_no_wait(&Order { id: 7 }).await.expect("trigger");
    assert_eq!(
        run.result().await.expect("result"),
        Receipt {
            order: 7,
            total: 10
        }
    );
    assert_eq!(hooks.load(Ordering::SeqCst), 0, "on_failure never runs");
    let view = rt.run_details(run.run_id()).await.expect("details");
    assert_eq!(view.status, RunStatus::Completed);
    assert_eq!(view.tasks["refund"].output, Some(json!({"skipped": true})));
    // The REST read gives the same model, once REST has the run (it reads a new run 1 to 2 s
    // late, as the real engine's does, while the result came at once).
    let api = rt.api();
    let rest = crate::support::until_read(
        "REST reads the run completed",
        || api.run(run.run_id()),
        |r| r.as_ref().is_ok_and(|r| r.status == RunStatus::Completed),
    )
    .await
    .expect("rest read");
    assert_eq!(
        rest.output::<Receipt>("charge").expect("typed"),
        Receipt {
            order: 7,
            total: 10
        }
    );
    assert_eq!(
        serde_json::to_value(rest.status).expect("ser"),
        json!("COMPLETED")
    );
    assert_eq!(rest.status.to_string(), "COMPLETED");
}

#[tokio::test]
async fn typed_references_refuse_types_the_workflow_does_not_declare() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("typed")
        .task("price", |o: Order, _c: Context| async move {
            Ok::<_, TaskError>(Receipt {
                order: o.id,
                total: 3,
            })
        })
        .task_with(
            "audit",
            TaskOptions::new().parents(["price"]),
            |_: Value, _c: Context| async { Ok::<_, TaskError>(json!("ok")) },
        );
    let reg = rt.register(wf).await.expect("register");
    let wrong_output = reg
        .returning::<Order, String>("price")
        .expect_err("wrong O");
    assert_eq!(wrong_output.outcome(), Outcome::Invalid);
    assert!(
        wrong_output.to_string().contains("returns"),
        "{wrong_output}"
    );
    let wrong_input = reg.returning::<u32, Receipt>("price").expect_err("wrong I");
    assert!(wrong_input.to_string().contains("takes"), "{wrong_input}");
    let missing = reg
        .returning::<Order, Receipt>("nope")
        .expect_err("no task");
    assert!(missing.to_string().contains("no task"), "{missing}");
    // Adding "audit" to the DAG did not change what the reference returns.
    let r = reg.returning::<Order, Receipt>("price").expect("ok");
    crate::support::start_worker(&rt, 4).await;
    assert_eq!(
        r.run(&Order { id: 2 }).await.expect("run"),
        Receipt { order: 2, total: 3 }
    );
}

#[tokio::test]
async fn cancel_fires_the_tasks_token_and_the_waiter_sees_a_cancelled_run() {
    let (_e, rt) = setup().await;
    let (ran, saw) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    rt.register(slow("slow", ran.clone(), saw.clone()))
        .await
        .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("slow", &json!({})).await.expect("trigger");
    until("the task to start", || ran.load(Ordering::SeqCst) == 1).await;
    h.cancel().await.expect("cancel");
    let err = h.outputs().await.expect_err("cancelled");
    assert_eq!(err.outcome(), Outcome::RunCancelled, "{err}");
    until("the handler to see its token", || {
        saw.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let view = rt.run_details(h.run_id()).await.expect("details");
    assert_eq!(view.status, RunStatus::Cancelled);
    assert_eq!(view.tasks["wait"].status, RunStatus::Cancelled);
    // Cancelling again is harmless.
    h.cancel().await.expect("second cancel");
}

/// Registers `name`, whose first execution fails for good and later ones answer the order with
/// their execution number, and starts a worker; counts the executions.
async fn failing_once(rt: &RuntimeHandle, name: &str) -> Arc<AtomicUsize> {
    let runs = Arc::new(AtomicUsize::new(0));
    let r2 = runs.clone();
    rt.register(Workflow::new(name).task("t", move |o: Order, _c: Context| {
        let n = r2.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Err(TaskError::non_retryable("first time fails"))
            } else {
                Ok::<_, TaskError>(Receipt {
                    order: o.id,
                    total: n as u32,
                })
            }
        }
    }))
    .await
    .expect("register");
    crate::support::start_worker(rt, 2).await;
    runs
}

#[tokio::test]
async fn replay_runs_a_failed_run_again_with_its_input_and_it_completes() {
    let (_e, rt) = setup().await;
    let runs = failing_once(&rt, "flaky").await;
    let h = rt
        .run_no_wait("flaky", &Order { id: 5 })
        .await
        .expect("trigger");
    let err = h.result::<Receipt>().await.expect_err("fails first");
    assert_eq!(err.outcome(), Outcome::RunFailed);
    let replayed = h.replay().await.expect("replay");
    assert_eq!(
        replayed,
        [h.run_id().to_string()],
        "the one task of the run"
    );
    let out: Receipt = h.result().await.expect("completes after replay");
    assert_eq!(out, Receipt { order: 5, total: 1 });
    assert_eq!(runs.load(Ordering::SeqCst), 2, "exactly one more execution");
    // Replaying a running or queued run is refused quietly: nothing runs twice.
    assert_eq!(
        rt.run_details(h.run_id()).await.expect("d").status,
        RunStatus::Completed
    );
}

/// A replay returns once the engine shows it taken (control invariant 4), so a wait started
/// right after it gets the new end, not the old one. The engine's controller lags here (the
/// real engine only queues a replay and answers 200 ms later): without the guard the new
/// wait, on a given id, reads the run once at its start, sees the old FAILED and hands it on.
#[tokio::test]
async fn a_wait_started_right_after_a_replay_gets_the_new_end_while_the_controller_lags() {
    let (e, rt) = setup().await;
    let runs = failing_once(&rt, "flaky-lag").await;
    let h = rt
        .run_no_wait("flaky-lag", &Order { id: 7 })
        .await
        .expect("trigger");
    let err = h.result::<Receipt>().await.expect_err("fails first");
    assert_eq!(err.outcome(), Outcome::RunFailed);
    e.lag_replays(Some(Duration::from_millis(800)));
    let t0 = std::time::Instant::now();
    h.replay().await.expect("replay");
    let took = t0.elapsed();
    let fresh = rt.run_handle(h.run_id());
    let out: Receipt = fresh
        .result_within(Duration::from_secs(20))
        .await
        .expect("the new end, not the old failure");
    assert_eq!(out, Receipt { order: 7, total: 1 });
    assert_eq!(runs.load(Ordering::SeqCst), 2, "exactly one more execution");
    assert!(
        took >= Duration::from_millis(700),
        "the replay returned when the engine showed it, not at its answer: {took:?}"
    );
}

#[tokio::test]
async fn cancel_and_replay_by_filter_select_runs_by_metadata_and_time() {
    let (_e, rt) = setup().await;
    let (ran, saw) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    rt.register(slow("batch", ran.clone(), saw.clone()))
        .await
        .expect("register");
    crate::support::start_worker(&rt, 8).await;
    let since = SystemTime::now() - Duration::from_secs(1);
    let mut a = Vec::new();
    for _ in 0..3 {
        let opts = TriggerOptions::new().metadata(meta("batch", "a"));
        a.push(
            rt.run_no_wait_with("batch", &json!({}), opts)
                .await
                .expect("a"),
        );
    }
    let opts = TriggerOptions::new().metadata(meta("batch", "b"));
    let b = rt
        .run_no_wait_with("batch", &json!({}), opts)
        .await
        .expect("b");
    until("four tasks running", || ran.load(Ordering::SeqCst) == 4).await;
    let filter = RunFilter::since(since).metadata("batch", "a");
    let mut cancelled = rt.cancel_where(&filter).await.expect("cancel by filter");
    cancelled.sort();
    let mut want: Vec<String> = a.iter().map(|h| h.run_id().to_string()).collect();
    want.sort();
    assert_eq!(cancelled, want);
    for h in &a {
        let e = h.outputs().await.expect_err("cancelled");
        assert_eq!(e.outcome(), Outcome::RunCancelled);
    }
    assert_eq!(
        rt.run_details(b.run_id()).await.expect("b").status,
        RunStatus::Running,
        "the other batch is untouched"
    );
    // Replay what the filter selects among cancelled runs: the three run again, once REST reads
    // them cancelled (the engine's status lag; the real engine's OLAP tables lag too).
    let api = rt.api();
    for h in &a {
        crate::support::until_read(
            "a cancelled run to read CANCELLED over REST",
            || api.run_status(h.run_id()),
            |s| s.as_ref().is_ok_and(|s| *s == RunStatus::Cancelled),
        )
        .await
        .expect("status");
    }
    let replayed = rt
        .replay_where(&filter.clone().status(RunStatus::Cancelled))
        .await
        .expect("replay by filter");
    assert_eq!(replayed.len(), 3);
    until("three more executions", || ran.load(Ordering::SeqCst) == 7).await;
    // Ids and a bad id: a clear refusal.
    let bad = rt
        .cancel_runs(&["not-a-uuid".to_string()])
        .await
        .expect_err("refused");
    assert_eq!(bad.outcome(), Outcome::Rejected);
    assert!(rt.cancel_runs(&[]).await.expect("empty").is_empty());
    rt.cancel_where(&RunFilter::since(since))
        .await
        .expect("clean up");
}

#[tokio::test]
async fn queued_runs_start_highest_priority_first_and_take_the_workflow_default() {
    let (_e, rt) = setup().await;
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let o2 = order.clone();
    let wf = Workflow::new("prio")
        .task("t", move |i: Value, _c: Context| {
            o2.lock().push(i["tag"].as_str().unwrap_or("?").to_string());
            async { Ok::<_, TaskError>(json!({})) }
        })
        .default_priority(2);
    rt.register(wf).await.expect("register");
    let mut handles = Vec::new();
    for (tag, p) in [
        ("low", Some(1)),
        ("high", Some(3)),
        ("default", None),
        ("low2", Some(1)),
        ("high2", Some(3)),
    ] {
        let opts = match p {
            Some(p) => TriggerOptions::new().priority(p),
            None => TriggerOptions::new(),
        };
        handles.push(
            rt.run_no_wait_with("prio", &json!({"tag": tag}), opts)
                .await
                .expect("trigger"),
        );
    }
    // A priority outside 1–3 is refused before sending.
    let bad = rt
        .run_no_wait_with("prio", &json!({}), TriggerOptions::new().priority(9))
        .await
        .expect_err("refused");
    assert_eq!(bad.outcome(), Outcome::Invalid);
    rt.start_worker(WorkerOptions::new("one-slot", 1))
        .await
        .expect("start");
    for h in handles {
        let _: Value = h.result().await.expect("done");
    }
    assert_eq!(*order.lock(), ["high", "high2", "default", "low", "low2"]);
}

#[tokio::test]
async fn run_many_goes_through_bulk_trigger_and_answers_per_item() {
    let (e, rt) = setup().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r2 = runs.clone();
    let reg = rt
        .register(
            Workflow::new("bulk").task("t", move |o: Order, _c: Context| {
                r2.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok::<_, TaskError>(Receipt {
                        order: o.id,
                        total: 0,
                    })
                }
            }),
        )
        .await
        .expect("register");
    let typed = reg.returning::<Order, Receipt>("t").expect("typed");
    crate::support::start_worker(&rt, 8).await;
    e.faults().reset_counters();
    let mut items: Vec<BulkRun<Order>> = (0..25).map(|id| BulkRun::new(Order { id })).collect();
    items[3] = BulkRun::new(Order { id: 3 }).priority(5);
    let answers = typed.run_many(&items).await;
    assert_eq!(
        e.faults().attempts("/WorkflowService/BulkTriggerWorkflow"),
        1,
        "one bulk call"
    );
    assert_eq!(e.faults().attempts("/WorkflowService/TriggerWorkflow"), 0);
    for (i, a) in answers.into_iter().enumerate() {
        if i == 3 {
            assert_eq!(a.expect_err("bad priority").outcome(), Outcome::Invalid);
            continue;
        }
        let out = a.expect("trigger").result().await.expect("result");
        assert_eq!(out.order, i as u32);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 24, "each run executed once");
}

#[tokio::test]
async fn push_many_triggers_one_run_per_event_with_its_metadata() {
    let (e, rt) = setup().await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    rt.register(
        Workflow::new("on-signup")
            .task("t", move |_: Value, c: Context| {
                let who = c
                    .metadata()
                    .get("who")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                s2.lock().push(who.to_string());
                async { Ok::<_, TaskError>(json!({})) }
            })
            .on_events(["user:signup"]),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 4).await;
    let events: Vec<BulkEvent<Value>> = ["ann", "bob", "cy"]
        .iter()
        .map(|who| BulkEvent::new("user:signup", json!({})).metadata(meta("who", who)))
        .collect();
    let ids = rt.push_many(&events).await;
    assert!(ids.iter().all(|r| r.is_ok()), "{ids:?}");
    // The engine made its runs when it took the events (the push answered after): three, no
    // more, and each of them ran.
    assert_eq!(
        e.runs_by_workflow("on-signup"),
        3,
        "one run per event, no more"
    );
    until("three runs", || seen.lock().len() == 3).await;
    let mut got = seen.lock().clone();
    got.sort();
    assert_eq!(got, ["ann", "bob", "cy"], "one run per event, no more");
}

#[tokio::test]
async fn refresh_timeout_keeps_a_slow_attempt_alive() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("refresh").task_with(
        "t",
        TaskOptions::new().timeout(Duration::from_secs(1)),
        |extend: bool, c: Context| async move {
            if extend {
                let at = c.refresh_timeout(Duration::from_secs(5)).await?;
                assert!(
                    at > SystemTime::now() + Duration::from_secs(4),
                    "deadline moved"
                );
            }
            // Past the 1 s timeout by more than the engine's timer poll (1 s, as the real
            // engine's), within the refreshed 5 s.
            tokio::time::sleep(Duration::from_millis(3_000)).await;
            Ok::<_, TaskError>(json!({}))
        },
    );
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let _: Value = rt
        .run("refresh", &true)
        .await
        .expect("extended attempt completes");
    let err = rt
        .run::<_, Value>("refresh", &false)
        .await
        .expect_err("the same task without the refresh times out");
    assert_eq!(err.outcome(), Outcome::RunFailed);
}

/// By default, as on the real engine v0.104.9, a release is accepted and the slot stays counted
/// until the attempt ends; with `release_slot_frees` on it is given back at once.
#[tokio::test]
async fn a_released_slot_stays_counted_unless_release_slot_frees_is_on() {
    let (e, rt) = setup().await;
    let go = Arc::new(Notify::new());
    let wf = Workflow::new("holder").task("t", {
        let go = go.clone();
        move |_: Value, c: Context| {
            let go = go.clone();
            async move {
                c.release_slot().await?;
                go.notified().await;
                Ok::<_, TaskError>(json!({}))
            }
        }
    });
    rt.register(wf).await.expect("register");
    rt.start_worker(WorkerOptions::new("one-slot", 1))
        .await
        .expect("start");
    let first = rt.run_no_wait("holder", &json!({})).await.expect("trigger");
    until("the release to reach the engine", || {
        e.stats().slot_releases == 1
    })
    .await;
    assert_eq!(
        e.stats().slots_in_use,
        1,
        "the real engine's terms: still counted"
    );
    go.notify_one();
    let _: Value = first.result().await.expect("done");
    until("the slot to be back", || e.stats().slots_in_use == 0).await;
    e.release_slot_frees(true);
    let second = rt.run_no_wait("holder", &json!({})).await.expect("trigger");
    until("the second release", || e.stats().slot_releases == 2).await;
    assert_eq!(e.stats().slots_in_use, 0, "given back at once");
    go.notify_one();
    let _: Value = second.result().await.expect("done");
}

/// With `release_slot_frees` on (what the call is for; the real engine v0.104.9 keeps the slot
/// counted, see `conformance::placement::a_released_slot_stays_counted_until_the_attempt_ends`), the
/// worker's own bound lets another task run in the released slot.
#[tokio::test]
async fn release_slot_lets_a_one_slot_worker_take_other_work() {
    let (e, rt) = setup().await;
    e.release_slot_frees(true);
    let go = Arc::new(Notify::new());
    let released = Arc::new(AtomicUsize::new(0));
    let (g2, r2) = (go.clone(), released.clone());
    let wf = Workflow::new("holder").task("t", move |release: bool, c: Context| {
        let (g2, r2) = (g2.clone(), r2.clone());
        async move {
            if release {
                c.release_slot().await?;
                r2.fetch_add(1, Ordering::SeqCst);
                // Waits until the second run has run on the slot it gave back.
                g2.notified().await;
            }
            Ok::<_, TaskError>(json!({}))
        }
    });
    let quick = Workflow::new("quick").task("t", {
        let go = go.clone();
        move |_: Value, _c: Context| {
            go.notify_one();
            async { Ok::<_, TaskError>(json!({})) }
        }
    });
    rt.register(wf).await.expect("register");
    rt.register(quick).await.expect("register");
    rt.start_worker(WorkerOptions::new("one-slot", 1))
        .await
        .expect("start");
    let held = rt.run_no_wait("holder", &true).await.expect("trigger");
    // Only once the holder runs (and gave its slot back) is the second run triggered: without
    // the release it would wait for the holder, which waits for it.
    until("the holder to release its slot", || {
        released.load(Ordering::SeqCst) == 1
    })
    .await;
    let q = rt.run_no_wait("quick", &json!({})).await.expect("trigger");
    tokio::time::timeout(Duration::from_secs(10), async {
        let _: Value = q.result().await.expect("quick ran on the released slot");
        let _: Value = held.result().await.expect("holder finished");
    })
    .await
    .expect("no deadlock: the slot was released");
}

/// A CANCEL is acted on while every slot is busy, however many STARTs wait over the slots (the
/// engine assigns past the worker's one slot here). With more STARTs waiting than the worker has
/// slots (three runs over a one-slot worker), the dispatch loop used to wait for room and stop
/// reading, so the CANCEL of the run holding the slot was never read: all three stuck until their
/// timeouts. The loop never waits now; each START waits for its slot in its own task.
#[tokio::test]
async fn a_cancel_is_acted_on_however_many_starts_wait_over_the_slots() {
    let (e, rt) = setup().await;
    let (ran, saw_cancel) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    rt.register(slow("hold", ran.clone(), saw_cancel.clone()))
        .await
        .expect("register");
    e.over_assign(true);
    rt.start_worker(WorkerOptions::new("one-slot", 1))
        .await
        .expect("start");
    let first = rt.run_no_wait("hold", &json!({})).await.expect("trigger");
    until("the first run to hold the slot", || {
        ran.load(Ordering::SeqCst) == 1
    })
    .await;
    let mut later = Vec::new();
    for _ in 0..3 {
        later.push(rt.run_no_wait("hold", &json!({})).await.expect("trigger"));
    }
    until("the engine to assign every run", || {
        e.stats().queued == 0 && e.stats().slots_in_use == 4
    })
    .await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the later runs wait for the worker's one slot"
    );
    first.cancel().await.expect("cancel");
    until("the first run to see its CANCEL", || {
        saw_cancel.load(Ordering::SeqCst) == 1
    })
    .await;
    for (i, h) in later.iter().enumerate() {
        until("the next run to take the freed slot", || {
            ran.load(Ordering::SeqCst) == i + 2
        })
        .await;
        h.cancel().await.expect("cancel");
        until("that run to see its CANCEL", || {
            saw_cancel.load(Ordering::SeqCst) == i + 2
        })
        .await;
    }
}

#[tokio::test]
async fn a_task_can_cancel_its_own_run() {
    let (_e, rt) = setup().await;
    rt.register(
        Workflow::new("self-cancel").task("t", |_: Value, c: Context| async move {
            c.cancel_run().await?;
            c.cancellation().cancelled().await;
            Ok::<_, TaskError>(json!({}))
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let err = rt
        .run::<_, Value>("self-cancel", &json!({}))
        .await
        .expect_err("cancelled");
    assert_eq!(err.outcome(), Outcome::RunCancelled, "{err}");
}

#[tokio::test]
async fn task_logs_keep_their_levels_and_read_back_over_rest() {
    let (e, rt) = setup().await;
    rt.register(
        Workflow::new("logger").task("t", |_: Value, c: Context| async move {
            c.log("starting");
            c.log_at(tracing::Level::WARN, "disk almost full");
            c.log_at(tracing::Level::TRACE, "fine detail");
            Ok::<_, TaskError>(json!({}))
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let h = rt.run_no_wait("logger", &json!({})).await.expect("trigger");
    let _: Value = h.result().await.expect("done");
    until("three log lines", || e.task_logs(h.run_id()).len() == 3).await;
    assert_eq!(
        e.task_logs(h.run_id()),
        [
            ("INFO".to_string(), "starting".to_string()),
            ("WARN".to_string(), "disk almost full".to_string()),
            ("DEBUG".to_string(), "fine detail".to_string()),
        ]
    );
}

#[tokio::test]
async fn replaying_a_task_of_a_dag_reruns_it_and_what_follows_not_what_came_before() {
    let (_e, rt) = setup().await;
    let counts: Arc<Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
    let step = |name: &'static str, fail_first: bool| {
        let counts = counts.clone();
        move |_: Value, _c: Context| {
            let n = {
                let mut c = counts.lock();
                let n = c.entry(name).or_default();
                *n += 1;
                *n
            };
            async move {
                if fail_first && n == 1 {
                    Err(TaskError::non_retryable("not yet"))
                } else {
                    Ok::<_, TaskError>(json!({ name: n }))
                }
            }
        }
    };
    let wf = Workflow::new("chain")
        .task("a", step("a", false))
        .task_with("b", TaskOptions::new().parents(["a"]), step("b", true))
        .task_with("c", TaskOptions::new().parents(["b"]), step("c", false));
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 4).await;
    let h = rt.run_no_wait("chain", &json!({})).await.expect("trigger");
    assert_eq!(
        h.outputs().await.expect_err("b fails").outcome(),
        Outcome::RunFailed
    );
    let b = rt.run_details(h.run_id()).await.expect("details").tasks["b"]
        .task_run_id
        .clone();
    let mut replayed = rt
        .replay_runs(std::slice::from_ref(&b))
        .await
        .expect("replay b");
    replayed.sort();
    let view = rt.run_details(h.run_id()).await.expect("details");
    let mut want = vec![b, view.tasks["c"].task_run_id.clone()];
    want.sort();
    assert_eq!(replayed, want, "b and its descendant c");
    let out = h.outputs().await.expect("completes");
    assert_eq!(out["c"], json!({"c": 1}));
    assert_eq!(
        *counts.lock(),
        BTreeMap::from([("a", 1), ("b", 2), ("c", 1)]),
        "a is not run again"
    );
}

#[tokio::test]
async fn a_pending_waiter_is_a_small_future() {
    // A million pending waiters must stay cheap: a pending `outputs` holds only its registry
    // entry's handle (`keyed::Waiter`: registry, key, id, receiver), and the cancelled-run
    // status read (a large retry-core future) is boxed off its state.
    let (_e, rt) = setup().await;
    let h = rt.run_handle(uuid::Uuid::new_v4().to_string());
    let waiter = h.outputs();
    let size = std::mem::size_of_val(&waiter);
    assert!(size <= 64, "RunHandle::outputs future is {size} bytes");
}

#[tokio::test]
async fn refresh_timeout_is_a_write_and_is_never_sent_twice() {
    // The real engine adds the increment to the deadline: a retried refresh would extend it
    // twice. An answer that may have come after the engine acted is not retried.
    const PATH: &str = "/Dispatcher/RefreshTimeout";
    let (e, rt) = setup().await;
    e.faults().inject(
        PATH,
        1,
        crate::support::fail(tonic::Code::Unavailable, "lost on the way back"),
    );
    let wf = Workflow::new("refresh-once").task("t", |_: Value, c: Context| async move {
        let r = c.refresh_timeout(Duration::from_secs(5)).await;
        Ok::<_, TaskError>(json!({ "outcome": r.err().map(|e| format!("{:?}", e.outcome())) }))
    });
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let out: Value = rt.run("refresh-once", &json!({})).await.expect("run");
    assert_eq!(e.faults().attempts(PATH), 1, "sent once: {out}");
    assert_eq!(out["outcome"], "MaybeExecuted", "{out}");
}

#[tokio::test]
async fn a_memo_whose_value_cannot_be_serialised_is_an_error_and_stores_nothing() {
    let (_e, rt) = setup().await;
    let wf = Workflow::new("bad-memo").durable_task(
        "d",
        TaskOptions::new(),
        |_: Value, c: Context| async move {
            // JSON object keys must be strings: this map cannot be serialised.
            let first = c
                .memo("pairs", || async {
                    std::collections::HashMap::from([((1, 2), 3)])
                })
                .await;
            let err = first.expect_err("not serialisable");
            // Nothing was stored: the same key computes again (and this value serialises).
            let again: u32 = c.memo("pairs", || async { 7u32 }).await?;
            Ok::<_, TaskError>(json!({"outcome": format!("{:?}", err.outcome()), "error": err.to_string(), "again": again}))
        },
    );
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    let out: Value = rt.run("bad-memo", &json!({})).await.expect("run");
    assert_eq!(out["outcome"], "Invalid", "{out}");
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot be serialised")),
        "{out}"
    );
    assert_eq!(out["again"], 7, "{out}");
}
