//! What users of the official SDKs expect (2), through our public API against the development
//! engine: worker labels and affinity, sticky runs, DAG conditions, durable OR waits, event
//! filters and scopes. Where a task ran is recorded by the task itself (its worker id).

use std::sync::Arc;
use std::time::Duration;

use hatchet_dev_engine::DevEngine;
use hatchet_runtime::api::FilterUpdate;
use hatchet_runtime::durable::{Condition, any_of};
use hatchet_runtime::run::PushOptions;
use hatchet_runtime::task::{Comparator, DesiredLabel, StickyStrategy};
use hatchet_runtime::{
    Context, RunStatus, RuntimeHandle, TaskError, TaskOptions, TriggerOptions, WorkerOptions,
    Workflow,
};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::until;

/// Where each task ran: (task name, worker id).
type Places = Arc<Mutex<Vec<(String, String)>>>;

fn recorder(
    name: &'static str,
    places: Places,
) -> impl Fn(Value, Context) -> futures::future::Ready<Result<Value, TaskError>>
+ Send
+ Sync
+ Clone
+ 'static {
    move |_: Value, c: Context| {
        places
            .lock()
            .push((name.to_string(), c.worker_id().unwrap_or_default()));
        futures::future::ready(Ok(json!({ "worker": c.worker_id() })))
    }
}

use crate::support::engine;

/// A runtime with one worker named `name` and `labels`, serving `workflows`.
async fn worker(
    e: &DevEngine,
    name: &str,
    labels: &[(&str, hatchet_runtime::task::LabelValue)],
    workflows: Vec<Workflow>,
) -> (RuntimeHandle, String) {
    let rt = crate::support::runtime(e).await;
    for wf in workflows {
        rt.register(wf).await.expect("register");
    }
    let mut opts = WorkerOptions::new(name, 8);
    for (k, v) in labels {
        opts = opts.label(*k, v.clone());
    }
    let id = rt.start_worker(opts).await.expect("start");
    (rt, id)
}

#[tokio::test]
async fn labels_steer_placement_required_labels_hold_tasks_and_upserts_apply() {
    let e = engine().await;
    let places: Places = Arc::default();
    let wf = |places: &Places| {
        vec![
            Workflow::new("fast-only").task_with(
                "t",
                TaskOptions::new().desired_label("model", DesiredLabel::equals("fast").required()),
                recorder("fast-only", places.clone()),
            ),
            Workflow::new("big-memory").task_with(
                "t",
                TaskOptions::new()
                    .desired_label(
                        "memory",
                        DesiredLabel::compare(Comparator::GreaterThanOrEqual, 1024).weight(10),
                    )
                    .desired_label("model", DesiredLabel::equals("slow").weight(5)),
                recorder("big-memory", places.clone()),
            ),
            Workflow::new("gpu").task_with(
                "t",
                TaskOptions::new().desired_label("gpu", DesiredLabel::equals("a100").required()),
                recorder("gpu", places.clone()),
            ),
        ]
    };
    let (fast, fast_id) = worker(
        &e,
        "fast",
        &[("model", "fast".into()), ("memory", 2048.into())],
        wf(&places),
    )
    .await;
    let (slow, slow_id) = worker(
        &e,
        "slow",
        &[("model", "slow".into()), ("memory", 256.into())],
        wf(&places),
    )
    .await;
    for _ in 0..6 {
        let _: Value = slow.run("fast-only", &json!({})).await.expect("run");
        // memory >= 1024 (10) beats model = slow (5): the fast worker scores higher.
        let _: Value = slow.run("big-memory", &json!({})).await.expect("run");
    }
    let gpu = fast.run_no_wait("gpu", &json!({})).await.expect("trigger");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fast.run_details(gpu.run_id()).await.expect("d").status,
        RunStatus::Queued,
        "no worker has a gpu"
    );
    slow.upsert_labels([("gpu", "a100")]).await.expect("upsert");
    let _: Value = gpu
        .result()
        .await
        .expect("runs once a worker has the label");
    let placed = places.lock().clone();
    for (task, worker) in &placed {
        let want = if task == "gpu" { &slow_id } else { &fast_id };
        assert_eq!(worker, want, "{task} ran on the wrong worker: {placed:?}");
    }
    assert_eq!(placed.len(), 13);
    // Run-level labels replace the task's own.
    let opts =
        TriggerOptions::new().desired_label("model", DesiredLabel::equals("slow").required());
    let h = fast
        .run_no_wait_with("fast-only", &json!({}), opts)
        .await
        .expect("trigger");
    let out: Value = h.result().await.expect("run");
    assert_eq!(out["worker"], json!(slow_id));
}

#[tokio::test]
async fn sticky_runs_keep_their_tasks_and_sticky_children_on_one_worker() {
    let e = engine().await;
    for strategy in [StickyStrategy::Soft, StickyStrategy::Hard] {
        let places: Places = Arc::default();
        let name = format!("sticky-{}", format!("{strategy:?}").to_lowercase());
        let child = format!("{name}-child");
        let wfs = |places: &Places| {
            let child_name = child.clone();
            vec![
                Workflow::new(&name)
                    .sticky(strategy)
                    .task("a", recorder("a", places.clone()))
                    .task_with(
                        "b",
                        TaskOptions::new().parents(["a"]),
                        recorder("b", places.clone()),
                    )
                    .task_with("c", TaskOptions::new().parents(["b"]), {
                        let places = places.clone();
                        move |_: Value, c: Context| {
                            let (places, child_name) = (places.clone(), child_name.clone());
                            async move {
                                places
                                    .lock()
                                    .push(("c".into(), c.worker_id().unwrap_or_default()));
                                let kid = c.spawn_sticky_child(&child_name, &json!({})).await?;
                                let _: Value = kid.result().await?;
                                Ok::<_, TaskError>(json!({}))
                            }
                        }
                    }),
                Workflow::new(&child)
                    .sticky(strategy)
                    .task("k", recorder("k", places.clone())),
            ]
        };
        let (one, _) = worker(&e, &format!("{name}-1"), &[], wfs(&places)).await;
        let (_two, _) = worker(&e, &format!("{name}-2"), &[], wfs(&places)).await;
        for _ in 0..4 {
            places.lock().clear();
            let _: Value = one.run(&name, &json!({})).await.expect("run");
            let placed = places.lock().clone();
            assert_eq!(placed.len(), 4, "{placed:?}");
            assert!(
                placed.iter().all(|(_, w)| *w == placed[0].1),
                "{strategy:?}: {placed:?}"
            );
        }
    }
}

#[tokio::test]
async fn dag_conditions_wait_skip_and_cancel_as_the_engine_decides() {
    let e = engine().await;
    let rt = crate::support::runtime(&e).await;
    let echo = |tag: &'static str| {
        move |_: Value, c: Context| async move {
            Ok::<_, TaskError>(
                json!({"tag": tag, "triggers": c.triggers().clone(), "skipped_parent": c.was_skipped("check")}),
            )
        }
    };
    let wf = Workflow::new("conds")
        .task("check", |i: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({"n": i["n"]}))
        })
        // Skipped when check's output says so; its child is skipped too (its only parent).
        .task_with(
            "maybe",
            TaskOptions::new()
                .parents(["check"])
                .skip_if(Condition::parent("check").expression("output.n > 5")),
            echo("maybe"),
        )
        .task_with(
            "after-maybe",
            TaskOptions::new().parents(["maybe"]),
            echo("after-maybe"),
        )
        // Waits for an approval event (with an expression) OR a long sleep.
        .task_with(
            "approve",
            TaskOptions::new().parents(["check"]).wait_for(any_of([
                Condition::sleep(Duration::from_secs(600)),
                Condition::event("approval")
                    .expression("input.ok == true")
                    .into(),
            ])),
            echo("approve"),
        )
        // Cancelled by an abort event.
        .task_with(
            "abortable",
            TaskOptions::new()
                .parents(["check"])
                .wait_for(Condition::sleep(Duration::from_secs(600)))
                .cancel_if(Condition::event("abort")),
            echo("abortable"),
        );
    rt.register(wf).await.expect("register");
    crate::support::start_worker(&rt, 8).await;
    let h = rt
        .run_no_wait("conds", &json!({"n": 9}))
        .await
        .expect("trigger");
    // Per-task progress is the REST read's (GetRunDetails shows outcomes once the run is done).
    let api = rt.api();
    let view = || async { api.run(h.run_id()).await.expect("details") };
    // The waits start once `check` (their parent) completed: events before do not count.
    let mut checked = false;
    for _ in 0..500 {
        if view().await.tasks["check"].status == RunStatus::Completed {
            checked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(checked, "check completes");
    rt.push("approval", &json!({"ok": false}))
        .await
        .expect("push");
    rt.push("abort", &json!({})).await.expect("push");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Not created yet (the real engine creates a DAG task when its condition holds, and a
    // read lists none before), or queued.
    assert!(
        view()
            .await
            .tasks
            .get("approve")
            .is_none_or(|t| t.status == RunStatus::Queued),
        "a false expression does not release it"
    );
    rt.push("approval", &json!({"ok": true}))
        .await
        .expect("push");
    let err = h
        .outputs()
        .await
        .expect_err("a cancelled task makes the run cancelled");
    assert_eq!(
        err.outcome(),
        hatchet_runtime::Outcome::RunCancelled,
        "{err}"
    );
    // REST catches up through the engine's status lag (the real engine's OLAP lag).
    let v = crate::support::until_read("the run to read CANCELLED over REST", view, |v| {
        v.status == RunStatus::Cancelled
    })
    .await;
    let out = |t: &str| v.tasks[t].output.clone().unwrap_or(Value::Null);
    assert_eq!(out("maybe"), json!({"skipped": true}));
    assert_eq!(
        out("after-maybe"),
        json!({"skipped": true}),
        "skips propagate to an only child"
    );
    assert_eq!(v.tasks["approve"].status, RunStatus::Completed);
    assert_eq!(
        out("approve")["triggers"]["approval"],
        json!({"ok": true}),
        "the event that released it"
    );
    assert_eq!(v.tasks["abortable"].status, RunStatus::Cancelled);
}

#[tokio::test]
async fn durable_waits_on_an_or_group_say_which_condition_fired() {
    let e = engine().await;
    let rt = crate::support::runtime(&e).await;
    rt.register(Workflow::new("wait-or").durable_task(
        "d",
        TaskOptions::new(),
        |i: Value, c: Context| async move {
            let secs = i["sleep"].as_u64().unwrap_or(600);
            let r = c
                .wait_for([any_of([
                    Condition::sleep(Duration::from_secs(secs)),
                    Condition::event("wake").expression("input.id == 7").into(),
                ])])
                .await?;
            Ok::<_, TaskError>(
                json!({"keys": r.fired_keys().collect::<Vec<_>>(), "data": r.data("wake")}),
            )
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 4).await;
    let ev = rt
        .run_no_wait("wait-or", &json!({"sleep": 600}))
        .await
        .expect("trigger");
    let mut woke = None;
    for _ in 0..100 {
        rt.push("wake", &json!({"id": 1})).await.expect("push");
        rt.push("wake", &json!({"id": 7})).await.expect("push");
        if let Ok(Ok(v)) =
            tokio::time::timeout(Duration::from_millis(200), ev.result::<Value>()).await
        {
            woke = Some(v);
            break;
        }
    }
    let woke = woke.expect("the event fired");
    assert_eq!(woke, json!({"keys": ["wake"], "data": {"id": 7}}));
    let slept: Value = rt
        .run("wait-or", &json!({"sleep": 1}))
        .await
        .expect("the sleep fires");
    assert_eq!(slept, json!({"keys": ["sleep:1s"], "data": null}));
}

#[tokio::test]
async fn event_filters_choose_which_scoped_events_start_runs_and_hand_over_their_payload() {
    let e = engine().await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s2 = seen.clone();
    let filtered = Workflow::new("filtered").on_events(["order:created"]).task(
        "t",
        move |_: Value, c: Context| {
            s2.lock().push(c.filter_payload());
            async { Ok::<_, TaskError>(json!({})) }
        },
    );
    let plain_runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let p2 = plain_runs.clone();
    let plain = Workflow::new("unfiltered")
        .on_events(["order:created"])
        .task("t", move |_: Value, _c: Context| {
            p2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, TaskError>(json!({})) }
        });
    let (rt, _) = worker(&e, "w", &[], vec![filtered, plain]).await;
    let api = rt.api();
    let wid = api.workflow_id("filtered").await.expect("workflow id");
    let big = api
        .create_filter(
            &wid,
            "tenant-a",
            "input.amount > 100",
            json!({"tier": "big"}),
        )
        .await
        .expect("create");
    let any = api
        .create_filter(&wid, "tenant-a", "true", json!({"tier": "any"}))
        .await
        .expect("create");
    assert_eq!(
        api.list_filters(&[&wid], &["tenant-a"])
            .await
            .expect("list")
            .len(),
        2
    );
    let upd = api
        .update_filter(
            &any.metadata.id,
            &FilterUpdate::new().payload(json!({"tier": "all"})),
        )
        .await
        .expect("update");
    assert_eq!(
        (upd.expression.as_str(), upd.payload.clone()),
        ("true", json!({"tier": "all"}))
    );
    let push = |amount: i64, scope: Option<&str>| {
        let rt = rt.clone();
        let scope = scope.map(str::to_string);
        async move {
            rt.push_with(
                "order:created",
                &json!({"amount": amount}),
                match scope {
                    Some(s) => PushOptions::new().scope(s),
                    None => PushOptions::new(),
                },
            )
            .await
            .expect("push")
        }
    };
    push(500, Some("tenant-a")).await; // both filters: two runs
    push(5, Some("tenant-a")).await; // only "true": one run
    push(500, Some("tenant-b")).await; // no filter for this scope: none
    push(500, None).await; // no scope: none
    until("three filtered runs and four plain ones", || {
        seen.lock().len() == 3 && plain_runs.load(std::sync::atomic::Ordering::SeqCst) == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut tiers: Vec<String> = seen
        .lock()
        .iter()
        .map(|p| p["tier"].as_str().unwrap_or("?").to_string())
        .collect();
    tiers.sort();
    assert_eq!(tiers, ["all", "all", "big"]);
    // With no filters left, the workflow runs once per event whatever the scope.
    api.delete_filter(&big.metadata.id).await.expect("delete");
    api.delete_filter(&any.metadata.id).await.expect("delete");
    assert!(
        api.list_filters(&[&wid], &[])
            .await
            .expect("list")
            .is_empty()
    );
    push(1, Some("tenant-z")).await;
    until("one more filtered run", || seen.lock().len() == 4).await;
    assert_eq!(seen.lock()[3], json!({}), "no filter, no payload");
    // A filter needs a scope and an expression: refused before sending.
    assert_eq!(
        api.create_filter(&wid, "", "true", json!({}))
            .await
            .expect_err("no scope")
            .outcome(),
        hatchet_runtime::Outcome::Invalid
    );
}

#[tokio::test]
async fn filters_declared_with_the_workflow_apply_to_scoped_pushes() {
    let e = engine().await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s2 = seen.clone();
    let wf = Workflow::new("declared")
        .on_events(["signup"])
        .default_filter("input.plan == 'pro'", "eu", json!({"region": "eu"}))
        .task("t", move |_: Value, c: Context| {
            s2.lock().push(c.filter_payload());
            async { Ok::<_, TaskError>(json!({})) }
        });
    let (rt, _) = worker(&e, "w", &[], vec![wf]).await;
    for plan in ["free", "pro"] {
        rt.push_with(
            "signup",
            &json!({"plan": plan}),
            PushOptions::new().scope("eu"),
        )
        .await
        .expect("push");
    }
    until("the pro signup's run", || seen.lock().len() == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(*seen.lock(), [json!({"region": "eu"})]);
    let filters = rt.api().list_filters(&[], &["eu"]).await.expect("list");
    assert_eq!(filters.len(), 1);
    assert_eq!(filters[0].is_declarative, Some(true));
}
