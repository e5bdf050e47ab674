//! Attempts the engine holds as this worker's and will never finish on its own, taken back
//! (docs/contract.md §5 "Taking back").
//!
//! A killed engine (v0.104.9, its message queue on PostgreSQL) can leave two kinds of attempt
//! under a live worker's id, each with a runtime row that only the attempt's timeout ends (five
//! minutes by default, and with no retries the run then fails):
//!
//! - **Assigned, never sent.** The scheduler commits the assignment, then tells the dispatcher
//!   that holds the worker's stream through that dispatcher's own queue. A dispatcher killed
//!   before it sends leaves the message in a queue nobody reads again (each process has a new
//!   dispatcher id). The worker runs such an attempt once, from the core's record of its run.
//! - **Finished here, the end lost.** The dispatcher answers a final event once it is queued for
//!   the task controller; a controller killed after reading it and before recording it loses
//!   it (a read message is never handed out again). The worker sends that final once more.
//!
//! # Invariants
//!
//! 1. Nothing is acted on that the engine's core does not hold: the read model (the REST task
//!    list, which can lag and can miss an event the kill cut) only names candidates, and each is
//!    settled with `GetRunDetails`, which reads the core's tables, before anything is done.
//! 2. An attempt is run only after it has been seen held and not received for
//!    [`ReclaimTiming::grace`], so an assignment on its way is never run twice: the same attempt
//!    delivered later is ignored by the worker's running and finished sets, and one taken back
//!    after the engine's delivery is ignored the same way.
//! 3. A final event is sent again at most once per attempt, only when it was answered just
//!    before a disturbance (a failed heartbeat: the engine or its database went away), only when
//!    the core still holds the attempt [`ReclaimTiming::resend_after`] after the answer, and only
//!    once the engine shows it records ends again: a final this worker sent after the
//!    disturbance (the witness) reads recorded. The engine's task controller reads its queue in
//!    order, so an end queued before the witness and still unrecorded after it was lost, not
//!    delayed (a killed engine's successor takes its tenant back only after a minute). A worker
//!    that answers no final after the disturbance has no witness: the at-risk finals of its
//!    one-task runs go again once the engine has answered every heartbeat for
//!    [`ReclaimTiming::alone_after`] (past the successor's rebalance minute twice over,
//!    [`quiet_long_enough`]), so an idle worker's last result is not left to the attempt's
//!    timeout. A second final of a recorded DAG task is what the engine takes for a replay, which
//!    strands other work: that is never sent, a DAG task's final waits for a witness, and the
//!    core is read for each final just before it goes.
//! 4. What the worker cannot run from the core's record (a batch; a durable task past its first
//!    invocation, whose count is the engine's alone) is failed at once with an error that names
//!    the engine's loss, instead of waiting out its timeout; with retries left the engine
//!    retries it. A durable task's first invocation is run as invocation 1. A DAG task whose
//!    parents' outputs neither the core (it shows them only once the run ends) nor the read
//!    model shows is failed the same way on the [`UNREADABLE_PASSES`]-th due pass that finds
//!    them so (the read model lost a parent's end: a cluster chaos run, a replica killed as it
//!    recorded it, left such a task assigned and unsent for its whole five-minute timeout).
//! 5. Memory is bounded: at most [`FINALS_KEPT`] finals and [`FINAL_BYTES_KEPT`] bytes of their
//!    payloads, the oldest forgotten first.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::WorkerCore;
use crate::client::api::{Api, RunQuery, RunStatus};
use crate::client::control::RunFilter;
pub(crate) use crate::connection::ReclaimTiming;
use crate::protocol::{self as proto, ActionType, StepActionEventType as E, v1};

/// Finals kept for a possible second sending.
pub(crate) const FINALS_KEPT: usize = 10_000;
/// Bytes of final payloads kept.
pub(crate) const FINAL_BYTES_KEPT: usize = 64 * 1024 * 1024;
/// How often the finals no longer at risk are forgotten, at most.
const FORGET_EVERY: Duration = Duration::from_secs(1);
/// A final answered this long before a disturbance may have been lost with it.
pub(crate) const AT_RISK_BEFORE: Duration = Duration::from_secs(30);
/// How far back the task list looks for held attempts (an attempt older than its timeout is
/// ended by the engine; a day covers every timeout a user is likely to set).
const LOOK_BACK: Duration = Duration::from_secs(24 * 3600);
/// Rows per read of the task list (more than any worker's slots).
const ROWS: usize = 500;

/// An attempt, as the engine names it: task run id and retry count.
pub(crate) type AttemptKey = (String, i32);

/// A final event the engine answered.
#[derive(Debug, Clone)]
struct Final {
    event: proto::StepActionEvent,
    run_id: String,
    answered: Instant,
    at_risk: bool,
}

/// What the sweep has taken back, for metrics and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct ReclaimCounts {
    /// Attempts the engine held and never sent, run here.
    pub run: u64,
    /// Finals sent again because the engine lost them.
    pub resent: u64,
    /// Attempts failed at once because the worker could not run them from the engine's record.
    pub failed: u64,
    /// Reads of the task list.
    pub sweeps: u64,
}

/// The state of the sweep (owned by the worker core; the sweep task is its only writer
/// besides the two notes, [`Reclaim::answered`] and [`Reclaim::disturbed`]).
#[derive(Default)]
pub(crate) struct Reclaim {
    finals: Mutex<Finals>,
    /// Held attempts not received, with when they were first seen.
    seen: Mutex<HashMap<AttemptKey, Instant>>,
    /// Held attempts whose parents' outputs could not be read, with how many due passes found
    /// them so (invariant 4).
    unreadable: Mutex<HashMap<AttemptKey, u32>>,
    /// The first final answered after the latest disturbance: once it reads recorded, the
    /// engine records ends again (invariant 3).
    witness: Mutex<Witness>,
    /// Where taken-back attempts go: the dispatch loop, as if the engine had sent them.
    tx: std::sync::OnceLock<mpsc::Sender<proto::AssignedAction>>,
    run: AtomicU64,
    resent: AtomicU64,
    failed: AtomicU64,
    sweeps: AtomicU64,
}

/// The latest disturbance and the first final answered after it.
#[derive(Default)]
struct Witness {
    disturbed: Option<Instant>,
    first_after: Option<(String, String)>,
}

#[derive(Default)]
struct Finals {
    by_key: HashMap<AttemptKey, Final>,
    order: VecDeque<AttemptKey>,
    bytes: usize,
    /// When the safe finals were last forgotten: at most once a second, so a final's note costs
    /// O(1) however many are kept (the bound drops the oldest on insert meanwhile).
    forgot: Option<Instant>,
}

impl Finals {
    fn insert(&mut self, key: AttemptKey, f: Final) {
        self.bytes += f.event.event_payload.len();
        if let Some(old) = self.by_key.insert(key.clone(), f) {
            self.bytes = self.bytes.saturating_sub(old.event.event_payload.len());
        } else {
            self.order.push_back(key);
        }
        while self.order.len() > FINALS_KEPT || self.bytes > FINAL_BYTES_KEPT {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.remove(&old);
        }
    }

    fn remove(&mut self, key: &AttemptKey) {
        if let Some(f) = self.by_key.remove(key) {
            self.bytes = self.bytes.saturating_sub(f.event.event_payload.len());
        }
    }

    /// Drops finals that can no longer be at risk; keeps the order list in step lazily.
    fn forget_safe(&mut self, now: Instant) {
        self.forgot = Some(now);
        self.by_key
            .retain(|_, f| f.at_risk || now.duration_since(f.answered) < AT_RISK_BEFORE);
        let by_key = &self.by_key;
        self.order.retain(|k| by_key.contains_key(k));
        self.bytes = self
            .by_key
            .values()
            .map(|f| f.event.event_payload.len())
            .sum();
    }
}

/// Whether an attempt seen held since `first_seen` and not received here is to be run (pure;
/// invariant 2).
pub(crate) fn due(first_seen: Instant, now: Instant, grace: Duration) -> bool {
    now.duration_since(first_seen) >= grace
}

/// Whether a final answered at `answered` is at risk from a disturbance noticed at `disturbed`
/// (pure; invariant 3): answered in the [`AT_RISK_BEFORE`] before it.
pub(crate) fn at_risk(answered: Instant, disturbed: Instant) -> bool {
    answered <= disturbed && disturbed.duration_since(answered) <= AT_RISK_BEFORE
}

/// Whether a worker with no witness has heard the engine long enough to trust that an end it
/// has not recorded was lost (pure; invariant 3): the latest disturbance at `disturbed`, and a
/// heartbeat sent at `heartbeat_ok` and accepted, at least `alone_after` later (every failed
/// heartbeat is a new disturbance, so none failed in between).
pub(crate) fn quiet_long_enough(
    disturbed: Option<Instant>,
    heartbeat_ok: Option<Instant>,
    alone_after: Duration,
) -> bool {
    match (disturbed, heartbeat_ok) {
        (Some(d), Some(ok)) => ok >= d && ok.duration_since(d) >= alone_after,
        _ => false,
    }
}

/// Whether a final of `action_id` belongs to a one-task run (invariant 3: only those go again
/// without a witness): the run shows one task, and the workflow of that action declares one
/// task on this worker.
fn one_task_run(core: &WorkerCore, details: &v1::GetRunDetailsResponse, action_id: &str) -> bool {
    if details.task_runs.len() != 1 {
        return false;
    }
    let handlers = core.handlers.lock();
    let Some(def) = handlers.get(action_id) else {
        return false;
    };
    handlers
        .values()
        .filter(|d| d.workflow == def.workflow)
        .count()
        == 1
}

/// What the core says of one task of a run (pure): `Some(true)` it holds the task as running,
/// `Some(false)` it does not, `None` the run has no such task.
pub(crate) fn core_holds(details: &v1::GetRunDetailsResponse, task_run_id: &str) -> Option<bool> {
    details
        .task_runs
        .values()
        .find(|t| t.external_id == task_run_id)
        .map(|t| t.status == v1::RunStatus::Running as i32)
}

/// Whether a held attempt of `def` can be run from the engine's record (pure): not a batch
/// (its members come in one assignment); a durable task only in its first invocation (a first
/// attempt of a task that cannot be evicted: a later invocation's count is the engine's alone,
/// and a stale one would be evicted at its first wait).
pub(crate) fn runnable_from_record(def: &super::TaskDef, retry_count: i32) -> bool {
    def.options.batch.is_none()
        && (!def.durable || (retry_count == 0 && def.options.evict_after.is_none()))
}

/// Whether the record carries the output of every parent in `parents` (pure).
pub(crate) fn parents_known(details: &v1::GetRunDetailsResponse, parents: &[String]) -> bool {
    parents
        .iter()
        .all(|p| details.task_runs.get(p).is_some_and(|t| t.output.is_some()))
}

/// Due passes that may find a held attempt's parents' outputs unreadable before it is failed as
/// lost (invariant 4): the read model lags the core by seconds, and for about a minute after a
/// controllers crash, so one pass is not enough to call them lost.
pub(crate) const UNREADABLE_PASSES: u32 = 2;

/// Whether a held attempt whose parents' outputs neither the core nor the read model shows is
/// failed as lost on its `pass`-th due pass that found them so (pure; invariant 4).
pub(crate) fn fail_unreadable(pass: u32) -> bool {
    pass >= UNREADABLE_PASSES
}

/// Fills the parents' outputs the core's record lacks from the run's REST read (pure).
pub(crate) fn fill_parent_outputs(
    details: &mut v1::GetRunDetailsResponse,
    parents: &[String],
    view: &crate::client::view::RunView,
) {
    for p in parents {
        let Some(out) = view.tasks.get(p).and_then(|t| t.output.as_ref()) else {
            continue;
        };
        let entry = details.task_runs.entry(p.clone()).or_default();
        if entry.output.is_none() {
            entry.output = Some(out.to_string().into_bytes());
        }
    }
}

/// The action payload a task's assignment would have carried, from the core's record of its
/// run (pure): the run's input, the outputs of the task's parents, the errors of failed tasks
/// (an on-failure task reads them). For a run of one task the engine's record is already that
/// task's stored input (`input`, `parents`, `triggers`, ...), and is taken as it is.
pub(crate) fn payload_from_details(
    details: &v1::GetRunDetailsResponse,
    parents: &[String],
) -> String {
    let json = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap_or(Value::Null);
    let input = json(&details.input);
    if details.task_runs.len() == 1 && input.get("input").is_some() {
        return input.to_string();
    }
    let mut parent_outputs = serde_json::Map::new();
    let mut errors = serde_json::Map::new();
    for (name, t) in &details.task_runs {
        if parents.iter().any(|p| p == name)
            && let Some(out) = &t.output
        {
            parent_outputs.insert(name.clone(), json(out));
        }
        if let Some(e) = &t.error {
            errors.insert(name.clone(), Value::String(e.clone()));
        }
    }
    serde_json::json!({
        "input": input,
        "parents": parent_outputs,
        "step_run_errors": errors,
    })
    .to_string()
}

impl Reclaim {
    /// Where taken-back attempts go (set once, when the worker starts).
    pub(crate) fn set_sink(&self, tx: mpsc::Sender<proto::AssignedAction>) {
        let _ = self.tx.set(tx);
    }

    /// The engine answered `event`, the final of an attempt of run `run_id`.
    pub(crate) fn answered(&self, run_id: &str, event: proto::StepActionEvent) {
        let key = (
            event.task_run_external_id.clone(),
            event.retry_count.unwrap_or(0),
        );
        let now = Instant::now();
        {
            let mut w = self.witness.lock();
            if w.disturbed.is_some() && w.first_after.is_none() {
                w.first_after = Some((run_id.to_string(), event.task_run_external_id.clone()));
            }
        }
        let mut finals = self.finals.lock();
        if finals.order.len() >= FINALS_KEPT / 2
            && finals
                .forgot
                .is_none_or(|t| now.duration_since(t) >= FORGET_EVERY)
        {
            finals.forget_safe(now);
        }
        finals.insert(
            key,
            Final {
                event,
                run_id: run_id.to_string(),
                answered: now,
                at_risk: false,
            },
        );
    }

    /// The worker lost the engine for a moment (a heartbeat failed): the finals answered just
    /// before may have been lost with it.
    pub(crate) fn disturbed(&self) {
        let now = Instant::now();
        *self.witness.lock() = Witness {
            disturbed: Some(now),
            first_after: None,
        };
        let mut finals = self.finals.lock();
        for f in finals.by_key.values_mut() {
            if at_risk(f.answered, now) {
                f.at_risk = true;
            }
        }
        finals.forget_safe(now);
    }

    /// What the sweep has done so far.
    pub(crate) fn counts(&self) -> ReclaimCounts {
        ReclaimCounts {
            run: self.run.load(Ordering::Relaxed),
            resent: self.resent.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            sweeps: self.sweeps.load(Ordering::Relaxed),
        }
    }
}

/// Starts the sweep of `core`'s worker; it ends with the worker's heartbeat.
pub(crate) fn spawn(core: Arc<WorkerCore>, timing: ReclaimTiming) {
    let stop = core.heartbeat_stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(timing.every) => {}
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = sweep(&core, timing) => {}
            }
        }
    });
}

/// One sweep: attempts held and never received, then finals at risk.
async fn sweep(core: &Arc<WorkerCore>, timing: ReclaimTiming) {
    if !core.draining.is_cancelled() {
        take_back_unsent(core, timing).await;
    }
    resend_lost_finals(core, timing).await;
}

/// Whether the worker has (or had) the attempt `key` in hand.
fn received(core: &WorkerCore, key: &AttemptKey) -> bool {
    let in_hand = |k: &super::RunningKey| k.0 == key.0 && k.2 == key.1;
    core.running.lock().keys().any(in_hand) || core.finished.any(in_hand)
}

async fn take_back_unsent(core: &Arc<WorkerCore>, timing: ReclaimTiming) {
    let Some(worker_id) = core.identity.get() else {
        return;
    };
    let since = SystemTime::now()
        .checked_sub(LOOK_BACK)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let q = RunQuery::new(RunFilter::since(since).status(RunStatus::Running))
        .tasks()
        .worker_id(worker_id.clone())
        .limit(ROWS);
    let api = Api::new(core.conn.clone());
    let page = match api.list_runs(&q).await {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, "the sweep of held attempts could not read the task list");
            return;
        }
    };
    core.reclaim.sweeps.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut listed = HashSet::new();
    let mut due_now = Vec::new();
    {
        let mut seen = core.reclaim.seen.lock();
        for row in page.rows {
            let key = (row.task_external_id.clone(), row.retry_count);
            if received(core, &key) {
                continue;
            }
            listed.insert(key.clone());
            let first = *seen.entry(key.clone()).or_insert(now);
            if due(first, now, timing.grace) {
                due_now.push(row);
            }
        }
        seen.retain(|k, _| listed.contains(k));
        core.reclaim
            .unreadable
            .lock()
            .retain(|k, _| listed.contains(k));
    }
    for row in due_now {
        let key = (row.task_external_id.clone(), row.retry_count);
        let details = match core
            .conn
            .run_details(&row.workflow_run_external_id, Some(Duration::from_secs(5)))
            .await
        {
            Ok(d) => d,
            Err(_) => continue,
        };
        if core_holds(&details, &row.task_external_id) != Some(true) || received(core, &key) {
            core.reclaim.seen.lock().remove(&key);
            continue;
        }
        core.reclaim.seen.lock().remove(&key);
        let action_id = row.action_id.clone().unwrap_or_default();
        let def = core.handlers.lock().get(&action_id).cloned();
        let action = proto::AssignedAction {
            tenant_id: String::new(),
            workflow_run_id: row.workflow_run_external_id.clone(),
            task_run_external_id: row.task_external_id.clone(),
            action_id: action_id.clone(),
            action_type: ActionType::StartStepRun as i32,
            task_name: row.display_name.clone(),
            retry_count: row.retry_count,
            additional_metadata: (!details.additional_metadata.is_empty())
                .then(|| String::from_utf8_lossy(&details.additional_metadata).into_owned()),
            workflow_id: Some(row.workflow_id.clone()).filter(|w| !w.is_empty()),
            ..Default::default()
        };
        match def {
            Some(def) if runnable_from_record(&def, row.retry_count) => {
                let mut details = details;
                if !parents_known(&details, &def.options.parents) {
                    // The engine's core shows a running DAG's finished tasks without their
                    // outputs (it fills them only once the run has ended): its REST read has
                    // them. Until it does, the next sweep tries again.
                    let Ok(view) = api.run(&row.workflow_run_external_id).await else {
                        continue;
                    };
                    fill_parent_outputs(&mut details, &def.options.parents, &view);
                    if !parents_known(&details, &def.options.parents) {
                        // Neither shows them: the read model lost a parent's end (a replica
                        // killed as it recorded it). Tried again at the next due pass, then
                        // failed as lost rather than left to its timeout (minutes).
                        let pass = {
                            let mut unreadable = core.reclaim.unreadable.lock();
                            let n = unreadable.entry(key.clone()).or_insert(0);
                            *n += 1;
                            *n
                        };
                        if fail_unreadable(pass) {
                            core.reclaim.unreadable.lock().remove(&key);
                            let why = format!(
                                "the engine assigned this attempt to worker {worker_id} and lost it before sending it (its dispatcher went away); this worker cannot run it from the engine's record: its parents' outputs ({:?}) are in neither the engine's core (which shows them once the run ends) nor its read model (which lost them), so it fails the attempt now instead of leaving it to its timeout; with retries left the engine runs it again with its parents' outputs, and RunHandle::replay runs it again after that",
                                def.options.parents
                            );
                            fail_as_lost(core, &action, why).await;
                        }
                        continue;
                    }
                }
                let action = proto::AssignedAction {
                    action_payload: payload_from_details(&details, &def.options.parents),
                    // A durable task's first invocation (invariant 4: the only one run from the
                    // record): the engine's log file of it starts at invocation 1.
                    durable_task_invocation_count: def.durable.then_some(1),
                    ..action
                };
                tracing::warn!(
                    task = %row.task_external_id,
                    run = %row.workflow_run_external_id,
                    retry = row.retry_count,
                    "the engine holds an attempt assigned to this worker that it never sent (its dispatcher was lost): running it here"
                );
                if let Some(tx) = core.reclaim.tx.get()
                    && tx.send(action).await.is_ok()
                {
                    core.reclaim.run.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                let why = format!(
                    "the engine assigned this attempt to worker {worker_id} and lost it before sending it (its dispatcher went away); this worker cannot run it from the engine's record (a batched task, a durable task past its first invocation or that may be evicted, or an action it does not have: {action_id:?}), so it fails the attempt now instead of leaving it to its timeout"
                );
                fail_as_lost(core, &action, why).await;
            }
        }
    }
}

/// Fails a held attempt the worker cannot run, naming the engine's loss (invariant 4).
async fn fail_as_lost(core: &WorkerCore, action: &proto::AssignedAction, why: String) {
    tracing::warn!(task = %action.task_run_external_id, "{why}");
    super::execute::send_event(core, action, E::StepEventTypeFailed, why, false, true).await;
    core.reclaim.failed.fetch_add(1, Ordering::Relaxed);
}

async fn resend_lost_finals(core: &Arc<WorkerCore>, timing: ReclaimTiming) {
    let now = Instant::now();
    let due: Vec<(AttemptKey, Final)> = {
        let finals = core.reclaim.finals.lock();
        finals
            .by_key
            .iter()
            .filter(|(_, f)| f.at_risk && now.duration_since(f.answered) >= timing.resend_after)
            .map(|(k, f)| (k.clone(), f.clone()))
            .collect()
    };
    if due.is_empty() {
        return;
    }
    // invariant 3: only once the engine records ends again.
    let (disturbed, witness) = {
        let w = core.reclaim.witness.lock();
        (w.disturbed, w.first_after.clone())
    };
    let alone = match witness {
        Some((run, task)) => match core
            .conn
            .run_details(&run, Some(Duration::from_secs(5)))
            .await
        {
            Ok(d) if core_holds(&d, &task) == Some(false) => false,
            _ => return,
        },
        None => {
            let heartbeat_ok = *core.identity.heartbeat_ok.borrow();
            if !quiet_long_enough(disturbed, heartbeat_ok, timing.alone_after) {
                return;
            }
            true
        }
    };
    for (key, f) in due {
        let details = match core
            .conn
            .run_details(&f.run_id, Some(Duration::from_secs(5)))
            .await
        {
            Ok(d) => d,
            Err(_) => continue, // the next sweep asks again
        };
        if alone && !one_task_run(core, &details, &f.event.action_id) {
            continue; // a DAG task's final waits for a witness
        }
        core.reclaim.finals.lock().remove(&key);
        if core_holds(&details, &key.0) != Some(true) {
            continue; // recorded (or retried, or gone): nothing to send
        }
        tracing::warn!(
            task = %key.0,
            run = %f.run_id,
            "the engine lost this attempt's final event after answering it (its task controller went away); sending it once more"
        );
        super::execute::send_step_event(core, &f.event, true).await;
        core.reclaim.resent.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(tasks: &[(&str, &str, v1::RunStatus, Option<&str>)]) -> v1::GetRunDetailsResponse {
        v1::GetRunDetailsResponse {
            input: br#"{"n":1}"#.to_vec(),
            task_runs: tasks
                .iter()
                .map(|(name, id, status, out)| {
                    (
                        name.to_string(),
                        v1::TaskRunDetail {
                            external_id: id.to_string(),
                            status: *status as i32,
                            output: out.map(|o| o.as_bytes().to_vec()),
                            readable_id: name.to_string(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Invariant 3: without a witness, only a heartbeat accepted `alone_after` past the latest
    /// disturbance lets an at-risk final go again; time alone (an engine still down, or a
    /// worker not yet heard) does not.
    #[test]
    fn a_worker_alone_resends_only_after_the_engine_answered_long_enough() {
        let d = Instant::now();
        let alone = Duration::from_secs(150);
        let at = |s: u64| Some(d + Duration::from_secs(s));
        assert!(!quiet_long_enough(None, at(200), alone), "no disturbance");
        assert!(
            !quiet_long_enough(Some(d), None, alone),
            "no heartbeat accepted"
        );
        assert!(!quiet_long_enough(Some(d), at(149), alone), "too soon");
        assert!(quiet_long_enough(Some(d), at(150), alone));
        assert!(
            !quiet_long_enough(at(10), Some(d), alone),
            "the accepted beat came before the disturbance"
        );
    }

    #[test]
    fn an_attempt_is_due_only_after_the_grace() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(10);
        assert!(!due(t0, t0, grace));
        assert!(!due(t0, t0 + Duration::from_millis(9_999), grace));
        assert!(due(t0, t0 + grace, grace));
    }

    #[test]
    fn a_final_is_at_risk_only_when_answered_just_before_the_disturbance() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(100);
        assert!(at_risk(later - Duration::from_secs(1), later));
        assert!(at_risk(later - AT_RISK_BEFORE, later));
        assert!(!at_risk(
            later - AT_RISK_BEFORE - Duration::from_millis(1),
            later
        ));
        assert!(
            !at_risk(later + Duration::from_millis(1), later),
            "answered after it"
        );
    }

    #[test]
    fn the_core_holds_a_task_only_while_it_reads_running() {
        let d = details(&[
            ("a", "ta", v1::RunStatus::Completed, Some("{}")),
            ("b", "tb", v1::RunStatus::Running, None),
            ("c", "tc", v1::RunStatus::Queued, None),
        ]);
        assert_eq!(core_holds(&d, "tb"), Some(true));
        assert_eq!(core_holds(&d, "ta"), Some(false));
        assert_eq!(core_holds(&d, "tc"), Some(false));
        assert_eq!(core_holds(&d, "nope"), None);
    }

    #[test]
    fn a_taken_back_payload_carries_the_input_and_only_the_parents_outputs() {
        let d = details(&[
            ("a", "ta", v1::RunStatus::Completed, Some(r#"{"x":2}"#)),
            ("z", "tz", v1::RunStatus::Completed, Some(r#"{"y":3}"#)),
            ("b", "tb", v1::RunStatus::Running, None),
        ]);
        let p: Value = serde_json::from_str(&payload_from_details(&d, &["a".into()])).unwrap();
        assert_eq!(p["input"], serde_json::json!({"n": 1}));
        assert_eq!(p["parents"], serde_json::json!({"a": {"x": 2}}));
        let decoded = crate::worker::context::decode_action_payload(&p.to_string()).unwrap();
        assert_eq!(decoded.parents.len(), 1);
    }

    #[test]
    fn a_one_task_run_s_record_is_its_task_s_stored_input() {
        let mut d = details(&[("t", "tt", v1::RunStatus::Running, None)]);
        d.input = br#"{"input":{"n":1},"parents":{},"triggers":{}}"#.to_vec();
        let p: Value = serde_json::from_str(&payload_from_details(&d, &[])).unwrap();
        assert_eq!(p["input"], serde_json::json!({"n": 1}), "{p}");
    }

    /// Noting a final stays O(1) under load: the finals no longer at risk are forgotten at most
    /// once a second, however many notes come in between.
    #[tokio::test(start_paused = true)]
    async fn the_safe_finals_are_forgotten_at_most_once_a_second() {
        let r = Reclaim::default();
        let note = |i: usize| {
            r.answered(
                "run",
                proto::StepActionEvent {
                    task_run_external_id: i.to_string(),
                    ..Default::default()
                },
            )
        };
        for i in 0..FINALS_KEPT / 2 + 1 {
            note(i);
        }
        let first = r.finals.lock().forgot.expect("forgotten once past half");
        tokio::time::advance(Duration::from_millis(500)).await;
        for i in 0..100 {
            note(FINALS_KEPT + i);
        }
        assert_eq!(
            r.finals.lock().forgot,
            Some(first),
            "not again within the second"
        );
        tokio::time::advance(Duration::from_millis(600)).await;
        note(2 * FINALS_KEPT);
        assert!(
            r.finals.lock().forgot.is_some_and(|t| t > first),
            "again after it"
        );
    }

    #[test]
    fn finals_are_bounded_and_forget_the_safe_ones() {
        let mut f = Finals::default();
        let t0 = Instant::now();
        for i in 0..FINALS_KEPT + 3 {
            f.insert(
                (i.to_string(), 0),
                Final {
                    event: proto::StepActionEvent::default(),
                    run_id: String::new(),
                    answered: t0,
                    at_risk: i == FINALS_KEPT + 2,
                },
            );
        }
        assert_eq!(f.by_key.len(), FINALS_KEPT);
        assert!(!f.by_key.contains_key(&("0".to_string(), 0)));
        f.forget_safe(t0 + AT_RISK_BEFORE);
        assert_eq!(f.by_key.len(), 1, "only the one at risk stays");
        assert_eq!(f.order.len(), 1);
    }
}
