//! OpenTelemetry (features `otel` and `otel-export`, on in the tests): one trace from the
//! client's span through the trigger to the task execution on the worker, exported twice: to an
//! in-memory exporter, and to the engine's collector with the runtime's own exporter, where the
//! spans join the run's trace beside the engine's. On both engines (the real one's environment
//! set, as for the conformance suite).

use std::time::Duration;

use hatchet_runtime::api::TraceSpan;
use hatchet_runtime::{Context, TaskError, Workflow};
use opentelemetry::trace::{FutureExt as _, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context as OtelContext, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::{Value, json};

use super::{RESULT, Target, until_read};

/// Puts the no-op tracer provider and propagator back (on a panic too).
struct ResetGlobals;

impl Drop for ResetGlobals {
    fn drop(&mut self) {
        global::set_text_map_propagator(
            opentelemetry::propagation::TextMapCompositePropagator::new(Vec::new()),
        );
        global::set_tracer_provider(opentelemetry::trace::noop::NoopTracerProvider::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_spans_the_client_the_trigger_and_the_task_and_reaches_the_engine() {
    // Global OpenTelemetry state: this is the only test that sets it, and it puts the no-op
    // provider and propagator back when it ends (a test that reads it waits for that).
    let _otel = super::OTEL_GLOBALS.write().await;
    let _reset = ResetGlobals;
    let t = Target::new("otel").await;
    let rt = t.runtime().await;
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_batch_exporter(rt.span_exporter())
        .build();
    global::set_tracer_provider(provider.clone());
    global::set_text_map_propagator(TraceContextPropagator::new());

    rt.register(
        Workflow::new("otel-wf").task("t", |_i: Value, c: Context| async move {
            // The W3C context travelled in the run's additional metadata.
            let traceparent = c.metadata().get("traceparent").cloned();
            let _work = global::tracer("the-task").start("task-work");
            Ok::<_, TaskError>(json!({ "traceparent": traceparent }))
        }),
    )
    .await
    .expect("register");
    rt.start_worker(hatchet_runtime::WorkerOptions::new("otel", 2))
        .await
        .expect("start");

    let tracer = global::tracer("the-application");
    let root = tracer.start("client-operation");
    let cx = OtelContext::current_with_span(root);
    let h = async { rt.run_no_wait("otel-wf", &json!({})).await }
        .with_context(cx.clone())
        .await
        .expect("trigger");
    let out: Value = h.result_within(RESULT).await.expect("run");
    cx.span().end();
    provider.force_flush().expect("flush");

    // Every test's spans reach the global provider while it is set: this run's are found by
    // its id.
    let spans = exporter.get_finished_spans().expect("spans");
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == name
                    && (name == "client-operation"
                        || s.attributes.iter().any(|a| {
                            a.key.as_str() == "hatchet.workflow_run_id"
                                && a.value.as_str() == h.run_id()
                        }))
            })
            .unwrap_or_else(|| {
                panic!(
                    "no span {name} of run {}: {:?}",
                    h.run_id(),
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            })
    };
    let root = find("client-operation");
    let trigger = find("hatchet.run_workflow");
    let task = find("hatchet.start_step_run");
    // The engine names the tenant in the assignment (ours used to leave it empty), and the task's
    // span carries it as the official SDKs' do.
    let tenant = task
        .attributes
        .iter()
        .find(|a| a.key.as_str() == "hatchet.tenant_id")
        .map(|a| a.value.as_str().to_string());
    assert_eq!(
        tenant.as_deref(),
        Some(t.config().tenant_id.as_str()),
        "the task's span names the tenant the engine sent"
    );
    let trace = root.span_context.trace_id();
    assert_eq!(
        trigger.span_context.trace_id(),
        trace,
        "the trigger is in the client's trace"
    );
    assert_eq!(
        task.span_context.trace_id(),
        trace,
        "the task is in the client's trace"
    );
    assert_eq!(trigger.parent_span_id, root.span_context.span_id());
    assert_eq!(
        task.parent_span_id,
        trigger.span_context.span_id(),
        "the task's parent is the trigger"
    );
    assert!(
        task.parent_span_is_remote,
        "the parent came through the engine"
    );
    let traceparent = out["traceparent"]
        .as_str()
        .expect("traceparent in the metadata");
    assert!(
        traceparent.contains(&trigger.span_context.span_id().to_string()),
        "{traceparent}"
    );

    // At the engine: the runtime's spans in the run's trace, beside the engine's; the task's
    // span filed under the run's root, as the official SDKs' are.
    let names = |s: &[TraceSpan]| -> Vec<String> { s.iter().map(|x| x.name.clone()).collect() };
    let want = [
        "client-operation",
        "hatchet.run_workflow",
        "hatchet.start_step_run",
        "task-work",
        "hatchet.engine.workflow_run",
        "hatchet.engine.queued",
        "hatchet.engine.start_step_run",
    ];
    let api = rt.api();
    let at_engine = until_read(
        "the runtime's spans in the run's trace at the engine",
        || api.run_trace(h.run_id()),
        |r| {
            r.as_ref()
                .is_ok_and(|s| want.iter().all(|w| names(s).iter().any(|n| n == w)))
        },
    )
    .await
    .expect("trace");
    assert_eq!(
        at_engine.len(),
        want.len(),
        "each once: {:?}",
        names(&at_engine)
    );
    let trace_hex = trace.to_string();
    assert!(
        at_engine.iter().all(|s| s.trace_id == trace_hex),
        "{at_engine:#?}"
    );
    let by = |n: &str| at_engine.iter().find(|s| s.name == n).expect("span");
    assert_eq!(
        by("hatchet.start_step_run").parent_span_id.as_deref(),
        Some(by("hatchet.engine.workflow_run").span_id.as_str()),
        "the task's span hangs under the run's root at the engine"
    );
    assert_eq!(
        by("hatchet.engine.workflow_run").parent_span_id.as_deref(),
        Some(by("hatchet.run_workflow").span_id.as_str()),
        "the run's root hangs under the trigger"
    );
    assert_eq!(by("hatchet.run_workflow").kind, "PRODUCER");
    rt.shutdown(Duration::from_secs(5)).await;
    let _ = provider.shutdown();
}

/// `otel_export.rs` invariant 2: a simple processor exports where a span ends, blocking that
/// thread; ended on the runtime's only thread (a current-thread runtime), the export must not
/// wait for a call that needs that thread. The span still reaches the engine, in the run's
/// trace it names.
#[tokio::test]
async fn a_simple_processor_on_the_runtime_s_own_thread_exports_without_blocking_it() {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{
        Span as _, SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
    };
    let t = Target::new("otelsimple").await;
    let rt = t
        .worker(
            1,
            vec![
                Workflow::new("simple-wf").task("t", |_i: Value, _c: Context| async move {
                    Ok::<_, TaskError>(json!({}))
                }),
            ],
        )
        .await;
    let h = rt
        .run_no_wait("simple-wf", &json!({}))
        .await
        .expect("trigger");
    let _: Value = h.result_within(RESULT).await.expect("run");
    // The real engine writes the run's readable row after the result stream answers.
    let api = rt.api();
    let run = until_read(
        "the run's row",
        || async { api.run(h.run_id()).await.ok() },
        Option::is_some,
    )
    .await
    .expect("run");
    let tp = run.metadata["traceparent"]
        .as_str()
        .expect("traceparent")
        .to_string();
    let parts: Vec<&str> = tp.split('-').collect();
    let parent = SpanContext::new(
        TraceId::from_hex(parts[1]).expect("trace id"),
        SpanId::from_hex(parts[2]).expect("span id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(rt.span_exporter())
        .build();
    let tracer = provider.tracer("simple");
    let cx = OtelContext::new().with_remote_span_context(parent);
    let mut span = tracer.start_with_context("on-the-runtime-thread", &cx);
    span.set_attribute(KeyValue::new("hatchet.step_run_id", h.run_id().to_string()));
    span.end(); // the export runs here, on this runtime's only thread
    let spans = until_read(
        "the span at the engine",
        || api.run_trace(h.run_id()),
        |r| {
            r.as_ref()
                .is_ok_and(|s| s.iter().any(|x| x.name == "on-the-runtime-thread"))
        },
    )
    .await
    .expect("trace");
    assert!(spans.iter().all(|s| s.trace_id == parts[1]), "{spans:#?}");
    rt.shutdown(Duration::from_secs(5)).await;
}
