//! Scheduling: the scheduler's pass (reassignment, timers, the status pipeline, assignment) and
//! hanging up every stream on a restart.

use std::time::Duration;

use super::{Engine, State};
use crate::limits::LIVE_HEARTBEAT;

impl Engine {
    /// One scheduler pass at `now`: reassignment, timeouts, durable sleeps, then assignment.
    /// Returns how soon the status pipeline's next entry falls due, if it does.
    pub(crate) fn tick(&self) -> Option<Duration> {
        let mut st = self.state.lock();
        self.pass(&mut st);
        // Virtual time: nothing to do but wait on a timer while a client waits on a result,
        // so the clock jumps to that timer and the pass runs again (see `clock.rs`).
        if st.skip_if_idle().is_some() {
            self.pass(&mut st);
        }
        let now = st.clock.now();
        st.next_status_poll(now).map(|due| due - now)
    }

    fn pass(&self, st: &mut State) {
        let now = st.clock.now();
        // Timers are read at the last poll (the real engine's), or at `now` with polling off.
        let timers_at = st
            .switches
            .poll_timers
            .as_mut()
            .map_or(now, |p| p.read(now));
        st.reap_silent_workers(now, self.reassign_after);
        st.expire_timeouts(timers_at);
        st.expire_paused(now);
        st.durable_tick(timers_at);
        st.conditions_tick(timers_at);
        // Crons and schedules fire when due (the real engine's scheduler runs them on time).
        let wall = st.clock.system_now();
        st.fire_calendar(wall);
        // What REST reads comes through the status pipeline; run ends go out after the hop.
        st.publish_statuses(now);
        // A worker silent long enough to lose its tasks is never live (matters when tests make
        // the reassignment window shorter than the liveness window).
        st.assign(now, LIVE_HEARTBEAT.min(self.reassign_after));
        st.flush_batches(
            now,
            LIVE_HEARTBEAT.min(self.reassign_after),
            &self.tenant_id,
        );
    }

    /// Ends every stream the engine feeds (restart, shutdown): workers see EOF and become
    /// inactive, subscribers see EOF. State is kept.
    pub(crate) fn hang_up_all(&self) {
        let mut st = self.state.lock();
        for w in st.workers.values_mut() {
            w.sessions.clear();
        }
        st.subscriptions.close_all();
        st.durable.streams.clear();
    }
}
