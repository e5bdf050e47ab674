//! The engine's state and its entry points (registration, triggering, worker events, results,
//! the scheduler's pass). The changes that cross rooms are the engine's actions, in `actions/`:
//! `runs.rs` (run lifecycle), `assign.rs` (assignment, slots, timeouts), `subscribers.rs`
//! (event streams), `admission.rs` (concurrency limits), `fire.rs` (crons and schedules), and the
//! rest; two stay beside the records they drive (`house.rs` names them): `store/readable.rs`
//! (the status pipeline) and `durable/log.rs` (the durable log's operations; the room in
//! `durable/mod.rs`).
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

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;
use tonic::Status as GrpcStatus;

use crate::durable::DurableState;
use crate::parse::{parse_json, parse_metadata};
use crate::store::model::Worker;
use hatchet_runtime::protocol as proto;
#[cfg(test)]
use hatchet_runtime::protocol::v1;

mod actions;
pub(crate) mod commands;
pub(crate) mod queries;
mod registration;
mod results;
mod scheduling;
pub(crate) mod stats;
mod triggering;
mod worker_events;

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
    /// Every task (see `store/table.rs`).
    pub tasks: crate::store::table::Tasks,
    pub queue: crate::sched::queue::TaskQueue,
    pub workers: HashMap<String, Worker>,
    /// Batch tasks' buffers and running batches (see `sched/batches.rs`).
    pub batches: crate::sched::batches::Batches,
    /// Open run and event subscriptions (see `store/subscriptions.rs`).
    pub subscriptions: crate::store::subscriptions::Subscriptions,
    /// The status pipeline: run changes on their way to REST, and run ends on their way to
    /// the run streams (see `store/readable.rs`).
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
    /// Runs held by a full concurrency group, in arrival order (see `sched/concurrency.rs`).
    pub held_runs: crate::sched::concurrency::Held,
    /// The fault switches (see `faults.rs`): the real engine's timing on by default
    /// (`DevEngineOptions::timing`), every other switch off.
    pub switches: crate::faults::Switches,
    /// What tests count (see `hub/stats.rs`).
    pub counters: crate::hub::stats::Counters,
    /// Condition sleeps of pending tasks, earliest first (see `time/timers.rs`; armed and
    /// fired by `actions/conditions.rs`).
    pub condition_sleeps: crate::time::timers::Timers,
    /// Pending tasks whose conditions wait for events.
    pub event_waiters: HashSet<String>,
    /// Event filters (see `dag/filters.rs`).
    pub filters: crate::dag::filters::Filters,
    /// Deadlines of running attempts, earliest first (see `time/timers.rs`; fired by
    /// `expire_timeouts` in `actions/assign.rs`).
    pub deadlines: crate::time::timers::Timers,
    /// Paused workflows and the tasks they hold (see `store/pause.rs`).
    pub pauses: crate::store::pause::Pauses,
    /// Incoming webhooks by name (see `store/webhooks.rs`).
    pub webhooks: crate::store::webhooks::Webhooks,
    /// Spans by trace, the SDKs' and the engine's own (see `traces/`).
    pub traces: crate::traces::Traces,
    /// The engine's clock (see `time/clock.rs`): every time the state reads comes from it.
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
