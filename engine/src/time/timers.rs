//! Timers of tasks: execution deadlines and condition sleeps, earliest first.
//!
//! # Invariants
//!
//! 1. A timer is handed out once, when it is due, earliest first (ties in id order), so a pass
//!    costs O(due · log n), not a scan of every task.
//! 2. A timer may be stale (its task finished, was refreshed or re-armed): whoever takes it
//!    checks it against the task, so nothing here is ever removed early.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tokio::time::Instant;

/// Task ids due at instants.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, String)>>,
}

impl Timers {
    /// Task `tid` is due at `at`.
    pub(crate) fn add(&mut self, at: Instant, tid: &str) {
        self.heap.push(Reverse((at, tid.to_string())));
    }

    /// When the earliest timer is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes the earliest timer if it is due at `now` (invariant 1).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, String)> {
        if self.next_due()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse(t)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timers_come_out_once_when_due_earliest_first() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.add(t0 + Duration::from_secs(2), "late");
        timers.add(t0 + Duration::from_secs(1), "early");
        timers.add(t0 + Duration::from_secs(1), "early");
        assert_eq!(timers.pop_due(t0), None, "nothing is due yet");
        assert_eq!(timers.next_due(), Some(t0 + Duration::from_secs(1)));
        let due: Vec<String> = std::iter::from_fn(|| timers.pop_due(t0 + Duration::from_secs(1)))
            .map(|(_, tid)| tid)
            .collect();
        assert_eq!(
            due,
            ["early", "early"],
            "each entry once, the later one stays"
        );
        assert_eq!(
            timers.pop_due(t0 + Duration::from_secs(5)).map(|(_, t)| t),
            Some("late".to_string())
        );
        assert_eq!(timers.next_due(), None);
    }
}
