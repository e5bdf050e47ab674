//! Traces: the spans an engine keeps per trace, as the real engine's collector and its own
//! span synthesis store them, and the lookup from a run or task id to its trace.
//!
//! - `spans.rs` builds the engine's own spans (`hatchet.engine.workflow_run`, `.event`,
//!   `.queued`, `.start_step_run`) and each run's `traceparent`, as pure functions of a run's
//!   facts; the ids are derived, so the same run always has the same trace.
//! - `otlp.rs` turns an SDK's OTLP export into rows.
//! - `read.rs` answers a trace read: the room's spans and the engine's, made from the runs and
//!   tasks at the read (it alone reads `State`).
//!
//! The room keeps the SDKs' spans: per trace, its spans, at most once per (start, span id) as the real engine's
//! primary key does; and per run or task id the traces its spans named, read as the real engine
//! reads its lookup table (the highest retry count, then the latest start). It holds at most
//! [`MAX_SPANS`]: the oldest traces go first.

pub(crate) mod otlp;
pub(crate) mod spans;

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};

/// Spans kept in all (the development engine's bound on memory; the real engine keeps them in
/// its OLAP tables until their retention ends).
pub(crate) const MAX_SPANS: usize = 200_000;

/// One stored span, as the trace read answers it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpanRow {
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    /// Empty for a root span.
    pub parent_span_id: Vec<u8>,
    pub name: String,
    /// `INTERNAL`, `SERVER`, `CLIENT`, `PRODUCER`, `CONSUMER` or `UNSPECIFIED`.
    pub kind: &'static str,
    /// The resource's `service.name`, `unknown` without one.
    pub service_name: String,
    /// `OK`, `ERROR` or `UNSET`.
    pub status_code: &'static str,
    pub status_message: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub resource_attributes: Map<String, Value>,
    pub attributes: Map<String, Value>,
    /// The instrumentation scope's name (the real engine reports it as the version too).
    pub scope: String,
    pub retry_count: i32,
    /// The task run it belongs to (`hatchet.step_run_id`): what makes it findable.
    pub task_run_id: Option<String>,
    /// Its workflow run (`hatchet.workflow_run_id`).
    pub workflow_run_id: Option<String>,
}

/// A lookup entry: a run or task id's trace, with the attempt and start that rank it.
#[derive(Debug, Clone)]
struct Lookup {
    retry_count: i32,
    start_ns: u64,
    trace_id: Vec<u8>,
}

#[derive(Debug, Default)]
struct Trace {
    spans: Vec<SpanRow>,
    /// (span id, start) of every span: the real engine's key within a trace.
    seen: HashSet<(Vec<u8>, u64)>,
    /// The ids whose lookup entries point here (dropped with the trace).
    keys: Vec<String>,
}

/// Every trace, the lookup table, and the order traces arrived in (for the bound).
#[derive(Debug, Default)]
pub(crate) struct Traces {
    traces: HashMap<Vec<u8>, Trace>,
    lookup: HashMap<String, Vec<Lookup>>,
    order: VecDeque<Vec<u8>>,
    count: usize,
}

impl Traces {
    /// Stores `spans` (a repeat of a stored (trace, start, span id) is ignored) and their
    /// lookup entries: each task run id once, and its workflow run id when that differs (a DAG's
    /// tasks make their run findable).
    pub(crate) fn record(&mut self, spans: Vec<SpanRow>) {
        for span in spans {
            self.lookup_entries(&span);
            let trace = self.trace_mut(&span.trace_id);
            if !trace.seen.insert((span.span_id.clone(), span.start_ns)) {
                continue;
            }
            trace.spans.push(span);
            self.count += 1;
        }
        while self.count > MAX_SPANS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(t) = self.traces.remove(&oldest) {
                self.count -= t.spans.len();
                for k in t.keys {
                    if let Some(entries) = self.lookup.get_mut(&k) {
                        entries.retain(|e| e.trace_id != oldest);
                        if entries.is_empty() {
                            self.lookup.remove(&k);
                        }
                    }
                }
            }
        }
    }

    /// Trace `id`, new ones joining the eviction order.
    fn trace_mut(&mut self, id: &[u8]) -> &mut Trace {
        if !self.traces.contains_key(id) {
            self.order.push_back(id.to_vec());
        }
        self.traces.entry(id.to_vec()).or_default()
    }

    fn lookup_entries(&mut self, span: &SpanRow) {
        let Some(task) = &span.task_run_id else {
            return;
        };
        let mut keys = vec![task.clone()];
        if let Some(run) = span.workflow_run_id.as_ref().filter(|r| *r != task) {
            keys.push(run.clone());
        }
        for key in keys {
            let entries = self.lookup.entry(key.clone()).or_default();
            if entries
                .iter()
                .any(|e| e.retry_count == span.retry_count && e.start_ns == span.start_ns)
            {
                continue;
            }
            entries.push(Lookup {
                retry_count: span.retry_count,
                start_ns: span.start_ns,
                trace_id: span.trace_id.clone(),
            });
            let trace = self.trace_mut(&span.trace_id);
            if !trace.keys.contains(&key) {
                trace.keys.push(key);
            }
        }
    }

    /// The trace of a run or task id: its entry with the highest retry count, then the latest
    /// start. `None` when no span named it.
    #[cfg(test)]
    pub(crate) fn trace_of(&self, id: &str) -> Option<&[u8]> {
        self.ranked_trace_of(id).map(|(_, t)| t)
    }

    /// [`Traces::trace_of`] with the rank (retry count, start) of the entry that won.
    pub(crate) fn ranked_trace_of(&self, id: &str) -> Option<((i32, u64), &[u8])> {
        self.lookup
            .get(id)?
            .iter()
            .max_by_key(|e| (e.retry_count, e.start_ns))
            .map(|e| ((e.retry_count, e.start_ns), e.trace_id.as_slice()))
    }

    /// A trace's spans, in no order.
    pub(crate) fn spans(&self, trace_id: &[u8]) -> impl Iterator<Item = &SpanRow> {
        self.traces
            .get(trace_id)
            .into_iter()
            .flat_map(|t| t.spans.iter())
    }

    /// A page of a trace's spans, earliest start first.
    #[cfg(test)]
    fn page(&self, trace_id: &[u8], offset: usize, limit: usize) -> Vec<&SpanRow> {
        let mut spans: Vec<&SpanRow> = self.spans(trace_id).collect();
        spans.sort_by_key(|s| s.start_ns);
        spans.into_iter().skip(offset).take(limit).collect()
    }

    /// Spans stored in all.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.count
    }
}

/// Lower-case hex of an id.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The bytes of a hex id; `None` for anything else.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: u8, id: u8, start: u64, task: Option<&str>, run: Option<&str>) -> SpanRow {
        SpanRow {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            parent_span_id: Vec::new(),
            name: format!("s{id}"),
            kind: "INTERNAL",
            service_name: "x".into(),
            status_code: "OK",
            status_message: String::new(),
            start_ns: start,
            end_ns: start,
            resource_attributes: Map::new(),
            attributes: Map::new(),
            scope: String::new(),
            retry_count: 0,
            task_run_id: task.map(str::to_string),
            workflow_run_id: run.map(str::to_string),
        }
    }

    #[test]
    fn a_span_is_stored_once_per_start_and_id_and_pages_come_earliest_first() {
        let mut t = Traces::default();
        t.record(vec![span(1, 2, 20, None, None), span(1, 1, 10, None, None)]);
        t.record(vec![span(1, 2, 20, None, None)]);
        assert_eq!(t.len(), 2);
        let names: Vec<&str> = t
            .page(&[1; 16], 0, 10)
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["s1", "s2"]);
        assert_eq!(t.page(&[1; 16], 1, 10).len(), 1);
    }

    #[test]
    fn a_task_span_makes_its_task_and_its_dag_findable_and_a_run_span_alone_does_not() {
        let mut t = Traces::default();
        t.record(vec![span(1, 1, 1, None, Some("run"))]);
        assert_eq!(t.trace_of("run"), None);
        t.record(vec![span(1, 2, 2, Some("task"), Some("run"))]);
        assert_eq!(t.trace_of("run"), Some(&[1u8; 16][..]));
        assert_eq!(t.trace_of("task"), Some(&[1u8; 16][..]));
        // A later attempt's trace wins.
        let mut retry = span(3, 3, 1, Some("task"), None);
        retry.retry_count = 1;
        t.record(vec![retry]);
        assert_eq!(t.trace_of("task"), Some(&[3u8; 16][..]));
    }

    #[test]
    fn the_oldest_traces_go_first_past_the_bound() {
        let mut t = Traces::default();
        t.record(vec![span(1, 1, 1, Some("a"), None)]);
        let many: Vec<SpanRow> = (0..MAX_SPANS as u64)
            .map(|i| {
                let mut s = span(2, 0, i, None, None);
                s.span_id = i.to_be_bytes().to_vec();
                s
            })
            .collect();
        t.record(many);
        assert_eq!(t.len(), MAX_SPANS);
        assert_eq!(
            t.trace_of("a"),
            None,
            "the first trace and its lookup are gone"
        );
        assert!(t.page(&[1; 16], 0, 10).is_empty());
    }

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00ab10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
