//! The worker: workflow registry, slots, execution, step events (docs/contract.md §5).
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
//! 5. Running attempts are keyed by (task run id, durable invocation, retry count): a repeated
//!    assignment of an attempt that already runs, or already ran here (the last 10,000), is
//!    ignored; CANCEL_STEP_RUN cancels every
//!    attempt of the task; a server eviction cancels the evicted invocation and older ones only
//!    (a newer invocation of the same task may run on this worker at the same time).
//! 6. A drain pauses the worker at the engine first (no new assignments), keeps heartbeating
//!    while running tasks finish and report their final events, then cancels what is left,
//!    stops the heartbeat and the actions listener, and unsubscribes (docs/contract.md §5).
//! 7. An attempt the engine holds as this worker's and lost (assigned and never sent, or its
//!    answered final never recorded) is taken back, never left to its timeout ([`reclaim`]).
//! 8. A durable invocation in doubt (an operation on the wire of a stream that ended) is
//!    evicted and restored, replaying onto the engine's log, instead of failing its attempt
//!    ([`restart`]).

mod actor;
mod child_index;
pub(crate) mod conditions;
pub(crate) mod context;
mod drain;
pub(crate) mod duration;
mod execute;
mod finished;
pub(crate) mod heartbeat;
mod labels;
pub(crate) mod reclaim;
mod restart;
pub(crate) mod standalone;
mod state;
pub(crate) mod task;

pub(crate) use actor::{WorkerActor, WorkerMsg};
pub(crate) use context::Context;
pub(crate) use execute::SlotPermit;
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
use crate::protocol::{self as proto, ActionType, StepActionEventType as E};

/// After this long without a successful heartbeat, the engine has reassigned our attempts.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(30);
/// Largest output a task may return: a step event must fit in one message of the configured
/// send limit (4 MiB by default), with room for its other fields.
pub(crate) fn max_output_bytes(config: &crate::config::ClientConfig) -> usize {
    config.max_send_message_bytes.saturating_sub(64 * 1024)
}
/// Pause between delivery rounds of a final step event.
const REDELIVER_PAUSE: Duration = Duration::from_secs(1);

/// Options of the worker: [`WorkerOptions::new`] with its name and slots, then a method for
/// each other option that applies (fields may be added: the struct is `#[non_exhaustive]`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// Worker name (`^[a-zA-Z0-9.\-_]+$`).
    pub(crate) name: String,
    /// Concurrent tasks (default slots).
    pub(crate) slots: usize,
    /// Concurrent durable tasks (durable slots; registered only when a task of the worker is
    /// durable, see [`WorkerOptions::durable_slots`]).
    pub(crate) durable_slots: usize,
    /// Labels (tasks can want or require them; see [`DesiredLabel`](crate::placement::DesiredLabel)).
    pub(crate) labels: HashMap<String, crate::placement::LabelValue>,
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
        value: impl Into<crate::placement::LabelValue>,
    ) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// The slot pools a worker registers, as the official SDKs do: `default` (at least 1) when one
/// of its tasks is not durable (or it has no task), `durable` (at least 1) when one is durable or
/// asks for durable slots.
///
/// Why not always both: the real engine counts every pool of a worker, whatever its slot type,
/// when it decides whether a finished task should refill an action's slots at once
/// (`pkg/scheduling/v1`: it refills early only when the free slots fall to half the last count
/// or to zero). Idle durable slots keep that count high for a worker of plain tasks, so slots
/// came back only on its 1-1.5 s poll: 2,000 echo tasks took 57-69 s instead of ~20 s. For the
/// same reason a worker of durable tasks only registers no `default` pool: run durable and
/// plain workflows on separate workers and neither slows the other.
pub(crate) fn slot_config(
    slots: usize,
    durable_slots: usize,
    (needs_default, needs_durable): (bool, bool),
) -> HashMap<String, i32> {
    let clamp = |n: usize| i32::try_from(n.max(1)).unwrap_or(i32::MAX);
    let mut pools: HashMap<String, i32> = HashMap::new();
    if needs_default || !needs_durable {
        pools.insert("default".to_string(), clamp(slots));
    }
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
    /// Attempts the engine assigned to this worker and never sent (its dispatcher was lost),
    /// found held by the engine and run here (`worker::reclaim`).
    pub taken_back: u64,
    /// Final events the engine answered and then lost, sent once more.
    pub finals_resent: u64,
    /// Attempts the engine lost that this worker could not run from the engine's record
    /// (durable or batched), failed at once instead of waiting out their timeout.
    pub failed_as_lost: u64,
    /// Durable invocations whose operation was in doubt (its stream ended before the engine
    /// acknowledged it), evicted and restored to replay onto the engine's log instead of failing
    /// their attempt.
    pub restarted_from_log: u64,
}

#[derive(Debug, Default)]
struct Counters {
    started: std::sync::atomic::AtomicU64,
    completed: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicU64,
    cancelled: std::sync::atomic::AtomicU64,
    slots: std::sync::atomic::AtomicU64,
    /// Durable invocations restarted from the engine's log ([`restart`]).
    restarted: std::sync::atomic::AtomicU64,
}

/// The worker's state; lives outside the worker actor so an actor restart keeps it.
pub(crate) struct WorkerCore {
    conn: Connection,
    client: Arc<ClientCore>,
    listeners: Arc<Listeners>,
    /// Asks the stream supervisor to spawn the actions listener (its home is in `listeners`).
    spawn_actions: Box<dyn Fn() + Send + Sync>,
    handlers: Mutex<HashMap<String, Arc<TaskDef>>>,
    /// Workflow names (namespaced) registered or being registered: taken before PutWorkflow.
    workflow_names: Mutex<std::collections::HashSet<String>>,
    pub(crate) identity: Arc<WorkerIdentity>,
    /// The runtime, held weakly ([`Context::runtime`]): the runtime owns its handlers, so a
    /// strong handle here would keep it alive forever. Opaque: the worker sits below the
    /// runtime and cannot name it; the runtime layer reads it back (`runtime::work`).
    pub(crate) runtime: std::sync::OnceLock<std::sync::Weak<dyn std::any::Any + Send + Sync>>,
    running: Mutex<HashMap<RunningKey, CancellationToken>>,
    /// Attempts that ran here (invariant 5: the same attempt offered again does not run again).
    finished: finished::Finished<RunningKey>,
    /// Attempts the engine holds as this worker's and lost: taken back (invariant 7).
    reclaim: reclaim::Reclaim,
    /// Signalled whenever a running attempt ends (the drain waits on it).
    attempt_ended: Notify,
    tracker: TaskTracker,
    /// Cancels running tasks and the dispatch loop (end of a drain, shutdown).
    stop: CancellationToken,
    /// Ends the heartbeat (after the drain, once every final event is reported).
    heartbeat_stop: CancellationToken,
    /// Cuts a drain short: running tasks are cancelled at once (a second signal).
    drain_cut: CancellationToken,
    /// A drain has begun: durable tasks waiting (or about to wait) are evicted, so their runs
    /// resume on another worker instead of holding the drain (`context::evict`).
    pub(crate) draining: CancellationToken,
    counters: Counters,
    started: AtomicBool,
    /// Workflow registrations in progress: a start waits for them, so a workflow whose
    /// `register` call was dropped after it was sent is still part of the worker.
    registering: tokio::sync::watch::Sender<usize>,
    /// The engine is older than v0.80.0: durable waits use the legacy event path.
    pub(crate) legacy_durable: AtomicBool,
    /// Task log lines on their way to the engine (started on first use).
    pub(crate) logs: std::sync::OnceLock<Arc<crate::logs::LogQueue>>,
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
            workflow_names: Mutex::default(),
            identity,
            runtime: std::sync::OnceLock::new(),
            registration: Mutex::default(),
            state: state::StateMap::default(),
            running: Mutex::default(),
            finished: finished::Finished::default(),
            reclaim: reclaim::Reclaim::default(),
            attempt_ended: Notify::new(),
            tracker: TaskTracker::new(),
            stop,
            heartbeat_stop,
            drain_cut: CancellationToken::new(),
            draining: CancellationToken::new(),
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
    pub(crate) fn log_queue(&self) -> &Arc<crate::logs::LogQueue> {
        self.logs
            .get_or_init(|| Arc::new(crate::logs::LogQueue::start(&self.conn)))
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
            restarted_from_log: c.restarted.load(Ordering::Relaxed),
            taken_back: self.reclaim.counts().run,
            finals_resent: self.reclaim.counts().resent,
            failed_as_lost: self.reclaim.counts().failed,
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
        let pools = slot_config(50, 50, (true, false));
        assert_eq!(pools.len(), 1, "{pools:?}");
        assert_eq!(pools["default"], 50);
        let none = slot_config(4, 4, (false, false));
        assert_eq!(
            none.len(),
            1,
            "a worker with no task still has a pool: {none:?}"
        );
    }

    #[test]
    fn a_worker_with_both_kinds_registers_both_pools_of_at_least_one_slot() {
        let pools = slot_config(0, 0, (true, true));
        assert_eq!((pools["default"], pools["durable"]), (1, 1));
        let pools = slot_config(8, 3, (true, true));
        assert_eq!((pools["default"], pools["durable"]), (8, 3));
    }

    #[test]
    fn a_worker_of_durable_tasks_only_registers_no_default_pool() {
        let pools = slot_config(8, 3, (false, true));
        assert_eq!(pools.len(), 1, "{pools:?}");
        assert_eq!(pools["durable"], 3);
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
