//! Pushed events, kept for durable look-back waits and the REST and dashboard reads.
//!
//! # Invariants
//!
//! 1. Every recorded event gets the next sequence number: a condition made at sequence `n`
//!    matches only events after `n`, so an event is never counted twice.
//! 2. At most [`EVENTS_KEPT`] events are kept; the oldest go first. This bound is ours, for
//!    memory: the real engine keeps events for its retention period, and its durable look-back
//!    reads every event of the key and scope seen since the wait's `consider_events_since`
//!    (newest first). Ours reads the kept ones, so a look-back reaches back as far as the last
//!    [`EVENTS_KEPT`] events pushed, whatever their keys.

use std::collections::VecDeque;

use crate::store::model::StoredEvent;

/// Events kept for durable look-back and REST reads: the only bound on how far a look-back
/// reaches (the real engine's is its retention period). Large, so that a test or a session
/// never meets it; a bound only so that a long-running engine's memory stays bounded.
pub(crate) const EVENTS_KEPT: usize = 100_000;

/// The kept events, oldest first, and the last sequence number given.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    kept: VecDeque<StoredEvent>,
    seq: u64,
}

impl EventLog {
    /// Keeps `ev` with the next sequence number (invariants 1 and 2) and returns it as kept.
    pub(crate) fn record(&mut self, mut ev: StoredEvent) -> StoredEvent {
        self.seq += 1;
        ev.seq = self.seq;
        self.kept.push_back(ev.clone());
        if self.kept.len() > EVENTS_KEPT {
            self.kept.pop_front();
        }
        ev
    }

    /// The sequence number of the last recorded event (0 before the first).
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// The kept events, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &StoredEvent> {
        self.kept.iter()
    }

    /// The kept event `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&StoredEvent> {
        self.kept.iter().rev().find(|e| e.id == id)
    }

    /// Notes the runs event `id` started (the events list shows them).
    pub(crate) fn set_runs(&mut self, id: &str, runs: Vec<String>) {
        if let Some(e) = self.kept.iter_mut().rev().find(|e| e.id == id) {
            e.runs = runs;
        }
    }

    /// Notes that event `id` came through webhook `name` (the events list shows it).
    pub(crate) fn mark_webhook(&mut self, id: &str, name: &str) {
        if let Some(e) = self.kept.iter_mut().rev().find(|e| e.id == id) {
            e.webhook = Some(name.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str) -> StoredEvent {
        StoredEvent {
            id: id.into(),
            key: "k".into(),
            payload: serde_json::json!({}),
            at: std::time::SystemTime::UNIX_EPOCH,
            seq: 0,
            scope: None,
            metadata: Default::default(),
            runs: Vec::new(),
            webhook: None,
        }
    }

    #[test]
    fn events_get_rising_sequence_numbers_and_only_the_newest_are_kept() {
        let mut log = EventLog::default();
        assert_eq!(log.seq(), 0);
        let first = log.record(event("first"));
        let second = log.record(event("second"));
        assert_eq!((first.seq, second.seq, log.seq()), (1, 2, 2));
        for i in 0..EVENTS_KEPT {
            log.record(event(&format!("e{i}")));
        }
        assert_eq!(log.iter().count(), EVENTS_KEPT);
        assert!(log.get("first").is_none() && log.get("second").is_none());
        assert_eq!(
            log.iter().next().map(|e| e.seq),
            Some(3),
            "the oldest went first"
        );
        log.set_runs("e0", vec!["run".into()]);
        log.mark_webhook("e0", "hook");
        let e0 = log.get("e0").expect("kept");
        assert_eq!((e0.runs.len(), e0.webhook.as_deref()), (1, Some("hook")));
    }
}
