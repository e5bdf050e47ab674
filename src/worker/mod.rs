//! The worker: workflow registry, slots, execution, step events (CONTRACT.md §5).
//!
//! # Invariants
//!
//! 1. Registration is a message to the worker actor: PutWorkflow for each workflow; starting the
//!    worker registers it (Register, bounded like every synchronous path) before it returns, then
//!    hands the id to the actions listener. The worker owns its heartbeat ([`heartbeat`]): it
//!    runs from registration to the end of a drain, independent of the actions stream.
//! 2. Each assigned action runs in its own task, bounded by the slots (a semaphore), with its own
//!    cancellation token (a child of the worker's): CANCEL_STEP_RUN and shutdown fire it.
//! 3. One STARTED, then one COMPLETED or FAILED per attempt. The final event is retried until it
//!    is delivered or its attempt is stale (no heartbeat for [`STALE_AFTER`]: the engine has
//!    reassigned it); a transient outage never drops it.
//! 4. A panic in user code becomes a FAILED event; the worker lives on.
//! 6. A drain pauses the worker at the engine first (no new assignments), keeps heartbeating
//!    while running tasks finish and report their final events, then cancels what is left,
//!    stops the heartbeat and the actions listener, and unsubscribes (CONTRACT.md §5).
//! 5. Running attempts are keyed by (task run id, durable invocation, retry count): a repeated
//!    assignment of an attempt that already runs, or already ran here (the last 10,000), is
//!    ignored; CANCEL_STEP_RUN cancels every
//!    attempt of the task; a server eviction cancels the evicted invocation and older ones only
//!    (a newer invocation of the same task may run on this worker at the same time).

mod child_index;
pub(crate) mod conditions;
pub(crate) mod context;
mod drain;
pub(crate) mod duration;
mod finished;
pub(crate) mod heartbeat;
mod labels;
pub(crate) mod logs;
pub(crate) mod placement;
pub(crate) mod standalone;
mod state;
pub(crate) mod task;

pub(crate) use context::Context;
pub(crate) use task::{TaskDef, TaskError, Workflow};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::ClientCore;
use crate::connection::Connection;
use crate::error::{Error, Outcome};
use crate::listener::Listeners;
use crate::listener::actions::{self, ActionsKind, Registration, WorkerIdentity};
use crate::listener::durable_task::DurableClient;
use crate::listener::health::ListenerKind;
use crate::listener::stream::Home;
use crate::proto::{self, ActionType, StepActionEventType as E};

/// After this long without a successful heartbeat, the engine has reassigned our attempts.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(30);
/// Largest output a task may return: a step event must fit in one 4 MiB message, with room for
/// its other fields.
pub(crate) const MAX_OUTPUT_BYTES: usize = crate::transport::MAX_MESSAGE_BYTES - 64 * 1024;
/// Pause between delivery rounds of a final step event.
const REDELIVER_PAUSE: Duration = Duration::from_secs(1);

/// Options of the worker.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Worker name (`^[a-zA-Z0-9.\-_]+$`).
    pub name: String,
    /// Concurrent tasks (default slots).
    pub slots: usize,
    /// Concurrent durable tasks (durable slots; registered only when a task of the worker is
    /// durable, see [`WorkerOptions::durable_slots`]).
    pub durable_slots: usize,
    /// Labels (tasks can want or require them; see [`DesiredLabel`](crate::DesiredLabel)).
    pub labels: HashMap<String, placement::LabelValue>,
}

impl WorkerOptions {
    /// A worker named `name` with `slots` slots (and as many durable slots).
    pub fn new(name: impl Into<String>, slots: usize) -> Self {
        WorkerOptions {
            name: name.into(),
            slots,
            durable_slots: slots,
            labels: HashMap::new(),
        }
    }

    /// Sets the durable slots (default: as many as `slots`). The worker registers them only
    /// when one of its tasks is durable, as the official SDKs do: on the real engine, idle
    /// durable slots delay the refill of a plain task's slots (see the worker's `slot_config`).
    pub fn durable_slots(mut self, n: usize) -> Self {
        self.durable_slots = n;
        self
    }

    /// Adds the label `key` = `value` (a string or an int).
    pub fn label(
        mut self,
        key: impl Into<String>,
        value: impl Into<placement::LabelValue>,
    ) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// The slot pools a worker registers: `default` always (at least 1), `durable` (at least 1)
/// only when one of its tasks is durable or asks for durable slots, as the official SDKs do.
///
/// Why not always both: the real engine counts every pool of a worker, whatever its slot type,
/// when it decides whether a finished task should refill an action's slots at once
/// (`pkg/scheduling/v1`: it refills early only when the free slots fall to half the last count
/// or to zero). Idle durable slots keep that count high for a worker of plain tasks, so slots
/// came back only on its 1-1.5 s poll: 2,000 echo tasks took 57-69 s instead of ~20 s.
pub(crate) fn slot_config(
    slots: usize,
    durable_slots: usize,
    needs_durable: bool,
) -> HashMap<String, i32> {
    let clamp = |n: usize| i32::try_from(n.max(1)).unwrap_or(i32::MAX);
    let mut pools: HashMap<String, i32> = [("default".to_string(), clamp(slots))].into();
    if needs_durable {
        pools.insert("durable".to_string(), clamp(durable_slots));
    }
    pools
}

/// A running attempt: its task run id, its durable invocation (0 for a plain task) and its
/// retry count.
type RunningKey = (String, i32, i32);

fn running_key(a: &proto::AssignedAction) -> RunningKey {
    (
        a.task_run_external_id.clone(),
        a.durable_task_invocation_count.unwrap_or(0),
        a.retry_count,
    )
}

/// What the worker has done so far (for metrics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskCounts {
    /// Attempts started.
    pub started: u64,
    /// Attempts that reported COMPLETED.
    pub completed: u64,
    /// Attempts that reported FAILED (errors, panics, outputs over the limit).
    pub failed: u64,
    /// Attempts cancelled (CANCEL_STEP_RUN, eviction, shutdown): nothing reported.
    pub cancelled: u64,
    /// Slots of the worker (default and durable), 0 before it starts.
    pub slots: u64,
    /// Attempts running now.
    pub running: u64,
}

#[derive(Debug, Default)]
struct Counters {
    started: std::sync::atomic::AtomicU64,
    completed: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicU64,
    cancelled: std::sync::atomic::AtomicU64,
    slots: std::sync::atomic::AtomicU64,
}

/// The worker's state; lives outside the worker actor so an actor restart keeps it.
pub(crate) struct WorkerCore {
    conn: Connection,
    client: Arc<ClientCore>,
    listeners: Arc<Listeners>,
    /// Asks the stream supervisor to spawn the actions listener (its home is in `listeners`).
    spawn_actions: Box<dyn Fn() + Send + Sync>,
    handlers: Mutex<HashMap<String, Arc<TaskDef>>>,
    pub(crate) identity: Arc<WorkerIdentity>,
    running: Mutex<HashMap<RunningKey, CancellationToken>>,
    /// Attempts that ran here (invariant 5: the same attempt offered again does not run again).
    finished: finished::Finished<RunningKey>,
    /// Signalled whenever a running attempt ends (the drain waits on it).
    attempt_ended: Notify,
    tracker: TaskTracker,
    /// Cancels running tasks and the dispatch loop (end of a drain, shutdown).
    stop: CancellationToken,
    /// Ends the heartbeat (after the drain, once every final event is reported).
    heartbeat_stop: CancellationToken,
    /// Cuts a drain short: running tasks are cancelled at once (a second signal).
    drain_cut: CancellationToken,
    counters: Counters,
    started: AtomicBool,
    /// Workflow registrations in progress: a start waits for them, so a workflow whose
    /// `register` call was dropped after it was sent is still part of the worker.
    registering: tokio::sync::watch::Sender<usize>,
    /// The engine is older than v0.80.0: durable waits use the legacy event path.
    pub(crate) legacy_durable: AtomicBool,
    /// Task log lines on their way to the engine (started on first use).
    pub(crate) logs: std::sync::OnceLock<Arc<logs::LogQueue>>,
    /// What the worker registers with (its labels change with upserts), once started.
    /// Shared handler state, by type (`RuntimeHandle::set_state`, `Context::state`).
    pub(crate) state: state::StateMap,
    registration: Mutex<Option<Arc<Registration>>>,
}

impl std::fmt::Debug for WorkerCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCore")
            .field("running", &self.running.lock().len())
            .finish_non_exhaustive()
    }
}

impl WorkerCore {
    /// A worker that reaches the engine through `conn`, triggers children through `client`, and
    /// its listeners through `listeners`; `spawn_actions` starts the actions listener.
    pub(crate) fn new(
        conn: Connection,
        client: Arc<ClientCore>,
        listeners: Arc<Listeners>,
        identity: Arc<WorkerIdentity>,
        spawn_actions: Box<dyn Fn() + Send + Sync>,
    ) -> Self {
        let stop = conn.lifecycle().child_token();
        let heartbeat_stop = conn.lifecycle().child_token();
        WorkerCore {
            conn,
            client,
            listeners,
            spawn_actions,
            handlers: Mutex::default(),
            identity,
            registration: Mutex::default(),
            state: state::StateMap::default(),
            running: Mutex::default(),
            finished: finished::Finished::default(),
            attempt_ended: Notify::new(),
            tracker: TaskTracker::new(),
            stop,
            heartbeat_stop,
            drain_cut: CancellationToken::new(),
            counters: Counters::default(),
            started: AtomicBool::new(false),
            registering: tokio::sync::watch::Sender::new(0),
            legacy_durable: AtomicBool::new(false),
            logs: std::sync::OnceLock::new(),
        }
    }

    /// The connection.
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The client (child runs).
    pub(crate) fn client(&self) -> &Arc<ClientCore> {
        &self.client
    }

    /// The listeners (durable streams).
    pub(crate) fn listeners(&self) -> &Arc<Listeners> {
        &self.listeners
    }

    /// Cancels the running invocations of `task` that `which` selects.
    pub(crate) fn cancel_running(&self, task: &str, which: impl Fn(i32) -> bool) {
        for ((t, inv, _), token) in self.running.lock().iter() {
            if t == task && which(*inv) {
                token.cancel();
            }
        }
    }

    /// The log queue (its shipper starts on first use).
    pub(crate) fn log_queue(&self) -> &Arc<logs::LogQueue> {
        self.logs
            .get_or_init(|| Arc::new(logs::LogQueue::start(&self.conn)))
    }

    /// What the worker has done so far.
    pub(crate) fn task_counts(&self) -> TaskCounts {
        let c = &self.counters;
        TaskCounts {
            started: c.started.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            slots: c.slots.load(Ordering::Relaxed),
            running: self.running() as u64,
        }
    }

    /// Cuts a drain in progress (or the next one) short: what still runs is cancelled now.
    pub(crate) fn cut_drain(&self) {
        self.drain_cut.cancel();
    }

    /// Running attempts.
    fn running(&self) -> usize {
        self.running.lock().len()
    }

    /// An attempt ended (finished, cancelled): forget it and wake a waiting drain.
    fn ended(&self, key: &RunningKey) {
        self.finished.insert(key.clone());
        self.running.lock().remove(key);
        self.attempt_ended.notify_waiters();
    }
}

/// Whether a version string (`v0.79.2`, `0.94.16`) is below `min`. Unparseable versions are not
/// below anything (assume a current engine).
pub(crate) fn version_below(version: &str, min: (u64, u64, u64)) -> bool {
    let mut parts = version
        .trim()
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c))) => (a, b, c) < min,
        _ => false,
    }
}

#[cfg(test)]
mod slot_config_tests {
    use super::slot_config;

    #[test]
    fn a_worker_of_plain_tasks_registers_no_durable_pool() {
        let pools = slot_config(50, 50, false);
        assert_eq!(pools.len(), 1, "{pools:?}");
        assert_eq!(pools["default"], 50);
    }

    #[test]
    fn a_worker_with_a_durable_task_registers_both_pools_of_at_least_one_slot() {
        let pools = slot_config(0, 0, true);
        assert_eq!((pools["default"], pools["durable"]), (1, 1));
        let pools = slot_config(8, 3, true);
        assert_eq!((pools["default"], pools["durable"]), (8, 3));
    }
}

#[cfg(test)]
mod version_tests {
    use super::version_below;

    #[test]
    fn versions() {
        assert!(version_below("v0.79.9", (0, 80, 0)));
        assert!(!version_below("v0.80.0", (0, 80, 0)));
        assert!(!version_below("v0.94.16", (0, 80, 0)));
        assert!(!version_below("1.0.0-rc1", (0, 80, 0)));
        assert!(!version_below("garbage", (0, 80, 0)));
    }
}

/// Messages of the worker actor.
pub(crate) enum WorkerMsg {
    /// Register a workflow.
    Register(Box<Workflow>, oneshot::Sender<Result<(), Error>>),
    /// Register the worker and start taking work; answers with the worker id.
    Start(WorkerOptions, oneshot::Sender<Result<String, Error>>),
    /// Drain: pause, wait up to the duration for running tasks, then stop.
    Drain(Duration, oneshot::Sender<()>),
}

impl std::fmt::Debug for WorkerMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerMsg::Register(..) => "Register",
            WorkerMsg::Start(..) => "Start",
            WorkerMsg::Drain(..) => "Drain",
        })
    }
}

/// The worker actor: a mailbox in front of [`WorkerCore`]; network work runs in its own tasks,
/// so the actor never waits on the engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerActor;

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = Arc<WorkerCore>;
    type Arguments = Arc<WorkerCore>;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        core: Arc<WorkerCore>,
    ) -> Result<Arc<WorkerCore>, ActorProcessingErr> {
        Ok(core)
    }

    async fn handle(
        &self,
        _: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        core: &mut Arc<WorkerCore>,
    ) -> Result<(), ActorProcessingErr> {
        let core = core.clone();
        match msg {
            WorkerMsg::Register(wf, reply) => {
                core.registering.send_modify(|n| *n += 1);
                tokio::spawn(async move {
                    let r = register_workflow(&core, *wf).await;
                    core.registering.send_modify(|n| *n -= 1);
                    let _ = reply.send(r);
                });
            }
            WorkerMsg::Start(opts, reply) => {
                tokio::spawn(async move {
                    let _ = reply.send(start(&core, opts).await);
                });
            }
            WorkerMsg::Drain(d, reply) => {
                tokio::spawn(async move {
                    drain::drain(&core, d).await;
                    let _ = reply.send(());
                });
            }
        }
        Ok(())
    }
}

async fn register_workflow(core: &WorkerCore, wf: Workflow) -> Result<(), Error> {
    const PATH: &str = "/v1.AdminService/PutWorkflow";
    // The engine assigns a worker only the actions it registered with: a workflow added after
    // the start would be stored and never run here. Refused before anything is sent.
    if core.started.load(Ordering::SeqCst) {
        return Err(Error::invalid(
            "register",
            format!(
                "workflow {} was not registered: the worker is already started, and the engine assigns it only the actions it started with; register every workflow before start_worker (or register it from a runtime with no worker)",
                wf.name
            ),
        ));
    }
    if wf.tasks.is_empty() {
        return Err(Error::invalid(
            PATH,
            format!("workflow {} has no tasks", wf.name),
        ));
    }
    let name = core.conn.config().namespaced(&wf.name);
    let req = wf.to_proto_in(&name, &core.conn.config().namespace);
    let client = core.conn.admin();
    core.conn
        .call(PATH, &client, &req, |mut c, r| async move {
            c.put_workflow(r).await
        })
        .await?;
    let mut h = core.handlers.lock();
    let on_success = wf.on_success_task();
    for t in wf.tasks.into_iter().chain(on_success).chain(wf.on_failure) {
        h.insert(Workflow::action_id(&name, &t.name), Arc::new(t));
    }
    Ok(())
}

/// Whether the engine predates the DurableTask stream (v0.80.0): durable waits then take the
/// legacy path.
async fn engine_is_legacy(conn: &Connection) -> bool {
    let client = conn.dispatcher();
    let r = conn
        .call(
            "/Dispatcher/GetVersion",
            &client,
            &proto::GetVersionRequest {},
            |mut c, r| async move { c.get_version(r).await },
        )
        .await;
    match r {
        Ok(v) => version_below(&v.version, (0, 80, 0)),
        Err(e) => e
            .status()
            .is_some_and(|s| s.code() == tonic::Code::Unimplemented),
    }
}

/// Registers the worker and starts taking work: the id once the engine accepted Register.
async fn start(core: &Arc<WorkerCore>, opts: WorkerOptions) -> Result<String, Error> {
    const OP: &str = "start worker";
    if core.started.swap(true, Ordering::SeqCst) {
        return Err(Error::invalid(OP, "the worker is already started"));
    }
    // Registrations sent before the start are part of it, answered or not.
    let _ = core.registering.subscribe().wait_for(|n| *n == 0).await;
    let actions: Vec<String> = core.handlers.lock().keys().cloned().collect();
    if actions.is_empty() {
        core.started.store(false, Ordering::SeqCst);
        return Err(Error::invalid(
            OP,
            "register at least one workflow before starting the worker",
        ));
    }
    let legacy = engine_is_legacy(&core.conn).await;
    if legacy {
        tracing::info!(
            "the engine predates the DurableTask stream (v0.80.0): durable waits use RegisterDurableEvent"
        );
    }
    core.legacy_durable.store(legacy, Ordering::Relaxed);
    let needs_durable = core
        .handlers
        .lock()
        .values()
        .any(|t| t.durable || t.options.slot_requests.contains_key("durable"));
    let slot_config = slot_config(opts.slots, opts.durable_slots, needs_durable);
    let slots = slot_config.get("default").copied().unwrap_or(1) as usize;
    let durable_slots = slot_config.get("durable").copied().unwrap_or(0) as usize;
    let registration = Arc::new(Registration {
        name: opts.name.clone(),
        actions,
        slot_config,
        labels: parking_lot::Mutex::new(opts.labels.clone()),
    });
    // Registered before this returns (CONTRACT.md §3: a synchronous path, bounded; permanent
    // refusals such as a bad token fail at once).
    *core.registration.lock() = Some(registration.clone());
    let worker_id = match actions::register(&core.conn, &registration, &core.identity, None).await {
        Ok(id) => id,
        Err(e) => {
            core.started.store(false, Ordering::SeqCst);
            return Err(registration_error(e));
        }
    };
    // An evicted invocation stops at once, like a cancelled one (nothing is reported: the engine
    // resumes the task as a new invocation).
    let evicting = Arc::downgrade(core);
    core.listeners
        .durable
        .kind
        .registry
        .set_evict_hook(Arc::new(move |task: &str, invocation: i32| {
            if let Some(core) = evicting.upgrade() {
                core.cancel_running(task, |inv| inv <= invocation);
            }
        }));
    // Bounded: a flood of assignments waits in the stream (backpressure), not in memory.
    let (tx, rx) = mpsc::channel(slots + durable_slots);
    let slots_held = Slots {
        ordinary: Arc::new(Semaphore::new(slots)),
        durable: Arc::new(Semaphore::new(durable_slots)),
        waiting: Arc::new(Semaphore::new(slots + durable_slots)),
    };
    let health = core.listeners.health[&ListenerKind::WorkerActions].clone();
    let home = Arc::new(Home::new(
        ActionsKind::new(registration, tx, core.identity.clone()),
        Some(health),
        core.conn.lifecycle(),
        core.conn.rng("actions"),
    ));
    *core.listeners.actions.lock() = Some(home);
    (core.spawn_actions)();
    heartbeat::spawn(core.clone());
    core.counters
        .slots
        .store((slots + durable_slots) as u64, Ordering::Relaxed);
    core.tracker.spawn(dispatch(core.clone(), rx, slots_held));
    Ok(worker_id)
}

/// A registration failure, with what to do about it.
fn registration_error(e: Error) -> Error {
    match e.status().map(tonic::Status::code) {
        Some(tonic::Code::Unauthenticated) => e.with_detail(
            "the engine refused the API token (HATCHET_CLIENT_TOKEN): check that it is valid and belongs to this tenant",
        ),
        Some(tonic::Code::PermissionDenied) => e.with_detail(
            "the API token (HATCHET_CLIENT_TOKEN) may not register workers on this tenant",
        ),
        _ => e,
    }
}

/// The worker's slot bounds: ordinary tasks and durable tasks each have their own (as the
/// engine counts them), and STARTs waiting for a permit are bounded too.
struct Slots {
    ordinary: Arc<Semaphore>,
    durable: Arc<Semaphore>,
    /// STARTs received and not yet running. Beyond it (an engine assigning past the slots) the
    /// stream waits: backpressure, not memory.
    waiting: Arc<Semaphore>,
}

/// A running attempt's slot permit: held while it runs, given back early by
/// [`Context::release_slot`].
pub(crate) type SlotPermit = Arc<parking_lot::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>;

/// Reads the actions and acts on each at once: a START waits for its slot in its own task, so a
/// CANCEL (or any other action) is never stuck behind it while every slot is busy (the real
/// engine drops a CANCEL it cannot send).
async fn dispatch(
    core: Arc<WorkerCore>,
    mut rx: mpsc::Receiver<proto::AssignedAction>,
    slots: Slots,
) {
    loop {
        let action = tokio::select! {
            a = rx.recv() => match a { Some(a) => a, None => break },
            _ = core.stop.cancelled() => break,
        };
        match ActionType::try_from(action.action_type) {
            Ok(ActionType::StartStepRun) => {
                let ticket = tokio::select! {
                    t = slots.waiting.clone().acquire_owned() => match t { Ok(t) => t, Err(_) => break },
                    _ = core.stop.cancelled() => break,
                };
                let token = core.stop.child_token();
                let key = running_key(&action);
                {
                    // The same attempt offered twice (its first assignment went out on a stream
                    // that broke): it already runs here, so the copy is ignored.
                    let mut running = core.running.lock();
                    if running.contains_key(&key) || core.finished.contains(&key) {
                        tracing::debug!(task = %action.task_run_external_id, "ignoring a repeated assignment");
                        continue;
                    }
                    running.insert(key.clone(), token.clone());
                }
                let durable = core
                    .handlers
                    .lock()
                    .get(&action.action_id)
                    .is_some_and(|h| h.durable);
                let bound = if durable {
                    &slots.durable
                } else {
                    &slots.ordinary
                };
                let bound = bound.clone();
                let core2 = core.clone();
                core.tracker.spawn(async move {
                    let permit = tokio::select! {
                        biased;
                        _ = token.cancelled() => None,
                        p = bound.acquire_owned() => p.ok(),
                    };
                    drop(ticket);
                    let Some(permit) = permit else {
                        // Cancelled (or stopped) before a slot was free: it never ran.
                        core2.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                        core2.ended(&key);
                        return;
                    };
                    let slot: SlotPermit = Arc::new(parking_lot::Mutex::new(Some(permit)));
                    execute(&core2, action, token, slot.clone()).await;
                    slot.lock().take();
                });
            }
            Ok(ActionType::CancelStepRun) => {
                core.cancel_running(&action.task_run_external_id, |_| true);
            }
            _ => tracing::warn!(
                action_type = action.action_type,
                "ignoring an action type this worker does not run"
            ),
        }
    }
}

async fn execute(
    core: &Arc<WorkerCore>,
    action: proto::AssignedAction,
    token: CancellationToken,
    slot: SlotPermit,
) {
    let task_id = running_key(&action);
    let handler = core.handlers.lock().get(&action.action_id).cloned();
    let durable = handler.as_ref().filter(|h| h.durable).map(|_| {
        let home = core.listeners.durable.clone();
        DurableClient {
            registry: home.kind.registry.clone(),
            ensure: Arc::new(move || home.ensure()),
        }
    });
    core.counters.started.fetch_add(1, Ordering::Relaxed);
    // STARTED goes out alongside the handler instead of before it: the task does not wait a
    // round trip to begin, and the engine ignores a STARTED that arrives after the attempt's
    // final event (a finished attempt only moves forward).
    {
        let (core2, action2) = (core.clone(), action.clone());
        core.tracker.spawn(async move {
            send_event(
                &core2,
                &action2,
                E::StepEventTypeStarted,
                String::new(),
                false,
                false,
            )
            .await;
        });
    }
    #[cfg(feature = "otel")]
    let otel_cx = {
        let metadata = action
            .additional_metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        crate::otel::task_context(
            &action.action_id,
            &action.workflow_run_id,
            &action.task_run_external_id,
            action.retry_count,
            &metadata,
        )
    };
    let ctx = match handler {
        None => Err(TaskError::non_retryable(format!(
            "this worker has no handler for action {}",
            action.action_id
        ))),
        Some(h) => Context::new(
            action.clone(),
            h.about(),
            token.clone(),
            core.clone(),
            durable,
            slot,
        )
        .map(|ctx| (ctx, h.handler.clone()))
        .map_err(TaskError::non_retryable),
    };
    let result = match ctx {
        Err(e) => Err(e),
        Ok((ctx, run)) => {
            // One span per execution; the task's own `tracing` events can be forwarded to the
            // engine as its log lines (`logs::TaskLogLayer`).
            let span = tracing::info_span!(
                "task",
                workflow = %action.action_id.split(':').next().unwrap_or_default(),
                task = %action.action_id,
                run_id = %action.workflow_run_id,
                task_run_id = %action.task_run_external_id,
                retry_count = action.retry_count,
                worker_id = %core.identity.get().unwrap_or_default(),
            );
            let target = logs::TaskLogTarget {
                queue: core.log_queue().clone(),
                task_run_id: action.task_run_external_id.clone(),
                retry_count: action.retry_count,
            };
            let handler = std::panic::AssertUnwindSafe(run(ctx.clone())).catch_unwind();
            #[cfg(feature = "otel")]
            let handler = opentelemetry::trace::FutureExt::with_context(handler, otel_cx.clone());
            let fut =
                logs::CURRENT_TASK.scope(target, tracing::Instrument::instrument(handler, span));
            // Biased: the task is polled first, so it observes its own cancellation (and can
            // clean up) before its future is dropped.
            tokio::select! {
                biased;
                r = fut => match r {
                    // Cancelled while it finished (CANCEL_STEP_RUN, an eviction, shutdown): the
                    // engine no longer expects this attempt's result, so none is reported.
                    _ if token.is_cancelled() => {
                        core.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                        core.ended(&task_id);
                        return;
                    }
                    Ok(r) => r,
                    Err(p) => Err(TaskError::new(format!("the task panicked: {}", panic_text(&p)))),
                },
                _ = token.cancelled() => {
                    // Cancelled (CANCEL_STEP_RUN or shutdown): nothing is reported, as SDKs do.
                    core.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    core.ended(&task_id);
                    return;
                }
            }
        }
    };
    #[cfg(feature = "otel")]
    crate::otel::task_done(&otel_cx, result.as_ref().err().map(|e| e.message.as_str()));
    let (kind, payload, no_retry) = match result {
        Ok(v) => {
            let out = v.to_string();
            if out.len() > MAX_OUTPUT_BYTES {
                let msg = format!(
                    "the task's output is {} bytes, over the {} byte limit of a message; return less, or store it elsewhere and return a reference",
                    out.len(),
                    MAX_OUTPUT_BYTES
                );
                (E::StepEventTypeFailed, msg, true)
            } else {
                (E::StepEventTypeCompleted, out, false)
            }
        }
        Err(e) => (E::StepEventTypeFailed, e.message, !e.retryable),
    };
    let counter = if kind == E::StepEventTypeCompleted {
        &core.counters.completed
    } else {
        &core.counters.failed
    };
    counter.fetch_add(1, Ordering::Relaxed);
    send_event(core, &action, kind, payload, no_retry, true).await;
    core.ended(&task_id);
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// Sends a step event. With `until_delivered`, keeps trying through outages until it lands or the
/// attempt is stale (invariant 3).
async fn send_event(
    core: &WorkerCore,
    a: &proto::AssignedAction,
    kind: E,
    payload: String,
    no_retry: bool,
    until_delivered: bool,
) {
    const PATH: &str = "/Dispatcher/SendStepActionEvent";
    let started = tokio::time::Instant::now();
    loop {
        let worker_id = core.identity.get().unwrap_or_default();
        let req = proto::StepActionEvent {
            worker_id,
            job_id: String::new(),
            job_run_id: a.job_run_id.clone(),
            task_id: a.task_id.clone(),
            task_run_external_id: a.task_run_external_id.clone(),
            action_id: a.action_id.clone(),
            event_timestamp: Some(proto::timestamp_now()),
            event_type: kind as i32,
            event_payload: payload.clone(),
            retry_count: Some(a.retry_count),
            should_not_retry: no_retry.then_some(true),
        };
        let client = core.conn.dispatcher();
        let r = core
            .conn
            .call(PATH, &client, &req, |mut c, r| async move {
                c.send_step_action_event(r).await
            })
            .await
            .map(|_| ());
        let e = match r {
            Ok(()) => return,
            Err(e) => e,
        };
        if !until_delivered
            || matches!(
                e.outcome(),
                Outcome::Rejected | Outcome::Closed | Outcome::Cancelled | Outcome::Invalid
            )
        {
            if until_delivered {
                tracing::warn!(task = %a.task_run_external_id, error = %e, "step event not delivered");
            }
            return;
        }
        let last_ok = *core.identity.last_heartbeat_ok.lock();
        let silent_for = last_ok
            .map(|t| t.elapsed())
            .unwrap_or_else(|| started.elapsed());
        if silent_for >= STALE_AFTER && started.elapsed() >= STALE_AFTER {
            tracing::warn!(task = %a.task_run_external_id, "giving up a step event: no heartbeat for 30 s, the engine has reassigned the attempt");
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(REDELIVER_PAUSE) => {}
            _ = core.conn.lifecycle().cancelled() => return,
        }
    }
}
