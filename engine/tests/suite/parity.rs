//! The real engine's rules for this round's features, driven through the generated clients and
//! REST: bulk calls all or nothing, cancel/replay targets and errors, priority lanes, strict
//! run reads, validated logs and their REST reads, on_failure payloads.

use hatchet_runtime::protocol::{self as proto, ActionType, StepActionEventType as E, v1};
use serde_json::{Value, json};
use tonic::Code;

use crate::support::{H, next};

pub(crate) async fn rest(
    h: &H,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let http = crate::faults::reqwest_client();
    let mut req = http
        .request(method, format!("{}{path}", h.engine.api_url()))
        .bearer_auth(h.engine.token().expose());
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("http");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `GET /api/v1/stable/workflow-runs/{run}`'s answer.
async fn run_details(h: &H, run: &str) -> Value {
    let path = format!("/api/v1/stable/workflow-runs/{run}");
    rest(h, reqwest::Method::GET, &path, None).await.1
}

fn is_uuid(v: &Value) -> bool {
    v.as_str().is_some_and(|s| uuid::Uuid::parse_str(s).is_ok())
}

#[tokio::test]
async fn a_bulk_trigger_with_one_bad_item_creates_nothing() {
    let h = H::new().await;
    h.put("b", &[("t", &[], 0, "")], &[]).await;
    let item = |priority| v1::TriggerWorkflowRequest {
        name: "b".into(),
        input: "{}".into(),
        priority,
        ..Default::default()
    };
    let err = h
        .workflows()
        .bulk_trigger_workflow(proto::BulkTriggerWorkflowRequest {
            workflows: vec![item(Some(1)), item(Some(4)), item(None)],
        })
        .await
        .expect_err("one bad priority");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("workflow 1"), "{}", err.message());
    assert_eq!(h.engine.run_count(), 0, "all or nothing");
    let ok = h
        .workflows()
        .bulk_trigger_workflow(proto::BulkTriggerWorkflowRequest {
            workflows: vec![item(Some(1)), item(None)],
        })
        .await
        .expect("good batch")
        .into_inner();
    assert_eq!(ok.workflow_run_ids.len(), 2);
    let err = h
        .events()
        .bulk_push(proto::BulkPushEventRequest { events: vec![] })
        .await
        .expect_err("empty");
    assert_eq!(err.message(), "No events to ingest");
}

#[tokio::test]
async fn queued_tasks_are_offered_highest_priority_first() {
    let h = H::new().await;
    h.put("p", &[("t", &[], 0, "")], &[]).await;
    let mut by_run = std::collections::HashMap::new();
    for (tag, p) in [("a1", 1), ("c1", 3), ("b1", 2), ("c2", 3)] {
        let id = h
            .workflows()
            .trigger_workflow(v1::TriggerWorkflowRequest {
                name: "p".into(),
                input: "{}".into(),
                priority: Some(p),
                ..Default::default()
            })
            .await
            .expect("trigger")
            .into_inner()
            .workflow_run_id;
        by_run.insert(id, tag);
    }
    let w = h.register(&["p:t".into()], 1).await;
    let mut s = h.listen(&w).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let a = next(&mut s).await;
        assert_eq!(a.action_type, ActionType::StartStepRun as i32);
        order.push(by_run[&a.workflow_run_id]);
        h.event(&w, &a, E::StepEventTypeCompleted, "{}")
            .await
            .expect("done");
    }
    assert_eq!(order, ["c1", "c2", "b1", "a1"]);
}

#[tokio::test]
async fn cancel_and_replay_over_rest_answer_like_the_real_engine() {
    let h = H::new().await;
    // Shapes, not timing: REST reads the live status (the status lag is `store/readable.rs`'s).
    h.engine.status_lag(None);
    h.put("c", &[("t", &[], 0, "")], &[]).await;
    let run = h.trigger("c", "{}").await;
    let tenant = h.engine.tenant_id().to_string();
    let cancel = format!("/api/v1/stable/tenants/{tenant}/tasks/cancel");
    let (s, body) = rest(
        &h,
        reqwest::Method::POST,
        &cancel,
        Some(json!({"externalIds": ["nope"]})),
    )
    .await;
    assert_eq!(s, 400, "a non-UUID fails to bind: {body}");
    let both = json!({"externalIds": [run], "filter": {"since": "2020-01-01T00:00:00Z"}});
    let (s, body) = rest(&h, reqwest::Method::POST, &cancel, Some(both)).await;
    assert_eq!(
        (s, body),
        (500, json!({"message": "Internal Server Error"}))
    );
    let unknown = uuid::Uuid::new_v4().to_string();
    let (s, body) = rest(
        &h,
        reqwest::Method::POST,
        &cancel,
        Some(json!({"externalIds": [run, unknown]})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        body["ids"],
        json!([run, unknown]),
        "echoes the ids, known or not"
    );
    let (s, status) = rest(
        &h,
        reqwest::Method::GET,
        &format!("/api/v1/stable/workflow-runs/{run}/status"),
        None,
    )
    .await;
    assert_eq!((s, status), (200, json!("CANCELLED")));
    let replay = format!("/api/v1/stable/tenants/{tenant}/tasks/replay");
    let filter = json!({"filter": {"since": "2020-01-01T00:00:00Z", "statuses": ["CANCELLED"]}});
    let (s, body) = rest(&h, reqwest::Method::POST, &replay, Some(filter)).await;
    assert_eq!((s, body["ids"].clone()), (200, json!([run])));
    let (_, status) = rest(
        &h,
        reqwest::Method::GET,
        &format!("/api/v1/stable/workflow-runs/{run}/status"),
        None,
    )
    .await;
    assert_eq!(
        status,
        json!("QUEUED"),
        "the replayed run waits for a worker again"
    );
    // gRPC refuses a metadata filter without a colon.
    let err = h
        .admin()
        .cancel_tasks(v1::CancelTasksRequest {
            external_ids: vec![],
            filter: Some(v1::TasksFilter {
                additional_metadata: vec!["nocolon".into()],
                ..Default::default()
            }),
        })
        .await
        .expect_err("bad filter");
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn run_reads_are_strict_in_every_state() {
    let h = H::new().await;
    // Shapes, not timing: REST reads the live status (the status lag is `store/readable.rs`'s).
    h.engine.status_lag(None);
    h.put("dag", &[("a", &[], 0, ""), ("b", &["a"], 0, "")], &[])
        .await;
    let run = h.trigger("dag", r#"{"n":1}"#).await;
    let (s, d) = rest(
        &h,
        reqwest::Method::GET,
        &format!("/api/v1/stable/workflow-runs/{run}"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let r = &d["run"];
    assert_eq!(r["status"], "QUEUED");
    assert_eq!(
        r["output"],
        json!({}),
        "an object before anything finished, never null"
    );
    assert_eq!(r["startedAt"], "0001-01-01T00:00:00Z");
    assert_eq!(r["errorMessage"], "");
    assert!(
        r["displayName"]
            .as_str()
            .is_some_and(|n| n.starts_with("dag-"))
    );
    for shape in d["shape"].as_array().expect("shape") {
        assert!(
            is_uuid(&shape["stepId"]) && is_uuid(&shape["taskExternalId"]),
            "{shape}"
        );
    }
    assert_eq!(
        d["shape"][0]["childrenStepIds"],
        json!([d["shape"][1]["stepId"]])
    );
    for t in d["tasks"].as_array().expect("tasks") {
        assert_eq!(t["output"], json!({}));
        assert!(
            t.get("startedAt").is_none(),
            "unknown task times are omitted"
        );
        for k in [
            "taskExternalId",
            "tenantId",
            "workflowId",
            "workflowRunExternalId",
            "stepId",
        ] {
            assert!(is_uuid(&t[k]), "{k}: {t}");
        }
    }
    // Malformed and unknown ids.
    let (s, _) = rest(
        &h,
        reqwest::Method::GET,
        "/api/v1/stable/workflow-runs/nope",
        None,
    )
    .await;
    assert_eq!(s, 400);
    let (s, _) = rest(
        &h,
        reqwest::Method::GET,
        &format!("/api/v1/stable/workflow-runs/{}", uuid::Uuid::new_v4()),
        None,
    )
    .await;
    assert_eq!(s, 404);
    // Finish `a`: the run's output is the latest finished task's, not a map.
    let w = h.register(&["dag:a".into()], 1).await;
    let mut s = h.listen(&w).await;
    let a = next(&mut s).await;
    h.event(&w, &a, E::StepEventTypeCompleted, r#"{"a":1}"#)
        .await
        .expect("done");
    let d = run_details(&h, &run).await;
    assert_eq!(d["run"]["output"], json!({"a": 1}));
    // Lists: one DAG row per run with its children; task rows with only_tasks.
    let tenant = h.engine.tenant_id().to_string();
    let list = format!(
        "/api/v1/stable/tenants/{tenant}/workflow-runs?since=2020-01-01T00:00:00Z&include_payloads=true"
    );
    let (_, runs) = rest(
        &h,
        reqwest::Method::GET,
        &format!("{list}&only_tasks=false"),
        None,
    )
    .await;
    assert_eq!(runs["rows"].as_array().map(Vec::len), Some(1));
    assert_eq!(runs["rows"][0]["type"], "DAG");
    assert_eq!(runs["rows"][0]["metadata"]["id"], json!(run));
    assert_eq!(
        runs["rows"][0]["children"].as_array().map(Vec::len),
        Some(2)
    );
    let (_, tasks) = rest(
        &h,
        reqwest::Method::GET,
        &format!("{list}&only_tasks=true&statuses=COMPLETED"),
        None,
    )
    .await;
    assert_eq!(
        tasks["rows"].as_array().map(Vec::len),
        Some(1),
        "only `a` completed"
    );
    let (_, none) = rest(
        &h,
        reqwest::Method::GET,
        &format!("{list}&only_tasks=false&until=2021-01-01T00:00:00Z"),
        None,
    )
    .await;
    assert_eq!(none["rows"], json!([]), "until bounds the creation time");
}

#[tokio::test]
async fn logs_are_validated_like_the_real_engine_and_read_back_with_filters() {
    let h = H::new().await;
    h.put("l", &[("t", &[], 0, "")], &[]).await;
    let run = h.trigger("l", "{}").await;
    let log = |message: &str, level: Option<&str>, task: &str| proto::PutLogRequest {
        task_run_external_id: task.into(),
        created_at: None,
        message: message.into(),
        level: level.map(str::to_string),
        metadata: String::new(),
        task_retry_count: None,
    };
    let mut events = h.events();
    for (m, l) in [
        ("one", None),
        ("two", Some("WARN")),
        ("three", Some("ERROR")),
    ] {
        events.put_log(log(m, l, &run)).await.expect("stored");
    }
    let bad_level = events
        .put_log(log("x", Some("TRACE"), &run))
        .await
        .expect_err("level");
    assert_eq!(bad_level.code(), Code::InvalidArgument);
    let empty = events
        .put_log(log("", None, &run))
        .await
        .expect_err("empty");
    assert_eq!(empty.code(), Code::InvalidArgument);
    let unknown = events
        .put_log(log("x", None, &uuid::Uuid::new_v4().to_string()))
        .await
        .expect_err("unknown task");
    assert_eq!(unknown.code(), Code::NotFound);
    let bad_id = events
        .put_log(log("x", None, "nope"))
        .await
        .expect_err("not a uuid");
    assert_eq!(bad_id.code(), Code::InvalidArgument);
    let path = format!("/api/v1/stable/tasks/{run}/logs");
    let (s, all) = rest(&h, reqwest::Method::GET, &path, None).await;
    assert_eq!(s, 200);
    let messages = |v: &Value| -> Vec<String> {
        v["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["message"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(messages(&all), ["one", "two", "three"]);
    assert_eq!(all["rows"][0]["level"], "INFO", "stored as INFO when unset");
    assert_eq!(all["rows"][0]["metadata"], json!({}));
    let (_, warn) = rest(
        &h,
        reqwest::Method::GET,
        &format!("{path}?levels=WARN&levels=ERROR&order_by_direction=DESC&limit=1"),
        None,
    )
    .await;
    assert_eq!(messages(&warn), ["three"]);
    let (_, found) = rest(&h, reqwest::Method::GET, &format!("{path}?search=TW"), None).await;
    assert_eq!(messages(&found), ["two"]);
}

#[tokio::test]
async fn on_failure_gets_the_first_failure_and_every_completed_output() {
    let h = H::new().await;
    // Shapes, not timing: REST reads the live status (the status lag is `store/readable.rs`'s).
    h.engine.status_lag(None);
    h.raw
        .admin()
        .put_workflow(v1::CreateWorkflowVersionRequest {
            name: "of".into(),
            tasks: vec![
                v1::CreateTaskOpts {
                    readable_id: "ok".into(),
                    action: "of:ok".into(),
                    ..Default::default()
                },
                v1::CreateTaskOpts {
                    readable_id: "bad".into(),
                    action: "of:bad".into(),
                    ..Default::default()
                },
            ],
            on_failure_task: Some(v1::CreateTaskOpts {
                readable_id: "hook".into(),
                action: "of:hook".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("put");
    let run = h.trigger("of", r#"{"x":1}"#).await;
    let w = h
        .register(&["of:ok".into(), "of:bad".into(), "of:hook".into()], 1)
        .await;
    let mut s = h.listen(&w).await;
    let first = next(&mut s).await;
    assert_eq!(first.task_name, "ok", "definition order");
    h.event(&w, &first, E::StepEventTypeCompleted, r#"{"y":2}"#)
        .await
        .expect("ok");
    let second = next(&mut s).await;
    assert_eq!(second.task_name, "bad");
    h.event(&w, &second, E::StepEventTypeFailed, "boom")
        .await
        .expect("failed");
    let hook = next(&mut s).await;
    assert_eq!(hook.task_name, "hook");
    let payload: Value = serde_json::from_str(&hook.action_payload).expect("json");
    assert_eq!(payload["step_run_errors"], json!({"bad": "boom"}));
    assert_eq!(payload["parents"], json!({"ok": {"y": 2}}));
    assert_eq!(payload["input"], json!({"x": 1}));
    h.event(&w, &hook, E::StepEventTypeCompleted, "{}")
        .await
        .expect("hook done");
    let (_, status) = rest(
        &h,
        reqwest::Method::GET,
        &format!("/api/v1/stable/workflow-runs/{run}/status"),
        None,
    )
    .await;
    assert_eq!(status, json!("FAILED"), "failed whatever on_failure does");
}

#[tokio::test]
async fn task_events_are_read_per_task_and_a_run_of_one_task_lists_none() {
    let h = H::new().await;
    h.put("te", &[("t", &[], 0, "")], &[]).await;
    h.put("te-dag", &[("a", &[], 0, ""), ("b", &["a"], 0, "")], &[])
        .await;
    let run = h.trigger("te", "{}").await;
    let dag = h.trigger("te-dag", "{}").await;
    let w = h.register(&["te:t".into(), "te-dag:a".into()], 2).await;
    let mut s = h.listen(&w).await;
    for _ in 0..2 {
        let a = next(&mut s).await;
        h.event(&w, &a, E::StepEventTypeCompleted, r#"{"x":1}"#)
            .await
            .expect("done");
    }
    let get = |path: String| {
        let h = &h;
        async move { rest(h, reqwest::Method::GET, &path, None).await }
    };
    let kinds = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("an array of events")
            .iter()
            .map(|e| e["eventType"].as_str().unwrap_or("").to_string())
            .collect()
    };
    // A run of one task has no DAG: its details and its run-level list hold no task events.
    let (_, details) = get(format!("/api/v1/stable/workflow-runs/{run}")).await;
    assert_eq!(details["taskEvents"], json!([]));
    let (s, listed) = get(format!("/api/v1/stable/workflow-runs/{run}/task-events")).await;
    assert_eq!(s, 200);
    assert_eq!(listed, json!({"rows": [], "pagination": {}}));
    // Per task they are there, the newest first, without outputs; no `limit` reads none.
    let path = format!("/api/v1/stable/tasks/{run}/task-events");
    let (_, unlimited) = get(path.clone()).await;
    assert_eq!(unlimited["rows"], json!([]), "LIMIT 0, as the real engine");
    let (_, all) = get(format!("{path}?limit=50")).await;
    assert_eq!(
        kinds(&all["rows"]),
        [
            "FINISHED",
            "STARTED",
            "SENT_TO_WORKER",
            "ASSIGNED",
            "QUEUED"
        ]
    );
    assert!(all["rows"][0].get("output").is_none(), "{}", all["rows"][0]);
    assert_eq!(all["rows"][0]["taskId"], json!(run));
    let (_, page) = get(format!("{path}?limit=1&offset=1")).await;
    assert_eq!(kinds(&page["rows"]), ["STARTED"]);
    let (s, _) = get(format!("{path}?limit=x")).await;
    assert_eq!(s, 400);
    let (s, _) = get(format!(
        "/api/v1/stable/tasks/{}/task-events?limit=5",
        uuid::Uuid::new_v4()
    ))
    .await;
    assert_eq!(s, 404);
    // A DAG's details list its tasks' events, the newest first, with the finished output.
    let (_, d) = get(format!("/api/v1/stable/workflow-runs/{dag}")).await;
    let events = kinds(&d["taskEvents"]);
    // b is queued when a finishes: its QUEUED is the newest, a's FINISHED next.
    assert_eq!(
        events.get(1).map(String::as_str),
        Some("FINISHED"),
        "{events:?}"
    );
    assert_eq!(
        events.last().map(String::as_str),
        Some("QUEUED"),
        "{events:?}"
    );
    let (_, l) = get(format!("/api/v1/stable/workflow-runs/{dag}/task-events")).await;
    assert_eq!(l["rows"], d["taskEvents"]);
}

#[tokio::test]
async fn registering_the_same_definition_keeps_the_version_and_a_run_shows_its_own() {
    let h = H::new().await;
    let version = |retries: i32| {
        let h = &h;
        async move {
            h.raw
                .admin()
                .put_workflow(v1::CreateWorkflowVersionRequest {
                    name: "ver".into(),
                    tasks: vec![v1::CreateTaskOpts {
                        readable_id: "t".into(),
                        action: "ver:t".into(),
                        retries,
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await
                .expect("put")
                .into_inner()
                .id
        }
    };
    let first = version(0).await;
    assert_eq!(
        version(0).await,
        first,
        "the same declaration: the same version"
    );
    let old_run = h.trigger("ver", "{}").await;
    let second = version(2).await;
    assert_ne!(second, first, "a changed declaration: a new version");
    let new_run = h.trigger("ver", "{}").await;
    let retries_shown = |run: String| {
        let h = &h;
        async move {
            let path = format!("/api/v1/stable/workflow-runs/{run}");
            let (_, d) = rest(h, reqwest::Method::GET, &path, None).await;
            (
                d["run"]["workflowVersionId"].clone(),
                d["workflowConfig"]["Tasks"][0]["Retries"].clone(),
            )
        }
    };
    assert_eq!(retries_shown(old_run).await, (json!(first), json!(0)));
    assert_eq!(retries_shown(new_run).await, (json!(second), json!(2)));
}

#[tokio::test]
async fn task_events_tell_every_attempt_and_what_started_the_next() {
    let h = H::new().await;
    h.put("retried", &[("a", &[], 1, ""), ("b", &["a"], 0, "")], &[])
        .await;
    let run = h.trigger("retried", "{}").await;
    let w = h
        .register(&["retried:a".into(), "retried:b".into()], 2)
        .await;
    let mut s = h.listen(&w).await;
    let first = next(&mut s).await;
    h.event(&w, &first, E::StepEventTypeFailed, "it broke once")
        .await
        .expect("failed");
    let retry = next(&mut s).await;
    assert_eq!(retry.retry_count, 1);
    h.event(&w, &retry, E::StepEventTypeCompleted, r#"{"a":1}"#)
        .await
        .expect("done");
    let b = next(&mut s).await;
    h.event(&w, &b, E::StepEventTypeCompleted, r#"{"b":1}"#)
        .await
        .expect("done");
    let d = run_details(&h, &run).await;
    let events = d["taskEvents"].as_array().cloned().unwrap_or_default();
    let of = |task: &str, attempt: i64| -> Vec<String> {
        let mut kinds: Vec<String> = events
            .iter()
            .filter(|e| e["taskDisplayName"] == task && e["attempt"] == attempt)
            .map(|e| e["eventType"].as_str().unwrap_or("").to_string())
            .collect();
        kinds.sort();
        kinds
    };
    assert_eq!(
        of("a", 1),
        ["ASSIGNED", "FAILED", "QUEUED", "SENT_TO_WORKER", "STARTED"]
    );
    assert_eq!(
        of("a", 2),
        [
            "ASSIGNED",
            "FINISHED",
            "QUEUED",
            "RETRYING",
            "SENT_TO_WORKER",
            "STARTED"
        ]
    );
    assert_eq!(
        of("b", 1),
        [
            "ASSIGNED",
            "FINISHED",
            "QUEUED",
            "SENT_TO_WORKER",
            "STARTED"
        ]
    );
    let failed = events
        .iter()
        .find(|e| e["eventType"] == "FAILED")
        .expect("the failure");
    assert_eq!(failed["errorMessage"], "it broke once");
    assert_eq!(failed["retryCount"], 0);
    let retrying = events
        .iter()
        .find(|e| e["eventType"] == "RETRYING")
        .expect("the retry");
    assert_eq!(retrying["message"], "This is retry number 1.");
    assert!(retrying.get("workerId").is_none(), "{retrying}");
    let ids: std::collections::HashSet<String> =
        events.iter().map(|e| e["id"].to_string()).collect();
    assert_eq!(ids.len(), events.len(), "every event its own id");
}
