//! Triggers and run control: cancel and replay, bulk triggers and pushes, idempotency keys,
//! concurrency groups, priority, children by index and key. On both engines.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_replay_by_id_and_by_filter() {
    let t = Target::new("cancel").await;
    let started = counter();
    let st = started.clone();
    let wf = Workflow::new("parked").task("t", move |i: Value, c: Context| {
        st.fetch_add(1, Ordering::SeqCst);
        async move {
            if i["park"] == true && c.retry_count() == 0 && c.metadata().get("replayed").is_none() {
                // Parks until cancelled.
                c.cancellation().cancelled().await;
                return Err(TaskError::new("cancelled"));
            }
            Ok::<_, TaskError>(json!({"done": i["id"]}))
        }
    });
    let rt = t.worker(8, vec![wf]).await;
    // Filters name this test's workflow: the real engine's tenant is shared by every test.
    let wid = rt.api().workflow_id("parked").await.expect("workflow id");
    // By id.
    let h = rt
        .run_no_wait("parked", &json!({"park": true, "id": 0}))
        .await
        .expect("trigger");
    until("started", || started.load(Ordering::SeqCst) >= 1).await;
    rt.cancel_runs(&[h.run_id().to_string()])
        .await
        .expect("cancel");
    let err = h
        .result_within::<Value>(RESULT)
        .await
        .expect_err("cancelled");
    assert_eq!(err.outcome(), Outcome::RunCancelled, "{err}");
    // By filter: three runs with metadata batch=a, one with batch=b.
    let since = SystemTime::now() - Duration::from_secs(5);
    let mut batch_a = BTreeSet::new();
    for id in 1..=4 {
        let mut md = serde_json::Map::new();
        md.insert("batch".into(), json!(if id == 4 { "b" } else { "a" }));
        let h = rt
            .run_no_wait_with(
                "parked",
                &json!({"park": true, "id": id}),
                TriggerOptions::new().metadata(md),
            )
            .await
            .expect("trigger");
        if id != 4 {
            batch_a.insert(h.run_id().to_string());
        }
    }
    until("five started", || started.load(Ordering::SeqCst) >= 5).await;
    let filter = RunFilter::since(since)
        .workflow_id(wid.clone())
        .metadata("batch", "a");
    // The engine may answer before its list shows every run: cancel until all three are.
    let mut cancelled = BTreeSet::new();
    for _ in 0..100 {
        cancelled.extend(rt.cancel_where(&filter).await.expect("cancel by filter"));
        if batch_a.is_subset(&cancelled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        batch_a.is_subset(&cancelled),
        "{batch_a:?} within {cancelled:?}"
    );
    for id in &batch_a {
        let err = rt
            .run_handle(id.clone())
            .result_within::<Value>(RESULT)
            .await
            .expect_err("cancelled");
        assert_eq!(err.outcome(), Outcome::RunCancelled, "{err}");
    }
    // Replay by id: the run starts again with its input; this attempt does not park (retry
    // count or replay shows in the task).
    let before = started.load(Ordering::SeqCst);
    let first = batch_a.iter().next().cloned().expect("one");
    rt.replay_runs(std::slice::from_ref(&first))
        .await
        .expect("replay");
    // A replay returns once the engine's core shows it taken (control invariant 4): a read
    // right after it never sees the old end (the real engine only queues the replay).
    let view = rt.run_details(&first).await.expect("details");
    assert_ne!(
        view.status,
        RunStatus::Cancelled,
        "read right after the replay returned"
    );
    until("the replayed run started", || {
        started.load(Ordering::SeqCst) > before
    })
    .await;
    rt.cancel_where(&RunFilter::since(since).workflow_id(wid))
        .await
        .expect("cancel the rest");
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_trigger_and_push() {
    let t = Target::new("bulk").await;
    let execs = counter();
    let x = execs.clone();
    let wf = Workflow::new("bulk").on_events(["order:created"]).task(
        "t",
        move |i: Value, c: Context| {
            x.fetch_add(1, Ordering::SeqCst);
            let tag = c.metadata().get("tag").cloned().unwrap_or(Value::Null);
            async move { Ok::<_, TaskError>(json!({"id": i["id"], "tag": tag})) }
        },
    );
    let rt = t.worker(16, vec![wf]).await;
    let items: Vec<BulkRun<Value>> = (0..30).map(|id| BulkRun::new(json!({"id": id}))).collect();
    let hs = rt.run_many_with("bulk", &items).await;
    assert_eq!(hs.len(), 30);
    let mut ids = BTreeSet::new();
    for (n, h) in hs.into_iter().enumerate() {
        let h = h.expect("trigger");
        ids.insert(h.run_id().to_string());
        let out: Value = h.result_within(RESULT).await.expect("result");
        assert_eq!(out["id"], n as i64, "each item its own result");
    }
    assert_eq!(ids.len(), 30, "30 distinct runs");
    let events: Vec<BulkEvent<Value>> = (0..5)
        .map(|i| {
            BulkEvent::new("order:created", json!({"id": 100 + i})).meta("tag", format!("e{i}"))
        })
        .collect();
    let pushed = rt.push_many(&events).await;
    assert_eq!(pushed.len(), 5);
    for p in pushed {
        p.expect("bulk push item");
    }
    until("five event runs", || execs.load(Ordering::SeqCst) == 35).await;
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A bulk trigger some of whose items collide on the workflow's idempotency key: the engine
/// creates the others, and each item is answered with its own run or the one it collided with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_trigger_partly_colliding_answers_each_item_with_its_run() {
    let t = Target::new("bulkidem").await;
    let execs: Arc<Mutex<Vec<String>>> = Arc::default();
    let e = execs.clone();
    let wf = Workflow::new("orders")
        .task("o", move |i: Value, _c: Context| {
            let k = i["k"].as_str().unwrap_or("?");
            e.lock().push(k.split('-').next().unwrap_or(k).to_string());
            async move { Ok::<_, TaskError>(i) }
        })
        .idempotency("input.k", Duration::from_secs(600));
    let rt = t.worker(8, vec![wf]).await;
    // Keys of this run alone (the real engine keeps keys across test runs for their TTL).
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let k = |n: &str| json!({ "k": format!("{n}-{tag}") });
    let first = rt.run_no_wait("orders", &k("a")).await.expect("first");
    let items = [k("b"), k("a"), k("c")];
    let got = rt.run_many("orders", &items).await;
    let ids: Vec<String> = got
        .into_iter()
        .map(|h| h.expect("no item is refused").run_id().to_string())
        .collect();
    assert_eq!(
        ids[1],
        first.run_id(),
        "the colliding item gets the existing run"
    );
    assert!(
        ids[0] != ids[2] && !ids[0].is_empty() && ids[0] != first.run_id(),
        "{ids:?}"
    );
    for (id, item) in ids.iter().zip(&items) {
        let out: Value = rt
            .run_handle(id)
            .result_within(RESULT)
            .await
            .expect("each item's run finishes");
        assert_eq!(out, *item, "item {item} got a run with its own input");
    }
    let mut ran = execs.lock().clone();
    ran.sort();
    assert_eq!(ran, ["a", "b", "c"], "three runs, each once");
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Two bulk items with the same input, told apart by the metadata the key reads; the first collides
/// with an earlier run, the second is created. Matched by input alone, the created run went to the
/// first item. Both engines; the real one adds a `traceparent` to the metadata it reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_items_with_the_same_input_get_their_own_runs_by_metadata() {
    let t = Target::new("bulkmeta").await;
    let wf = Workflow::new("by-order")
        .task("o", |_: Value, c: Context| async move {
            Ok::<_, TaskError>(json!({ "order": c.metadata().get("order").cloned() }))
        })
        .idempotency("additional_metadata.order", Duration::from_secs(600));
    let rt = t.worker(4, vec![wf]).await;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let meta = |o: &str| {
        let mut m = serde_json::Map::new();
        m.insert("order".into(), json!(format!("{o}-{tag}")));
        m
    };
    let first = rt
        .run_no_wait_with(
            "by-order",
            &json!({"k": 1}),
            TriggerOptions::new().metadata(meta("a")),
        )
        .await
        .expect("first");
    let items = [
        BulkRun::new(json!({"k": 1})).metadata(meta("a")),
        BulkRun::new(json!({"k": 1})).metadata(meta("b")),
    ];
    let ids: Vec<String> = rt
        .run_many_with("by-order", &items)
        .await
        .into_iter()
        .map(|h| h.expect("no item is refused").run_id().to_string())
        .collect();
    assert_eq!(
        ids[0],
        first.run_id(),
        "the colliding item gets the existing run"
    );
    assert_ne!(ids[1], first.run_id());
    let out: Value = rt
        .run_handle(&ids[1])
        .result_within(RESULT)
        .await
        .expect("the created run");
    assert_eq!(
        out,
        json!({ "order": format!("b-{tag}") }),
        "item b got its own run"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Idempotency keys as both engines keep them: a key is any string the workflow's CEL
/// expression gives, and it is the tenant's (a trigger of another workflow with the same key
/// collides with the first workflow's run); an input the expression fails on is answered with
/// an id and creates no run (the wait on it ends as not found, and nothing executes); a key by
/// status is released when the run's first root task ends, while its DAG still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_are_the_tenant_s_and_a_status_key_ends_with_a_root_task() {
    let t = Target::new("idemkeys").await;
    let execs: Arc<Mutex<Vec<String>>> = Arc::default();
    let one = |name: &str| {
        let e = execs.clone();
        let n = name.to_string();
        Workflow::new(name)
            .task("t", move |i: Value, _c: Context| {
                e.lock()
                    .push(format!("{n}:{}", i["k"].as_str().unwrap_or("?")));
                async move { Ok::<_, TaskError>(i) }
            })
            .idempotency("'k-' + input.k", Duration::from_secs(600))
    };
    let (first_gate, second_gate) = (
        Arc::new(tokio::sync::Semaphore::new(0)),
        Arc::new(tokio::sync::Semaphore::new(0)),
    );
    let (g1, g2, e1) = (first_gate.clone(), second_gate.clone(), execs.clone());
    let dag = Workflow::new("kd")
        .task("first", move |i: Value, _c: Context| {
            let (g, e) = (g1.clone(), e1.clone());
            async move {
                e.lock().push(format!("kd:{}", i["n"]));
                let _ = g.acquire().await.map(|p| p.forget());
                Ok::<_, TaskError>(json!({}))
            }
        })
        .task_with(
            "second",
            TaskOptions::new().parents(["first"]),
            move |_: Value, _c: Context| {
                let g = g2.clone();
                async move {
                    let _ = g.acquire().await.map(|p| p.forget());
                    Ok::<_, TaskError>(json!({}))
                }
            },
        )
        .idempotency_until_done("input.k", Duration::from_secs(600));
    let rt = t.worker(8, vec![one("ka"), one("kb"), dag]).await;
    // Keys of this run alone (the real engine keeps keys across test runs for their TTL).
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let a = rt
        .run_no_wait("ka", &json!({ "k": tag }))
        .await
        .expect("ka");
    let same = TriggerOptions::new().idempotent();
    let b = rt
        .run_no_wait_with("kb", &json!({ "k": tag }), same.clone())
        .await
        .expect("an idempotent trigger resolves to the key's run");
    assert_eq!(
        b.run_id(),
        a.run_id(),
        "the key is the tenant's: kb meets ka's run"
    );
    let refused = rt
        .run_no_wait("kb", &json!({ "k": tag }))
        .await
        .expect_err("a plain trigger of another workflow with the same key collides");
    assert_eq!(
        refused.status().map(|s| s.code()),
        Some(hatchet_runtime::errors::GrpcCode::AlreadyExists),
        "{refused}"
    );
    // A composite expression: another value, another key.
    let other = format!("{tag}-2");
    let c = rt
        .run_no_wait("kb", &json!({ "k": other }))
        .await
        .expect("kb");
    assert_ne!(c.run_id(), a.run_id());
    for h in [&a, &c] {
        let _: Value = h.result_within(RESULT).await.expect("each run finishes");
    }
    // No key for this input (no `k`; a number): answered with an id, and no run.
    let mut ghosts = Vec::new();
    for input in [json!({ "x": 1 }), json!({ "k": 7 })] {
        ghosts.push(
            rt.run_no_wait("ka", &input)
                .await
                .expect("answered with an id"),
        );
    }
    // The runtime never concludes that an id the engine answered with is unknown (the engine
    // may create a run later): the wait runs to its deadline, and the engine has no run.
    for g in &ghosts {
        let err = g
            .result_within::<Value>(Duration::from_secs(3))
            .await
            .expect_err("no run has that id");
        assert_eq!(err.outcome(), Outcome::DeadlineExceeded, "{err}");
        let read = rt.run_details(g.run_id()).await.expect_err("no run");
        assert!(read.is_not_found(), "{read}");
    }
    let mut ran = execs.lock().clone();
    ran.sort();
    assert_eq!(
        ran,
        [format!("ka:{tag}"), format!("kb:{other}")],
        "one execution per run, none for the others"
    );
    // A status key: held while the first root task runs, released when it ends though its
    // DAG still runs.
    let d1 = rt
        .run_no_wait("kd", &json!({ "k": tag, "n": 1 }))
        .await
        .expect("kd");
    until("kd's first task to start", || execs.lock().len() == 3).await;
    let held = rt
        .run_no_wait("kd", &json!({ "k": tag, "n": 2 }))
        .await
        .expect_err("held while the root task runs");
    assert_eq!(
        held.status().map(|s| s.code()),
        Some(hatchet_runtime::errors::GrpcCode::AlreadyExists),
        "{held}"
    );
    first_gate.add_permits(1);
    let mut d2 = None;
    for _ in 0..120 {
        match rt.run_no_wait("kd", &json!({ "k": tag, "n": 2 })).await {
            Ok(h) => {
                d2 = Some(h);
                break;
            }
            Err(e)
                if e.status().map(|s| s.code())
                    == Some(hatchet_runtime::errors::GrpcCode::AlreadyExists) =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let d2 = d2.expect("released by the first root task's end");
    let d1_view = rt.run_details(d1.run_id()).await.expect("details");
    assert!(
        !d1_view.is_final(),
        "the first run still runs its second task: {:?}",
        d1_view.status
    );
    first_gate.add_permits(1);
    second_gate.add_permits(2);
    for h in [&d1, &d2] {
        let _: Value = h.result_within(RESULT).await.expect("both DAG runs finish");
    }
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A concurrency group is the string the limit's CEL expression gives (a composite one here:
/// `'user-' + input.user`), one run of a group at a time while another group runs beside it;
/// a run whose input the expression fails on fails at once with the real engine's reason, and
/// its task never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_group_is_its_expression_s_string_and_a_failing_one_fails_the_run() {
    let t = Target::new("cgroups").await;
    let spans: Arc<Mutex<Vec<(String, std::time::Instant, std::time::Instant)>>> = Arc::default();
    let s = spans.clone();
    let wf = Workflow::new("grouped")
        .task("t", move |i: Value, _c: Context| {
            let s = s.clone();
            async move {
                let start = std::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(400)).await;
                let user = i["user"].as_str().unwrap_or("?").to_string();
                s.lock().push((user, start, std::time::Instant::now()));
                Ok::<_, TaskError>(json!({}))
            }
        })
        .concurrency(
            "'user-' + input.user",
            1,
            hatchet_runtime::task::ConcurrencyStrategy::GroupRoundRobin,
        );
    let rt = t.worker(8, vec![wf]).await;
    let mut runs = Vec::new();
    for user in ["a", "a", "b"] {
        runs.push(
            rt.run_no_wait("grouped", &json!({ "user": user }))
                .await
                .expect("trigger"),
        );
    }
    for h in &runs {
        let _: Value = h.result_within(RESULT).await.expect("each run finishes");
    }
    let done = spans.lock().clone();
    assert_eq!(done.len(), 3, "each run once");
    let a: Vec<_> = done.iter().filter(|(u, ..)| u == "a").collect();
    let b = done.iter().find(|(u, ..)| u == "b").expect("b ran");
    let (first, second) = if a[0].1 <= a[1].1 {
        (a[0], a[1])
    } else {
        (a[1], a[0])
    };
    assert!(second.1 >= first.2, "two runs of group user-a overlapped");
    assert!(b.1 < second.2, "group user-b waited for group user-a");
    // No `user`: the expression fails on this input, so the run fails and nothing executes.
    let err = rt
        .run_no_wait("grouped", &json!({ "other": 1 }))
        .await
        .expect("trigger")
        .result_within::<Value>(RESULT)
        .await
        .expect_err("fails");
    assert_eq!(err.outcome(), Outcome::RunFailed, "{err}");
    assert!(
        err.to_string()
            .contains("failed to parse step expression ('user-' + input.user)"),
        "{err}"
    );
    assert_eq!(spans.lock().len(), 3, "the failed run's task never ran");
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_orders_queued_runs() {
    let t = Target::new("prio").await;
    let order: Arc<Mutex<Vec<i64>>> = Arc::default();
    let o = order.clone();
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let wf = Workflow::new("prio")
        .default_priority(2)
        .task("t", move |i: Value, _c: Context| {
            let (o, g) = (o.clone(), g.clone());
            async move {
                let n = i["n"].as_i64().unwrap_or(-1);
                if n == 0 {
                    g.notified().await; // holds the only slot while the rest queue
                }
                o.lock().push(n);
                Ok::<_, TaskError>(json!({}))
            }
        });
    let rt = t.runtime().await;
    rt.register(wf).await.expect("register");
    let first = rt
        .run_no_wait("prio", &json!({"n": 0}))
        .await
        .expect("trigger");
    rt.start_worker(WorkerOptions::new("one-slot", 1))
        .await
        .expect("start");
    // Wait until the blocker holds the slot, then queue low, default and high.
    until_read(
        "the blocker runs",
        || async { rt.run_details(first.run_id()).await.ok() },
        |v| v.as_ref().is_some_and(|v| v.status == RunStatus::Running),
    )
    .await;
    let mut hs = Vec::new();
    for (n, p) in [(1, Some(1)), (2, None), (3, Some(3))] {
        let opts = match p {
            Some(p) => TriggerOptions::new().priority(p),
            None => TriggerOptions::new(),
        };
        hs.push(
            rt.run_no_wait_with("prio", &json!({"n": n}), opts)
                .await
                .expect("trigger"),
        );
    }
    // All three are queued behind the blocker before it lets go.
    for h in &hs {
        until_read(
            "queued",
            || async { rt.run_details(h.run_id()).await.ok() },
            |v| v.as_ref().is_some_and(|v| v.status == RunStatus::Queued),
        )
        .await;
    }
    gate.notify_one();
    for h in &hs {
        let _: Value = h.result_within(RESULT).await.expect("result");
    }
    assert_eq!(*order.lock(), [0, 3, 2, 1], "high, default, low");
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- children with index and key dedupe -----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_by_index_and_key_are_not_duplicated() {
    let t = Target::new("children").await;
    let child_runs = counter();
    let parent_runs = counter();
    let (cr, pr) = (child_runs.clone(), parent_runs.clone());
    let child = Workflow::new("child").task("c", move |i: Num, _c: Context| {
        cr.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, TaskError>(Num { n: i.n * 10 }) }
    });
    let parent = Workflow::new("parent").task_with(
        "p",
        TaskOptions::new().retries(1),
        move |_i: Value, c: Context| {
            pr.fetch_add(1, Ordering::SeqCst);
            async move {
                let a = c.spawn_child("child", &Num { n: 1 }).await?;
                let b = c.spawn_child("child", &Num { n: 2 }).await?;
                // The same key twice: one child (spawned through the task's context).
                let key = || ChildOptions::new().key("the-key");
                let three = Num { n: 3 };
                let k1 = c.spawn_child_with_options("child", &three, key()).await?;
                let k2 = c.spawn_child_with_options("child", &three, key()).await?;
                let a: Num = a.result().await?;
                let b: Num = b.result().await?;
                let k: Num = k1.result().await?;
                if c.retry_count() == 0 {
                    // Fails once after spawning: the retry spawns again with the same indexes.
                    return Err(TaskError::new("retry me"));
                }
                Ok::<_, TaskError>(json!({
                    "a": a.n, "b": b.n, "k": k.n,
                    "same_key": k1.run_id() == k2.run_id(),
                }))
            }
        },
    );
    let rt = t.worker(8, vec![child, parent]).await;
    let out: Value = rt
        .run_no_wait("parent", &json!({}))
        .await
        .expect("trigger")
        .result_within(RESULT)
        .await
        .expect("result");
    assert_eq!(out["a"], 10);
    assert_eq!(out["b"], 20);
    assert_eq!(out["k"], 30);
    assert_eq!(out["same_key"], true, "a key names one child");
    assert_eq!(parent_runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        child_runs.load(Ordering::SeqCst),
        3,
        "two indexed children and one keyed child, across two parent attempts"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

// --- durable sleep, event, OR waits and memo ------------------------------------------------

/// A workflow the engine has is triggered even when 52 newer workflows have names that contain
/// its name: the engine's name filter is a substring search, newest first, 50 to a page, so the
/// lookup that guards a trigger reads past the first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_behind_a_page_of_newer_similar_names_is_still_triggered() {
    let t = Target::new("lookup_pages").await;
    let wf = |name: String| {
        Workflow::new(name).task("t", |_: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({}))
        })
    };
    let registrar = t.runtime().await;
    registrar.register(wf("lk".into())).await.expect("register");
    for i in 0..52 {
        registrar
            .register(wf(format!("lk-newer-{i}")))
            .await
            .expect("register a newer one");
    }
    // A process that did not register it triggers it by name.
    let client = t.runtime().await;
    let run = client
        .run_no_wait("lk", &json!({}))
        .await
        .expect("the engine has the workflow: the trigger goes through");
    assert!(!run.run_id().is_empty());
    let err = client
        .run_no_wait("lk-none", &json!({}))
        .await
        .expect_err("a name the engine does not have is still refused");
    assert!(err.to_string().contains("has no workflow named"), "{err}");
    client.shutdown(Duration::from_secs(2)).await;
    registrar.shutdown(Duration::from_secs(2)).await;
}
