//! OpenTelemetry (feature `otel`, on in the tests): one trace from the client's span through
//! the trigger to the task execution on the worker, exported by an in-memory exporter.

use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::{Context, Runtime, TaskError, WorkerOptions, Workflow};
use opentelemetry::trace::{FutureExt as _, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context as OtelContext, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::{Value, json};

#[tokio::test]
async fn a_trace_spans_the_client_the_trigger_and_the_task() {
    // Global OpenTelemetry state: this is the only test that sets it.
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_tracer_provider(provider.clone());
    global::set_text_map_propagator(TraceContextPropagator::new());

    let e = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    let rt = Runtime::spawn(e.client_config()).await.expect("runtime");
    rt.register(
        Workflow::new("otel-wf").task("t", |_i: Value, c: Context| async move {
            // The W3C context travelled in the run's additional metadata.
            let traceparent = c.metadata().get("traceparent").cloned();
            Ok::<_, TaskError>(json!({ "traceparent": traceparent }))
        }),
    )
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("w", 2))
        .await
        .expect("start");

    let tracer = global::tracer("the-application");
    let root = tracer.start("client-operation");
    let cx = OtelContext::current_with_span(root);
    let out: Value = async { rt.run("otel-wf", &json!({})).await }
        .with_context(cx.clone())
        .await
        .expect("run");
    cx.span().end();
    rt.shutdown(Duration::from_secs(1)).await;
    provider.force_flush().expect("flush");

    let spans = exporter.get_finished_spans().expect("spans");
    let find = |name: &str| {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "no span {name}: {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let root = find("client-operation");
    let trigger = find("hatchet.trigger otel-wf");
    let task = find("hatchet.task otel-wf:t");
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
}
