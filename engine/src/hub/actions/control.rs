//! Run control: cancel and replay by ids or by a filter (`v1.AdminService/CancelTasks` and
//! `ReplayTasks`, and the REST routes that proxy to them), the way the real engine chooses and
//! treats targets (`hatchet-engine-semantics.md` §1).
//!
//! # Invariants
//!
//! 1. Ids and a filter together, or a malformed id, are refused (`INVALID_ARGUMENT`); neither is
//!    an empty success. Unknown ids are dropped silently.
//! 2. A run id stands for every task of its run; a task id for that task (cancel) or that task
//!    and everything downstream of it (replay).
//! 3. Cancel answers with the ids it was given (or the run ids the filter found), including ids
//!    that matched nothing; replay answers with every task id it re-queued or re-armed.
//! 4. Replay leaves running tasks alone and gives a replayed task a new attempt
//!    (`retry_count + 1`) with its full retry budget; descendants wait for their parents again.
//! 5. A pending `on_failure` task is never cancelled by a run cancel: it is skipped when the run
//!    settles (see `runs.rs`).

use std::collections::HashSet;

use tonic::Status as GrpcStatus;

use crate::hub::{Engine, State};
use crate::store::control::{CANCEL_FILTER_CAP, REPLAY_FILTER_CAP, Targets};
use crate::store::model::{NextAttempt, PastEnd, Status};

impl State {
    /// The task ids an id stands for (invariant 2, cancel form).
    fn flatten(&self, id: &str) -> Vec<String> {
        match self.runs.get(id) {
            Some(r) if r.tasks.len() > 1 || r.tasks.first().is_some_and(|t| t != id) => {
                r.tasks.clone()
            }
            _ if self.tasks.contains_key(id) => vec![id.to_string()],
            _ => Vec::new(),
        }
    }

    /// `task` and every task downstream of it in its run.
    fn with_descendants(&self, task: &str) -> Vec<String> {
        let Some(t) = self.tasks.get(task) else {
            return Vec::new();
        };
        let Some(run) = self.runs.get(&t.run_id) else {
            return vec![task.to_string()];
        };
        let mut names: HashSet<String> = HashSet::from([t.readable_id.clone()]);
        loop {
            let before = names.len();
            for other in run.tasks.iter().filter_map(|id| self.tasks.get(id)) {
                if other.parents.iter().any(|p| names.contains(p)) {
                    names.insert(other.readable_id.clone());
                }
            }
            if names.len() == before {
                break;
            }
        }
        run.tasks
            .iter()
            .filter(|id| {
                self.tasks
                    .get(*id)
                    .is_some_and(|x| names.contains(&x.readable_id))
            })
            .cloned()
            .collect()
    }

    /// Cancels every unfinished task the ids stand for (invariant 5).
    fn cancel_ids(&mut self, ids: &[String]) {
        for id in ids {
            let whole_run = self.runs.contains_key(id);
            for tid in self.flatten(id) {
                let Some(t) = self.tasks.get(&tid) else {
                    continue;
                };
                if t.status().is_terminal()
                    || (whole_run && t.on_failure && t.status() == Status::Pending)
                {
                    continue;
                }
                self.cancel_task(&tid, "task was cancelled");
            }
            if let Some(r) = self.runs.get(id).map(|r| r.id.clone()) {
                self.maybe_finish_run(&r);
            }
        }
    }

    /// What a replay of `id` would replay now (invariant 4): its run's id and the task ids, the
    /// tasks it stands for that have ended (a task still running or waiting to retry is left
    /// alone, discard rule a); `None` when it stands for nothing to replay.
    pub(crate) fn replay_choice(&self, id: &str) -> Option<(String, Vec<String>)> {
        let chosen: Vec<String> = if let Some(run) = self.runs.get(id) {
            run.tasks.clone()
        } else {
            self.with_descendants(id)
        };
        let run_id = chosen
            .first()
            .and_then(|t| self.tasks.get(t))
            .map(|t| t.run_id.clone())?;
        let chosen: Vec<String> = chosen
            .into_iter()
            .filter(|t| self.tasks.get(t).is_some_and(|t| t.status().is_terminal()))
            .collect();
        (!chosen.is_empty()).then_some((run_id, chosen))
    }

    /// Replays the tasks the ids stand for; returns the task ids replayed (invariant 4).
    pub(crate) fn replay_ids(&mut self, ids: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for id in ids {
            let Some((run_id, chosen)) = self.replay_choice(id) else {
                continue;
            };
            let names: HashSet<String> = chosen
                .iter()
                .filter_map(|t| self.tasks.get(t))
                .map(|t| t.readable_id.clone())
                .collect();
            for tid in &chosen {
                let Some(t) = self.tasks.get_mut(tid) else {
                    continue;
                };
                let rooted = !t.on_failure && t.parents.iter().all(|p| !names.contains(p));
                let end = match t.status() {
                    Status::Completed => Some(PastEnd::Finished),
                    Status::Failed => Some(PastEnd::Failed),
                    Status::Cancelled => Some(PastEnd::Cancelled),
                    _ => None,
                };
                if let (Some(end), Some(at)) = (end, t.finished_at) {
                    t.keep_attempt(end, at, NextAttempt::Replay);
                }
                t.retry_count += 1;
                t.user_retries_used = 0;
                t.output = None;
                t.error = None;
                t.finished_at = None;
                t.started_at = None;
                t.not_before = None;
                t.deadline = None;
                t.worker_id = None;
                t.replay(rooted);
                t.triggers = Default::default();
                // Descendants are re-armed: a fresh matcher (matches.rs), fed below with the
                // parents outside the replayed set.
                t.matcher = if rooted {
                    None
                } else {
                    crate::dag::matches::Matcher::new(&t.parents, t.conditions.as_ref())
                };
                out.push(tid.clone());
                if rooted {
                    self.enqueue(tid);
                    self.emit_task_event(
                        tid,
                        hatchet_runtime::protocol::ResourceEventType::Started,
                        String::new(),
                    );
                }
            }
            self.feed_outside_parents(&chosen, &names);
            if let Some(r) = self.runs.get_mut(&run_id) {
                r.replay();
                if r.first_failure
                    .as_ref()
                    .is_some_and(|(n, _)| names.contains(n))
                {
                    r.first_failure = None;
                }
            }
            self.track_metadata_subscribers(&run_id);
        }
        out
    }
}

impl State {
    /// Replayed descendants hear of their parents that were not replayed (those keep their
    /// results), and start their waits once every parent has completed.
    fn feed_outside_parents(&mut self, chosen: &[String], names: &HashSet<String>) {
        for tid in chosen {
            let Some(t) = self.tasks.get(tid) else {
                continue;
            };
            if t.matcher.is_none() {
                continue;
            }
            let Some(run) = self.runs.get(&t.run_id) else {
                continue;
            };
            let outside: Vec<(String, bool, serde_json::Value)> = run
                .tasks
                .iter()
                .filter_map(|id| self.tasks.get(id))
                .filter(|p| t.parents.contains(&p.readable_id) && !names.contains(&p.readable_id))
                .filter(|p| p.status().is_terminal())
                .map(|p| {
                    let out = p
                        .output
                        .as_deref()
                        .and_then(|o| serde_json::from_str(o).ok())
                        .unwrap_or_else(|| serde_json::json!({}));
                    (p.readable_id.clone(), p.status() == Status::Completed, out)
                })
                .collect();
            if let Some(m) = self.tasks.get_mut(tid).and_then(|t| t.matcher.as_mut()) {
                for (p, completed, out) in &outside {
                    m.parent_finished(p, *completed, out);
                }
            }
        }
    }
}

impl Engine {
    /// Cancels by ids or filter; answers per invariant 3.
    pub(crate) fn cancel(&self, targets: Targets) -> Result<Vec<String>, GrpcStatus> {
        targets.validate()?;
        let mut st = self.state.lock();
        let ids = st.resolve(&targets, CANCEL_FILTER_CAP);
        st.cancel_ids(&ids);
        drop(st);
        self.wake.notify_one();
        Ok(ids)
    }

    /// Replays by ids or filter; answers with the task ids replayed.
    /// Under `Switches::replay_lag` the targets are answered at once and replayed later.
    pub(crate) fn replay(
        self: &std::sync::Arc<Self>,
        targets: Targets,
    ) -> Result<Vec<String>, GrpcStatus> {
        targets.validate()?;
        let mut st = self.state.lock();
        let ids = st.resolve(&targets, REPLAY_FILTER_CAP);
        if let Some(lag) = st.switches.replay_lag {
            // The answer names the task ids, as the real engine's does, before it applies them.
            let answer: Vec<String> = ids
                .iter()
                .filter_map(|id| st.replay_choice(id))
                .flat_map(|(_, tasks)| tasks)
                .collect();
            drop(st);
            let (me, later) = (self.clone(), ids);
            tokio::spawn(async move {
                tokio::time::sleep(lag).await;
                me.state.lock().replay_ids(&later);
                me.wake.notify_one();
            });
            return Ok(answer);
        }
        let out = st.replay_ids(&ids);
        drop(st);
        self.wake.notify_one();
        Ok(out)
    }
}

impl State {
    /// A cancel's or a replay's targets: the ids as given, or the run ids the filter selects
    /// (newest first, as REST reads their statuses), capped.
    fn resolve(&self, t: &Targets, cap: usize) -> Vec<String> {
        match &t.filter {
            None => t.ids.clone(),
            Some(f) => self
                .runs
                .newest_first()
                .filter(|r| f.matches(r, self.readable_run_status(r)))
                .take(cap)
                .map(|r| r.id.clone())
                .collect(),
        }
    }
}
