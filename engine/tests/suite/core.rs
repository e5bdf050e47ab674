//! The development engine's semantics, driven through the generated clients.

use std::time::Duration;

use futures::StreamExt as _;
use hatchet_runtime::protocol::{self as proto, ActionType, StepActionEventType as E, v1};
use tonic::Code;

use crate::support::{H, next};

#[tokio::test]
async fn calls_without_the_token_are_unauthenticated() {
    let h = H::new().await;
    let mut anon = proto::dispatcher_client::DispatcherClient::new(h.channel.clone());
    let err = anon
        .get_version(proto::GetVersionRequest {})
        .await
        .expect_err("no token");
    assert_eq!(err.code(), Code::Unauthenticated);
    // Streams too.
    let err = anon
        .listen_v2(proto::WorkerListenRequest {
            worker_id: uuid::Uuid::new_v4().to_string(),
        })
        .await
        .expect_err("no token");
    assert_eq!(err.code(), Code::Unauthenticated);
    // With it, GetVersion reports a version recent enough for slot_config and DurableTask.
    let v = h
        .dispatcher()
        .get_version(proto::GetVersionRequest {})
        .await
        .expect("version")
        .into_inner()
        .version;
    assert_eq!(v, "v0.94.16");
    // Attempts are counted at the boundary, authorized or not.
    assert_eq!(h.engine.faults().attempts("/Dispatcher/GetVersion"), 2);
}

#[tokio::test]
async fn a_worker_runs_a_task_and_the_result_reaches_subscribers_once() {
    let h = H::new().await;
    h.put("echo", &[("echo", &[], 0, "")], &[]).await;
    let wid = h.register(&["echo:echo".into()], 4).await;
    let mut actions = h.listen(&wid).await;
    let run = h.trigger("echo", r#"{"n": 7}"#).await;
    let (mut results, _keep) = h.subscribe(&[run.clone(), run.clone()]).await;

    let a = next(&mut actions).await;
    assert_eq!(a.action_type, ActionType::StartStepRun as i32);
    assert_eq!(a.action_id, "echo:echo");
    assert_eq!(a.workflow_run_id, run);
    assert_eq!(
        a.task_run_external_id, run,
        "a single-task run shares its id with its task"
    );
    assert_eq!(a.retry_count, 0);
    let payload: serde_json::Value =
        serde_json::from_str(&a.action_payload).expect("payload is JSON");
    assert_eq!(payload["input"]["n"], 7);
    assert_eq!(payload["triggered_by"], "manual");

    h.event(&wid, &a, E::StepEventTypeStarted, "")
        .await
        .expect("started");
    h.event(&wid, &a, E::StepEventTypeCompleted, r#"{"echoed": 7}"#)
        .await
        .expect("completed");
    // A late STARTED and a duplicate COMPLETED change nothing.
    h.event(&wid, &a, E::StepEventTypeStarted, "")
        .await
        .expect("late started accepted");
    h.event(&wid, &a, E::StepEventTypeCompleted, r#"{"echoed": 8}"#)
        .await
        .expect("duplicate accepted");

    let ev = next(&mut results).await;
    assert_eq!(ev.workflow_run_id, run);
    assert_eq!(ev.results.len(), 1);
    assert_eq!(ev.results[0].task_name, "echo");
    assert_eq!(ev.results[0].output.as_deref(), Some(r#"{"echoed": 7}"#));
    // Duplicate subscriptions on one stream collapse into one delivery.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), results.next())
            .await
            .is_err(),
        "delivered once"
    );

    // Subscribing after the run finished still delivers it.
    let (mut late, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    assert_eq!(next(&mut late).await.workflow_run_id, run);

    let details = h.details(&run).await;
    assert!(details.done);
    assert_eq!(details.status, v1::RunStatus::Completed as i32);
    assert_eq!(
        details.task_runs["echo"].output.as_deref(),
        Some(br#"{"echoed": 7}"#.as_slice())
    );
}

#[tokio::test]
async fn failures_retry_with_a_new_retry_count_and_stale_events_are_ignored() {
    let h = H::new().await;
    h.put("flaky", &[("step", &[], 1, "")], &[]).await;
    let wid = h.register(&["flaky:step".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    let run = h.trigger("flaky", "{}").await;
    let (mut results, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    let a0 = next(&mut actions).await;
    h.event(&wid, &a0, E::StepEventTypeFailed, "boom")
        .await
        .expect("failed");
    let a1 = next(&mut actions).await;
    assert_eq!(a1.task_run_external_id, a0.task_run_external_id);
    assert_eq!(a1.retry_count, 1);
    // The old attempt's completion is stale.
    h.event(&wid, &a0, E::StepEventTypeCompleted, r#"{"old": true}"#)
        .await
        .expect("stale accepted");
    h.event(&wid, &a1, E::StepEventTypeCompleted, r#"{"new": true}"#)
        .await
        .expect("completed");
    let ev = next(&mut results).await;
    assert_eq!(ev.results[0].output.as_deref(), Some(r#"{"new": true}"#));
}

#[tokio::test]
async fn should_not_retry_and_invalid_json_outputs_fail_the_run() {
    let h = H::new().await;
    h.put("strict", &[("step", &[], 3, "")], &[]).await;
    let wid = h.register(&["strict:step".into()], 2).await;
    let mut actions = h.listen(&wid).await;
    let run = h.trigger("strict", "{}").await;
    let (mut results, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    let a = next(&mut actions).await;
    let mut d = h.dispatcher();
    d.send_step_action_event(proto::StepActionEvent {
        worker_id: wid.clone(),
        task_run_external_id: a.task_run_external_id.clone(),
        event_type: E::StepEventTypeFailed as i32,
        event_payload: "fatal".into(),
        retry_count: Some(0),
        should_not_retry: Some(true),
        ..Default::default()
    })
    .await
    .expect("event");
    let ev = next(&mut results).await;
    assert_eq!(ev.results[0].error.as_deref(), Some("fatal"));

    // An output that is not JSON becomes a failure (retried: this workflow has retries).
    h.put("badjson", &[("step", &[], 0, "")], &[]).await;
    let wid2 = h.register(&["badjson:step".into()], 1).await;
    let mut actions2 = h.listen(&wid2).await;
    let run2 = h.trigger("badjson", "{}").await;
    let (mut results2, _k2) = h.subscribe(std::slice::from_ref(&run2)).await;
    let a2 = next(&mut actions2).await;
    h.event(&wid2, &a2, E::StepEventTypeCompleted, "not json")
        .await
        .expect("accepted");
    let ev = next(&mut results2).await;
    assert!(
        ev.results[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not valid JSON")),
        "{ev:?}"
    );
}

#[tokio::test]
async fn dag_children_read_their_parents_outputs() {
    let h = H::new().await;
    h.put(
        "dag",
        &[
            ("a", &[], 0, ""),
            ("b", &[], 0, ""),
            ("c", &["a", "b"], 0, ""),
        ],
        &[],
    )
    .await;
    let wid = h
        .register(&["dag:a".into(), "dag:b".into(), "dag:c".into()], 10)
        .await;
    let mut actions = h.listen(&wid).await;
    let run = h.trigger("dag", "{}").await;
    let (mut results, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    for _ in 0..2 {
        let a = next(&mut actions).await;
        assert_ne!(a.task_name, "c", "c waits for its parents");
        h.event(
            &wid,
            &a,
            E::StepEventTypeCompleted,
            &format!(r#"{{"from": "{}"}}"#, a.task_name),
        )
        .await
        .expect("done");
    }
    let c = next(&mut actions).await;
    assert_eq!(c.task_name, "c");
    assert_eq!(c.workflow_run_id, run);
    assert_ne!(c.task_run_external_id, run, "DAG tasks have their own ids");
    let payload: serde_json::Value = serde_json::from_str(&c.action_payload).expect("json");
    assert_eq!(payload["parents"]["a"]["from"], "a");
    assert_eq!(payload["parents"]["b"]["from"], "b");
    h.event(&wid, &c, E::StepEventTypeCompleted, "{}")
        .await
        .expect("done");
    assert_eq!(next(&mut results).await.results.len(), 3);
}

#[tokio::test]
async fn slots_bound_assignment() {
    let h = H::new().await;
    h.put("slow", &[("s", &[], 0, "")], &[]).await;
    let wid = h.register(&["slow:s".into()], 2).await;
    let mut actions = h.listen(&wid).await;
    for _ in 0..3 {
        h.trigger("slow", "{}").await;
    }
    let a = next(&mut actions).await;
    let _b = next(&mut actions).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(400), actions.next())
            .await
            .is_err(),
        "third waits for a slot"
    );
    h.event(&wid, &a, E::StepEventTypeCompleted, "{}")
        .await
        .expect("done");
    let _c = next(&mut actions).await;
}

#[tokio::test]
async fn timeouts_send_cancel_step_run() {
    let h = H::new().await;
    h.put("sleepy", &[("s", &[], 0, "1s")], &[]).await;
    let wid = h.register(&["sleepy:s".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    let run = h.trigger("sleepy", "{}").await;
    let (mut results, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    let start = next(&mut actions).await;
    // Keep the worker alive while the task times out.
    let hb = h.keep_beating(&wid, Duration::from_millis(500));
    let cancel = next(&mut actions).await;
    hb.abort();
    assert_eq!(cancel.action_type, ActionType::CancelStepRun as i32);
    assert_eq!(cancel.task_run_external_id, start.task_run_external_id);
    let ev = next(&mut results).await;
    assert!(
        ev.results[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("Task exceeded timeout of ")),
        "the real engine's words: {:?}",
        ev.results[0].error
    );
}

#[tokio::test]
async fn heartbeat_rejections_follow_the_engine() {
    let h = H::new().await;
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        h.heartbeat(&unknown).await.expect_err("unknown").code(),
        Code::NotFound
    );
    assert_eq!(
        h.heartbeat("not-a-uuid").await.expect_err("bad id").code(),
        Code::InvalidArgument
    );
    let wid = h.register(&["x:y".into()], 1).await;
    h.heartbeat(&wid)
        .await
        .expect("a heartbeat before any listen is accepted");
    let stream = h.listen(&wid).await;
    drop(stream);
    // Once the worker's only stream is gone, heartbeats are refused.
    let mut refused = false;
    for _ in 0..50 {
        if let Err(e) = h.heartbeat(&wid).await {
            assert_eq!(e.code(), Code::FailedPrecondition);
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "heartbeat must fail once the stream is gone");
}

#[tokio::test]
async fn child_triggers_dedupe_and_idempotency_keys_collide() {
    let h = H::new().await;
    h.put("parent", &[("p", &[], 0, "")], &[]).await;
    h.put("child", &[("c", &[], 0, "")], &[]).await;
    let wid = h.register(&["parent:p".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    h.trigger("parent", "{}").await;
    let p = next(&mut actions).await;
    let child = |i: i32| v1::TriggerWorkflowRequest {
        name: "child".into(),
        input: "{}".into(),
        parent_id: Some(p.workflow_run_id.clone()),
        parent_task_run_external_id: Some(p.task_run_external_id.clone()),
        child_index: Some(i),
        ..Default::default()
    };
    let mut w = h.workflows();
    let first = w
        .trigger_workflow(child(0))
        .await
        .expect("child")
        .into_inner()
        .workflow_run_id;
    let again = w
        .trigger_workflow(child(0))
        .await
        .expect("child again")
        .into_inner()
        .workflow_run_id;
    let other = w
        .trigger_workflow(child(1))
        .await
        .expect("child 1")
        .into_inner()
        .workflow_run_id;
    assert_eq!(first, again, "same parent and index: the existing run");
    assert_ne!(first, other);
    assert_eq!(h.engine.runs_by_workflow("child"), 2);

    // Workflow idempotency: a second trigger with the same key is ALREADY_EXISTS + detail.
    h.admin()
        .put_workflow(v1::CreateWorkflowVersionRequest {
            name: "orders".into(),
            tasks: vec![v1::CreateTaskOpts {
                readable_id: "o".into(),
                action: "orders:o".into(),
                ..Default::default()
            }],
            idempotency: Some(v1::IdempotencyConfig {
                expression: "input.order_id".into(),
                ttl_ms: 60_000,
                method: None,
            }),
            ..Default::default()
        })
        .await
        .expect("put");
    let existing = h.trigger("orders", r#"{"order_id": "A-1"}"#).await;
    let err = w
        .trigger_workflow(v1::TriggerWorkflowRequest {
            name: "orders".into(),
            input: r#"{"order_id": "A-1"}"#.into(),
            ..Default::default()
        })
        .await
        .expect_err("collision");
    assert_eq!(err.code(), Code::AlreadyExists);
    assert_eq!(err.message(), "idempotency key collision");
    let detail = proto::idempotency_collision(&err).expect("detail decodes");
    assert_eq!(detail.existing_run_external_id, existing);
    h.trigger("orders", r#"{"order_id": "A-2"}"#).await;
}

#[tokio::test]
async fn events_trigger_workflows_with_wildcards() {
    let h = H::new().await;
    h.put("on-order", &[("t", &[], 0, "")], &["order:*"]).await;
    let wid = h.register(&["on-order:t".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    let ev = h
        .events()
        .push(proto::PushEventRequest {
            key: "order:created".into(),
            payload: r#"{"id": 3}"#.into(),
            ..Default::default()
        })
        .await
        .expect("push")
        .into_inner();
    assert!(!ev.event_id.is_empty());
    let a = next(&mut actions).await;
    let payload: serde_json::Value = serde_json::from_str(&a.action_payload).expect("json");
    assert_eq!(payload["input"]["id"], 3, "the event payload is the input");
    assert_eq!(a.triggering_event_key.as_deref(), Some("order:created"));
    // A key that does not match triggers nothing.
    h.events()
        .push(proto::PushEventRequest {
            key: "user:created".into(),
            payload: "{}".into(),
            ..Default::default()
        })
        .await
        .expect("push");
    assert_eq!(h.engine.runs_by_workflow("on-order"), 1);
}

#[tokio::test]
async fn workflow_events_stream_by_run_and_by_metadata_with_hangup() {
    let h = H::new().await;
    h.put("ev", &[("t", &[], 0, "")], &[]).await;
    let wid = h.register(&["ev:t".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    let run = h
        .workflows()
        .trigger_workflow(v1::TriggerWorkflowRequest {
            name: "ev".into(),
            input: "{}".into(),
            additional_metadata: Some(r#"{"batch": "b1"}"#.into()),
            ..Default::default()
        })
        .await
        .expect("trigger")
        .into_inner()
        .workflow_run_id;
    let mut by_run = h
        .dispatcher()
        .subscribe_to_workflow_events(proto::SubscribeToWorkflowEventsRequest {
            workflow_run_id: Some(run.clone()),
            ..Default::default()
        })
        .await
        .expect("sub")
        .into_inner();
    let a = next(&mut actions).await;
    h.events()
        .put_stream_event(proto::PutStreamEventRequest {
            task_run_external_id: a.task_run_external_id.clone(),
            message: b"chunk-1".to_vec(),
            event_index: Some(0),
            ..Default::default()
        })
        .await
        .expect("stream event");
    h.event(&wid, &a, E::StepEventTypeCompleted, r#"{"ok": 1}"#)
        .await
        .expect("done");
    let mut seen = Vec::new();
    while let Some(Ok(ev)) = tokio::time::timeout(Duration::from_secs(5), by_run.next())
        .await
        .expect("in time")
    {
        seen.push((
            ev.resource_type,
            ev.event_type,
            ev.event_payload.clone(),
            ev.hangup,
        ));
    }
    use proto::{ResourceEventType as K, ResourceType as T};
    assert!(
        seen.contains(&(T::StepRun as i32, K::Stream as i32, "chunk-1".into(), false)),
        "{seen:?}"
    );
    assert!(seen.contains(&(
        T::StepRun as i32,
        K::Completed as i32,
        r#"{"ok": 1}"#.into(),
        false
    )));
    assert_eq!(
        seen.last().map(|e| (e.0, e.1, e.3)),
        Some((T::WorkflowRun as i32, K::Completed as i32, true))
    );
    // A finished run's stream ends at once.
    let mut done = h
        .dispatcher()
        .subscribe_to_workflow_events(proto::SubscribeToWorkflowEventsRequest {
            workflow_run_id: Some(run),
            ..Default::default()
        })
        .await
        .expect("sub")
        .into_inner();
    assert!(done.next().await.is_none());
    // Neither or both modes is INVALID_ARGUMENT.
    let err = h
        .dispatcher()
        .subscribe_to_workflow_events(proto::SubscribeToWorkflowEventsRequest::default())
        .await
        .expect_err("bad");
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn garbage_inputs_get_clear_errors_and_never_panic_the_engine() {
    let h = H::new().await;
    h.put("g", &[("t", &[], 0, "")], &[]).await;
    let mut w = h.workflows();
    let bad_json = w
        .trigger_workflow(v1::TriggerWorkflowRequest {
            name: "g".into(),
            input: "{not json".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad input");
    assert_eq!(bad_json.code(), Code::InvalidArgument);
    // In the real engine's words (it names a trigger's input `payload`).
    assert_eq!(
        bad_json.message(),
        "Invalid request: invalid json in field `payload`"
    );
    // As the real engine answers it: an id no run has (the runtime's wait then ends not found).
    let unknown = w
        .trigger_workflow(v1::TriggerWorkflowRequest {
            name: "nope".into(),
            input: "{}".into(),
            ..Default::default()
        })
        .await
        .expect("an unknown workflow's trigger is answered")
        .into_inner()
        .workflow_run_id;
    assert!(uuid::Uuid::parse_str(&unknown).is_ok());
    assert_eq!(h.engine.stats().queued, 0, "and creates nothing");
    let mut d = h.dispatcher();
    let ev = d
        .send_step_action_event(proto::StepActionEvent {
            task_run_external_id: "zzz".into(),
            event_type: 2,
            ..Default::default()
        })
        .await
        .expect_err("bad id");
    assert_eq!(ev.code(), Code::InvalidArgument);
    let reg = d
        .register(proto::WorkerRegisterRequest {
            worker_name: "bad name!".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad name");
    assert_eq!(reg.code(), Code::InvalidArgument);
    let both = d
        .register(proto::WorkerRegisterRequest {
            worker_name: "w".into(),
            slots: Some(1),
            slot_config: [("default".to_string(), 1)].into(),
            ..Default::default()
        })
        .await
        .expect_err("both");
    assert_eq!(both.code(), Code::InvalidArgument);
    let empty = h
        .admin()
        .put_workflow(v1::CreateWorkflowVersionRequest::default())
        .await
        .expect_err("empty");
    assert_eq!(empty.code(), Code::InvalidArgument);
    // Call buffers start at 1 KiB (hatchet_runtime::protocol::codec): a message of 3 MiB each way grows
    // them, and arrives whole.
    let large = format!("\"{}\"", "y".repeat(3 * 1024 * 1024));
    assert!(large.len() > 1000 * proto::codec::CALL_BUFFER_BYTES);
    let echoed = h
        .events()
        .push(proto::PushEventRequest {
            key: "k".into(),
            payload: large.clone(),
            ..Default::default()
        })
        .await
        .expect("a 3 MiB event is under the limit")
        .into_inner();
    assert!(echoed.payload == large, "the payload comes back whole");
    // A message over 4 MiB is refused, and the engine keeps serving.
    let big = "x".repeat(5 * 1024 * 1024);
    let err = h
        .events()
        .push(proto::PushEventRequest {
            key: "k".into(),
            payload: format!("\"{big}\""),
            ..Default::default()
        })
        .await
        .expect_err("too big");
    assert!(
        matches!(
            err.code(),
            Code::ResourceExhausted | Code::OutOfRange | Code::Internal | Code::Unknown
        ),
        "{err:?}"
    );
    // Raw garbage bytes on the wire: a frame that is not a valid message.
    let garbage = h.channel.clone();
    let mut raw = tonic::client::Grpc::new(garbage);
    raw.ready().await.expect("ready");
    let mut req = tonic::Request::new(bytes_msg(vec![0xff, 0xff, 0xff, 0x0f, 0x01]));
    req.metadata_mut()
        .insert("authorization", h_bearer(&h).parse().expect("ascii"));
    let path = http::uri::PathAndQuery::from_static("/Dispatcher/Register");
    let r: Result<tonic::Response<proto::WorkerRegisterResponse>, _> = raw
        .unary(req, path, tonic_prost::ProstCodec::default())
        .await;
    assert!(r.is_err(), "garbage is refused");
    assert_eq!(
        h.dispatcher()
            .get_version(proto::GetVersionRequest {})
            .await
            .expect("still serving")
            .into_inner()
            .version,
        "v0.94.16"
    );
}

/// A message whose encoding is the given raw bytes.
#[derive(Clone, PartialEq, Default)]
struct RawBytes(Vec<u8>);

impl std::fmt::Debug for RawBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawBytes({})", self.0.len())
    }
}

impl prost::Message for RawBytes {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        _tag: u32,
        _wt: prost::encoding::WireType,
        _buf: &mut impl prost::bytes::Buf,
        _ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        Ok(())
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

fn bytes_msg(b: Vec<u8>) -> RawBytes {
    RawBytes(b)
}

fn h_bearer(h: &H) -> String {
    let lines = h.engine.client_config().env_lines();
    format!("Bearer {}", lines[0].1)
}

#[tokio::test]
async fn restart_keeps_state_and_ports_and_workers_see_eof() {
    let h = H::new().await;
    h.put("r", &[("t", &[], 0, "")], &[]).await;
    let wid = h.register(&["r:t".into()], 1).await;
    let mut actions = h.listen(&wid).await;
    let port = h.engine.grpc_addr().port();
    h.engine.restart().await.expect("restart");
    assert_eq!(h.engine.grpc_addr().port(), port);
    // The worker's stream ended (EOF or a reset).
    let end = tokio::time::timeout(Duration::from_secs(5), actions.next())
        .await
        .expect("ends in time");
    assert!(matches!(end, None | Some(Err(_))), "{end:?}");
    // The workflow is still known and the worker can listen again with the same id.
    let mut actions = h.listen(&wid).await;
    let run = h.trigger("r", "{}").await;
    assert_eq!(next(&mut actions).await.workflow_run_id, run);
}

#[tokio::test]
async fn a_full_worker_takes_the_queue_in_order_one_completion_one_assignment() {
    // The assignment pass stops once no slot is free; what waits keeps its order.
    let h = H::new().await;
    h.put("fifo", &[("t", &[], 0, "")], &[]).await;
    let worker = h.register(&["fifo:t".to_string()], 2).await;
    let mut actions = h.listen(&worker).await;
    let mut runs = Vec::new();
    for i in 0..50 {
        runs.push(h.trigger("fifo", &format!("{{\"i\":{i}}}")).await);
    }
    let first = next(&mut actions).await;
    let second = next(&mut actions).await;
    assert_eq!(
        (
            first.workflow_run_id.as_str(),
            second.workflow_run_id.as_str()
        ),
        (runs[0].as_str(), runs[1].as_str()),
        "the two free slots take the two oldest runs"
    );
    let stats = h.engine.stats();
    assert_eq!(
        (stats.slots_in_use, stats.queued),
        (2, 48),
        "nothing more while both slots are taken"
    );
    h.event(&worker, &first, E::StepEventTypeCompleted, "{}")
        .await
        .expect("complete");
    let third = next(&mut actions).await;
    assert_eq!(
        third.workflow_run_id, runs[2],
        "the next in line, not any queued run"
    );
    assert_eq!(h.engine.stats().queued, 47);
}

#[tokio::test]
async fn the_dashboard_page_needs_no_token_and_its_data_needs_a_key_that_opens_nothing_else() {
    let h = H::new().await;
    h.put("shown", &[("t", &[], 0, "")], &[]).await;
    let run = h.trigger("shown", "{}").await;
    let http = crate::faults::reqwest_client();
    let base = h.engine.api_url();
    let page = http
        .get(format!("{base}/dashboard"))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    assert!(
        page.text()
            .await
            .expect("html")
            .contains("hatchet-dev-engine")
    );
    let anon = http
        .get(format!("{base}/_dev/dashboard.json"))
        .send()
        .await
        .expect("data");
    assert_eq!(anon.status(), 401, "the data needs the token");
    let url = h.engine.dashboard_url();
    let token = url.split_once("#token=").expect("fragment").1;
    let data: serde_json::Value = http
        .get(format!("{base}/_dev/dashboard.json"))
        .bearer_auth(token)
        .send()
        .await
        .expect("data")
        .json()
        .await
        .expect("json");
    assert_eq!(data["runs"][0]["id"], run);
    assert_eq!(data["runs"][0]["workflow"], "shown");
    assert_eq!(data["runs"][0]["tasks"][0]["status"], "QUEUED");
    // The URL (printed by the quickstart, so in CI's log) carries the dashboard's key, not the
    // engine's token, and the key opens nothing but that read (invariant 1).
    let secret = h.engine.token().expose();
    assert!(
        !url.contains(secret),
        "the dashboard URL must not carry the engine's token"
    );
    assert_ne!(token, secret);
    let tenant = h.engine.tenant_id().to_string();
    for (method, path) in [
        (
            reqwest::Method::GET,
            format!("/api/v1/tenants/{tenant}/worker"),
        ),
        (reqwest::Method::GET, "/_dev/counters".to_string()),
        (
            reqwest::Method::POST,
            "/_dev/advance?seconds=60".to_string(),
        ),
        (reqwest::Method::POST, "/_dev/dashboard.json".to_string()),
    ] {
        let with_key = http
            .request(method.clone(), format!("{base}{path}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("answer");
        assert_eq!(
            with_key.status(),
            401,
            "{method} {path} with the dashboard's key"
        );
    }
    assert_eq!(
        h.engine.skipped(),
        std::time::Duration::ZERO,
        "the clock did not move"
    );
    let by_key =
        hatchet_dev_engine::clients::RawClients::new(&h.engine.client_config().grpc_uri(), token)
            .expect("clients");
    let refused = by_key
        .put_tasks("by-key", &[("t", &[], 0, "")], &[])
        .await
        .expect_err("gRPC with the dashboard's key");
    assert_eq!(refused.code(), Code::Unauthenticated);
    let with_token = http
        .get(format!("{base}/_dev/dashboard.json"))
        .bearer_auth(secret)
        .send()
        .await
        .expect("data");
    assert_eq!(with_token.status(), 200, "the engine's token reads it too");
}
