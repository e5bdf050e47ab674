//! Traces: a run's trace as the engine keeps it, on both engines. The engine stamps every run's
//! metadata with a `traceparent` whose ids are derived from the run's id, makes its own spans as
//! the run goes (the run, each attempt's time queued and its run), and its OTLP collector takes the
//! SDKs' spans into the same trace.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hatchet_runtime::api::TraceSpan;
use hatchet_runtime::protocol::otlp;
use hatchet_runtime::{Context, TaskError, TaskOptions, Workflow};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::{RESULT, Target, until_read};

/// The id the real engine derives for a run: SHA-256 over `prefix` and the run id's 16 bytes,
/// its first `n` bytes, in hex.
fn derived(prefix: &str, run: &str, n: usize) -> String {
    let id = uuid_bytes(run);
    let mut h = Sha256::new();
    h.update(prefix.as_bytes());
    h.update(id);
    h.finalize()[..n]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn uuid_bytes(id: &str) -> Vec<u8> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    (0..32)
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("a UUID"))
        .collect()
}

fn named<'a>(spans: &'a [TraceSpan], name: &str) -> Vec<&'a TraceSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The spans of `run` once `ready` holds for them (each read polls the engine's trace).
async fn spans_when(
    api: &hatchet_runtime::api::Api,
    what: &str,
    run: &str,
    ready: impl Fn(&[TraceSpan]) -> bool,
) -> Vec<TraceSpan> {
    until_read(
        what,
        || api.run_trace(run),
        |r| r.as_ref().is_ok_and(|s| ready(s)),
    )
    .await
    .expect("trace")
}

/// The one attempt span of a one-task run that ended with one attempt.
async fn the_attempt_span(api: &hatchet_runtime::api::Api, run: &str) -> TraceSpan {
    let spans = spans_when(api, "the attempt's span", run, |s| {
        named(s, "hatchet.engine.start_step_run").len() == 1
    })
    .await;
    named(&spans, "hatchet.engine.start_step_run")[0].clone()
}

/// A one-task run that fails once and is retried: its metadata carries the derived
/// `traceparent`; its trace holds the run's root span, a `queued` and a `start_step_run` span
/// per attempt (the failed one an `ERROR` that tells no error text), all in the run's trace under
/// its root; an unknown run has no trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_run_s_trace_holds_its_root_and_two_spans_per_attempt() {
    // No trigger span of ours: the runs carry the engine's own traceparent.
    let _otel = super::OTEL_GLOBALS.read().await;
    let t = Target::new("traced").await;
    let tries = Arc::new(AtomicU32::new(0));
    let rt = t.worker(4, vec![flaky("traced", tries.clone())]).await;
    let api = rt.api();
    let h = rt.run_no_wait("traced", &json!({})).await.expect("trigger");
    let _: Value = h.result_within(RESULT).await.expect("the retry succeeds");
    assert_eq!(tries.load(Ordering::SeqCst), 2);
    let id = h.run_id().to_string();
    let trace = derived("hatchet-engine-wf-trace:", &id, 16);
    let root_id = derived("hatchet-engine-wf-span:", &id, 8);
    // The real engine writes the run's readable row after the result stream answers.
    let run = until_read(
        "the run's row",
        || async { api.run(&id).await.ok() },
        Option::is_some,
    )
    .await
    .expect("run");
    assert_eq!(
        run.metadata.get("traceparent"),
        Some(&json!(format!("00-{trace}-{root_id}-01"))),
        "the run's metadata carries its derived traceparent"
    );
    let spans = spans_when(&api, "the run's spans", &id, |s| {
        named(s, "hatchet.engine.start_step_run").len() == 2
            && named(s, "hatchet.engine.queued").len() == 2
            && named(s, "hatchet.engine.workflow_run").len() == 1
    })
    .await;
    let ids: std::collections::BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique: {spans:#?}");
    assert!(spans.iter().all(|s| s.trace_id == trace), "{spans:#?}");
    let root = named(&spans, "hatchet.engine.workflow_run")[0];
    assert_eq!(root.span_id, root_id);
    assert_eq!(root.parent_span_id, None);
    assert_eq!(root.service_name, "hatchet-engine");
    assert_eq!(root.attributes["hatchet.workflow_run_id"], id);
    assert!(
        root.attributes["hatchet.workflow_name"].starts_with("t-"),
        "a standalone run is named by its task: {root:?}"
    );
    for kind in ["hatchet.engine.queued", "hatchet.engine.start_step_run"] {
        let mut retries: Vec<i32> = named(&spans, kind).iter().map(|s| s.retry_count).collect();
        retries.sort_unstable();
        assert_eq!(retries, [0, 1], "{kind}: one per attempt");
        for s in named(&spans, kind) {
            assert_eq!(s.parent_span_id.as_deref(), Some(root_id.as_str()), "{s:?}");
            assert_eq!(
                s.attributes["hatchet.step_run_id"], id,
                "a standalone task is its run"
            );
            assert_eq!(s.attributes["hatchet.step_name"], "t");
            assert_eq!(
                s.attributes["hatchet.retry_count"],
                s.retry_count.to_string()
            );
        }
    }
    let ran = named(&spans, "hatchet.engine.start_step_run");
    let failed = ran.iter().find(|s| s.retry_count == 0).expect("attempt 0");
    let passed = ran.iter().find(|s| s.retry_count == 1).expect("attempt 1");
    assert_eq!(failed.status, "ERROR");
    assert_eq!(
        failed.status_message.as_deref(),
        Some("task failed"),
        "a retried attempt's span tells no error text: {failed:?}"
    );
    assert_eq!(passed.status, "OK");
    let unknown = api
        .run_trace("00000000-0000-4000-8000-00000000000f")
        .await
        .unwrap_err();
    assert!(unknown.is_not_found(), "{unknown}");
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A task `t` that fails its first attempt and passes its second (one retry).
fn flaky(name: &str, tries: Arc<AtomicU32>) -> Workflow {
    Workflow::new(name).task_with(
        "t",
        TaskOptions::new().retries(1),
        move |_: Value, _c: Context| {
            let n = tries.clone();
            async move {
                if n.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(TaskError::new("the first attempt fails"));
                }
                Ok::<_, TaskError>(json!({"ok": true}))
            }
        },
    )
}

/// A two-task DAG named `name`: `a`, then `b`.
fn two_step_dag(name: &str) -> Workflow {
    Workflow::new(name)
        .task("a", |_: Value, _c: Context| async move {
            Ok::<_, TaskError>(json!({}))
        })
        .task_with(
            "b",
            TaskOptions::new().parents(["a"]),
            |_: Value, _c: Context| async move { Ok::<_, TaskError>(json!({})) },
        )
}

/// A DAG has one root, each task's spans under it, findable by the run's id; a child is
/// created when its parent ends, so its time queued starts then, not at the trigger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_s_spans_hang_under_its_root_and_a_child_is_queued_when_its_parent_ends() {
    let _otel = super::OTEL_GLOBALS.read().await;
    let t = Target::new("traced-dag").await;
    let rt = t.worker(4, vec![two_step_dag("traced-dag")]).await;
    let api = rt.api();
    let d = rt
        .run_no_wait("traced-dag", &json!({}))
        .await
        .expect("trigger");
    let _: Value = d.result_within(RESULT).await.expect("dag");
    let dag_id = d.run_id().to_string();
    // The real engine writes a task's queued span apart from its run span, sometimes after it.
    let dag_spans = spans_when(&api, "the DAG's spans", &dag_id, |s| {
        named(s, "hatchet.engine.start_step_run").len() == 2
            && named(s, "hatchet.engine.queued").len() == 2
    })
    .await;
    let dag_root = derived("hatchet-engine-wf-span:", &dag_id, 8);
    let steps: std::collections::BTreeSet<&str> =
        named(&dag_spans, "hatchet.engine.start_step_run")
            .iter()
            .map(|s| {
                assert_eq!(s.parent_span_id.as_deref(), Some(dag_root.as_str()));
                s.attributes["hatchet.step_name"].as_str()
            })
            .collect();
    assert_eq!(steps, ["a", "b"].into());
    let at = |s: &TraceSpan| {
        hatchet_runtime::protocol::calendar::parse_rfc3339(&s.started_at)
            .unwrap_or_else(|| panic!("a span's start reads as RFC 3339: {s:?}"))
    };
    let of = |kind: &str, step: &str| {
        *named(&dag_spans, kind)
            .iter()
            .find(|s| s.attributes["hatchet.step_name"] == step)
            .unwrap_or_else(|| panic!("{kind} of {step}: {dag_spans:#?}"))
    };
    let a_ran = of("hatchet.engine.start_step_run", "a");
    let a_end = at(a_ran) + Duration::from_nanos(u64::try_from(a_ran.duration_ns).unwrap_or(0));
    let b_queued = at(of("hatchet.engine.queued", "b"));
    assert!(
        b_queued + Duration::from_millis(1) >= a_end,
        "b is queued from {b_queued:?}, a ended at {a_end:?}: {dag_spans:#?}"
    );
    assert!(
        dag_spans
            .iter()
            .all(|s| s.trace_id == derived("hatchet-engine-wf-trace:", &dag_id, 16))
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// An attempt the engine ended says so in its span in the engine's words, never the error
/// text: `task failed` for a final failure, `task cancelled` for a cancel, and the timeout as
/// the real engine's TIMED_OUT event says it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_a_cancelled_and_a_timed_out_attempt_say_so_in_their_spans() {
    let _otel = super::OTEL_GLOBALS.read().await;
    let t = Target::new("traced-ends").await;
    let fails = Workflow::new("traced-fails").task("boom", |_: Value, _c: Context| async move {
        Err::<Value, _>(TaskError::non_retryable("it broke for good"))
    });
    let parked = Workflow::new("traced-parked").task("wait", |_: Value, c: Context| async move {
        c.cancellation().cancelled().await;
        Err::<Value, _>(TaskError::new("cancelled"))
    });
    let slow = Workflow::new("traced-slow").task_with(
        "nap",
        TaskOptions::new().timeout(Duration::from_secs(1)),
        |_: Value, c: Context| async move {
            c.cancellation().cancelled().await;
            Err::<Value, _>(TaskError::new("cancelled"))
        },
    );
    let rt = t.worker(4, vec![fails, parked, slow]).await;
    let api = rt.api();

    let f = rt
        .run_no_wait("traced-fails", &json!({}))
        .await
        .expect("trigger");
    let _ = f.result_within::<Value>(RESULT).await.expect_err("fails");
    let end = the_attempt_span(&api, f.run_id()).await;
    assert_eq!(end.status, "ERROR");
    assert_eq!(
        end.status_message.as_deref(),
        Some("task failed"),
        "{end:?}"
    );

    let p = rt
        .run_no_wait("traced-parked", &json!({}))
        .await
        .expect("trigger");
    until_read(
        "the parked task running",
        || api.run_status(p.run_id()),
        |s| {
            s.as_ref()
                .is_ok_and(|s| *s == hatchet_runtime::RunStatus::Running)
        },
    )
    .await
    .expect("status");
    rt.cancel_runs(&[p.run_id().to_string()])
        .await
        .expect("cancel");
    let end = the_attempt_span(&api, p.run_id()).await;
    assert_eq!(end.status, "ERROR");
    assert_eq!(
        end.status_message.as_deref(),
        Some("task cancelled"),
        "{end:?}"
    );

    let slow = rt
        .run_no_wait("traced-slow", &json!({}))
        .await
        .expect("trigger");
    let _ = slow
        .result_within::<Value>(RESULT)
        .await
        .expect_err("timed out");
    let end = the_attempt_span(&api, slow.run_id()).await;
    assert_eq!(end.status, "ERROR");
    assert_eq!(
        end.status_message.as_deref(),
        Some("Task exceeded timeout of 1s"),
        "{end:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A traceparent shaped like W3C's whose ids are not hex is kept in the metadata, and the run's
/// spans use its derived trace; one of another shape is replaced by the derived one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_of_w3c_shape_is_kept_and_one_of_another_shape_is_replaced() {
    let _otel = super::OTEL_GLOBALS.read().await;
    let t = Target::new("traced-parent").await;
    let rt = t.worker(4, vec![two_step_dag("traced-parent")]).await;
    let api = rt.api();
    for (sent, kept) in [
        (format!("00-{}-{}-01", "z".repeat(32), "y".repeat(16)), true),
        ("00-abc-def-01".to_string(), false),
    ] {
        let mut md = serde_json::Map::new();
        md.insert("traceparent".into(), json!(sent));
        let r = rt
            .run_no_wait_with(
                "traced-parent",
                &json!({}),
                hatchet_runtime::TriggerOptions::new().metadata(md),
            )
            .await
            .expect("trigger");
        let _: Value = r.result_within(RESULT).await.expect("dag");
        let row = until_read(
            "the run's row",
            || async { api.run(r.run_id()).await.ok() },
            Option::is_some,
        )
        .await
        .expect("run");
        let derived_trace = derived("hatchet-engine-wf-trace:", r.run_id(), 16);
        let stamped = format!(
            "00-{derived_trace}-{}-01",
            derived("hatchet-engine-wf-span:", r.run_id(), 8)
        );
        let want = if kept { sent.clone() } else { stamped };
        assert_eq!(
            row.metadata.get("traceparent"),
            Some(&json!(want)),
            "sent {sent}"
        );
    }
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Exports to the target's OTLP collector, as the official instrumentors do, an SDK step span
/// (id `5a…`, under a parent the engine does not know) and a user span under it with numeric
/// attributes, both naming attempt 1 of the one-task run `run` in `trace`.
async fn export_sdk_spans(t: &Target, trace: &str, run: &str) {
    use otlp::any_value::Value as V;
    let env = t.config().env_lines();
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut client = otlp::trace_service_client::TraceServiceClient::connect(format!(
        "http://{}",
        get("HATCHET_CLIENT_HOST_PORT")
    ))
    .await
    .expect("connect to the collector");
    let kv = |k: &str, v: V| otlp::KeyValue {
        key: k.into(),
        value: Some(otlp::AnyValue { value: Some(v) }),
    };
    let trace_bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&trace[i * 2..i * 2 + 2], 16).expect("hex"))
        .collect();
    let sdk_step = vec![0x5a; 8];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let span =
        |span_id: Vec<u8>, parent: Vec<u8>, name: &str, attrs: Vec<otlp::KeyValue>| otlp::Span {
            trace_id: trace_bytes.clone(),
            span_id,
            parent_span_id: parent,
            name: name.into(),
            kind: otlp::SpanKind::Consumer as i32,
            start_time_unix_nano: now,
            end_time_unix_nano: now + 1_000,
            attributes: attrs,
            status: Some(otlp::SpanStatus {
                message: String::new(),
                code: otlp::StatusCode::Ok as i32,
            }),
            ..Default::default()
        };
    let hatchet = |extra: Vec<otlp::KeyValue>| {
        let mut v = vec![
            kv("hatchet.step_run_id", V::StringValue(run.to_string())),
            kv("hatchet.workflow_run_id", V::StringValue(run.to_string())),
            kv("hatchet.retry_count", V::IntValue(1)),
        ];
        v.extend(extra);
        v
    };
    let mut req = tonic::Request::new(otlp::ExportTraceServiceRequest {
        resource_spans: vec![otlp::ResourceSpans {
            resource: Some(otlp::Resource {
                attributes: vec![kv("service.name", V::StringValue("conformance-sdk".into()))],
                dropped_attributes_count: 0,
            }),
            scope_spans: vec![otlp::ScopeSpans {
                scope: Some(otlp::InstrumentationScope {
                    name: "conformance".into(),
                    ..Default::default()
                }),
                spans: vec![
                    span(
                        sdk_step.clone(),
                        vec![0x11; 8],
                        "hatchet.start_step_run",
                        hatchet(vec![kv("instrumentor", V::StringValue("hatchet".into()))]),
                    ),
                    span(
                        vec![0x6b; 8],
                        sdk_step,
                        "custom.child.span",
                        hatchet(vec![
                            kv("n", V::IntValue(42)),
                            kv("ratio", V::DoubleValue(1.0)),
                            kv("tiny", V::DoubleValue(1e-7)),
                            kv("huge", V::DoubleValue(1e21)),
                        ]),
                    ),
                ],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", get("HATCHET_CLIENT_TOKEN"))
            .parse()
            .expect("header"),
    );
    client
        .export(req)
        .await
        .expect("the collector takes the spans");
}

/// An SDK's spans over OTLP join the run's trace: its step span names the task and hangs under
/// the run's root whatever parent it sent; a user span under it keeps its parent, and its
/// attributes read as Go's JSON of what the engine stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_s_spans_over_otlp_join_the_run_s_trace_under_its_root() {
    let _otel = super::OTEL_GLOBALS.read().await;
    let t = Target::new("traced-sdk").await;
    let tries = Arc::new(AtomicU32::new(0));
    let rt = t.worker(4, vec![flaky("traced-sdk", tries)]).await;
    let api = rt.api();
    let h = rt
        .run_no_wait("traced-sdk", &json!({}))
        .await
        .expect("trigger");
    let _: Value = h.result_within(RESULT).await.expect("the retry succeeds");
    let id = h.run_id().to_string();
    let trace = derived("hatchet-engine-wf-trace:", &id, 16);
    let root_id = derived("hatchet-engine-wf-span:", &id, 8);
    spans_when(&api, "the run's root span", &id, |s| {
        named(s, "hatchet.engine.workflow_run").len() == 1
    })
    .await;
    export_sdk_spans(&t, &trace, &id).await;
    let with_sdk = spans_when(&api, "the SDK's spans in the run's trace", &id, |s| {
        !named(s, "custom.child.span").is_empty()
    })
    .await;
    let step = named(&with_sdk, "hatchet.start_step_run");
    assert_eq!(step.len(), 1, "{with_sdk:#?}");
    assert_eq!(
        step[0].parent_span_id.as_deref(),
        Some(root_id.as_str()),
        "an SDK step span hangs under the run's root"
    );
    assert_eq!(step[0].service_name, "conformance-sdk");
    assert_eq!(step[0].kind, "CONSUMER");
    assert_eq!(step[0].retry_count, 1);
    let child = named(&with_sdk, "custom.child.span")[0];
    assert_eq!(child.parent_span_id.as_deref(), Some("5a5a5a5a5a5a5a5a"));
    assert_eq!(child.attributes["n"], "42", "a number reads as its JSON");
    // Go's JSON of a float64, as the real engine encodes what it stored again.
    assert_eq!(
        [
            &child.attributes["ratio"],
            &child.attributes["tiny"],
            &child.attributes["huge"]
        ],
        ["1", "1e-7", "1e+21"],
        "{child:?}"
    );
    assert_eq!(child.scope_name.as_deref(), Some("conformance"));
    rt.shutdown(Duration::from_secs(5)).await;
}

/// SHA-256 over `parts`, its first `n` bytes in hex (the real engine's derived span ids).
fn derived_from(parts: &[&[u8]], n: usize) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()[..n]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An event a task pushes names the task and its run as its source, in its metadata and so in
/// the runs it starts; the engine draws it once in the source run's trace, an
/// `event_emitted` span under the task's `step_run` span naming the run it started (no
/// `hatchet.engine.event` span: the push carried no SDK `traceparent`), and the started run's
/// spans share that trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_a_task_pushes_is_drawn_in_the_pushing_run_s_trace() {
    let _otel = super::OTEL_GLOBALS.read().await;
    let t = Target::new("emits").await;
    let handle: Arc<std::sync::OnceLock<hatchet_runtime::RuntimeHandle>> = Arc::default();
    let h = handle.clone();
    let pusher = Workflow::new("emits-pusher").task("push", move |_: Value, c: Context| {
        let h = h.clone();
        async move {
            let rt = h.get().ok_or_else(|| TaskError::new("no runtime yet"))?;
            let event = rt
                .push("emits:go", &json!({"n": 1}))
                .await
                .map_err(|e| TaskError::new(e.to_string()))?;
            Ok::<_, TaskError>(json!({"event": event, "task": c.task_run_id()}))
        }
    });
    let heard = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = heard.clone();
    let listener = Workflow::new("emits-heard").on_events(["emits:go"]).task(
        "heard",
        move |_: Value, c: Context| {
            seen.lock()
                .push((c.workflow_run_id().to_string(), c.metadata().clone()));
            async move { Ok::<_, TaskError>(json!({})) }
        },
    );
    let rt = t.worker(4, vec![pusher, listener]).await;
    assert!(handle.set(rt.clone()).is_ok(), "set once");
    let run = rt
        .run_no_wait("emits-pusher", &json!({}))
        .await
        .expect("trigger");
    let out: Value = run.result_within(RESULT).await.expect("the push succeeds");
    let source = run.run_id().to_string();
    let (event, task) = (
        out["event"].as_str().expect("an event id").to_string(),
        out["task"].as_str().expect("a task id").to_string(),
    );
    super::until("the event's run", || heard.lock().len() == 1).await;
    let (started, meta) = heard.lock()[0].clone();
    assert_eq!(meta["hatchet__source_workflow_run_id"], source, "{meta:?}");
    assert_eq!(meta["hatchet__source_step_run_id"], task, "{meta:?}");

    let api = rt.api();
    let trace = derived("hatchet-engine-wf-trace:", &source, 16);
    let spans = until_read(
        "the event in the pushing run's trace",
        || api.run_trace(&source),
        |r| {
            r.as_ref().is_ok_and(|s| {
                !named(s, "hatchet.engine.event_emitted").is_empty()
                    && named(s, "hatchet.engine.workflow_run").len() == 2
            })
        },
    )
    .await
    .expect("trace");
    let emitted = named(&spans, "hatchet.engine.event_emitted");
    assert_eq!(emitted.len(), 1, "one span per event: {spans:#?}");
    let e = emitted[0];
    let evt_span = derived_from(
        &[
            b"hatchet-engine-evt-span:",
            &uuid_bytes(&event),
            &uuid_bytes(&source),
        ],
        8,
    );
    let step_span = derived_from(
        &[
            b"hatchet-engine-sr-span:",
            &uuid_bytes(&task),
            &0u32.to_be_bytes(),
            b"step_run",
        ],
        8,
    );
    assert_eq!(e.trace_id, trace);
    assert_eq!(e.span_id, evt_span);
    assert_eq!(e.parent_span_id.as_deref(), Some(step_span.as_str()));
    assert_eq!(e.attributes["hatchet.event_id"], event);
    assert_eq!(e.attributes["hatchet.workflow_run_id"], source);
    assert_eq!(
        e.attributes["hatchet.triggered_workflow_run_ids"],
        json!([started]).to_string()
    );
    assert!(
        named(&spans, "hatchet.engine.event").is_empty(),
        "no SDK traceparent on the push: no event span ({spans:#?})"
    );
    let root = named(&spans, "hatchet.engine.workflow_run")
        .into_iter()
        .find(|s| s.attributes.get("hatchet.workflow_run_id") == Some(&started))
        .expect("the started run's root, in the same trace");
    // The real engine derives the root's parent from the event and the started run itself:
    // the run's metadata carries the traceparent the engine stamped, so its rule for a push
    // without one (the source run's event span, `event_emitted`) does not apply, and the
    // parent names no span in the trace.
    let dangling = derived_from(
        &[
            b"hatchet-engine-evt-span:",
            &uuid_bytes(&event),
            &uuid_bytes(&started),
        ],
        8,
    );
    assert_eq!(root.parent_span_id.as_deref(), Some(dangling.as_str()));
    assert!(spans.iter().all(|s| s.span_id != dangling), "{spans:#?}");
    rt.shutdown(Duration::from_secs(5)).await;
}
