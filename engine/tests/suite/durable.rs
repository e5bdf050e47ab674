//! The DurableTask stream and the legacy durable-event path of the development engine.

use std::time::Duration;

use hatchet_runtime::protocol::{self as proto, StepActionEventType as E, v1};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::support::{H, next};
use v1::durable_task_request::Message as Req;
use v1::durable_task_response::Message as Resp;

async fn durable_worker(h: &H, wf: &str) -> (String, tonic::Streaming<proto::AssignedAction>) {
    durable_worker_retrying(h, wf, 0).await
}

/// A worker of workflow `wf`, one durable task `d` with `retries`.
async fn durable_worker_retrying(
    h: &H,
    wf: &str,
    retries: i32,
) -> (String, tonic::Streaming<proto::AssignedAction>) {
    h.admin()
        .put_workflow(v1::CreateWorkflowVersionRequest {
            name: wf.into(),
            tasks: vec![v1::CreateTaskOpts {
                readable_id: "d".into(),
                action: format!("{wf}:d"),
                is_durable: true,
                retries,
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .expect("put");
    let wid = h
        .dispatcher()
        .register(proto::WorkerRegisterRequest {
            worker_name: "durable-worker".into(),
            actions: vec![format!("{wf}:d")],
            slot_config: [("default".to_string(), 5), ("durable".to_string(), 5)].into(),
            ..Default::default()
        })
        .await
        .expect("register")
        .into_inner()
        .worker_id;
    let actions = h.listen(&wid).await;
    (wid, actions)
}

fn sleep_wait(task: &str, invocation: i32, key: &str, dur: &str) -> v1::DurableTaskRequest {
    v1::DurableTaskRequest {
        message: Some(Req::WaitFor(v1::DurableTaskWaitForRequest {
            invocation_count: invocation,
            durable_task_external_id: task.into(),
            wait_for_conditions: Some(v1::DurableEventListenerConditions {
                sleep_conditions: vec![v1::SleepMatchCondition {
                    base: Some(v1::BaseMatchCondition {
                        readable_data_key: key.into(),
                        or_group_id: uuid::Uuid::new_v4().to_string(),
                        ..Default::default()
                    }),
                    sleep_for: dur.into(),
                }],
                user_event_conditions: vec![],
            }),
            label: None,
        })),
    }
}

fn event_wait(task: &str, invocation: i32, key: &str) -> v1::DurableTaskRequest {
    v1::DurableTaskRequest {
        message: Some(Req::WaitFor(v1::DurableTaskWaitForRequest {
            invocation_count: invocation,
            durable_task_external_id: task.into(),
            wait_for_conditions: Some(v1::DurableEventListenerConditions {
                sleep_conditions: vec![],
                user_event_conditions: vec![v1::UserEventMatchCondition {
                    base: Some(v1::BaseMatchCondition {
                        readable_data_key: key.into(),
                        or_group_id: uuid::Uuid::new_v4().to_string(),
                        ..Default::default()
                    }),
                    user_event_key: key.into(),
                    ..Default::default()
                }],
            }),
            label: None,
        })),
    }
}

async fn recv(s: &mut tonic::Streaming<v1::DurableTaskResponse>) -> Resp {
    next(s).await.message.expect("a message")
}

#[tokio::test]
async fn sleep_and_event_waits_complete_and_replays_reuse_nodes() {
    let h = H::new().await;
    let (wid, mut actions) = durable_worker(&h, "dur").await;
    let run = h.trigger("dur", "{}").await;
    let a = next(&mut actions).await;
    assert_eq!(a.durable_task_invocation_count, Some(1));
    let task = a.task_run_external_id.clone();

    let (tx, mut resp) = h.durable_stream().await;
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::RegisterWorker(v1::DurableTaskRequestRegisterWorker {
            worker_id: wid.clone(),
        })),
    })
    .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::RegisterWorker(r) if r.worker_id == wid));

    // Node 1: a 1 s sleep.
    tx.send(sleep_wait(&task, 1, "sleep:1s", "1s"))
        .expect("send");
    let Resp::WaitForAck(ack) = recv(&mut resp).await else {
        panic!("wait ack expected")
    };
    let r = ack.r#ref.expect("ref");
    assert_eq!((r.node_id, r.branch_id, r.invocation_count), (1, 1, 1));
    let Resp::EntryCompleted(done) = recv(&mut resp).await else {
        panic!("completion expected")
    };
    assert_eq!(done.r#ref.as_ref().map(|r| r.node_id), Some(1));
    let payload: serde_json::Value = serde_json::from_slice(&done.payload).expect("json");
    assert_eq!(payload["CREATE"]["sleep:1s"][0]["sleep_duration"], "1s");

    // Node 2: a user event.
    tx.send(event_wait(&task, 1, "user:ping")).expect("send");
    let Resp::WaitForAck(ack) = recv(&mut resp).await else {
        panic!("wait ack expected")
    };
    assert_eq!(ack.r#ref.map(|r| r.node_id), Some(2));
    h.events()
        .push(proto::PushEventRequest {
            key: "user:ping".into(),
            payload: r#"{"v": 1}"#.into(),
            ..Default::default()
        })
        .await
        .expect("push");
    let Resp::EntryCompleted(done) = recv(&mut resp).await else {
        panic!("completion expected")
    };
    let payload: serde_json::Value = serde_json::from_slice(&done.payload).expect("json");
    assert_eq!(payload["CREATE"]["user:ping"][0]["v"], 1);

    // worker_status re-sends a satisfied entry (the recovery path for lost completions).
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::WorkerStatus(v1::DurableTaskWorkerStatusRequest {
            worker_id: wid.clone(),
            waiting_entries: vec![v1::DurableTaskAwaitedCompletedEntry {
                durable_task_external_id: task.clone(),
                branch_id: 1,
                node_id: 2,
                invocation_count: 1,
            }],
        })),
    })
    .expect("send");
    assert!(
        matches!(recv(&mut resp).await, Resp::EntryCompleted(c) if c.r#ref.as_ref().map(|r| r.node_id) == Some(2))
    );

    // A stale invocation is evicted, not acked.
    tx.send(sleep_wait(&task, 0, "sleep:1s", "1s"))
        .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::ServerEvict(e) if e.invocation_count == 0));

    // Memo: the first call stores, the replay of the same key returns the value.
    let memo = |payload: Option<Vec<u8>>| v1::DurableTaskRequest {
        message: Some(Req::Memo(v1::DurableTaskMemoRequest {
            invocation_count: 1,
            durable_task_external_id: task.clone(),
            key: b"now".to_vec(),
            payload,
        })),
    };
    tx.send(memo(Some(b"\"t0\"".to_vec()))).expect("send");
    let Resp::MemoAck(m) = recv(&mut resp).await else {
        panic!("memo ack expected")
    };
    assert_eq!(m.memo_result_payload.as_deref(), Some(b"\"t0\"".as_slice()));

    h.event(&wid, &a, E::StepEventTypeCompleted, "{}")
        .await
        .expect("complete");
    let (mut results, _k) = h.subscribe(std::slice::from_ref(&run)).await;
    assert_eq!(next(&mut results).await.workflow_run_id, run);
}

#[tokio::test]
async fn a_nondeterministic_replay_is_reported() {
    let h = H::new().await;
    let (wid, mut actions) = durable_worker(&h, "nd").await;
    h.trigger("nd", "{}").await;
    let a = next(&mut actions).await;
    let task = a.task_run_external_id.clone();
    let (tx, mut resp) = h.durable_stream().await;
    tx.send(sleep_wait(&task, 1, "sleep:60s", "60s"))
        .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::WaitForAck(_)));
    // Evict, get re-assigned (invocation 2), then replay a different operation at node 1.
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::EvictInvocation(
            v1::DurableTaskEvictInvocationRequest {
                invocation_count: 1,
                durable_task_external_id: task.clone(),
                reason: Some("test".into()),
            },
        )),
    })
    .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::EvictionAck(e) if e.invocation_count == 1));
    assert!(h.restore(&task).await);
    let again = next(&mut actions).await;
    assert_eq!(again.durable_task_invocation_count, Some(2));
    let _ = wid;
    tx.send(event_wait(&task, 2, "user:other")).expect("send");
    let Resp::Error(e) = recv(&mut resp).await else {
        panic!("error expected")
    };
    assert_eq!(
        e.error_type,
        v1::DurableTaskErrorType::Nondeterminism as i32
    );
}

#[tokio::test]
async fn legacy_durable_events_are_delivered() {
    let h = H::new().await;
    let (_wid, mut actions) = durable_worker(&h, "leg").await;
    h.trigger("leg", "{}").await;
    let a = next(&mut actions).await;
    let task = a.task_run_external_id.clone();
    h.durable()
        .register_durable_event(v1::RegisterDurableEventRequest {
            task_id: task.clone(),
            signal_key: "s1".into(),
            conditions: Some(v1::DurableEventListenerConditions {
                sleep_conditions: vec![v1::SleepMatchCondition {
                    base: Some(v1::BaseMatchCondition {
                        readable_data_key: "nap".into(),
                        or_group_id: uuid::Uuid::new_v4().to_string(),
                        ..Default::default()
                    }),
                    sleep_for: "250ms".into(),
                }],
                user_event_conditions: vec![],
            }),
        })
        .await
        .expect("register");
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(v1::ListenForDurableEventRequest {
        task_id: task.clone(),
        signal_key: "s1".into(),
    })
    .expect("send");
    let mut s = h
        .durable()
        .listen_for_durable_event(UnboundedReceiverStream::new(rx))
        .await
        .expect("listen")
        .into_inner();
    let ev = tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut s))
        .await
        .expect("in time")
        .expect("open")
        .expect("ok");
    assert_eq!(
        (ev.task_id.as_str(), ev.signal_key.as_str()),
        (task.as_str(), "s1")
    );
    let data: serde_json::Value = serde_json::from_slice(&ev.data).expect("json");
    assert_eq!(data["CREATE"]["nap"][0]["sleep_duration"], "250ms");
    // A bad or_group_id is INVALID_ARGUMENT.
    let err = h
        .durable()
        .register_durable_event(v1::RegisterDurableEventRequest {
            task_id: task,
            signal_key: "s2".into(),
            conditions: Some(v1::DurableEventListenerConditions {
                sleep_conditions: vec![v1::SleepMatchCondition {
                    base: Some(v1::BaseMatchCondition {
                        or_group_id: "nope".into(),
                        ..Default::default()
                    }),
                    sleep_for: "1s".into(),
                }],
                user_event_conditions: vec![],
            }),
        })
        .await
        .expect_err("bad group");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn a_durable_attempt_offered_again_keeps_its_invocation_and_its_waits() {
    let h = H::new().await;
    h.engine.reoffer_unanswered_assignments(true);
    let (wid, actions) = durable_worker(&h, "again").await;
    h.trigger("again", "{}").await;
    let mut actions = actions;
    let a = next(&mut actions).await;
    assert_eq!(a.durable_task_invocation_count, Some(1));
    let task = a.task_run_external_id.clone();
    // The stream ends before the worker said STARTED: the engine offers the attempt again.
    drop(actions);
    tokio::time::timeout(Duration::from_secs(5), async {
        while h.engine.stats().queued == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the attempt goes back to the queue");
    // The worker did get the first copy and waits durably, for invocation 1, while the copy
    // is queued: accepted (an ack), not an eviction.
    let (tx, mut resp) = h.durable_stream().await;
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::RegisterWorker(v1::DurableTaskRequestRegisterWorker {
            worker_id: wid.clone(),
        })),
    })
    .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::RegisterWorker(_)));
    tx.send(event_wait(&task, 1, "user:again")).expect("send");
    assert!(
        matches!(recv(&mut resp).await, Resp::WaitForAck(_)),
        "the waiting invocation is still current"
    );
    // The second copy carries the same invocation.
    let mut actions = h.listen(&wid).await;
    let again = next(&mut actions).await;
    assert_eq!(again.task_run_external_id, task);
    assert_eq!(again.durable_task_invocation_count, Some(1));
    assert_eq!(again.retry_count, a.retry_count);
}

/// Invariant 6, the real engine's ordered release: a replay gets each completion only once every
/// entry satisfied before it has been asked for. Invocation 1 waits on `late` (node 1) and then
/// `early` (node 2); `early` is pushed first. Invocation 2 asks for node 1 first: its completion
/// is held until node 2 is asked, then both go, node 2's first.
#[tokio::test]
async fn a_replay_gets_completions_in_the_order_their_entries_were_satisfied() {
    let h = H::new().await;
    let (wid, mut actions) = durable_worker_retrying(&h, "ordered", 1).await;
    h.trigger("ordered", "{}").await;
    let a = next(&mut actions).await;
    let task = a.task_run_external_id.clone();
    let (tx, mut resp) = h.durable_stream().await;
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::RegisterWorker(v1::DurableTaskRequestRegisterWorker {
            worker_id: wid.clone(),
        })),
    })
    .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::RegisterWorker(_)));
    let push = |key: &'static str| {
        let h = &h;
        async move {
            h.events()
                .push(proto::PushEventRequest {
                    key: key.into(),
                    payload: "{}".into(),
                    ..Default::default()
                })
                .await
                .expect("push");
        }
    };
    let node_of = |r: Resp| match r {
        Resp::WaitForAck(a) => ("ack", a.r#ref.map_or(0, |r| r.node_id)),
        Resp::EntryCompleted(c) => ("done", c.r#ref.map_or(0, |r| r.node_id)),
        other => panic!("unexpected {other:?}"),
    };
    // Invocation 1: node 1 waits for `late`, node 2 for `early`; `early` comes first.
    tx.send(event_wait(&task, 1, "late")).expect("send");
    assert_eq!(node_of(recv(&mut resp).await), ("ack", 1));
    tx.send(event_wait(&task, 1, "early")).expect("send");
    assert_eq!(node_of(recv(&mut resp).await), ("ack", 2));
    push("early").await;
    assert_eq!(node_of(recv(&mut resp).await), ("done", 2));
    push("late").await;
    assert_eq!(node_of(recv(&mut resp).await), ("done", 1));
    // The attempt fails; its retry is invocation 2 and replays.
    h.event(&wid, &a, E::StepEventTypeFailed, "again")
        .await
        .expect("fail");
    let b = next(&mut actions).await;
    let inv = b
        .durable_task_invocation_count
        .expect("a durable invocation");
    assert!(inv > 1, "a new invocation: {inv}");
    tx.send(event_wait(&task, inv, "late")).expect("send");
    assert_eq!(node_of(recv(&mut resp).await), ("ack", 1));
    // Node 1 was satisfied after node 2, which this invocation has not asked for: held.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), recv(&mut resp))
            .await
            .is_err(),
        "node 1's completion waits for node 2 to be asked"
    );
    tx.send(event_wait(&task, inv, "early")).expect("send");
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(node_of(recv(&mut resp).await));
    }
    let done: Vec<i64> = seen
        .iter()
        .filter(|(k, _)| *k == "done")
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(done, [2, 1], "released in satisfied order: {seen:?}");
}

/// A started durable task of workflow `wf` and a DurableTask stream its worker registered on:
/// the task's id, the request sender and the responses.
async fn durable_session(
    h: &H,
    wf: &str,
) -> (
    String,
    mpsc::UnboundedSender<v1::DurableTaskRequest>,
    tonic::Streaming<v1::DurableTaskResponse>,
) {
    let (wid, mut actions) = durable_worker(h, wf).await;
    h.trigger(wf, "{}").await;
    let task = next(&mut actions).await.task_run_external_id;
    let (tx, mut resp) = h.durable_stream().await;
    tx.send(v1::DurableTaskRequest {
        message: Some(Req::RegisterWorker(v1::DurableTaskRequestRegisterWorker {
            worker_id: wid,
        })),
    })
    .expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::RegisterWorker(_)));
    (task, tx, resp)
}

/// Pushes event `key` with payload `{"n": n}` (and `scope`, when given).
async fn push_n(h: &H, key: &str, n: i32, scope: Option<&str>) {
    h.events()
        .push(proto::PushEventRequest {
            key: key.into(),
            payload: format!(r#"{{"n": {n}}}"#),
            scope: scope.map(str::to_string),
            ..Default::default()
        })
        .await
        .expect("push");
}

/// The `n` of the payload of the completion of the wait on `key`.
async fn completed_n(resp: &mut tonic::Streaming<v1::DurableTaskResponse>, key: &str) -> i64 {
    let Resp::EntryCompleted(done) = recv(resp).await else {
        panic!("completion expected")
    };
    let payload: serde_json::Value = serde_json::from_slice(&done.payload).expect("json");
    payload["CREATE"][key][0]["n"]
        .as_i64()
        .unwrap_or_else(|| panic!("no n in {payload}"))
}

/// The real engine's look-back reads the events of the condition's key and scope seen since
/// `consider_events_since` newest first (`ORDER BY seen_at DESC`, then sorted newest first):
/// of two events that both match, a look-back wait gets the newer.
#[tokio::test]
async fn a_look_back_wait_is_satisfied_by_the_newest_matching_event() {
    let h = H::new().await;
    let (task, tx, mut resp) = durable_session(&h, "lookback").await;
    let since = h.engine.now() - Duration::from_secs(3_600);
    push_n(&h, "user:ping", 1, Some("s")).await;
    push_n(&h, "user:ping", 2, Some("s")).await;
    push_n(&h, "user:ping", 3, Some("other scope")).await;
    push_n(&h, "user:pong", 4, Some("s")).await;
    let mut wait = event_wait(&task, 1, "user:ping");
    if let Some(Req::WaitFor(w)) = &mut wait.message {
        let cond = &mut w
            .wait_for_conditions
            .as_mut()
            .expect("conditions")
            .user_event_conditions[0];
        cond.event_scope = Some("s".into());
        cond.consider_events_since = Some(since.into());
    }
    tx.send(wait).expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::WaitForAck(_)));
    assert_eq!(
        completed_n(&mut resp, "user:ping").await,
        2,
        "the newest event of the key and scope, not the oldest"
    );
}

/// A durable wait's event key is matched exactly on the real engine (`m.event_key =
/// i.event_key`); `*` is a wildcard only in a workflow's event triggers.
#[tokio::test]
async fn a_durable_wait_matches_its_event_key_exactly_and_a_star_is_no_wildcard() {
    let h = H::new().await;
    let (task, tx, mut resp) = durable_session(&h, "exact").await;
    tx.send(event_wait(&task, 1, "order:*")).expect("send");
    assert!(matches!(recv(&mut resp).await, Resp::WaitForAck(_)));
    push_n(&h, "order:created", 1, None).await;
    push_n(&h, "order:*", 2, None).await;
    assert_eq!(
        completed_n(&mut resp, "order:*").await,
        2,
        "`order:created` does not satisfy a wait on `order:*`"
    );
}
