//! What the DAG conditions do to the state: a new task gets its matcher, armed at once for a
//! root task; the matcher hears of its parents' ends, its sleeps and pushed events; what it
//! decides (queue, skip, cancel) is applied. The rules and their invariants are in `matches.rs`.

use serde_json::json;
use tokio::time::Instant;

use crate::dag::matches::{Act, Matcher, SKIPPED};

impl crate::hub::State {
    /// Gives a new task its matcher: armed at once for a root task (invariant 3); returns
    /// whether the task waits (stays pending) instead of being queued now.
    pub(crate) fn start_matcher(&mut self, tid: &str, m: Option<Matcher>) -> bool {
        let Some(m) = m else {
            return false;
        };
        let root = self.tasks.get(tid).is_some_and(|t| t.parents.is_empty());
        if let Some(t) = self.tasks.get_mut(tid) {
            t.matcher = Some(m);
        }
        if root {
            self.arm_matcher(tid);
        }
        true
    }

    fn arm_matcher(&mut self, tid: &str) {
        let seq = self.events.seq();
        let now = self.clock.now();
        let Some(m) = self.tasks.get_mut(tid).and_then(|t| t.matcher.as_mut()) else {
            return;
        };
        let deadlines = m.arm(now, seq);
        let wants_events = m.wants_events();
        for at in deadlines {
            self.condition_sleeps.add(at, tid);
        }
        if wants_events {
            self.event_waiters.insert(tid.to_string());
        }
    }

    /// A task of the run finished (completed, skipped, failed or cancelled): its dependents'
    /// matchers hear of it, and whatever they decide is applied (recursively).
    pub(crate) fn settle_dependents(&mut self, tid: &str) {
        let Some((run_id, readable, completed, output, worker)) = self.tasks.get(tid).map(|t| {
            let out = t
                .output
                .as_deref()
                .and_then(|o| serde_json::from_str(o).ok())
                .unwrap_or_else(|| json!({}));
            let worker = t.worker_id.clone();
            (
                t.run_id.clone(),
                t.readable_id.clone(),
                t.status() == crate::store::model::Status::Completed,
                out,
                worker,
            )
        }) else {
            return;
        };
        let waiting: Vec<String> = self
            .runs
            .get(&run_id)
            .map(|r| r.tasks.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|id| {
                self.tasks.get(id).is_some_and(|t| {
                    t.status() == crate::store::model::Status::Pending
                        && t.matcher.is_some()
                        && t.parents.contains(&readable)
                })
            })
            .collect();
        for id in waiting {
            let arm = {
                let Some(m) = self.tasks.get_mut(&id).and_then(|t| t.matcher.as_mut()) else {
                    continue;
                };
                m.parent_finished(&readable, completed, &output);
                m.parents_completed()
            };
            if arm {
                self.arm_matcher(&id);
            }
            if let Some(t) = self.tasks.get_mut(&id) {
                t.wish.desired_worker = worker.clone();
            }
            self.apply_decision(&id);
        }
    }

    /// Applies what a task's matcher decides now, if anything.
    pub(crate) fn apply_decision(&mut self, tid: &str) {
        use crate::store::model::Status;
        use hatchet_runtime::protocol::ResourceEventType as Ev;
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        if t.status() != Status::Pending {
            return;
        }
        let Some((act, data)) = t
            .matcher
            .as_mut()
            .and_then(|m| m.decide().map(|a| (a, m.trigger_data())))
        else {
            return;
        };
        let now = self.clock.system_now();
        let run_id = t.run_id.clone();
        match act {
            Act::Queue => t.release(now, data),
            Act::Skip => t.skip(now, SKIPPED),
            Act::Cancel => t.cancel_by_condition(now),
        }
        self.event_waiters.remove(tid);
        match act {
            Act::Queue => {
                self.enqueue(tid);
                self.emit_task_event(tid, Ev::Started, String::new());
            }
            Act::Skip => {
                self.emit_task_event(tid, Ev::Completed, SKIPPED.into());
                self.settle_dependents(tid);
            }
            Act::Cancel => {
                self.emit_task_event(tid, Ev::Cancelled, String::new());
                self.settle_dependents(tid);
            }
        }
        self.maybe_finish_run(&run_id);
    }

    /// A pushed event reaches the tasks waiting for events.
    pub(crate) fn conditions_event(&mut self, ev: &crate::store::model::StoredEvent) {
        let waiting: Vec<String> = self.event_waiters.iter().cloned().collect();
        for tid in waiting {
            if let Some(m) = self.tasks.get_mut(&tid).and_then(|t| t.matcher.as_mut()) {
                m.event(&ev.key, ev.scope.as_deref(), ev.seq, &ev.payload);
            }
            self.apply_decision(&tid);
        }
    }

    /// Due condition sleeps.
    pub(crate) fn conditions_tick(&mut self, now: Instant) {
        while let Some((_, tid)) = self.condition_sleeps.pop_due(now) {
            if let Some(m) = self.tasks.get_mut(&tid).and_then(|t| t.matcher.as_mut()) {
                m.tick(now);
            }
            self.apply_decision(&tid);
        }
    }
}
