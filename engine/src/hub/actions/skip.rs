//! Virtual time's jump: when the engine has nothing to do but wait on a timer while a client
//! waits on a result, its clock jumps to that timer (`clock.rs` invariant 4).

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::hub::State;
use crate::store::model::Status;

impl State {
    /// Moves the clock forward by `by` (invariants 2 and 3).
    pub(crate) fn advance_clock(&mut self, by: Duration) {
        self.clock.add(by);
        for w in self.workers.values_mut() {
            w.last_heartbeat += by;
        }
    }

    /// Whether the engine may jump now (invariant 4).
    pub(crate) fn may_skip(&self, now: Instant) -> bool {
        // Unfinished as its reader sees it: an end not yet published is still awaited.
        let unfinished = |run: &String| {
            self.runs.get(run).is_some_and(|r| {
                !self.run_end_published(r) || !self.readable_run_status(r).is_terminal()
            })
        };
        // A subscription waiting for its stream's tick waits on a timer too (`readable.rs`
        // invariant 6).
        let awaited = self.subscriptions.awaited().any(unfinished)
            || self.subscriptions.awaiting_tick()
            || self.clock.recently_polled().iter().any(unfinished);
        if !awaited {
            return false;
        }
        let blocked = self.durable_blocked_tasks();
        let busy = self
            .tasks
            .values()
            .any(|t| t.status() == Status::Running && !blocked.contains(t.id.as_str()));
        let assignable = self.tasks.values().any(|t| {
            t.status() == Status::Queued
                && !t.held
                && t.not_before.is_none_or(|at| at <= now)
                && !self.pauses.holds(&t.id)
        });
        !busy && !assignable
    }

    /// The earliest timer after `now` a jump may go to (invariant 4).
    pub(crate) fn next_timer(&self, now: Instant) -> Option<Instant> {
        let system = self.clock.system_now();
        let from_system = |at: SystemTime| now + at.duration_since(system).unwrap_or_default();
        let retries = self
            .tasks
            .values()
            .filter(|t| t.status() == Status::Queued)
            .filter_map(|t| t.not_before);
        let conditions = self.condition_sleeps.next_due();
        let calendar = self.next_calendar_fire(system).map(from_system);
        // Polled timers are read at the poll at or after they fall due.
        let read = |at: Instant| match self.switches.poll_timers {
            Some(p) => p.reads(at),
            None => at,
        };
        retries
            .chain(conditions)
            .chain(self.durable_next_sleep())
            .map(read)
            .chain(self.batches.next_due())
            .chain(calendar)
            .chain(self.next_status_poll(now))
            .filter(|at| *at > now)
            .min()
    }

    /// One jump if the engine may skip (invariant 4); answers how far it went.
    pub(crate) fn skip_if_idle(&mut self) -> Option<Duration> {
        if !self.clock.is_virtual() {
            return None;
        }
        let now = self.clock.now();
        if !self.may_skip(now) {
            return None;
        }
        let to = self.next_timer(now)?;
        let by = to.saturating_duration_since(now);
        self.advance_clock(by);
        Some(by)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jump_moves_every_reading_forward_and_keeps_workers_alive() {
        let mut st = State::default();
        let (before, wall) = (st.clock.now(), st.clock.system_now());
        st.advance_clock(Duration::from_secs(3_600));
        assert!(st.clock.now() >= before + Duration::from_secs(3_600));
        assert!(st.clock.system_now() >= wall + Duration::from_secs(3_600));
        assert_eq!(st.clock.skew(), Duration::from_secs(3_600));
        st.advance_clock(Duration::from_secs(60));
        assert_eq!(st.clock.skew(), Duration::from_secs(3_660), "jumps add up");
    }

    #[test]
    fn a_worker_s_last_heartbeat_moves_with_a_jump_and_timeouts_are_no_target() {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        let id = "w".to_string();
        let worker = crate::store::model::Worker {
            id: id.clone(),
            name: "w".into(),
            actions: Default::default(),
            slot_limits: Default::default(),
            slots_used: Default::default(),
            sessions: Vec::new(),
            forgotten: Vec::new(),
            last_heartbeat: st.clock.now(),
            last_heartbeat_at: st.clock.system_now(),
            ever_listened: false,
            labels: Default::default(),
            runtime_info: None,
            paused: false,
            created_at: st.clock.system_now(),
            last_listener_established: None,
            assignments: 0,
            heartbeats: 0,
        };
        st.workers.insert(id.clone(), worker);
        let before = st.workers[&id].last_heartbeat;
        st.advance_clock(Duration::from_secs(3_600));
        assert_eq!(
            st.workers[&id].last_heartbeat,
            before + Duration::from_secs(3_600),
            "an hour's jump is not an hour's silence"
        );
        // A deadline alone is not a timer to jump to.
        let now = st.clock.now();
        st.deadlines.add(now + Duration::from_secs(60), "t");
        assert_eq!(st.next_timer(now), None);
    }

    #[test]
    fn nothing_awaited_means_no_jump_even_on_virtual_time() {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        st.clock.set_virtual(true);
        let wf = st
            .workflows
            .values()
            .next()
            .map(|w| w.name.clone())
            .expect("a workflow");
        crate::hub::plain_run(&mut st, &wf);
        // A queued task nobody awaits: no subscriber, so no skip.
        assert!(!st.may_skip(st.clock.now()));
        assert_eq!(st.skip_if_idle(), None);
        assert_eq!(st.clock.skew(), Duration::ZERO);
    }
}
