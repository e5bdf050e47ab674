//! REST reads and writes through the retry service, against the development engine.

use std::time::{Duration, SystemTime};

use hatchet_dev_engine::Fault;
use hatchet_runtime::RunStatus;
use hatchet_runtime::api::RunQuery;
use hatchet_runtime::run::RunFilter;
use hatchet_runtime::{Context, Outcome, TaskError, WorkerOptions, Workflow};
use serde_json::{Value, json};

use crate::support::engine_and_runtime as setup;

#[tokio::test]
async fn typed_reads_of_runs_workers_crons_schedules_and_rate_limits() {
    let (e, rt) = setup().await;
    rt.register(
        Workflow::new("rest-echo").task("t", |i: Value, _c: Context| async move {
            Ok::<_, TaskError>(i)
        }),
    )
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("rest-worker", 2))
        .await
        .expect("start");
    let h = rt
        .run_no_wait("rest-echo", &json!({"x": 1}))
        .await
        .expect("trigger");
    let _: Value = h.result().await.expect("done");
    let api = rt.api();
    // REST catches up through the engine's status lag (the real engine's OLAP tables lag too).
    let d = crate::support::until_read(
        "the run to read COMPLETED over REST",
        || api.run(h.run_id()),
        |d| d.as_ref().is_ok_and(|d| d.status == RunStatus::Completed),
    )
    .await
    .expect("details");
    assert_eq!(d.tasks["t"].output, Some(json!({"x": 1})));
    assert_eq!(d.output::<Value>("t").expect("typed output")["x"], 1);
    assert_eq!(
        api.run_status(h.run_id()).await.expect("status"),
        RunStatus::Completed
    );
    let since = SystemTime::now() - Duration::from_secs(3600);
    let runs = api
        .list_runs(&RunQuery::new(
            RunFilter::since(since).status(RunStatus::Completed),
        ))
        .await
        .expect("list");
    assert!(
        runs.rows
            .iter()
            .any(|r| r.workflow_run_external_id == h.run_id())
    );
    let workers = api.workers().await.expect("workers");
    assert!(
        workers
            .iter()
            .any(|w| w.name == "rest-worker" && w.status == "ACTIVE")
    );

    let cron = api
        .create_cron("rest-echo", "nightly", "0 0 * * *", &json!({"n": 1}))
        .await
        .expect("cron");
    assert_eq!(api.list_crons().await.expect("crons").len(), 1);
    api.delete_cron(&cron.metadata.id).await.expect("delete");
    assert!(api.list_crons().await.expect("crons").is_empty());
    let sched = api
        .create_schedule(
            "rest-echo",
            SystemTime::now() + Duration::from_secs(3600),
            &json!({}),
        )
        .await
        .expect("schedule");
    assert_eq!(
        api.list_schedules().await.expect("schedules")[0]
            .metadata
            .id,
        sched.metadata.id
    );
    api.delete_schedule(&sched.metadata.id)
        .await
        .expect("delete");
    assert!(api.rate_limits().await.expect("rate limits").is_empty());

    // Unknown run: a rejected read with the 404 kept as the cause.
    let err = api
        .run(&uuid::Uuid::new_v4().to_string())
        .await
        .expect_err("404");
    assert_eq!(err.outcome(), Outcome::Rejected);
    drop(e);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn reads_retry_transient_statuses_with_auth_on_every_attempt_and_writes_are_sent_once() {
    let (e, rt) = setup().await;
    let api = rt.api();
    let path = format!("/api/v1/tenants/{}/worker", e.tenant_id());
    e.faults().inject(
        path.clone(),
        2,
        Fault::HttpFail {
            status: 503,
            retry_after: None,
        },
    );
    // Two 503s, then success: three attempts, every one authorized (the engine 401s otherwise).
    api.workers().await.expect("third attempt succeeds");
    assert_eq!(e.faults().attempts(&path), 3);

    // Retry-After beyond 60 s ends the retries at once, and the final answer is handed back.
    e.faults().inject(
        path.clone(),
        1,
        Fault::HttpFail {
            status: 429,
            retry_after: Some("120".into()),
        },
    );
    let err = api.workers().await.expect_err("429");
    assert_eq!(e.faults().attempts(&path), 4);
    assert!(err.to_string().contains("429"), "{err}");

    // Retry-After in HTTP-date form, 1 s ahead: honoured, then the retry succeeds.
    let soon = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(1));
    e.faults().inject(
        path.clone(),
        1,
        Fault::HttpFail {
            status: 503,
            retry_after: Some(soon),
        },
    );
    api.workers().await.expect("retried after the date");
    assert_eq!(e.faults().attempts(&path), 6);

    // A POST answered 503 is not retried: the body is never replayed.
    rt.register(
        Workflow::new("w").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        ),
    )
    .await
    .expect("register");
    let post = format!("/api/v1/tenants/{}/workflows/w/crons", e.tenant_id());
    e.faults().inject(
        post.clone(),
        1,
        Fault::HttpFail {
            status: 503,
            retry_after: Some("1".into()),
        },
    );
    let err = api
        .create_cron("w", "c", "* * * * *", &json!({}))
        .await
        .expect_err("503");
    assert_eq!(e.faults().attempts(&post), 1);
    assert!(err.to_string().contains("503"));
    let counters = rt.counters();
    assert_eq!(counters["GET /api/v1/tenants/{t}/worker"].retries, 3);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_429_with_an_unreadable_retry_after_falls_back_to_the_backoff() {
    let (e, rt) = setup().await;
    let path = format!("/api/v1/tenants/{}/worker", e.tenant_id());
    e.faults().inject(
        path.clone(),
        1,
        Fault::HttpFail {
            status: 429,
            retry_after: Some("later".into()),
        },
    );
    rt.api()
        .workers()
        .await
        .expect("retried with the backoff, then served");
    assert_eq!(e.faults().attempts(&path), 2);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn schedules_fire_at_their_time_and_crons_are_validated_at_registration() {
    let (e, rt) = setup().await;
    rt.register(
        Workflow::new("later").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        ),
    )
    .await
    .expect("register");
    crate::support::start_worker(&rt, 2).await;
    let api = rt.api();
    let at = SystemTime::now() + Duration::from_secs(1);
    let sched = api
        .create_schedule("later", at, &json!({"when": "soon"}))
        .await
        .expect("schedule");
    assert_eq!(sched.workflow_run_id, None, "not fired yet");
    // A fired schedule is deleted (as the real engine does): it leaves the list, and its run is
    // at the engine.
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let rows = api.list_schedules().await.expect("list");
            if rows.iter().all(|r| r.metadata.id != sched.metadata.id) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the schedule fires");
    assert!(
        SystemTime::now() >= at,
        "never before its time (to the second)"
    );
    assert_eq!(e.runs_by_workflow("later"), 1, "one run, once");

    // A workflow declaring a bad cron is refused at registration, with the field named. (A
    // runtime without a worker registers them: a started worker takes no new workflows.)
    let admin = crate::support::runtime(&e).await;
    let err = admin
        .register(
            Workflow::new("bad-cron")
                .task(
                    "t",
                    |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
                )
                .on_crons(["61 * * * *"], None),
        )
        .await
        .expect_err("refused");
    assert_eq!(err.outcome(), Outcome::Rejected);
    // In the real engine's words: its validator names the field, not what is wrong with it.
    assert!(
        err.to_string()
            .contains("'CreateWorkflowVersionOpts.CronTriggers[0]': Invalid cron expression"),
        "{err}"
    );
    // A good one is listed with the workflow's crons.
    admin
        .register(
            Workflow::new("hourly")
                .task(
                    "t",
                    |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
                )
                .on_crons(["0 * * * *"], Some(json!({"tick": true}))),
        )
        .await
        .expect("register");
    let crons = api.list_crons().await.expect("crons");
    assert!(
        crons.iter().any(|c| c.workflow_name == "hourly"
            && c.cron == "0 * * * *"
            && c.input["tick"] == true),
        "{crons:?}"
    );
    drop(e);
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn ids_in_rest_paths_are_percent_encoded() {
    // An id with a slash or a query character must stay one path segment: the read answers
    // for that id (not found), it does not reach another route.
    let e = crate::support::engine().await;
    let rt = crate::support::runtime(&e).await;
    for id in ["a/../../tenants", "x?y=1", "has space"] {
        let err = rt.api().run_status(id).await.expect_err("no such run");
        assert!(
            err.to_string().contains("400") || err.to_string().contains("404"),
            "{id}: {err}"
        );
    }
}
