//! OpenTelemetry (feature `otel`): W3C trace context carried from trigger to task through the
//! run's additional metadata, as the official SDKs' instrumentors carry it, so one trace spans the
//! client, the engine and the worker.
//!
//! # Invariants
//!
//! 1. A trigger starts a producer span `hatchet.trigger <workflow>` as a child of the caller's
//!    current OpenTelemetry context and injects that span's context into the run's additional
//!    metadata with the *global* text-map propagator (set
//!    `opentelemetry_sdk::propagation::TraceContextPropagator` to get `traceparent` and
//!    `tracestate`); without one, nothing is injected and nothing else changes.
//! 2. A task execution runs inside a consumer span `hatchet.task <action>` whose parent is the
//!    context extracted from the action's additional metadata (the trigger's span), with the run
//!    id, task run id and retry count as attributes; a failed task marks the span with an error.
//! 3. Only the OpenTelemetry API is used: the tracer provider and the propagator are the
//!    application's (global), so the runtime adds no exporter and no SDK of its own.

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue, global};
use serde_json::{Map, Value};

const TRACER: &str = "hatchet-runtime";

struct MetadataInjector<'a>(&'a mut Map<String, Value>);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), Value::String(value));
    }
}

struct MetadataExtractor<'a>(&'a Map<String, Value>);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Starts the trigger's span and injects its context into `metadata` (invariant 1). The span
/// ends when the returned context's last clone is dropped; call [`trigger_done`] first.
pub(crate) fn trigger_span(workflow: &str, metadata: &mut Map<String, Value>) -> Context {
    let tracer = global::tracer(TRACER);
    let parent = Context::current();
    let span = tracer
        .span_builder(format!("hatchet.trigger {workflow}"))
        .with_kind(SpanKind::Producer)
        .with_attributes([KeyValue::new("hatchet.workflow", workflow.to_string())])
        .start_with_context(&tracer, &parent);
    let cx = parent.with_span(span);
    global::get_text_map_propagator(|p| p.inject_context(&cx, &mut MetadataInjector(metadata)));
    cx
}

/// Records the trigger's result on its span and ends it.
pub(crate) fn trigger_done(cx: &Context, run_id: Result<&str, &crate::Error>) {
    let span = cx.span();
    match run_id {
        Ok(id) => span.set_attribute(KeyValue::new("hatchet.run_id", id.to_string())),
        Err(e) => span.set_status(Status::error(e.to_string())),
    }
    span.end();
}

/// The context a task execution runs in (invariant 2).
pub(crate) fn task_context(
    action_id: &str,
    run_id: &str,
    task_run_id: &str,
    retry_count: i32,
    metadata: &Map<String, Value>,
) -> Context {
    let parent = global::get_text_map_propagator(|p| p.extract(&MetadataExtractor(metadata)));
    let tracer = global::tracer(TRACER);
    let span = tracer
        .span_builder(format!("hatchet.task {action_id}"))
        .with_kind(SpanKind::Consumer)
        .with_attributes([
            KeyValue::new("hatchet.action", action_id.to_string()),
            KeyValue::new("hatchet.run_id", run_id.to_string()),
            KeyValue::new("hatchet.task_run_id", task_run_id.to_string()),
            KeyValue::new("hatchet.retry_count", i64::from(retry_count)),
        ])
        .start_with_context(&tracer, &parent);
    parent.with_span(span)
}

/// Ends a task's span, marking a failure.
pub(crate) fn task_done(cx: &Context, error: Option<&str>) {
    let span = cx.span();
    if let Some(e) = error {
        span.set_status(Status::error(e.to_string()));
    }
    span.end();
}
