//! Where and when tasks run: DAG conditions, worker labels and sticky placement, event filters
//! and scopes, rate limits and concurrency, released slots. On both engines.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dag_conditions_skip_and_wait() {
    let t = Target::new("conds").await;
    let wf = Workflow::new("conds")
        .task("check", |i: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({"n": i["n"]}))
        })
        .task_with(
            "maybe",
            TaskOptions::new()
                .parents(["check"])
                .skip_if(Condition::parent("check").expression("output.n > 5")),
            |_: Value, _c: Context| async move { Ok::<_, TaskError>(json!({"ran": true})) },
        )
        .task_with(
            "approve",
            TaskOptions::new().parents(["check"]).wait_for(any_of([
                Condition::sleep(Duration::from_secs(600)),
                Condition::event("approval")
                    .expression("input.ok == true")
                    .into(),
            ])),
            |_: Value, c: Context| async move {
                Ok::<_, TaskError>(json!({"triggers": c.triggers().clone()}))
            },
        )
        // A parent condition gates the sleeps and events: it does not stand in for the event of
        // its group, so this waits for `conds-gate` (pushed from 3 s on), not just the 1 s sleep.
        .task_with(
            "gated",
            TaskOptions::new()
                .parents(["check"])
                .wait_for(any_of([
                    Condition::parent("check").expression("output.n > 5"),
                    Condition::event("conds-gate").into(),
                ]))
                .wait_for(Condition::sleep(Duration::from_secs(1))),
            |_: Value, c: Context| async move {
                Ok::<_, TaskError>(json!({"triggers": c.triggers().clone()}))
            },
        );
    let rt = t.worker(8, vec![wf]).await;
    let h = rt
        .run_no_wait("conds", &json!({"n": 9}))
        .await
        .expect("trigger");
    // Per-task progress is the REST read's: GetRunDetails shows a task's outcome only once the
    // whole run is finalized (on both engines).
    let api = rt.api();
    until_read(
        "check completes",
        // The real engine's REST reads trail the trigger: not found at first.
        || async { api.run(h.run_id()).await.ok() },
        |v| {
            v.as_ref().is_some_and(|v| {
                v.tasks
                    .get("check")
                    .is_some_and(|t| t.status == RunStatus::Completed)
            })
        },
    )
    .await;
    let pushing = {
        let rt = rt.clone();
        tokio::spawn(async move {
            for round in 0u32.. {
                let _ = rt.push("approval", &json!({"ok": false})).await;
                let _ = rt.push("approval", &json!({"ok": true})).await;
                if round >= 2 {
                    let _ = rt.push("conds-gate", &json!({"round": round})).await;
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
        })
    };
    let out: Value = h.result_within(RESULT).await.expect("result");
    pushing.abort();
    assert_eq!(out["maybe"], json!({"skipped": true}), "{out}");
    assert!(
        out["gated"]["triggers"]["conds-gate"]["round"].as_u64() >= Some(2),
        "the parent condition stood in for the event of its group: {out}"
    );
    assert_eq!(
        out["approve"]["triggers"]["approval"],
        json!({"ok": true}),
        "{out}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_and_sticky_place_tasks() {
    let t = Target::new("labels").await;
    let places: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let rec = |name: &'static str| {
        let p = places.clone();
        move |_: Value, c: Context| {
            p.lock()
                .push((name.to_string(), c.worker_id().unwrap_or_default()));
            async { Ok::<_, TaskError>(json!({})) }
        }
    };
    let gpu = Workflow::new("gpu").task_with(
        "t",
        TaskOptions::new().desired_label("gpu", DesiredLabel::equals("yes").required()),
        rec("gpu"),
    );
    let sticky = Workflow::new("sticky")
        .sticky(StickyStrategy::Hard)
        .task("a", rec("a"))
        .task_with("b", TaskOptions::new().parents(["a"]), rec("b"));
    let (rt_gpu, gpu_id) = t
        .worker_with(
            WorkerOptions::new("with-gpu", 4).label("gpu", "yes"),
            vec![gpu.clone(), sticky.clone()],
        )
        .await;
    let (rt_cpu, _cpu_id) = t
        .worker_with(
            WorkerOptions::new("no-gpu", 4).label("gpu", "no"),
            vec![gpu, sticky],
        )
        .await;
    for _ in 0..4 {
        let _: Value = rt_cpu
            .run_no_wait("gpu", &json!({}))
            .await
            .expect("trigger")
            .result_within(RESULT)
            .await
            .expect("result");
    }
    for _ in 0..4 {
        let _: Value = rt_cpu
            .run_no_wait("sticky", &json!({}))
            .await
            .expect("trigger")
            .result_within(RESULT)
            .await
            .expect("result");
    }
    let p = places.lock().clone();
    assert!(
        p.iter()
            .filter(|(n, _)| n == "gpu")
            .all(|(_, w)| *w == gpu_id),
        "required label: only the gpu worker: {p:?}"
    );
    let a: Vec<&String> = p.iter().filter(|(n, _)| n == "a").map(|(_, w)| w).collect();
    let b: Vec<&String> = p.iter().filter(|(n, _)| n == "b").map(|(_, w)| w).collect();
    assert_eq!(a.len(), 4);
    assert_eq!(a, b, "hard sticky: b runs where a ran: {p:?}");
    rt_cpu.shutdown(Duration::from_secs(5)).await;
    rt_gpu.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_filters_and_scopes() {
    let t = Target::new("filters").await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s = seen.clone();
    let wf = Workflow::new("filtered").on_events(["order:created"]).task(
        "t",
        move |i: Value, c: Context| {
            s.lock()
                .push(json!({"amount": i["amount"], "payload": c.filter_payload()}));
            async { Ok::<_, TaskError>(json!({})) }
        },
    );
    let rt = t.worker(8, vec![wf]).await;
    let api = rt.api();
    let wid = api.workflow_id("filtered").await.expect("workflow id");
    let f = api
        .create_filter(
            &wid,
            "tenant-a",
            "input.amount > 100",
            json!({"tier": "big"}),
        )
        .await
        .expect("create filter");
    let listed = api
        .list_filters(&[&wid], &["tenant-a"])
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    let push = |amount: i64, scope: &str| {
        let rt = rt.clone();
        let scope = scope.to_string();
        async move {
            rt.push_with(
                "order:created",
                &json!({"amount": amount}),
                PushOptions::new().scope(scope),
            )
            .await
            .expect("push")
        }
    };
    push(5, "tenant-a").await; // the filter says no
    push(500, "tenant-b").await; // no filter for this scope
    push(500, "tenant-a").await; // runs, with the filter's payload
    until("one filtered run", || !seen.lock().is_empty()).await;
    if let Some(engine) = t.ours_only("the engine's count of runs made by the pushes") {
        // Ours makes an event's runs before it answers the push: one run, for the third.
        let runs = engine.stats().runs;
        assert_eq!(runs, 1, "the two filtered pushes made no run");
    } else {
        // The real engine handles events asynchronously and counts nothing a test can read:
        // the pushes went out in order, so give the two before a moment to show a run.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let s = seen.lock().clone();
    assert_eq!(s, [json!({"amount": 500, "payload": {"tier": "big"}})]);
    api.delete_filter(&f.metadata.id).await.expect("delete");
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- rate limits; concurrency ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_concurrency_bound_running_tasks() {
    let t = Target::new("limits").await;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let body = |running: Arc<AtomicUsize>, peak: Arc<AtomicUsize>| {
        move |_: Value, _c: Context| {
            let (running, peak) = (running.clone(), peak.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, TaskError>(json!({}))
            }
        }
    };
    let rt = t.runtime().await;
    // A static rate limit must exist before the workflow that names it is registered.
    rt.put_rate_limit(
        "conf-limit",
        2,
        hatchet_runtime::task::RateLimitWindow::Minute,
    )
    .await
    .expect("put rate limit");
    let limited = Workflow::new("limited").task_with(
        "t",
        TaskOptions::new().rate_limit("conf-limit", 1),
        body(Arc::default(), Arc::default()),
    );
    let grouped = Workflow::new("grouped")
        .concurrency(
            "input.group",
            1,
            hatchet_runtime::task::ConcurrencyStrategy::GroupRoundRobin,
        )
        .task("t", body(running.clone(), peak.clone()));
    // The same limit on the task alone.
    let (task_running, task_peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let task_grouped = Workflow::new("task-grouped").task_with(
        "t",
        TaskOptions::new().concurrency(
            "input.group",
            1,
            hatchet_runtime::task::ConcurrencyStrategy::GroupRoundRobin,
        ),
        body(task_running.clone(), task_peak.clone()),
    );
    rt.register(limited).await.expect("register");
    rt.register(grouped).await.expect("register");
    rt.register(task_grouped).await.expect("register");
    crate::support::start_worker(&rt, 8).await;
    // Concurrency 1 per group: never two of one group at once.
    let all_of_one_group = |workflow: &'static str, n: usize| {
        let rt = rt.clone();
        async move {
            let inputs: Vec<Value> = (0..n).map(|_| json!({"group": "g"})).collect();
            let outs: Vec<Result<Value, Error>> =
                tokio::time::timeout(RESULT, rt.run_many_results(workflow, &inputs))
                    .await
                    .expect("every result in time");
            assert!(outs.iter().all(Result::is_ok), "{workflow}: {outs:?}");
        }
    };
    all_of_one_group("grouped", 6).await;
    assert_eq!(peak.load(Ordering::SeqCst), 1, "one at a time per group");
    all_of_one_group("task-grouped", 4).await;
    assert_eq!(
        task_peak.load(Ordering::SeqCst),
        1,
        "a task-level limit: one at a time per group"
    );
    // Rate limit 2 per minute: of three runs, two complete and the third waits.
    let hs = rt
        .run_many("limited", &(0..3).map(|_| json!({})).collect::<Vec<_>>())
        .await;
    let hs: Vec<_> = hs.into_iter().map(|h| h.expect("trigger")).collect();
    let done = Arc::new(AtomicUsize::new(0));
    let mut waits = Vec::new();
    for h in hs {
        let d = done.clone();
        waits.push(tokio::spawn(async move {
            if h.result_within::<Value>(Duration::from_secs(120))
                .await
                .is_ok()
            {
                d.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    until("two within the limit", || done.load(Ordering::SeqCst) >= 2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        done.load(Ordering::SeqCst),
        2,
        "the third waits for the window"
    );
    for w in waits {
        w.abort();
    }
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- crons and schedules; task logs ---------------------------------------------------------

/// `ReleaseSlot` is accepted and the task runs on to its result, but the worker's slot stays
/// counted until the attempt ends, on both engines: the real engine v0.104.9's release
/// statement clears the task's worker and deletes none of its slot rows (its DELETE reads a
/// `FOR UPDATE` CTE whose rows the same statement's UPDATE has already changed). Our engine
/// does the same unless a test turns on `DevEngine::release_slot_frees`. So on a one-slot
/// worker, a run triggered after the release starts only once the releasing task has ended.
/// The releasing task waits 3 s for it: the real engine gives a freed slot out within 1.5 s
/// (its slot refresh), and it has no counter to poll for "not assigned".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_slot_stays_counted_until_the_attempt_ends() {
    let t = Target::new("release").await;
    let (released, quick_started) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let holder = Workflow::new("holder").task("t", {
        let (released, quick_started) = (released.clone(), quick_started.clone());
        move |_: Value, c: Context| {
            let (released, quick_started) = (released.clone(), quick_started.clone());
            async move {
                c.release_slot().await?;
                released.fetch_add(1, Ordering::SeqCst);
                let mut saw = false;
                for _ in 0..60 {
                    saw = quick_started.load(Ordering::SeqCst) > 0;
                    if saw {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok::<_, TaskError>(json!({ "saw_quick": saw }))
            }
        }
    });
    let quick = Workflow::new("quick").task("t", {
        let quick_started = quick_started.clone();
        move |_: Value, _c: Context| {
            quick_started.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, TaskError>(json!({})) }
        }
    });
    let rt = t.worker(1, vec![holder, quick]).await;
    let h = rt.run_no_wait("holder", &json!({})).await.expect("trigger");
    until("the holder to release its slot", || {
        released.load(Ordering::SeqCst) == 1
    })
    .await;
    let q = rt.run_no_wait("quick", &json!({})).await.expect("trigger");
    let out: Value = h.result_within(RESULT).await.expect("the holder's result");
    assert_eq!(
        out["saw_quick"], false,
        "the released slot was given to the other run while the holder ran"
    );
    let _: Value = q.result_within(RESULT).await.expect("quick runs after it");
    assert_eq!(quick_started.load(Ordering::SeqCst), 1, "quick ran once");
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A cancel does not reach a task that released its slot, on both engines: the real engine's
/// release statement also clears the task's worker (`v1_task_runtime.worker_id = NULL`), and a
/// cancellation goes to the worker that column names, so it goes nowhere. A twin that keeps its
/// slot, cancelled by the same call, sees its cancellation (the control: cancels do arrive);
/// the releaser waits for that and 2 s more before it answers that it saw none. A waiter of
/// each run reads the cancel at once; the releaser's completion, when it comes, is recorded
/// (the real engine's details then read COMPLETED with its output, seen on v0.104.9), so a
/// later wait reads that output (control.rs invariant 3) and the keeper's run stays CANCELLED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_does_not_reach_a_task_that_released_its_slot() {
    let t = Target::new("unlinked").await;
    let (running, finished) = (counter(), counter());
    let (keeper_saw, releaser_saw) = (counter(), counter());
    let twin = |name: &str, release: bool| {
        let (running, finished) = (running.clone(), finished.clone());
        let (keeper_saw, releaser_saw) = (keeper_saw.clone(), releaser_saw.clone());
        Workflow::new(name).task("t", move |_: Value, c: Context| {
            let (running, finished) = (running.clone(), finished.clone());
            let (keeper_saw, releaser_saw) = (keeper_saw.clone(), releaser_saw.clone());
            async move {
                if release {
                    c.release_slot().await?;
                }
                running.fetch_add(1, Ordering::SeqCst);
                let bound = {
                    let keeper_saw = keeper_saw.clone();
                    async move {
                        if !release {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return;
                        }
                        while keeper_saw.load(Ordering::SeqCst) == 0 {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                };
                let saw = tokio::select! {
                    _ = c.cancellation().cancelled() => true,
                    _ = bound => false,
                };
                if saw {
                    let who = if release { &releaser_saw } else { &keeper_saw };
                    who.fetch_add(1, Ordering::SeqCst);
                }
                finished.fetch_add(1, Ordering::SeqCst);
                Ok::<_, TaskError>(json!({ "saw_cancel": saw }))
            }
        })
    };
    let rt = t
        .worker(2, vec![twin("releaser", true), twin("keeper", false)])
        .await;
    let r = rt
        .run_no_wait("releaser", &json!({}))
        .await
        .expect("trigger");
    let k = rt.run_no_wait("keeper", &json!({})).await.expect("trigger");
    until("both tasks running", || running.load(Ordering::SeqCst) == 2).await;
    rt.cancel_runs(&[r.run_id().to_string(), k.run_id().to_string()])
        .await
        .expect("cancel");
    let early = {
        let r = r.clone();
        tokio::spawn(async move { r.result_within::<Value>(RESULT).await })
    };
    until("the keeper to see its cancellation", || {
        keeper_saw.load(Ordering::SeqCst) == 1
    })
    .await;
    until("both handlers to end", || {
        finished.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(
        releaser_saw.load(Ordering::SeqCst),
        0,
        "a cancel reached the task that released its slot"
    );
    let err = early
        .await
        .expect("the early waiter")
        .expect_err("the cancel, read at once");
    assert_eq!(err.outcome(), Outcome::RunCancelled, "{err}");
    let err = k
        .result_within::<Value>(RESULT)
        .await
        .expect_err("the keeper was cancelled");
    assert_eq!(err.outcome(), Outcome::RunCancelled, "{err}");
    // The real engine's reads trail its writes: read until the completion shows.
    let api = rt.api();
    let view = until_read(
        "the releaser's run to read COMPLETED",
        || api.run(r.run_id()),
        |v| v.as_ref().is_ok_and(|v| v.status == RunStatus::Completed),
    )
    .await
    .expect("the releaser's run");
    assert_eq!(
        view.tasks.get("t").and_then(|t| t.output.clone()),
        Some(json!({ "saw_cancel": false })),
        "the late completion's output"
    );
    let out: Value = r
        .result_within(RESULT)
        .await
        .expect("a later wait reads the completion");
    assert_eq!(out, json!({ "saw_cancel": false }));
    assert_eq!(
        rt.api().run(k.run_id()).await.expect("keeper").status,
        RunStatus::Cancelled
    );
    rt.shutdown(Duration::from_secs(5)).await;
}
