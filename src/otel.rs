//! OpenTelemetry (feature `otel`): W3C trace context carried from trigger to task through the
//! run's additional metadata, as the official SDKs' instrumentors carry it, so one trace spans the
//! client, the engine and the worker.
//!
//! # Invariants
//!
//! 1. A trigger starts a producer span `hatchet.run_workflow` (attribute
//!    `hatchet.workflow_name`) as a child of the caller's current OpenTelemetry context and
//!    injects that span's context into the run's additional metadata with the *global*
//!    text-map propagator (set `opentelemetry_sdk::propagation::TraceContextPropagator` to get
//!    `traceparent` and `tracestate`); without one, nothing is injected and nothing else
//!    changes.
//! 2. A task execution runs inside a consumer span `hatchet.start_step_run` whose parent is the
//!    context extracted from the action's additional metadata (the trigger's span, or the
//!    engine's root span of the run: the engine gives every run a `traceparent`), with the
//!    official SDKs' attributes (`hatchet.step_run_id`, `hatchet.workflow_run_id`,
//!    `hatchet.retry_count`, `hatchet.step_name`, `hatchet.action_id`); a failed task marks the
//!    span with an error. Names and attributes are the SDKs', so the engine files the spans
//!    under the run when they reach its collector (feature `otel-export`).
//! 3. Only the OpenTelemetry API is used: the tracer provider and the propagator are the
//!    application's (global). The runtime adds no SDK of its own unless feature `otel-export`
//!    asks for its exporter to the engine's collector (`telemetry::EngineSpanExporter`).

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
        .span_builder("hatchet.run_workflow")
        .with_kind(SpanKind::Producer)
        .with_attributes([KeyValue::new("hatchet.workflow_name", workflow.to_string())])
        .start_with_context(&tracer, &parent);
    let cx = parent.with_span(span);
    global::get_text_map_propagator(|p| p.inject_context(&cx, &mut MetadataInjector(metadata)));
    cx
}

/// Records the trigger's result on its span and ends it.
pub(crate) fn trigger_done(cx: &Context, run_id: Result<&str, &crate::error::Error>) {
    let span = cx.span();
    match run_id {
        Ok(id) => span.set_attribute(KeyValue::new("hatchet.workflow_run_id", id.to_string())),
        Err(e) => span.set_status(Status::error(e.to_string())),
    }
    span.end();
}

/// The context a task execution runs in (invariant 2).
pub(crate) fn task_context(
    action: &crate::protocol::AssignedAction,
    metadata: &Map<String, Value>,
) -> Context {
    let parent = global::get_text_map_propagator(|p| p.extract(&MetadataExtractor(metadata)));
    let tracer = global::tracer(TRACER);
    let mut attributes = vec![
        KeyValue::new("hatchet.action_id", action.action_id.clone()),
        KeyValue::new("hatchet.step_name", action.task_name.clone()),
        KeyValue::new("hatchet.workflow_run_id", action.workflow_run_id.clone()),
        KeyValue::new("hatchet.step_run_id", action.task_run_external_id.clone()),
        KeyValue::new("hatchet.retry_count", i64::from(action.retry_count)),
    ];
    // The engine names the tenant in every assignment; the official SDKs put it on the span.
    if !action.tenant_id.is_empty() {
        attributes.push(KeyValue::new("hatchet.tenant_id", action.tenant_id.clone()));
    }
    let span = tracer
        .span_builder("hatchet.start_step_run")
        .with_kind(SpanKind::Consumer)
        .with_attributes(attributes)
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
