//! A read-only window into the development engine: `GET /dashboard` serves one self-contained
//! page; its script reads `GET /_dev/dashboard.json` every second (with the dashboard's key, taken
//! from the page's URL fragment, which browsers never send to the server) and shows recent runs
//! with their status and duration, each run's tasks as its DAG with each task's status and
//! output, the workers with their slots and labels, and recent events.
//!
//! # Invariants
//!
//! 1. The page itself holds no data and needs no token; the data needs the engine's token or the
//!    dashboard's key, and that key opens nothing else (no other route, no other method, no
//!    gRPC call). `DevEngine::dashboard_url` carries the key, never the token, so the URL the
//!    quickstart prints gives a reader of its log no right to the engine.
//! 2. `data` is a pure function of the state: it reads under the engine's lock, never waits, and
//!    bounds what it returns (the newest [`RUNS`] runs, [`EVENTS`] events, outputs cut at
//!    [`OUTPUT_CHARS`] characters), so a large engine cannot make a slow page.

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::hub::queries::View;
use crate::store::model::Status;

/// Runs shown, newest first.
pub const RUNS: usize = 500;
/// Events shown, newest first.
pub const EVENTS: usize = 50;
/// Characters of an output or error shown.
pub const OUTPUT_CHARS: usize = 300;

/// The page.
pub const PAGE: &str = include_str!("page.html");

fn status(s: Status) -> &'static str {
    match s {
        Status::Pending | Status::Queued => "QUEUED",
        Status::Running => "RUNNING",
        Status::Completed => "COMPLETED",
        Status::Failed => "FAILED",
        Status::Cancelled => "CANCELLED",
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() <= OUTPUT_CHARS {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(OUTPUT_CHARS).collect();
        out.push('…');
        out
    }
}

fn millis(a: SystemTime, b: SystemTime) -> u128 {
    b.duration_since(a).map(|d| d.as_millis()).unwrap_or(0)
}

/// What the page shows (invariant 2).
pub(crate) fn data(st: &View<'_>, now: SystemTime, beat_now: tokio::time::Instant) -> Value {
    let runs: Vec<Value> = st
        .runs()
        .newest_first()
        .take(RUNS)
        .map(|r| {
            let tasks: Vec<Value> = r
                .tasks
                .iter()
                .filter_map(|t| st.task(t))
                .map(|t| {
                    json!({
                        "name": t.readable_id,
                        "status": status(t.status()),
                        "parents": t.parents,
                        "retry_count": t.retry_count,
                        "worker_id": t.worker_id,
                        "output": t.output.as_deref().map(cut),
                        "error": t.error.as_deref().map(cut),
                    })
                })
                .collect();
            let end = r.finished_at.unwrap_or(now);
            json!({
                "id": r.id,
                "workflow": r.workflow_name,
                "status": status(r.status()),
                "created_at": hatchet_runtime::protocol::calendar::format_rfc3339(r.created_at),
                "duration_ms": r.started_at.map(|s| millis(s, end)),
                "tasks": tasks,
            })
        })
        .collect();
    let mut workers: Vec<Value> = st
        .workers()
        .map(|w| {
            let slots: serde_json::Map<String, Value> = w
                .slot_limits
                .iter()
                .map(|(k, limit)| {
                    let used = w.slots_used.get(k).copied().unwrap_or(0);
                    (k.clone(), json!({ "used": used, "limit": limit }))
                })
                .collect();
            json!({
                "id": w.id,
                "name": w.name,
                "status": w.status(beat_now),
                "slots": slots,
                "labels": w.labels,
                "actions": w.actions.len(),
            })
        })
        .collect();
    workers.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let events: Vec<Value> = st
        .events()
        .iter()
        .rev()
        .take(EVENTS)
        .map(|e| {
            json!({
                "key": e.key,
                "at": hatchet_runtime::protocol::calendar::format_rfc3339(e.at),
                "payload": cut(&e.payload.to_string()),
            })
        })
        .collect();
    json!({
        "runs": runs,
        "run_count": st.runs().len(),
        "workers": workers,
        "events": events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_outputs_are_cut_and_short_ones_kept() {
        assert_eq!(cut("ok"), "ok");
        let long = "x".repeat(OUTPUT_CHARS + 10);
        let shown = cut(&long);
        assert_eq!(shown.chars().count(), OUTPUT_CHARS + 1);
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn an_empty_engine_shows_empty_lists() {
        let engine = crate::hub::Engine::new(
            "tenant".into(),
            std::time::Duration::from_secs(30),
            "v0.0.0".into(),
        );
        let v = data(
            &engine.view(),
            SystemTime::now(),
            tokio::time::Instant::now(),
        );
        assert_eq!(v["runs"], json!([]));
        assert_eq!(v["workers"], json!([]));
        assert_eq!(v["events"], json!([]));
    }
}
