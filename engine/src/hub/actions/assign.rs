//! Assignment: queueing (a paused workflow's tasks are held instead), live workers, slots, the
//! assigned-action payload, requeues of a silent worker's tasks, and execution timeouts.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::hub::State;
use crate::sched::queue::Lane;
use crate::store::model::{Status, Worker};
use hatchet_runtime::protocol as proto;

/// How long after the first copy a late duplicate assignment is sent.
const LATE_DUPLICATE_AFTER: Duration = Duration::from_millis(300);

/// What became of one queued task in an assignment pass.
enum Offer {
    /// Not queued any more (a stale id) or failed for good: drop it from the queue.
    Skip,
    /// Not now (backoff, rate limit, no live worker with its action): keep its place.
    Wait,
    /// Sent to a worker, taking a slot of this type.
    Sent(String),
}

impl State {
    pub(crate) fn worker_is_live(w: &Worker, now: Instant, live: Duration) -> bool {
        !w.paused
            && !w.sessions.is_empty()
            && (w.sessions.iter().any(|s| s.legacy)
                || now.saturating_duration_since(w.last_heartbeat) < live)
    }

    /// Free slots of live workers, by slot type.
    fn free_slots(&self, now: Instant, live: Duration) -> HashMap<String, i64> {
        let mut free: HashMap<String, i64> = HashMap::new();
        for w in self
            .workers
            .values()
            .filter(|w| Self::worker_is_live(w, now, live))
        {
            for (k, lim) in &w.slot_limits {
                let left = i64::from(*lim) - i64::from(w.slots_used.get(k).copied().unwrap_or(0));
                *free.entry(k.clone()).or_default() += left.max(0);
            }
        }
        free
    }

    /// Assigns queued tasks to live workers with free slots: lanes highest priority first,
    /// each lane in arrival order (see `queue.rs`).
    ///
    /// The pass ends as soon as no live worker has a free slot left, and a lane whose slot type
    /// has no free slot anywhere (nor a default slot to fall back on) is skipped without being
    /// walked: a completion costs one assignment, not a walk over every queued task (what made
    /// throughput fall as runs accumulated).
    pub(crate) fn assign(&mut self, now: Instant, live: Duration) {
        let over_assign = self.switches.over_assign;
        let mut free = self.free_slots(now, live);
        let mut total: i64 = free.values().sum();
        // Nothing to do unless some live worker has a free slot: skip the queue scan.
        if self.queue.is_empty() || (total == 0 && !over_assign) {
            return;
        }
        for lane in self.queue.lane_keys() {
            if total <= 0 && !over_assign {
                break;
            }
            let has_room =
                |free: &HashMap<String, i64>, t: &str| free.get(t).is_some_and(|n| *n > 0);
            if !over_assign && !has_room(&free, &lane.slot_type) && !has_room(&free, "default") {
                continue;
            }
            // The lane is walked in place: only what is examined moves, so a pass that assigns
            // one task costs one task, however long the lane (no copy of the rest).
            let mut waiting = self.queue.take_lane(&lane);
            let mut passed_over = Vec::new();
            while let Some(tid) = waiting.pop_front() {
                let room = has_room(&free, &lane.slot_type) || has_room(&free, "default");
                if (total <= 0 || !room) && !over_assign {
                    // No slot left for this lane: the rest waits in order, unexamined.
                    waiting.push_front(tid);
                    break;
                }
                match self.try_assign(&tid, now, live, over_assign) {
                    Offer::Skip => {}
                    Offer::Wait => passed_over.push(tid),
                    Offer::Sent(slot) => {
                        if let Some(n) = free.get_mut(&slot) {
                            *n -= 1;
                        }
                        total -= 1;
                    }
                }
            }
            // What was passed over keeps its place ahead of the unexamined rest.
            for tid in passed_over.into_iter().rev() {
                waiting.push_front(tid);
            }
            self.queue.put_lane(lane, waiting);
        }
    }

    /// Offers one queued task to a live worker with a free slot of its type.
    fn try_assign(&mut self, tid: &str, now: Instant, live: Duration, over_assign: bool) -> Offer {
        let Some(task) = self.tasks.get(tid) else {
            return Offer::Skip;
        };
        if task.status() != Status::Queued {
            return Offer::Skip;
        }
        // A retry's backoff is a timer: under the polled-timers switch it ends at a poll.
        let timers_at = self
            .switches
            .poll_timers
            .map_or(Some(now), |p| p.last(now))
            .unwrap_or(now);
        if task.not_before.is_some_and(|t| t > timers_at) {
            return Offer::Wait;
        }
        let action = task.action.clone();
        let wanted = task.slot_type.clone();
        let wish = task.wish.clone();
        let uses = self
            .tasks
            .get(tid)
            .map(|t| t.rate_limits.clone())
            .unwrap_or_default();
        let wall = self.clock.system_now();
        match self.rate_limits.allow(&uses, now, wall) {
            crate::sched::rate_limits::Admission::Now => {}
            crate::sched::rate_limits::Admission::Later => return Offer::Wait,
            crate::sched::rate_limits::Admission::Never(why) => {
                self.fail_attempt(tid, why, true);
                return Offer::Skip;
            }
        }
        if let Some(rule) = self.tasks.get(tid).and_then(|t| t.batch.clone()) {
            self.buffer_for_batch(tid, &rule, now);
            return Offer::Skip; // out of the queue, into its buffer (batches.rs invariant 3)
        }
        // The best-ranked live worker with the action and a free slot (placement.rs); ties go
        // to the one with the fewest assignments.
        let chosen = self
            .workers
            .values()
            .filter_map(|w| {
                if !w.actions.contains(&action) || !Self::worker_is_live(w, now, live) {
                    return None;
                }
                let rank = crate::sched::placement::rank(&wish, &w.id, &w.labels)?;
                let slot = if w.slot_limits.contains_key(&wanted) {
                    wanted.clone()
                } else {
                    "default".to_string()
                };
                let limit = w.slot_limits.get(&slot).copied().unwrap_or(0);
                let used = w.slots_used.get(&slot).copied().unwrap_or(0);
                (used < limit || over_assign).then(|| (rank, w.assignments, w.id.clone(), slot))
            })
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)))
            .map(|(_, _, id, slot)| (id, slot));
        let Some((wid, slot)) = chosen else {
            return Offer::Wait;
        };
        let mut action_msg = self.assigned_action(tid, proto::ActionType::StartStepRun);
        if let Some(m) = &mut self.switches.mutate_actions {
            (m.f)(&mut action_msg);
            m.remaining -= 1;
            if m.remaining == 0 {
                self.switches.mutate_actions = None;
            }
        }
        let Some(w) = self.workers.get_mut(&wid) else {
            return Offer::Wait;
        };
        let sent = if self.switches.lose_sends > 0 {
            // Fault injection: recorded as sent on the newest stream, never written to it.
            self.switches.lose_sends -= 1;
            w.sessions.last().map(|s| s.id)
        } else {
            w.sessions
                .iter()
                .rev()
                .find(|s| s.tx.try_send(Ok(action_msg.clone())).is_ok())
                .map(|s| s.id)
        };
        let Some(session) = sent else {
            return Offer::Wait;
        };
        if self.switches.late_duplicates > 0 {
            // Fault injection: the same attempt offered again a while later, after the worker
            // has most likely finished it (a re-offer racing the worker's final event).
            self.switches.late_duplicates -= 1;
            if let Some(s) = w.sessions.iter().find(|s| s.id == session) {
                let (tx, msg) = (s.tx.clone(), action_msg.clone());
                let sent = self.counters.late_duplicates_sent.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(LATE_DUPLICATE_AFTER).await;
                    if tx.send(Ok(msg)).await.is_ok() {
                        sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        }
        if self.switches.duplicate_assignments > 0 {
            // Fault injection: the same attempt offered twice on the same stream.
            self.switches.duplicate_assignments -= 1;
            if let Some(s) = w.sessions.iter().find(|s| s.id == session)
                && s.tx.try_send(Ok(action_msg.clone())).is_ok()
            {
                self.counters.duplicated_assignments += 1;
            }
        }
        *w.slots_used.entry(slot.clone()).or_default() += 1;
        w.assignments += 1;
        if let Some(t) = self.tasks.get(tid) {
            self.rate_limits.take(&t.rate_limits, now);
        }
        let run_id = {
            let Some(t) = self.tasks.get_mut(tid) else {
                return Offer::Skip;
            };
            t.assign(wid, session, slot.clone(), true);
            t.deadline = Some(now + t.timeout);
            t.started_at = Some(self.clock.system_now());
            let run = t.run_id.clone();
            self.deadlines.add(now + t.timeout, tid);
            run
        };
        let now = self.clock.system_now();
        if let Some(r) = self.runs.get_mut(&run_id) {
            r.start(now);
        }
        Offer::Sent(slot)
    }

    /// A task's stored input, as the real engine keeps it and serves it (in a START's payload and
    /// in REST reads): `input`, `parents`, `triggers`, `triggered_by`, `user_data`, `overrides`,
    /// and `step_run_errors` for an on-failure task.
    pub(crate) fn task_input(&self, tid: &str) -> Value {
        let Some(t) = self.tasks.get(tid) else {
            return serde_json::json!({});
        };
        let Some(run) = self.runs.get(&t.run_id) else {
            return serde_json::json!({});
        };
        // Like the real engine, `parents` carries the output of every task of the run that has
        // completed (a skipped task's is `{"skipped": true}`), not only the declared parents.
        let mut parent_outputs = serde_json::Map::new();
        for pt in run.tasks.iter().filter_map(|id| self.tasks.get(id)) {
            let declared = t.parents.contains(&pt.readable_id);
            if pt.id == t.id || !(pt.status() == Status::Completed || declared) {
                continue;
            }
            let out = pt
                .output
                .as_deref()
                .and_then(|o| serde_json::from_str(o).ok())
                .unwrap_or(Value::Null);
            parent_outputs.insert(pt.readable_id.clone(), out);
        }
        let mut triggers = t.triggers.clone();
        triggers.insert(
            "filter_payload".into(),
            run.filter_payload.clone().unwrap_or(Value::Null),
        );
        let mut p = serde_json::json!({
            "input": run.input,
            "parents": parent_outputs,
            "triggers": triggers,
            "triggered_by": "manual",
            "user_data": null,
            "overrides": null,
        });
        if t.on_failure
            && let Some((name, error)) = &run.first_failure
        {
            p["step_run_errors"] = serde_json::json!({ name: error });
        }
        p
    }

    /// The AssignedAction for a task's current attempt (START increments the invocation count
    /// of durable tasks).
    pub(crate) fn assigned_action(
        &mut self,
        tid: &str,
        kind: proto::ActionType,
    ) -> proto::AssignedAction {
        let run_id = self.tasks[tid].run_id.clone();
        if kind == proto::ActionType::StartStepRun
            && let Some(t) = self.tasks.get_mut(tid)
            && t.is_durable
        {
            if !std::mem::take(&mut t.reoffered) {
                t.invocation_count += 1;
            }
            t.evicted = false;
        }
        let payload = if kind == proto::ActionType::StartStepRun {
            self.task_input(tid).to_string()
        } else {
            String::new()
        };
        let t = &self.tasks[tid];
        let run = &self.runs[&run_id];
        let wf = self.workflows.get(&run.workflow_name);
        proto::AssignedAction {
            tenant_id: String::new(),
            workflow_run_id: run.id.clone(),
            get_group_key_run_id: String::new(),
            job_id: String::new(),
            job_name: run.workflow_name.clone(),
            job_run_id: run.id.clone(),
            task_id: t.id.clone(),
            task_run_external_id: t.id.clone(),
            action_id: t.action.clone(),
            action_type: kind as i32,
            action_payload: payload,
            task_name: t.readable_id.clone(),
            retry_count: t.retry_count,
            additional_metadata: Some(Value::Object(run.additional_metadata.clone()).to_string()),
            child_workflow_index: run.child_index,
            child_workflow_key: run.child_key.clone(),
            parent_workflow_run_id: run.parent_task_id.clone(),
            priority: run.priority,
            workflow_id: wf.map(|w| w.id.clone()),
            workflow_version_id: wf.map(|w| w.version_id.clone()),
            durable_task_invocation_count: t.is_durable.then_some(t.invocation_count),
            triggering_event_external_id: run.triggering_event.as_ref().map(|e| e.0.clone()),
            triggering_event_key: run.triggering_event.as_ref().map(|e| e.1.clone()),
            batch_id: None,
            batch_size: None,
            batch_index: None,
            batch_start_payload: None,
            batch_key: None,
        }
    }

    /// Returns the task's slot to its worker (a batch member's is its batch's, given back with
    /// its last member: `batches.rs` invariant 2).
    pub(crate) fn free_slot(&mut self, tid: &str) {
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        if let Some(batch) = t.batch_id.take() {
            if let Some(w) = self
                .batches
                .member_done(&batch, tid)
                .and_then(|w| self.workers.get_mut(&w))
                && let Some(u) = w.slots_used.get_mut("default")
            {
                *u = (*u - 1).max(0);
            }
            return;
        }
        if !t.slot_held {
            return;
        }
        t.slot_held = false;
        if let Some(w) = t.worker_id.as_ref().and_then(|w| self.workers.get_mut(w))
            && let Some(u) = w.slots_used.get_mut(&t.slot_type)
        {
            *u = (*u - 1).max(0);
        }
    }

    /// Sends `msg` (a cancellation) to the worker of `tid`'s attempt, unless `ReleaseSlot` cut
    /// that link (see [`Task::unlinked`]).
    pub(crate) fn send_to_worker(&mut self, tid: &str, msg: proto::AssignedAction) {
        let Some(wid) = self
            .tasks
            .get(tid)
            .filter(|t| !t.unlinked)
            .and_then(|t| t.worker_id.clone())
        else {
            return;
        };
        if let Some(w) = self.workers.get(&wid) {
            // A cancel to a disconnected worker is dropped, as the engine does.
            let _ = w
                .sessions
                .iter()
                .rev()
                .any(|s| s.tx.try_send(Ok(msg.clone())).is_ok());
        }
    }

    pub(crate) fn reap_silent_workers(&mut self, now: Instant, after: Duration) {
        let silent: HashSet<String> = self
            .workers
            .values()
            .filter(|w| {
                !w.sessions.iter().any(|s| s.legacy)
                    && now.saturating_duration_since(w.last_heartbeat) >= after
            })
            .map(|w| w.id.clone())
            .collect();
        if silent.is_empty() {
            return;
        }
        let stuck: Vec<String> = self
            .tasks
            .values()
            .filter(|t| {
                t.status() == Status::Running
                    && !t.evicted
                    && !t.unlinked
                    && t.worker_id.as_ref().is_some_and(|w| silent.contains(w))
            })
            .map(|t| t.id.clone())
            .collect();
        for tid in stuck {
            self.requeue_internal(&tid, "Worker did not send a heartbeat for 30 seconds");
        }
    }

    /// Expires running attempts whose deadline passed. The deadlines sit in a min-heap, checked
    /// against the task when popped (a stale entry, for a finished or refreshed attempt, is
    /// dropped), so a tick costs O(expired · log n), not a scan of every task.
    pub(crate) fn expire_timeouts(&mut self, now: Instant) {
        let mut expired = Vec::new();
        while let Some((at, tid)) = self.deadlines.pop_due(now) {
            // An evicted task times out too: the real engine fails an evicted durable task at
            // its execution timeout (the Python SDK's `test_eviction_execution_timeout`).
            if self
                .tasks
                .get(&tid)
                .is_some_and(|t| t.status() == Status::Running && t.deadline == Some(at))
            {
                expired.push(tid);
            }
        }
        // A batch member's timeout fails its whole batch, as the real engine does.
        let mut failing: Vec<(String, bool)> = Vec::new();
        for tid in expired {
            match self.tasks.get(&tid).and_then(|t| t.batch_id.clone()) {
                Some(batch) => {
                    for member in self.batches.members(&batch) {
                        if !failing.iter().any(|(t, _)| t == &member) {
                            failing.push((member, true));
                        }
                    }
                }
                None => failing.push((tid, false)),
            }
        }
        for (tid, batched) in failing {
            if self
                .tasks
                .get(&tid)
                .is_none_or(|t| t.status() != Status::Running)
            {
                continue;
            }
            let msg = self.assigned_action(&tid, proto::ActionType::CancelStepRun);
            self.send_to_worker(&tid, msg);
            // The real engine's words, quoting the timeout as registered.
            let timeout = &self.tasks[&tid].timeout_text;
            let why = if batched {
                format!("Task failed due to batch timeout, exceeded timeout of {timeout}")
            } else {
                format!("Task exceeded timeout of {timeout}")
            };
            // The real engine's TIMED_OUT event says the timeout as registered.
            let message = format!("Task exceeded timeout of {timeout}");
            self.fail_attempt_as_engine(&tid, why, false, &message);
        }
    }
}

impl State {
    /// Puts queued attempt `tid` of a batch task in its buffer, under its batch key; a key that
    /// cannot be read fails the task alone (`batches.rs` invariant 4). Its rate-limit units are
    /// taken here, as the real engine takes them before its batch queue.
    fn buffer_for_batch(
        &mut self,
        tid: &str,
        rule: &crate::sched::batches::BatchRule,
        now: Instant,
    ) {
        let parents = self.task_input(tid)["parents"].clone();
        let Some(t) = self.tasks.get(tid) else {
            return;
        };
        let Some(run) = self.runs.get(&t.run_id) else {
            return;
        };
        match rule.key_of(&run.input, &run.additional_metadata, &run.id, &parents) {
            Err(why) => self.fail_attempt(tid, why, true),
            Ok(key) => {
                let action = t.action.clone();
                let size = crate::sched::batches::payload_bytes(&run.input);
                self.rate_limits.take(&t.rate_limits, now);
                self.batches.buffer(&action, &key, rule, (tid, size), now);
            }
        }
    }

    /// Starts the batches that are due (`batches.rs` invariants 1-3): each on a live worker
    /// with the step's action and a free `default` slot, as one `START_BATCH` assignment.
    pub(crate) fn flush_batches(&mut self, now: Instant, live: Duration, tenant: &str) {
        let mut blocked: Vec<crate::sched::batches::Line> = Vec::new();
        while let Some((line, why, n)) = self
            .batches
            .due(now)
            .into_iter()
            .find(|(l, _, _)| !blocked.contains(l))
        {
            let worker = self.batch_worker(&line.0, now, live);
            let (Some(wid), true) = (worker, self.batches.has_room(&line)) else {
                blocked.push(line);
                continue;
            };
            let tasks = &self.tasks;
            let taken = self.batches.take(&line, (now, n), |m| {
                tasks
                    .get(m)
                    .is_some_and(|t| t.status() == Status::Queued && t.batch_id.is_none())
            });
            if taken.is_empty() {
                continue;
            }
            let members: Vec<String> = taken.iter().map(|(m, _)| m.clone()).collect();
            let batch = crate::parse::new_id();
            let msg = self.start_batch_action(&batch, &line, &members, why, tenant);
            let sent = self.workers.get(&wid).and_then(|w| {
                w.sessions
                    .iter()
                    .rev()
                    .find(|s| s.tx.try_send(Ok(msg.clone())).is_ok())
                    .map(|s| s.id)
            });
            let Some(session) = sent else {
                self.batches.put_back(&line, taken);
                blocked.push(line);
                continue;
            };
            if let Some(w) = self.workers.get_mut(&wid) {
                *w.slots_used.entry("default".into()).or_default() += 1;
                w.assignments += 1;
            }
            self.batches.started(&batch, line, &wid, &members);
            let started = self.clock.system_now();
            for tid in &members {
                let Some(t) = self.tasks.get_mut(tid) else {
                    continue;
                };
                t.assign(wid.clone(), session, "default".into(), false);
                t.batch_id = Some(batch.clone());
                t.deadline = Some(now + t.timeout);
                t.started_at = Some(started);
                let run = t.run_id.clone();
                self.deadlines.add(now + t.timeout, tid);
                if let Some(r) = self.runs.get_mut(&run) {
                    r.start(started);
                }
            }
        }
    }

    /// A live worker with `action` and a free `default` slot, the one with the fewest
    /// assignments first.
    fn batch_worker(&self, action: &str, now: Instant, live: Duration) -> Option<String> {
        self.workers
            .values()
            .filter(|w| w.actions.contains(action) && Self::worker_is_live(w, now, live))
            .filter(|w| {
                let limit = w.slot_limits.get("default").copied().unwrap_or(0);
                w.slots_used.get("default").copied().unwrap_or(0) < limit
            })
            .min_by(|a, b| a.assignments.cmp(&b.assignments).then(a.id.cmp(&b.id)))
            .map(|w| w.id.clone())
    }

    /// The `START_BATCH` assignment of `members`: its payload maps each member's task id to its
    /// run and its input, as the real engine's dispatcher sends it.
    fn start_batch_action(
        &self,
        batch: &str,
        line: &crate::sched::batches::Line,
        members: &[String],
        why: crate::sched::batches::Flush,
        tenant: &str,
    ) -> proto::AssignedAction {
        let mut items = serde_json::Map::new();
        for tid in members {
            let run = self
                .tasks
                .get(tid)
                .map(|t| t.run_id.clone())
                .unwrap_or_default();
            items.insert(
                tid.clone(),
                serde_json::json!({ "workflow_run_id": run, "payload": self.task_input(tid) }),
            );
        }
        let (action, key) = line;
        proto::AssignedAction {
            tenant_id: tenant.to_string(),
            action_type: proto::ActionType::StartBatch as i32,
            action_id: action.clone(),
            action_payload: Value::Object(items).to_string(),
            batch_id: Some(batch.to_string()),
            batch_key: (!key.trim().is_empty()).then(|| key.clone()),
            batch_start_payload: Some(proto::BatchStartPayload {
                trigger_reason: why.reason().to_string(),
                trigger_time: Some(crate::parse::timestamp(self.clock.system_now())),
                expected_size: members.len() as i32,
            }),
            ..Default::default()
        }
    }
}

impl crate::hub::State {
    /// Queues task `tid` at the back of its lane (its run's priority, its slot type), or holds
    /// it when its workflow is paused (see `pause.rs`).
    pub(crate) fn enqueue(&mut self, tid: &str) {
        if self.hold_if_paused(tid, self.clock.now()) {
            return;
        }
        if let Some(t) = self.tasks.get(tid) {
            let lane = Lane::new(t.priority, &t.slot_type);
            self.queue.push_back(lane, tid.to_string());
        }
    }

    /// Queues task `tid` at the front of its lane.
    pub(crate) fn enqueue_front(&mut self, tid: &str) {
        if self.hold_if_paused(tid, self.clock.now()) {
            return;
        }
        if let Some(t) = self.tasks.get(tid) {
            let lane = Lane::new(t.priority, &t.slot_type);
            self.queue.push_front(lane, tid.to_string());
        }
    }
}
