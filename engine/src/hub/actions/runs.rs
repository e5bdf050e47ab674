//! Run lifecycle on the engine state: creation (child dedupe, idempotency keys, concurrency),
//! task completion, failure and retry, cancellation, and the end of a run.

use std::time::Duration;

use serde_json::Value;
use tonic::Status as GrpcStatus;

use crate::answers::{idempotency_collision, skipped_trigger};
use crate::hub::State;
use crate::limits::MAX_INTERNAL_RETRIES;
use crate::parse::{new_id, timestamp};
use crate::store::model::{NextAttempt, PastEnd, Run, Status, Task, TriggerOpts};
use crate::store::runs::{RESULTS_THRESHOLD, fit_results};
use hatchet_runtime::protocol::{self as proto, v1};

impl State {
    /// Creates a run and queues its root tasks, in four steps: validate (a workflow it knows),
    /// dedupe (a child already spawned at its parent's index or key; the tenant's idempotency
    /// keys), build (its metadata and its tasks), enqueue (its ready tasks, its key claimed, its
    /// subscribers and concurrency told).
    pub(crate) fn create_run(
        &mut self,
        name: &str,
        input: Value,
        meta: serde_json::Map<String, Value>,
        opts: TriggerOpts,
    ) -> Result<String, GrpcStatus> {
        let wf = self.validate_trigger(name)?;
        let child_slot = child_slot(&opts);
        if let Some(existing) = self.spawned_child(child_slot.as_ref()) {
            return Ok(existing);
        }
        let run_id = opts.run_id.clone().unwrap_or_else(new_id);
        let claim = self.idempotency_claim(&wf, &input, &meta, &run_id)?;
        let meta = self.run_metadata(meta, &opts, &run_id);
        let priority = opts
            .priority
            .or(wf.default_priority)
            .unwrap_or(crate::sched::queue::DEFAULT_PRIORITY);
        let now = self.clock.system_now();
        let built = self.build_tasks(&wf, &run_id, &input, &meta, &opts, priority, now);
        let mut run = Run::queued(run_id.clone(), name, &wf, input, meta, now);
        run.tasks = built.tasks.clone();
        run.parent_task_id = opts.parent_task.clone();
        run.child_index = opts.child_index;
        run.child_key = opts.child_key.clone();
        run.priority = priority;
        run.filter_payload = opts.filter_payload.clone();
        run.triggering_event = opts.event;
        self.runs.insert(run);
        self.enqueue_new_run(&run_id, built, claim, child_slot);
        Ok(run_id)
    }

    /// Step 1: the live workflow `name`. The real engine answers a trigger of a workflow it does
    /// not know with an id no run will have (a skipped trigger here: see
    /// `answers::skipped_trigger`).
    fn validate_trigger(&self, name: &str) -> Result<crate::store::model::Workflow, GrpcStatus> {
        self.workflows
            .live(name)
            .cloned()
            .ok_or_else(|| skipped_trigger(&format!("workflow names not found: {name}")))
    }

    /// Step 2a: the run a parent already spawned at this index or key, if any.
    fn spawned_child(&self, slot: Option<&(String, String)>) -> Option<String> {
        let (parent, key) = slot?;
        self.tasks.get(parent)?.children.get(key).cloned()
    }

    /// Step 2b: the workflow's idempotency key for this run and until when it holds, or the
    /// refusal: a live key collides; a key the expression cannot give skips the trigger
    /// (store/workflows.rs invariants 3 and 5, the tenant's keys).
    fn idempotency_claim(
        &self,
        wf: &crate::store::model::Workflow,
        input: &Value,
        meta: &serde_json::Map<String, Value>,
        run_id: &str,
    ) -> Result<Option<(String, tokio::time::Instant)>, GrpcStatus> {
        let Some(cfg) = &wf.idempotency else {
            return Ok(None);
        };
        let key =
            crate::store::workflows::idempotency_key(&cfg.expression, input, meta, run_id)
                .map_err(|why| {
                    tracing::warn!(workflow = %wf.name, %why, "skipping the trigger: no idempotency key");
                    skipped_trigger(&why)
                })?;
        let now = self.clock.now();
        let by_status = cfg.method == Some(v1::IdempotencyMethod::Status as i32);
        let tasks = &self.tasks;
        let collision = self.idempotency.holder(&key, now, by_status, |t| {
            tasks.get(t).is_none_or(|t| t.status().is_terminal())
        });
        if let Some(existing) = collision {
            return Err(idempotency_collision(&existing));
        }
        let ttl = Duration::from_millis(cfg.ttl_ms.max(0) as u64);
        let ttl = if ttl.is_zero() {
            Duration::from_secs(86_400)
        } else {
            ttl
        };
        Ok(Some((key, now + ttl)))
    }

    /// Step 3a: the run's metadata: a child inherits its parent run's (but the engine's own
    /// `hatchet__` keys) and names its parents; every run carries a `traceparent`.
    fn run_metadata(
        &self,
        mut meta: serde_json::Map<String, Value>,
        opts: &TriggerOpts,
        run_id: &str,
    ) -> serde_json::Map<String, Value> {
        if let Some(p) = &opts.parent_task
            && let Some(pt) = self.tasks.get(p)
        {
            if let Some(prun) = self.runs.get(&pt.run_id) {
                for (k, v) in &prun.additional_metadata {
                    if !k.starts_with("hatchet__") {
                        meta.entry(k.clone()).or_insert(v.clone());
                    }
                }
            }
            meta.insert(
                "hatchet__parent_workflow_run_id".into(),
                Value::String(pt.run_id.clone()),
            );
            meta.insert(
                "hatchet__parent_step_run_id".into(),
                Value::String(p.clone()),
            );
        }
        crate::traces::spans::ensure_traceparent(&mut meta, run_id);
        meta
    }

    /// Step 3b: the run's tasks, one per definition (a one-task run's task takes the run's
    /// id), each QUEUED or, behind parents, conditions or as the on-failure task, PENDING.
    #[allow(clippy::too_many_arguments)]
    fn build_tasks(
        &mut self,
        wf: &crate::store::model::Workflow,
        run_id: &str,
        input: &Value,
        meta: &serde_json::Map<String, Value>,
        opts: &TriggerOpts,
        priority: i32,
        now: std::time::SystemTime,
    ) -> BuiltTasks {
        let single = wf.tasks.len() == 1;
        let mut built = BuiltTasks::default();
        for def in &wf.tasks {
            let id = if single { run_id.to_string() } else { new_id() };
            let slot_type = def.slot_requests.keys().next().cloned().unwrap_or_else(|| {
                if def.is_durable {
                    "durable".into()
                } else {
                    "default".into()
                }
            });
            let matcher = if def.on_failure {
                None
            } else {
                crate::dag::matches::Matcher::new(&def.parents, def.conditions.as_ref())
            };
            let status = if def.on_failure || matcher.is_some() {
                Status::Pending
            } else {
                Status::Queued
            };
            let mut task = Task::created(def, id.clone(), run_id.to_string(), status, now);
            task.slot_type = slot_type;
            task.rate_limits = crate::sched::rate_limits::uses_of(&def.rate_limits, input, meta);
            task.priority = priority;
            task.wish = crate::sched::placement::Wish {
                sticky: wf.sticky,
                desired_worker: (def.parents.is_empty() && !def.on_failure)
                    .then(|| opts.desired_worker.clone())
                    .flatten(),
                labels: if opts.desired_labels.is_empty() {
                    def.worker_labels.clone()
                } else {
                    opts.desired_labels.clone()
                },
            };
            self.tasks.insert(id.clone(), task);
            self.start_matcher(&id, matcher);
            if def.parents.is_empty() && !def.on_failure {
                built.roots.push(id.clone());
            }
            if status == Status::Queued {
                built.ready.push(id.clone());
            }
            built.tasks.push(id);
        }
        built
    }

    /// Step 4: a new run's ready tasks queued (once the run exists: a paused workflow's tasks
    /// are held by their run's workflow), its idempotency key claimed by its roots, its parent's
    /// child slot taken, its metadata subscribers and concurrency group told, and STARTED
    /// (task creation) emitted for each task still queued.
    fn enqueue_new_run(
        &mut self,
        run_id: &str,
        built: BuiltTasks,
        claim: Option<(String, tokio::time::Instant)>,
        child_slot: Option<(String, String)>,
    ) {
        for tid in &built.ready {
            self.enqueue(tid);
        }
        if let Some((key, until)) = claim {
            self.idempotency.claim(key, run_id, until, built.roots);
        }
        if let Some((p, k)) = child_slot
            && let Some(pt) = self.tasks.get_mut(&p)
        {
            pt.children.insert(k, run_id.to_string());
        }
        self.track_metadata_subscribers(run_id);
        self.apply_concurrency(run_id);
        for tid in &built.tasks {
            if self
                .tasks
                .get(tid)
                .is_some_and(|t| t.status() == Status::Queued)
            {
                self.emit_task_event(tid, proto::ResourceEventType::Started, String::new());
            }
        }
    }

    /// Completes every queued task of `workflow`'s runs with `{}` (a bench and test control:
    /// finishes runs without a worker). Returns how many tasks it completed.
    pub(crate) fn complete_all_queued(&mut self, workflow: &str) -> usize {
        let ids: Vec<String> = self
            .tasks
            .values()
            .filter(|t| {
                t.status() == Status::Queued
                    && self
                        .runs
                        .get(&t.run_id)
                        .is_some_and(|r| r.workflow_name == workflow)
            })
            .map(|t| t.id.clone())
            .collect();
        for id in &ids {
            self.complete_task(id, "{}".to_string());
        }
        let tasks = &self.tasks;
        self.queue
            .retain(|id| tasks.get(id).is_some_and(|t| t.status() == Status::Queued));
        ids.len()
    }

    pub(crate) fn complete_task(&mut self, tid: &str, output: String) {
        self.free_slot(tid);
        let run_id = {
            let Some(t) = self.tasks.get_mut(tid) else {
                return;
            };
            t.complete(output.clone(), self.clock.system_now());
            t.run_id.clone()
        };
        if self.switches.lose_read_model_ends > 0 {
            self.switches.lose_read_model_ends -= 1;
            self.switches.read_model_lost.insert(tid.to_string());
        }
        self.emit_task_event(tid, proto::ResourceEventType::Completed, output);
        self.durable_task_finished(tid);
        if crate::faults::take_one(&self.switches.lose_completion_followups) {
            return;
        }
        // Its dependents decide (queued, skipped or cancelled: matches.rs).
        self.settle_dependents(tid);
        self.maybe_finish_run(&run_id);
    }

    /// A completion of attempt `tid` that arrives after its cancel, which could not reach the
    /// worker because the attempt had released its slot ([`Task::unlinked`]): the real engine
    /// records it, so the task reads COMPLETED with its output from then on, and so does its
    /// run once every task does. Its run's stream event already went out, with the cancel, and
    /// nothing else the cancel did (dependents, concurrency) is undone.
    pub(crate) fn complete_late(&mut self, tid: &str, output: String) {
        let run_id = {
            let Some(t) = self.tasks.get_mut(tid) else {
                return;
            };
            t.complete_late(output);
            t.run_id.clone()
        };
        let Some(run) = self.runs.get(&run_id) else {
            return;
        };
        let all_done = run.tasks.iter().all(|t| {
            self.tasks
                .get(t)
                .is_some_and(|t| t.status() == Status::Completed)
        });
        if all_done && let Some(r) = self.runs.get_mut(&run_id) {
            r.complete_late();
        }
    }

    /// Fails the current attempt: retried while retries remain (at once, or at the poll after
    /// its backoff), else final. As [`State::fail_attempt`], for an end the engine decides (a
    /// timeout, the reassignment limit): `message` is what the real engine's event says, the
    /// attempt span's status.
    pub(crate) fn fail_attempt_as_engine(
        &mut self,
        tid: &str,
        error: String,
        no_retry: bool,
        message: &str,
    ) {
        if let Some(t) = self.tasks.get_mut(tid) {
            t.end_message = Some(message.to_string());
        }
        self.fail_attempt(tid, error, no_retry);
    }

    pub(crate) fn fail_attempt(&mut self, tid: &str, error: String, no_retry: bool) {
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        t.deadline = None;
        if !no_retry && t.user_retries_used < t.retries {
            // The attempt's trace outlives it (its spans are made when the trace is read).
            t.keep_attempt(
                PastEnd::Failed,
                self.clock.system_now(),
                NextAttempt::Retry(t.user_retries_used + 1),
            );
            if let Some(a) = t.past_attempts.last_mut() {
                a.error = Some(error.clone());
            }
            t.user_retries_used += 1;
            t.retry_count += 1;
            // Without a backoff the real engine queues the retry in the same statement that
            // records the failure (its `v1_task_update_function` trigger inserts straight into
            // the queue): at once, no timer. With one, the retry waits in its retry queue,
            // which the task controller polls: a timer (`not_before`), read at the polls.
            let factor = f64::from(t.backoff_factor.unwrap_or(0.0));
            let not_before = (factor > 0.0).then(|| {
                let max = f64::from(t.backoff_max_seconds.unwrap_or(60).max(1));
                self.clock.now()
                    + Duration::from_secs_f64(factor.powi(t.user_retries_used).min(max))
            });
            t.retry(not_before);
            self.enqueue(tid);
            return;
        }
        t.fail(error.clone(), self.clock.system_now());
        let run_id = t.run_id.clone();
        let first = (!t.on_failure).then(|| (t.readable_id.clone(), error.clone()));
        if let Some(r) = self.runs.get_mut(&run_id)
            && r.first_failure.is_none()
        {
            r.first_failure = first;
        }
        self.emit_task_event(tid, proto::ResourceEventType::Failed, error);
        self.durable_task_finished(tid);
        self.settle_dependents(tid);
        self.queue_on_failure(&run_id);
        self.maybe_finish_run(&run_id);
    }

    /// Queues the run's pending `on_failure` task once a task has failed for good.
    fn queue_on_failure(&mut self, run_id: &str) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        if run.first_failure.is_none() {
            return;
        }
        let waiting: Vec<String> = run
            .tasks
            .iter()
            .filter(|id| {
                self.tasks
                    .get(*id)
                    .is_some_and(|t| t.on_failure && t.status() == Status::Pending)
            })
            .cloned()
            .collect();
        for id in waiting {
            if let Some(t) = self.tasks.get_mut(&id) {
                t.queue();
            }
            self.enqueue(&id);
            self.emit_task_event(&id, proto::ResourceEventType::Started, String::new());
        }
    }

    /// Skips the run's pending `on_failure` task once every other task completed or was
    /// cancelled without a failure: it completes with `{"skipped": true}`, as the real engine
    /// reports it (the run cannot finish before).
    fn skip_on_failure_if_settled(&mut self, run_id: &str) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        let (hook, others): (Vec<&Task>, Vec<&Task>) = run
            .tasks
            .iter()
            .filter_map(|id| self.tasks.get(id))
            .partition(|t| t.on_failure);
        let settled = others
            .iter()
            .all(|t| matches!(t.status(), Status::Completed | Status::Cancelled));
        let pending: Vec<String> = hook
            .iter()
            .filter(|t| t.status() == Status::Pending)
            .map(|t| t.id.clone())
            .collect();
        if !settled || pending.is_empty() {
            return;
        }
        const SKIPPED: &str = r#"{"skipped":true}"#;
        for id in pending {
            let now = self.clock.system_now();
            if let Some(t) = self.tasks.get_mut(&id) {
                t.skip(now, SKIPPED);
            }
            self.emit_task_event(&id, proto::ResourceEventType::Completed, SKIPPED.into());
        }
    }

    /// Requeues an attempt for an internal reason (send failure, silent worker). Does not use the
    /// task's retries; capped by [`MAX_INTERNAL_RETRIES`].
    pub(crate) fn requeue_internal(&mut self, tid: &str, reason: &str) {
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        let internal = t.retry_count - t.user_retries_used;
        if internal >= MAX_INTERNAL_RETRIES {
            self.fail_attempt_as_engine(
                tid,
                format!("Task reached its maximum reassignment count: {reason}"),
                true,
                "Task reached its maximum reassignment count",
            );
            return;
        }
        t.keep_attempt(
            PastEnd::Requeued,
            self.clock.system_now(),
            NextAttempt::Reassign,
        );
        t.retry_count += 1;
        t.reassign();
        self.enqueue(tid);
    }

    /// Puts a running attempt back in the queue as the same attempt (its assignment may never
    /// have reached the worker).
    pub(crate) fn offer_again(&mut self, tid: &str) {
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        // Same attempt, same invocation: the next assignment does not count the invocation up,
        // so a worker that did get the first copy recognises the second, and its durable calls
        // for that invocation are accepted while the copy waits in the queue.
        t.offer_again();
        self.enqueue_front(tid);
    }

    /// Cancels a task (and fails its run's pending tasks).
    pub(crate) fn cancel_task(&mut self, tid: &str, why: &str) {
        let Some(t) = self.tasks.get(tid) else { return };
        if t.status().is_terminal() {
            return;
        }
        if t.status() == Status::Running {
            let msg = self.assigned_action(tid, proto::ActionType::CancelStepRun);
            self.send_to_worker(tid, msg);
        }
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        t.cancel(self.clock.system_now());
        let run_id = t.run_id.clone();
        self.emit_task_event(tid, proto::ResourceEventType::Cancelled, why.to_string());
        self.durable_task_finished(tid);
        self.settle_dependents(tid);
        self.maybe_finish_run(&run_id);
    }

    pub(crate) fn maybe_finish_run(&mut self, run_id: &str) {
        self.skip_on_failure_if_settled(run_id);
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        let statuses: Vec<Status> = run
            .tasks
            .iter()
            .filter_map(|t| self.tasks.get(t))
            .map(|t| t.status())
            .collect();
        if !statuses.iter().all(|s| s.is_terminal()) || run.status().is_terminal() {
            return;
        }
        let status = if statuses.contains(&Status::Failed) {
            Status::Failed
        } else if statuses.contains(&Status::Cancelled) {
            Status::Cancelled
        } else {
            Status::Completed
        };
        let now = self.clock.system_now();
        if let Some(r) = self.runs.get_mut(run_id) {
            r.end(status, now);
        }
        self.end_to_publish(run_id);
        let kind = match status {
            Status::Failed => proto::ResourceEventType::Failed,
            Status::Cancelled => proto::ResourceEventType::Cancelled,
            _ => proto::ResourceEventType::Completed,
        };
        self.emit_run_finished(run_id, kind);
        self.durable_child_finished(run_id);
        self.release_concurrency(run_id);
    }

    /// The `WorkflowRunEvent` of a finished run.
    pub(crate) fn run_event(&self, run: &Run) -> proto::WorkflowRunEvent {
        let results = run
            .tasks
            .iter()
            .filter_map(|id| self.tasks.get(id))
            .map(|t| proto::StepRunResult {
                task_run_external_id: t.id.clone(),
                task_name: t.readable_id.clone(),
                job_run_id: t.id.clone(),
                error: t.error.clone(),
                output: if t.status() == Status::Completed {
                    t.output.clone()
                } else {
                    None
                },
            })
            .collect();
        proto::WorkflowRunEvent {
            workflow_run_id: run.id.clone(),
            event_type: proto::WorkflowRunEventType::Finished as i32,
            event_timestamp: Some(timestamp(
                run.finished_at.unwrap_or_else(|| self.clock.system_now()),
            )),
            results: fit_results(results, RESULTS_THRESHOLD),
        }
    }
}

/// The tasks a new run was built with (`State::build_tasks`): all, in definition order; those
/// ready to queue; its roots (which carry its idempotency key).
#[derive(Default)]
struct BuiltTasks {
    tasks: Vec<String>,
    ready: Vec<String>,
    roots: Vec<String>,
}

/// Where a child run sits under its parent task (`key:…` or `index:…`), for the dedupe.
fn child_slot(opts: &TriggerOpts) -> Option<(String, String)> {
    match (&opts.parent_task, &opts.child_key, opts.child_index) {
        (Some(p), Some(k), _) => Some((p.clone(), format!("key:{k}"))),
        (Some(p), None, Some(i)) => Some((p.clone(), format!("index:{i}"))),
        _ => None,
    }
}
