//! More engine behaviours: reassignment of a silent worker's tasks, the legacy Listen stream,
//! bulk triggers and pushes, durable child runs, and no leak of transient state over 1,000 runs.

use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::protocol::{self as proto, StepActionEventType as E, v1};
use hatchet_runtime::{Context, Runtime, TaskError, WorkerOptions, Workflow};
use serde_json::Value;

use crate::support::{H, next};

#[tokio::test]
async fn a_silent_workers_tasks_are_reassigned_and_its_late_result_ignored() {
    let engine =
        DevEngine::start(DevEngineOptions::default().reassign_after(Duration::from_secs(1)))
            .await
            .expect("engine");
    let h = H::with_engine(engine).await;
    h.put("re", &[("t", &[], 0, "")], &[]).await;
    let a = h.register(&["re:t".into()], 1).await;
    let mut a_actions = h.listen(&a).await;
    let run = h.trigger("re", "{}").await;
    let (mut results, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    let first = next(&mut a_actions).await;
    assert_eq!(first.retry_count, 0);
    // Worker B arrives and keeps heartbeating; A goes silent.
    let b = h.register(&["re:t".into()], 1).await;
    let mut b_actions = h.listen(&b).await;
    let hb = h.keep_beating(&b, Duration::from_millis(300));
    let second = next(&mut b_actions).await;
    assert_eq!(second.task_run_external_id, first.task_run_external_id);
    assert_eq!(second.retry_count, 1, "a reassignment is a new attempt");
    h.event(&a, &first, E::StepEventTypeCompleted, r#"{"by": "a"}"#)
        .await
        .expect("late event accepted");
    h.event(&b, &second, E::StepEventTypeCompleted, r#"{"by": "b"}"#)
        .await
        .expect("completed");
    hb.abort();
    let ev = next(&mut results).await;
    assert_eq!(
        ev.results[0].output.as_deref(),
        Some(r#"{"by": "b"}"#),
        "the stale attempt's result is ignored"
    );
}

/// `ReleaseSlot` clears the task's worker link, as the real engine's release statement does
/// (`v1_task_runtime.worker_id = NULL`): when the worker goes silent its released task is not
/// reassigned (the reassignment query joins on that column) while its other task is (the
/// control that proves the reassignment ran), and the silent worker's late result still
/// completes the released one.
#[tokio::test]
async fn a_released_task_is_not_reassigned_from_a_silent_worker() {
    let engine =
        DevEngine::start(DevEngineOptions::default().reassign_after(Duration::from_secs(1)))
            .await
            .expect("engine");
    let h = H::with_engine(engine).await;
    h.put("rel", &[("t", &[], 0, "")], &[]).await;
    let a = h.register(&["rel:t".into()], 2).await;
    let mut a_actions = h.listen(&a).await;
    let runs = [h.trigger("rel", "{}").await, h.trigger("rel", "{}").await];
    let (mut results, _k) = h.subscribe(&runs).await;
    let (released, kept) = (next(&mut a_actions).await, next(&mut a_actions).await);
    h.dispatcher()
        .release_slot(proto::ReleaseSlotRequest {
            task_run_external_id: released.task_run_external_id.clone(),
        })
        .await
        .expect("release");
    let b = h.register(&["rel:t".into()], 2).await;
    let mut b_actions = h.listen(&b).await;
    let hb = h.keep_beating(&b, Duration::from_millis(300));
    let moved = next(&mut b_actions).await;
    assert_eq!(
        moved.task_run_external_id, kept.task_run_external_id,
        "the task that kept its link is reassigned"
    );
    h.event(&b, &moved, E::StepEventTypeCompleted, r#"{"by": "b"}"#)
        .await
        .expect("completed");
    h.event(&a, &released, E::StepEventTypeCompleted, r#"{"by": "a"}"#)
        .await
        .expect("completed");
    hb.abort();
    let mut outputs: Vec<(String, Option<String>)> = Vec::new();
    for _ in 0..2 {
        let ev = next(&mut results).await;
        outputs.push((ev.workflow_run_id.clone(), ev.results[0].output.clone()));
    }
    outputs.sort();
    let mut want = vec![
        (
            released.workflow_run_id.clone(),
            Some(r#"{"by": "a"}"#.to_string()),
        ),
        (
            kept.workflow_run_id.clone(),
            Some(r#"{"by": "b"}"#.to_string()),
        ),
    ];
    want.sort();
    assert_eq!(
        outputs, want,
        "the released task stayed with its first attempt"
    );
    assert!(
        b_actions.next().now_or_never().flatten().is_none(),
        "worker b got the released task too"
    );
}

#[tokio::test]
async fn the_legacy_listen_stream_needs_no_heartbeat() {
    let h = H::new().await;
    h.put("leg", &[("t", &[], 0, "")], &[]).await;
    let wid = h.register(&["leg:t".into()], 1).await;
    let mut s = h
        .dispatcher()
        .listen(proto::WorkerListenRequest {
            worker_id: wid.clone(),
        })
        .await
        .expect("listen")
        .into_inner();
    h.trigger("leg", "{}").await;
    assert_eq!(next(&mut s).await.action_id, "leg:t");
}

#[tokio::test]
async fn bulk_trigger_and_bulk_push() {
    let h = H::new().await;
    h.put("bulk", &[("t", &[], 0, "")], &["bulk:*"]).await;
    let ids = h
        .workflows()
        .bulk_trigger_workflow(proto::BulkTriggerWorkflowRequest {
            workflows: (0..3)
                .map(|i| v1::TriggerWorkflowRequest {
                    name: "bulk".into(),
                    input: format!(r#"{{"i": {i}}}"#),
                    ..Default::default()
                })
                .collect(),
        })
        .await
        .expect("bulk trigger")
        .into_inner()
        .workflow_run_ids;
    assert_eq!(ids.len(), 3);
    let details = h.details(&ids[2]).await;
    // A one-task run's input is its task's stored input, as the real engine's.
    let input: serde_json::Value = serde_json::from_slice(&details.input).expect("JSON");
    assert_eq!(
        input["input"],
        serde_json::json!({"i": 2}),
        "ids come back in request order"
    );
    let evs = h
        .events()
        .bulk_push(proto::BulkPushEventRequest {
            events: (0..2)
                .map(|i| proto::PushEventRequest {
                    key: format!("bulk:{i}"),
                    payload: "{}".into(),
                    ..Default::default()
                })
                .collect(),
        })
        .await
        .expect("bulk push")
        .into_inner()
        .events;
    assert_eq!(evs.len(), 2);
    assert_eq!(h.engine.runs_by_workflow("bulk"), 5);
    let err = h
        .events()
        .bulk_push(proto::BulkPushEventRequest { events: vec![] })
        .await
        .expect_err("empty");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn durable_trigger_runs_spawns_a_child_and_completes_with_its_output() {
    let h = H::new().await;
    h.admin()
        .put_workflow(v1::CreateWorkflowVersionRequest {
            name: "dp".into(),
            tasks: vec![v1::CreateTaskOpts {
                readable_id: "d".into(),
                action: "dp:d".into(),
                is_durable: true,
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .expect("put");
    h.put("kid", &[("k", &[], 0, "")], &[]).await;
    let wid = h.register(&["dp:d".into(), "kid:k".into()], 4).await;
    let mut actions = h.listen(&wid).await;
    h.trigger("dp", "{}").await;
    let parent = next(&mut actions).await;
    let (tx, mut resp) = h.durable_stream().await;
    use v1::durable_task_request::Message as Req;
    use v1::durable_task_response::Message as Resp;
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::TriggerRuns(v1::DurableTaskTriggerRunsRequest {
            invocation_count: 1,
            durable_task_external_id: parent.task_run_external_id.clone(),
            trigger_opts: vec![v1::TriggerWorkflowRequest {
                name: "kid".into(),
                input: r#"{"x": 1}"#.into(),
                ..Default::default()
            }],
        })),
    })
    .expect("send");
    let Some(Resp::TriggerRunsAck(ack)) = next(&mut resp).await.message else {
        panic!("trigger_runs_ack expected")
    };
    assert_eq!(ack.run_entries.len(), 1);
    let child_run = ack.run_entries[0].workflow_run_external_id.clone();
    let child = next(&mut actions).await;
    assert_eq!(child.workflow_run_id, child_run);
    assert_eq!(
        child.parent_workflow_run_id.as_deref(),
        Some(parent.task_run_external_id.as_str())
    );
    h.event(&wid, &child, E::StepEventTypeCompleted, r#"{"y": 2}"#)
        .await
        .expect("child done");
    let Some(Resp::EntryCompleted(done)) = next(&mut resp).await.message else {
        panic!("entry_completed expected")
    };
    assert_eq!(
        done.r#ref.map(|r| r.node_id),
        Some(ack.run_entries[0].node_id)
    );
    let out: Value = serde_json::from_slice(&done.payload).expect("json");
    assert_eq!(
        out["y"], 2,
        "a single-task child completes with its raw output"
    );
}

#[tokio::test]
async fn a_thousand_runs_from_one_worker_leave_no_transient_state() {
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("runtime");
    rt.register(
        Workflow::new("k").task(
            "t",
            |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
        ),
    )
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("w", 32))
        .await
        .expect("start");
    let handles: Vec<_> = rt
        .run_many(
            "k",
            &(0..1000)
                .map(|i| serde_json::json!({"i": i}))
                .collect::<Vec<_>>(),
        )
        .await;
    let waits = futures::stream::iter(
        handles
            .into_iter()
            .map(|h| async move { h.expect("trigger").outputs().await }),
    )
    .buffer_unordered(1000)
    .collect::<Vec<_>>()
    .await;
    assert!(waits.iter().all(Result::is_ok));
    let s = engine.stats();
    assert_eq!(
        (
            s.runs,
            s.queued,
            s.pending_run_subscriptions,
            s.slots_in_use,
            s.event_subscriptions
        ),
        (1000, 0, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(rt.pending_runs(), 0);
    rt.shutdown(Duration::from_secs(1)).await;
}
