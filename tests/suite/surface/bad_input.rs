//! Bad input everywhere: what the engine sends the worker (invalid JSON payloads, unknown enum
//! values, missing fields, a flood beyond the slots) and what user code does (outputs over the
//! message limit, a handler that never returns). Each: a clear error or a FAILED event, nothing
//! lost, no panic of the runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hatchet_runtime::{Context, Outcome, TaskError, TaskOptions, WorkerOptions, Workflow};
use serde_json::{Value, json};

use crate::support::engine_and_runtime as setup;

fn echo(timeout: Duration) -> Workflow {
    crate::support::echo_with(TaskOptions::new().timeout(timeout))
}

#[tokio::test]
async fn an_invalid_payload_from_the_engine_fails_the_task_with_a_clear_error() {
    let (e, rt) = setup().await;
    rt.register(echo(Duration::from_secs(5)))
        .await
        .expect("register");
    crate::support::start_worker(&rt, 2).await;
    // The worker decodes with the one parser the fuzz target drives (decode_action_payload).
    for (payload, says) in [
        ("{not json", "action payload is not JSON"),
        ("[1, 2]", "action payload is not a JSON object"),
    ] {
        e.mutate_next_actions(1, move |a| a.action_payload = payload.into());
        let err = rt
            .run::<_, Value>("echo", &json!({}))
            .await
            .expect_err("fails");
        assert!(err.to_string().contains(says), "{payload}: {err}");
    }
    // The worker lives on.
    let out: Value = rt
        .run("echo", &json!({"ok": 1}))
        .await
        .expect("next run works");
    assert_eq!(out["ok"], 1);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn missing_fields_and_unknown_enum_values_never_crash_the_worker() {
    let (e, rt) = setup().await;
    rt.register(echo(Duration::from_secs(1)))
        .await
        .expect("register");
    crate::support::start_worker(&rt, 2).await;
    // No action id: no handler, a FAILED event that says so.
    e.mutate_next_actions(1, |a| a.action_id.clear());
    let err = rt
        .run::<_, Value>("echo", &json!({}))
        .await
        .expect_err("fails");
    assert!(err.to_string().contains("no handler for action"), "{err}");
    // An action type from the future: ignored with a warning; the engine's timeout ends the run.
    e.mutate_next_actions(1, |a| a.action_type = 99);
    let err = rt
        .run::<_, Value>("echo", &json!({}))
        .await
        .expect_err("times out");
    assert!(err.to_string().contains("exceeded timeout"), "{err}");
    let out: Value = rt
        .run("echo", &json!({"still": "alive"}))
        .await
        .expect("next run works");
    assert_eq!(out["still"], "alive");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_flood_beyond_the_slots_is_held_back_and_nothing_is_lost() {
    let (e, rt) = setup().await;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    rt.register(
        Workflow::new("slow").task("t", move |i: Value, _c: Context| {
            let (r, p) = (r.clone(), p.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, TaskError>(i)
            }
        }),
    )
    .await
    .expect("register");
    e.over_assign(true);
    let slots = 2;
    rt.start_worker(WorkerOptions::new("w", slots))
        .await
        .expect("start");
    let handles = rt
        .run_many(
            "slow",
            &(0..100).map(|i| json!({"i": i})).collect::<Vec<_>>(),
        )
        .await;
    for (i, h) in handles.into_iter().enumerate() {
        let out: Value = h
            .expect("trigger")
            .result_within(Duration::from_secs(60))
            .await
            .expect("result");
        assert_eq!(out["i"], i);
    }
    // Plain tasks are bound by the default slots alone (durable slots are their own bound).
    assert!(
        peak.load(Ordering::SeqCst) <= slots,
        "peak {} concurrent tasks",
        peak.load(Ordering::SeqCst)
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_output_over_the_message_limit_is_a_clear_failure() {
    let (_e, rt) = setup().await;
    rt.register(
        Workflow::new("big").task("t", |_i: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({"blob": "x".repeat(5 * 1024 * 1024)}))
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 1).await;
    let err = rt
        .run::<_, Value>("big", &json!({}))
        .await
        .expect_err("too big");
    assert_eq!(
        err.outcome(),
        Outcome::RunFailed,
        "the run failed; no call was refused"
    );
    assert!(err.to_string().contains("over the"), "{err}");
    assert!(err.run_failures()[0].error.contains("over the"), "{err}");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_handler_that_never_returns_is_cancelled_at_its_timeout_and_frees_its_slot() {
    let (_e, rt) = setup().await;
    let cancelled = Arc::new(AtomicUsize::new(0));
    let c2 = cancelled.clone();
    rt.register(Workflow::new("stuck").task_with(
        "t",
        TaskOptions::new().timeout(Duration::from_secs(1)),
        move |i: Value, ctx: Context| {
            let c2 = c2.clone();
            async move {
                if i["hang"] == true {
                    ctx.cancellation().cancelled().await;
                    c2.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                }
                Ok::<_, TaskError>(i)
            }
        },
    ))
    .await
    .expect("register");
    crate::support::start_worker(&rt, 1).await;
    let err = rt
        .run::<_, Value>("stuck", &json!({"hang": true}))
        .await
        .expect_err("times out");
    assert!(err.to_string().contains("exceeded timeout"), "{err}");
    // With one slot, the next run only works if the stuck one was really cancelled.
    let out: Value = rt
        .run("stuck", &json!({"hang": false}))
        .await
        .expect("the slot is free");
    assert_eq!(out["hang"], false);
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        1,
        "the task saw its cancellation"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_flood_of_log_lines_against_a_stalled_engine_never_blocks_the_task_and_stays_bounded() {
    use hatchet_runtime::test_hooks::{LOG_QUEUE, LOG_SENDS};
    const LINES: usize = 5_000;
    let (e, rt) = setup().await;
    rt.register(
        Workflow::new("chatty").task("t", |i: Value, c: Context| async move {
            let n = i["lines"].as_u64().unwrap_or(0);
            for line in 0..n {
                c.log(format!("line {line}"));
            }
            Ok::<_, TaskError>(json!({ "logged": n }))
        }),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    // Healthy engine, a burst within the queue: every line arrives, none is dropped.
    let burst = LOG_QUEUE / 2;
    let _: Value = rt
        .run("chatty", &json!({ "lines": burst }))
        .await
        .expect("result");
    tokio::time::timeout(Duration::from_secs(30), async {
        while e.faults().attempts("/EventsService/PutLog") < burst as u64 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every line is shipped");
    assert_eq!(rt.logs_dropped(), 0);
    // The engine stops answering PutLog: the queue fills, the task goes on, the rest is dropped.
    e.faults().inject(
        "/EventsService/PutLog",
        1_000_000,
        hatchet_dev_engine::Fault::Hang,
    );
    let out: Value = tokio::time::timeout(
        Duration::from_secs(10),
        rt.run("chatty", &json!({ "lines": LINES })),
    )
    .await
    .expect("the task is never held up by its logs")
    .expect("result");
    assert_eq!(out["logged"], LINES);
    let dropped = rt.logs_dropped() as usize;
    assert!(
        (LINES - LOG_QUEUE - LOG_SENDS..=LINES - LOG_QUEUE).contains(&dropped),
        "{dropped} dropped: at most the queue and the lines in flight are kept"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn an_idempotency_key_without_expression_or_ttl_is_refused_before_anything_is_sent() {
    let (e, rt) = setup().await;
    let before = e.faults().attempts("/v1.AdminService/PutWorkflow");
    for (expression, ttl) in [("input.k", Duration::ZERO), ("  ", Duration::from_secs(60))] {
        let err = rt
            .register(echo(Duration::from_secs(5)).idempotency(expression, ttl))
            .await
            .expect_err("refused");
        assert_eq!(err.outcome(), Outcome::Invalid, "{err}");
        assert!(err.to_string().contains("TTL of at least 1 ms"), "{err}");
    }
    assert_eq!(
        e.faults().attempts("/v1.AdminService/PutWorkflow"),
        before,
        "nothing sent: the engine would refuse it"
    );
    rt.register(echo(Duration::from_secs(5)).idempotency("input.k", Duration::from_millis(1)))
        .await
        .expect("1 ms is enough");
}

#[tokio::test]
async fn tasks_that_make_no_dag_are_refused_before_anything_is_sent() {
    let (e, rt) = setup().await;
    let t = |name: &str, parents: &[&str]| {
        let parents: Vec<String> = parents.iter().map(|p| p.to_string()).collect();
        (name.to_string(), parents)
    };
    let before = e.faults().attempts("/v1.AdminService/PutWorkflow");
    for (tasks, says) in [
        (vec![t("a", &[]), t("a", &[])], "two tasks are named \"a\""),
        (vec![t("a", &["nope"])], "names a parent \"nope\""),
        (
            vec![t("a", &["b"]), t("b", &["a"]), t("c", &[])],
            "make a cycle",
        ),
    ] {
        let mut wf = Workflow::new("not-a-dag");
        for (name, parents) in tasks {
            wf = wf.task_with(
                &name,
                TaskOptions::new().parents(parents),
                |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
            );
        }
        let err = rt.register(wf).await.expect_err("refused");
        assert_eq!(err.outcome(), Outcome::Invalid, "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
    assert_eq!(
        e.faults().attempts("/v1.AdminService/PutWorkflow"),
        before,
        "nothing sent: the real engine answers these with a bare internal error"
    );
}
