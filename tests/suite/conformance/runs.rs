//! Runs and tasks: what a task reads of its attempt, DAGs, standalone tasks, registration and
//! versions, retries and timeouts, batch tasks, on_failure and on_success. On both engines.

use super::*;

/// What a task reads about its attempt (the official SDKs' context accessors), from the
/// assignment the engine sends and the worker's own declarations: names, attempt numbers,
/// priority, lineage of a child, the event that triggered a run, the worker's labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_reads_its_attempt_lineage_trigger_and_worker() {
    fn about(c: &Context) -> Value {
        json!({
            "task": c.task_name(), "workflow": c.workflow_name(),
            "attempt": c.attempt_number(), "max": c.max_attempts(), "priority": c.priority(),
            "parent": c.parent_task_run_id(), "index": c.child_index(), "key": c.child_key(),
            "event_key": c.triggering_event_key(), "event_id": c.triggering_event_id(),
            "workflow_id": c.workflow_id().is_some(), "version_id": c.workflow_version_id().is_some(),
            "zone_a": c.worker_labels().get("zone") == Some(&hatchet_runtime::task::LabelValue::from("a")),
            "team": c.metadata().get("team"),
        })
    }
    let t = Target::new("about").await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s = seen.clone();
    let child = Workflow::new("about-child").task("c", move |_i: Value, c: Context| {
        s.lock().push(about(&c));
        async move { Ok::<_, TaskError>(json!({"child_of": c.parent_task_run_id()})) }
    });
    let parent = Workflow::new("about-parent").task_with(
        "p",
        TaskOptions::new().retries(2),
        |_i: Value, c: Context| async move {
            if c.attempt_number() == 1 {
                return Err(TaskError::new("the first attempt fails"));
            }
            let h = c
                .spawn_child_with_options(
                    "about-child",
                    &json!({}),
                    // Every child option: its key, metadata, priority (the parent's is 3) and a
                    // label this worker has.
                    ChildOptions::new()
                        .key("k1")
                        .metadata(
                            json!({"team": "billing"})
                                .as_object()
                                .cloned()
                                .unwrap_or_default(),
                        )
                        .priority(1)
                        .desired_label("zone", DesiredLabel::equals("a").required()),
                )
                .await?;
            let out: Value = h.result().await?;
            let missing = c
                .state::<String>()
                .expect_err("no String state was set")
                .to_string();
            Ok::<_, TaskError>(json!({
                "me": about(&c), "task_run": c.task_run_id(), "child": out,
                "tariff": c.state::<Tariff>()?.0, "missing": missing,
            }))
        },
    );
    let s = seen.clone();
    let on_event = Workflow::new("about-event")
        .on_events(["about:happened"])
        .task("e", move |_i: Value, c: Context| {
            s.lock().push(about(&c));
            async move { Ok::<_, TaskError>(Value::Null) }
        });
    let (rt, _) = t
        .worker_with(
            WorkerOptions::new("about", 8).label("zone", "a"),
            vec![child, parent, on_event],
        )
        .await;
    // Shared state, read by type (after the worker started: tasks ask when they run).
    #[derive(Debug)]
    struct Tariff(u32);
    rt.set_state(Tariff(42));
    let h = rt
        .run_no_wait_with(
            "about-parent",
            &json!({}),
            TriggerOptions::new().priority(3),
        )
        .await
        .expect("trigger");
    let out: Value = h.result_within(RESULT).await.expect("result");
    let me = &out["me"];
    assert_eq!(
        (
            &me["task"],
            &me["workflow"],
            &me["attempt"],
            &me["max"],
            &me["priority"]
        ),
        (
            &json!("p"),
            &json!("about-parent"),
            &json!(2),
            &json!(3),
            &json!(3)
        ),
        "{me}"
    );
    assert_eq!(
        (&me["workflow_id"], &me["version_id"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(me["zone_a"], json!(true), "the worker's label: {me}");
    assert_eq!(me["parent"], Value::Null);
    assert_eq!(out["tariff"], 42, "the shared state: {out}");
    assert!(
        out["missing"]
            .as_str()
            .is_some_and(|m| m.contains("alloc::string::String") && m.contains("set_state")),
        "{out}"
    );
    let child_seen = seen.lock()[0].clone();
    assert_eq!(
        (
            &child_seen["task"],
            &child_seen["workflow"],
            &child_seen["index"],
            &child_seen["key"]
        ),
        (&json!("c"), &json!("about-child"), &json!(0), &json!("k1")),
        "{child_seen}"
    );
    assert_eq!(
        (&child_seen["priority"], &child_seen["team"]),
        (&json!(1), &json!("billing")),
        "the child's own priority and metadata: {child_seen}"
    );
    assert_eq!(
        child_seen["parent"], out["task_run"],
        "the parent task run spawned it"
    );
    let event_id = rt
        .push("about:happened", &json!({"x": 1}))
        .await
        .expect("push");
    until("the event-triggered run", || seen.lock().len() == 2).await;
    let ev = seen.lock()[1].clone();
    assert_eq!(
        (&ev["workflow"], &ev["event_key"], &ev["event_id"]),
        (
            &json!("about-event"),
            &json!("about:happened"),
            &json!(event_id)
        ),
        "{ev}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// `on_success` runs once every other task completed, after the leaves, with their outputs;
/// a run whose task fails skips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_success_runs_after_every_task_and_is_skipped_when_one_fails() {
    let t = Target::new("onsuccess").await;
    let runs = counter();
    let r = runs.clone();
    let wf = Workflow::new("onsuccess")
        .task("a", |i: Num, _c: Context| async move {
            if i.n < 0 {
                return Err(TaskError::non_retryable("a negative input fails"));
            }
            Ok::<_, TaskError>(Num { n: i.n + 1 })
        })
        .task_with(
            "b",
            TaskOptions::new().parents(["a"]),
            |_i: Value, c: Context| async move {
                let a: Num = c.parent_output("a")?;
                Ok::<_, TaskError>(Num { n: a.n * 10 })
            },
        )
        .task("c", |_i: Value, _c: Context| async move {
            Ok::<_, TaskError>(Num { n: 5 })
        })
        .on_success("done", TaskOptions::new(), move |_i: Value, c: Context| {
            r.fetch_add(1, Ordering::SeqCst);
            async move {
                let b: Num = c.parent_output("b")?;
                let cc: Num = c.parent_output("c")?;
                Ok::<_, TaskError>(Num { n: b.n + cc.n })
            }
        });
    let rt = t.worker(8, vec![wf]).await;
    let out: Value = rt
        .run_no_wait("onsuccess", &Num { n: 1 })
        .await
        .expect("trigger")
        .result_within(RESULT)
        .await
        .expect("result");
    assert_eq!(out["done"]["n"], 25, "b (20) + c (5): {out}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let failed = rt
        .run_no_wait("onsuccess", &Num { n: -1 })
        .await
        .expect("trigger");
    let err = failed
        .result_within::<Value>(RESULT)
        .await
        .expect_err("a fails");
    assert_eq!(err.outcome(), Outcome::RunFailed, "{err}");
    // The failed run is final: on_success never ran for it.
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A standalone task: declared and registered without a one-task `Workflow`, run through the
/// typed reference its registration returns (input and output types from its handler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_task_runs_typed() {
    let t = Target::new("standalone").await;
    let rt = t.runtime().await;
    let double = rt
        .register_task(hatchet_runtime::Task::with_options(
            "double",
            TaskOptions::new().retries(1),
            |i: Num, _c: Context| async move { Ok::<_, TaskError>(Num { n: i.n * 2 }) },
        ))
        .await
        .expect("register");
    rt.start_worker(WorkerOptions::new("standalone", 4))
        .await
        .expect("start");
    assert_eq!(
        double.run(&Num { n: 21 }).await.expect("run"),
        Num { n: 42 }
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A workflow's description reaches the engine's API. Its version label is sent (as the SDKs
/// send it) but the real engine keeps none: its versions read `""`, and so do ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_s_description_and_version_reach_the_api() {
    let t = Target::new("described").await;
    let rt = t.runtime().await;
    rt.register(
        Workflow::new("described")
            .description("prices an order")
            .version("1.4.0")
            .task("t", |_i: Value, _c: Context| async move {
                Ok::<_, TaskError>(Value::Null)
            }),
    )
    .await
    .expect("register");
    let id = rt.api().workflow_id("described").await.expect("id");
    let wf = t.rest_get(&format!("/api/v1/workflows/{id}")).await;
    assert_eq!(wf["description"], "prices an order", "{wf}");
    let versions: Vec<&Value> = wf["versions"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    assert!(
        !versions.is_empty() && versions.iter().all(|v| v["version"] == ""),
        "versions read an empty label: {wf}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// The id of workflow `id`'s latest version, as REST reads it.
async fn latest_version(t: &Target, id: &str) -> Value {
    let wf = t.rest_get(&format!("/api/v1/workflows/{id}")).await;
    wf["versions"][0]["metadata"]["id"].clone()
}

/// Registering the same definition again (a worker that starts again) keeps the workflow's
/// version, as the real engine reuses a version whose checksum matches; a changed definition
/// is a new version, and a run shows the definition of its own version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_the_same_workflow_again_keeps_its_version() {
    let t = Target::new("reregistered").await;
    let workflow = |retries: i32| {
        Workflow::new("reregistered").task_with(
            "t",
            TaskOptions::new().retries(retries),
            |_i: Value, _c: Context| async move { Ok::<_, TaskError>(Value::Null) },
        )
    };
    let rt = t.runtime().await;
    rt.register(workflow(0)).await.expect("register");
    let id = rt.api().workflow_id("reregistered").await.expect("id");
    let first = latest_version(&t, &id).await;
    assert!(first.is_string(), "a version id: {first}");
    rt.shutdown(Duration::from_secs(5)).await;
    let again = t.runtime().await;
    again.register(workflow(0)).await.expect("register again");
    assert_eq!(latest_version(&t, &id).await, first, "the same version");
    again.shutdown(Duration::from_secs(5)).await;
    // A change comes from another runtime (one runtime refuses a name it already holds).
    let changed = t.runtime().await;
    changed
        .register(workflow(2))
        .await
        .expect("register a change");
    let second = latest_version(&t, &id).await;
    assert_ne!(second, first, "a changed definition is a new version");
    changed.shutdown(Duration::from_secs(5)).await;
}

// --- run, DAG, retries, non-retryable errors, timeouts --------------------------------------

/// A worker registers the slot pools its tasks use, as the official SDKs do: `default` only for
/// plain tasks, `durable` too once a task is durable. On the real engine idle durable slots
/// beside plain ones delayed every refill of the plain slots to the scheduler's 1-1.5 s poll
/// (2,000 echo tasks took 3x the Go SDK's time), so the shape is checked on both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_registers_a_durable_pool_only_for_durable_tasks() {
    let t = Target::new("pools").await;
    let plain = Workflow::new("plain").task("t", |_i: Value, _c: Context| async move {
        Ok::<_, TaskError>(Value::Null)
    });
    let (rt, id) = t
        .worker_with(WorkerOptions::new("pools-plain", 6), vec![plain])
        .await;
    let durable = |name: &str| {
        Workflow::new(name).durable_task(
            "d",
            TaskOptions::new(),
            |_i: Value, _c: Context| async move { Ok::<_, TaskError>(json!({ "ran": true })) },
        )
    };
    let (rt2, id2) = t
        .worker_with(
            WorkerOptions::new("pools-durable", 6).durable_slots(3),
            vec![durable("only-durable")],
        )
        .await;
    let plain2 = Workflow::new("plain2").task("t", |_i: Value, _c: Context| async move {
        Ok::<_, TaskError>(Value::Null)
    });
    let (rt3, id3) = t
        .worker_with(
            WorkerOptions::new("pools-mixed", 6).durable_slots(3),
            vec![durable("mixed"), plain2],
        )
        .await;
    let api = rt.api();
    let workers = until_read(
        "the three workers listed",
        || api.workers(),
        |w| {
            w.as_ref().is_ok_and(|w| {
                [&id, &id2, &id3]
                    .iter()
                    .all(|id| w.iter().any(|x| &&x.metadata.id == id))
            })
        },
    )
    .await
    .expect("workers");
    let pools = |id: &str| {
        let w = workers
            .iter()
            .find(|w| w.metadata.id == id)
            .expect("listed");
        w.slot_config
            .iter()
            .map(|(k, v)| (k.clone(), v.limit))
            .collect::<Vec<_>>()
    };
    assert_eq!(pools(&id), vec![("default".to_string(), 6)]);
    // Durable tasks only: the registration names no default pool; the real engine gives every
    // worker one of 100 all the same (an insert trigger of its worker table), and ours does.
    assert_eq!(
        pools(&id2),
        vec![("default".to_string(), 100), ("durable".to_string(), 3)],
        "durable tasks only"
    );
    assert_eq!(
        pools(&id3),
        vec![("default".to_string(), 6), ("durable".to_string(), 3)]
    );
    // The durable-only worker runs its durable task.
    let out: Value = rt2
        .run_no_wait("only-durable", &json!({}))
        .await
        .expect("trigger")
        .result_within(RESULT)
        .await
        .expect("the durable-only worker runs it");
    assert_eq!(out, json!({ "ran": true }));
    rt.shutdown(Duration::from_secs(5)).await;
    rt2.shutdown(Duration::from_secs(5)).await;
    rt3.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_dag() {
    let t = Target::new("dag").await;
    let execs = counter();
    let x = execs.clone();
    let dag = Workflow::new("dag")
        .task("a", move |i: Num, _c: Context| {
            x.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, TaskError>(Num { n: i.n + 1 }) }
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
    let rt = t.worker(8, vec![dag]).await;
    let h = rt
        .run_no_wait("dag", &Num { n: 10 })
        .await
        .expect("trigger");
    let out: Value = h.result_within(RESULT).await.expect("result");
    assert_eq!(out["sum"]["n"], 23);
    assert_eq!(out["a"]["n"], 11);
    assert_eq!(out["b"]["n"], 12);
    assert_eq!(execs.load(Ordering::SeqCst), 1, "a ran once");
    // Many at once, each result to its own waiter.
    let hs = rt
        .run_many("dag", &(0..20).map(|n| Num { n }).collect::<Vec<_>>())
        .await;
    for (n, h) in hs.into_iter().enumerate() {
        let out: Value = h
            .expect("trigger")
            .result_within(RESULT)
            .await
            .expect("result");
        assert_eq!(out["sum"]["n"], 2 * n as i64 + 3);
    }
    assert_eq!(execs.load(Ordering::SeqCst), 21);
    // And waiting for all of them in one call: each result in its input's place.
    let outs: Vec<Result<Value, Error>> = rt
        .run_many_results("dag", &(0..5).map(|n| Num { n }).collect::<Vec<_>>())
        .await;
    assert_eq!(outs.len(), 5);
    for (n, out) in outs.into_iter().enumerate() {
        assert_eq!(out.expect("result")["sum"]["n"], 2 * n as i64 + 3);
    }
    assert_eq!(execs.load(Ordering::SeqCst), 26);
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_non_retryable_and_timeouts() {
    let t = Target::new("retries").await;
    let flaky_runs = counter();
    let fatal_runs = counter();
    let (f1, f2) = (flaky_runs.clone(), fatal_runs.clone());
    let flaky = Workflow::new("flaky").task_with(
        "t",
        TaskOptions::new().retries(2),
        move |_i: Value, c: Context| {
            f1.fetch_add(1, Ordering::SeqCst);
            async move {
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
        TaskOptions::new().retries(3),
        move |_i: Value, _c: Context| {
            f2.fetch_add(1, Ordering::SeqCst);
            async move { Err::<Value, _>(TaskError::non_retryable("bad input: no retry")) }
        },
    );
    let slow = Workflow::new("slow").task_with(
        "t",
        TaskOptions::new().timeout(Duration::from_secs(3)),
        |_i: Value, c: Context| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(120)) => {}
                _ = c.cancellation().cancelled() => {}
            }
            Ok::<_, TaskError>(json!({"late": true}))
        },
    );
    let rt = t.worker(8, vec![flaky, fatal, slow]).await;
    let out: Value = rt
        .run_no_wait("flaky", &json!({}))
        .await
        .expect("trigger")
        .result_within(RESULT)
        .await
        .expect("third attempt succeeds");
    assert_eq!(out["attempt"], 2);
    assert_eq!(flaky_runs.load(Ordering::SeqCst), 3);

    let err = rt
        .run_no_wait("fatal", &json!({}))
        .await
        .expect("trigger")
        .result_within::<Value>(RESULT)
        .await
        .expect_err("fails");
    assert_eq!(err.outcome(), Outcome::RunFailed, "{err}");
    assert!(
        err.run_failures()
            .iter()
            .any(|f| f.error.contains("bad input")),
        "the task's error is reported: {err}"
    );
    assert_eq!(fatal_runs.load(Ordering::SeqCst), 1, "non-retryable: once");

    let err = rt
        .run_no_wait("slow", &json!({}))
        .await
        .expect("trigger")
        .result_within::<Value>(RESULT)
        .await
        .expect_err("times out");
    assert_eq!(err.outcome(), Outcome::RunFailed, "{err}");
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- on_failure; cancel and replay by id and by filter; bulk; priority ----------------------

/// A batch flushes by its members' payload size: the real engine flushes when the buffered payloads
/// pass 4,000,000 bytes, the member that passed them starting the next batch. 100 runs of about
/// 100 kB each: two batches of 39 by size, then 22 by interval, on both engines; every run
/// answered with its own output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_flushes_when_its_members_payloads_pass_four_million_bytes() {
    let t = Target::new("batchbytes").await;
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let seen = sizes.clone();
    let wf = Workflow::new("fat").batch_task(
        "t",
        Batching::up_to(1_000).interval(Duration::from_secs(15)),
        TaskOptions::new(),
        move |b: Batch<Value>, _c: Context| {
            seen.lock().push(b.len());
            let outs: Vec<Value> = b.inputs().map(|i| json!({ "n": i["n"] })).collect();
            async move { Ok::<_, TaskError>(outs) }
        },
    );
    let rt = t.worker(4, vec![wf]).await;
    let pad = "x".repeat(99_990);
    let items: Vec<Value> = (0..100).map(|n| json!({ "n": n, "pad": pad })).collect();
    let handles = rt.run_many("fat", &items).await;
    for (n, h) in handles.into_iter().enumerate() {
        let out: Value = h
            .expect("trigger")
            .result_within(RESULT)
            .await
            .expect("each member's output");
        assert_eq!(out, json!({ "n": n }));
    }
    assert_eq!(
        *sizes.lock(),
        [39, 39, 22],
        "two by size, then one by interval"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A batch task gets its runs in batches and answers each member: three runs of key `a` come
/// in one call (the batch's size starts it), one of key `b` in another (its interval does), each
/// run reads its own output, and a run whose key is not a string fails alone with the engine's
/// reason. Counted where it happens: handler calls in the handler, members per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_task_gets_its_runs_in_batches_and_answers_each_member() {
    let t = Target::new("batch").await;
    let calls: Arc<Mutex<Vec<Vec<i64>>>> = Arc::default();
    let seen = calls.clone();
    let wf = Workflow::new("batcher").batch_task(
        "sum",
        Batching::up_to(3)
            .interval(Duration::from_secs(2))
            .key("input.group"),
        TaskOptions::new(),
        move |b: Batch<Value>, _c: Context| {
            let ids: Vec<i64> = b.inputs().filter_map(|i| i["id"].as_i64()).collect();
            seen.lock().push(ids);
            let n = b.len();
            let outs: Vec<Value> = b
                .members()
                .iter()
                .map(|m| json!({"id": m.input()["id"], "size": n, "run": m.run_id()}))
                .collect();
            async move { Ok::<_, TaskError>(outs) }
        },
    );
    let rt = t.worker(4, vec![wf]).await;
    let mut runs = Vec::new();
    for (id, group) in [(0, "a"), (1, "a"), (2, "a"), (3, "b")] {
        let h = rt
            .run_no_wait("batcher", &json!({"id": id, "group": group}))
            .await
            .expect("trigger");
        runs.push(h);
    }
    let bad = rt
        .run_no_wait("batcher", &json!({"id": 9, "group": 7}))
        .await
        .expect("trigger");
    for (i, h) in runs.iter().enumerate() {
        let out: Value = h.result_within(RESULT).await.expect("result");
        assert_eq!(
            out["id"],
            json!(i),
            "each member reads its own output: {out}"
        );
        assert_eq!(out["run"], json!(h.run_id()), "and knows its run");
        let size = if i < 3 { 3 } else { 1 };
        assert_eq!(
            out["size"],
            json!(size),
            "run {i} came in a batch of {size}"
        );
    }
    let err = bad
        .result_within::<Value>(RESULT)
        .await
        .expect_err("a key that is not a string fails the run");
    assert!(
        err.run_failures().iter().any(|f| f
            .error
            .contains("failed to parse batch group key expression")),
        "{err}"
    );
    let mut calls = calls.lock().clone();
    calls.iter_mut().for_each(|c| c.sort());
    calls.sort();
    assert_eq!(
        calls,
        [vec![0, 1, 2], vec![3]],
        "two handler calls, one per batch"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_runs_once_with_the_error() {
    let t = Target::new("onfail").await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    let wf = Workflow::new("onfail")
        .task("boom", |_i: Value, _c: Context| async move {
            Err::<Value, _>(TaskError::non_retryable("exploded"))
        })
        .on_failure(
            "cleanup",
            TaskOptions::new(),
            move |_i: Value, c: Context| {
                let errs: Vec<String> = c.task_run_errors().values().cloned().collect();
                s.lock().push(errs.join("|"));
                async move { Ok::<_, TaskError>(json!({"cleaned": true})) }
            },
        );
    let rt = t.worker(4, vec![wf]).await;
    let h = rt.run_no_wait("onfail", &json!({})).await.expect("trigger");
    let err = h
        .result_within::<Value>(RESULT)
        .await
        .expect_err("the run fails");
    assert_eq!(err.outcome(), Outcome::RunFailed, "{err}");
    until("on_failure ran", || !seen.lock().is_empty()).await;
    let view = until_read(
        "the run reads failed with the hook completed",
        || async { rt.run_details(h.run_id()).await.expect("details") },
        |v| v.status.is_final() && v.tasks.values().all(|t| t.status.is_final()),
    )
    .await;
    assert_eq!(view.status, RunStatus::Failed);
    let s = seen.lock().clone();
    assert_eq!(s.len(), 1, "on_failure ran exactly once: {s:?}");
    assert!(s[0].contains("exploded"), "it read the error: {s:?}");
    rt.shutdown(Duration::from_secs(5)).await;
}
