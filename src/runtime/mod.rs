//! The runtime: [`Runtime::spawn`] builds the actor tree and returns a cheap, cloneable
//! [`RuntimeHandle`] through which a process registers workflows, runs a worker, triggers runs and
//! awaits results.
//!
//! # Shape
//!
//! ```text
//! RuntimeHandle (Clone)        composes the layers; below it only the worker names it, weakly
//!                              (`WorkerCore::runtime`, for `Context::runtime()`)
//!   root supervisor (ractor)
//!     retry service            owns the policy, budgets and ledger (the connection's cores);
//!                              calls run in their callers' tasks (never a serial queue)
//!     stream supervisor        spawns the four listeners from their homes, restarts a crashed
//!                              one with its registry, within a restart intensity limit
//!       worker actions, workflow runs, durable events, durable task   (one stream actor each)
//!     worker                   workflow registry, slots, execution, step events, heartbeat
//! ```
//!
//! Layers, each only looking down: `runtime` -> `worker`, `client`, `listener` ->
//! `connection` -> `retry`, `config`, `error`, `proto`.
//!
//! # Invariants
//!
//! 1. The lifecycle token is cancelled only by [`RuntimeHandle::shutdown`]; then every pending
//!    waiter fails at once with the *closed* outcome and every actor stops.
//! 2. Every unary call goes through a retry core ([`crate::connection::Connection::unary`] and
//!    `rest`), except the heartbeat, which is its own retry (one attempt per tick, counted in
//!    the ledger); streams go through the stream actors only.

mod control;
mod observe;
pub(crate) mod ops;
mod signals;
pub(crate) mod supervisor;
mod trigger;
pub(crate) mod typed;
mod work;

pub use signals::StopSignal;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use ractor::ActorRef;
use tokio_util::sync::CancellationToken;

use crate::client::ClientCore;
use crate::config::ClientConfig;
use crate::connection::{Connection, Parts};
use crate::error::Error;
use crate::listener::Listeners;
use crate::listener::actions::WorkerIdentity;
use crate::listener::durable_task::{DurableRegistry, DurableTaskKind};
use crate::listener::health::{HealthReporter, ListenerKind};
use crate::listener::runs::closed_error;
use crate::listener::stream::Home;
use crate::listener::subscriptions::KeyedKind;
use crate::retry::{BudgetConfig, Ledger, RetryCore};
use crate::transport::{self, AuthInterceptor};
use crate::worker::{WorkerCore, WorkerMsg};
use supervisor::{RootMsg, StreamSupMsg, Tree};

/// What the handle holds: the layers it composes and the actor tree's roots.
pub(crate) struct Inner {
    conn: Connection,
    client: Arc<ClientCore>,
    listeners: Arc<Listeners>,
    tree: Tree,
    root: Mutex<Option<ActorRef<RootMsg>>>,
    root_done: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The shutdown in progress: started once, awaited by every caller (cancel safe).
    shutdown: Mutex<Option<Shared<BoxFuture<'static, ()>>>>,
    /// Where `/health` and `/metrics` are served, once the worker started with them on.
    ops_addr: Mutex<Option<std::net::SocketAddr>>,
    /// The tokio runtime it was spawned on (where work handed in from other threads runs).
    #[cfg_attr(not(feature = "otel-export"), allow(dead_code))]
    tokio: tokio::runtime::Handle,
}

/// Runtime construction.
#[derive(Debug)]
pub struct Runtime;

/// Options of [`Runtime::spawn_with`]: [`RuntimeOptions::new`], then a method for each option
/// that applies (fields may be added: the struct is `#[non_exhaustive]`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RuntimeOptions {
    /// The retry budget.
    pub(crate) budget: BudgetConfig,
    /// Seed of the retry jitter (tests fix it).
    pub(crate) seed: Option<u64>,
    /// Listener reconnect backoff (tests scale it down).
    pub(crate) stream_backoff: crate::listener::StreamBackoff,
    /// Heartbeat interval (4 s when `None`; tests
    /// shorten it together with the engine's reassignment window).
    pub(crate) heartbeat_every: Option<Duration>,
    /// The worker's sweep for attempts the engine lost (tests shorten it).
    pub(crate) reclaim: crate::connection::ReclaimTiming,
    /// How often the long-lived streams move to a fresh one (`None`: the default period;
    /// `Some(None)`: never).
    pub(crate) rotation: Option<Option<Duration>>,
}

impl RuntimeOptions {
    /// The defaults: the default retry budget, a random jitter seed, the listeners' default
    /// backoff, a heartbeat every 4 s.
    pub fn new() -> Self {
        RuntimeOptions::default()
    }

    /// Sets the retry budget.
    pub fn budget(mut self, b: BudgetConfig) -> Self {
        self.budget = b;
        self
    }
    /// Fixes the jitter seed.
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = Some(s);
        self
    }
    /// Sets the listeners' reconnect backoff.
    pub fn stream_backoff(mut self, b: crate::listener::StreamBackoff) -> Self {
        self.stream_backoff = b;
        self
    }
    /// Sets the heartbeat interval.
    pub fn heartbeat_every(mut self, every: Duration) -> Self {
        self.heartbeat_every = Some(every);
        self
    }
    /// Sets the timing of the worker's sweep for attempts the engine holds as its own and lost
    /// (docs/contract.md §5 "Taking back"; tests shorten it).
    pub fn reclaim(mut self, timing: crate::connection::ReclaimTiming) -> Self {
        self.reclaim = timing;
        self
    }
    /// How often the worker's actions stream and the results stream move to a fresh stream,
    /// each period drawn with ±25% jitter (`None`: never). The default is 15 minutes: behind a
    /// load balancer, streams opened before a replica was added never reach it unless they
    /// move, and the engine sets no connection age to make them. The new stream opens before
    /// the old one closes, so nothing in flight on the old one is lost (docs/contract.md §3).
    pub fn stream_rotation(mut self, every: Option<Duration>) -> Self {
        self.rotation = Some(every);
        self
    }
}

impl Runtime {
    /// Spawns a runtime for `config`: the actor tree, the shared connection (dialled lazily) and
    /// the listeners. Must be called inside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future mid-way may leave actors running until the process
    /// ends; call it to completion.
    pub async fn spawn(config: ClientConfig) -> Result<RuntimeHandle, Error> {
        Self::spawn_with(config, RuntimeOptions::new()).await
    }

    /// [`Runtime::spawn`] with options.
    ///
    /// # Cancel safety
    ///
    /// As [`Runtime::spawn`].
    pub async fn spawn_with(
        config: ClientConfig,
        opts: RuntimeOptions,
    ) -> Result<RuntimeHandle, Error> {
        let channel = transport::channel(&config)?;
        let auth = AuthInterceptor::new(&config)?;
        let (policy, rest_policy) =
            crate::retry::decision::policies_for(config.no_retry, config.no_grpc_retry);
        crate::retry::log_ceiling_table(&policy);
        let seed = opts.seed.unwrap_or_else(rand::random);
        // One budget per endpoint: the gRPC endpoint and the REST endpoint; one ledger.
        let ledger = Arc::new(Ledger::default());
        let grpc = Arc::new(RetryCore::new(policy, opts.budget, ledger.clone(), seed));
        let rest = Arc::new(RetryCore::new(
            rest_policy,
            opts.budget,
            ledger,
            seed.wrapping_add(1),
        ));
        let http = crate::transport::http_client(&config)?;
        let conn = Connection::new(Parts {
            config,
            channel,
            auth,
            grpc,
            rest,
            http,
            lifecycle: CancellationToken::new(),
            backoff: opts.stream_backoff,
            heartbeat_every: opts
                .heartbeat_every
                .unwrap_or(crate::worker::heartbeat::HEARTBEAT_EVERY),
            reclaim: opts.reclaim,
            rotation: opts
                .rotation
                .unwrap_or(Some(crate::listener::stream::ROTATE_EVERY)),
            seed: seed.wrapping_add(2),
        });
        let health: BTreeMap<ListenerKind, Arc<HealthReporter>> = [
            ListenerKind::WorkerActions,
            ListenerKind::WorkflowRuns,
            ListenerKind::DurableEvents,
            ListenerKind::DurableTask,
        ]
        .into_iter()
        .map(|k| (k, Arc::new(HealthReporter::new(k))))
        .collect();
        let life = conn.lifecycle();
        let identity = Arc::new(WorkerIdentity::default());
        let listeners = Arc::new(Listeners {
            runs: Arc::new(Home::new(
                KeyedKind {
                    registry: Arc::default(),
                },
                Some(health[&ListenerKind::WorkflowRuns].clone()),
                life,
                conn.rng("/Dispatcher/SubscribeToWorkflowRuns"),
            )),
            events: Arc::new(Home::new(
                KeyedKind {
                    registry: Arc::default(),
                },
                Some(health[&ListenerKind::DurableEvents].clone()),
                life,
                conn.rng("/v1.V1Dispatcher/ListenForDurableEvent"),
            )),
            durable: Arc::new(Home::new(
                DurableTaskKind::new(
                    Arc::new(DurableRegistry::with_max_message(
                        conn.config().max_send_message_bytes,
                    )),
                    identity.clone(),
                ),
                Some(health[&ListenerKind::DurableTask].clone()),
                life,
                conn.rng("durable_task"),
            )),
            actions: Mutex::new(None),
            health,
        });
        let client = Arc::new(ClientCore {
            conn: conn.clone(),
            runs: listeners.runs.clone(),
            known_workflows: Default::default(),
            undecided_workflows: Default::default(),
        });
        tokio::spawn(crate::listener::runs::sweep_unknown(
            conn.clone(),
            listeners.runs.kind.registry.clone(),
            life.clone(),
        ));
        let stream_sup: Arc<Mutex<Option<ActorRef<StreamSupMsg>>>> = Arc::default();
        let sup = stream_sup.clone();
        let worker = Arc::new(WorkerCore::new(
            conn.clone(),
            client.clone(),
            listeners.clone(),
            identity,
            Box::new(move || {
                if let Some(s) = sup.lock().as_ref() {
                    let _ = s.cast(StreamSupMsg::StartActions);
                }
            }),
        ));
        let tree = Tree {
            conn: conn.clone(),
            listeners: listeners.clone(),
            worker,
            stream_sup,
            worker_ref: Arc::default(),
            retry_ref: Arc::default(),
            stopped: Arc::default(),
        };
        let (root, done) = supervisor::start(tree.clone()).await?;
        let handle = RuntimeHandle {
            inner: Arc::new(Inner {
                conn,
                client,
                listeners,
                tree,
                root: Mutex::new(Some(root)),
                root_done: Mutex::new(Some(done)),
                shutdown: Mutex::new(None),
                ops_addr: Mutex::new(None),
                tokio: tokio::runtime::Handle::current(),
            }),
        };
        let weak: std::sync::Weak<dyn std::any::Any + Send + Sync> =
            Arc::downgrade(&handle.inner) as std::sync::Weak<Inner>;
        let _ = handle.inner.tree.worker.runtime.set(weak);
        Ok(handle)
    }
}

/// The handle of a runtime: cheap to clone, `Send + Sync`.
///
/// The runtime lives while a handle does: dropping the last one without
/// [`RuntimeHandle::shutdown`] stops it at once, without a drain (as a
/// `tokio::runtime::Runtime` does on drop). Run handles and typed clients taken from it do not
/// keep it alive: their waits then fail *closed*.
///
/// A task handler that needs the runtime (to trigger another workflow, read a run) takes it
/// from [`Context::runtime`](crate::worker::context::Context::runtime) while it runs, instead of holding a
/// handle: the runtime owns its handlers, so a handle captured in one keeps the runtime alive
/// after the last handle of yours is dropped.
#[derive(Clone)]
pub struct RuntimeHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RuntimeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeHandle")
            .field("config", self.inner.conn.config())
            .finish_non_exhaustive()
    }
}

impl RuntimeHandle {
    /// The handle of a runtime that is still held somewhere (the probes hold it weakly, so
    /// that they do not keep it alive).
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<RuntimeHandle> {
        weak.upgrade().map(|inner| RuntimeHandle { inner })
    }

    /// Spawns a runtime configured from the `HATCHET_CLIENT_*` environment.
    ///
    /// # Cancel safety
    ///
    /// As [`Runtime::spawn`].
    pub async fn from_env() -> Result<RuntimeHandle, Error> {
        Runtime::spawn(ClientConfig::from_env()?).await
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        self.inner.conn.config()
    }

    /// Shuts down: the worker drains (docs/contract.md §5: paused at the engine, heartbeats going on
    /// while running tasks finish and report, the rest cancelled after `drain`), every pending
    /// waiter fails with the *closed* outcome, every stream closes and every actor stops.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdown runs in its own task, started by the first call; dropping this
    /// future does not stop it, and a later call (with any `drain`) waits for the same shutdown.
    pub async fn shutdown(&self, drain: Duration) {
        let fut = {
            let mut slot = self.inner.shutdown.lock();
            slot.get_or_insert_with(|| {
                let inner = self.inner.clone();
                let task = tokio::spawn(async move { shut_down(&inner, drain).await });
                task.map(|_| ()).boxed().shared()
            })
            .clone()
        };
        fut.await
    }

    /// Whether the runtime was shut down.
    pub fn is_closed(&self) -> bool {
        self.inner.conn.lifecycle().is_cancelled()
    }
}

/// The shutdown itself (see [`RuntimeHandle::shutdown`]).
async fn shut_down(inner: &Inner, drain: Duration) {
    let worker = inner.tree.worker_ref.lock().clone();
    if let Some(w) = worker {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if w.cast(WorkerMsg::Drain(drain, tx)).is_ok() {
            let _ = rx.await;
        }
    }
    stop_now(inner);
    let done = inner.root_done.lock().take();
    if let Some(done) = done {
        let _ = done.await;
    }
}

/// Stops everything at once, without a drain: the lifecycle token (every listener, the worker's
/// running tasks, the probes), every pending wait (failed *closed*), and the actor tree.
fn stop_now(inner: &Inner) {
    inner.conn.lifecycle().cancel();
    let l = &inner.listeners;
    l.runs
        .kind
        .registry
        .fail_all(true, |run| closed_error(&run.to_string()));
    l.events.kind.registry.fail_all(true, |(task, _)| {
        Error::closed("durable wait").with_detail(format!("task {task}"))
    });
    l.durable.kind.registry.close();
    l.stop_all();
    for h in l.health.values() {
        h.stopped(None);
    }
    let root = inner.root.lock().take();
    if let Some(root) = root {
        root.stop(None);
    }
}

impl Drop for Inner {
    /// The last [`RuntimeHandle`] dropped without [`RuntimeHandle::shutdown`]: the runtime stops
    /// at once, as a `tokio::runtime::Runtime` does on drop (no drain: running tasks are
    /// cancelled and report nothing, so the engine reassigns them; waits fail *closed*).
    fn drop(&mut self) {
        if self.conn.lifecycle().is_cancelled() {
            return;
        }
        // A warning only where something is lost: tasks running here (cancelled, reported to
        // nobody). A client's `main` ending with `?` loses nothing.
        let running = self.tree.worker.task_counts().running;
        if running > 0 {
            tracing::warn!(
                running,
                "the last RuntimeHandle was dropped without shutdown(): stopping the runtime now, without a drain; the running tasks are cancelled and the engine will retry them after their timeout (call shutdown(drain) to let them finish)"
            );
        } else {
            tracing::debug!("the last RuntimeHandle was dropped without shutdown(): stopping");
        }
        stop_now(self);
    }
}
