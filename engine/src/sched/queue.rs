//! The queue of tasks waiting for a worker: one FIFO lane per (priority, slot type).
//!
//! # Invariants
//!
//! 1. Lanes are visited highest priority first (3, then 2, then 1: the real engine's
//!    `priority DESC`); within a priority, each lane keeps arrival order.
//! 2. A lane whose slot type has no free slot anywhere is skipped whole, without looking at its
//!    tasks: a queue of 10,000 `default` tasks costs nothing while only `durable` slots are free.
//! 3. A task id may sit in the queue after it stopped being queued (cancelled, completed by a
//!    test control); whoever pops it checks the task's status. [`TaskQueue::retain`] drops
//!    such ids in bulk.

use std::collections::{BTreeMap, VecDeque};

/// Lowest and highest priority the protocol allows; a run without one gets [`DEFAULT_PRIORITY`].
pub(crate) const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = 1..=3;
/// The priority of a run that names none and whose workflow has no default.
pub(crate) const DEFAULT_PRIORITY: i32 = 1;

/// A lane key: priority (visited in descending order) and slot type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Lane {
    /// `Reverse` so that the map's ascending order is descending priority.
    pub priority: std::cmp::Reverse<i32>,
    pub slot_type: String,
}

impl Lane {
    pub(crate) fn new(priority: i32, slot_type: &str) -> Self {
        Lane {
            priority: std::cmp::Reverse(priority),
            slot_type: slot_type.to_string(),
        }
    }
}

/// Queued task ids by lane.
#[derive(Debug, Default)]
pub(crate) struct TaskQueue {
    lanes: BTreeMap<Lane, VecDeque<String>>,
    len: usize,
}

impl TaskQueue {
    /// Adds `id` at the back of its lane.
    pub(crate) fn push_back(&mut self, lane: Lane, id: String) {
        self.lanes.entry(lane).or_default().push_back(id);
        self.len += 1;
    }

    /// Adds `id` at the front of its lane (an attempt offered again keeps its place).
    pub(crate) fn push_front(&mut self, lane: Lane, id: String) {
        self.lanes.entry(lane).or_default().push_front(id);
        self.len += 1;
    }

    /// Ids in the queue (including stale ones, see invariant 3).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `id` is queued (a linear scan: tests only).
    #[cfg(test)]
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.lanes.values().any(|l| l.iter().any(|x| x == id))
    }

    /// Keeps only the ids for which `keep` holds.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        for lane in self.lanes.values_mut() {
            lane.retain(|id| keep(id));
        }
        self.lanes.retain(|_, l| !l.is_empty());
        self.len = self.lanes.values().map(VecDeque::len).sum();
    }

    /// The lane keys, in visiting order (invariant 1).
    pub(crate) fn lane_keys(&self) -> Vec<Lane> {
        self.lanes.keys().cloned().collect()
    }

    /// Takes a lane out to walk it; give it back with [`TaskQueue::put_lane`].
    pub(crate) fn take_lane(&mut self, lane: &Lane) -> VecDeque<String> {
        let taken = self.lanes.remove(lane).unwrap_or_default();
        self.len -= taken.len();
        taken
    }

    /// Puts a walked lane back (what was not assigned, in order).
    pub(crate) fn put_lane(&mut self, lane: Lane, ids: VecDeque<String>) {
        if ids.is_empty() {
            return;
        }
        self.len += ids.len();
        let slot = self.lanes.entry(lane).or_default();
        // Anything pushed while the lane was out goes after the walked ids.
        let mut ids = ids;
        ids.append(slot);
        *slot = ids;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut TaskQueue) -> Vec<String> {
        let mut out = Vec::new();
        for lane in q.lane_keys() {
            out.extend(q.take_lane(&lane));
        }
        out
    }

    #[test]
    fn higher_priority_lanes_come_first_and_lanes_keep_arrival_order() {
        let mut q = TaskQueue::default();
        q.push_back(Lane::new(1, "default"), "a1".into());
        q.push_back(Lane::new(3, "default"), "c1".into());
        q.push_back(Lane::new(2, "default"), "b1".into());
        q.push_back(Lane::new(3, "default"), "c2".into());
        q.push_front(Lane::new(1, "default"), "a0".into());
        assert_eq!(q.len(), 5);
        assert_eq!(drain(&mut q), ["c1", "c2", "b1", "a0", "a1"]);
        assert!(q.is_empty());
    }

    #[test]
    fn put_lane_keeps_walked_ids_ahead_of_newcomers() {
        let mut q = TaskQueue::default();
        let lane = Lane::new(1, "default");
        q.push_back(lane.clone(), "a".into());
        let walked = q.take_lane(&lane);
        q.push_back(lane.clone(), "b".into());
        q.put_lane(lane, walked);
        assert_eq!(drain(&mut q), ["a", "b"]);
    }

    #[test]
    fn retain_drops_ids_and_recounts() {
        let mut q = TaskQueue::default();
        q.push_back(Lane::new(1, "default"), "a".into());
        q.push_back(Lane::new(2, "durable"), "b".into());
        q.retain(|id| id != "a");
        assert_eq!(q.len(), 1);
        assert!(q.contains("b") && !q.contains("a"));
    }
}
