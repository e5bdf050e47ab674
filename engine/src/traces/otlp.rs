//! An OTLP trace export (`opentelemetry.proto.collector.trace.v1.TraceService/Export`, what the
//! SDKs' instrumentors send to the engine) as span rows, with the real engine's collector
//! rules: the resource's `service.name` names the service (`unknown` without one); the
//! attributes `hatchet.step_run_id`, `hatchet.workflow_run_id` and `hatchet.retry_count` tie a
//! span to its task, run and attempt; and an SDK's `hatchet.start_step_run` span that has a
//! parent hangs under its run's root span (the engine's `hatchet.engine.workflow_run`).

use hatchet_runtime::protocol::otlp;
use serde_json::{Map, Value};

use super::SpanRow;

/// A value as JSON: strings, booleans, integers and doubles as themselves, arrays and lists of
/// pairs as arrays and objects, bytes as base64 (how the real engine's JSON encodes them).
fn value(v: Option<&otlp::AnyValue>) -> Value {
    use base64::Engine as _;
    use otlp::any_value::Value as V;
    match v.and_then(|v| v.value.as_ref()) {
        Some(V::StringValue(s)) => Value::String(s.clone()),
        Some(V::BoolValue(b)) => Value::Bool(*b),
        Some(V::IntValue(i)) => Value::from(*i),
        Some(V::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number)
        }
        Some(V::ArrayValue(a)) => Value::Array(a.values.iter().map(|x| value(Some(x))).collect()),
        Some(V::KvlistValue(l)) => Value::Object(attributes(&l.values)),
        Some(V::BytesValue(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        None => Value::Null,
    }
}

fn attributes(kvs: &[otlp::KeyValue]) -> Map<String, Value> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn kind(k: i32) -> &'static str {
    match otlp::SpanKind::try_from(k) {
        Ok(otlp::SpanKind::Internal) => "INTERNAL",
        Ok(otlp::SpanKind::Server) => "SERVER",
        Ok(otlp::SpanKind::Client) => "CLIENT",
        Ok(otlp::SpanKind::Producer) => "PRODUCER",
        Ok(otlp::SpanKind::Consumer) => "CONSUMER",
        _ => "UNSPECIFIED",
    }
}

fn status(code: i32) -> &'static str {
    match otlp::StatusCode::try_from(code) {
        Ok(otlp::StatusCode::Ok) => "OK",
        Ok(otlp::StatusCode::Error) => "ERROR",
        _ => "UNSET",
    }
}

/// An id attribute that is a UUID (the real engine stores only those).
fn id_attr(attrs: &[otlp::KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(otlp::any_value::Value::StringValue(s)) if uuid::Uuid::parse_str(s).is_ok() => {
                Some(s.clone())
            }
            _ => None,
        }
    })
}

/// Every span of an export, as rows.
pub(crate) fn rows(req: &otlp::ExportTraceServiceRequest) -> Vec<SpanRow> {
    let mut out = Vec::new();
    for rs in &req.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource
            .get("service.name")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        for ss in &rs.scope_spans {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in &ss.spans {
                let task_run_id = id_attr(&span.attributes, "hatchet.step_run_id");
                let workflow_run_id = id_attr(&span.attributes, "hatchet.workflow_run_id");
                let retry_count = span
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "hatchet.retry_count")
                    .and_then(
                        |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(otlp::any_value::Value::IntValue(i)) if *i > 0 => {
                                i32::try_from(*i).ok()
                            }
                            _ => None,
                        },
                    )
                    .unwrap_or(0);
                let mut parent = span.parent_span_id.clone();
                if let Some(run) = &workflow_run_id
                    && !parent.is_empty()
                    && span.name.starts_with("hatchet.start_step_run")
                {
                    parent = super::spans::run_span_id(run);
                }
                let st = span.status.as_ref();
                out.push(SpanRow {
                    trace_id: span.trace_id.clone(),
                    span_id: span.span_id.clone(),
                    parent_span_id: parent,
                    name: span.name.clone(),
                    kind: kind(span.kind),
                    service_name: service.clone(),
                    status_code: status(st.map_or(0, |s| s.code)),
                    status_message: st.map(|s| s.message.clone()).unwrap_or_default(),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    resource_attributes: resource.clone(),
                    attributes: attributes(&span.attributes),
                    scope: scope.clone(),
                    retry_count,
                    task_run_id,
                    workflow_run_id,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, v: otlp::any_value::Value) -> otlp::KeyValue {
        otlp::KeyValue {
            key: key.into(),
            value: Some(otlp::AnyValue { value: Some(v) }),
        }
    }

    #[test]
    fn an_sdk_step_span_is_tied_to_its_task_and_hangs_under_its_run() {
        use otlp::any_value::Value as V;
        let run = "6f1f8a52-0f1e-4f5c-9c61-3f0f5d1e2a10";
        let req = otlp::ExportTraceServiceRequest {
            resource_spans: vec![otlp::ResourceSpans {
                resource: Some(otlp::Resource {
                    attributes: vec![kv("service.name", V::StringValue("svc".into()))],
                    dropped_attributes_count: 0,
                }),
                scope_spans: vec![otlp::ScopeSpans {
                    scope: Some(otlp::InstrumentationScope {
                        name: "hatchet_sdk".into(),
                        ..Default::default()
                    }),
                    spans: vec![otlp::Span {
                        trace_id: vec![7; 16],
                        span_id: vec![8; 8],
                        parent_span_id: vec![9; 8],
                        name: "hatchet.start_step_run".into(),
                        kind: otlp::SpanKind::Consumer as i32,
                        start_time_unix_nano: 10,
                        end_time_unix_nano: 25,
                        attributes: vec![
                            kv("hatchet.step_run_id", V::StringValue(run.into())),
                            kv("hatchet.workflow_run_id", V::StringValue(run.into())),
                            kv("hatchet.retry_count", V::IntValue(2)),
                            kv("n", V::IntValue(42)),
                            kv("bad.id", V::StringValue("x".into())),
                        ],
                        status: Some(otlp::SpanStatus {
                            message: String::new(),
                            code: otlp::StatusCode::Ok as i32,
                        }),
                        ..Default::default()
                    }],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let rows = rows(&req);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.service_name, "svc");
        assert_eq!((r.kind, r.status_code), ("CONSUMER", "OK"));
        assert_eq!(r.task_run_id.as_deref(), Some(run));
        assert_eq!(r.retry_count, 2);
        assert_eq!(r.parent_span_id, super::super::spans::run_span_id(run));
        assert_eq!(r.attributes["n"], 42);
        assert_eq!(r.scope, "hatchet_sdk");
    }

    #[test]
    fn a_span_without_hatchet_ids_or_resource_is_kept_unknown_and_unfindable() {
        let req = otlp::ExportTraceServiceRequest {
            resource_spans: vec![otlp::ResourceSpans {
                resource: None,
                scope_spans: vec![otlp::ScopeSpans {
                    scope: None,
                    spans: vec![otlp::Span {
                        name: "custom".into(),
                        parent_span_id: vec![1; 8],
                        ..Default::default()
                    }],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let r = &rows(&req)[0];
        assert_eq!(r.service_name, "unknown");
        assert_eq!((r.kind, r.status_code), ("UNSPECIFIED", "UNSET"));
        assert_eq!(r.task_run_id, None);
        assert_eq!(
            r.parent_span_id,
            vec![1; 8],
            "only a step span is re-parented"
        );
    }
}
