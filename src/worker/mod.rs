//! The worker: workflow registry, slots, execution, step events (CONTRACT.md §5).
//!
//! # Invariants
//!
//! 1. Registration is a message to the worker actor: PutWorkflow for each workflow, then Register
//!    (through the actions listener) with the slot config.
//! 2. Each assigned action runs in its own task, bounded by the slots (a semaphore), with its own
//!    cancellation token (a child of the worker's): CANCEL_STEP_RUN and shutdown fire it.
//! 3. One STARTED, then one COMPLETED or FAILED per attempt. The final event is retried until it
//!    is delivered or its attempt is stale (no heartbeat for [`STALE_AFTER`]: the engine has
//!    reassigned it); a transient outage never drops it.
//! 4. A panic in user code becomes a FAILED event; the worker lives on.
//! 5. Running attempts are keyed by (task run id, durable invocation, retry count): a repeated
//!    assignment of an attempt that already runs is ignored; CANCEL_STEP_RUN cancels every
//!    attempt of the task; a server eviction cancels the evicted invocation and older ones only
//!    (a newer invocation of the same task may run on this worker at the same time).

pub mod context;
pub mod logs;
pub mod task;

pub use context::Context;
pub use task::{Concurrency, TaskDef, TaskError, TaskOptions, Workflow};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Outcome};
use crate::listener::actions::{ActionsArgs, Registration, WorkerIdentity};
use crate::listener::durable_task::DurableClient;
use crate::listener::health::ListenerKind;
use crate::proto::{self, ActionType, StepActionEventType as E};
use crate::retry::grpc::request_with_timeout;
use crate::runtime::{Shared, supervisor};

/// After this long without a successful heartbeat, the engine has reassigned our attempts.
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// Largest output a task may return: a step event must fit in one 4 MiB message, with room for
/// its other fields.
pub const MAX_OUTPUT_BYTES: usize = crate::transport::MAX_MESSAGE_BYTES - 64 * 1024;
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
    /// Concurrent durable tasks (durable slots).
    pub durable_slots: usize,
    /// Labels.
    pub labels: HashMap<String, String>,
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

impl WorkerCore {
    /// Cancels the running invocations of `task` that `which` selects.
    fn cancel_running(&self, task: &str, which: impl Fn(i32) -> bool) {
        for ((t, inv, _), token) in self.running.lock().iter() {
            if t == task && which(*inv) {
                token.cancel();
            }
        }
    }
}

/// The worker's state; lives in the runtime's shared state so an actor restart keeps it.
#[derive(Default)]
pub struct WorkerCore {
    handlers: Mutex<HashMap<String, TaskDef>>,
    pub(crate) identity: Arc<WorkerIdentity>,
    running: Mutex<HashMap<RunningKey, CancellationToken>>,
    tracker: TaskTracker,
    stop: CancellationToken,
    started: AtomicBool,
    accepting: AtomicBool,
}

impl std::fmt::Debug for WorkerCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCore")
            .field("running", &self.running.lock().len())
            .finish_non_exhaustive()
    }
}

/// Whether a version string (`v0.79.2`, `0.94.16`) is below `min`. Unparseable versions are not
/// below anything (assume a current engine).
pub fn version_below(version: &str, min: (u64, u64, u64)) -> bool {
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

/// The worker's id, once registered.
pub(crate) fn worker_id(shared: &Shared) -> Option<String> {
    shared.worker.identity.get()
}

/// Messages of the worker actor.
pub enum WorkerMsg {
    /// Register a workflow.
    Register(Box<Workflow>, oneshot::Sender<Result<(), Error>>),
    /// Start taking work.
    Start(WorkerOptions, oneshot::Sender<Result<(), Error>>),
    /// Stop taking work and wait up to the duration for running tasks.
    Drain(Duration, oneshot::Sender<()>),
    /// Test hook.
    CrashActions,
}

impl std::fmt::Debug for WorkerMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerMsg::Register(..) => "Register",
            WorkerMsg::Start(..) => "Start",
            WorkerMsg::Drain(..) => "Drain",
            WorkerMsg::CrashActions => "CrashActions",
        })
    }
}

/// The worker actor.
#[derive(Debug, Clone, Copy)]
pub struct WorkerActor;

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = Arc<Shared>;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        shared: Arc<Shared>,
    ) -> Result<Arc<Shared>, ActorProcessingErr> {
        Ok(shared)
    }

    async fn handle(
        &self,
        _: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        shared: &mut Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Register(wf, reply) => {
                // PutWorkflow runs in its own task: the actor never waits on the network.
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _ = reply.send(register_workflow(&shared, *wf).await);
                });
            }
            WorkerMsg::Start(opts, reply) => {
                let _ = reply.send(start(shared, opts));
            }
            WorkerMsg::Drain(d, reply) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    drain(&shared, d).await;
                    let _ = reply.send(());
                });
            }
            WorkerMsg::CrashActions => supervisor::crash_actions(shared),
        }
        Ok(())
    }
}

async fn register_workflow(shared: &Arc<Shared>, wf: Workflow) -> Result<(), Error> {
    const PATH: &str = "/v1.AdminService/PutWorkflow";
    if wf.tasks.is_empty() {
        return Err(Error::invalid(
            PATH,
            format!("workflow {} has no tasks", wf.name),
        ));
    }
    let name = shared.config.namespaced(&wf.name);
    let req = wf.to_proto(&name);
    let client = shared.ctx.admin();
    shared
        .unary(PATH, None, None, &client, &req, |mut c, r| async move {
            c.put_workflow(r).await
        })
        .await?;
    let mut h = shared.worker.handlers.lock();
    for t in wf.tasks {
        h.insert(Workflow::action_id(&name, &t.name), t);
    }
    Ok(())
}

fn start(shared: &Arc<Shared>, opts: WorkerOptions) -> Result<(), Error> {
    let core = &shared.worker;
    if core.started.swap(true, Ordering::SeqCst) {
        return Err(Error::invalid(
            "start worker",
            "the worker is already started",
        ));
    }
    let actions: Vec<String> = core.handlers.lock().keys().cloned().collect();
    if actions.is_empty() {
        core.started.store(false, Ordering::SeqCst);
        return Err(Error::invalid(
            "start worker",
            "register at least one workflow before starting the worker",
        ));
    }
    core.accepting.store(true, Ordering::SeqCst);
    // An evicted invocation stops at once, like a cancelled one (nothing is reported: the engine
    // resumes the task as a new invocation).
    let evicting = Arc::downgrade(core);
    shared
        .durable
        .set_evict_hook(Arc::new(move |task: &str, invocation: i32| {
            if let Some(core) = evicting.upgrade() {
                core.cancel_running(task, |inv| inv <= invocation);
            }
        }));
    let slots = opts.slots.max(1);
    let durable_slots = opts.durable_slots.max(1);
    let registration = Registration {
        name: opts.name.clone(),
        actions,
        slot_config: [
            ("default".to_string(), slots as i32),
            ("durable".to_string(), durable_slots as i32),
        ]
        .into(),
        labels: opts.labels.clone(),
    };
    // Bounded: a flood of assignments waits in the stream (backpressure), not in memory.
    let (tx, rx) = mpsc::channel(slots + durable_slots);
    supervisor::start_worker_listeners(
        shared,
        ActionsArgs {
            ctx: shared.ctx.clone(),
            registration: Arc::new(registration),
            sink: tx,
            health: shared.health[&ListenerKind::WorkerActions].clone(),
            identity: core.identity.clone(),
            legacy: Arc::new(AtomicBool::new(false)),
            reader: Arc::default(),
        },
    );
    let shared = shared.clone();
    let sem = Arc::new(Semaphore::new(slots + durable_slots));
    core.tracker.spawn(dispatch(shared, rx, sem));
    Ok(())
}

async fn dispatch(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<proto::AssignedAction>,
    sem: Arc<Semaphore>,
) {
    let core = shared.worker.clone();
    loop {
        let action = tokio::select! {
            a = rx.recv() => match a { Some(a) => a, None => break },
            _ = core.stop.cancelled() => break,
        };
        match ActionType::try_from(action.action_type) {
            Ok(ActionType::StartStepRun) => {
                if !core.accepting.load(Ordering::SeqCst) {
                    continue; // draining: the engine reassigns it once our heartbeats stop
                }
                let permit = tokio::select! {
                    p = sem.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                    _ = core.stop.cancelled() => break,
                };
                let token = core.stop.child_token();
                {
                    // The same attempt offered twice (its first assignment went out on a stream
                    // that broke): it already runs here, so the copy is ignored.
                    let mut running = core.running.lock();
                    let key = running_key(&action);
                    if running.contains_key(&key) {
                        tracing::debug!(task = %action.task_run_external_id, "ignoring a repeated assignment");
                        continue;
                    }
                    running.insert(key, token.clone());
                }
                let shared = shared.clone();
                core.tracker.spawn(async move {
                    execute(&shared, action, token).await;
                    drop(permit);
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

async fn execute(shared: &Arc<Shared>, action: proto::AssignedAction, token: CancellationToken) {
    let task_id = running_key(&action);
    let handler = shared
        .worker
        .handlers
        .lock()
        .get(&action.action_id)
        .cloned();
    let durable = handler.as_ref().filter(|h| h.durable).map(|_| {
        let s = shared.clone();
        DurableClient {
            registry: shared.durable.clone(),
            ensure: Arc::new(move || s.ensure_durable_stream()),
        }
    });
    send_event(
        shared,
        &action,
        E::StepEventTypeStarted,
        String::new(),
        false,
        false,
    )
    .await;
    let result = match (
        handler,
        Context::new(action.clone(), token.clone(), shared.clone(), durable),
    ) {
        (None, _) => Err(TaskError::non_retryable(format!(
            "this worker has no handler for action {}",
            action.action_id
        ))),
        (_, Err(e)) => Err(TaskError::non_retryable(e)),
        (Some(h), Ok(ctx)) => {
            let fut = std::panic::AssertUnwindSafe((h.handler)(ctx)).catch_unwind();
            // Biased: the task is polled first, so it observes its own cancellation (and can
            // clean up) before its future is dropped.
            tokio::select! {
                biased;
                r = fut => match r {
                    // Cancelled while it finished (CANCEL_STEP_RUN, an eviction, shutdown): the
                    // engine no longer expects this attempt's result, so none is reported.
                    _ if token.is_cancelled() => {
                        shared.worker.running.lock().remove(&task_id);
                        return;
                    }
                    Ok(r) => r,
                    Err(p) => Err(TaskError::new(format!("the task panicked: {}", panic_text(&p)))),
                },
                _ = token.cancelled() => {
                    // Cancelled (CANCEL_STEP_RUN or shutdown): nothing is reported, as SDKs do.
                    shared.worker.running.lock().remove(&task_id);
                    return;
                }
            }
        }
    };
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
    send_event(shared, &action, kind, payload, no_retry, true).await;
    shared.worker.running.lock().remove(&task_id);
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
    shared: &Arc<Shared>,
    a: &proto::AssignedAction,
    kind: E,
    payload: String,
    no_retry: bool,
    until_delivered: bool,
) {
    const PATH: &str = "/Dispatcher/SendStepActionEvent";
    let started = tokio::time::Instant::now();
    loop {
        let worker_id = shared.worker.identity.get().unwrap_or_default();
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
        let client = shared.ctx.dispatcher();
        let r = shared
            .unary(PATH, None, None, &client, &req, |mut c, r| async move {
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
        let last_ok = *shared.worker.identity.last_heartbeat_ok.lock();
        let silent_for = last_ok
            .map(|t| t.elapsed())
            .unwrap_or_else(|| started.elapsed());
        if silent_for >= STALE_AFTER && started.elapsed() >= STALE_AFTER {
            tracing::warn!(task = %a.task_run_external_id, "giving up a step event: no heartbeat for 30 s, the engine has reassigned the attempt");
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(REDELIVER_PAUSE) => {}
            _ = shared.ctx.lifecycle.cancelled() => return,
        }
    }
}

async fn drain(shared: &Arc<Shared>, timeout: Duration) {
    let core = &shared.worker;
    core.accepting.store(false, Ordering::SeqCst);
    supervisor::stop_actions(shared);
    // Wait for running tasks (the dispatcher loop itself is in the tracker too, so stop it).
    let running = || core.running.lock().len();
    let deadline = tokio::time::Instant::now() + timeout;
    while running() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    core.stop.cancel();
    core.tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), core.tracker.wait()).await;
    if let Some(id) = core.identity.get() {
        let mut c = shared.ctx.dispatcher();
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            c.unsubscribe(request_with_timeout(
                proto::WorkerUnsubscribeRequest { worker_id: id },
                Duration::from_secs(2),
            )),
        )
        .await;
    }
}
