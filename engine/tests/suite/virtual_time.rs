//! A worked test of time you can skip: the development engine on virtual time runs a workflow
//! that sleeps an hour, retries after ten minutes and waits a day for a schedule, and another
//! whose task waits on a condition's hour beside an hourly cron, each in well under a second of
//! wall time. Copy it into your service's tests and change the workflows.
//!
//! With `DevEngineOptions::virtual_time()`, whenever all the engine does is wait on a timer while
//! your test waits on a result, its clock jumps to that timer. `DevEngine::advance` jumps by
//! hand, for what nobody awaits yet (a schedule, a cron).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::{Context, Runtime, TaskError, TaskOptions, WorkerOptions, Workflow};
use serde_json::{Value, json};

const HOUR: Duration = Duration::from_secs(3_600);

/// A hang guard on the wall clock, far above what the test needs.
const BOUND: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_of_sleep_a_retry_backoff_and_a_schedule_pass_in_milliseconds() {
    let engine = DevEngine::start(DevEngineOptions::default().virtual_time())
        .await
        .expect("the engine starts");
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("the runtime starts");
    let attempts = Arc::new(AtomicUsize::new(0));
    let a = attempts.clone();
    rt.register(
        Workflow::new("nightly")
            // Skipped time counts toward timeouts as real time does (the real engine times out a
            // durable task that waits past its timeout): give the sleep room.
            .durable_task(
                "wait",
                TaskOptions::new().timeout(2 * HOUR),
                |_: Value, ctx: Context| async move {
                    ctx.sleep_for(HOUR).await?;
                    Ok::<_, TaskError>(json!({ "slept": true }))
                },
            )
            .task_with(
                "flaky",
                // The first retry waits ten minutes (600^1 s, capped at 600 s).
                TaskOptions::new().retries(1).backoff(600.0, 600),
                move |_: Value, _c: Context| {
                    let n = a.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n == 0 {
                            return Err(TaskError::new("the first attempt fails"));
                        }
                        Ok::<_, TaskError>(json!({"attempt": n + 1}))
                    }
                },
            ),
    )
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("virtual", 4))
        .await
        .expect("the worker starts");

    // 1. An hour's durable sleep and a ten-minute backoff, awaited: the clock jumps by itself.
    let wall = std::time::Instant::now();
    let h = rt
        .run_no_wait("nightly", &json!({}))
        .await
        .expect("trigger");
    let out: Value = h.result_within(BOUND).await.expect("the run finishes");
    assert_eq!(out["wait"]["slept"], true, "{out}");
    assert_eq!(out["flaky"]["attempt"], 2);
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "one failure, one retry");
    // The clock jumped to each timer: the backoff's, then the sleep's (less the wall time
    // that had passed since each was set).
    assert!(
        engine.skipped() + wall.elapsed() >= HOUR,
        "skipped {:?}",
        engine.skipped()
    );
    assert!(
        wall.elapsed() < Duration::from_secs(20),
        "an hour took {:?} of wall time",
        wall.elapsed()
    );

    // 2. A schedule a day out: nobody awaits its run yet, so jump by hand.
    let api = rt.api();
    let at = engine.now() + 24 * HOUR;
    api.create_schedule("nightly", at, &json!({}))
        .await
        .expect("schedule");
    let skipped = engine.skipped();
    engine.advance(24 * HOUR);
    assert!(engine.skipped() >= skipped + 24 * HOUR);
    let mut fired = None;
    for _ in 0..200 {
        let schedules = api.list_schedules().await.expect("schedules");
        fired = schedules.first().and_then(|s| s.workflow_run_id.clone());
        if fired.is_some() || schedules.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fired schedule is deleted (as on the real engine): find its run in the run list.
    let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    let runs = api
        .list_runs(&hatchet_runtime::api::RunQuery::new(
            hatchet_runtime::run::RunFilter::since(since),
        ))
        .await
        .expect("runs");
    assert_eq!(
        runs.rows.len(),
        2,
        "the awaited run and the scheduled one: {fired:?}"
    );
    let scheduled = runs
        .rows
        .iter()
        .find(|r| r.workflow_run_external_id != h.run_id())
        .expect("the scheduled run");
    let out: Value = rt
        .run_handle(scheduled.workflow_run_external_id.clone())
        .result_within(BOUND)
        .await
        .expect("the scheduled run finishes");
    assert_eq!(out["wait"]["slept"], true, "{out}");
    // The worker's own clock is not skipped: `ctx.now()` in a handler reads the wall clock.
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_s_hour_of_sleep_and_an_hourly_cron_pass_in_milliseconds() {
    let engine = DevEngine::start(DevEngineOptions::default().virtual_time())
        .await
        .expect("the engine starts");
    // Start 5 s past an hour boundary. The stretch below is an hour plus the condition's poll
    // and the wall time the test takes, so one that started a second or two before a boundary
    // would hold two (CI met it once).
    let into_hour = engine
        .now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() % HOUR.as_secs());
    engine.advance(Duration::from_secs(
        (HOUR.as_secs() + 5 - into_hour) % HOUR.as_secs(),
    ));
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("the runtime starts");
    let ticks = Arc::new(AtomicUsize::new(0));
    let t = ticks.clone();
    rt.register(
        Workflow::new("gated")
            .task("first", |_: Value, _c: Context| async move {
                Ok::<_, TaskError>(json!({ "first": true }))
            })
            // A DAG condition: "later" starts an hour after "first" completes.
            .task_with(
                "later",
                TaskOptions::new()
                    .parents(["first"])
                    .wait_for(hatchet_runtime::durable::Condition::sleep(HOUR)),
                |_: Value, _c: Context| async move { Ok::<_, TaskError>(json!({ "later": true })) },
            ),
    )
    .await
    .expect("register");
    rt.register(Workflow::new("hourly").on_crons(["0 * * * *"], None).task(
        "tick",
        move |_: Value, _c: Context| {
            t.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, TaskError>(json!({})) }
        },
    ))
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("virtual", 4))
        .await
        .expect("the worker starts");

    // 1. A condition's hour, awaited: the clock jumps by itself.
    let wall = std::time::Instant::now();
    let skipped = engine.skipped();
    let out: Value = rt
        .run_no_wait("gated", &json!({}))
        .await
        .expect("trigger")
        .result_within(BOUND)
        .await
        .expect("the run finishes");
    assert_eq!(out["later"]["later"], true, "{out}");
    assert!(
        engine.skipped() + wall.elapsed() >= skipped + HOUR,
        "skipped {:?}",
        engine.skipped()
    );
    assert!(
        wall.elapsed() < Duration::from_secs(20),
        "took {:?}",
        wall.elapsed()
    );

    // 2. An hourly cron: the hour skipped above held one full hour, so one tick fired in it
    // (the clock stops at every timer on its way, the cron's tick too). Nobody awaits the next
    // tick's run, so jump by hand past it.
    let runs_of_hourly = || async {
        let q = hatchet_runtime::api::RunQuery::new(hatchet_runtime::run::RunFilter::since(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1),
        ));
        rt.api()
            .list_runs(&q)
            .await
            .expect("runs")
            .rows
            .into_iter()
            .filter(|r| r.workflow_name.as_deref() == Some("hourly"))
            .map(|r| r.workflow_run_external_id)
            .collect::<Vec<_>>()
    };
    let ticks_listed = |n: usize| async move {
        let mut listed = Vec::new();
        for _ in 0..250 {
            listed = runs_of_hourly().await;
            if listed.len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        listed
    };
    assert_eq!(
        ticks_listed(1).await.len(),
        1,
        "one tick in the condition's hour"
    );
    engine.advance(HOUR);
    let fired = ticks_listed(2).await;
    assert_eq!(
        fired.len(),
        2,
        "one more tick in the hour skipped by hand: {fired:?}"
    );
    for run in fired {
        let _: Value = rt
            .run_handle(run)
            .result_within(BOUND)
            .await
            .expect("each cron run finishes");
    }
    assert_eq!(ticks.load(Ordering::SeqCst), 2, "each tick executed once");
    rt.shutdown(Duration::from_secs(5)).await;
}
