//! The engine's state and its entry points (registration, triggering, worker events, results,
//! the scheduler's pass). The rules on the state live beside it: `runs.rs` (run lifecycle),
//! `assign.rs` (assignment, slots, timeouts), `subscribers.rs` (event streams), `durable.rs`,
//! `concurrency.rs`, `schedules.rs`.
//!
//! # Invariants
//!
//! 1. All state sits behind one mutex; nothing awaits while holding it. Streams are fed with
//!    non-blocking sends (unbounded for results and events, `try_send` for assignments).
//! 2. A task attempt is keyed by `(task id, retry_count)`. An event for another attempt is
//!    ignored, and a terminal task never changes again (a late STARTED cannot downgrade it).
//! 3. A task is assigned only to a live worker (an open listener session and a heartbeat younger
//!    than [`LIVE_HEARTBEAT`], or a legacy `Listen` stream) with a free slot of its type.
//! 4. Every subscribed run is delivered once per subscription request, including runs that
//!    finished before the request arrived.
//! 5. Time is `tokio::time` (scheduling) and `SystemTime` (timestamps only), so tests can pause it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tonic::Status as GrpcStatus;

use crate::durable::DurableState;
use crate::rules::*;
use crate::store::model::*;
use crate::store::subscriptions::EventFilter;
use hatchet_runtime::protocol::{self as proto, v1};

/// A run or event priority must be 1–3.
/// A priority outside 1–3, refused in the real engine's words (`prefix`: a trigger's answer
/// starts "Invalid request: ", an event's does not).
fn check_priority(p: Option<i32>, prefix: &str) -> Result<(), GrpcStatus> {
    match p {
        Some(p) if !crate::sched::queue::PRIORITY_RANGE.contains(&p) => {
            Err(GrpcStatus::invalid_argument(format!(
                "{prefix}priority must be between 1 and 3, got {p}"
            )))
        }
        _ => Ok(()),
    }
}

/// What a trigger's priority is refused with first.
const TRIGGER: &str = "Invalid request: ";

/// An event's key, payload, metadata and priority, checked; returns the decoded payload and
/// metadata.
fn check_event(
    req: &proto::PushEventRequest,
) -> Result<(Value, serde_json::Map<String, Value>), GrpcStatus> {
    // An empty key is accepted, as the real engine accepts it (no workflow listens for it).
    check_priority(req.priority, "")?;
    let payload = parse_json("payload", &req.payload)?;
    let meta = parse_metadata(req.additional_metadata.as_deref())?;
    Ok((payload, meta))
}

/// Why Go's `uuid.Parse` refuses `s` (the real engine quotes it): the lengths it takes are 36,
/// 38 (braced), 45 (`urn:uuid:`) and 32 (bare hex); `None` when it would take `s`.
fn go_uuid_error(s: &str) -> Option<String> {
    if uuid::Uuid::parse_str(s).is_ok() {
        return None;
    }
    Some(match s.len() {
        32 | 36 | 38 | 45 => "invalid UUID format".to_string(),
        n => format!("invalid UUID length: {n}"),
    })
}

/// A worker id the engine does not know, in the real engine's words.
fn unknown_worker(id: &str) -> GrpcStatus {
    GrpcStatus::not_found(format!("worker not found: {id}"))
}

/// A task run id the engine does not know, in the real engine's words.
fn unknown_task_run(id: &str) -> GrpcStatus {
    GrpcStatus::not_found(format!("task run not found: {id}"))
}

fn check_uuid(field: &str, s: &str) -> Result<(), GrpcStatus> {
    uuid::Uuid::parse_str(s)
        .map(|_| ())
        .map_err(|_| GrpcStatus::invalid_argument(format!("{field} is not a UUID")))
}

/// Everything the engine knows.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Every workflow by name (see `store/workflows.rs`).
    pub workflows: crate::store::workflows::Workflows,
    /// Every run, in creation order (see `store/table.rs`).
    pub runs: crate::store::table::Runs,
    pub tasks: HashMap<String, Task>,
    pub queue: crate::sched::queue::TaskQueue,
    pub workers: HashMap<String, Worker>,
    /// Batch tasks' buffers and running batches (see `sched/batches.rs`).
    pub batches: crate::sched::batches::Batches,
    /// Open run and event subscriptions (see `store/subscriptions.rs`).
    pub subscriptions: crate::store::subscriptions::Subscriptions,
    /// Run ends the run streams will hear of at the next status poll (see
    /// `store/readable.rs`).
    pub published: crate::store::model::Published,
    /// Pushed events (see `store/events.rs`).
    pub events: crate::store::events::EventLog,
    /// Claimed idempotency keys (see `store/workflows.rs`).
    pub idempotency: crate::store::workflows::IdempotencyKeys,
    pub rate_limits: crate::sched::rate_limits::RateLimits,
    pub durable: DurableState,
    pub next_id: u64,
    /// Crons and schedules (see `time/schedules.rs`).
    pub calendar: crate::time::schedules::Calendar,
    /// Runs held by a full concurrency group, in arrival order (see `concurrency.rs`).
    pub held_runs: crate::sched::concurrency::Held,
    /// The fault switches a test turned on (see `faults.rs`); all off by default.
    pub switches: crate::faults::Switches,
    /// What tests count (see `stats.rs`).
    pub counters: crate::stats::Counters,
    /// Condition sleeps of pending tasks, earliest first (see `matches.rs`).
    pub condition_sleeps: crate::time::timers::Timers,
    /// Pending tasks whose conditions wait for events.
    pub event_waiters: HashSet<String>,
    /// Event filters (see `filters.rs`).
    pub filters: crate::dag::filters::Filters,
    /// Deadlines of running attempts, earliest first (see `expire_timeouts`).
    pub deadlines: crate::time::timers::Timers,
    /// Paused workflows and the tasks they hold (see `pause.rs`).
    pub pauses: crate::store::pause::Pauses,
    /// Incoming webhooks by name (see `webhooks.rs`).
    pub webhooks: crate::store::webhooks::Webhooks,
    /// Spans by trace, the SDKs' and the engine's own (see `traces/`).
    pub traces: crate::traces::Traces,
    /// The engine's clock (see `clock.rs`): every time the state reads comes from it.
    pub clock: std::sync::Arc<crate::time::clock::Clock>,
}

/// The engine: state plus the notifier that wakes the scheduler.
#[derive(Debug)]
pub(crate) struct Engine {
    pub state: Mutex<State>,
    /// The state's clock (the same one), for reads outside the lock.
    pub clock: std::sync::Arc<crate::time::clock::Clock>,
    pub wake: Notify,
    pub tenant_id: String,
    /// Running tasks of a worker silent this long are requeued ([`REASSIGN_AFTER`] by default).
    pub reassign_after: Duration,
    /// What GetVersion answers ([`ENGINE_VERSION`] by default).
    pub version: String,
}

impl Engine {
    /// A new, empty engine for `tenant_id`.
    pub(crate) fn new(tenant_id: String, reassign_after: Duration, version: String) -> Self {
        let state = State::default();
        Engine {
            clock: state.clock.clone(),
            state: Mutex::new(state),
            wake: Notify::new(),
            tenant_id,
            reassign_after,
            version,
        }
    }

    // ===== registration =====

    /// `v1.AdminService/PutWorkflow`.
    pub(crate) fn put_workflow(
        &self,
        mut req: v1::CreateWorkflowVersionRequest,
    ) -> Result<v1::CreateWorkflowVersionResponse, GrpcStatus> {
        // The real engine's validator first, then the DAG's shape, in its words (v0.104.9).
        let problems = crate::store::definition::validation_problems(&req);
        if !problems.is_empty() {
            return Err(GrpcStatus::invalid_argument(validation_failed(&problems)));
        }
        if let Some(why) = crate::store::definition::shape_problem(&req) {
            tracing::warn!(workflow = %req.name, %why, "refusing a workflow");
            return Err(GrpcStatus::internal("An internal error occurred."));
        }
        let config = crate::store::definition::workflow_config(&req);
        let task_limits: Vec<v1::Concurrency> = req
            .tasks
            .iter()
            .flat_map(|t| t.concurrency.iter().cloned())
            .collect();
        let mut tasks = Vec::with_capacity(req.tasks.len() + 1);
        let ids: HashSet<&str> = req.tasks.iter().map(|t| t.readable_id.as_str()).collect();
        let on_failure = req.on_failure_task.take();
        for (t, is_on_failure) in req
            .tasks
            .iter()
            .map(|t| (t, false))
            .chain(on_failure.iter().map(|t| (t, true)))
        {
            for p in &t.parents {
                if is_on_failure || !ids.contains(p.as_str()) {
                    return Err(GrpcStatus::invalid_argument(format!(
                        "dag parent not found: parent step '{p}' not found for step '{}'",
                        t.readable_id
                    )));
                }
            }
            let timeout = if t.timeout.is_empty() {
                DEFAULT_TASK_TIMEOUT
            } else {
                parse_duration(&t.timeout).ok_or_else(|| {
                    GrpcStatus::invalid_argument(format!(
                        "timeout {:?} is not a duration",
                        t.timeout
                    ))
                })?
            };
            tasks.push(TaskDef {
                readable_id: t.readable_id.clone(),
                action: t.action.to_lowercase(),
                // An on_failure task's trigger is any failure, not parents (it must name none).
                parents: t.parents.clone(),
                timeout,
                timeout_text: if t.timeout.is_empty() {
                    format!("{}s", DEFAULT_TASK_TIMEOUT.as_secs())
                } else {
                    t.timeout.clone()
                },
                retries: t.retries.max(0),
                backoff_factor: t.backoff_factor,
                backoff_max_seconds: t.backoff_max_seconds,
                is_durable: t.is_durable,
                slot_requests: t.slot_requests.clone(),
                rate_limits: t.rate_limits.clone(),
                on_failure: is_on_failure,
                worker_labels: crate::sched::placement::desired_labels(&t.worker_labels),
                batch: match &t.batch {
                    Some(c) if !is_on_failure => Some(
                        crate::sched::batches::BatchRule::from_proto(&t.readable_id, c)
                            .map_err(GrpcStatus::invalid_argument)?,
                    ),
                    _ => None,
                },
                conditions: match &t.conditions {
                    Some(c) if !is_on_failure => {
                        crate::dag::matches::validate(c)?;
                        Some(c.clone())
                    }
                    _ => None,
                },
            });
        }
        let crons = std::mem::take(&mut req.cron_triggers);
        let default_filters = std::mem::take(&mut req.default_filters);
        for c in &crons {
            crate::time::cron::Cron::parse(c).map_err(GrpcStatus::invalid_argument)?;
        }
        let name = req.name.clone();
        let cron_input = match req.cron_input.as_deref() {
            Some(text) => parse_json("cron_input", text)?,
            None => Value::Object(Default::default()),
        };
        let mut st = self.state.lock();
        // Like the real engine: a task's static rate limit references the key, which must exist
        // (PutRateLimit) before the workflow; the real engine's answer is a bare INTERNAL.
        let missing_key = tasks.iter().flat_map(|t| &t.rate_limits).any(|r| {
            r.key_expr.is_none()
                && r.units_expr.is_none()
                && r.limit_values_expr.is_none()
                && !st.rate_limits.contains(&r.key)
        });
        if missing_key {
            return Err(GrpcStatus::internal("An internal error occurred."));
        }
        // A new version keeps the workflow's id; a deleted workflow's name starts a new one.
        let id = st.workflows.id_for(&req.name, new_id);
        let version_id = st.workflows.put(Workflow {
            id: id.clone(),
            version_id: new_id(),
            description: req.description,
            name: req.name,
            tasks,
            event_triggers: req.event_triggers,
            idempotency: req.idempotency,
            // Task-level limits (how the Python SDK declares a standalone task's) are applied
            // per run: the same for one-task workflows, stricter for a DAG.
            concurrency: crate::sched::concurrency::Limit::from_proto(
                req.concurrency
                    .into_iter()
                    .chain(req.concurrency_arr)
                    .chain(task_limits),
            ),
            default_priority: req.default_priority,
            sticky: crate::sched::placement::Sticky::from_proto(req.sticky),
            created_at: self.clock.system_now(),
            config,
            deleted: false,
        });
        let now = st.clock.system_now();
        st.filters.set_declarative(&id, &default_filters, now);
        let planned = crate::time::schedules::Planned {
            tenant: self.tenant_id.clone(),
            workflow: name.clone(),
            input: cron_input,
            metadata: Value::Object(Default::default()),
            method: "DEFAULT",
            priority: Value::from(1),
        };
        st.set_workflow_crons(&planned, &crons)
            .map_err(GrpcStatus::invalid_argument)?;
        Ok(v1::CreateWorkflowVersionResponse {
            id: version_id,
            workflow_id: id,
        })
    }

    /// `Dispatcher/Register`.
    pub(crate) fn register(
        &self,
        req: proto::WorkerRegisterRequest,
    ) -> Result<proto::WorkerRegisterResponse, GrpcStatus> {
        let name_ok = !req.worker_name.is_empty()
            && req
                .worker_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !name_ok {
            return Err(GrpcStatus::invalid_argument(
                "worker_name must match ^[a-zA-Z0-9.\\-_]+$",
            ));
        }
        for a in &req.actions {
            let parts = a.split(':').count();
            if !(2..=3).contains(&parts) || a.split(':').any(str::is_empty) {
                return Err(GrpcStatus::invalid_argument(format!(
                    "action {a:?} must be service:verb"
                )));
            }
        }
        if req.slots.is_some() && !req.slot_config.is_empty() {
            return Err(GrpcStatus::invalid_argument(
                "set slots or slot_config, not both",
            ));
        }
        let mut slot_limits: BTreeMap<String, i32> = req
            .slot_config
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        // Every worker has a `default` pool: the real engine's worker table gives a new worker
        // one of its `max_runs` (100) through an insert trigger (v0.104.9, migration 0_76), and
        // a `default` the registration names replaces it; a registration of durable slots only
        // still has 100 default slots there.
        slot_limits
            .entry("default".into())
            .or_insert(req.slots.unwrap_or(100));
        let id = new_id();
        let labels = crate::sched::placement::worker_labels(&req.labels);
        let now = self.clock.now();
        let worker = Worker {
            id: id.clone(),
            name: req.worker_name.clone(),
            actions: req.actions.iter().map(|a| a.to_lowercase()).collect(),
            slot_limits,
            slots_used: BTreeMap::new(),
            sessions: Vec::new(),
            last_heartbeat: now,
            last_heartbeat_at: self.clock.system_now(),
            ever_listened: false,
            labels,
            runtime_info: req.runtime_info,
            paused: false,
            created_at: self.clock.system_now(),
            last_listener_established: None,
            assignments: 0,
            heartbeats: 0,
        };
        self.state.lock().workers.insert(id.clone(), worker);
        Ok(proto::WorkerRegisterResponse {
            tenant_id: self.tenant_id.clone(),
            worker_id: id,
            worker_name: req.worker_name,
        })
    }

    /// Opens a listener session (`ListenV2`, or `Listen` when `legacy`).
    pub(crate) fn open_session(
        &self,
        worker_id: &str,
        legacy: bool,
    ) -> Result<
        (
            u64,
            mpsc::Receiver<Result<proto::AssignedAction, GrpcStatus>>,
        ),
        GrpcStatus,
    > {
        check_uuid("worker_id", worker_id)?;
        let (tx, rx) = mpsc::channel(SESSION_BUFFER);
        let mut st = self.state.lock();
        st.next_id += 1;
        let sid = st.next_id;
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| GrpcStatus::not_found("worker not found"))?;
        w.sessions.push(Session {
            id: sid,
            tx,
            legacy,
        });
        w.ever_listened = true;
        w.last_listener_established = Some(self.clock.system_now());
        if legacy {
            w.last_heartbeat = self.clock.now();
        }
        drop(st);
        self.wake.notify_one();
        Ok((sid, rx))
    }

    /// Closes a listener session (the stream ended).
    /// Assignments the worker never answered went out on a stream that is now gone (they may
    /// never have arrived). As on the real engine they stay with the worker and run out their
    /// timeout (or are reassigned when it goes silent), unless the `reoffer_unanswered` fault
    /// is on: then they are offered again, same attempt (a worker that did get one ignores the
    /// second copy).
    pub(crate) fn close_session(&self, worker_id: &str, session: u64) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(worker_id) {
            w.sessions.retain(|s| s.id != session);
        }
        if !st.switches.reoffer_unanswered {
            return;
        }
        let unanswered: Vec<String> = st
            .tasks
            .values()
            .filter(|t| {
                t.status() == Status::Running
                    && !t.answered
                    && t.session == Some(session)
                    && t.worker_id.as_deref() == Some(worker_id)
            })
            .map(|t| t.id.clone())
            .collect();
        for tid in &unanswered {
            st.offer_again(tid);
        }
        if !unanswered.is_empty() {
            drop(st);
            self.wake.notify_one();
        }
    }

    /// `Dispatcher/Heartbeat`.
    pub(crate) fn heartbeat(&self, worker_id: &str) -> Result<(), GrpcStatus> {
        if go_uuid_error(worker_id).is_some() {
            return Err(GrpcStatus::invalid_argument(format!(
                "invalid worker ID format: {worker_id}"
            )));
        }
        let mut st = self.state.lock();
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| unknown_worker(worker_id))?;
        if w.ever_listened && w.sessions.is_empty() {
            return Err(GrpcStatus::failed_precondition(
                "Heartbeat rejected: worker stream is not active",
            ));
        }
        w.last_heartbeat = self.clock.now();
        w.last_heartbeat_at = self.clock.system_now();
        w.heartbeats += 1;
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// `Dispatcher/Unsubscribe`: drops the worker's routing.
    pub(crate) fn unsubscribe(&self, worker_id: &str) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(worker_id) {
            w.sessions.clear();
        }
    }

    /// `Dispatcher/UpsertWorkerLabels`.
    pub(crate) fn upsert_labels(
        &self,
        worker_id: &str,
        labels: &HashMap<String, proto::WorkerLabels>,
    ) -> Result<(), GrpcStatus> {
        let mut st = self.state.lock();
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| unknown_worker(worker_id))?;
        // Per-key upsert: other keys are kept; there is no delete.
        w.labels
            .extend(crate::sched::placement::worker_labels(labels));
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    // ===== triggering =====

    /// A single trigger from a client (`TriggerWorkflow`, `TriggerWorkflowRun`): written now,
    /// or, under the `defer_trigger_writes` fault, answered now and written later.
    pub(crate) fn trigger_from_client(
        self: &std::sync::Arc<Self>,
        req: v1::TriggerWorkflowRequest,
    ) -> Result<String, GrpcStatus> {
        let deferred = {
            let st = self.state.lock();
            st.switches.defer_trigger_writes.filter(|_| {
                st.workflows
                    .live(&req.name)
                    .is_some_and(|wf| wf.idempotency.is_none())
            })
        };
        let Some(after) = deferred else {
            return self.trigger(&req, None);
        };
        parse_json("payload", &req.input)?;
        parse_metadata(req.additional_metadata.as_deref())?;
        check_priority(req.priority, TRIGGER)?;
        let id = new_id();
        let (engine, run_id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Err(e) = engine.trigger(&req, Some(run_id)) {
                tracing::warn!(workflow = %req.name, error = %e, "a deferred trigger failed");
            }
        });
        Ok(id)
    }

    /// Creates a run of `req.name` (TriggerWorkflow, the DurableTask stream's trigger_runs),
    /// under `run_id` when it was answered before (a deferred write).
    pub(crate) fn trigger(
        &self,
        req: &v1::TriggerWorkflowRequest,
        run_id: Option<String>,
    ) -> Result<String, GrpcStatus> {
        let input = parse_json("payload", &req.input)?;
        let meta = parse_metadata(req.additional_metadata.as_deref())?;
        check_priority(req.priority, TRIGGER)?;
        let mut st = self.state.lock();
        let id = st.create_run(
            &self.tenant_id,
            &req.name,
            input,
            meta,
            TriggerOpts {
                parent_task: req.parent_task_run_external_id.clone(),
                child_index: req.child_index,
                child_key: req.child_key.clone(),
                priority: req.priority,
                event: None,
                desired_worker: req.desired_worker_id.clone(),
                desired_labels: crate::sched::placement::desired_labels(&req.desired_worker_labels),
                filter_payload: None,
                run_id,
            },
        );
        drop(st);
        match id {
            Ok(id) => {
                self.wake.notify_one();
                Ok(id)
            }
            // Answered with an id no run will have, as the real engine answers it.
            Err(e) if crate::rules::is_skipped_trigger(&e) => Ok(new_id()),
            Err(e) => Err(e),
        }
    }

    /// `EventsService/Push`: stores the event and starts every workflow it triggers.
    /// `WorkflowService/BulkTriggerWorkflow`: every item is checked first (JSON, priority), so
    /// one bad item refuses the whole call and creates nothing, as the real engine does; an
    /// item of a workflow the engine does not know is answered with an id, as a single trigger.
    pub(crate) fn bulk_trigger(
        &self,
        reqs: &[v1::TriggerWorkflowRequest],
    ) -> Result<Vec<String>, GrpcStatus> {
        for (i, r) in reqs.iter().enumerate() {
            let item = |e: GrpcStatus| {
                GrpcStatus::invalid_argument(format!("workflow {i}: {}", e.message()))
            };
            parse_json("payload", &r.input).map_err(item)?;
            parse_metadata(r.additional_metadata.as_deref()).map_err(item)?;
            check_priority(r.priority, TRIGGER).map_err(item)?;
        }
        // Every item is triggered; items that collide on the workflow's idempotency key are
        // answered together afterwards, as the real engine does.
        let (mut created, mut collisions) = (Vec::with_capacity(reqs.len()), Vec::new());
        for r in reqs {
            match self.trigger(r, None) {
                Ok(id) => created.push(id),
                Err(e) => match proto::idempotency_collision(&e) {
                    // Named by the id its run would have had, as the real engine names it.
                    Some(c) => collisions.push(v1::IdempotencyCollisionError {
                        colliding_run_external_id: new_id(),
                        ..c
                    }),
                    None => return Err(e),
                },
            }
        }
        if collisions.is_empty() {
            Ok(created)
        } else {
            Err(crate::rules::bulk_idempotency_collision(
                created, collisions,
            ))
        }
    }

    /// `EventsService/BulkPush`: 1 to 1,000 events, all checked before any is stored.
    pub(crate) fn bulk_push(
        &self,
        reqs: &[proto::PushEventRequest],
    ) -> Result<Vec<proto::Event>, GrpcStatus> {
        if reqs.is_empty() {
            return Err(GrpcStatus::invalid_argument("No events to ingest"));
        }
        if reqs.len() > MAX_BULK_EVENTS {
            return Err(GrpcStatus::invalid_argument(format!(
                "{} events is over maximum ({MAX_BULK_EVENTS})",
                reqs.len()
            )));
        }
        for r in reqs {
            check_event(r)?;
        }
        reqs.iter().map(|r| self.push(r)).collect()
    }

    pub(crate) fn push(&self, req: &proto::PushEventRequest) -> Result<proto::Event, GrpcStatus> {
        let (payload, meta) = check_event(req)?;
        let at = self.clock.system_now();
        let mut st = self.state.lock();
        let ev = st.events.record(StoredEvent {
            id: new_id(),
            key: req.key.clone(),
            payload: payload.clone(),
            at,
            seq: 0,
            scope: req.scope.clone(),
            metadata: meta.clone(),
            runs: Vec::new(),
            webhook: None,
        });
        let targets: Vec<(String, String)> = st
            .workflows
            .live_ones()
            .filter(|w| w.event_triggers.iter().any(|t| key_matches(t, &req.key)))
            .map(|w| (w.name.clone(), w.id.clone()))
            .collect();
        // Event-triggered runs carry the event's id and key in their metadata.
        let mut run_meta = meta.clone();
        run_meta.insert("hatchet__event_id".into(), Value::String(ev.id.clone()));
        run_meta.insert("hatchet__event_key".into(), Value::String(ev.key.clone()));
        let mut started = Vec::new();
        for (name, workflow_id) in targets {
            let decision = st.filters.decide(
                &workflow_id,
                req.scope.as_deref(),
                (&ev.key, &ev.id),
                &payload,
                &meta,
            );
            let payloads = match decision {
                crate::dag::filters::Decision::Once => vec![None],
                crate::dag::filters::Decision::PerFilter(p) => p.into_iter().map(Some).collect(),
            };
            for filter_payload in payloads {
                let run = st.create_run(
                    &self.tenant_id,
                    &name,
                    payload.clone(),
                    run_meta.clone(),
                    TriggerOpts {
                        event: Some((ev.id.clone(), ev.key.clone())),
                        priority: req.priority,
                        filter_payload,
                        ..TriggerOpts::default()
                    },
                );
                match run {
                    Ok(run) => started.push(run),
                    Err(e) if crate::rules::is_skipped_trigger(&e) => {}
                    // A run whose idempotency key is taken is not created, and the push is
                    // accepted: the real engine stores the event and answers it (one run).
                    Err(e) if e.code() == tonic::Code::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
        }
        st.events.set_runs(&ev.id, started);
        st.durable_event_pushed(&ev);
        st.conditions_event(&ev);
        drop(st);
        self.wake.notify_one();
        Ok(proto::Event {
            tenant_id: self.tenant_id.clone(),
            event_id: ev.id,
            key: ev.key,
            payload: req.payload.clone(),
            event_timestamp: Some(timestamp(at)),
            additional_metadata: req.additional_metadata.clone(),
            scope: req.scope.clone(),
        })
    }

    // ===== worker events =====

    /// `Dispatcher/SendStepActionEvent`.
    pub(crate) fn step_event(
        &self,
        ev: &proto::StepActionEvent,
    ) -> Result<proto::ActionEventResponse, GrpcStatus> {
        use proto::StepActionEventType as E;
        // The real engine's words: its lookup quotes the id and the parse or query error.
        let task_id = &ev.task_run_external_id;
        if let Some(why) = go_uuid_error(task_id) {
            return Err(GrpcStatus::invalid_argument(format!(
                "invalid task external run id {task_id}: {why}"
            )));
        }
        let kind = E::try_from(ev.event_type)
            .map_err(|_| GrpcStatus::invalid_argument("unknown event_type"))?;
        let mut st = self.state.lock();
        let task = st.tasks.get(&ev.task_run_external_id).ok_or_else(|| {
            GrpcStatus::invalid_argument(format!(
                "invalid task external run id {task_id}: no rows in result set"
            ))
        })?;
        let retry_count = ev.retry_count.unwrap_or(task.retry_count);
        let stale = retry_count != task.retry_count || task.status().is_terminal();
        match kind {
            E::StepEventTypeUnknown => {
                return Err(GrpcStatus::invalid_argument("event_type UNKNOWN"));
            }
            E::StepEventTypeStarted | E::StepEventTypeAcknowledged => {
                if !stale && let Some(t) = st.tasks.get_mut(&ev.task_run_external_id) {
                    t.started_at.get_or_insert_with(|| self.clock.system_now());
                    t.answered = true;
                }
            }
            E::StepEventTypeCompleted
                if !stale && crate::faults::take_one(&st.switches.lose_answered_completions) => {}
            E::StepEventTypeCompleted if !stale => {
                let payload = if ev.event_payload.trim().is_empty() {
                    "{}"
                } else {
                    &ev.event_payload
                };
                match serde_json::from_str::<Value>(payload) {
                    Ok(_) if !payload.contains("\\u0000") => {
                        st.complete_task(&ev.task_run_external_id, payload.to_string());
                    }
                    Ok(_) => st.fail_attempt(
                        &ev.task_run_external_id,
                        "output contains \\u0000".into(),
                        false,
                    ),
                    Err(e) => st.fail_attempt(
                        &ev.task_run_external_id,
                        format!("output is not valid JSON: {e}"),
                        false,
                    ),
                }
            }
            E::StepEventTypeFailed if !stale => {
                st.fail_attempt(
                    &ev.task_run_external_id,
                    ev.event_payload.clone(),
                    ev.should_not_retry.unwrap_or(false),
                );
            }
            E::StepEventTypeCancelled if !stale => {
                st.cancel_task(&ev.task_run_external_id, "cancelled by the worker");
            }
            // The cancel of an attempt that had released its slot never reached its worker,
            // which finished the task: the real engine records the completion.
            E::StepEventTypeCompleted
                if task.status() == Status::Cancelled
                    && task.unlinked
                    && retry_count == task.retry_count
                    && serde_json::from_str::<Value>(&ev.event_payload).is_ok()
                    && !ev.event_payload.contains("\\u0000") =>
            {
                st.complete_late(&ev.task_run_external_id, ev.event_payload.clone());
            }
            _ => {} // stale or duplicate: ignored (invariant 2)
        }
        drop(st);
        self.wake.notify_one();
        Ok(proto::ActionEventResponse {
            tenant_id: self.tenant_id.clone(),
            worker_id: ev.worker_id.clone(),
        })
    }

    /// `Dispatcher/RefreshTimeout`.
    pub(crate) fn refresh_timeout(
        &self,
        task_id: &str,
        by: &str,
    ) -> Result<SystemTime, GrpcStatus> {
        let inc = parse_duration(by).ok_or_else(|| {
            GrpcStatus::invalid_argument("increment_timeout_by is not a duration")
        })?;
        let mut st = self.state.lock();
        let t = st
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| unknown_task_run(task_id))?;
        if t.status() != Status::Running {
            return Err(GrpcStatus::not_found("task is not running"));
        }
        let base = t.deadline.unwrap_or_else(|| self.clock.now());
        let at = base + inc;
        t.deadline = Some(at);
        let id = t.id.clone();
        st.deadlines.add(at, &id);
        Ok(self.clock.system_now() + at.saturating_duration_since(self.clock.now()))
    }

    /// `Dispatcher/ReleaseSlot`: accepted, and the slot stays counted until the attempt ends,
    /// as on the real engine (see `Switches::release_slot_frees`, which gives it back at once).
    /// Either way a running attempt loses its worker link, as there (see [`Task::unlinked`]).
    pub(crate) fn release_slot(&self, task_id: &str) -> Result<(), GrpcStatus> {
        let mut st = self.state.lock();
        let Some(t) = st.tasks.get_mut(task_id) else {
            return Err(unknown_task_run(task_id));
        };
        if t.status() == Status::Running {
            t.unlinked = true;
        }
        st.counters.slot_releases += 1;
        if !st.switches.release_slot_frees {
            return Ok(());
        }
        st.free_slot(task_id);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// `EventsService/PutLog`, validated the way the real engine validates it.
    pub(crate) fn put_log(&self, req: &proto::PutLogRequest) -> Result<(), GrpcStatus> {
        check_uuid("task_run_external_id", &req.task_run_external_id)?;
        let length = req.message.chars().count();
        if !(1..=MAX_LOG_MESSAGE_CHARS).contains(&length) {
            return Err(GrpcStatus::invalid_argument(format!(
                "a log message must have 1 to {MAX_LOG_MESSAGE_CHARS} characters, got {length}"
            )));
        }
        let level = req.level.clone().unwrap_or_else(|| "INFO".into());
        if !LOG_LEVELS.contains(&level.as_str()) {
            return Err(GrpcStatus::invalid_argument(format!(
                "log level {level:?} is not one of {LOG_LEVELS:?}"
            )));
        }
        let metadata = if req.metadata.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(&req.metadata) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(GrpcStatus::invalid_argument(
                        "log metadata must be a JSON object",
                    ));
                }
            }
        };
        let mut st = self.state.lock();
        let t = st
            .tasks
            .get_mut(&req.task_run_external_id)
            .ok_or_else(|| unknown_task_run(&req.task_run_external_id))?;
        if t.logs.len() < MAX_LOG_LINES_PER_TASK {
            let retry_count = req.task_retry_count.unwrap_or(t.retry_count);
            // The sender's time when it names one (the real engine's too): lines read back
            // in the order they were written, whatever order they arrived in.
            let at = req
                .created_at
                .as_ref()
                .and_then(hatchet_runtime::protocol::system_time)
                .filter(|t| *t > SystemTime::UNIX_EPOCH)
                .unwrap_or_else(|| self.clock.system_now());
            t.logs.push(LogLine {
                at,
                level,
                message: req.message.clone(),
                metadata,
                retry_count,
            });
        }
        Ok(())
    }

    /// `EventsService/PutStreamEvent`: fans a chunk out to the run's event subscribers.
    pub(crate) fn put_stream_event(
        &self,
        req: &proto::PutStreamEventRequest,
    ) -> Result<(), GrpcStatus> {
        let st = self.state.lock();
        let t = st
            .tasks
            .get(&req.task_run_external_id)
            .ok_or_else(|| GrpcStatus::not_found("task not found"))?;
        let ev = proto::WorkflowEvent {
            workflow_run_id: t.run_id.clone(),
            resource_type: proto::ResourceType::StepRun as i32,
            event_type: proto::ResourceEventType::Stream as i32,
            resource_id: t.id.clone(),
            event_timestamp: Some(timestamp(self.clock.system_now())),
            event_payload: String::from_utf8_lossy(&req.message).into_owned(),
            hangup: false,
            task_retries: None,
            retry_count: Some(t.retry_count),
            event_index: req.event_index,
        };
        let run_id = t.run_id.clone();
        st.publish_event(&run_id, ev);
        Ok(())
    }

    // ===== results =====

    /// Opens a `SubscribeToWorkflowRuns` subscription.
    pub(crate) fn open_run_subscription(
        &self,
    ) -> (
        u64,
        mpsc::UnboundedReceiver<Result<proto::WorkflowRunEvent, GrpcStatus>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.state.lock().subscriptions.open_runs(tx);
        (id, rx)
    }

    /// Adds a run id to a subscription; a finished run is delivered at once.
    pub(crate) fn subscribe_run(&self, sub: u64, run_id: &str) {
        let mut st = self.state.lock();
        st.counters.run_subscribe_messages += 1;
        if uuid::Uuid::parse_str(run_id).is_err() {
            return; // invalid ids are skipped silently, as the engine does
        }
        let finished = st
            .runs
            .get(run_id)
            .filter(|r| st.run_end_published(r))
            .map(|r| st.run_event(r));
        st.subscriptions.want_run(sub, run_id, finished);
    }

    /// Closes a subscription.
    pub(crate) fn close_run_subscription(&self, sub: u64) {
        self.state.lock().subscriptions.close_runs(sub);
    }

    /// Opens a `SubscribeToWorkflowEvents` stream. `None` for the run means "already finished":
    /// the caller ends the stream at once.
    #[allow(clippy::type_complexity)]
    pub(crate) fn open_event_subscription(
        &self,
        req: &proto::SubscribeToWorkflowEventsRequest,
    ) -> Result<Option<mpsc::UnboundedReceiver<Result<proto::WorkflowEvent, GrpcStatus>>>, GrpcStatus>
    {
        let filter = match (
            &req.workflow_run_id,
            &req.additional_meta_key,
            &req.additional_meta_value,
        ) {
            (Some(id), None, None) if !id.is_empty() => EventFilter::Run(id.clone()),
            (None, Some(k), Some(v)) => EventFilter::Metadata {
                key: k.clone(),
                value: v.clone(),
                tracked: HashSet::new(),
            },
            _ => {
                return Err(GrpcStatus::invalid_argument(
                    "give workflow_run_id, or additional_meta_key and additional_meta_value",
                ));
            }
        };
        let mut st = self.state.lock();
        if let EventFilter::Run(id) = &filter {
            let run = st
                .runs
                .get(id)
                .ok_or_else(|| GrpcStatus::not_found("run not found"))?;
            if run.status.is_terminal() {
                return Ok(None);
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        st.subscriptions.open_events(tx, filter);
        Ok(Some(rx))
    }

    /// `v1.AdminService/GetRunDetails`.
    pub(crate) fn run_details(
        &self,
        run_id: &str,
    ) -> Result<v1::GetRunDetailsResponse, GrpcStatus> {
        let st = self.state.lock();
        // A client polling an unfinished run waits on it (virtual time skips for it).
        st.clock.polled(run_id);
        let run = st.runs.get(run_id).ok_or_else(|| {
            // In the real engine's words: a malformed id is refused, an unknown one not found.
            if uuid::Uuid::parse_str(run_id).is_err() {
                GrpcStatus::invalid_argument("invalid external id")
            } else {
                GrpcStatus::not_found("workflow run not found")
            }
        })?;
        // Like the real engine: until the run is finalized, a task reads QUEUED or RUNNING
        // (or EVICTED), without output or error, whether or not it finished; per-task progress
        // is the REST read's.
        let done = run.status.is_terminal();
        let mut any_running = false;
        let mut any_evicted = false;
        let mut task_runs = HashMap::new();
        for tid in &run.tasks {
            // Only the tasks that exist: the real engine creates a DAG's task when its parents
            // have completed (or its condition holds), and lists none before.
            if let Some(t) = st
                .tasks
                .get(tid)
                .filter(|t| done || t.status() != Status::Pending)
            {
                let (status, error, output) = if done {
                    (
                        t.status().v1(),
                        t.error.clone(),
                        t.output.clone().map(String::into_bytes),
                    )
                } else if t.evicted {
                    // The real engine says RUNNING for an evicted task, in the task's and the
                    // run's status, and says it only in `is_evicted` (its `ToProto`), the
                    // task's and the run's (any task evicted).
                    any_running = true;
                    any_evicted = true;
                    (v1::RunStatus::Running as i32, None, None)
                } else if t.status() == Status::Running {
                    any_running = true;
                    (v1::RunStatus::Running as i32, None, None)
                } else {
                    (v1::RunStatus::Queued as i32, None, None)
                };
                task_runs.insert(
                    t.readable_id.clone(),
                    v1::TaskRunDetail {
                        external_id: t.id.clone(),
                        status,
                        error,
                        output,
                        readable_id: t.readable_id.clone(),
                        is_evicted: t.evicted,
                    },
                );
            }
        }
        let status = if done {
            run.status.v1()
        } else if any_running {
            v1::RunStatus::Running as i32
        } else {
            v1::RunStatus::Queued as i32
        };
        // A one-task run's input is its task's stored input (`input`, `parents`, `triggers`).
        let input = match run.tasks.as_slice() {
            [only] => st.task_input(only),
            _ => run.input.clone(),
        };
        Ok(v1::GetRunDetailsResponse {
            input: input.to_string().into_bytes(),
            status,
            task_runs,
            done,
            additional_metadata: Value::Object(run.additional_metadata.clone())
                .to_string()
                .into_bytes(),
            is_evicted: any_evicted,
        })
    }

    /// `WorkflowService/PutRateLimit`.
    pub(crate) fn put_rate_limit(
        &self,
        req: &proto::PutRateLimitRequest,
    ) -> Result<(), GrpcStatus> {
        if req.key.is_empty() {
            return Err(GrpcStatus::invalid_argument("key is required"));
        }
        let duration = v1::RateLimitDuration::try_from(req.duration)
            .map_err(|_| GrpcStatus::invalid_argument("unknown rate limit duration"))?;
        if req.limit < 0 {
            return Err(GrpcStatus::invalid_argument(
                "rate limit must not be negative",
            ));
        }
        let mut st = self.state.lock();
        let (now, wall) = (st.clock.now(), st.clock.system_now());
        st.rate_limits
            .put(&req.key, i64::from(req.limit), duration, now, wall);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    // ===== scheduling =====

    /// One scheduler pass at `now`: reassignment, timeouts, durable sleeps, then assignment.
    pub(crate) fn tick(&self) {
        let mut st = self.state.lock();
        self.pass(&mut st);
        // Virtual time: nothing to do but wait on a timer while a client waits on a result,
        // so the clock jumps to that timer and the pass runs again (see `clock.rs`).
        if st.skip_if_idle().is_some() {
            self.pass(&mut st);
        }
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
        // What REST reads, and the run streams' ends, catch up at the status poll.
        st.poll_statuses(now);
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

/// A fresh engine state that knows `workflow` (unit tests of the state's parts).
#[cfg(test)]
pub(crate) fn state_with(workflow: v1::CreateWorkflowVersionRequest) -> State {
    let engine = Engine::new("tenant".into(), Duration::from_secs(30), "v0.0.0".into());
    // Static rate-limit keys exist before the workflow naming them (PutRateLimit first).
    for r in workflow.tasks.iter().flat_map(|t| &t.rate_limits) {
        if r.key_expr.is_none() && r.units_expr.is_none() && r.limit_values_expr.is_none() {
            engine
                .put_rate_limit(&proto::PutRateLimitRequest {
                    key: r.key.clone(),
                    limit: 1_000,
                    duration: v1::RateLimitDuration::Minute as i32,
                })
                .expect("put rate limit");
        }
    }
    engine.put_workflow(workflow).expect("put");
    std::mem::take(&mut *engine.state.lock())
}

/// A run of workflow `name` with an empty input and no options (unit tests).
#[cfg(test)]
pub(crate) fn plain_run(st: &mut State, name: &str) -> String {
    st.create_run(
        "tenant",
        name,
        serde_json::json!({}),
        Default::default(),
        Default::default(),
    )
    .expect("a run of a known workflow")
}

/// A one-task workflow named `wf` (action `wf:t`).
#[cfg(test)]
pub(crate) fn one_task_workflow() -> v1::CreateWorkflowVersionRequest {
    v1::CreateWorkflowVersionRequest {
        name: "wf".into(),
        tasks: vec![v1::CreateTaskOpts {
            readable_id: "t".into(),
            action: "wf:t".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}
