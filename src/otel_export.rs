//! The engine's OpenTelemetry collector as a span exporter (feature `otel-export`): the
//! application's spans reach the engine over the runtime's own connection, as the official
//! SDKs' instrumentors send them (OTLP `TraceService/Export` on the engine's gRPC port, with the
//! client token), and join each run's trace there beside the engine's own spans.
//!
//! # Invariants
//!
//! 1. An export is one `Export` call through the gRPC retry core (the spans are keyed by trace,
//!    start and span id at the engine, so a repeat stores nothing twice); a failed export is
//!    the SDK's error to report, and the spans are dropped, as every OTLP exporter drops them.
//! 2. The call runs on the runtime's tokio runtime whatever thread the SDK exports from, and
//!    takes at most 10 s. From the batch processor's own thread the export waits for it and
//!    reports its outcome; from one of the runtime's threads (a simple processor exports where
//!    a span ends, blocking that thread) it answers at once and the call goes on by itself, so
//!    it never holds a thread the call needs. Use the batch processor.
//! 3. What is sent is what the SDK recorded: ids, names, kinds, times, attributes (strings,
//!    booleans, integers, doubles and their arrays), status, the instrumentation scope, and the
//!    resource the SDK gives the exporter (`service.name` names the service at the engine).

use std::collections::BTreeMap;
use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::connection::Connection;
use crate::protocol::otlp;

const PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// How long one export may take, retries included (the OTLP exporters' default).
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Exports the application's spans to the engine's collector, where they join each run's trace
/// ([`crate::client::api::Api::run_trace`]). Made by `RuntimeHandle::span_exporter`; give it to the
/// application's tracer provider:
///
/// ```no_run
/// # async fn f(rt: hatchet_runtime::RuntimeHandle) {
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
///     .with_batch_exporter(rt.span_exporter())
///     .build();
/// opentelemetry::global::set_tracer_provider(provider);
/// # }
/// ```
#[derive(Clone)]
pub struct EngineSpanExporter {
    conn: Connection,
    rt: tokio::runtime::Handle,
    resource: Vec<otlp::KeyValue>,
}

impl std::fmt::Debug for EngineSpanExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSpanExporter").finish_non_exhaustive()
    }
}

impl EngineSpanExporter {
    pub(crate) fn new(conn: Connection, rt: tokio::runtime::Handle) -> Self {
        EngineSpanExporter {
            conn,
            rt,
            resource: Vec::new(),
        }
    }
}

impl SpanExporter for EngineSpanExporter {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        use futures::future::{Either, ready};
        let req = request(&self.resource, batch);
        let conn = self.conn.clone();
        // Invariant 2: on the runtime's reactor; a JoinHandle completes under any executor.
        let call = self.rt.spawn(async move {
            let client = conn.otlp();
            let sent = conn.call(
                PATH,
                &client,
                &req,
                |mut c, r| async move { c.export(r).await },
            );
            match tokio::time::timeout(EXPORT_TIMEOUT, sent).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!(
                    "the engine's collector did not take the spans: {e}"
                )),
                Err(_) => Err(format!(
                    "the engine's collector did not answer within {EXPORT_TIMEOUT:?}"
                )),
            }
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            // A simple processor exports where a span ends, blocking that thread until the
            // export is done: on one of the runtime's own threads that wait could hold the
            // thread the call needs. The call goes on by itself; a failure is logged.
            drop(tokio::spawn(async move {
                if let Ok(Err(e)) = call.await {
                    tracing::warn!(error = %e, "span export");
                }
            }));
            return Either::Left(ready(Ok(())));
        }
        Either::Right(async move {
            match call.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(OTelSdkError::InternalFailure(e)),
                Err(e) => Err(OTelSdkError::InternalFailure(format!(
                    "the export was dropped with the runtime: {e}"
                ))),
            }
        })
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.iter().map(|(k, v)| kv(k.as_str(), v)).collect();
    }
}

fn any(v: &Value) -> otlp::AnyValue {
    use otlp::any_value::Value as V;
    let array = |values: Vec<V>| {
        V::ArrayValue(otlp::ArrayValue {
            values: values
                .into_iter()
                .map(|v| otlp::AnyValue { value: Some(v) })
                .collect(),
        })
    };
    let value = match v {
        Value::Bool(b) => V::BoolValue(*b),
        Value::I64(i) => V::IntValue(*i),
        Value::F64(f) => V::DoubleValue(*f),
        Value::String(s) => V::StringValue(s.to_string()),
        Value::Array(Array::Bool(a)) => array(a.iter().map(|b| V::BoolValue(*b)).collect()),
        Value::Array(Array::I64(a)) => array(a.iter().map(|i| V::IntValue(*i)).collect()),
        Value::Array(Array::F64(a)) => array(a.iter().map(|f| V::DoubleValue(*f)).collect()),
        Value::Array(Array::String(a)) => {
            array(a.iter().map(|s| V::StringValue(s.to_string())).collect())
        }
        other => V::StringValue(other.to_string()),
    };
    otlp::AnyValue { value: Some(value) }
}

fn kv(key: &str, v: &Value) -> otlp::KeyValue {
    otlp::KeyValue {
        key: key.to_string(),
        value: Some(any(v)),
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn span(s: &SpanData) -> otlp::Span {
    let kind = match s.span_kind {
        SpanKind::Internal => otlp::SpanKind::Internal,
        SpanKind::Server => otlp::SpanKind::Server,
        SpanKind::Client => otlp::SpanKind::Client,
        SpanKind::Producer => otlp::SpanKind::Producer,
        SpanKind::Consumer => otlp::SpanKind::Consumer,
    };
    let (code, message) = match &s.status {
        Status::Unset => (otlp::StatusCode::Unset, String::new()),
        Status::Ok => (otlp::StatusCode::Ok, String::new()),
        Status::Error { description } => (otlp::StatusCode::Error, description.to_string()),
    };
    otlp::Span {
        trace_id: s.span_context.trace_id().to_bytes().to_vec(),
        span_id: s.span_context.span_id().to_bytes().to_vec(),
        trace_state: s.span_context.trace_state().header(),
        parent_span_id: if s.parent_span_id == SpanId::INVALID {
            Vec::new()
        } else {
            s.parent_span_id.to_bytes().to_vec()
        },
        name: s.name.to_string(),
        kind: kind as i32,
        start_time_unix_nano: nanos(s.start_time),
        end_time_unix_nano: nanos(s.end_time),
        attributes: s
            .attributes
            .iter()
            .map(|a| kv(a.key.as_str(), &a.value))
            .collect(),
        dropped_attributes_count: s.dropped_attributes_count,
        dropped_events_count: s.events.dropped_count,
        dropped_links_count: s.links.dropped_count,
        status: Some(otlp::SpanStatus {
            message,
            code: code as i32,
        }),
        flags: u32::from(s.span_context.trace_flags().to_u8()),
    }
}

/// One export request: the resource's spans, grouped by instrumentation scope (invariant 3).
fn request(resource: &[otlp::KeyValue], batch: Vec<SpanData>) -> otlp::ExportTraceServiceRequest {
    let mut scopes: BTreeMap<(String, String), Vec<otlp::Span>> = BTreeMap::new();
    for s in &batch {
        let scope = &s.instrumentation_scope;
        scopes
            .entry((
                scope.name().to_string(),
                scope.version().unwrap_or_default().to_string(),
            ))
            .or_default()
            .push(span(s));
    }
    otlp::ExportTraceServiceRequest {
        resource_spans: vec![otlp::ResourceSpans {
            resource: Some(otlp::Resource {
                attributes: resource.to_vec(),
                dropped_attributes_count: 0,
            }),
            scope_spans: scopes
                .into_iter()
                .map(|((name, version), spans)| otlp::ScopeSpans {
                    scope: Some(otlp::InstrumentationScope {
                        name,
                        version,
                        ..Default::default()
                    }),
                    spans,
                    schema_url: String::new(),
                })
                .collect(),
            schema_url: String::new(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    use super::*;
    use opentelemetry::KeyValue;

    #[test]
    fn a_span_goes_out_with_its_ids_parent_attributes_status_and_scope() {
        let mem = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(mem.clone())
            .build();
        let tracer = provider.tracer("scope-a");
        let parent = tracer.start("parent");
        let cx = opentelemetry::Context::current_with_span(parent);
        let mut child = tracer.start_with_context("child", &cx);
        child.set_attribute(KeyValue::new("n", 42));
        child.set_attribute(KeyValue::new(
            "tags",
            Value::Array(vec![opentelemetry::StringValue::from("a"), "b".into()].into()),
        ));
        child.set_status(Status::error("it broke"));
        child.end();
        cx.span().end();
        let spans = mem.get_finished_spans().expect("spans");
        let resource = [kv("service.name", &Value::from("svc"))];
        let req = request(&resource, spans.clone());
        let rs = &req.resource_spans[0];
        assert_eq!(
            rs.resource.as_ref().expect("resource").attributes[0].key,
            "service.name"
        );
        assert_eq!(rs.scope_spans.len(), 1);
        assert_eq!(
            rs.scope_spans[0].scope.as_ref().expect("scope").name,
            "scope-a"
        );
        let out = &rs.scope_spans[0].spans;
        let child = out.iter().find(|s| s.name == "child").expect("child");
        let parent = out.iter().find(|s| s.name == "parent").expect("parent");
        assert_eq!(child.parent_span_id, parent.span_id);
        assert!(parent.parent_span_id.is_empty(), "a root has no parent");
        assert_eq!(child.trace_id, parent.trace_id);
        assert_eq!(child.trace_id.len(), 16);
        let status = child.status.as_ref().expect("status");
        assert_eq!(
            (status.code, status.message.as_str()),
            (otlp::StatusCode::Error as i32, "it broke")
        );
        let n = child.attributes.iter().find(|a| a.key == "n").expect("n");
        assert_eq!(
            n.value.as_ref().and_then(|v| v.value.clone()),
            Some(otlp::any_value::Value::IntValue(42))
        );
        let tags = child
            .attributes
            .iter()
            .find(|a| a.key == "tags")
            .expect("tags");
        assert!(matches!(
            tags.value.as_ref().and_then(|v| v.value.as_ref()),
            Some(otlp::any_value::Value::ArrayValue(a)) if a.values.len() == 2
        ));
        assert!(child.end_time_unix_nano >= child.start_time_unix_nano);
    }
}
