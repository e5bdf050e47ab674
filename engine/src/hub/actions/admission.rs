//! Concurrency admission: whether a new run is admitted, held or cancelled, and which held runs
//! a group admits when its active runs finish. The limits and the invariants are in
//! `concurrency.rs`.

use crate::hub::State;
use crate::sched::concurrency::{Group, Limit, group_key};
use crate::store::model::Status;
use hatchet_runtime::protocol::{self as proto, v1::ConcurrencyLimitStrategy as Strategy};

impl State {
    fn active_in(&self, group: &Group, except: &str) -> Vec<String> {
        let mut runs: Vec<&crate::store::model::Run> = self
            .runs
            .values()
            .filter(|r| {
                r.id != except
                    && !r.held
                    && !r.status().is_terminal()
                    && r.workflow_name == group.0
                    && r.groups.iter().any(|(i, k)| *i == group.1 && *k == group.2)
            })
            .collect();
        runs.sort_by_key(|r| r.created_at);
        runs.into_iter().map(|r| r.id.clone()).collect()
    }

    fn limits_of(&self, workflow: &str) -> Vec<Limit> {
        self.workflows
            .get(workflow)
            .map(|w| w.concurrency.clone())
            .unwrap_or_default()
    }

    /// The first group of `run` that is full, with its limit.
    fn full_group(&self, run_id: &str) -> Option<(Group, Limit)> {
        let run = self.runs.get(run_id)?;
        let limits = self.limits_of(&run.workflow_name);
        run.groups.iter().find_map(|(i, key)| {
            let limit = limits.get(*i)?;
            let group = (run.workflow_name.clone(), *i, key.clone());
            (self.active_in(&group, run_id).len() >= limit.max_runs).then(|| (group, limit.clone()))
        })
    }

    /// Applies the workflow's limits to a run just created (its root tasks are queued).
    pub(crate) fn apply_concurrency(&mut self, run_id: &str) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        let limits = self.limits_of(&run.workflow_name);
        if limits.is_empty() {
            return;
        }
        let groups: Result<Vec<(usize, String)>, String> = limits
            .iter()
            .enumerate()
            .map(|(i, l)| {
                group_key(&l.expression, &run.input, &run.additional_metadata, run_id)
                    .map(|k| (i, k))
            })
            .collect();
        let groups = match groups {
            Ok(groups) => groups,
            // The real engine creates such tasks FAILED (concurrency.rs invariant 5).
            Err(why) => {
                let roots: Vec<String> = run
                    .tasks
                    .iter()
                    .filter(|t| {
                        self.tasks
                            .get(*t)
                            .is_some_and(|t| t.status() == Status::Queued)
                    })
                    .cloned()
                    .collect();
                for tid in roots {
                    self.fail_attempt(&tid, why.clone(), true);
                }
                return;
            }
        };
        if let Some(r) = self.runs.get_mut(run_id) {
            r.groups = groups;
        }
        let Some((group, limit)) = self.full_group(run_id) else {
            return;
        };
        match limit.strategy {
            Strategy::CancelNewest | Strategy::DropNewest => self.cancel_run(
                run_id,
                &format!(
                    "cancelled by the workflow's concurrency limit ({})",
                    limit.strategy.as_str_name()
                ),
            ),
            Strategy::CancelInProgress => {
                let active = self.active_in(&group, run_id);
                let excess = active.len() + 1 - limit.max_runs.min(active.len() + 1);
                for old in active.into_iter().take(excess) {
                    self.cancel_run(
                        &old,
                        "cancelled by the workflow's concurrency limit (CANCEL_IN_PROGRESS): a newer run took its place",
                    );
                }
                // Another limit may still be full.
                if self.full_group(run_id).is_some() {
                    self.hold(run_id);
                }
            }
            Strategy::GroupRoundRobin | Strategy::QueueNewest => self.hold(run_id),
        }
    }

    fn hold(&mut self, run_id: &str) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        run.held = true;
        let tasks = run.tasks.clone();
        for tid in &tasks {
            if let Some(t) = self.tasks.get_mut(tid)
                && t.status() == Status::Queued
            {
                t.hold();
            }
        }
        self.queue.retain(|q| !tasks.iter().any(|t| t == q));
        if let Some((group, _)) = self.full_group(run_id) {
            self.held_runs.push_back(group, run_id.to_string());
        }
    }

    fn admit(&mut self, run_id: &str) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        run.held = false;
        let tasks = run.tasks.clone();
        for tid in tasks {
            if let Some(t) = self.tasks.get_mut(&tid)
                && t.held
            {
                t.admit();
                self.enqueue(&tid);
                self.emit_task_event(&tid, proto::ResourceEventType::Started, String::new());
            }
        }
    }

    /// Cancels every unfinished task of a run.
    fn cancel_run(&mut self, run_id: &str, why: &str) {
        let tasks = self
            .runs
            .get(run_id)
            .map(|r| r.tasks.clone())
            .unwrap_or_default();
        for tid in tasks {
            self.cancel_task(&tid, why);
        }
    }

    /// A run finished: its groups admit held runs while they have room (invariants 2–4).
    pub(crate) fn release_concurrency(&mut self, run_id: &str) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        run.held = false; // a held run can end too (cancelled while it waited)
        let groups: Vec<Group> = run
            .groups
            .iter()
            .map(|(i, k)| (run.workflow_name.clone(), *i, k.clone()))
            .collect();
        for group in groups {
            loop {
                let next = self.held_runs.pop_front(&group);
                let Some(next) = next else { break };
                let waiting = self
                    .runs
                    .get(&next)
                    .is_some_and(|r| r.held && !r.status().is_terminal());
                if !waiting {
                    continue; // cancelled while held
                }
                match self.full_group(&next) {
                    None => self.admit(&next),
                    Some((full, _)) if full == group => {
                        self.held_runs.push_front(group.clone(), next);
                        break;
                    }
                    // Still blocked by another limit: wait in that group's line instead.
                    Some((other, _)) => self.held_runs.push_back(other, next),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hatchet_runtime::protocol::v1;
    use serde_json::json;

    fn state(limits: &[(&str, Strategy)]) -> State {
        crate::hub::state_with(v1::CreateWorkflowVersionRequest {
            concurrency_arr: limits
                .iter()
                .map(|(e, s)| v1::Concurrency {
                    expression: (*e).into(),
                    max_runs: Some(1),
                    limit_strategy: Some(*s as i32),
                })
                .collect(),
            ..crate::hub::one_task_workflow()
        })
    }

    fn run(st: &mut State, input: serde_json::Value) -> String {
        st.create_run("wf", input, Default::default(), Default::default())
            .expect("run")
    }

    fn queued(st: &State, run: &str) -> bool {
        st.runs[run]
            .tasks
            .iter()
            .all(|t| st.tasks[t].status() == Status::Queued && st.queue.contains(t))
    }

    #[test]
    fn a_run_cancelled_while_held_is_skipped_when_its_turn_comes() {
        let mut st = state(&[("input.g", Strategy::GroupRoundRobin)]);
        let (a, b, c) = (
            run(&mut st, json!({"g": "1"})),
            run(&mut st, json!({"g": "1"})),
            run(&mut st, json!({"g": "1"})),
        );
        assert!(queued(&st, &a) && st.runs[&b].held && st.runs[&c].held);
        let b_task = st.runs[&b].tasks[0].clone();
        st.cancel_task(&b_task, "cancelled by the test");
        assert_eq!(st.runs[&b].status(), Status::Cancelled);
        assert_eq!(st.complete_all_queued("wf"), 1, "only a runs");
        assert!(queued(&st, &c), "c is admitted; cancelled b is skipped");
        assert!(st.held_runs.is_empty());
    }

    #[test]
    fn with_two_limits_a_run_waits_until_both_groups_have_room() {
        let mut st = state(&[
            ("input.a", Strategy::GroupRoundRobin),
            ("input.b", Strategy::GroupRoundRobin),
        ]);
        let first = run(&mut st, json!({"a": "x", "b": "y"}));
        let same_a = run(&mut st, json!({"a": "x", "b": "z"}));
        let same_b = run(&mut st, json!({"a": "w", "b": "y"}));
        let free = run(&mut st, json!({"a": "v", "b": "u"}));
        assert!(queued(&st, &first) && queued(&st, &free));
        assert!(st.runs[&same_a].held && st.runs[&same_b].held);
        st.complete_all_queued("wf");
        assert!(queued(&st, &same_a) && queued(&st, &same_b));
    }
}
