//! What pausing a workflow does to the state: its tasks are held instead of queued, queued
//! again on unpause, and cancelled when a pause's TTL passes. The rooms and the invariants are
//! in `pause.rs`.

use tokio::time::Instant;

use crate::hub::State;
use crate::store::pause::PauseRule;

impl State {
    /// The paused workflow task `tid` belongs to, if it is paused.
    fn paused_workflow_of(&self, tid: &str) -> Option<String> {
        let run = self.runs.get(&self.tasks.get(tid)?.run_id)?;
        self.pauses
            .is_paused(&run.workflow_name)
            .then(|| run.workflow_name.clone())
    }

    /// Holds `tid` instead of queueing it when its workflow is paused (invariant 1).
    pub(crate) fn hold_if_paused(&mut self, tid: &str, now: Instant) -> bool {
        let Some(wf) = self.paused_workflow_of(tid) else {
            return false;
        };
        self.pauses.hold(&wf, tid, now);
        true
    }

    /// Pauses `workflow` (or changes its rule), holding its queued tasks (invariant 1).
    pub(crate) fn pause_workflow(&mut self, workflow: &str, rule: PauseRule, now: Instant) {
        let mut moved = Vec::new();
        let (tasks, runs) = (&self.tasks, &self.runs);
        self.queue.retain(|tid| {
            let of_it = tasks
                .get(tid)
                .and_then(|t| runs.get(&t.run_id))
                .is_some_and(|r| r.workflow_name == workflow);
            if of_it {
                moved.push(tid.to_string());
            }
            !of_it
        });
        self.pauses.pause(workflow, rule, moved, now);
    }

    /// Unpauses `workflow`, queueing what it held in order (invariant 2); answers how many.
    pub(crate) fn unpause_workflow(&mut self, workflow: &str) -> usize {
        let held = self.pauses.end(workflow);
        let n = held.len();
        for tid in held {
            self.enqueue(&tid);
        }
        n
    }

    /// Cancels held tasks older than their pause's TTL (invariant 3).
    pub(crate) fn expire_paused(&mut self, now: Instant) {
        for tid in self.pauses.expired(now) {
            self.cancel_task(&tid, "the workflow was paused longer than its queue TTL");
        }
    }

    /// Forgets a deleted workflow's pause; its held tasks are cancelled.
    pub(crate) fn drop_pause(&mut self, workflow: &str) {
        for tid in self.pauses.end(workflow) {
            self.cancel_task(&tid, "the workflow was deleted");
        }
    }
}
