//! What REST and the run streams see of statuses. The real engine publishes them late: REST
//! reads OLAP tables its controller fills from buffered events, and a run's end reaches the run
//! streams (`SubscribeToWorkflowRuns`) with the same lag; measured, both arrive together, 0.03 to
//! 1.48 s after the change (see `TimerPoll::STATUSES`). Here both are published at a status poll
//! once a second; `GetRunDetails` reads the live tables and does not lag.
//!
//! # Invariants
//!
//! 1. With the poll on (the default), REST reads a task's and a run's status as of the last
//!    poll, and a run's end reaches the run streams at the first poll at or after it: once per
//!    end, and with the status REST reads already the end's.
//! 2. With the poll off (`DevEngine::poll_statuses(None)`, a kindness for tests), REST reads the
//!    live status and a run's end goes out when the run ends.

use tokio::time::Instant;

use crate::core::State;
use crate::store::model::{Run, Status, Task};

impl State {
    /// The status REST reads of task `t` (invariants 1 and 2).
    pub(crate) fn readable_task_status(&self, t: &Task) -> Status {
        match self.switches.poll_statuses {
            Some(_) => t.readable,
            None => t.status(),
        }
    }

    /// The status REST reads of run `r` (invariants 1 and 2).
    pub(crate) fn readable_run_status(&self, r: &Run) -> Status {
        match self.switches.poll_statuses {
            Some(_) => r.readable,
            None => r.status,
        }
    }

    /// Whether the run streams were told that `r` ended (and it has not been replayed since).
    pub(crate) fn run_end_published(&self, r: &Run) -> bool {
        r.status.is_terminal() && r.end_published
    }

    /// Run `run_id` just ended: the run streams hear of it at the next poll, or now with the
    /// poll off.
    pub(crate) fn end_to_publish(&mut self, run_id: &str) {
        match self.switches.poll_statuses {
            Some(_) => self.published.ends.push(run_id.to_string()),
            None => self.publish_end(run_id),
        }
    }

    /// Run `run_id` runs again (a replay): its end is news again.
    pub(crate) fn reopen(&mut self, run_id: &str) {
        if let Some(r) = self.runs.get_mut(run_id) {
            r.end_published = false;
        }
    }

    /// The status poll at `now`: at the first pass at or after each poll, every status REST
    /// reads catches up and every run ended since the last poll is announced (invariant 1).
    pub(crate) fn poll_statuses(&mut self, now: Instant) {
        let Some(poll) = self.switches.poll_statuses.as_mut() else {
            return;
        };
        let at = poll.read(now);
        if self.published.last_poll == Some(at) {
            return;
        }
        self.published.last_poll = Some(at);
        for t in self.tasks.values_mut() {
            t.publish();
        }
        for r in self.runs.values_mut() {
            r.readable = r.status;
        }
        for run_id in std::mem::take(&mut self.published.ends) {
            self.publish_end(&run_id);
        }
    }

    /// Tells the run streams that `run_id` ended, once (invariant 1).
    fn publish_end(&mut self, run_id: &str) {
        let Some(r) = self.runs.get_mut(run_id) else {
            return;
        };
        if !r.status.is_terminal() || r.end_published {
            return;
        }
        r.end_published = true;
        r.readable = r.status;
        let event = self.run_event(&self.runs[run_id]);
        self.subscriptions.run_ended(run_id, &event);
    }

    /// When virtual time may jump for the status poll: the next poll after `now`, while a
    /// status or an end waits for it.
    pub(crate) fn next_status_poll(&self, now: Instant) -> Option<Instant> {
        let poll = self.switches.poll_statuses?;
        let waiting = !self.published.ends.is_empty()
            || self.runs.values().any(|r| r.readable != r.status)
            || self.tasks.values().any(|t| t.readable != t.status());
        waiting.then(|| poll.reads(now + std::time::Duration::from_nanos(1)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc::UnboundedReceiver;
    use tokio::time::Instant;

    use crate::core::State;
    use crate::faults::TimerPoll;
    use crate::store::model::Status;

    type Ends =
        UnboundedReceiver<Result<hatchet_runtime::protocol::WorkflowRunEvent, tonic::Status>>;

    /// A one-task run a subscription waits for, its task completed under `poll` (the first
    /// poll, at `t0`, before the run): the state, `t0`, the run, its task and the subscription's
    /// receiver.
    fn completed_run(poll: Option<TimerPoll>) -> (State, Instant, String, String, Ends) {
        let mut st = crate::core::state_with(crate::core::one_task_workflow());
        st.switches.poll_statuses = poll;
        let t0 = st.clock.now();
        st.poll_statuses(t0);
        let run = crate::core::plain_run(&mut st, "wf");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sub = st.subscriptions.open_runs(tx);
        st.subscriptions.want_run(sub, &run, None);
        let tid = st.runs[&run].tasks[0].clone();
        st.complete_task(&tid, "{}".into());
        assert_eq!(st.runs[&run].status, Status::Completed);
        (st, t0, run, tid, rx)
    }

    /// The run id of the next end on `rx`, if one is there.
    fn end(rx: &mut Ends) -> Option<String> {
        rx.try_recv()
            .ok()
            .and_then(Result::ok)
            .map(|e| e.workflow_run_id)
    }

    #[test]
    fn an_end_is_published_once_at_the_first_poll_after_it_and_reads_lag_until_then() {
        let (mut st, t0, run, tid, mut rx) =
            completed_run(Some(TimerPoll::every(Duration::from_secs(2))));
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Queued);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Queued);
        assert_eq!(end(&mut rx), None, "not before the poll");
        // A pass within the same period is not a poll.
        st.poll_statuses(t0 + Duration::from_millis(1_999));
        assert_eq!(end(&mut rx), None, "a pass between polls publishes nothing");
        assert_eq!(
            st.next_status_poll(t0 + Duration::from_millis(1_999)),
            Some(t0 + Duration::from_secs(2)),
            "virtual time may jump to the poll"
        );
        st.poll_statuses(t0 + Duration::from_millis(2_050));
        assert_eq!(end(&mut rx), Some(run.clone()));
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Completed);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
        assert!(st.run_end_published(&st.runs[&run]));
        st.poll_statuses(t0 + Duration::from_secs(4));
        assert_eq!(end(&mut rx), None, "once");
        assert_eq!(
            st.next_status_poll(t0 + Duration::from_secs(4)),
            None,
            "nothing waits"
        );
    }

    #[test]
    fn with_the_poll_off_reads_are_live_and_an_end_goes_out_at_once() {
        let (st, _, run, tid, mut rx) = completed_run(None);
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Completed);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
        assert_eq!(end(&mut rx), Some(run));
    }
}
