//! A trace as read: the SDKs' spans the room keeps, and the engine's own, made at the read
//! from the runs and tasks themselves (their ids are derived, their times are the record's),
//! so the hot path pays nothing for them.
//!
//! Which spans the engine has, as the real engine writes them:
//! - every run: `hatchet.engine.workflow_run`, and `hatchet.engine.event` when an event
//!   started it (an event a task pushed, naming itself as the source: only when the event
//!   carried an SDK's `traceparent`);
//! - every event a task pushed that started runs: `hatchet.engine.event_emitted`, once per
//!   event, in the source run's trace under the task, naming the runs;
//! - every attempt that went to a worker: `hatchet.engine.queued`, from the task's creation (a
//!   DAG child's: when its parents released it, where the real engine creates it) to the
//!   assignment;
//! - every attempt that ended (finished, failed, cancelled; a skipped task never ran and has
//!   none): `hatchet.engine.start_step_run`, from its start (its creation if it never started)
//!   to its end.
//!
//! A run or task id finds its trace once one of its tasks has such a span (the real engine's
//! lookup holds only the spans that name a task); else an SDK span that names it does.

use std::time::SystemTime;

use crate::hub::State;
use crate::store::model::{PastEnd, Run, Status, Task};
use crate::traces::SpanRow;
use crate::traces::spans::{self, AttemptEnd, AttemptFacts, RunFacts};

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The rank (retry count, start) of a task's latest span that names it, as the real engine's
/// lookup ranks its entries; `None` while the record holds none.
fn rank(t: &Task) -> Option<(i32, u64)> {
    let current =
        (t.started_at.is_some() || t.status() == Status::Cancelled || t.status() == Status::Failed)
            .then(|| (t.retry_count, nanos(t.started_at.unwrap_or(t.created_at))));
    current.or_else(|| {
        t.past_attempts
            .last()
            .map(|a| (a.retry_count, nanos(a.started_at.unwrap_or(t.created_at))))
    })
}

impl State {
    /// The trace a run or task id's spans belong to: of the spans that name it, the engine's
    /// (their trace is the run's) and the SDKs', the one with the highest retry count, then the
    /// latest start.
    pub(crate) fn trace_id_of(&self, id: &str) -> Option<Vec<u8>> {
        let (run, tasks): (_, Vec<&Task>) = match self.tasks.get(id) {
            Some(t) => (self.runs.get(&t.run_id), vec![t]),
            None => match self.runs.get(id) {
                Some(r) => (
                    Some(r),
                    r.tasks.iter().filter_map(|t| self.tasks.get(t)).collect(),
                ),
                None => (None, Vec::new()),
            },
        };
        let engine = run.and_then(|r| {
            let best = tasks.iter().filter_map(|t| rank(t)).max()?;
            Some((best, spans::trace_of_run(&r.additional_metadata, &r.id)))
        });
        let sdk = self.traces.ranked_trace_of(id);
        match (engine, sdk) {
            (Some((e, _)), Some((s, trace))) if s > e => Some(trace.to_vec()),
            (Some((_, trace)), _) => Some(trace),
            (None, sdk) => sdk.map(|(_, t)| t.to_vec()),
        }
    }

    /// A page of trace `trace`'s spans, earliest first: the SDKs' and the engine's.
    pub(crate) fn trace_page(&self, trace: &[u8], offset: usize, limit: usize) -> Vec<SpanRow> {
        let mut all: Vec<SpanRow> = self.traces.spans(trace).cloned().collect();
        for run in self.runs.in_trace(trace) {
            let mut mine = Vec::new();
            self.engine_spans(run, &mut mine);
            // An event a task pushed without a traceparent has its span in the triggered run's
            // own derived trace, not the source's this run shares.
            all.extend(mine.into_iter().filter(|s| s.trace_id == trace));
        }
        all.extend(self.events_emitted(trace));
        all.sort_by_key(|s| s.start_ns);
        all.into_iter().skip(offset).take(limit).collect()
    }

    /// The `event_emitted` spans in trace `trace`: one per event a task pushed, naming the runs
    /// it started, earliest first.
    fn events_emitted(&self, trace: &[u8]) -> Vec<SpanRow> {
        type Emitted<'a> = (&'a str, u64, Vec<(SystemTime, &'a str)>);
        let mut by_event: std::collections::BTreeMap<(String, String, &str), Emitted<'_>> =
            std::collections::BTreeMap::new();
        for run in self.runs.pushed_into(trace) {
            let Some((event, key)) = &run.triggering_event else {
                continue;
            };
            let Some((source, task)) = spans::event_source(&run.additional_metadata) else {
                continue;
            };
            let seen = self.event_seen_ns(event);
            let e = by_event
                .entry((source, task, event.as_str()))
                .or_insert_with(|| (key.as_str(), nanos(run.created_at), Vec::new()));
            e.1 = seen.unwrap_or(e.1.min(nanos(run.created_at)));
            e.2.push((run.created_at, run.id.as_str()));
        }
        by_event
            .into_iter()
            .map(|((source, task, event), (key, seen, mut runs))| {
                runs.sort();
                let ids: Vec<&str> = runs.iter().map(|(_, id)| *id).collect();
                spans::event_emitted_span(event, key, seen, (&source, &task), &ids)
            })
            .collect()
    }

    /// When the engine saw event `id` (its push), the time of its spans as the real engine
    /// stamps them (`EventSeenAt`); `None` for an event no longer kept.
    fn event_seen_ns(&self, id: &str) -> Option<u64> {
        self.events.get(id).map(|e| nanos(e.at))
    }

    /// The engine's spans of one run.
    fn engine_spans(&self, run: &Run, out: &mut Vec<SpanRow>) {
        let tasks: Vec<&Task> = run.tasks.iter().filter_map(|t| self.tasks.get(t)).collect();
        let base = match tasks.as_slice() {
            [only] => only.readable_id.as_str(),
            _ => run.workflow_name.as_str(),
        };
        let display = crate::parse::display_name(base, run.created_at);
        let created = nanos(run.created_at);
        out.push(spans::workflow_run_span(&RunFacts {
            run: &run.id,
            workflow_id: &run.workflow_id,
            display_name: &display,
            created_ns: created,
            meta: &run.additional_metadata,
        }));
        if let Some((event, key)) = &run.triggering_event
            && (spans::event_source(&run.additional_metadata).is_none()
                || spans::has_sdk_traceparent(&run.additional_metadata, &run.id))
        {
            out.push(spans::event_span(
                event,
                key,
                self.event_seen_ns(event).unwrap_or(created),
                &run.id,
                &run.additional_metadata,
            ));
        }
        for t in tasks {
            let step = crate::parse::step_id(&run.workflow_id, &t.readable_id);
            let facts = |retry_count| AttemptFacts {
                task: &t.id,
                run: &run.id,
                readable_id: &t.readable_id,
                action: &t.action,
                retry_count,
                workflow_id: &run.workflow_id,
                workflow_version_id: &run.workflow_version_id,
                step_id: &step,
                meta: &run.additional_metadata,
            };
            let queued = nanos(t.released_at.unwrap_or(t.created_at));
            for a in &t.past_attempts {
                let f = facts(a.retry_count);
                if let Some(s) = a.started_at {
                    out.push(f.queued(queued, nanos(s)));
                }
                let start = a.started_at.map_or(queued, nanos);
                // A worker's failure event carries no message (`task failed`); a timeout's and
                // the reassignment limit's carry theirs.
                let message = a.end_message.as_deref().unwrap_or("");
                let end = match a.end {
                    PastEnd::Finished if a.started_at.is_some() => AttemptEnd::Finished,
                    PastEnd::Failed => AttemptEnd::Failed(message),
                    PastEnd::Cancelled => AttemptEnd::Cancelled(message),
                    PastEnd::Finished | PastEnd::Requeued => continue,
                };
                out.push(f.ran(start, nanos(a.ended_at), &end));
            }
            let f = facts(t.retry_count);
            // The current attempt's start, if it has one of its own (a retry keeps the last
            // start in the record until it is sent again).
            let before = t.past_attempts.last().and_then(|a| a.started_at);
            let started = t.started_at.filter(|s| {
                (t.status() == Status::Running || t.status().is_terminal()) && Some(*s) != before
            });
            if let Some(s) = started {
                out.push(f.queued(queued, nanos(s)));
            }
            // As the real engine tells them: a worker's failure and a cancellation carry no
            // text (`task failed`, `task cancelled`); an end the engine decided carries its own.
            let message = t.end_message.as_deref().unwrap_or("");
            let end = match t.status() {
                Status::Completed if started.is_some() => Some(AttemptEnd::Finished),
                Status::Failed => Some(AttemptEnd::Failed(message)),
                Status::Cancelled => Some(AttemptEnd::Cancelled(message)),
                _ => None,
            };
            if let (Some(end), Some(at)) = (end, t.finished_at) {
                let start = started.map_or(queued, nanos);
                out.push(f.ran(start, nanos(at), &end));
            }
        }
    }
}
