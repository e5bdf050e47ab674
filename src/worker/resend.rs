//! Final step events sent again after the engine's stream comes back (issue 40).
//!
//! The real engine answers `SendStepActionEvent` once the event is a row of its message queue;
//! its task controller then reads the row and records the completion. A message the controller
//! has read is never read again if the engine dies before it acknowledges it (the chaos suite saw
//! it: a COMPLETED answered 98 ms before a SIGKILL left the attempt running at the engine until
//! its timeout failed it, and the retry ran the task again). So the final events this worker had
//! answered shortly before its action stream was lost are sent once more when the stream is back:
//! one the engine recorded is recorded again harmlessly (a second event row with the same output;
//! the DAG match it satisfied is gone, so no task is created twice), one it lost completes the
//! attempt as the first should have.
//!
//! # Invariants
//!
//! 1. Only final events (COMPLETED, FAILED) answered within [`RESEND_WINDOW`] before the stream
//!    was lost are sent again, each once per outage, with its original attempt's retry count
//!    (the engine ignores it for an attempt it has already retried).
//! 2. What is kept is bounded: at most [`KEEP_MAX`] events and [`KEEP_BYTES`] of payload; older
//!    events go first, and events past the window are dropped as new ones arrive.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::listener::health::{ListenerKind, ListenerState};
use crate::proto;

/// How long before a lost stream an answered final event is sent again when it comes back.
pub(crate) const RESEND_WINDOW: Duration = Duration::from_secs(10);
/// Events kept at most.
pub(crate) const KEEP_MAX: usize = 4096;
/// Payload bytes kept at most.
pub(crate) const KEEP_BYTES: usize = 16 * 1024 * 1024;

/// A final event the engine answered, as it was sent (without the worker id and timestamp,
/// which a resend sets anew).
#[derive(Debug, Clone)]
pub(crate) struct SentFinal {
    pub at: Instant,
    pub event: proto::StepActionEvent,
}

/// The final events answered lately, oldest first.
#[derive(Debug, Default)]
pub(crate) struct RecentFinals {
    inner: Mutex<(VecDeque<SentFinal>, usize)>,
}

impl RecentFinals {
    /// Keeps an answered final event (invariant 2).
    pub(crate) fn record(&self, event: proto::StepActionEvent) {
        let now = Instant::now();
        let mut g = self.inner.lock();
        let (q, bytes) = &mut *g;
        *bytes += event.event_payload.len();
        q.push_back(SentFinal { at: now, event });
        while q.len() > KEEP_MAX
            || *bytes > KEEP_BYTES
            || q.front()
                .is_some_and(|f| now.duration_since(f.at) > RESEND_WINDOW)
        {
            match q.pop_front() {
                Some(f) => *bytes -= f.event.event_payload.len(),
                None => break,
            }
        }
    }

    /// The events answered within [`RESEND_WINDOW`] before `lost_at` (invariant 1), taken out.
    pub(crate) fn take_before(&self, lost_at: Instant) -> Vec<proto::StepActionEvent> {
        let mut g = self.inner.lock();
        let (q, bytes) = &mut *g;
        let (take, keep): (Vec<SentFinal>, Vec<SentFinal>) =
            q.drain(..).partition(|f| in_window(f.at, lost_at));
        *bytes = keep.iter().map(|f| f.event.event_payload.len()).sum();
        q.extend(keep);
        take.into_iter().map(|f| f.event).collect()
    }
}

/// Whether an event answered at `at` is sent again after a stream lost at `lost_at` (a pure
/// decision).
pub(crate) fn in_window(at: Instant, lost_at: Instant) -> bool {
    at <= lost_at && lost_at.duration_since(at) <= RESEND_WINDOW
}

/// Watches the action stream's health: when it comes back after an outage, sends again the
/// final events answered within [`RESEND_WINDOW`] before it was lost. Ends with the worker.
pub(crate) fn spawn(core: Arc<super::WorkerCore>) {
    let mut health = core.listeners.health[&ListenerKind::WorkerActions].subscribe();
    let stop = core.heartbeat_stop.clone();
    tokio::spawn(async move {
        let mut lost_at: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = health.changed() => if changed.is_err() { return },
            }
            let state = health.borrow_and_update().clone();
            match state {
                ListenerState::Reconnecting { since, .. } => {
                    lost_at.get_or_insert(since);
                }
                ListenerState::Connected { .. } => {
                    let Some(at) = lost_at.take() else { continue };
                    let again = core.recent_finals.take_before(at);
                    if !again.is_empty() {
                        tracing::info!(
                            events = again.len(),
                            "the action stream is back: sending again the final events answered just before it was lost (the engine may have lost them)"
                        );
                    }
                    for ev in again {
                        super::execute::resend_final(&core, ev).await;
                    }
                }
                ListenerState::Stopped { .. } => return,
                _ => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(task: &str, payload: &str) -> proto::StepActionEvent {
        proto::StepActionEvent {
            task_run_external_id: task.into(),
            event_payload: payload.into(),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_events_answered_shortly_before_the_loss_are_sent_again_and_once() {
        let r = RecentFinals::default();
        r.record(ev("old", "{}"));
        tokio::time::advance(Duration::from_secs(30)).await;
        r.record(ev("a", "{}"));
        tokio::time::advance(Duration::from_secs(5)).await;
        r.record(ev("b", "{}"));
        let lost = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        r.record(ev("after", "{}"));
        let again: Vec<String> = r
            .take_before(lost)
            .into_iter()
            .map(|e| e.task_run_external_id)
            .collect();
        assert_eq!(
            again,
            ["a", "b"],
            "within the window before the loss, in order"
        );
        assert!(r.take_before(lost).is_empty(), "each once per outage");
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_kept_is_bounded_by_count_and_bytes() {
        let r = RecentFinals::default();
        for i in 0..KEEP_MAX + 10 {
            r.record(ev(&format!("t{i}"), "{}"));
        }
        assert_eq!(r.inner.lock().0.len(), KEEP_MAX);
        let big = "x".repeat(KEEP_BYTES / 2 + 1);
        r.record(ev("big1", &big));
        r.record(ev("big2", &big));
        let g = r.inner.lock();
        assert!(g.1 <= KEEP_BYTES, "{} bytes kept", g.1);
        assert_eq!(
            g.0.back().map(|f| f.event.task_run_external_id.as_str()),
            Some("big2")
        );
    }
}
