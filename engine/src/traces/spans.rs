//! The engine's own spans and a run's `traceparent`, as pure functions of a run's facts, with
//! the real engine's rules:
//!
//! - ids are derived: a run's trace id is the first 16 bytes of SHA-256 over
//!   `hatchet-engine-wf-trace:` and the run id's 16 bytes, its root span id the first 8 over
//!   `hatchet-engine-wf-span:`; a task attempt's spans hash `hatchet-engine-sr-span:`, the task
//!   id, the retry count (4 bytes, big-endian) and `queued` or `step_run`; an event's span
//!   `hatchet-engine-evt-span:`, the event id and the run id;
//! - a run's trace is its `traceparent`'s when its metadata carries a valid one (an SDK's
//!   trigger span, a parent's inherited), else its parent's or source run's derived trace, else
//!   its own; the engine writes the `traceparent` it chose into the run's metadata;
//! - a child run's root span hangs under the spawning task's `step_run` span (attempt 0), an
//!   event-triggered run's under the event's span, else under the `traceparent`'s span when
//!   that is not its own root.

use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use super::SpanRow;

/// The id an unreadable one counts as (the real engine's parse of it gives the nil UUID).
const NIL: &str = "00000000-0000-0000-0000-000000000000";

/// Where the engine's spans say they come from.
pub(crate) const ENGINE_SERVICE: &str = "hatchet-engine";

fn derive(size: usize, parts: &[&[u8]]) -> Vec<u8> {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()[..size].to_vec()
}

/// An id's 16 bytes (a UUID's; an id that is not one hashes as its text).
fn id_bytes(id: &str) -> Vec<u8> {
    uuid::Uuid::parse_str(id).map_or_else(|_| id.as_bytes().to_vec(), |u| u.as_bytes().to_vec())
}

/// A run's derived trace id.
pub(crate) fn run_trace_id(run: &str) -> Vec<u8> {
    derive(16, &[b"hatchet-engine-wf-trace:", &id_bytes(run)])
}

/// A run's derived root span id.
pub(crate) fn run_span_id(run: &str) -> Vec<u8> {
    derive(8, &[b"hatchet-engine-wf-span:", &id_bytes(run)])
}

/// The span id of a task attempt's `queued` or `step_run` span.
pub(crate) fn step_span_id(task: &str, retry_count: i32, kind: &str) -> Vec<u8> {
    let rc = (retry_count as u32).to_be_bytes();
    derive(
        8,
        &[
            b"hatchet-engine-sr-span:",
            &id_bytes(task),
            &rc,
            kind.as_bytes(),
        ],
    )
}

/// The span id of an event's span for one run it started.
pub(crate) fn event_span_id(event: &str, run: &str) -> Vec<u8> {
    derive(
        8,
        &[
            b"hatchet-engine-evt-span:",
            &id_bytes(event),
            &id_bytes(run),
        ],
    )
}

/// A W3C `traceparent`'s trace and span ids, if it is one (`00-<32 hex>-<16 hex>-<flags>`).
pub(crate) fn parse_traceparent(tp: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let parts: Vec<&str> = tp.split('-').collect();
    if parts.len() != 4 || parts[1].len() != 32 || parts[2].len() != 16 {
        return None;
    }
    Some((super::unhex(parts[1])?, super::unhex(parts[2])?))
}

fn traceparent_of(meta: &Map<String, Value>) -> Option<(Vec<u8>, Vec<u8>)> {
    meta.get("traceparent")
        .and_then(Value::as_str)
        .and_then(parse_traceparent)
}

fn meta_str<'a>(meta: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    meta.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

/// Gives a run's metadata its `traceparent` unless it carries a valid one: the trace of its
/// parent run (a child), else of its source run (an event a task pushed), else its own, and
/// the run's root span.
pub(crate) fn ensure_traceparent(meta: &mut Map<String, Value>, run: &str) {
    // The real engine keeps one shaped like W3C's (four parts, ids of 32 and 16 characters)
    // even when its ids are not hex; its spans then use the derived trace.
    let shaped = |tp: &str| {
        let parts: Vec<&str> = tp.split('-').collect();
        parts.len() == 4 && parts[1].len() == 32 && parts[2].len() == 16
    };
    if meta
        .get("traceparent")
        .and_then(Value::as_str)
        .is_some_and(shaped)
    {
        return;
    }
    let owner = match (
        meta.get("hatchet__parent_workflow_run_id")
            .and_then(Value::as_str),
        meta.get("hatchet__source_workflow_run_id")
            .and_then(Value::as_str),
    ) {
        (Some(p), _) => Some(p).filter(|p| is_uuid(p)),
        (None, Some(s)) => Some(s).filter(|s| is_uuid(s)),
        (None, None) => None,
    }
    .unwrap_or(run)
    .to_string();
    let tp = format!(
        "00-{}-{}-01",
        super::hex(&run_trace_id(&owner)),
        super::hex(&run_span_id(run))
    );
    meta.insert("traceparent".into(), Value::String(tp));
}

/// What a run's metadata says about where it came from.
#[derive(Debug, Default, PartialEq)]
struct Origin {
    /// The parent run (a child) or the source run (an event a task pushed).
    run: Option<String>,
    /// The parent's or source's task.
    task: Option<String>,
    child: bool,
    event: Option<String>,
}

fn origin(meta: &Map<String, Value>) -> Option<Origin> {
    let valid = |s: &str| is_uuid(s).then(|| s.to_string());
    if let Some(p) = meta_str(meta, "hatchet__parent_workflow_run_id") {
        return Some(Origin {
            run: Some(valid(p)?),
            task: meta_str(meta, "hatchet__parent_step_run_id").and_then(valid),
            child: true,
            event: None,
        });
    }
    let event = meta_str(meta, "hatchet__event_id").and_then(valid);
    if let Some(s) = meta_str(meta, "hatchet__source_workflow_run_id") {
        return Some(Origin {
            run: Some(valid(s)?),
            task: meta_str(meta, "hatchet__source_step_run_id").and_then(valid),
            child: false,
            event,
        });
    }
    event.map(|e| Origin {
        event: Some(e),
        ..Origin::default()
    })
}

/// The trace a run's spans belong to.
pub(crate) fn trace_of_run(meta: &Map<String, Value>, run: &str) -> Vec<u8> {
    if let Some((trace, _)) = traceparent_of(meta) {
        return trace;
    }
    match origin(meta).and_then(|o| o.run) {
        Some(owner) => run_trace_id(&owner),
        None => run_trace_id(run),
    }
}

fn strings(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::String((*v).to_string())))
        .collect()
}

fn engine_span(name: &str, trace_id: Vec<u8>, span_id: Vec<u8>, parent: Vec<u8>) -> SpanRow {
    SpanRow {
        trace_id,
        span_id,
        parent_span_id: parent,
        name: name.to_string(),
        kind: "INTERNAL",
        service_name: ENGINE_SERVICE.to_string(),
        status_code: "OK",
        status_message: String::new(),
        start_ns: 0,
        end_ns: 0,
        resource_attributes: strings(&[("service.name", ENGINE_SERVICE)]),
        attributes: Map::new(),
        scope: ENGINE_SERVICE.to_string(),
        retry_count: 0,
        task_run_id: None,
        workflow_run_id: None,
    }
}

/// A run as its root span reads it.
pub(crate) struct RunFacts<'a> {
    pub run: &'a str,
    pub workflow_id: &'a str,
    pub display_name: &'a str,
    pub created_ns: u64,
    pub meta: &'a Map<String, Value>,
}

/// `hatchet.engine.workflow_run`: a run's root span, an instant at its creation.
pub(crate) fn workflow_run_span(f: &RunFacts<'_>) -> SpanRow {
    let origin = origin(f.meta);
    let tp = traceparent_of(f.meta);
    let own = run_span_id(f.run);
    let mut parent = match &origin {
        Some(Origin {
            child: true, task, ..
        }) => step_span_id(task.as_deref().unwrap_or(NIL), 0, "step_run"),
        Some(Origin {
            event: Some(e),
            run,
            ..
        }) => {
            let by = match run {
                Some(r) if tp.is_none() => r.as_str(),
                _ => f.run,
            };
            event_span_id(e, by)
        }
        _ => Vec::new(),
    };
    if parent.is_empty()
        && let Some((_, sdk)) = &tp
        && *sdk != own
    {
        parent = sdk.clone();
    }
    let mut s = engine_span(
        "hatchet.engine.workflow_run",
        trace_of_run(f.meta, f.run),
        own,
        parent,
    );
    s.attributes = strings(&[
        ("hatchet.span_source", "engine"),
        ("hatchet.workflow_run_id", f.run),
        ("hatchet.workflow_id", f.workflow_id),
        ("hatchet.workflow_name", f.display_name),
    ]);
    s.start_ns = f.created_ns;
    s.end_ns = f.created_ns;
    s.workflow_run_id = Some(f.run.to_string());
    s
}

/// `hatchet.engine.event`: the event that started a run, under the pushing SDK's span when the
/// event's metadata carries its `traceparent` (else in the run's own derived trace).
pub(crate) fn event_span(
    event: &str,
    key: &str,
    seen_ns: u64,
    run: &str,
    event_meta: &Map<String, Value>,
) -> SpanRow {
    // The run's metadata carries the event's; a `traceparent` the engine stamped on the run
    // (its own root span's) is not the pushing SDK's.
    let (trace, parent) = match traceparent_of(event_meta) {
        Some((t, s)) if s != run_span_id(run) => (t, s),
        _ => (run_trace_id(run), Vec::new()),
    };
    let mut s = engine_span(
        "hatchet.engine.event",
        trace,
        event_span_id(event, run),
        parent,
    );
    s.attributes = strings(&[
        ("hatchet.span_source", "engine"),
        ("hatchet.event_key", key),
        ("hatchet.event_id", event),
    ]);
    s.start_ns = seen_ns;
    s.end_ns = seen_ns;
    s.workflow_run_id = Some(run.to_string());
    s
}

/// The run and task that pushed the event which started a run, when its metadata names both
/// as UUIDs (`hatchet__source_workflow_run_id`, `hatchet__source_step_run_id`, written by an
/// SDK pushing from inside a task); the real engine draws `event_emitted` only then.
pub(crate) fn event_source(meta: &Map<String, Value>) -> Option<(String, String)> {
    let run = meta_str(meta, "hatchet__source_workflow_run_id").filter(|s| is_uuid(s))?;
    let task = meta_str(meta, "hatchet__source_step_run_id").filter(|s| is_uuid(s))?;
    Some((run.to_string(), task.to_string()))
}

/// Whether a run's metadata carries an SDK's `traceparent` (not the one the engine stamped,
/// whose span is the run's own root).
pub(crate) fn has_sdk_traceparent(meta: &Map<String, Value>, run: &str) -> bool {
    traceparent_of(meta).is_some_and(|(_, s)| s != run_span_id(run))
}

/// `hatchet.engine.event_emitted`: an event a task pushed, in its source run's derived trace
/// under the task's `step_run` span (attempt 0), naming the runs it started.
pub(crate) fn event_emitted_span(
    event: &str,
    key: &str,
    seen_ns: u64,
    source: (&str, &str),
    triggered: &[&str],
) -> SpanRow {
    let (run, task) = source;
    let mut s = engine_span(
        "hatchet.engine.event_emitted",
        run_trace_id(run),
        event_span_id(event, run),
        step_span_id(task, 0, "step_run"),
    );
    s.attributes = strings(&[
        ("hatchet.span_source", "engine"),
        ("hatchet.event_key", key),
        ("hatchet.event_id", event),
        ("hatchet.workflow_run_id", run),
    ]);
    if !triggered.is_empty() {
        s.attributes.insert(
            "hatchet.triggered_workflow_run_ids".into(),
            Value::String(json!(triggered).to_string()),
        );
    }
    s.start_ns = seen_ns;
    s.end_ns = seen_ns;
    s.workflow_run_id = Some(run.to_string());
    s
}

/// A task attempt as its spans read it.
pub(crate) struct AttemptFacts<'a> {
    pub task: &'a str,
    pub run: &'a str,
    pub readable_id: &'a str,
    pub action: &'a str,
    pub retry_count: i32,
    pub workflow_id: &'a str,
    pub workflow_version_id: &'a str,
    pub step_id: &'a str,
    pub meta: &'a Map<String, Value>,
}

impl AttemptFacts<'_> {
    fn span(&self, name: &str, kind: &str, start_ns: u64, end_ns: u64) -> SpanRow {
        let mut s = engine_span(
            name,
            trace_of_run(self.meta, self.run),
            step_span_id(self.task, self.retry_count, kind),
            run_span_id(self.run),
        );
        let retry = self.retry_count.to_string();
        s.attributes = strings(&[
            ("hatchet.span_source", "engine"),
            ("hatchet.step_run_id", self.task),
            ("hatchet.workflow_run_id", self.run),
            ("hatchet.step_name", self.readable_id),
            ("hatchet.retry_count", &retry),
            ("hatchet.action_id", self.action),
            ("hatchet.task_name", self.readable_id),
            ("hatchet.workflow_id", self.workflow_id),
            ("hatchet.workflow_version_id", self.workflow_version_id),
            ("hatchet.step_id", self.step_id),
        ]);
        s.start_ns = start_ns;
        s.end_ns = end_ns;
        s.retry_count = self.retry_count;
        s.task_run_id = Some(self.task.to_string());
        s.workflow_run_id = Some(self.run.to_string());
        s
    }

    /// `hatchet.engine.queued`: from the task's creation to its assignment.
    pub(crate) fn queued(&self, queued_ns: u64, sent_ns: u64) -> SpanRow {
        self.span("hatchet.engine.queued", "queued", queued_ns, sent_ns)
    }

    /// `hatchet.engine.start_step_run`: the attempt from its start (its creation if it never
    /// started) to its end; an attempt that did not finish is an `ERROR` with what ended it.
    pub(crate) fn ran(&self, start_ns: u64, end_ns: u64, end: &AttemptEnd<'_>) -> SpanRow {
        let mut s = self.span(
            "hatchet.engine.start_step_run",
            "step_run",
            start_ns,
            end_ns,
        );
        let message = match end {
            AttemptEnd::Finished => None,
            AttemptEnd::Failed(m) => Some(if m.is_empty() { "task failed" } else { m }),
            AttemptEnd::Cancelled(m) => Some(if m.is_empty() { "task cancelled" } else { m }),
        };
        if let Some(m) = message {
            s.status_code = "ERROR";
            s.status_message = m.to_string();
        }
        s
    }
}

/// How an attempt ended.
pub(crate) enum AttemptEnd<'a> {
    Finished,
    /// Its error (a timeout's included).
    Failed(&'a str),
    /// The reason.
    Cancelled(&'a str),
}

/// A value as the real engine's read gives it: its attributes go through JSON twice (stored as
/// JSONB, read back as Go values and encoded again), so every number is a float64 in Go's
/// encoding (`1.0` reads `1`, `1e21` reads `1e+21`, an integer past 2^53 rounds), object keys
/// are sorted, and strings escape `<`, `>`, `&`, U+2028 and U+2029 as Go's encoder does.
pub(crate) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_float(n.as_f64().unwrap_or(0.0))),
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(&m[k], out);
            }
            out.push('}');
        }
    }
}

/// Go's `encoding/json` float64: the shortest digits that read back the same, without an
/// exponent from 1e-6 up to 1e21, else with one (`1e+21`, `1e-7`).
fn go_float(f: f64) -> String {
    let a = f.abs();
    if a == 0.0 || (1e-6..1e21).contains(&a) {
        return format!("{f}");
    }
    let e = format!("{f:e}");
    match e.split_once('e') {
        Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
        _ => e,
    }
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A span as the trace read answers it (`OtelSpan`): attribute values as strings (a string as
/// itself, anything else as its JSON), `null` for no attributes, optional texts left out when
/// empty.
pub(crate) fn span_json(s: &SpanRow) -> Value {
    // None read `null`, as the real engine answers a span stored without any.
    let as_strings = |m: &Map<String, Value>| -> Value {
        if m.is_empty() {
            return Value::Null;
        }
        m.iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => go_json(other),
                };
                (k.clone(), Value::String(text))
            })
            .collect::<Map<String, Value>>()
            .into()
    };
    let start = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(s.start_ns);
    let mut v = json!({
        "traceId": super::hex(&s.trace_id),
        "spanId": super::hex(&s.span_id),
        "spanName": s.name,
        "spanKind": s.kind,
        "serviceName": s.service_name,
        "statusCode": s.status_code,
        // The real engine's int64(end - start): below zero when the end reads earlier.
        "durationNs": s.end_ns.wrapping_sub(s.start_ns) as i64,
        "createdAt": micros_rfc3339(start),
        "resourceAttributes": as_strings(&s.resource_attributes),
        "spanAttributes": as_strings(&s.attributes),
        "retryCount": s.retry_count,
    });
    if !s.parent_span_id.is_empty() {
        v["parentSpanId"] = json!(super::hex(&s.parent_span_id));
    }
    if !s.status_message.is_empty() {
        v["statusMessage"] = json!(s.status_message);
    }
    if !s.scope.is_empty() {
        v["scopeName"] = json!(s.scope);
        v["scopeVersion"] = json!(s.scope);
    }
    v
}

/// A time as the real engine's read gives a span's start: RFC 3339 to the microsecond (its
/// column's precision), trailing zeros of the fraction left out.
fn micros_rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(d.as_secs());
    // Whole seconds: the shared formatter writes no fraction, only the `Z` to put back.
    let text = hatchet_runtime::protocol::calendar::format_rfc3339(whole);
    let base = text.trim_end_matches('Z');
    match d.subsec_micros() {
        0 => format!("{base}Z"),
        micros => format!("{base}.{}Z", format!("{micros:06}").trim_end_matches('0')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_reads_to_the_microsecond() {
        let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_188_037);
        let t = whole + std::time::Duration::from_nanos(311_663_999);
        assert_eq!(micros_rfc3339(t), "2026-12-02T05:07:17.311663Z");
        assert_eq!(micros_rfc3339(whole), "2026-12-02T05:07:17Z");
        let tenth = whole + std::time::Duration::from_millis(100);
        assert_eq!(micros_rfc3339(tenth), "2026-12-02T05:07:17.1Z");
    }

    const RUN: &str = "6f1f8a52-0f1e-4f5c-9c61-3f0f5d1e2a10";
    const PARENT: &str = "0b7d9a3e-5c1f-4e2a-8d6b-1a2b3c4d5e6f";

    #[test]
    fn a_run_without_a_traceparent_gets_its_own_derived_one_and_keeps_a_valid_one() {
        let mut meta = Map::new();
        ensure_traceparent(&mut meta, RUN);
        let tp = meta["traceparent"].as_str().expect("stamped").to_string();
        let (trace, span) = parse_traceparent(&tp).expect("valid");
        assert_eq!(trace, run_trace_id(RUN));
        assert_eq!(span, run_span_id(RUN));
        assert!(tp.starts_with("00-") && tp.ends_with("-01"));
        // Derived: SHA-256's first bytes, not a random id.
        let mut h = Sha256::new();
        h.update(b"hatchet-engine-wf-trace:");
        h.update(uuid::Uuid::parse_str(RUN).expect("uuid").as_bytes());
        assert_eq!(trace, h.finalize()[..16].to_vec());
        let mut again = meta.clone();
        ensure_traceparent(&mut again, PARENT);
        assert_eq!(
            again["traceparent"], meta["traceparent"],
            "a valid one is kept"
        );
    }

    #[test]
    fn a_child_s_traceparent_is_its_parent_s_trace_and_its_root_hangs_under_the_spawning_task() {
        let mut meta = Map::new();
        meta.insert("hatchet__parent_workflow_run_id".into(), json!(PARENT));
        meta.insert("hatchet__parent_step_run_id".into(), json!(PARENT));
        meta.insert("traceparent".into(), json!("not-one"));
        ensure_traceparent(&mut meta, RUN);
        let (trace, _) = parse_traceparent(meta["traceparent"].as_str().unwrap_or(""))
            .expect("replaced the invalid one");
        assert_eq!(trace, run_trace_id(PARENT));
        let root = workflow_run_span(&RunFacts {
            run: RUN,
            workflow_id: "w",
            display_name: "child-1",
            created_ns: 5,
            meta: &meta,
        });
        assert_eq!(root.trace_id, run_trace_id(PARENT));
        assert_eq!(root.parent_span_id, step_span_id(PARENT, 0, "step_run"));
        assert_eq!(root.span_id, run_span_id(RUN));
        assert_eq!(root.task_run_id, None, "a root span alone finds nothing");
    }

    #[test]
    fn a_run_under_an_sdk_trigger_span_shares_its_trace_and_hangs_under_it() {
        let sdk = "00-0123456789abcdef0123456789abcdef-00112233aabbccdd-01";
        let mut meta = Map::new();
        meta.insert("traceparent".into(), json!(sdk));
        ensure_traceparent(&mut meta, RUN);
        let root = workflow_run_span(&RunFacts {
            run: RUN,
            workflow_id: "w",
            display_name: "d",
            created_ns: 1,
            meta: &meta,
        });
        assert_eq!(
            super::super::hex(&root.trace_id),
            "0123456789abcdef0123456789abcdef"
        );
        assert_eq!(super::super::hex(&root.parent_span_id), "00112233aabbccdd");
        let facts = AttemptFacts {
            task: RUN,
            run: RUN,
            readable_id: "t",
            action: "wf:t",
            retry_count: 2,
            workflow_id: "w",
            workflow_version_id: "v",
            step_id: "s",
            meta: &meta,
        };
        let q = facts.queued(1, 3);
        assert_eq!(q.trace_id, root.trace_id);
        assert_eq!(q.parent_span_id, root.span_id);
        assert_eq!(q.attributes["hatchet.retry_count"], "2");
        let ran = facts.ran(3, 9, &AttemptEnd::Failed(""));
        assert_eq!(
            (ran.status_code, ran.status_message.as_str()),
            ("ERROR", "task failed")
        );
        assert_ne!(ran.span_id, q.span_id);
        assert_eq!(facts.ran(3, 9, &AttemptEnd::Finished).status_code, "OK");
    }

    #[test]
    fn an_event_s_run_hangs_under_the_event_span() {
        let event = PARENT;
        let mut meta = Map::new();
        meta.insert("hatchet__event_id".into(), json!(event));
        ensure_traceparent(&mut meta, RUN);
        let ev = event_span(event, "k", 1, RUN, &meta);
        assert!(
            ev.parent_span_id.is_empty(),
            "the stamped traceparent is not a parent"
        );
        let root = workflow_run_span(&RunFacts {
            run: RUN,
            workflow_id: "w",
            display_name: "d",
            created_ns: 1,
            meta: &meta,
        });
        assert_eq!(root.parent_span_id, ev.span_id);
        assert_eq!(root.trace_id, ev.trace_id);
        // Pushed under an SDK span: both join its trace, the event under the push.
        let mut pushed = Map::new();
        pushed.insert("hatchet__event_id".into(), json!(event));
        let sdk = "00-0123456789abcdef0123456789abcdef-00112233aabbccdd-01";
        pushed.insert("traceparent".into(), json!(sdk));
        ensure_traceparent(&mut pushed, RUN);
        let ev = event_span(event, "k", 1, RUN, &pushed);
        assert_eq!(super::super::hex(&ev.parent_span_id), "00112233aabbccdd");
        assert_eq!(
            super::super::hex(&ev.trace_id),
            "0123456789abcdef0123456789abcdef"
        );
    }

    #[test]
    fn the_read_gives_attributes_as_strings_and_leaves_out_empty_texts() {
        let mut s = workflow_run_span(&RunFacts {
            run: RUN,
            workflow_id: "w",
            display_name: "d",
            created_ns: 1_000_000_000,
            meta: &Map::new(),
        });
        s.attributes.insert("n".into(), json!(42));
        let v = span_json(&s);
        assert_eq!(v["spanAttributes"]["n"], "42");
        assert_eq!(v["serviceName"], ENGINE_SERVICE);
        assert!(v.get("parentSpanId").is_none());
        assert!(v.get("statusMessage").is_none());
        assert_eq!(v["durationNs"], 0);
        let mut late = s.clone();
        late.end_ns = late.start_ns - 5;
        assert_eq!(
            span_json(&late)["durationNs"],
            -5,
            "an end before the start reads below zero"
        );
        s.attributes.clear();
        assert_eq!(span_json(&s)["spanAttributes"], Value::Null);
    }

    #[test]
    fn a_traceparent_shaped_like_w3c_s_is_kept_and_another_is_restamped() {
        let shaped = format!("00-{}-{}-01", "z".repeat(32), "y".repeat(16));
        let mut meta = Map::new();
        meta.insert("traceparent".into(), json!(shaped));
        ensure_traceparent(&mut meta, RUN);
        assert_eq!(
            meta["traceparent"],
            json!(shaped),
            "kept, as the real engine keeps it"
        );
        assert_eq!(
            trace_of_run(&meta, RUN),
            run_trace_id(RUN),
            "its ids are not hex: the spans use the derived trace"
        );
        meta.insert("traceparent".into(), json!("00-abc-def-01"));
        ensure_traceparent(&mut meta, RUN);
        let stamped = meta["traceparent"].as_str().unwrap_or_default().to_string();
        assert!(
            parse_traceparent(&stamped).is_some_and(|(t, _)| t == run_trace_id(RUN)),
            "restamped: {stamped}"
        );
    }

    #[test]
    fn attribute_values_read_as_the_real_engine_encodes_them_again() {
        for (v, text) in [
            (json!(1.0), "1"),
            (json!(1.5), "1.5"),
            (json!(-0.25), "-0.25"),
            (json!(1e21), "1e+21"),
            (json!(1e20), "100000000000000000000"),
            (json!(1e-7), "1e-7"),
            (json!(1.5e-10), "1.5e-10"),
            (json!(0.000001), "0.000001"),
            (json!(9_007_199_254_740_993_i64), "9007199254740992"),
            (json!(0), "0"),
            (json!(true), "true"),
            (json!(["<a>", 2.0, null]), r#"["\u003ca\u003e",2,null]"#),
            (json!({"b": 1, "a": "x&y"}), r#"{"a":"x\u0026y","b":1}"#),
            (json!("tab\tquote\""), r#""tab\tquote\"""#),
        ] {
            assert_eq!(go_json(&v), text, "{v}");
        }
    }
}
