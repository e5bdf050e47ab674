//! Results and the engine's failures: crons and schedules, REST reads of runs, large outputs, a
//! drain, an engine restart, waits on runs the engine shows late or never, lost completions and
//! followups (ours only: fault injection), inputs over the message limit, event lookback, pushes
//! colliding on an idempotency key. On both engines unless a test says ours only.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crons_and_schedules() {
    let t = Target::new("crons").await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("timed").task("t", move |_: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, TaskError>(json!({})) }
    });
    let rt = t.worker(4, vec![wf]).await;
    let api = rt.api();
    let cron = api
        .create_cron("timed", "conf-cron", "0 0 1 1 *", &json!({"x": 1}))
        .await
        .expect("create cron");
    assert!(
        api.list_crons()
            .await
            .expect("list crons")
            .iter()
            .any(|c| c.metadata.id == cron.metadata.id),
        "the cron is listed"
    );
    api.delete_cron(&cron.metadata.id)
        .await
        .expect("delete cron");
    // Six fields, seconds first: both engines take it (ours used to answer 400 "must have 5
    // fields"). Seven: both engines store any text and would never fire it; the runtime
    // refuses it before sending.
    let six = api
        .create_cron(
            "timed",
            "conf-cron-seconds",
            "0 0 0 1 1 *",
            &json!({"x": 6}),
        )
        .await
        .expect("a cron with seconds");
    api.delete_cron(&six.metadata.id)
        .await
        .expect("delete cron");
    let seven = api
        .create_cron("timed", "conf-cron-seven", "0 0 0 1 1 * 2030", &json!({}))
        .await;
    let seven = seven.expect_err("seven fields");
    assert_eq!(seven.outcome(), Outcome::Invalid, "{seven}");
    assert!(seven.to_string().contains("nothing was sent"), "{seven}");
    let at = SystemTime::now() + Duration::from_secs(2);
    let sched = api
        .create_schedule("timed", at, &json!({"y": 2}))
        .await
        .expect("create schedule");
    assert!(
        api.list_schedules()
            .await
            .expect("list schedules")
            .iter()
            .any(|s| s.metadata.id == sched.metadata.id),
        "the schedule is listed"
    );
    until("the scheduled run ran", || {
        execs.load(Ordering::SeqCst) == 1
    })
    .await;
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- REST reads with typed outputs; outputs of 5 MiB ----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_reads_run_status_and_list_with_typed_outputs() {
    let t = Target::new("rest").await;
    let wf = Workflow::new("doubler").task("double", |i: Num, _c: Context| async move {
        Ok::<_, TaskError>(Num { n: i.n * 2 })
    });
    let rt = t.worker(4, vec![wf]).await;
    let since = SystemTime::now() - Duration::from_secs(5);
    let h = rt
        .run_no_wait("doubler", &Num { n: 21 })
        .await
        .expect("trigger");
    let _: Value = h.result_within(RESULT).await.expect("result");
    let api = rt.api();
    let view = until_read(
        "the REST read shows the completed run",
        || async { api.run(h.run_id()).await },
        |v| v.as_ref().is_ok_and(|v| v.status == RunStatus::Completed),
    )
    .await
    .expect("REST run");
    assert_eq!(view.run_id, h.run_id());
    assert_eq!(view.input, json!({"n": 21}), "the run's own input");
    let out: Num = view.output("double").expect("typed output by task name");
    assert_eq!(out, Num { n: 42 });
    assert_eq!(
        api.run_status(h.run_id()).await.expect("status"),
        RunStatus::Completed
    );
    let grpc = rt.run_details(h.run_id()).await.expect("gRPC details");
    assert_eq!(grpc.output::<Num>("double").expect("typed"), Num { n: 42 });
    let rows = until_read(
        "the run is listed",
        || async {
            api.list_runs(&RunQuery::new(RunFilter::since(since)).limit(100))
                .await
                .expect("list")
                .rows
        },
        |rows| !rows.is_empty(),
    )
    .await;
    assert!(!rows.is_empty());
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_of_five_mib_in_total_reach_the_waiter() {
    let t = Target::new("big").await;
    let chunk = |tag: &'static str| {
        move |_: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({"tag": tag, "blob": "x".repeat(2_600_000)}))
        }
    };
    let wf = Workflow::new("big")
        .task("a", chunk("a"))
        .task("b", chunk("b"));
    let rt = t.worker(4, vec![wf]).await;
    let h = rt.run_no_wait("big", &json!({})).await.expect("trigger");
    let out: Value = h
        .result_within(RESULT)
        .await
        .expect("the outputs, all of them");
    assert_eq!(out["a"]["tag"], "a");
    assert_eq!(out["b"]["tag"], "b");
    assert_eq!(out["a"]["blob"].as_str().map(str::len), Some(2_600_000));
    assert_eq!(out["b"]["blob"].as_str().map(str::len), Some(2_600_000));
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Outputs the run stream does not carry, on both engines: a DAG whose outputs pass the engine's
/// payload threshold together gets a results-less event, and its details (5.2 MB) are over the
/// engine's 4 MiB message limit (it refuses to send them), so the only read left is REST, whose
/// task rows show an output that is not an object (a string here) as `{}`. The runtime reads each
/// output from the run's finished events instead, where the engine keeps it as recorded, so the
/// wait gets both outputs whole (it used to end `Undecodable`). A single output just under the
/// limit arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_object_output_past_the_threshold_is_never_read_as_empty() {
    let t = Target::new("bigshapes").await;
    let wf = Workflow::new("shapes")
        .task("text", |_: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!("y".repeat(2_600_000)))
        })
        .task("obj", |_: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({ "blob": "x".repeat(2_600_000) }))
        });
    let near = Workflow::new("near").task("t", |_: Value, _c: Context| async move {
        Ok::<_, TaskError>(json!({ "blob": "z".repeat(3_900_000) }))
    });
    let rt = t.worker(4, vec![wf, near]).await;
    let h = rt.run_no_wait("shapes", &json!({})).await.expect("trigger");
    let out: Value = h
        .result_within(RESULT)
        .await
        .unwrap_or_else(|e| panic!("both outputs, read over REST: {e}"));
    // Lengths only: a failed assertion must not print 5 MB.
    let shape = (
        out["text"].as_str().map(str::len),
        out["obj"]["blob"].as_str().map(str::len),
    );
    assert_eq!(shape, (Some(2_600_000), Some(2_600_000)));
    let out: Value = rt
        .run_no_wait("near", &json!({}))
        .await
        .expect("trigger")
        .result_within(RESULT)
        .await
        .expect("an output just under the limit");
    assert_eq!(out["blob"].as_str().map(str::len), Some(3_900_000));
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- drain; the engine restarting mid-run ---------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_running_tasks() {
    let t = Target::new("drain").await;
    let started = counter();
    let finished = counter();
    let (s, f) = (started.clone(), finished.clone());
    let wf = Workflow::new("slowish").task("t", move |_: Value, _c: Context| {
        s.fetch_add(1, Ordering::SeqCst);
        let f = f.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            f.fetch_add(1, Ordering::SeqCst);
            Ok::<_, TaskError>(json!({"done": true}))
        }
    });
    let rt = t.worker(4, vec![wf]).await;
    let client = t.runtime().await;
    let h = client
        .run_no_wait("slowish", &json!({}))
        .await
        .expect("trigger");
    until("started", || started.load(Ordering::SeqCst) == 1).await;
    // The signal handler's path (run_until_signal) is this drain; the signal itself is tested
    // on our engine in supervision.rs, where no other test shares the process's SIGTERM.
    rt.shutdown(Duration::from_secs(30)).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the drain let it finish"
    );
    let out: Value = h
        .result_within(RESULT)
        .await
        .expect("its result reached the engine");
    assert_eq!(out["done"], true);
    client.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_survive_the_engine_restarting_mid_run() {
    let t = Target::new("restart").await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("across").task("t", move |i: Num, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, TaskError>(Num { n: i.n + 1 })
        }
    });
    let rt = t.worker(8, vec![wf]).await;
    let hs: Vec<_> = rt
        .run_many("across", &(0..10).map(|n| Num { n }).collect::<Vec<_>>())
        .await
        .into_iter()
        .map(|h| h.expect("trigger"))
        .collect();
    t.restart_engine().await;
    // A read first (retried through the reconnect): a trigger is a write, and one sent on the
    // connection the restart closed is rightly ambiguous (MaybeExecuted), never retried.
    let mut answered = false;
    for _ in 0..100 {
        if rt.engine_version().await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "the engine answers again after its restart");
    // Triggers after the restart go through too.
    let after = rt
        .run_no_wait("across", &Num { n: 100 })
        .await
        .expect("trigger after the restart");
    // Every waiter gets its run's outcome, within the engine's own bounds. Neither engine offers
    // again a START lost in the cut (ours does so only with its fault): that attempt runs out
    // its timeout (60 s) and the run fails, which its waiter must be told (never a wait without
    // end). A queued task the killed engine never schedules is failed by its schedule timeout
    // (5 minutes); the wait covers that and the successor's rebalance minute. The others
    // finish. A run that fails or does not end has the engine's tables printed, to explain it.
    let mut finished = 0;
    for (n, h) in hs.iter().enumerate() {
        match h.result_within::<Value>(Duration::from_secs(420)).await {
            Ok(v) => {
                let out: Num = serde_json::from_value(v).expect("typed");
                assert_eq!(out.n, n as i64 + 1);
                finished += 1;
            }
            Err(e) if e.outcome() == Outcome::RunFailed => {
                eprintln!("conformance: a run the restart cut failed: {e}");
                if let Some(tables) = t.real_evidence(h.run_id()).await {
                    eprintln!("conformance: the engine's tables on it:\n{tables}");
                }
            }
            Err(e) => {
                if let Some(tables) = t.real_evidence(h.run_id()).await {
                    eprintln!(
                        "conformance: the engine's tables on run {}:\n{tables}",
                        h.run_id()
                    );
                }
                panic!("result across the restart: {e:?}")
            }
        }
    }
    let out: Value = after.result_within(RESULT).await.expect("result");
    assert_eq!(out["n"], 101);
    assert!(
        execs.load(Ordering::SeqCst) > finished,
        "every finished run executed, and the one after the restart"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Each listener serves again within 5 s of the engine's return, after each of two engine
/// kills, while a task runs and its waiter waits across both. The runs stream: its probe (a run
/// that ended before) answered at the engine's next tick. The actions stream: the engine cannot
/// be made to answer it before it has work, so on the real engine its own table says when it
/// took the worker's stream again (`Worker.lastListenerEstablished`); on ours its answer does. A
/// backoff grown in the outage keeps no listener away: the engine watch's first answer after
/// failed probes opens every listener waiting out its backoff. On the real engine new work then
/// waits for the engine itself: a killed engine leaves its tenant on its dead scheduler
/// partition until its successor's one-minute rebalance (docs/guide/real-engine.md); that time
/// is printed, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_serve_again_within_seconds_after_the_engine_restarting_twice() {
    use hatchet_runtime::health::{ListenerKind, ListenerState};
    let t = Target::new("relisten").await;
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = counter();
    let (r, s) = (release.clone(), started.clone());
    let hold = Workflow::new("hold").task("t", move |_: Value, _c: Context| {
        let (r, s) = (r.clone(), s.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            while !r.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, TaskError>(json!({"held": true}))
        }
    });
    let quick = Workflow::new("quick").task("t", |_: Value, _c: Context| async move {
        Ok::<_, TaskError>(json!({"quick": true}))
    });
    let name = format!("relisten-{}", std::process::id());
    let (rt, _) = t
        .worker_with(WorkerOptions::new(name.clone(), 4), vec![hold, quick])
        .await;
    let _: Value = rt.run("quick", &json!({})).await.expect("a first run");
    let held = rt.run_no_wait("hold", &json!({})).await.expect("trigger");
    let held_id = held.run_id().to_string();
    let waiter =
        tokio::spawn(async move { held.result_within::<Value>(Duration::from_secs(400)).await });
    until("the held task runs", || started.load(Ordering::SeqCst) == 1).await;
    let health = rt.health();
    let runs = health[&ListenerKind::WorkflowRuns].clone();
    until("the runs listener connected", || {
        matches!(*runs.borrow(), ListenerState::Connected { .. })
    })
    .await;
    for round in 1..=2 {
        let killed_at = t.real_table_value("select now()").await;
        t.restart_engine().await;
        let back = std::time::Instant::now();
        // The runs stream: the kill is seen (the stream ended), then it serves again.
        let mut rx = runs.clone();
        let served = tokio::time::timeout(Duration::from_secs(30), async {
            let mut seen_down = !matches!(*rx.borrow(), ListenerState::Connected { .. });
            loop {
                let st = rx.borrow_and_update().clone();
                match st {
                    ListenerState::Connected { since } if seen_down => return since,
                    ListenerState::Connected { .. } => {}
                    _ => seen_down = true,
                }
                let _ = rx.changed().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("round {round}: the runs listener serves again within 30 s"));
        let runs_after = served.into_std().saturating_duration_since(back);
        // The actions stream, as the engine sees it.
        let actions_after = match &killed_at {
            Some(killed_at) => {
                let sql = format!(
                    "select count(*) from \"Worker\" where name = '{name}' and \"lastListenerEstablished\" > '{killed_at}'::timestamptz"
                );
                let mut n = 0;
                loop {
                    if t.real_table_value(&sql).await.as_deref() != Some("0") {
                        break back.elapsed();
                    }
                    n += 1;
                    assert!(
                        n < 300,
                        "round {round}: the engine never took the worker's stream again"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            None => {
                let mut rx = health[&ListenerKind::WorkerActions].clone();
                tokio::time::timeout(Duration::from_secs(30), async {
                    while !matches!(*rx.borrow_and_update(), ListenerState::Connected { .. }) {
                        let _ = rx.changed().await;
                    }
                })
                .await
                .unwrap_or_else(|_| panic!("round {round}: the actions listener serves again"));
                back.elapsed()
            }
        };
        eprintln!(
            "conformance: round {round}: after the engine's return, the runs stream served in {runs_after:?}, the actions stream in {actions_after:?}"
        );
        assert!(
            runs_after <= Duration::from_secs(3),
            "round {round}: runs {runs_after:?}"
        );
        assert!(
            actions_after <= Duration::from_secs(3),
            "round {round}: actions {actions_after:?}"
        );
    }
    let t0 = std::time::Instant::now();
    let _: Value = rt
        .run("quick", &json!({}))
        .await
        .expect("a run after the restarts");
    eprintln!(
        "conformance: the first new run after the second restart took {:?} (the engine's scheduler taking its tenant back)",
        t0.elapsed()
    );
    release.store(true, Ordering::SeqCst);
    let out = waiter
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("the held run {held_id} across both restarts: {e:?}"));
    assert_eq!(out, json!({"held": true}));
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A worker with nothing to do is ready within seconds of its start, on both engines: the real
/// engine answers a ListenV2 only with its first assignment, so a readiness that waited for the
/// engine's answer would never come for an idle worker. It counts as served once its open went
/// a moment without an error and a heartbeat after it was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_is_ready_within_seconds() {
    use hatchet_runtime::health::{ListenerKind, ListenerState};
    let t = Target::new("idle_ready").await;
    let wf = Workflow::new("idle").task("t", |_: Value, _c: Context| async move {
        Ok::<_, TaskError>(json!({}))
    });
    let t0 = std::time::Instant::now();
    let rt = t.worker(1, vec![wf]).await;
    let mut rx = rt.health()[&ListenerKind::WorkerActions].clone();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !matches!(*rx.borrow_and_update(), ListenerState::Connected { .. }) {
            let _ = rx.changed().await;
        }
    })
    .await
    .expect("an idle worker's actions stream is served within 10 s");
    eprintln!(
        "conformance: an idle worker ready {:?} after its start",
        t0.elapsed()
    );
    rt.shutdown(Duration::from_secs(2)).await;
}

/// An assignment the engine records for this worker and never sends (its message went to a
/// dispatcher that is gone) is taken back by the worker and run once, with a new user's default
/// task options (no retries, a five-minute timeout), long before its timeout, with its parent's
/// output. On ours the engine's fault loses one assignment; on the real engine the worker's row
/// is pointed at a dead dispatcher (one a killed engine process left), which is what a SIGKILL
/// between the scheduler's commit and the dispatcher's send leaves: the scheduler routes by
/// `Worker.dispatcherId` and checks no liveness. (A root task the trigger's own process
/// schedules goes to the stream in process, so there the DAG's second task is the lost one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_the_engine_never_sends_is_taken_back_and_run_once() {
    use hatchet_runtime::retries::ReclaimTiming;
    let t = Target::new("unsent").await;
    let (ea, eb) = (counter(), counter());
    let (xa, xb) = (ea.clone(), eb.clone());
    let wf = Workflow::new("unsent")
        .task("a", move |i: Value, _c: Context| {
            xa.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, TaskError>(json!({"n": i["n"]})) }
        })
        .task_with(
            "b",
            TaskOptions::new().parents(["a"]),
            move |_: Value, c: Context| {
                xb.fetch_add(1, Ordering::SeqCst);
                async move {
                    let a: Value = c.parent_output("a")?;
                    Ok::<_, TaskError>(json!({"from_a": a["n"]}))
                }
            },
        )
        .durable_task(
            "d",
            TaskOptions::new().parents(["a"]),
            |_: Value, c: Context| async move {
                c.sleep_for(Duration::from_millis(200)).await?;
                Ok::<_, TaskError>(json!({"invocation": c.durable_invocation()}))
            },
        );
    let opts = RuntimeOptions::new().reclaim(
        ReclaimTiming::new()
            .every(Duration::from_secs(2))
            .grace(Duration::from_secs(3)),
    );
    let rt = crate::support::runtime_from(t.config(), opts).await;
    rt.register(wf).await.expect("register");
    let id = rt
        .start_worker(WorkerOptions::new("unsent", 2))
        .await
        .expect("start");
    let _: Value = rt
        .run("unsent", &json!({"n": 0}))
        .await
        .expect("a first run");
    match &t.ours {
        Some(e) => e.lose_next_sends(1),
        None => {
            // A dispatcher no process serves, as a killed process leaves its row behind.
            let dead = t
                .real_table_value(
                    "insert into \"Dispatcher\" (id, \"lastHeartbeatAt\") values (gen_random_uuid(), now()) returning id",
                )
                .await
                .unwrap_or_default();
            assert!(!dead.is_empty(), "a dispatcher row no process serves");
            t.real_table_value(&format!(
                "update \"Worker\" set \"dispatcherId\" = '{dead}' where id = '{id}' returning id"
            ))
            .await;
        }
    }
    let t0 = std::time::Instant::now();
    let out: Value = rt
        .run_no_wait("unsent", &json!({"n": 1}))
        .await
        .expect("trigger")
        .result_within(Duration::from_secs(120))
        .await
        .expect("the worker took the unsent assignment back");
    eprintln!(
        "conformance: unsent assignments taken back: {}, the run ended in {:?}",
        rt.task_counts().taken_back,
        t0.elapsed()
    );
    assert_eq!(out["b"], json!({"from_a": 1}), "{out}");
    assert_eq!(out["d"], json!({"invocation": 1}), "{out}");
    assert_eq!(out["a"], json!({"n": 1}), "{out}");
    assert_eq!(
        (ea.load(Ordering::SeqCst), eb.load(Ordering::SeqCst)),
        (2, 2),
        "each task of each run once"
    );
    assert!(rt.task_counts().taken_back >= 1);
    rt.shutdown(Duration::from_secs(2)).await;
}

/// The zombie worker of the official SDKs' reports
/// (<https://github.com/hatchet-dev/hatchet/issues/4254>,
/// <https://github.com/hatchet-dev/hatchet/issues/4824>): the engine holds the worker's actions
/// stream as gone while the worker's side of it stays open, so nothing is assigned to a worker that
/// heartbeats on. The engine refuses its next heartbeat with FAILED_PRECONDITION ("worker stream is
/// not active"); the worker reopens the stream at once and takes work again within seconds
/// (`heartbeat` invariant 3). On ours the engine forgets the stream; on the real engine (and the
/// cluster, through its proxy) the worker's row reads inactive, as the dispatcher that lost the
/// session leaves it, and the row reads active again within a few heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_worker_reopens_its_stream_at_its_next_heartbeat_and_takes_work_again() {
    let t = Target::new("zombie").await;
    let ran = counter();
    let x = ran.clone();
    let wf = Workflow::new("zombie").task("t", move |i: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, TaskError>(json!({"n": i["n"]})) }
    });
    let rt = t.worker(2, vec![wf]).await;
    let _: Value = rt
        .run("zombie", &json!({"n": 0}))
        .await
        .expect("a first run");
    let id = rt.worker_id().expect("registered");
    match &t.ours {
        Some(e) => assert!(e.forget_worker_streams(&id), "the engine knows the worker"),
        None => {
            let gone = t
                .real_table_value(&format!(
                    "update \"Worker\" set \"isActive\" = false where id = '{id}' returning id"
                ))
                .await
                .unwrap_or_default();
            assert_eq!(gone, id, "the worker's row reads inactive");
        }
    }
    let t0 = std::time::Instant::now();
    let out: Value = rt
        .run_no_wait("zombie", &json!({"n": 1}))
        .await
        .expect("trigger")
        .result_within(Duration::from_secs(30))
        .await
        .expect("the worker reopened its stream and took the run");
    let took = t0.elapsed();
    eprintln!(
        "conformance: a zombie worker took work again {took:?} after the engine lost its stream"
    );
    assert_eq!(out, json!({"n": 1}));
    assert_eq!(ran.load(Ordering::SeqCst), 2, "each run once");
    // A heartbeat every 4 s: the refusal comes within one, the reopen at once.
    assert!(
        took < Duration::from_secs(15),
        "took work again within a few heartbeats: {took:?}"
    );
    // The real engine routes by the worker's dispatcher and checks no liveness, so the run above
    // went out on the old stream; what proves the reopen there is the row: the next heartbeat is
    // refused, the worker opens a new stream, and the dispatcher marks the row active again.
    if t.ours.is_none() {
        let sql = format!("select \"isActive\" from \"Worker\" where id = '{id}'");
        let t0 = std::time::Instant::now();
        while t.real_table_value(&sql).await.as_deref() != Some("t") {
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "the worker reopened its stream within a few heartbeats"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!(
            "conformance: the engine held the worker's stream again {:?} after it read inactive",
            t0.elapsed() + took
        );
    }
    rt.shutdown(Duration::from_secs(2)).await;
}

/// Cluster only (`HATCHET_REAL_ENGINE_SCRIPT` naming scripts/real-cluster.sh): the proxy cuts the
/// worker's actions stream and carries no new one (`block-listen`), while every other call
/// passes, so the replicas accept its heartbeats. The worker does not pass as ready: `/ready`
/// fails within seconds and says why (a zombie would stay ready, taking nothing); once the proxy
/// carries the stream again (`unblock-listen`) it is ready again and takes work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_worker_whose_actions_stream_cannot_be_reopened_is_not_ready() {
    let t = Target::new("blocked").await;
    if t.script_is_cluster().is_none() {
        eprintln!("conformance: cluster only, skipped here: an actions stream the proxy refuses");
        return;
    }
    let mut config = t.config();
    config.healthcheck = Some(([127, 0, 0, 1], 0).into());
    let rt = crate::support::runtime_from(config, RuntimeOptions::new()).await;
    rt.register(
        Workflow::new("blocked").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        ),
    )
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("blocked", 2))
        .await
        .expect("start");
    let ready_url = format!("http://{}/ready", rt.ops_addr().expect("serving"));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let ready = || async {
        http.get(&ready_url)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    let until = |want: u16, within: Duration| {
        let ready = &ready;
        async move {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < within {
                if ready().await == want {
                    return Some(t0.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            None
        }
    };
    until(200, Duration::from_secs(15))
        .await
        .expect("ready once started");
    assert!(t.cluster_fault("block-listen", "blocked").await);
    let failed = until(503, Duration::from_secs(15)).await;
    let body: Value = match http.get(&ready_url).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    assert!(t.cluster_fault("unblock-listen", "blocked").await);
    let failed = failed.expect("/ready fails while the actions stream cannot be reopened");
    eprintln!(
        "conformance: /ready failed {failed:?} after the proxy refused the actions stream: {body}"
    );
    let back = until(200, Duration::from_secs(30))
        .await
        .expect("ready again once the proxy carries the stream");
    eprintln!("conformance: ready again {back:?} after the proxy carried it again");
    let out: Value = rt
        .run_no_wait("blocked", &json!({"n": 1}))
        .await
        .expect("trigger")
        .result_within(Duration::from_secs(30))
        .await
        .expect("takes work again");
    assert_eq!(out, json!({"n": 1}));
    rt.shutdown(Duration::from_secs(2)).await;
}

/// Cluster only: workers spread onto a replica started after them (`stream` invariant 8). With
/// the proxy's idle timeout off, nothing else moves a stream: eight workers open their actions
/// streams while replica 2 is down, so all of them are on replica 1; replica 2 comes back, and
/// within a few rotation periods (10 s here) both replicas hold actions streams (the workers'
/// rows name two dispatchers). Without rotation they would stay on replica 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_workers_spread_onto_a_replica_started_after_them() {
    let t = Target::new("spread").await;
    let check = "streams rotate onto a replica added later";
    if t.script_is_cluster().is_none() {
        eprintln!("conformance: cluster only, skipped here: {check}");
        return;
    }
    let no_idle = [("CLUSTER_IDLE_TIMEOUT", "1d")];
    assert!(
        t.cluster_fault_with(&["reload-proxy"], &no_idle, check)
            .await
    );
    assert!(
        t.cluster_fault_with(&["kill-grpc", "2"], &no_idle, check)
            .await
    );
    let mut workers = Vec::new();
    for i in 0..8 {
        let rt = crate::support::runtime_from(
            t.config(),
            RuntimeOptions::new().stream_rotation(Some(Duration::from_secs(10))),
        )
        .await;
        rt.register(
            Workflow::new("spread").task("t", |i: Value, _c: Context| async move {
                Ok::<_, TaskError>(i)
            }),
        )
        .await
        .expect("register");
        let id = rt
            .start_worker(WorkerOptions::new(format!("spread-{i}"), 1))
            .await
            .expect("start");
        workers.push((rt, id));
    }
    let ids: Vec<String> = workers.iter().map(|(_, id)| format!("'{id}'")).collect();
    let sql = format!(
        "select count(distinct \"dispatcherId\") from \"Worker\" where id in ({})",
        ids.join(",")
    );
    let before = t.real_table_value(&sql).await.unwrap_or_default();
    assert!(
        t.cluster_fault_with(&["restart-grpc", "2"], &no_idle, check)
            .await
    );
    let t0 = std::time::Instant::now();
    let mut spread = None;
    while t0.elapsed() < Duration::from_secs(90) {
        if t.real_table_value(&sql).await.as_deref() == Some("2") {
            spread = Some(t0.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The proxy's idle timeout back to the cluster's default before anything can fail.
    let restored = t.cluster_fault_with(&["reload-proxy"], &[], check).await;
    for (rt, _) in workers {
        rt.shutdown(Duration::from_secs(2)).await;
    }
    assert!(restored);
    assert_eq!(before, "1", "every worker started on replica 1");
    let spread = spread.expect("both replicas hold actions streams within 90 s");
    eprintln!("conformance: workers on both replicas {spread:?} after replica 2 came back");
}

// --- ours only: what needs fault injection --------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_only_a_duplicated_assignment_runs_once() {
    let t = Target::new("dup").await;
    let Some(engine) = t.ours_only("an assignment delivered twice runs once") else {
        return;
    };
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("once").task("t", move |_: Value, _c: Context| {
        x.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, TaskError>(json!({})) }
    });
    let rt = t.worker(4, vec![wf]).await;
    engine.duplicate_next_assignments(1);
    let _: Value = rt
        .run_no_wait("once", &json!({}))
        .await
        .expect("trigger")
        .result_within(RESULT)
        .await
        .expect("result");
    assert_eq!(execs.load(Ordering::SeqCst), 1);
    rt.shutdown(Duration::from_secs(5)).await;
}

/// The engine's own answer to an unknown run: both engines, so the check's expectation is the
/// real one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn details_of_an_unknown_run_are_not_found() {
    let t = Target::new("unknown").await;
    let rt = t.runtime().await;
    let err: Error = rt
        .run_details("00000000-0000-4000-8000-000000000000")
        .await
        .expect_err("no such run");
    assert_eq!(
        err.status().map(|s| s.code()),
        Some(hatchet_runtime::errors::GrpcCode::NotFound),
        "{err}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A wait on a run id the caller gave, which the engine does not show, ends `NotFound` after the
/// sweep's window for a given id (two minutes), in words that say the run may still appear, instead
/// of waiting forever (the real engine ignores unknown ids on the run stream). A trigger of a
/// workflow the engine does not have is refused before it is sent (the real engine answers it
/// with an id no run will ever have), single and bulk: nothing is triggered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_an_unknown_run_ends_not_found() {
    let t = Target::new("unknown_wait").await;
    let rt = t.runtime().await;
    let refused = rt
        .run_no_wait("nobody-registered-this", &json!({}))
        .await
        .expect_err("no such workflow");
    assert_eq!(refused.outcome(), Outcome::Rejected, "{refused}");
    assert!(
        refused.to_string().contains("has no workflow named")
            && refused.to_string().contains("nothing was triggered"),
        "{refused}"
    );
    let bulk = rt
        .run_many("nobody-registered-this", &[json!({}), json!({})])
        .await;
    assert!(
        bulk.iter()
            .all(|r| r.as_ref().is_err_and(|e| e.outcome() == Outcome::Rejected)),
        "{bulk:?}"
    );
    let started = std::time::Instant::now();
    let err = rt
        .run_handle("00000000-0000-4000-8000-00000000abcd")
        .result_within::<Value>(Duration::from_secs(180))
        .await
        .expect_err("no such run");
    assert_eq!(err.outcome(), Outcome::NotFound, "{err}");
    assert_eq!(
        err.status().map(|s| s.code()),
        Some(hatchet_runtime::errors::GrpcCode::NotFound),
        "{err}"
    );
    assert!(err.to_string().contains("may still appear"), "{err}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(120) && waited < Duration::from_secs(150),
        "{waited:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A trigger the engine answers before it writes the run: the real engine does so when its
/// optimistic write slots (5 by default) are busy, and its task controller creates the run later
/// from a queued message (v0.104.9, `AdminService.ingest`). On the real engine 30 triggers at once
/// take that path; on ours a fault writes every trigger 11 s late, past the old sweep's 10 s
/// verdict. Every wait ends with its own run's output, each run executed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_outlive_triggers_the_engine_writes_after_answering() {
    let t = Target::new("late_writes").await;
    let execs = Arc::new(AtomicUsize::new(0));
    let e = execs.clone();
    let wf = Workflow::new("late-write").task("t", move |i: Value, _c: Context| {
        e.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, TaskError>(json!({ "n": i["n"] })) }
    });
    let rt = t.worker(8, vec![wf]).await;
    let late = t.ours_only("triggers written 11 s after they are answered");
    if let Some(e) = &late {
        e.defer_trigger_writes(Some(Duration::from_secs(11)));
    }
    let n = 30;
    let inputs: Vec<Value> = (0..n).map(|i| json!({ "n": i })).collect();
    let handles =
        futures::future::join_all(inputs.iter().map(|i| rt.run_no_wait("late-write", i))).await;
    if late.is_some() {
        let h = handles[0].as_ref().expect("trigger");
        let read = rt
            .run_details(h.run_id())
            .await
            .expect_err("not written yet");
        assert!(read.is_not_found(), "the premise: {read}");
    }
    let outs = futures::future::join_all(
        handles
            .into_iter()
            .map(|h| async move { h.expect("trigger").result_within::<Value>(RESULT).await }),
    )
    .await;
    for (i, out) in outs.into_iter().enumerate() {
        assert_eq!(out.expect("each run's result"), json!({ "n": i }));
    }
    assert_eq!(execs.load(Ordering::SeqCst), n, "each run executed once");
    if let Some(e) = &late {
        e.defer_trigger_writes(None);
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A wait on a live run the engine does not show yet is not given up. The real engine answers
/// GetRunDetails NotFound for a run whose root task waits on a condition (it creates only a match
/// until the condition holds); ours shows such a run, so a fault plays the real engine there. The
/// wait outlives the old sweep's 10 s verdict, then the sleep ends and the result is the task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_outlives_a_gated_run_the_engine_does_not_show_yet() {
    let t = Target::new("gated_root").await;
    let wf = Workflow::new("gated-root").task_with(
        "t",
        TaskOptions::new().wait_for(Condition::sleep(Duration::from_secs(16))),
        |_: Value, _c: Context| async move { Ok::<_, TaskError>(json!({"opened": true})) },
    );
    let rt = t.worker(2, vec![wf]).await;
    if let Some(e) = t.ours_only("GetRunDetails hides a run whose root task waits on a condition") {
        e.faults().inject(
            "/v1.AdminService/GetRunDetails",
            10_000,
            hatchet_dev_engine::Fault::Fail {
                code: 5,
                message: "workflow run not found".into(),
                pushback_ms: None,
            },
        );
    }
    let h = rt
        .run_no_wait("gated-root", &json!({}))
        .await
        .expect("trigger");
    // The premise, on both engines: the engine does not show the run.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read = rt.run_details(h.run_id()).await.expect_err("not shown yet");
    assert!(read.is_not_found(), "{read}");
    let waited = tokio::time::timeout(Duration::from_secs(12), h.result::<Value>()).await;
    assert!(
        waited.is_err(),
        "the wait must go on past the old 10 s verdict: {waited:?}"
    );
    if let Some(e) = t.ours_only("the fault ends") {
        e.faults().clear();
        let out: Value = h
            .result_within(RESULT)
            .await
            .expect("the gated run's result");
        assert_eq!(out, json!({"opened": true}));
    } else {
        // The real engine v0.104.9 answers this trigger with an id and persists nothing for it
        // (no lookup row, no match, no task: read in its tables), so the run never comes. The
        // wait still never claims the run does not exist: its deadline says what the engine
        // shows.
        match h.result_within::<Value>(Duration::from_secs(30)).await {
            Ok(out) => assert_eq!(out, json!({"opened": true})),
            Err(e) => {
                assert_eq!(e.outcome(), Outcome::DeadlineExceeded, "{e}");
                assert!(
                    e.to_string().contains("shows no run under this id yet"),
                    "{e}"
                );
            }
        }
    }
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A run the engine stalls (it recorded `a`'s completion and lost the step that creates `b`:
/// the real engine does this when it is killed right after the completion, found by the chaos
/// suite, `scripts/chaos-evidence.sh` shows the unsatisfied match) ends its wait at the deadline
/// with what the engine shows and the way out, not a bare timeout (the real engine v0.104.9
/// discards a replay of such a run: read in its log, `failed preflight check for DAG`). The real
/// engine's case is the chaos suite's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_only_a_run_stalled_by_a_lost_followup_is_named_at_its_deadline() {
    let t = Target::new("stalled").await;
    let Some(e) = t.ours_only("a completion whose follow-up the engine loses") else {
        return;
    };
    let runs: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let (ra, rb) = (runs.clone(), runs.clone());
    let wf = Workflow::new("stalled")
        .task("a", move |_: Value, _c: Context| {
            let runs = ra.clone();
            async move {
                runs.lock().push("a");
                Ok::<_, TaskError>(json!({"a": 1}))
            }
        })
        .task_with(
            "b",
            TaskOptions::new().parents(["a"]),
            move |_: Value, _c: Context| {
                let runs = rb.clone();
                async move {
                    runs.lock().push("b");
                    Ok::<_, TaskError>(json!({"b": 2}))
                }
            },
        );
    let rt = t.worker(2, vec![wf]).await;
    e.lose_next_completion_followups(1);
    let h = rt
        .run_no_wait("stalled", &json!({}))
        .await
        .expect("trigger");
    let err = h
        .result_within::<Value>(Duration::from_secs(4))
        .await
        .expect_err("the run is stalled");
    assert_eq!(err.outcome(), Outcome::DeadlineExceeded, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("a Completed") && !text.contains("b Queued"),
        "what the engine shows, only the tasks it created: {text}"
    );
    assert!(
        text.contains("no task is queued or running")
            && text.contains("will not finish")
            && text.contains("trigger the work again"),
        "{text}"
    );
    assert_eq!(*runs.lock(), ["a"], "b was never created");
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A wait on a run that has already finished answers from one read of the run (the engine's
/// run stream tells of a finished run only at its next tick, a second on the real engine),
/// while a wait that starts with its trigger costs no read. Reads are counted at our engine; both
/// engines give the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_finished_run_reads_it_once_and_a_fresh_wait_not_at_all() {
    let t = Target::new("finished_wait").await;
    let wf = Workflow::new("finished-wait").task("t", |i: Value, _c: Context| async move {
        Ok::<_, TaskError>(json!({"n": i["n"]}))
    });
    let rt = t.worker(2, vec![wf]).await;
    const READ: &str = "/v1.AdminService/GetRunDetails";
    let reads = || t.ours.as_ref().map(|e| e.faults().attempts(READ));
    let before = reads();
    let h = rt
        .run_no_wait("finished-wait", &json!({"n": 1}))
        .await
        .expect("trigger");
    let out: Value = h.result_within(RESULT).await.expect("result");
    assert_eq!(out, json!({"n": 1}));
    assert_eq!(
        reads(),
        before,
        "a wait that starts with its trigger reads nothing"
    );
    // Waits that start after the run ended: the engine answers their subscription only at its
    // stream's next one-second tick, so each reads the run once and answers at once. Without
    // the read, three waits all under 400 ms would be a 6 % chance.
    let mut took = Vec::new();
    for n in 2..5 {
        let h = rt
            .run_no_wait("finished-wait", &json!({"n": n}))
            .await
            .expect("trigger");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t0 = std::time::Instant::now();
        let out: Value = h.result_within(RESULT).await.expect("result");
        took.push(t0.elapsed());
        assert_eq!(out, json!({"n": n}));
    }
    for _ in 0..3 {
        let t0 = std::time::Instant::now();
        let again: Value = rt
            .run_handle(h.run_id())
            .result_within(RESULT)
            .await
            .expect("the finished run's result");
        took.push(t0.elapsed());
        assert_eq!(again, json!({"n": 1}));
    }
    eprintln!("conformance: late waits answered in {took:?}");
    assert!(
        took.iter().all(|d| *d < Duration::from_millis(400)),
        "a late wait answers at once, not at the engine's next tick: {took:?}"
    );
    // The reads are spawned (our engine may answer first on the stream): wait for them.
    until_read(
        "the late waits' reads",
        || async { reads() },
        |r| *r >= before.map(|n| n + 6),
    )
    .await;
    assert_eq!(
        reads(),
        before.map(|n| n + 6),
        "each late wait reads the run once"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A completion the engine answered and then lost (the real engine does when it is killed after
/// answering and before its controller records it: the chaos suite's attempts that ran twice,
/// `TIMED_OUT` after a `FINISHED` the worker had sent) is the engine's loss: the attempt runs out
/// its timeout and is retried, and the result still arrives, from the second execution (counted
/// in the handler: at-least-once). The runtime does not send the completion again: the real
/// engine takes a second COMPLETED of a DAG task for a replay and strands the messages it read
/// with it (chaos run long4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_only_a_completion_the_engine_lost_times_out_and_is_retried() {
    let t = Target::new("lost_completion").await;
    let Some(e) = t.ours_only("an answered completion the engine loses") else {
        return;
    };
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let wf = Workflow::new("lost-completion").task_with(
        "t",
        TaskOptions::new()
            .retries(1)
            .timeout(Duration::from_secs(3)),
        move |_: Value, _c: Context| {
            let ran = r.clone();
            async move {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<_, TaskError>(json!({"done": true}))
            }
        },
    );
    let rt = t.worker(2, vec![wf]).await;
    e.lose_next_answered_completions(1);
    let h = rt
        .run_no_wait("lost-completion", &json!({}))
        .await
        .expect("trigger");
    let out: Value = h
        .result_within(RESULT)
        .await
        .expect("the retry's result, after the lost completion's timeout");
    assert_eq!(out, json!({"done": true}));
    assert_eq!(ran.load(Ordering::SeqCst), 2, "ran again after the timeout");
    rt.shutdown(Duration::from_secs(1)).await;
}

/// An input over the message limit is refused before it is sent (nothing can run), and when the
/// client's limit is raised past the engine's, the engine's own refusal is a rejection, not a
/// "maybe executed": its gRPC layer refuses the message unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_over_the_message_limit_is_refused_and_never_maybe_executed() {
    let t = Target::new("too_big").await;
    let wf = Workflow::new("too-big").task("t", |_: Value, _c: Context| async move {
        Ok::<_, TaskError>(json!({}))
    });
    let rt = t.worker(2, vec![wf]).await;
    let input = json!({"blob": "x".repeat(5 * 1024 * 1024)});
    let err = rt
        .run_no_wait("too-big", &input)
        .await
        .expect_err("over the limit");
    assert_eq!(err.outcome(), Outcome::Invalid, "{err}");
    assert!(
        err.to_string().contains("nothing was sent")
            && err
                .to_string()
                .contains("HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH"),
        "{err}"
    );
    let mut config = t.config();
    config.max_send_message_bytes = 16 * 1024 * 1024;
    let raised = crate::support::runtime_from(config, RuntimeOptions::new()).await;
    let err = raised
        .run_no_wait("too-big", &input)
        .await
        .expect_err("the engine refuses it");
    assert_eq!(err.outcome(), Outcome::Rejected, "{err}");
    assert!(!err.outcome().may_have_executed());
    raised.shutdown(Duration::from_secs(1)).await;
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A durable event wait with a scope and a lookback takes an event pushed (with that scope)
/// while the task was still in its durable sleep, before the wait was registered, and not one
/// pushed in another scope; a lookback comes with its scope in the types. The real engine looks
/// back only for a scoped event, from `consider_events_since`, which the runtime counts back from
/// the durable clock so a replay asks the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_event_wait_with_a_lookback_takes_an_event_pushed_before_it() {
    let t = Target::new("lookback").await;
    let key = format!("approval-{}", std::process::id());
    let k = key.clone();
    let wf = Workflow::new("lookback").durable_task(
        "d",
        TaskOptions::new(),
        move |i: Value, c: Context| {
            let key = k.clone();
            async move {
                c.sleep_for(Duration::from_secs(3)).await?;
                let scope = i["scope"].as_str().unwrap_or_default().to_string();
                let got = c
                    .wait_for_event_with(
                        Condition::event(key).lookback(scope, Duration::from_secs(60)),
                    )
                    .await?;
                Ok::<_, TaskError>(json!({"got": got}))
            }
        },
    );
    let rt = t.worker(4, vec![wf]).await;
    let scope = format!("order-{}", std::process::id());
    let h = rt
        .run_no_wait("lookback", &json!({"scope": scope}))
        .await
        .expect("trigger");
    // Pushed while the task sleeps, before its wait exists: first in another scope (never
    // taken), then in the run's.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (scope, ok) in [(format!("{scope}-other"), false), (scope.clone(), true)] {
        rt.push_with(
            &key,
            &json!({"ok": ok}),
            hatchet_runtime::run::PushOptions::new().scope(scope),
        )
        .await
        .expect("push");
    }
    let out: Value = h.result_within(RESULT).await.expect("the early event");
    assert_eq!(
        out["got"],
        json!({"ok": true}),
        "the run's scope only: {out}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A lookback takes the newest event of its scope inside its window, and none from before the
/// window: two runs of one durable task wait after a 4 s sleep with a 2 s lookback. The first
/// run's scope got an event at 0.5 s (outside), two at 3.2 s and 3.5 s (inside) and one in
/// another scope at 3.7 s: it takes the 3.5 s one (the real engine picks the newest). The
/// second run's scope got only the 0.5 s event: its wait does not take it, and takes the one
/// pushed at 6.5 s, after the wait exists. The first run then fails its first attempt, and
/// its retry replays the sleep and the wait from the durable log: the same event (a lookback
/// counted from the moment of the retry would find nothing in its scope and wait on). Times
/// count from each run's first invocation; the sleep ends at the engine's next timer read
/// after 4 s (up to 1 s later), so each window starts between 2 s and 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookback_takes_the_newest_event_in_its_window_and_none_before_it() {
    let t = Target::new("lookback_window").await;
    let key = format!("window-{}", std::process::id());
    let starts: Arc<parking_lot::Mutex<std::collections::HashMap<String, std::time::Instant>>> =
        Arc::default();
    let (k, st) = (key.clone(), starts.clone());
    let wf = Workflow::new("lookback-window").durable_task(
        "d",
        TaskOptions::new().retries(1),
        move |i: Value, c: Context| {
            let (key, starts) = (k.clone(), st.clone());
            async move {
                let scope = i["scope"].as_str().unwrap_or_default().to_string();
                starts
                    .lock()
                    .entry(scope.clone())
                    .or_insert_with(std::time::Instant::now);
                c.sleep_for(Duration::from_secs(4)).await?;
                let got = c
                    .wait_for_event_with(
                        Condition::event(key).lookback(scope.clone(), Duration::from_secs(2)),
                    )
                    .await?;
                if scope.starts_with("two-") && c.retry_count() == 0 {
                    return Err(TaskError::new(
                        "fail once after the wait: the retry replays it",
                    ));
                }
                Ok::<_, TaskError>(got)
            }
        },
    );
    let rt = t.worker(4, vec![wf]).await;
    let scope = |n: &str| format!("{n}-{}", std::process::id());
    let (two, old_only) = (scope("two"), scope("old-only"));
    let mut handles = Vec::new();
    for s in [&two, &old_only] {
        let h = rt
            .run_no_wait("lookback-window", &json!({"scope": s}))
            .await
            .expect("trigger");
        handles.push(h);
    }
    until("both runs started", || starts.lock().len() == 2).await;
    let start_of = |s: &str| starts.lock()[s];
    let mut pushes = vec![
        (
            start_of(&two) + Duration::from_millis(500),
            two.clone(),
            "old",
        ),
        (
            start_of(&two) + Duration::from_millis(3_200),
            two.clone(),
            "inside",
        ),
        (
            start_of(&two) + Duration::from_millis(3_500),
            two.clone(),
            "newest",
        ),
        (
            start_of(&two) + Duration::from_millis(3_700),
            format!("{two}-other"),
            "other",
        ),
        (
            start_of(&old_only) + Duration::from_millis(500),
            old_only.clone(),
            "old",
        ),
        (
            start_of(&old_only) + Duration::from_millis(6_500),
            old_only.clone(),
            "after",
        ),
    ];
    pushes.sort_by_key(|(at, _, _)| *at);
    for (at, scope, n) in pushes {
        tokio::time::sleep_until(at.into()).await;
        rt.push_with(
            &key,
            &json!({"n": n}),
            hatchet_runtime::run::PushOptions::new().scope(scope),
        )
        .await
        .expect("push");
    }
    let got: Vec<Value> =
        futures::future::join_all(handles.iter().map(|h| h.result_within(RESULT)))
            .await
            .into_iter()
            .map(|r| r.expect("result"))
            .collect();
    assert_eq!(got[0], json!({"n": "newest"}), "the newest in the window");
    assert_eq!(got[1], json!({"n": "after"}), "none from before the window");
    rt.shutdown(Duration::from_secs(1)).await;
}

/// An event push whose triggered run collides on the workflow's idempotency key is accepted:
/// the event is stored and one run exists (ours used to answer ALREADY_EXISTS to the push).
/// Executions are counted in the handler, and the second push is read back from the events list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_push_whose_run_collides_on_an_idempotency_key_is_accepted() {
    let t = Target::new("event_key").await;
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let key = format!("evkey-{}", std::process::id());
    let wf = Workflow::new("event-key")
        .on_events([key.clone()])
        .task("t", move |_: Value, _c: Context| {
            let ran = r.clone();
            async move {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<_, TaskError>(json!({}))
            }
        })
        .idempotency("input.k", Duration::from_secs(600));
    let rt = t.worker(2, vec![wf]).await;
    let k = format!("k-{}", std::process::id());
    let first = rt.push(&key, &json!({"k": k})).await.expect("first push");
    let second = rt
        .push(&key, &json!({"k": k}))
        .await
        .expect("the colliding push is accepted");
    assert_ne!(first, second, "two events stored");
    until_read(
        "the one run executed",
        || async { ran.load(Ordering::SeqCst) },
        |n| *n >= 1,
    )
    .await;
    // Both events are stored; a run the collision had created would have executed by the time
    // they are read back (and, on the real engine, a scheduler period later).
    let api = rt.api();
    let q = hatchet_runtime::api::EventQuery::new().key(key.clone());
    until_read(
        "both events listed",
        || api.list_events(&q),
        |r| r.as_ref().is_ok_and(|p| p.rows.len() >= 2),
    )
    .await
    .expect("events");
    tokio::time::sleep(t.real_engine_period(Duration::from_secs(3))).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1, "one run");
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A static rate-limit key must exist before a workflow that names it is registered (the real
/// engine's step rate limit references the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_rate_limit_key_must_exist_before_registration() {
    let t = Target::new("rl_missing").await;
    let rt = t.runtime().await;
    let wf = Workflow::new("needs-limit").task_with(
        "t",
        TaskOptions::new().rate_limit("conf-never-put", 1),
        |_: Value, _c: Context| async move { Ok::<_, TaskError>(json!({})) },
    );
    let err = rt.register(wf).await.expect_err("the key does not exist");
    eprintln!("conformance: register with a missing rate limit key: {err}");
    assert!(
        err.to_string().contains("rate limit"),
        "the error names the rate limit: {err}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// A worker for workflow `name`: one task that returns `{"ok": true}` at once, and when its
/// handler last returned.
async fn instant_worker(
    t: &Target,
    name: &str,
) -> (RuntimeHandle, Arc<Mutex<Option<std::time::Instant>>>) {
    let returned: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let r = returned.clone();
    let wf = Workflow::new(name).task("t", move |_: Value, _c: Context| {
        *r.lock() = Some(std::time::Instant::now());
        async { Ok::<_, TaskError>(json!({"ok": true})) }
    });
    (t.worker(4, vec![wf]).await, returned)
}

/// A new run's end reaches the run stream (what `result()` waits on) as soon as the engine
/// records it, although REST reads the run 1 to 2 s late: the real engine's task controller
/// tells the dispatcher as it records the end. Measured there with the official Python SDK's
/// `aio_result()` alone: 19 to 54 ms after the task returned. Ours held a new run's end back
/// with REST's lag, 1.3 to 1.7 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_run_s_result_arrives_as_its_end_is_recorded_not_with_rest_s_lag() {
    let t = Target::new("prompt_end").await;
    let (rt, returned) = instant_worker(&t, "instant").await;
    let mut after_return = Vec::new();
    for _ in 0..5 {
        let h = rt
            .run_no_wait("instant", &json!({}))
            .await
            .expect("trigger");
        let out: Value = h.result_within(RESULT).await.expect("result");
        let arrived = std::time::Instant::now();
        assert_eq!(out["ok"], true, "{out}");
        let ended = returned.lock().expect("the task ran");
        after_return.push(arrived.duration_since(ended));
    }
    after_return.sort();
    assert!(
        after_return[2] < Duration::from_millis(500),
        "most results arrive well within REST's 1 s lag after the task returned: {after_return:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// The real engine records a worker's end of a task some milliseconds after the worker sent it
/// (its task controller reads the end from a queue and writes it in a transaction: measured 16
/// to 48 ms on v0.104.9); until then GetRunDetails reads the run not done, so a client polling
/// a short task for RUNNING sees it (the official Python look-back scope test does). Ours read
/// the end within a millisecond. On the real engine a read can also say QUEUED in that while:
/// it reads the finalized runs before the running tasks, so a read that straddles the end's
/// commit finds neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_details_read_a_run_not_done_a_while_after_its_worker_ended_it() {
    let t = Target::new("endhop").await;
    let (rt, returned) = instant_worker(&t, "quick").await;
    use hatchet_runtime::protocol::v1::RunStatus;
    // The real engine's hop varies: some ends are recorded within a few milliseconds (the
    // first read after the return already reads done), others after 20 to 60 ms (ten rounds
    // of five runs each had one of at least 12 ms). So runs go on until one reads not done
    // 8 ms or more after its task returned, up to 40 (all 40 short would be under 1 in 10^6
    // on the real engine's measured spread). Ours without its end hop: never (under 0.1 ms).
    let mut late = Vec::new();
    for _ in 0..40 {
        if late.iter().any(|l| *l >= Duration::from_millis(8)) {
            break;
        }
        let h = rt.run_no_wait("quick", &json!({})).await.expect("trigger");
        // Eight pollers side by side, started 3 ms apart, so that reads start every few
        // milliseconds although one takes 25 to 35 ms on the real engine (more on a loaded
        // machine). Each read is kept with the moment it started: a read that started after
        // the handler returned and still reads the run not done proves the engine had not
        // recorded the end by then.
        let (target, run) = (&t, h.run_id());
        let poll = |i: u64| async move {
            tokio::time::sleep(Duration::from_millis(3 * i)).await;
            let mut reads = Vec::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while std::time::Instant::now() < deadline {
                let started = std::time::Instant::now();
                if let Ok(d) = raw_run_details(target, run).await {
                    reads.push((started, d.done, d.status));
                    if d.done {
                        return Some(reads);
                    }
                }
            }
            None
        };
        let reads: Vec<_> = futures::future::join_all((0..8).map(poll))
            .await
            .into_iter()
            .flat_map(|r| r.expect("the run reads done within 20 s"))
            .collect();
        let ended = returned.lock().expect("the task ran");
        let not_done_after: Vec<_> = reads
            .iter()
            .filter(|(at, done, _)| !done && *at > ended)
            .collect();
        assert!(
            not_done_after.iter().all(|(_, _, s)| [
                RunStatus::Running as i32,
                RunStatus::Queued as i32
            ]
            .contains(s)),
            "a run not done reads RUNNING or QUEUED: {not_done_after:?}"
        );
        // How long after the handler returned a read still found the run not done.
        late.push(
            not_done_after
                .iter()
                .map(|(at, _, _)| at.duration_since(ended))
                .max()
                .unwrap_or_default(),
        );
    }
    let longest = late.iter().max().copied().unwrap_or_default();
    assert!(
        longest >= Duration::from_millis(8),
        "one of {} runs reads not done at least 8 ms after its task returned: {late:?}",
        late.len()
    );
    eprintln!(
        "conformance: a run read not done {longest:?} after its task returned, at run {} of 40",
        late.len()
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- the differential test: our engine's answers against the real one's ----------------------
