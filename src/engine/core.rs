//! The engine's rules: workflows, runs, tasks, workers, assignment, results and subscriptions.
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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tonic::Status as GrpcStatus;

use super::durable::DurableState;
use super::model::*;
use crate::proto::{self, v1};

/// A worker is assignable while its last heartbeat is younger than this (engine rule).
pub const LIVE_HEARTBEAT: Duration = Duration::from_secs(5);
/// Running tasks of a worker silent for this long are requeued elsewhere.
pub const REASSIGN_AFTER: Duration = Duration::from_secs(30);
/// Execution timeout when a task declares none.
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(60);
/// Internal requeues (send failures, reassignment) allowed per task.
pub const MAX_INTERNAL_RETRIES: i32 = 10;
/// Assignment queue depth of one listener session.
pub const SESSION_BUFFER: usize = 1024;
/// The version GetVersion reports (recent enough for slot_config and the DurableTask stream).
pub const ENGINE_VERSION: &str = "v0.94.16";

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) use crate::proto::timestamp;

/// Parses a Hatchet duration (`10s`, `1m30s`, `250ms`, `2h`); `None` if malformed.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return None;
        };
        total = total.checked_add(unit.checked_mul(u32::try_from(n).ok()?)?)?;
        rest = &rest[len..];
    }
    Some(total)
}

/// SQL-LIKE-ish matching of an event key against a trigger with `*` wildcards.
pub fn key_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[u8], k: &[u8]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((b'*', rest)) => (0..=k.len()).any(|i| go(rest, &k[i..])),
            Some((c, rest)) => k.first() == Some(c) && go(rest, &k[1..]),
        }
    }
    go(pattern.as_bytes(), key.as_bytes())
}

pub(crate) fn parse_json(field: &str, s: &str) -> Result<Value, GrpcStatus> {
    if s.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(s)
        .map_err(|e| GrpcStatus::invalid_argument(format!("{field} is not valid JSON: {e}")))
}

pub(crate) fn parse_metadata(
    s: Option<&str>,
) -> Result<serde_json::Map<String, Value>, GrpcStatus> {
    match s.map(str::trim) {
        None | Some("") => Ok(Default::default()),
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(Value::Null) => Ok(Default::default()),
            Ok(_) => Err(GrpcStatus::invalid_argument(
                "additional_metadata must be a JSON object",
            )),
            Err(e) => Err(GrpcStatus::invalid_argument(format!(
                "additional_metadata is not valid JSON: {e}"
            ))),
        },
    }
}

fn check_uuid(field: &str, s: &str) -> Result<(), GrpcStatus> {
    uuid::Uuid::parse_str(s)
        .map(|_| ())
        .map_err(|_| GrpcStatus::invalid_argument(format!("{field} is not a UUID")))
}

/// Evaluates the small subset of idempotency expressions the dev engine understands: a dotted
/// path into `input` or `additional_metadata` (`input.order_id`); anything else is used verbatim.
/// The value of a key expression (`input.user_id`, `additional_metadata.tenant`) as a string;
/// any other expression is its own (constant) key.
pub(crate) fn key_of_expression(
    expr: &str,
    input: &Value,
    meta: &serde_json::Map<String, Value>,
) -> String {
    let mut parts = expr.trim().split('.');
    let root = match parts.next() {
        Some("input") => input.clone(),
        Some("additional_metadata") | Some("additionalMetadata") => Value::Object(meta.clone()),
        _ => return expr.to_string(),
    };
    let v = parts.try_fold(root, |v, p| v.get(p).cloned());
    match v {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => "null".to_string(),
    }
}

/// Everything the engine knows.
#[derive(Debug, Default)]
pub struct State {
    pub workflows: HashMap<String, Workflow>,
    pub runs: HashMap<String, Run>,
    pub run_order: Vec<String>,
    pub tasks: HashMap<String, Task>,
    pub queue: VecDeque<String>,
    pub workers: HashMap<String, Worker>,
    pub run_subs: HashMap<u64, RunSubscriber>,
    pub event_subs: HashMap<u64, EventSubscriber>,
    pub events: VecDeque<StoredEvent>,
    pub event_seq: u64,
    pub idempotency: HashMap<(String, String), (String, Instant)>,
    pub rate_limits: BTreeMap<String, RateLimit>,
    pub durable: DurableState,
    pub next_id: u64,
    /// REST crons (`CronWorkflows` objects).
    pub crons: Vec<Value>,
    /// REST schedules (`ScheduledWorkflows` objects).
    pub scheduled: Vec<Value>,
    /// Subscribe messages received on `SubscribeToWorkflowRuns` streams (tests count replays).
    pub run_subscribe_messages: u64,
    /// Messages received on `ListenForDurableEvent` streams.
    pub durable_event_listen_messages: u64,
    /// Runs held by a full concurrency group, in arrival order (see `concurrency.rs`).
    pub held_runs: HashMap<super::concurrency::Group, VecDeque<String>>,
    /// When crons and schedules were last checked (Unix seconds), see `fire_calendar`.
    pub calendar_checked: Option<i64>,
    /// Fault injection: rewrite the next assignments (bad payloads, unknown enums).
    pub mutate_actions: Option<ActionMutator>,
    /// Fault injection: assign beyond the workers' slots (a flood).
    pub over_assign: bool,
    /// Deadlines of running attempts, earliest first (see `expire_timeouts`).
    pub deadlines: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, String)>>,
}

/// Rewrites the next `remaining` assignments.
#[derive(Clone)]
pub struct ActionMutator {
    pub remaining: u32,
    pub f: std::sync::Arc<dyn Fn(&mut proto::AssignedAction) + Send + Sync>,
}

impl std::fmt::Debug for ActionMutator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ActionMutator({} left)", self.remaining)
    }
}

/// Events kept for durable look-back and REST reads.
const EVENTS_KEPT: usize = 10_000;

/// The engine: state plus the notifier that wakes the scheduler.
#[derive(Debug)]
pub struct Engine {
    pub state: Mutex<State>,
    pub wake: Notify,
    pub tenant_id: String,
    /// Running tasks of a worker silent this long are requeued ([`REASSIGN_AFTER`] by default).
    pub reassign_after: Duration,
    /// What GetVersion answers ([`ENGINE_VERSION`] by default).
    pub version: String,
}

impl Engine {
    /// A new, empty engine for `tenant_id`.
    pub fn new(tenant_id: String, reassign_after: Duration, version: String) -> Self {
        Engine {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            tenant_id,
            reassign_after,
            version,
        }
    }

    // ===== registration =====

    /// `v1.AdminService/PutWorkflow`.
    pub fn put_workflow(
        &self,
        mut req: v1::CreateWorkflowVersionRequest,
    ) -> Result<v1::CreateWorkflowVersionResponse, GrpcStatus> {
        if req.name.trim().is_empty() {
            return Err(GrpcStatus::invalid_argument("workflow name is required"));
        }
        if req.tasks.is_empty() {
            return Err(GrpcStatus::invalid_argument(
                "a workflow needs at least one task",
            ));
        }
        let mut tasks = Vec::with_capacity(req.tasks.len());
        let ids: HashSet<&str> = req.tasks.iter().map(|t| t.readable_id.as_str()).collect();
        for t in &req.tasks {
            if t.readable_id.is_empty() || t.action.is_empty() {
                return Err(GrpcStatus::invalid_argument(
                    "every task needs readable_id and action",
                ));
            }
            for p in &t.parents {
                if !ids.contains(p.as_str()) {
                    return Err(GrpcStatus::invalid_argument(format!(
                        "task {} names unknown parent {p}",
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
                parents: t.parents.clone(),
                timeout,
                retries: t.retries.max(0),
                backoff_factor: t.backoff_factor,
                backoff_max_seconds: t.backoff_max_seconds,
                is_durable: t.is_durable,
                slot_requests: t.slot_requests.clone(),
            });
        }
        let crons = std::mem::take(&mut req.cron_triggers);
        for c in &crons {
            super::cron::Cron::parse(c).map_err(GrpcStatus::invalid_argument)?;
        }
        let name = req.name.clone();
        let cron_input = match req.cron_input.as_deref() {
            Some(text) => parse_json("cron_input", text)?,
            None => Value::Object(Default::default()),
        };
        let mut st = self.state.lock();
        let id = st
            .workflows
            .get(&req.name)
            .map(|w| w.id.clone())
            .unwrap_or_else(new_id);
        let version_id = new_id();
        st.workflows.insert(
            req.name.clone(),
            Workflow {
                id: id.clone(),
                version_id: version_id.clone(),
                name: req.name,
                tasks,
                event_triggers: req.event_triggers,
                idempotency: req.idempotency,
                concurrency: super::concurrency::Limit::from_proto(
                    req.concurrency.into_iter().chain(req.concurrency_arr),
                ),
                created_at: SystemTime::now(),
            },
        );
        let planned = super::schedules::Planned {
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
    pub fn register(
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
        if slot_limits.is_empty() {
            slot_limits.insert("default".into(), req.slots.unwrap_or(100));
        }
        let id = new_id();
        let labels = req
            .labels
            .iter()
            .map(|(k, v)| {
                let val = v
                    .str_value
                    .clone()
                    .or(v.int_value.map(|i| i.to_string()))
                    .unwrap_or_default();
                (k.clone(), val)
            })
            .collect();
        let now = Instant::now();
        let worker = Worker {
            id: id.clone(),
            name: req.worker_name.clone(),
            actions: req.actions.iter().map(|a| a.to_lowercase()).collect(),
            slot_limits,
            slots_used: BTreeMap::new(),
            sessions: Vec::new(),
            last_heartbeat: now,
            last_heartbeat_at: SystemTime::now(),
            ever_listened: false,
            labels,
            runtime_info: req.runtime_info,
            paused: false,
            created_at: SystemTime::now(),
            last_listener_established: None,
        };
        self.state.lock().workers.insert(id.clone(), worker);
        Ok(proto::WorkerRegisterResponse {
            tenant_id: self.tenant_id.clone(),
            worker_id: id,
            worker_name: req.worker_name,
        })
    }

    /// Opens a listener session (`ListenV2`, or `Listen` when `legacy`).
    pub fn open_session(
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
        w.last_listener_established = Some(SystemTime::now());
        if legacy {
            w.last_heartbeat = Instant::now();
        }
        drop(st);
        self.wake.notify_one();
        Ok((sid, rx))
    }

    /// Closes a listener session (the stream ended).
    pub fn close_session(&self, worker_id: &str, session: u64) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(worker_id) {
            w.sessions.retain(|s| s.id != session);
        }
    }

    /// `Dispatcher/Heartbeat`.
    pub fn heartbeat(&self, worker_id: &str) -> Result<(), GrpcStatus> {
        check_uuid("worker_id", worker_id)?;
        let mut st = self.state.lock();
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| GrpcStatus::not_found("worker not found"))?;
        if w.ever_listened && w.sessions.is_empty() {
            return Err(GrpcStatus::failed_precondition(
                "Heartbeat rejected: worker stream is not active",
            ));
        }
        w.last_heartbeat = Instant::now();
        w.last_heartbeat_at = SystemTime::now();
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// `Dispatcher/Unsubscribe`: drops the worker's routing.
    pub fn unsubscribe(&self, worker_id: &str) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(worker_id) {
            w.sessions.clear();
        }
    }

    /// `Dispatcher/UpsertWorkerLabels`.
    pub fn upsert_labels(
        &self,
        worker_id: &str,
        labels: &HashMap<String, proto::WorkerLabels>,
    ) -> Result<(), GrpcStatus> {
        let mut st = self.state.lock();
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| GrpcStatus::not_found("worker not found"))?;
        for (k, v) in labels {
            let val = v
                .str_value
                .clone()
                .or(v.int_value.map(|i| i.to_string()))
                .unwrap_or_default();
            w.labels.insert(k.clone(), val);
        }
        Ok(())
    }

    // ===== triggering =====

    /// Creates a run of `req.name` (TriggerWorkflow, the DurableTask stream's trigger_runs).
    pub fn trigger(&self, req: &v1::TriggerWorkflowRequest) -> Result<String, GrpcStatus> {
        let input = parse_json("input", &req.input)?;
        let meta = parse_metadata(req.additional_metadata.as_deref())?;
        if let Some(p) = req.priority
            && !(1..=3).contains(&p)
        {
            return Err(GrpcStatus::invalid_argument("priority must be 1, 2 or 3"));
        }
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
                priority: req.priority.unwrap_or(1),
                event: None,
            },
        )?;
        drop(st);
        self.wake.notify_one();
        Ok(id)
    }

    /// `EventsService/Push`: stores the event and starts every workflow it triggers.
    pub fn push(&self, req: &proto::PushEventRequest) -> Result<proto::Event, GrpcStatus> {
        if req.key.is_empty() {
            return Err(GrpcStatus::invalid_argument("event key is required"));
        }
        let payload = parse_json("payload", &req.payload)?;
        let meta = parse_metadata(req.additional_metadata.as_deref())?;
        let at = SystemTime::now();
        let mut st = self.state.lock();
        st.event_seq += 1;
        let ev = StoredEvent {
            id: new_id(),
            key: req.key.clone(),
            payload: payload.clone(),
            at,
            seq: st.event_seq,
        };
        st.events.push_back(ev.clone());
        if st.events.len() > EVENTS_KEPT {
            st.events.pop_front();
        }
        let targets: Vec<String> = st
            .workflows
            .values()
            .filter(|w| w.event_triggers.iter().any(|t| key_matches(t, &req.key)))
            .map(|w| w.name.clone())
            .collect();
        for name in targets {
            st.create_run(
                &self.tenant_id,
                &name,
                payload.clone(),
                meta.clone(),
                TriggerOpts {
                    event: Some((ev.id.clone(), ev.key.clone())),
                    priority: req.priority.unwrap_or(1),
                    ..TriggerOpts::default()
                },
            )?;
        }
        st.durable_event_pushed(&ev);
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
    pub fn step_event(
        &self,
        ev: &proto::StepActionEvent,
    ) -> Result<proto::ActionEventResponse, GrpcStatus> {
        use proto::StepActionEventType as E;
        check_uuid("task_run_external_id", &ev.task_run_external_id)?;
        let kind = E::try_from(ev.event_type)
            .map_err(|_| GrpcStatus::invalid_argument("unknown event_type"))?;
        let mut st = self.state.lock();
        let task = st
            .tasks
            .get(&ev.task_run_external_id)
            .ok_or_else(|| GrpcStatus::invalid_argument("task not found for this tenant"))?;
        let retry_count = ev.retry_count.unwrap_or(task.retry_count);
        let stale = retry_count != task.retry_count || task.status.is_terminal();
        match kind {
            E::StepEventTypeUnknown => {
                return Err(GrpcStatus::invalid_argument("event_type UNKNOWN"));
            }
            E::StepEventTypeStarted | E::StepEventTypeAcknowledged => {
                if !stale && let Some(t) = st.tasks.get_mut(&ev.task_run_external_id) {
                    t.started_at.get_or_insert_with(SystemTime::now);
                }
            }
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
    pub fn refresh_timeout(&self, task_id: &str, by: &str) -> Result<SystemTime, GrpcStatus> {
        let inc = parse_duration(by).ok_or_else(|| {
            GrpcStatus::invalid_argument("increment_timeout_by is not a duration")
        })?;
        let mut st = self.state.lock();
        let t = st
            .tasks
            .get_mut(task_id)
            .filter(|t| t.status == Status::Running)
            .ok_or_else(|| GrpcStatus::not_found("task is not running"))?;
        let base = t.deadline.unwrap_or_else(Instant::now);
        let at = base + inc;
        t.deadline = Some(at);
        let id = t.id.clone();
        st.deadlines.push(std::cmp::Reverse((at, id)));
        Ok(SystemTime::now() + at.saturating_duration_since(Instant::now()))
    }

    /// `Dispatcher/ReleaseSlot`.
    pub fn release_slot(&self, task_id: &str) -> Result<(), GrpcStatus> {
        let mut st = self.state.lock();
        if !st.tasks.contains_key(task_id) {
            return Err(GrpcStatus::not_found("task not found"));
        }
        st.free_slot(task_id);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// `EventsService/PutLog`.
    pub fn put_log(&self, req: &proto::PutLogRequest) {
        let mut st = self.state.lock();
        if let Some(t) = st.tasks.get_mut(&req.task_run_external_id)
            && t.logs.len() < 1000
        {
            let level = req.level.clone().unwrap_or_else(|| "INFO".into());
            t.logs.push((
                SystemTime::now(),
                level,
                req.message.chars().take(10_000).collect(),
            ));
        }
    }

    /// `EventsService/PutStreamEvent`: fans a chunk out to the run's event subscribers.
    pub fn put_stream_event(&self, req: &proto::PutStreamEventRequest) -> Result<(), GrpcStatus> {
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
            event_timestamp: Some(timestamp(SystemTime::now())),
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
    pub fn open_run_subscription(
        &self,
    ) -> (
        u64,
        mpsc::UnboundedReceiver<Result<proto::WorkflowRunEvent, GrpcStatus>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.state.lock();
        st.next_id += 1;
        let id = st.next_id;
        st.run_subs.insert(
            id,
            RunSubscriber {
                tx,
                pending: HashSet::new(),
            },
        );
        (id, rx)
    }

    /// Adds a run id to a subscription; a finished run is delivered at once.
    pub fn subscribe_run(&self, sub: u64, run_id: &str) {
        let mut st = self.state.lock();
        st.run_subscribe_messages += 1;
        if uuid::Uuid::parse_str(run_id).is_err() {
            return; // invalid ids are skipped silently, as the engine does
        }
        let finished = st
            .runs
            .get(run_id)
            .filter(|r| r.status.is_terminal())
            .map(|r| st.run_event(r));
        if let Some(s) = st.run_subs.get_mut(&sub) {
            match finished {
                Some(ev) => {
                    let _ = s.tx.send(Ok(ev));
                }
                None => {
                    s.pending.insert(run_id.to_string());
                }
            }
        }
    }

    /// Closes a subscription.
    pub fn close_run_subscription(&self, sub: u64) {
        self.state.lock().run_subs.remove(&sub);
    }

    /// Opens a `SubscribeToWorkflowEvents` stream. `None` for the run means "already finished":
    /// the caller ends the stream at once.
    #[allow(clippy::type_complexity)]
    pub fn open_event_subscription(
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
        st.next_id += 1;
        let id = st.next_id;
        st.event_subs.insert(id, EventSubscriber { tx, filter });
        Ok(Some(rx))
    }

    /// `v1.AdminService/GetRunDetails`.
    pub fn run_details(&self, run_id: &str) -> Result<v1::GetRunDetailsResponse, GrpcStatus> {
        let st = self.state.lock();
        let run = st
            .runs
            .get(run_id)
            .ok_or_else(|| GrpcStatus::not_found("run not found"))?;
        let mut task_runs = HashMap::new();
        for tid in &run.tasks {
            if let Some(t) = st.tasks.get(tid) {
                task_runs.insert(
                    t.readable_id.clone(),
                    v1::TaskRunDetail {
                        external_id: t.id.clone(),
                        status: t.status.v1(),
                        error: t.error.clone(),
                        output: t.output.clone().map(String::into_bytes),
                        readable_id: t.readable_id.clone(),
                        is_evicted: t.evicted,
                    },
                );
            }
        }
        Ok(v1::GetRunDetailsResponse {
            input: run.input.to_string().into_bytes(),
            status: run.status.v1(),
            task_runs,
            done: run.status.is_terminal(),
            additional_metadata: Value::Object(run.additional_metadata.clone())
                .to_string()
                .into_bytes(),
            is_evicted: false,
        })
    }

    /// `v1.AdminService/CancelTasks` (by ids; a filter cancels matching tasks too).
    pub fn cancel_tasks(&self, ids: &[String]) -> Vec<String> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for id in ids {
            // A run id cancels its tasks.
            let tasks: Vec<String> = match st.runs.get(id) {
                Some(r) => r.tasks.clone(),
                None => vec![id.clone()],
            };
            for t in tasks {
                if st.tasks.get(&t).is_some_and(|x| !x.status.is_terminal()) {
                    st.cancel_task(&t, "task was cancelled");
                    out.push(t);
                }
            }
        }
        drop(st);
        self.wake.notify_one();
        out
    }

    /// `v1.AdminService/ReplayTasks`: requeues finished tasks as a new attempt.
    pub fn replay_tasks(&self, ids: &[String]) -> Vec<String> {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for id in ids {
            let Some(t) = st.tasks.get_mut(id) else {
                continue;
            };
            if !t.status.is_terminal() {
                continue;
            }
            t.retry_count += 1;
            t.status = Status::Queued;
            t.output = None;
            t.error = None;
            t.finished_at = None;
            t.not_before = None;
            let run_id = t.run_id.clone();
            st.queue.push_back(id.clone());
            if let Some(r) = st.runs.get_mut(&run_id) {
                r.status = Status::Running;
                r.finished_at = None;
            }
            out.push(id.clone());
        }
        drop(st);
        self.wake.notify_one();
        out
    }

    /// `WorkflowService/PutRateLimit`.
    pub fn put_rate_limit(&self, req: &proto::PutRateLimitRequest) -> Result<(), GrpcStatus> {
        if req.key.is_empty() {
            return Err(GrpcStatus::invalid_argument("rate limit key is required"));
        }
        let duration = proto::RateLimitDuration::try_from(req.duration)
            .map(|d| d.as_str_name().to_string())
            .unwrap_or_else(|_| "SECOND".into());
        self.state.lock().rate_limits.insert(
            req.key.clone(),
            RateLimit {
                key: req.key.clone(),
                limit: req.limit,
                duration,
                set_at: SystemTime::now(),
            },
        );
        Ok(())
    }

    // ===== scheduling =====

    /// One scheduler pass at `now`: reassignment, timeouts, durable sleeps, then assignment.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut st = self.state.lock();
        st.reap_silent_workers(now, self.reassign_after);
        st.expire_timeouts(now);
        st.durable_tick(now);
        st.fire_calendar(SystemTime::now());
        // A worker silent long enough to lose its tasks is never live (matters when tests make
        // the reassignment window shorter than the liveness window).
        st.assign(now, LIVE_HEARTBEAT.min(self.reassign_after));
    }

    /// Ends every stream the engine feeds (restart, shutdown): workers see EOF and become
    /// inactive, subscribers see EOF. State is kept.
    pub fn hang_up_all(&self) {
        let mut st = self.state.lock();
        for w in st.workers.values_mut() {
            w.sessions.clear();
        }
        st.run_subs.clear();
        st.event_subs.clear();
        st.durable.streams.clear();
    }
}

/// Options of one run creation.
#[derive(Debug, Default, Clone)]
pub struct TriggerOpts {
    pub parent_task: Option<String>,
    pub child_index: Option<i32>,
    pub child_key: Option<String>,
    pub priority: i32,
    pub event: Option<(String, String)>,
}

impl State {
    /// Creates a run and queues its root tasks. Child dedupe and idempotency keys apply.
    pub fn create_run(
        &mut self,
        tenant: &str,
        name: &str,
        input: Value,
        meta: serde_json::Map<String, Value>,
        opts: TriggerOpts,
    ) -> Result<String, GrpcStatus> {
        let _ = tenant;
        let wf = self.workflows.get(name).cloned().ok_or_else(|| {
            GrpcStatus::invalid_argument(format!("workflow names not found: {name}"))
        })?;
        // Child dedupe: the same parent and index/key returns the existing run.
        let child_slot = match (&opts.parent_task, &opts.child_key, opts.child_index) {
            (Some(p), Some(k), _) => Some((p.clone(), format!("key:{k}"))),
            (Some(p), None, Some(i)) => Some((p.clone(), format!("index:{i}"))),
            _ => None,
        };
        if let Some((p, k)) = &child_slot
            && let Some(existing) = self.tasks.get(p).and_then(|t| t.children.get(k))
        {
            return Ok(existing.clone());
        }
        // Workflow idempotency: a live key collides.
        let mut idem = None;
        if let Some(cfg) = &wf.idempotency {
            let key = key_of_expression(&cfg.expression, &input, &meta);
            let now = Instant::now();
            let collision = self
                .idempotency
                .get(&(name.to_string(), key.clone()))
                .filter(|(run, until)| {
                    let by_status = cfg.method == Some(v1::IdempotencyMethod::Status as i32);
                    if by_status {
                        self.runs.get(run).is_some_and(|r| {
                            !r.status.is_terminal() || r.status == Status::Completed
                        })
                    } else {
                        *until > now
                    }
                })
                .map(|(run, _)| run.clone());
            if let Some(existing) = collision {
                return Err(idempotency_collision(&existing));
            }
            let ttl = Duration::from_millis(cfg.ttl_ms.max(0) as u64);
            idem = Some((
                key,
                now + if ttl.is_zero() {
                    Duration::from_secs(86_400)
                } else {
                    ttl
                },
            ));
        }

        let single = wf.tasks.len() == 1;
        let run_id = new_id();
        let now = SystemTime::now();
        let mut meta = meta;
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
        let mut task_ids = Vec::new();
        for def in &wf.tasks {
            let id = if single { run_id.clone() } else { new_id() };
            let slot_type = def.slot_requests.keys().next().cloned().unwrap_or_else(|| {
                if def.is_durable {
                    "durable".into()
                } else {
                    "default".into()
                }
            });
            let status = if def.parents.is_empty() {
                Status::Queued
            } else {
                Status::Pending
            };
            self.tasks.insert(
                id.clone(),
                Task {
                    id: id.clone(),
                    run_id: run_id.clone(),
                    readable_id: def.readable_id.clone(),
                    action: def.action.clone(),
                    status,
                    retry_count: 0,
                    user_retries_used: 0,
                    retries: def.retries,
                    timeout: def.timeout,
                    parents: def.parents.clone(),
                    output: None,
                    error: None,
                    worker_id: None,
                    slot_type,
                    slot_held: false,
                    deadline: None,
                    not_before: None,
                    is_durable: def.is_durable,
                    invocation_count: 0,
                    evicted: false,
                    created_at: now,
                    started_at: None,
                    finished_at: None,
                    backoff_factor: def.backoff_factor,
                    backoff_max_seconds: def.backoff_max_seconds,
                    children: HashMap::new(),
                    logs: Vec::new(),
                    held: false,
                },
            );
            if status == Status::Queued {
                self.queue.push_back(id.clone());
            }
            task_ids.push(id);
        }
        let run = Run {
            id: run_id.clone(),
            workflow_name: name.to_string(),
            workflow_id: wf.id.clone(),
            workflow_version_id: wf.version_id.clone(),
            input,
            additional_metadata: meta,
            status: Status::Queued,
            tasks: task_ids.clone(),
            parent_task_id: opts.parent_task.clone(),
            child_index: opts.child_index,
            child_key: opts.child_key.clone(),
            priority: opts.priority,
            created_at: now,
            started_at: None,
            finished_at: None,
            triggering_event: opts.event,
            held: false,
            groups: Vec::new(),
        };
        self.runs.insert(run_id.clone(), run);
        self.run_order.push(run_id.clone());
        if let Some((key, until)) = idem {
            self.idempotency
                .insert((name.to_string(), key), (run_id.clone(), until));
        }
        if let Some((p, k)) = child_slot
            && let Some(pt) = self.tasks.get_mut(&p)
        {
            pt.children.insert(k, run_id.clone());
        }
        // Metadata subscribers start tracking the new run; task creation is STEP_RUN/STARTED.
        self.track_metadata_subscribers(&run_id);
        self.apply_concurrency(&run_id);
        for tid in &task_ids {
            if self
                .tasks
                .get(tid)
                .is_some_and(|t| t.status == Status::Queued)
            {
                self.emit_task_event(tid, proto::ResourceEventType::Started, String::new());
            }
        }
        Ok(run_id)
    }

    /// Completes every queued task of `workflow`'s runs with `{}` (a bench and test control:
    /// finishes runs without a worker). Returns how many tasks it completed.
    pub fn complete_all_queued(&mut self, workflow: &str) -> usize {
        let ids: Vec<String> = self
            .tasks
            .values()
            .filter(|t| {
                t.status == Status::Queued
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
        self.queue.retain(|id| {
            self.tasks
                .get(id)
                .is_some_and(|t| t.status == Status::Queued)
        });
        ids.len()
    }

    fn worker_is_live(w: &Worker, now: Instant, live: Duration) -> bool {
        !w.paused
            && !w.sessions.is_empty()
            && (w.sessions.iter().any(|s| s.legacy)
                || now.saturating_duration_since(w.last_heartbeat) < live)
    }

    /// Assigns queued tasks to live workers with free slots, in queue order.
    pub fn assign(&mut self, now: Instant, live: Duration) {
        let over_assign = self.over_assign;
        // Nothing to do unless some live worker has a free slot: skip the queue scan.
        let capacity = self.workers.values().any(|w| {
            Self::worker_is_live(w, now, live)
                && (over_assign
                    || w.slot_limits
                        .iter()
                        .any(|(k, lim)| w.slots_used.get(k).copied().unwrap_or(0) < *lim))
        });
        if self.queue.is_empty() || !capacity {
            return;
        }
        let mut keep = VecDeque::with_capacity(self.queue.len());
        while let Some(tid) = self.queue.pop_front() {
            let Some(task) = self.tasks.get(&tid) else {
                continue;
            };
            if task.status != Status::Queued {
                continue;
            }
            if task.not_before.is_some_and(|t| t > now) {
                keep.push_back(tid);
                continue;
            }
            let action = task.action.clone();
            let wanted = task.slot_type.clone();
            let chosen = self.workers.values().find_map(|w| {
                if !w.actions.contains(&action) || !Self::worker_is_live(w, now, live) {
                    return None;
                }
                let slot = if w.slot_limits.contains_key(&wanted) {
                    wanted.clone()
                } else {
                    "default".to_string()
                };
                let limit = w.slot_limits.get(&slot).copied().unwrap_or(0);
                let used = w.slots_used.get(&slot).copied().unwrap_or(0);
                (used < limit || over_assign).then(|| (w.id.clone(), slot))
            });
            let Some((wid, slot)) = chosen else {
                keep.push_back(tid);
                continue;
            };
            let mut action_msg = self.assigned_action(&tid, proto::ActionType::StartStepRun);
            if let Some(m) = &mut self.mutate_actions {
                (m.f)(&mut action_msg);
                m.remaining -= 1;
                if m.remaining == 0 {
                    self.mutate_actions = None;
                }
            }
            let w = self.workers.get_mut(&wid).expect("chosen worker exists");
            let sent = w
                .sessions
                .iter()
                .rev()
                .any(|s| s.tx.try_send(Ok(action_msg.clone())).is_ok());
            if !sent {
                keep.push_back(tid);
                continue;
            }
            *w.slots_used.entry(slot.clone()).or_default() += 1;
            let run_id = {
                let t = self.tasks.get_mut(&tid).expect("task exists");
                t.status = Status::Running;
                t.worker_id = Some(wid);
                t.slot_type = slot;
                t.slot_held = true;
                t.deadline = Some(now + t.timeout);
                t.started_at = Some(SystemTime::now());
                let run = t.run_id.clone();
                self.deadlines
                    .push(std::cmp::Reverse((now + t.timeout, tid.clone())));
                run
            };
            if let Some(r) = self.runs.get_mut(&run_id)
                && r.status == Status::Queued
            {
                r.status = Status::Running;
                r.started_at = Some(SystemTime::now());
            }
        }
        self.queue = keep;
    }

    /// The AssignedAction for a task's current attempt (START increments the invocation count
    /// of durable tasks).
    fn assigned_action(&mut self, tid: &str, kind: proto::ActionType) -> proto::AssignedAction {
        let (run_id, parents) = {
            let t = &self.tasks[tid];
            (t.run_id.clone(), t.parents.clone())
        };
        if kind == proto::ActionType::StartStepRun
            && let Some(t) = self.tasks.get_mut(tid)
            && t.is_durable
        {
            t.invocation_count += 1;
            t.evicted = false;
        }
        let t = &self.tasks[tid];
        let run = &self.runs[&run_id];
        let mut parent_outputs = serde_json::Map::new();
        for p in &parents {
            if let Some(pt) = run
                .tasks
                .iter()
                .filter_map(|id| self.tasks.get(id))
                .find(|x| &x.readable_id == p)
            {
                let out = pt
                    .output
                    .as_deref()
                    .and_then(|o| serde_json::from_str(o).ok())
                    .unwrap_or(Value::Null);
                parent_outputs.insert(p.clone(), out);
            }
        }
        let payload = if kind == proto::ActionType::StartStepRun {
            serde_json::json!({
                "input": run.input,
                "parents": parent_outputs,
                "triggers": {"filter_payload": null},
                "triggered_by": "manual",
                "user_data": null,
                "overrides": null,
            })
            .to_string()
        } else {
            String::new()
        };
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

    /// Returns the task's slot to its worker.
    pub fn free_slot(&mut self, tid: &str) {
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
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

    fn complete_task(&mut self, tid: &str, output: String) {
        self.free_slot(tid);
        let run_id = {
            let Some(t) = self.tasks.get_mut(tid) else {
                return;
            };
            t.status = Status::Completed;
            t.output = Some(output.clone());
            t.finished_at = Some(SystemTime::now());
            t.deadline = None;
            t.run_id.clone()
        };
        self.emit_task_event(tid, proto::ResourceEventType::Completed, output);
        self.durable_task_finished(tid);
        // Children whose parents are all done become queued.
        let readable: HashMap<String, Status> = self.runs[&run_id]
            .tasks
            .iter()
            .filter_map(|id| self.tasks.get(id))
            .map(|t| (t.readable_id.clone(), t.status))
            .collect();
        let ready: Vec<String> = self.runs[&run_id]
            .tasks
            .iter()
            .filter(|id| {
                self.tasks.get(*id).is_some_and(|t| {
                    t.status == Status::Pending
                        && t.parents
                            .iter()
                            .all(|p| readable.get(p) == Some(&Status::Completed))
                })
            })
            .cloned()
            .collect();
        for id in ready {
            if let Some(t) = self.tasks.get_mut(&id) {
                t.status = Status::Queued;
            }
            self.queue.push_back(id.clone());
            self.emit_task_event(&id, proto::ResourceEventType::Started, String::new());
        }
        self.maybe_finish_run(&run_id);
    }

    /// Fails the current attempt: retried with backoff while retries remain, else final.
    pub fn fail_attempt(&mut self, tid: &str, error: String, no_retry: bool) {
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        t.deadline = None;
        if !no_retry && t.user_retries_used < t.retries {
            t.user_retries_used += 1;
            t.retry_count += 1;
            t.status = Status::Queued;
            t.worker_id = None;
            let factor = f64::from(t.backoff_factor.unwrap_or(0.0));
            let delay = if factor > 0.0 {
                let max = f64::from(t.backoff_max_seconds.unwrap_or(60).max(1));
                Duration::from_secs_f64(factor.powi(t.user_retries_used).min(max))
            } else {
                Duration::ZERO
            };
            t.not_before = Some(Instant::now() + delay);
            self.queue.push_back(tid.to_string());
            return;
        }
        t.status = Status::Failed;
        t.error = Some(error.clone());
        t.finished_at = Some(SystemTime::now());
        let run_id = t.run_id.clone();
        self.emit_task_event(tid, proto::ResourceEventType::Failed, error);
        self.durable_task_finished(tid);
        self.cancel_pending_of_run(&run_id);
        self.maybe_finish_run(&run_id);
    }

    /// Requeues an attempt for an internal reason (send failure, silent worker). Does not use the
    /// task's retries; capped by [`MAX_INTERNAL_RETRIES`].
    fn requeue_internal(&mut self, tid: &str, reason: &str) {
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        let internal = t.retry_count - t.user_retries_used;
        if internal >= MAX_INTERNAL_RETRIES {
            self.fail_attempt(
                tid,
                format!("Task reached its maximum reassignment count: {reason}"),
                true,
            );
            return;
        }
        t.retry_count += 1;
        t.status = Status::Queued;
        t.worker_id = None;
        t.deadline = None;
        t.not_before = None;
        self.queue.push_back(tid.to_string());
    }

    /// Cancels a task (and fails its run's pending tasks).
    pub fn cancel_task(&mut self, tid: &str, why: &str) {
        let Some(t) = self.tasks.get(tid) else { return };
        if t.status.is_terminal() {
            return;
        }
        if t.status == Status::Running {
            let msg = self.assigned_action(tid, proto::ActionType::CancelStepRun);
            self.send_to_worker(tid, msg);
        }
        self.free_slot(tid);
        let Some(t) = self.tasks.get_mut(tid) else {
            return;
        };
        t.status = Status::Cancelled;
        t.error = Some(why.to_string());
        t.finished_at = Some(SystemTime::now());
        t.deadline = None;
        let run_id = t.run_id.clone();
        self.emit_task_event(tid, proto::ResourceEventType::Cancelled, why.to_string());
        self.durable_task_finished(tid);
        self.cancel_pending_of_run(&run_id);
        self.maybe_finish_run(&run_id);
    }

    fn send_to_worker(&mut self, tid: &str, msg: proto::AssignedAction) {
        let Some(wid) = self.tasks.get(tid).and_then(|t| t.worker_id.clone()) else {
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

    fn cancel_pending_of_run(&mut self, run_id: &str) {
        let pending: Vec<String> = self.runs[run_id]
            .tasks
            .iter()
            .filter(|id| {
                self.tasks
                    .get(*id)
                    .is_some_and(|t| matches!(t.status, Status::Pending | Status::Queued))
            })
            .cloned()
            .collect();
        for id in pending {
            if let Some(t) = self.tasks.get_mut(&id) {
                t.status = Status::Cancelled;
                t.error = Some("task was cancelled: an upstream task failed".into());
                t.finished_at = Some(SystemTime::now());
            }
        }
    }

    fn maybe_finish_run(&mut self, run_id: &str) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        let statuses: Vec<Status> = run
            .tasks
            .iter()
            .filter_map(|t| self.tasks.get(t))
            .map(|t| t.status)
            .collect();
        if !statuses.iter().all(|s| s.is_terminal()) || run.status.is_terminal() {
            return;
        }
        let status = if statuses.contains(&Status::Failed) {
            Status::Failed
        } else if statuses.contains(&Status::Cancelled) {
            Status::Cancelled
        } else {
            Status::Completed
        };
        if let Some(r) = self.runs.get_mut(run_id) {
            r.status = status;
            r.finished_at = Some(SystemTime::now());
        }
        let event = self.run_event(&self.runs[run_id]);
        for sub in self.run_subs.values_mut() {
            if sub.pending.remove(run_id) {
                let _ = sub.tx.send(Ok(event.clone()));
            }
        }
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
    pub fn run_event(&self, run: &Run) -> proto::WorkflowRunEvent {
        let results = run
            .tasks
            .iter()
            .filter_map(|id| self.tasks.get(id))
            .map(|t| proto::StepRunResult {
                task_run_external_id: t.id.clone(),
                task_name: t.readable_id.clone(),
                job_run_id: t.id.clone(),
                error: t.error.clone(),
                output: if t.status == Status::Completed {
                    t.output.clone()
                } else {
                    None
                },
            })
            .collect();
        proto::WorkflowRunEvent {
            workflow_run_id: run.id.clone(),
            event_type: proto::WorkflowRunEventType::Finished as i32,
            event_timestamp: Some(timestamp(run.finished_at.unwrap_or_else(SystemTime::now))),
            results,
        }
    }

    fn reap_silent_workers(&mut self, now: Instant, after: Duration) {
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
                t.status == Status::Running
                    && !t.evicted
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
    fn expire_timeouts(&mut self, now: Instant) {
        let mut expired = Vec::new();
        while let Some(std::cmp::Reverse((at, _))) = self.deadlines.peek() {
            if *at > now {
                break;
            }
            let Some(std::cmp::Reverse((at, tid))) = self.deadlines.pop() else {
                break;
            };
            if self.tasks.get(&tid).is_some_and(|t| {
                t.status == Status::Running && !t.evicted && t.deadline == Some(at)
            }) {
                expired.push(tid);
            }
        }
        for tid in expired {
            let msg = self.assigned_action(&tid, proto::ActionType::CancelStepRun);
            self.send_to_worker(&tid, msg);
            let timeout = self.tasks[&tid].timeout;
            self.fail_attempt(
                &tid,
                format!("task timed out after {}s", timeout.as_secs()),
                false,
            );
        }
    }

    // ===== run events =====

    fn track_metadata_subscribers(&mut self, run_id: &str) {
        let meta = self.runs[run_id].additional_metadata.clone();
        for sub in self.event_subs.values_mut() {
            if let EventFilter::Metadata {
                key,
                value,
                tracked,
            } = &mut sub.filter
            {
                let matches = meta.get(key.as_str()).is_some_and(|v| match v {
                    Value::String(s) => s == value,
                    other => &other.to_string() == value,
                });
                if matches {
                    tracked.insert(run_id.to_string());
                }
            }
        }
    }

    pub(crate) fn emit_task_event(
        &self,
        tid: &str,
        kind: proto::ResourceEventType,
        payload: String,
    ) {
        let Some(t) = self.tasks.get(tid) else { return };
        let ev = proto::WorkflowEvent {
            workflow_run_id: t.run_id.clone(),
            resource_type: proto::ResourceType::StepRun as i32,
            event_type: kind as i32,
            resource_id: t.id.clone(),
            event_timestamp: Some(timestamp(SystemTime::now())),
            event_payload: payload,
            hangup: false,
            task_retries: Some(t.retries),
            retry_count: Some(t.retry_count),
            event_index: None,
        };
        self.publish_event(&t.run_id, ev);
    }

    /// Sends `ev` to every subscriber following `run_id`.
    pub fn publish_event(&self, run_id: &str, ev: proto::WorkflowEvent) {
        for sub in self.event_subs.values() {
            let follows = match &sub.filter {
                EventFilter::Run(id) => id == run_id,
                EventFilter::Metadata { tracked, .. } => tracked.contains(run_id),
            };
            if follows {
                let _ = sub.tx.send(Ok(ev.clone()));
            }
        }
    }

    fn emit_run_finished(&mut self, run_id: &str, kind: proto::ResourceEventType) {
        let base = proto::WorkflowEvent {
            workflow_run_id: run_id.to_string(),
            resource_type: proto::ResourceType::WorkflowRun as i32,
            event_type: kind as i32,
            resource_id: run_id.to_string(),
            event_timestamp: Some(timestamp(SystemTime::now())),
            event_payload: String::new(),
            hangup: false,
            task_retries: None,
            retry_count: None,
            event_index: None,
        };
        let mut done = Vec::new();
        for (id, sub) in self.event_subs.iter_mut() {
            match &mut sub.filter {
                EventFilter::Run(r) if r == run_id => {
                    let _ = sub.tx.send(Ok(proto::WorkflowEvent {
                        hangup: true,
                        ..base.clone()
                    }));
                    done.push(*id);
                }
                EventFilter::Metadata { tracked, .. } if tracked.contains(run_id) => {
                    if kind == proto::ResourceEventType::Completed {
                        tracked.remove(run_id);
                    }
                    let hangup = tracked.is_empty();
                    let _ = sub.tx.send(Ok(proto::WorkflowEvent {
                        hangup,
                        ..base.clone()
                    }));
                    if hangup {
                        done.push(*id);
                    }
                }
                _ => {}
            }
        }
        for id in done {
            self.event_subs.remove(&id);
        }
    }
}

/// The `ALREADY_EXISTS` status with a `v1.IdempotencyCollisionError` detail.
pub fn idempotency_collision(existing: &str) -> GrpcStatus {
    use prost::Message as _;
    let detail = v1::IdempotencyCollisionError {
        existing_run_external_id: existing.to_string(),
        colliding_run_external_id: new_id(),
    };
    let any = prost_types::Any {
        type_url: proto::IDEMPOTENCY_COLLISION_TYPE_URL.into(),
        value: detail.encode_to_vec(),
    };
    let status = proto::RpcStatus {
        code: tonic::Code::AlreadyExists as i32,
        message: "idempotency key collision".into(),
        details: vec![any],
    };
    GrpcStatus::with_details(
        tonic::Code::AlreadyExists,
        "idempotency key collision",
        status.encode_to_vec().into(),
    )
}

/// A fresh engine state that knows `workflow` (unit tests of the state's parts).
#[cfg(test)]
pub(crate) fn state_with(workflow: v1::CreateWorkflowVersionRequest) -> State {
    let engine = Engine::new("tenant".into(), Duration::from_secs(30), "v0.0.0".into());
    engine.put_workflow(workflow).expect("put");
    std::mem::take(&mut *engine.state.lock())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        for bad in ["", "s", "10", "10d", "-1s", "1.5s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn wildcards() {
        assert!(key_matches("order:*", "order:created"));
        assert!(key_matches("*", "anything"));
        assert!(key_matches("a*c", "abbbc"));
        assert!(!key_matches("order:*", "user:created"));
        assert!(!key_matches("order", "order:created"));
    }
}
