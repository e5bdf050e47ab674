//! Fault injection of the development engine: each fault kind, the counters, the control endpoint.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hatchet_dev_engine::Fault;
use hatchet_runtime::protocol as proto;
use tonic::Code;

use crate::support::{H, next};

#[tokio::test]
async fn fail_the_next_n_calls_with_a_code_and_pushback() {
    let h = H::new().await;
    let f = h.engine.faults();
    f.inject(
        "/Dispatcher/GetVersion",
        2,
        Fault::Fail {
            code: Code::Unavailable as i32,
            message: "down".into(),
            pushback_ms: Some("1500".into()),
        },
    );
    let mut d = h.dispatcher();
    for _ in 0..2 {
        let e = d
            .get_version(proto::GetVersionRequest {})
            .await
            .expect_err("injected");
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(
            e.metadata()
                .get("grpc-retry-pushback-ms")
                .and_then(|v| v.to_str().ok()),
            Some("1500")
        );
        assert_eq!(
            hatchet_runtime::test_hooks::read_status(&e),
            "Status { code: Unavailable, pushback: Some(After(1.5s)), attempt_timed_out: false }"
        );
    }
    d.get_version(proto::GetVersionRequest {})
        .await
        .expect("third call passes");
    assert_eq!(f.attempts("/Dispatcher/GetVersion"), 3);
}

#[tokio::test]
async fn delay_and_hang() {
    let h = H::new().await;
    let f = h.engine.faults();
    f.inject("/Dispatcher/GetVersion", 1, Fault::Delay { ms: 300 });
    let t = Instant::now();
    h.dispatcher()
        .get_version(proto::GetVersionRequest {})
        .await
        .expect("delayed");
    assert!(t.elapsed() >= Duration::from_millis(300));
    f.inject("/Dispatcher/GetVersion", 1, Fault::Hang);
    let mut req = tonic::Request::new(proto::GetVersionRequest {});
    req.set_timeout(Duration::from_millis(200));
    let t = Instant::now();
    let e = h
        .dispatcher()
        .get_version(req)
        .await
        .expect_err("hangs until the deadline");
    assert!(t.elapsed() >= Duration::from_millis(200));
    // tonic reports its own client-side timeout as CANCELLED with a TimeoutExpired source; the
    // retry core must read it as the attempt timing out.
    let read = hatchet_runtime::test_hooks::read_status(&e);
    assert!(
        read.starts_with("Status { code: DeadlineExceeded,")
            && read.ends_with("attempt_timed_out: true }"),
        "{read} for {e:?}"
    );
    h.dispatcher()
        .get_version(proto::GetVersionRequest {})
        .await
        .expect("then serves");
}

#[tokio::test]
async fn end_a_stream_after_k_messages_with_a_code_or_eof() {
    let h = H::new().await;
    h.put("s", &[("t", &[], 0, "")], &[]).await;
    let wid = h.register(&["s:t".into()], 10).await;
    h.engine.faults().inject(
        "/Dispatcher/ListenV2",
        1,
        Fault::EndStream {
            after: 1,
            code: Some(Code::Internal as i32),
        },
    );
    let mut actions = h.listen(&wid).await;
    h.trigger("s", "{}").await;
    h.trigger("s", "{}").await;
    next(&mut actions).await;
    let end = tokio::time::timeout(Duration::from_secs(5), actions.next())
        .await
        .expect("in time");
    assert_eq!(
        end.expect("an item").expect_err("an error").code(),
        Code::Internal
    );
    // With no code: a clean EOF after K.
    h.engine.faults().inject(
        "/Dispatcher/ListenV2",
        1,
        Fault::EndStream {
            after: 0,
            code: None,
        },
    );
    let mut actions = h
        .dispatcher()
        .listen_v2(proto::WorkerListenRequest {
            worker_id: wid.clone(),
        })
        .await
        .expect("listen")
        .into_inner();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), actions.next())
            .await
            .expect("in time")
            .is_none()
    );
}

#[tokio::test]
async fn drop_every_connection_and_freeze() {
    let h = H::new().await;
    let wid = h.register(&["x:y".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    h.engine.faults().drop_connections();
    let end = tokio::time::timeout(Duration::from_secs(5), actions.next())
        .await
        .expect("in time");
    assert!(
        matches!(end, None | Some(Err(_))),
        "the stream dies with its connection"
    );
    // The channel redials.
    h.dispatcher()
        .get_version(proto::GetVersionRequest {})
        .await
        .expect("redialled");

    // Frozen: nothing answers, calls hit their deadline.
    h.engine.faults().freeze();
    let mut req = tonic::Request::new(proto::GetVersionRequest {});
    req.set_timeout(Duration::from_millis(300));
    let e = h.dispatcher().get_version(req).await.expect_err("frozen");
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );
    h.engine.faults().clear();
    let mut ok = false;
    for _ in 0..50 {
        if h.dispatcher()
            .get_version(proto::GetVersionRequest {})
            .await
            .is_ok()
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "answers again after the freeze ends");
}

#[tokio::test]
async fn rest_faults_with_retry_after_and_the_control_endpoint() {
    let h = H::new().await;
    let http = reqwest_client();
    let base = h.engine.api_url();
    let auth = format!("Bearer {}", h.engine.client_config().env_lines()[0].1);
    // Program a fault through the control endpoint.
    let rule = serde_json::json!({"target": "/api/v1/stable/workflow-runs/", "times": 1, "fault": {"kind": "http_fail", "status": 503, "retry_after": "7"}});
    let r = http
        .post(format!("{base}/_dev/faults"))
        .header("authorization", &auth)
        .json(&rule)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 204);
    let id = uuid::Uuid::new_v4();
    let r = http
        .get(format!("{base}/api/v1/stable/workflow-runs/{id}"))
        .header("authorization", &auth)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("7")
    );
    let r = http
        .get(format!("{base}/api/v1/stable/workflow-runs/{id}"))
        .header("authorization", &auth)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 404, "the fault was used up");
    let counters: serde_json::Value = http
        .get(format!("{base}/_dev/counters"))
        .header("authorization", &auth)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(counters[format!("/api/v1/stable/workflow-runs/{id}")], 2);
    // No token: 401.
    let r = http
        .get(format!("{base}/api/v1/stable/workflow-runs/{id}"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 401);
}

pub fn reqwest_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().expect("client")
}

#[tokio::test]
async fn a_connection_dropped_under_a_request_is_lost_not_cancelled() {
    // tonic reports "operation was canceled" (CANCELLED) when the connection dies under a call;
    // the retry core must read that as Lost (maybe sent), not as a server CANCELLED.
    let h = H::new().await;
    h.engine
        .faults()
        .inject("/Dispatcher/GetVersion", 1, Fault::Hang);
    let mut d = h.dispatcher();
    let call = tokio::spawn(async move { d.get_version(proto::GetVersionRequest {}).await });
    // Drop the connection only once the engine holds the call (counted at its gate).
    tokio::time::timeout(Duration::from_secs(5), async {
        while h.engine.faults().attempts("/Dispatcher/GetVersion") == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the call reaches the engine");
    h.engine.faults().drop_connections();
    let e = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("in time")
        .expect("task")
        .expect_err("dropped");
    assert_eq!(
        hatchet_runtime::test_hooks::read_status(&e),
        "Lost",
        "{e:?}"
    );
}

#[tokio::test]
async fn an_assignment_never_answered_on_a_stream_that_closes_is_offered_again_only_with_its_fault()
{
    // By default, as on the real engine: the unanswered attempt stays with its worker.
    {
        let h = H::new().await;
        h.put("kept", &[("t", &[], 0, "60s")], &[]).await;
        let worker = h.register(&["kept:t".to_string()], 4).await;
        let first = h.listen(&worker).await;
        h.trigger("kept", "{}").await;
        tokio::time::timeout(Duration::from_secs(5), async {
            while h.engine.stats().slots_in_use == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("assigned");
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), async {
            while h.engine.worker(&worker).is_some_and(|w| w.listening) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the engine saw the stream close");
        let stats = h.engine.stats();
        assert_eq!(
            (stats.queued, stats.slots_in_use),
            (0, 1),
            "not offered again: it runs out its timeout"
        );
    }
    let h = H::new().await;
    h.engine.reoffer_unanswered_assignments(true);
    h.put("reoffer", &[("t", &[], 0, "60s")], &[]).await;
    let worker = h.register(&["reoffer:t".to_string()], 4).await;
    let first = h.listen(&worker).await;
    let run = h.trigger("reoffer", "{}").await;
    let assigned = tokio::time::timeout(Duration::from_secs(5), async {
        while h.engine.stats().slots_in_use == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(assigned.is_ok(), "the task went out on the first stream");
    // The first stream breaks before the worker answered (as if the message was lost with it).
    drop(first);
    let mut second = h.listen(&worker).await;
    let again = next(&mut second).await;
    assert_eq!(again.workflow_run_id, run);
    assert_eq!(again.retry_count, 0, "the same attempt, not a retry");
}

/// The task read of `task` (status).
async fn task_status(h: &H, task: &str) -> serde_json::Value {
    let path = format!("/api/v1/stable/tasks/{task}");
    crate::parity::rest(h, reqwest::Method::GET, &path, None)
        .await
        .1["status"]
        .clone()
}

/// The run read of `run` over REST (status).
async fn run_status(h: &H, run: &str) -> serde_json::Value {
    let path = format!("/api/v1/stable/workflow-runs/{run}/status");
    crate::parity::rest(h, reqwest::Method::GET, &path, None)
        .await
        .1
}

/// The real engine records a worker's end of a task 16 to 48 ms after the worker sent it;
/// until then GetRunDetails reads the task RUNNING, without output, and its run not done, and
/// the run streams have no end (the official Python look-back scope test polls a short
/// durable task for RUNNING, and sees it only for that while).
#[tokio::test]
async fn a_task_s_end_reaches_run_details_and_the_run_streams_after_the_end_hop() {
    let h = H::new().await;
    h.engine.end_hop(Some(Duration::from_secs(10)));
    let (wid, mut actions, run, start) = h.one_started("olap", "").await;
    // The new run has come through the status pipeline: its end is a later change.
    h.engine.advance(Duration::from_secs(3));
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&run)).await;
    h.complete(&wid, &start, r#"{"x":1}"#).await;
    let running = proto::v1::RunStatus::Running as i32;
    for wait in [Duration::ZERO, Duration::from_secs(9)] {
        h.engine.advance(wait);
        let d = h.details(&run).await;
        assert_eq!(d.status, running, "{wait:?} after the end: {d:?}");
        assert!(!d.done, "{d:?}");
        assert!(
            d.task_runs
                .values()
                .all(|t| t.status == running && t.output.is_none()),
            "{d:?}"
        );
        assert_eq!(h.engine.pending_run_subscriptions(), 1, "no end out yet");
    }
    h.engine.advance(Duration::from_secs(2));
    let d = h.details(&run).await;
    assert_eq!(d.status, proto::v1::RunStatus::Completed as i32, "{d:?}");
    assert!(d.done);
    assert_eq!(next(&mut ends).await.workflow_run_id, run);
    // The kindness: the end reads at once.
    h.engine.end_hop(None);
    let second = h.trigger("olap", "{}").await;
    let start = next(&mut actions).await;
    h.complete(&wid, &start, "{}").await;
    assert!(h.details(&second).await.done);
}

/// REST reads a new run late (the real engine's OLAP tables), while its end reaches the run
/// streams as soon as the engine records it: on v0.104.9 the official Python SDK's `aio_result`
/// alone returned 19 to 54 ms after the task did, where REST read COMPLETED 1 to 2 s later.
#[tokio::test]
async fn rest_reads_pass_the_status_pipeline_and_run_ends_do_not() {
    let h = H::new().await;
    h.engine.status_lag(Some(Duration::from_secs(2)));
    h.engine.end_hop(None);
    let (wid, mut actions, run, start) = h.one_started("olap", "").await;
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&run)).await;
    h.complete(&wid, &start, r#"{"x":1}"#).await;
    // The live tables have it (GetRunDetails reads them), and so does the run stream ...
    let details = h.details(&run).await;
    assert_eq!(details.status, proto::v1::RunStatus::Completed as i32);
    let end = next(&mut ends).await;
    assert_eq!(end.workflow_run_id, run);
    assert_eq!(end.results.len(), 1);
    // ... REST does not, until the new run comes through (2 to 4 s after its creation): the
    // run reads QUEUED throughout (it never read RUNNING).
    assert_eq!(run_status(&h, &run).await, "QUEUED");
    assert_eq!(task_status(&h, &run).await, "QUEUED");
    // The engine's clock runs with the wall's too (a loaded machine adds to it): the check
    // before the lag leaves half a second of margin.
    h.engine.advance(Duration::from_millis(1_500));
    assert_eq!(run_status(&h, &run).await, "QUEUED", "not within 1.5 s");
    h.engine.advance(Duration::from_millis(2_500));
    assert_eq!(run_status(&h, &run).await, "COMPLETED");
    assert_eq!(task_status(&h, &run).await, "COMPLETED");
    // A subscription after it came through gets the end at once, once.
    let (mut late, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    assert_eq!(next(&mut late).await.workflow_run_id, run);
    assert_eq!(h.engine.pending_run_subscriptions(), 0);
    // A run the pipeline has passes its changes at once: through while it runs, then ended.
    let third = h.trigger("olap", "{}").await;
    let start = next(&mut actions).await;
    h.engine.advance(Duration::from_secs(4));
    assert_eq!(run_status(&h, &third).await, "RUNNING");
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&third)).await;
    h.complete(&wid, &start, "{}").await;
    assert_eq!(
        next(&mut ends).await.workflow_run_id,
        third,
        "without a jump"
    );
    assert_eq!(run_status(&h, &third).await, "COMPLETED");
    // With the lag off (the kindness), both read the live state at once.
    h.engine.status_lag(None);
    let second = h.trigger("olap", "{}").await;
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&second)).await;
    let start = next(&mut actions).await;
    assert_eq!(run_status(&h, &second).await, "RUNNING");
    h.complete(&wid, &start, "{}").await;
    assert_eq!(next(&mut ends).await.workflow_run_id, second);
    assert_eq!(run_status(&h, &second).await, "COMPLETED");
}

/// On the real engine a `SubscribeToWorkflowRuns` request only notes the run's id; the run is
/// answered when its end goes out (the finished-candidate message), or, had it ended already,
/// by the ticker the stream started when it opened, which lists the finished runs among those
/// noted every second (v0.104.9 `internal/services/dispatcher/server.go`).
#[tokio::test]
async fn a_subscription_of_a_run_that_had_ended_is_answered_at_the_stream_s_next_tick() {
    let h = H::new().await;
    let (wid, _actions, run, start) = h.one_started("ticked", "").await;
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&run)).await;
    let ended = Instant::now();
    h.complete(&wid, &start, "{}").await;
    assert_eq!(next(&mut ends).await.workflow_run_id, run);
    assert!(
        ended.elapsed() < Duration::from_millis(500),
        "an end after the subscription goes out at once (after the end hop)"
    );
    let asked = Instant::now();
    let (mut late, _keep_late) = h.subscribe(std::slice::from_ref(&run)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), late.next())
            .await
            .is_err(),
        "a run that had ended is not answered at once"
    );
    assert_eq!(h.engine.pending_run_subscriptions(), 1, "noted");
    assert_eq!(next(&mut late).await.workflow_run_id, run);
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(2),
        "at the stream's first tick, a second after it opened: {took:?}"
    );
    assert_eq!(h.engine.pending_run_subscriptions(), 0, "answered once");
    // The kindness the benchmarks take (`--no-status-lag`): at once.
    h.engine.status_lag(None);
    let (mut kind, _keep_kind) = h.subscribe(std::slice::from_ref(&run)).await;
    let got = tokio::time::timeout(Duration::from_millis(500), kind.next())
        .await
        .expect("at once with the lag off")
        .expect("open")
        .expect("ok");
    assert_eq!(got.workflow_run_id, run);
}

/// On virtual time a subscription waiting for its stream's tick is a client waiting on a timer:
/// the clock jumps to the tick.
#[tokio::test]
async fn on_virtual_time_the_clock_jumps_to_a_run_stream_s_tick() {
    let engine = hatchet_dev_engine::DevEngine::start(
        hatchet_dev_engine::DevEngineOptions::default().virtual_time(),
    )
    .await
    .expect("engine starts");
    let h = H::with_engine(engine).await;
    let (wid, _actions, run, start) = h.one_started("ticked", "").await;
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&run)).await;
    h.complete(&wid, &start, "{}").await;
    assert_eq!(next(&mut ends).await.workflow_run_id, run);
    let (skipped, asked) = (h.engine.skipped(), Instant::now());
    let (mut late, _keep_late) = h.subscribe(std::slice::from_ref(&run)).await;
    assert_eq!(next(&mut late).await.workflow_run_id, run);
    assert!(
        asked.elapsed() < Duration::from_millis(900),
        "{:?} of wall time",
        asked.elapsed()
    );
    assert!(
        h.engine.skipped() > skipped,
        "the clock jumped: {:?}",
        h.engine.skipped()
    );
}

/// On the real engine a child's end reaches REST tens of ms after it, so once a parent that
/// waited for its child has ended, REST reads the child ended, however new (the official Python
/// suite's `durable_child_key_duplicate_child` lists the children right after the parent's
/// result and expects them COMPLETED).
#[tokio::test]
async fn once_a_parent_s_end_is_out_rest_reads_the_children_that_ended_before_it_ended() {
    let h = H::new().await;
    h.put("parent", &[("p", &[], 0, "")], &[]).await;
    h.put("child", &[("c", &[], 0, "")], &[]).await;
    let wid = h
        .register(&["parent:p".to_string(), "child:c".to_string()], 2)
        .await;
    let mut actions = h.listen(&wid).await;
    let parent = h.trigger("parent", "{}").await;
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&parent)).await;
    let p = next(&mut actions).await;
    let child = h
        .workflows()
        .trigger_workflow(proto::v1::TriggerWorkflowRequest {
            name: "child".into(),
            input: "{}".into(),
            parent_id: Some(p.workflow_run_id.clone()),
            parent_task_run_external_id: Some(p.task_run_external_id.clone()),
            child_index: Some(0),
            ..Default::default()
        })
        .await
        .expect("child")
        .into_inner()
        .workflow_run_id;
    let c = next(&mut actions).await;
    h.complete(&wid, &c, "{}").await;
    h.complete(&wid, &p, "{}").await;
    assert_eq!(next(&mut ends).await.workflow_run_id, parent);
    assert_eq!(
        run_status(&h, &child).await,
        "COMPLETED",
        "the child, made under a second ago, reads ended once its parent's end is out"
    );
}

#[tokio::test]
async fn polled_timers_fire_at_the_next_poll_not_when_due() {
    let h = H::new().await;
    h.engine.poll_timers(Some(Duration::from_secs(10)));
    // REST is read right after each jump: the pass of the jump publishes what it read at once.
    h.engine.end_hop(None);
    let (_wid, mut actions, run, _start) = h.one_started("polled", "1s").await;
    // `advance` runs a pass before it returns: the timeout is due, the next poll is not.
    h.engine.advance(Duration::from_secs(2));
    assert_eq!(task_status(&h, &run).await, "RUNNING", "due, not read yet");
    h.engine.advance(Duration::from_secs(9));
    assert_eq!(task_status(&h, &run).await, "FAILED", "read at the poll");
    // Off again: read when due.
    h.engine.poll_timers(None);
    let second = h.trigger("polled", "{}").await;
    let _start = next(&mut actions).await;
    h.engine.advance(Duration::from_secs(2));
    assert_eq!(task_status(&h, &second).await, "FAILED");
}

/// On the real engine a retry without a backoff is queued by the statement that records the
/// failure (its `v1_task_update_function` trigger inserts into the queue): at once, not at the
/// task controller's next timer poll. A retry with a backoff waits in the retry queue, which
/// that poll reads.
#[tokio::test]
async fn a_retry_without_backoff_is_queued_at_once_and_one_with_backoff_at_the_poll() {
    let h = H::new().await;
    // Polls 10 s apart: a retry that went through them would wait seconds.
    h.engine.poll_timers(Some(Duration::from_secs(10)));
    for (name, backoff) in [("plain", None), ("backoff", Some(0.1))] {
        h.admin()
            .put_workflow(proto::v1::CreateWorkflowVersionRequest {
                name: name.into(),
                tasks: vec![proto::v1::CreateTaskOpts {
                    readable_id: "s".into(),
                    action: format!("{name}:s"),
                    retries: 1,
                    backoff_factor: backoff,
                    backoff_max_seconds: backoff.map(|_| 60),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .expect("put");
    }
    let wid = h
        .register(&["plain:s".to_string(), "backoff:s".to_string()], 2)
        .await;
    let mut actions = h.listen(&wid).await;
    let failed = proto::StepActionEventType::StepEventTypeFailed;
    h.trigger("plain", "{}").await;
    let first = next(&mut actions).await;
    h.event(&wid, &first, failed, "boom").await.expect("fail");
    let retry = tokio::time::timeout(Duration::from_secs(2), actions.next())
        .await
        .expect("the retry is assigned at once, not at the next poll")
        .expect("open")
        .expect("ok");
    assert_eq!(
        (retry.task_run_external_id, retry.retry_count),
        (first.task_run_external_id, 1)
    );
    h.trigger("backoff", "{}").await;
    let first = next(&mut actions).await;
    h.event(&wid, &first, failed, "boom").await.expect("fail");
    assert!(
        tokio::time::timeout(Duration::from_millis(1_500), actions.next())
            .await
            .is_err(),
        "its 0.1 s backoff ends between two polls: it waits for the next"
    );
    h.engine.advance(Duration::from_secs(10));
    let retry = next(&mut actions).await;
    assert_eq!(
        (retry.task_run_external_id, retry.retry_count),
        (first.task_run_external_id, 1)
    );
}

#[tokio::test]
async fn the_single_task_race_reads_queued_for_a_running_task() {
    let h = H::new().await;
    h.engine.status_lag(None);
    let (wid, _actions, run, start) = h.one_started("raced", "").await;
    assert_eq!(task_status(&h, &run).await, "RUNNING");
    h.engine.stamp_queued_late(true);
    assert_eq!(task_status(&h, &run).await, "QUEUED", "the late stamp wins");
    let path = format!("/api/v1/stable/workflow-runs/{run}/status");
    let (_, run_status) = crate::parity::rest(&h, reqwest::Method::GET, &path, None).await;
    assert_eq!(run_status, "RUNNING", "run reads are not affected");
    h.complete(&wid, &start, "{}").await;
    assert_eq!(
        task_status(&h, &run).await,
        "COMPLETED",
        "a final event wins"
    );
}
