//! What a killed engine loses, on ours with the faults that model it, and how the runtime gets it
//! back (docs/contract.md §5 "Taking back", §3 "Reconnecting"): an assignment recorded and never
//! sent, a final answered and never recorded, a stream the engine took and never answered. Each
//! test fails without the mechanism it names: the attempt would run out its timeout (minutes),
//! or the waiter would wait for the 30 s polling fallback.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hatchet_dev_engine::{DevEngine, Fault};
use hatchet_runtime::health::{ListenerKind, ListenerState};
use hatchet_runtime::retries::ReclaimTiming;
use hatchet_runtime::{
    Context, RuntimeHandle, RuntimeOptions, TaskError, TaskOptions, WorkerOptions, Workflow,
};
use serde_json::{Value, json};

use crate::support::{counter, engine, runtime_with, until};

/// A sweep fast enough for a test: the engine's view read every 200 ms, an attempt run after
/// 400 ms held and not received, an at-risk final sent again 1 s after its answer.
fn fast_sweep() -> RuntimeOptions {
    let ms = Duration::from_millis;
    RuntimeOptions::new().heartbeat_every(ms(200)).reclaim(
        ReclaimTiming::new()
            .every(ms(200))
            .grace(ms(400))
            .resend_after(ms(1_000)),
    )
}

/// A fast sweep for a worker with no witness: finals at risk go again 500 ms after their answer,
/// and without a witness once the engine has answered every heartbeat for `alone_after`.
fn alone_sweep(alone_after: Duration) -> RuntimeOptions {
    let ms = Duration::from_millis;
    RuntimeOptions::new().heartbeat_every(ms(200)).reclaim(
        ReclaimTiming::new()
            .every(ms(200))
            .grace(ms(400))
            .resend_after(ms(500))
            .alone_after(alone_after),
    )
}

/// A worker of `workflows` (4 slots) on `engine`, with the fast sweep.
async fn worker(engine: &DevEngine, workflows: Vec<Workflow>) -> RuntimeHandle {
    let rt = runtime_with(engine, fast_sweep()).await;
    for wf in workflows {
        rt.register(wf).await.expect("register");
    }
    rt.start_worker(WorkerOptions::new("losses", 4))
        .await
        .expect("start worker");
    rt
}

/// Waits until a read goes through after the connections were dropped (a trigger is a write,
/// and one sent on the dropped connection is rightly *maybe executed*, never retried).
async fn answers_again(rt: &RuntimeHandle) {
    for _ in 0..100 {
        if rt.engine_version().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the engine answers again");
}

/// Triggers `workflow` with the engine set to answer its COMPLETED and drop it, then fails one
/// heartbeat (the engine went away for a moment) and waits for the next to pass.
async fn final_lost_before_an_outage(
    e: &DevEngine,
    rt: &RuntimeHandle,
    workflow: &str,
) -> hatchet_runtime::RunHandle {
    e.lose_next_answered_completions(1);
    let sent = |e: &DevEngine| e.faults().attempts("/Dispatcher/SendStepActionEvent");
    let before = sent(e);
    let h = rt.run_no_wait(workflow, &json!({})).await.expect("trigger");
    // STARTED and the COMPLETED the engine answers and drops.
    until("the final answered", || sent(e) >= before + 2).await;
    e.faults().inject(
        "/Dispatcher/Heartbeat",
        1,
        crate::support::fail(tonic::Code::Unavailable, "the engine is restarting"),
    );
    let beats = e.faults().attempts("/Dispatcher/Heartbeat");
    until("the heartbeat failed and one passed after it", || {
        e.faults().attempts("/Dispatcher/Heartbeat") >= beats + 2
    })
    .await;
    h
}

/// A DAG of `a` (returns `{"a": n}`) and `b` after it (returns `{"b": a's "a"}`, counting its
/// executions in `execs`), with a new user's task options (no retries, the default timeout).
fn a_then_b(name: &str, execs: &std::sync::Arc<std::sync::atomic::AtomicU32>) -> Workflow {
    let x = execs.clone();
    Workflow::new(name)
        .task("a", |i: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({"a": i["n"]}))
        })
        .task_with(
            "b",
            TaskOptions::new().parents(["a"]),
            move |_: Value, c: Context| {
                let x = x.clone();
                async move {
                    x.fetch_add(1, Ordering::SeqCst);
                    let a: Value = c.parent_output("a")?;
                    Ok::<_, TaskError>(json!({"b": a["a"]}))
                }
            },
        )
}

/// How long a result may take here: a few sweeps, far below the attempt's timeout.
const SOON: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_the_engine_never_sent_is_run_once_from_the_engine_s_record() {
    let e = engine().await;
    let execs = counter();
    let rt = worker(&e, vec![a_then_b("unsent", &execs)]).await;
    // `b`'s assignment is recorded as this worker's and never sent.
    e.lose_next_sends(1);
    let t0 = Instant::now();
    let out: Value = rt
        .run_no_wait("unsent", &json!({"n": 7}))
        .await
        .expect("trigger")
        .result_within(SOON)
        .await
        .expect("the run ends: the worker took back what the engine never sent");
    // `a` was the lost one or `b` was: either way each ran once, with its parent's output.
    assert_eq!(out["b"], json!({"b": 7}), "{out}");
    assert_eq!(execs.load(Ordering::SeqCst), 1, "b ran once");
    assert_eq!(rt.task_counts().taken_back, 1);
    assert_eq!(rt.task_counts().started, 2, "a and b, once each");
    eprintln!("taken back in {:?}", t0.elapsed());
    rt.shutdown(Duration::from_secs(2)).await;
}

/// Reclaim invariant 4: a DAG task the engine assigned and never sent, whose parent's output
/// neither the core (it shows outputs once the run ends) nor the read model (which lost the
/// parent's end) shows, is failed as the engine's loss on the second due pass that finds it so,
/// and never run without its parent's output. Without the rule it stays held until its
/// five-minute timeout (a cluster chaos run lost a run so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsent_task_whose_parent_s_output_cannot_be_read_is_failed_as_lost() {
    let e = engine().await;
    let execs = counter();
    let rt = worker(&e, vec![a_then_b("unsent-unreadable", &execs)]).await;
    // `a` ends in the core and not in the read model; `b`'s assignment is recorded and never
    // sent (the two sends: `a`'s, taken back, and `b`'s; or `a` is sent and both losses hit
    // `b`, the second one unused).
    e.lose_next_read_model_ends(1);
    e.lose_next_sends(2);
    let err = rt
        .run_no_wait("unsent-unreadable", &json!({"n": 7}))
        .await
        .expect("trigger")
        .result_within::<Value>(SOON)
        .await
        .expect_err("b cannot be run from the record");
    assert!(
        err.to_string().contains("parents' outputs"),
        "the error names the loss: {err}"
    );
    assert_eq!(
        execs.load(Ordering::SeqCst),
        0,
        "b never ran without a's output"
    );
    assert_eq!(rt.task_counts().failed_as_lost, 1);
    rt.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_the_engine_answered_and_lost_before_an_outage_is_sent_once_more() {
    let e = engine().await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("lost-end").task("t", move |_: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, TaskError>(json!({"done": true})) }
    });
    let rt = worker(&e, vec![wf]).await;
    let h = final_lost_before_an_outage(&e, &rt, "lost-end").await;
    // Not before the engine shows it records ends again: a later final of this worker (the
    // witness) reads recorded. Until then the lost final is only at risk.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(rt.task_counts().finals_resent, 0, "no witness yet");
    let _: Value = rt.run("lost-end", &json!({})).await.expect("the witness");
    let out: Value = h
        .result_within(SOON)
        .await
        .expect("the run ends: the lost final was sent again");
    assert_eq!(out, json!({"done": true}));
    assert_eq!(
        execs.load(Ordering::SeqCst),
        2,
        "the lost one once, and the witness"
    );
    assert_eq!(rt.task_counts().finals_resent, 1);
    rt.shutdown(Duration::from_secs(2)).await;
}

/// An idle worker has no witness (no final answered after the disturbance), so its lost final
/// goes again once the engine has answered every heartbeat for `alone_after`, and not before.
/// Found on the real engine, killed right after it answered a worker's last COMPLETED: its
/// OLAP table shows the attempt FINISHED, its core (`v1_task`) held it running until the
/// worker's heartbeats stopped, and the run's wait ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_s_lost_final_is_sent_once_more_without_a_witness() {
    let e = engine().await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("lost-alone").task("t", move |_: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, TaskError>(json!({"done": true})) }
    });
    let ms = Duration::from_millis;
    let rt = runtime_with(&e, alone_sweep(ms(3_000))).await;
    rt.register(wf).await.expect("register");
    rt.start_worker(WorkerOptions::new("alone", 4))
        .await
        .expect("start worker");
    let h = final_lost_before_an_outage(&e, &rt, "lost-alone").await;
    let disturbed = Instant::now();
    // Eight heartbeats later (1.6 s) sweeps (every 200 ms) have run past the resend delay, and
    // sent nothing before `alone_after`.
    let beats = e.faults().attempts("/Dispatcher/Heartbeat");
    until("eight more heartbeats", || {
        e.faults().attempts("/Dispatcher/Heartbeat") >= beats + 8
    })
    .await;
    if disturbed.elapsed() < ms(2_500) {
        assert_eq!(rt.task_counts().finals_resent, 0, "not before alone_after");
    }
    let out: Value = h
        .result_within(SOON)
        .await
        .expect("the run ends: the lost final was sent again with no witness");
    assert_eq!(out, json!({"done": true}));
    assert!(
        disturbed.elapsed() >= ms(2_500),
        "sent no sooner than alone_after: {:?}",
        disturbed.elapsed()
    );
    assert_eq!(execs.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(rt.task_counts().finals_resent, 1);
    rt.shutdown(Duration::from_secs(2)).await;
}

/// Taking-back invariant 3: a DAG task's lost final does not go again without a witness (a second
/// final of a recorded DAG task reads as a replay to the engine): past `alone_after`, sweep after
/// sweep reads the run and sends nothing; a later final of this worker that reads recorded is
/// the witness, and then it goes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_task_s_lost_final_waits_for_a_witness() {
    const READ: &str = "/v1.AdminService/GetRunDetails";
    let e = engine().await;
    let execs = counter();
    let (xa, xb) = (execs.clone(), execs.clone());
    let dag = Workflow::new("lost-dag")
        .task("a", move |_: Value, _c: Context| {
            xa.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, TaskError>(json!({"a": 1})) }
        })
        .task_with(
            "b",
            TaskOptions::new().parents(["a"]),
            move |_: Value, _c: Context| {
                xb.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, TaskError>(json!({"b": 2})) }
            },
        );
    let witness = Workflow::new("witness").task("w", |_: Value, _c: Context| async {
        Ok::<_, TaskError>(json!({"w": true}))
    });
    let ms = Duration::from_millis;
    let rt = runtime_with(&e, alone_sweep(ms(1_000))).await;
    rt.register(dag).await.expect("register");
    rt.register(witness).await.expect("register");
    rt.start_worker(WorkerOptions::new("dag-alone", 4))
        .await
        .expect("start worker");
    let h = final_lost_before_an_outage(&e, &rt, "lost-dag").await;
    let disturbed = Instant::now();
    until("past alone_after", || disturbed.elapsed() >= ms(1_500)).await;
    // Sweeps past alone_after read the run's core (proof they weighed the final) and send nothing.
    let reads = e.faults().attempts(READ);
    until("three more reads of the run", || {
        e.faults().attempts(READ) >= reads + 3
    })
    .await;
    assert_eq!(rt.task_counts().finals_resent, 0, "no witness, no resend");
    assert_eq!(execs.load(Ordering::SeqCst), 1, "only a ran");
    let w: Value = rt
        .run("witness", &json!({}))
        .await
        .expect("the witness run");
    assert_eq!(w, json!({"w": true}));
    let out: Value = h
        .result_within(SOON)
        .await
        .expect("the run ends: the witness read recorded, the lost final went again");
    assert_eq!(out["b"], json!({"b": 2}));
    assert_eq!(execs.load(Ordering::SeqCst), 2, "a and b ran once each");
    assert_eq!(rt.task_counts().finals_resent, 1);
    rt.shutdown(Duration::from_secs(2)).await;
}

/// Nothing is taken back or sent twice when the engine lost nothing, through an outage (every
/// final answered before it is at risk and checked against the core), with the sweep running
/// many times: a second final of a recorded task is what the real engine takes for a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_losses_the_sweep_runs_nothing_and_sends_no_final_twice() {
    let e = engine().await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("clean").task("t", move |i: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok::<_, TaskError>(i)
        }
    });
    let rt = worker(&e, vec![wf]).await;
    let inputs: Vec<Value> = (0..40).map(|n| json!({"n": n})).collect();
    let hs: Vec<_> = rt
        .run_many("clean", &inputs)
        .await
        .into_iter()
        .map(|h| h.expect("trigger"))
        .collect();
    for (n, h) in hs.iter().enumerate() {
        let out: Value = h.result_within(SOON).await.expect("result");
        assert_eq!(out["n"], n);
    }
    e.faults().inject(
        "/Dispatcher/Heartbeat",
        1,
        crate::support::fail(tonic::Code::Unavailable, "a blip"),
    );
    let beats = e.faults().attempts("/Dispatcher/Heartbeat");
    until("the heartbeat failed", || {
        e.faults().attempts("/Dispatcher/Heartbeat") >= beats + 2
    })
    .await;
    // Witnesses: finals after the blip, recorded, so the at-risk ones are checked (and found
    // recorded).
    for n in 40..45 {
        let out: Value = rt.run("clean", &json!({"n": n})).await.expect("witness");
        assert_eq!(out["n"], n);
    }
    let sends = e.faults().attempts("/Dispatcher/SendStepActionEvent");
    let sweeps = |rt: &RuntimeHandle| rt.task_counts();
    let first = sweeps(&rt);
    // Past the resend delay, with sweeps in between: the at-risk finals were all checked.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let c = sweeps(&rt);
    assert_eq!(c.finals_resent, 0, "{c:?}");
    assert_eq!(c.taken_back, 0, "{c:?}");
    assert_eq!(c.started, first.started, "nothing ran after the runs ended");
    assert_eq!(
        e.faults().attempts("/Dispatcher/SendStepActionEvent"),
        sends,
        "no step event sent after the runs ended"
    );
    assert_eq!(execs.load(Ordering::SeqCst), 45);
    let list_reads: u64 = e
        .faults()
        .counters()
        .iter()
        .filter(|(k, _)| k.contains("workflow-runs"))
        .map(|(_, v)| *v)
        .sum();
    assert!(
        list_reads >= 5,
        "the sweep read the engine's view several times: {:?}",
        e.faults().counters()
    );
    rt.shutdown(Duration::from_secs(2)).await;
}

/// A runs stream the engine takes and never answers (no headers, no message) is opened again
/// after the probe goes unanswered, instead of being waited on: the result arrives long before
/// the 30 s polling fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_runs_stream_is_abandoned_and_opened_again() {
    let e = engine().await;
    let wf =
        Workflow::new("quick").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        );
    let rt = worker(&e, vec![wf]).await;
    // A first result: the probe of every later stream.
    let _: Value = rt.run("quick", &json!({"n": 0})).await.expect("first");
    let path = "/Dispatcher/SubscribeToWorkflowRuns";
    e.faults().inject(path, 1, Fault::Hang);
    let opens = e.faults().attempts(path);
    e.faults().drop_connections();
    answers_again(&rt).await;
    let t0 = Instant::now();
    let out: Value = rt
        .run_no_wait("quick", &json!({"n": 1}))
        .await
        .expect("trigger")
        .result_within(SOON)
        .await
        .expect("result");
    assert_eq!(out["n"], 1);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "not through the 30 s polling fallback: {:?}",
        t0.elapsed()
    );
    assert!(
        e.faults().attempts(path) >= opens + 2,
        "the held stream, then a new one"
    );
    rt.shutdown(Duration::from_secs(2)).await;
}

/// An actions stream the engine takes and never serves is opened again once a heartbeat is
/// refused ("worker stream is not active"), and the worker takes work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_actions_stream_is_opened_again_when_a_heartbeat_is_refused() {
    let e = engine().await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("work").task("t", move |_: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, TaskError>(json!({})) }
    });
    let rt = worker(&e, vec![wf]).await;
    crate::support::until_listener(&rt, ListenerKind::WorkerActions, |s| {
        matches!(s, ListenerState::Connected { .. })
    })
    .await;
    let path = "/Dispatcher/ListenV2";
    e.faults().inject(path, 1, Fault::Hang);
    let opens = e.faults().attempts(path);
    e.faults().drop_connections();
    answers_again(&rt).await;
    let _: Value = rt
        .run_no_wait("work", &json!({}))
        .await
        .expect("trigger")
        .result_within(SOON)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "the worker takes work again: {err}; engine calls {:?}; actions {:?}",
                e.faults().counters(),
                rt.health()[&ListenerKind::WorkerActions].borrow()
            )
        });
    assert_eq!(execs.load(Ordering::SeqCst), 1);
    assert!(
        e.faults().attempts(path) >= opens + 2,
        "held, then reopened"
    );
    rt.shutdown(Duration::from_secs(2)).await;
}

/// The sweep's own decisions, end to end on ours: an attempt is taken back only once it has
/// been held past the grace, so one whose START is merely late is run once, by its START.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_delivered_late_is_not_taken_back_as_well() {
    let e = engine().await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("late").task("t", move |_: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            Ok::<_, TaskError>(json!({}))
        }
    });
    let rt = worker(&e, vec![wf]).await;
    // Every sweep sees the task RUNNING as this worker's while it runs here 1.5 s: it is in
    // hand, so never taken back.
    let _: Value = rt.run("late", &json!({})).await.expect("result");
    assert_eq!(execs.load(Ordering::SeqCst), 1);
    assert_eq!(rt.task_counts().taken_back, 0);
    rt.shutdown(Duration::from_secs(2)).await;
}

/// While REST cannot answer, the lookup that guards a trigger costs its 3 s once per name, not
/// on every trigger: "could not tell" is remembered for a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_lookup_that_could_not_tell_is_remembered() {
    let e = engine().await;
    let registrar = crate::support::runtime(&e).await;
    registrar
        .register(
            Workflow::new("elsewhere").task("t", |_: Value, _c: Context| async move {
                Ok::<_, TaskError>(json!({}))
            }),
        )
        .await
        .expect("register");
    let rt = crate::support::runtime(&e).await;
    let route = format!("/api/v1/tenants/{}/workflows", e.tenant_id());
    e.faults().inject(route.clone(), u32::MAX, Fault::Hang);
    let t0 = Instant::now();
    rt.run_no_wait("elsewhere", &json!({}))
        .await
        .expect("first");
    let first = t0.elapsed();
    let t1 = Instant::now();
    for _ in 0..3 {
        rt.run_no_wait("elsewhere", &json!({}))
            .await
            .expect("again");
    }
    let next = t1.elapsed();
    assert!(
        first >= Duration::from_secs(3),
        "the first waits its lookup: {first:?}"
    );
    assert!(
        next < Duration::from_secs(1),
        "the next three do not: {next:?}"
    );
    assert_eq!(e.faults().attempts(&route), 1, "one lookup");
    e.faults().clear();
    rt.shutdown(Duration::from_secs(1)).await;
    registrar.shutdown(Duration::from_secs(1)).await;
}

/// A durable task whose first assignment the engine never sent is taken back too, as its first
/// invocation: it sleeps and waits for an event through the engine's durable stream, and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_task_s_unsent_first_assignment_is_run_as_its_first_invocation() {
    let e = engine().await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("unsent-durable").durable_task(
        "d",
        TaskOptions::new(),
        move |_: Value, c: Context| {
            let x = x.clone();
            async move {
                x.fetch_add(1, Ordering::SeqCst);
                c.sleep_for(Duration::from_millis(200)).await?;
                Ok::<_, TaskError>(json!({"slept": true, "invocation": c.durable_invocation()}))
            }
        },
    );
    let rt = worker(&e, vec![wf]).await;
    e.lose_next_sends(1);
    let out: Value = rt
        .run_no_wait("unsent-durable", &json!({}))
        .await
        .expect("trigger")
        .result_within(SOON)
        .await
        .expect("taken back and run");
    assert_eq!(out, json!({"slept": true, "invocation": 1}));
    assert_eq!(execs.load(Ordering::SeqCst), 1);
    assert_eq!(rt.task_counts().taken_back, 1);
    assert_eq!(rt.task_counts().failed_as_lost, 0);
    rt.shutdown(Duration::from_secs(2)).await;
}

/// Waits on given ids through an outage: the sweep that reads them stops at its first read that
/// cannot tell, so the outage costs one read a pass, not one per pending wait (20 waits made 143
/// attempts in 30 s before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_on_given_ids_through_an_outage_read_once_a_pass() {
    const READ: &str = "/v1.AdminService/GetRunDetails";
    let e = engine().await;
    let rt = crate::support::runtime(&e).await;
    e.faults().inject(
        READ,
        u32::MAX,
        crate::support::fail(tonic::Code::Unavailable, "the engine is down"),
    );
    let waits: Vec<_> = (0..20)
        .map(|i| {
            let h = rt.run_handle(format!("00000000-0000-4000-8000-{i:012}"));
            tokio::spawn(async move { h.result_within::<Value>(Duration::from_secs(30)).await })
        })
        .collect();
    // The waits' own first reads go at once; then two sweep passes (every 5 s).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = e.faults().attempts(READ);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = e.faults().attempts(READ) - before;
    assert!(
        during <= 12,
        "{during} GetRunDetails attempts in two sweep passes over 20 waits"
    );
    for w in waits {
        w.abort();
    }
    rt.shutdown(Duration::from_secs(1)).await;
}
