//! The runtime: [`Runtime::spawn`] builds the actor tree and returns a cheap, cloneable
//! [`RuntimeHandle`] through which a process registers workflows, runs a worker, triggers runs and
//! awaits results.
//!
//! # Shape
//!
//! ```text
//! RuntimeHandle (Clone)        composes the layers; nothing below imports this module
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

pub(crate) mod ops;
mod signals;
pub(crate) mod supervisor;

pub use signals::StopSignal;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use ractor::ActorRef;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::bulk::{BulkEvent, BulkRun};
use crate::client::control::{RunFilter, Selection};
use crate::client::typed::{Registered, RunView};
use crate::client::{ClientCore, PushOptions, RunHandle, TriggerOptions};
use crate::config::ClientConfig;
use crate::connection::{Connection, Parts};
use crate::error::Error;
use crate::listener::Listeners;
use crate::listener::actions::WorkerIdentity;
use crate::listener::durable_task::{DurableRegistry, DurableTaskKind};
use crate::listener::health::{HealthReporter, ListenerKind, ListenerState};
use crate::listener::runs::closed_error;
use crate::listener::stream::Home;
use crate::listener::subscriptions::KeyedKind;
use crate::proto;
use crate::retry::{BudgetConfig, Ledger, MethodCounters, RetryCore, RetryReport};
use crate::transport::{self, AuthInterceptor};
use crate::worker::{WorkerCore, WorkerMsg, WorkerOptions, Workflow};
use supervisor::{RetryMsg, RootMsg, StreamSupMsg, Tree};

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
}

/// Runtime construction.
#[derive(Debug)]
pub struct Runtime;

/// Options of [`Runtime::spawn_with`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RuntimeOptions {
    /// The retry budget.
    pub budget: BudgetConfig,
    /// Seed of the retry jitter (tests fix it).
    pub seed: Option<u64>,
    /// Listener reconnect backoff (tests scale it down).
    pub stream_backoff: crate::listener::StreamBackoff,
    /// Heartbeat interval (4 s when `None`; tests
    /// shorten it together with the engine's reassignment window).
    pub heartbeat_every: Option<Duration>,
}

impl RuntimeOptions {
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
        Self::spawn_with(config, RuntimeOptions::default()).await
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
                DurableTaskKind::new(Arc::new(DurableRegistry::default()), identity.clone()),
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
            stream_sup_restarts: Arc::default(),
            worker_ref: Arc::default(),
            retry_ref: Arc::default(),
        };
        let (root, done) = supervisor::start(tree.clone()).await?;
        Ok(RuntimeHandle {
            inner: Arc::new(Inner {
                conn,
                client,
                listeners,
                tree,
                root: Mutex::new(Some(root)),
                root_done: Mutex::new(Some(done)),
                shutdown: Mutex::new(None),
                ops_addr: Mutex::new(None),
            }),
        })
    }
}

/// The handle of a runtime: cheap to clone, `Send + Sync`.
///
/// The runtime lives while a handle does: dropping the last one without
/// [`RuntimeHandle::shutdown`] stops it at once, without a drain (as a
/// `tokio::runtime::Runtime` does on drop). Run handles and typed clients taken from it do not
/// keep it alive: their waits then fail *closed*.
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

    fn worker(&self, op: &'static str) -> Result<ActorRef<WorkerMsg>, Error> {
        self.inner
            .tree
            .worker_ref
            .lock()
            .clone()
            .ok_or_else(|| Error::closed(op))
    }

    /// Registers a standalone task ([`Task`](crate::Task)) and returns its typed reference:
    /// `run` it with its input type, get its output type back.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::register`].
    pub async fn register_task<I, O>(
        &self,
        task: crate::worker::standalone::Task<I, O>,
    ) -> Result<crate::WorkflowRef<I, O>, Error>
    where
        I: Serialize + serde::de::DeserializeOwned + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
    {
        let name = task.name().to_string();
        self.register(task.into_workflow())
            .await?
            .returning::<I, O>(&name)
    }

    /// Registers a workflow with the engine (PutWorkflow) and with this runtime's worker.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once the first poll has handed the workflow to the worker, dropping the
    /// future only loses the answer; PutWorkflow goes on, and a later `start_worker` waits for
    /// it and includes the workflow. PutWorkflow is idempotent, so registering again is safe.
    pub async fn register(&self, mut workflow: Workflow) -> Result<Registered, Error> {
        workflow.apply_task_defaults();
        let worker = self.worker("register")?;
        let registered = Registered::new(&workflow, self.inner.client.clone());
        let static_keys: Vec<String> = workflow.static_rate_limit_keys();
        let (tx, rx) = tokio::sync::oneshot::channel();
        worker
            .cast(WorkerMsg::Register(Box::new(workflow), tx))
            .map_err(|_| Error::closed("register"))?;
        match rx.await.map_err(|_| Error::closed("register"))? {
            Ok(()) => Ok(registered),
            // The real engine refuses a workflow naming a static rate limit that does not exist
            // with a bare INTERNAL: say what is the likely cause.
            Err(e)
                if !static_keys.is_empty()
                    && e.status()
                        .is_some_and(|s| s.code() == tonic::Code::Internal) =>
            {
                let hint = format!(
                    "the engine refused the workflow with INTERNAL; it names the static rate limit key(s) {static_keys:?}, which must exist before the workflow is registered: create them with RuntimeHandle::put_rate_limit, then register again"
                );
                Err(e.with_detail(hint))
            }
            Err(e) => Err(e),
        }
    }

    /// Starts the worker: registers it with the engine (Register) and starts taking work.
    /// Resolves with the worker id once the engine has accepted the registration, or fails with
    /// the registration's error: a refused token (UNAUTHENTICATED), PERMISSION_DENIED and
    /// INVALID_ARGUMENT fail at once; an unreachable engine fails after the bounded attempts of
    /// a synchronous path (CONTRACT.md §3). Later re-registrations (the engine lost the worker
    /// row) happen in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that the start goes on without its caller (the worker starts, or its
    /// failure is logged); only the answer is lost.
    pub async fn start_worker(&self, opts: WorkerOptions) -> Result<String, Error> {
        let worker = self.worker("start worker")?;
        // The probes first: a port that cannot be bound fails the start before anything runs.
        if let Some(addr) = self.config().healthcheck
            && self.inner.ops_addr.lock().is_none()
        {
            let bound = ops::serve(
                Arc::downgrade(&self.inner),
                addr,
                self.inner.conn.lifecycle().clone(),
            )
                .await
                .map_err(|e| {
                    Error::new(crate::Outcome::Invalid, "start worker").with_detail(format!(
                        "cannot serve /health and /metrics on {addr}: {e}; free the port or set HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT"
                    ))
                })?;
            tracing::info!(%bound, "serving /health and /metrics");
            *self.inner.ops_addr.lock() = Some(bound);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        worker
            .cast(WorkerMsg::Start(opts, tx))
            .map_err(|_| Error::closed("start worker"))?;
        rx.await.map_err(|_| Error::closed("start worker"))?
    }

    /// Triggers a run and returns its handle.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that matters for writes: if dropped after the request left,
    /// the run may exist without its id. Use [`TriggerOptions::idempotent`] with an idempotency
    /// key to make a repeat safe.
    pub async fn run_no_wait<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<RunHandle, Error> {
        self.inner
            .client
            .run_no_wait_with(workflow, input, TriggerOptions::default())
            .await
    }

    /// [`RuntimeHandle::run_no_wait`] with options.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_no_wait`].
    pub async fn run_no_wait_with<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
        opts: TriggerOptions,
    ) -> Result<RunHandle, Error> {
        self.inner
            .client
            .run_no_wait_with(workflow, input, opts)
            .await
    }

    /// Triggers a run and waits for its typed result.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_no_wait`] until the trigger returns; then cancel safe.
    pub async fn run<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<O, Error> {
        let h = self.run_no_wait(workflow, input).await?;
        h.result().await
    }

    /// Triggers one run per input through BulkTriggerWorkflow (1,000 runs per call); one
    /// answer per input, in order: its handle, or its own error (an input that does not
    /// serialize fails alone; a refused call fails the runs of its chunk).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (writes): a dropped call may have created some of the runs.
    pub async fn run_many<I: Serialize>(
        &self,
        workflow: &str,
        inputs: &[I],
    ) -> Vec<Result<RunHandle, Error>> {
        let defaults = TriggerOptions::default();
        let items: Vec<(&I, &TriggerOptions)> = inputs.iter().map(|i| (i, &defaults)).collect();
        self.inner.client.run_many(workflow, &items).await
    }

    /// Triggers one run per input (as [`RuntimeHandle::run_many`]) and waits for every
    /// result: one typed result or error per input, in order. The waits share the one result
    /// stream; a run that fails (or whose trigger was refused) gives its error in its place and
    /// the others still arrive.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_many`] until the triggers return; then cancel safe (dropping it
    /// stops the waits, not the runs).
    pub async fn run_many_results<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        inputs: &[I],
    ) -> Vec<Result<O, Error>> {
        let handles = self.run_many(workflow, inputs).await;
        futures::future::join_all(handles.into_iter().map(|h| async move {
            match h {
                Ok(h) => h.result().await,
                Err(e) => Err(e),
            }
        }))
        .await
    }

    /// [`RuntimeHandle::run_many`] with per-run options (metadata, priority).
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_many`].
    pub async fn run_many_with<I: Serialize>(
        &self,
        workflow: &str,
        runs: &[BulkRun<I>],
    ) -> Vec<Result<RunHandle, Error>> {
        let items: Vec<(&I, &TriggerOptions)> =
            runs.iter().map(|b| (&b.input, &b.options)).collect();
        self.inner.client.run_many(workflow, &items).await
    }

    /// Pushes many events through BulkPush (1,000 per call), each with its own metadata and
    /// priority; one event id or error per event, in order.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (writes).
    pub async fn push_many<P: Serialize>(
        &self,
        events: &[BulkEvent<P>],
    ) -> Vec<Result<String, Error>> {
        self.inner.client.push_many(events).await
    }

    /// Cancels runs (or tasks) by id: unfinished tasks are cancelled, running ones get a
    /// cancellation on their worker. Returns the ids the engine acknowledged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelling twice is harmless.
    pub async fn cancel_runs(&self, ids: &[String]) -> Result<Vec<String>, Error> {
        self.inner.client.cancel(Selection::Ids(ids.to_vec())).await
    }

    /// Cancels every run the filter selects (at most 20,000); returns their ids.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancel_where(&self, filter: &RunFilter) -> Result<Vec<String>, Error> {
        self.inner
            .client
            .cancel(Selection::Filter(filter.clone()))
            .await
    }

    /// Replays runs (a run id: its whole DAG; a task id: that task and what follows it):
    /// failed or cancelled tasks run again with a fresh retry budget. Returns the task ids
    /// replayed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write).
    pub async fn replay_runs(&self, ids: &[String]) -> Result<Vec<String>, Error> {
        self.inner.client.replay(Selection::Ids(ids.to_vec())).await
    }

    /// Replays every run the filter selects (at most 1,000); returns the task ids replayed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write).
    pub async fn replay_where(&self, filter: &RunFilter) -> Result<Vec<String>, Error> {
        self.inner
            .client
            .replay(Selection::Filter(filter.clone()))
            .await
    }

    /// A handle for an existing run id.
    pub fn run_handle(&self, run_id: impl Into<String>) -> RunHandle {
        RunHandle::new(run_id.into(), self.inner.client.clone())
    }

    /// Pushes an event (triggers every workflow listening for `key`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write): a dropped push may or may not have happened.
    pub async fn push<P: Serialize>(&self, key: &str, payload: &P) -> Result<String, Error> {
        self.push_with(key, payload, PushOptions::default()).await
    }

    /// [`RuntimeHandle::push`] with metadata (copied onto the runs it starts), a priority for
    /// those runs, and a scope (which event filters apply).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write).
    pub async fn push_with<P: Serialize>(
        &self,
        key: &str,
        payload: &P,
        opts: PushOptions,
    ) -> Result<String, Error> {
        const PATH: &str = "/EventsService/Push";
        let conn = &self.inner.conn;
        let req = self.inner.client.push_request(PATH, key, payload, &opts)?;
        let client = conn.events();
        conn.call(
            PATH,
            &client,
            &req,
            |mut c, r| async move { c.push(r).await },
        )
        .await
        .map(|e| e.event_id)
    }

    /// Hands `value` to every task of this runtime: a task reads it with [`Context::state`]
    /// (`ctx.state::<T>()`), as axum handlers read `State<T>`, instead of an `Arc` cloned into
    /// each closure. One value per type: setting a type again replaces its value for the tasks
    /// that ask after that (a task holding the old one keeps it).
    ///
    /// [`Context::state`]: crate::Context::state
    pub fn set_state<T: Send + Sync + 'static>(&self, value: T) {
        self.inner.tree.worker.state.set(value);
    }

    /// Sets labels on this runtime's worker at the engine; only the keys given change. Tasks
    /// that want or require labels ([`crate::TaskOptions::desired_label`]) see them at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an upsert can be repeated.
    pub async fn upsert_labels<K: Into<String>, V: Into<crate::worker::placement::LabelValue>>(
        &self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Result<(), Error> {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.inner.tree.worker.upsert_labels(labels).await
    }

    /// Declares (or changes) the rate limit `key`: `limit` units per `window`, shared by every
    /// task that takes units of it ([`crate::TaskOptions::rate_limit`]). Idempotent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: repeating it sets the same limit.
    pub async fn put_rate_limit(
        &self,
        key: &str,
        limit: i32,
        window: crate::worker::task::RateLimitWindow,
    ) -> Result<(), Error> {
        const PATH: &str = "/WorkflowService/PutRateLimit";
        if key.is_empty() || limit < 0 {
            return Err(Error::invalid(
                PATH,
                "a rate limit needs a key and a limit of 0 or more",
            ));
        }
        // Not namespaced, like the keys tasks name in `TaskOptions::rate_limit`.
        let req = proto::PutRateLimitRequest {
            key: key.to_string(),
            limit,
            duration: window.wire() as i32,
        };
        let conn = &self.inner.conn;
        let client = conn.workflows();
        conn.call(PATH, &client, &req, |mut c, r| async move {
            c.put_rate_limit(r).await
        })
        .await
        .map(|_| ())
    }

    /// The engine's version (GetVersion, a read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn engine_version(&self) -> Result<String, Error> {
        let conn = &self.inner.conn;
        let client = conn.dispatcher();
        conn.call(
            "/Dispatcher/GetVersion",
            &client,
            &proto::GetVersionRequest {},
            |mut c, r| async move { c.get_version(r).await },
        )
        .await
        .map(|v| v.version)
    }

    /// The run's details (GetRunDetails, a read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn run_details(&self, run_id: &str) -> Result<RunView, Error> {
        let d = self.inner.conn.run_details(run_id, None).await?;
        Ok(RunView::from_grpc(run_id, d))
    }

    /// The events of one run, as a stream that ends after the run's final event. Reconnects on
    /// transient errors while held, marking gaps with [`crate::client::events::RunEvent::Gap`].
    pub fn run_events(
        &self,
        run_id: &str,
    ) -> impl futures::Stream<Item = crate::client::events::RunEvent> + Send + 'static {
        crate::client::events::subscribe(
            self.inner.conn.clone(),
            crate::client::events::Follow::Run(run_id.to_string()),
        )
    }

    /// The events of every run whose additional metadata has `key` = `value`.
    pub fn events_by_metadata(
        &self,
        key: &str,
        value: &str,
    ) -> impl futures::Stream<Item = crate::client::events::RunEvent> + Send + 'static {
        crate::client::events::subscribe(
            self.inner.conn.clone(),
            crate::client::events::Follow::Metadata(key.to_string(), value.to_string()),
        )
    }

    /// REST operations (run details, run lists, crons, schedules, workers, rate limits).
    pub fn api(&self) -> crate::client::api::Api {
        crate::client::api::Api::new(self.inner.conn.clone())
    }

    /// Each listener's state, as watch channels.
    pub fn health(&self) -> BTreeMap<ListenerKind, watch::Receiver<ListenerState>> {
        self.inner
            .listeners
            .health
            .iter()
            .map(|(k, h)| (*k, h.subscribe()))
            .collect()
    }

    /// Task log lines dropped because the engine did not take them fast enough (the queue holds
    /// 1,024 lines).
    pub fn logs_dropped(&self) -> u64 {
        self.inner.tree.worker.logs.get().map_or(0, |q| q.dropped())
    }

    /// Reconnects per listener so far.
    pub fn reconnects(&self) -> BTreeMap<ListenerKind, u64> {
        self.inner
            .listeners
            .health
            .iter()
            .map(|(k, h)| (*k, h.reconnects()))
            .collect()
    }

    /// What the retry service says: whether unary gRPC and REST calls are retried, and each
    /// endpoint's retry budget now.
    ///
    /// # Errors
    ///
    /// [`Outcome::Closed`](crate::Outcome::Closed) after shutdown (the service is gone).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only asks.
    pub async fn retries(&self) -> Result<RetryReport, Error> {
        self.ask_retry_service(RetryMsg::Report).await
    }

    /// Turns unary retries (gRPC and REST) off, or back on, while the runtime runs: the
    /// operator's kill switch that `HATCHET_CLIENT_NO_RETRY` is at start. Off, every call
    /// makes one attempt; calls already between attempts stop at their next decision. Streams
    /// keep their reconnect rules. `true` cannot undo the environment's switches (the report
    /// says `off_by_environment`). Returns the report after the switch.
    ///
    /// # Errors
    ///
    /// [`Outcome::Closed`](crate::Outcome::Closed) after shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe once sent: the switch happens whether or not the answer is awaited.
    pub async fn set_retries(&self, on: bool) -> Result<RetryReport, Error> {
        self.ask_retry_service(|reply| RetryMsg::Switch(on, reply))
            .await
    }

    async fn ask_retry_service(
        &self,
        msg: impl FnOnce(ractor::RpcReplyPort<RetryReport>) -> RetryMsg,
    ) -> Result<RetryReport, Error> {
        let closed = || Error::closed("ask the retry service");
        let actor = self
            .inner
            .tree
            .retry_ref
            .lock()
            .clone()
            .ok_or_else(closed)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        actor.cast(msg(tx.into())).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())
    }

    /// Attempt counters per method.
    pub fn counters(&self) -> BTreeMap<String, MethodCounters> {
        self.inner.conn.grpc_core().ledger().snapshot()
    }

    /// Result waiters pending, by run id count.
    #[cfg(feature = "test-hooks")]
    pub fn pending_runs(&self) -> usize {
        self.inner.listeners.runs.kind.registry.pending()
    }

    /// Durable event waits pending on the durable-events listener (the path of engines before
    /// v0.80), by (task, signal) count.
    #[cfg(feature = "test-hooks")]
    pub fn pending_durable_event_waits(&self) -> usize {
        self.inner.listeners.events.kind.registry.pending()
    }

    /// What the worker has done so far: attempts started, completed, failed, cancelled; slots.
    pub fn task_counts(&self) -> crate::worker::TaskCounts {
        self.inner.tree.worker.task_counts()
    }

    /// Where `/health` and `/metrics` are served, once `start_worker` started them
    /// ([`ClientConfig::healthcheck`]).
    pub fn ops_addr(&self) -> Option<std::net::SocketAddr> {
        *self.inner.ops_addr.lock()
    }

    /// The worker's current id, once registered.
    pub fn worker_id(&self) -> Option<String> {
        self.inner.tree.worker.identity.get()
    }

    /// Restarts of each listener's actor so far (after a crash), as the stream supervisor
    /// counted them.
    #[cfg(feature = "test-hooks")]
    pub fn listener_restarts(&self) -> BTreeMap<ListenerKind, u64> {
        let l = &self.inner.listeners;
        let mut out = BTreeMap::from([
            (ListenerKind::WorkflowRuns, l.runs.restarts()),
            (ListenerKind::DurableEvents, l.events.restarts()),
            (ListenerKind::DurableTask, l.durable.restarts()),
            (ListenerKind::WorkerActions, 0),
        ]);
        if let Some(a) = l.actions() {
            out.insert(ListenerKind::WorkerActions, a.restarts());
        }
        out
    }

    /// Test and chaos hook: makes the named listener's actor panic; the stream supervisor
    /// restarts it with its registry (within the restart intensity limit).
    #[cfg(feature = "test-hooks")]
    pub fn crash_listener(&self, kind: ListenerKind) {
        self.inner.listeners.crash(kind);
    }

    /// Test and chaos hook: makes the stream supervisor itself panic; the root supervisor
    /// restarts it, and it brings back every listener, the worker's included.
    #[cfg(feature = "test-hooks")]
    pub fn crash_stream_supervisor(&self) {
        if let Some(s) = self.inner.tree.stream_sup.lock().as_ref() {
            let _ = s.cast(StreamSupMsg::Crash);
        }
    }

    /// Shuts down: the worker drains (CONTRACT.md §5: paused at the engine, heartbeats going on
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

    /// Whether the runtime is up and its actor tree runs: the root supervisor, the stream
    /// supervisor and the worker actor (what `/live` reads).
    pub(crate) fn actor_tree_alive(&self) -> bool {
        use ractor::ActorStatus;
        let running = |s: ActorStatus| matches!(s, ActorStatus::Running | ActorStatus::Upgrading);
        let t = &self.inner.tree;
        !self.is_closed()
            && self
                .inner
                .root
                .lock()
                .as_ref()
                .is_some_and(|r| running(r.get_status()))
            && t.stream_sup
                .lock()
                .as_ref()
                .is_some_and(|r| running(r.get_status()))
            && t.worker_ref
                .lock()
                .as_ref()
                .is_some_and(|r| running(r.get_status()))
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
        tracing::warn!(
            "the last RuntimeHandle was dropped without shutdown(): stopping the runtime now, without a drain"
        );
        stop_now(self);
    }
}
