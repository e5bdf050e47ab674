//! The runtime: [`Runtime::spawn`] builds the actor tree and returns a cheap, cloneable
//! [`RuntimeHandle`] through which a process registers workflows, runs a worker, triggers runs and
//! awaits results.
//!
//! # Shape
//!
//! ```text
//! RuntimeHandle (Clone; Arc<Shared>)
//!   root supervisor (ractor)
//!     retry service          owns the policy, budget and ledger; calls run in their callers'
//!                            tasks against the shared core (never a serial queue)
//!     stream supervisor      restarts crashed listeners with their registries intact
//!       workflow-runs listener, worker-actions listener, durable-task listener
//!     worker                 workflow registry, slots, execution, step events
//! ```
//!
//! # Invariants
//!
//! 1. The lifecycle token is cancelled only by [`RuntimeHandle::shutdown`]; then every pending
//!    waiter fails at once with the *closed* outcome and every actor stops.
//! 2. Every unary call goes through the retry core; streams go through the listeners only.

pub mod supervisor;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ractor::ActorRef;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::{RunHandle, TriggerOptions, encode_input};
use crate::config::ClientConfig;
use crate::error::Error;
use crate::listener::durable_task::{DurableMsg, DurableRegistry};
use crate::listener::health::{HealthReporter, ListenerKind, ListenerState};
use crate::listener::runs::{RunRegistry, RunsMsg, closed_error};
use crate::listener::{AuthChannel, ListenerCtx};
use crate::proto::{self, v1};
use crate::retry::class::ClassOverride;
use crate::retry::grpc::{call_unary, request_with_timeout};
use crate::retry::{BudgetConfig, Ledger, MethodCounters, RetryCore};
use crate::transport::{self, AuthInterceptor};
use crate::worker::{WorkerMsg, WorkerOptions, Workflow};

/// Everything the handle and the actors share.
pub struct Shared {
    /// Configuration.
    pub config: Arc<ClientConfig>,
    pub(crate) ctx: ListenerCtx,
    pub(crate) http: reqwest::Client,
    pub(crate) rest_core: Arc<RetryCore>,
    pub(crate) runs: Arc<RunRegistry>,
    pub(crate) durable: Arc<DurableRegistry>,
    pub(crate) health: BTreeMap<ListenerKind, Arc<HealthReporter>>,
    pub(crate) runs_ref: Mutex<Option<ActorRef<RunsMsg>>>,
    pub(crate) durable_ref: Mutex<Option<ActorRef<DurableMsg>>>,
    pub(crate) events: Arc<crate::listener::durable_events::EventRegistry>,
    pub(crate) events_ref:
        Mutex<Option<ActorRef<crate::listener::durable_events::DurableEventsMsg>>>,
    /// The engine is older than v0.80.0: durable waits use the legacy event path.
    pub(crate) legacy_durable: std::sync::atomic::AtomicBool,
    pub(crate) worker_ref: Mutex<Option<ActorRef<WorkerMsg>>>,
    pub(crate) stream_sup: Mutex<Option<ActorRef<supervisor::StreamMsg>>>,
    pub(crate) worker: Arc<crate::worker::WorkerCore>,
    pub(crate) root: Mutex<Option<ActorRef<supervisor::RootMsg>>>,
    pub(crate) root_done: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Task log lines on their way to the engine (started on first use).
    pub(crate) logs: std::sync::OnceLock<crate::worker::logs::LogQueue>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn workflows(&self) -> proto::workflow_service_client::WorkflowServiceClient<AuthChannel> {
        proto::workflow_service_client::WorkflowServiceClient::with_interceptor(
            self.ctx.channel.clone(),
            self.ctx.auth.clone(),
        )
    }

    fn events(&self) -> proto::events_service_client::EventsServiceClient<AuthChannel> {
        proto::events_service_client::EventsServiceClient::with_interceptor(
            self.ctx.channel.clone(),
            self.ctx.auth.clone(),
        )
    }

    pub(crate) fn core(&self) -> &RetryCore {
        &self.ctx.core
    }

    /// Runs one unary call under the gRPC retry core, cancelled by runtime shutdown: `call`
    /// gets a clone of `client` and of `req` (with the attempt's timeout) for every attempt.
    pub(crate) async fn unary<C, Req, Resp, F, Fut>(
        &self,
        path: &'static str,
        over: Option<ClassOverride>,
        timeout: Option<std::time::Duration>,
        client: &C,
        req: &Req,
        call: F,
    ) -> Result<Resp, Error>
    where
        C: Clone,
        Req: Clone,
        F: Fn(C, tonic::Request<Req>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        call_unary(
            self.core(),
            path,
            over,
            timeout,
            Some(self.ctx.lifecycle.clone()),
            |t| {
                let fut = call(client.clone(), request_with_timeout(req.clone(), t));
                async move { fut.await.map(tonic::Response::into_inner) }
            },
        )
        .await
    }

    pub(crate) fn ensure_runs_stream(&self) {
        if let Some(r) = self.runs_ref.lock().as_ref() {
            let _ = r.cast(RunsMsg::Ensure);
        }
    }

    pub(crate) fn ensure_events_stream(&self) {
        if let Some(r) = self.events_ref.lock().as_ref() {
            let _ = r.cast(crate::listener::subscriptions::KeyedMsg::Ensure);
        }
    }

    pub(crate) fn ensure_durable_stream(&self) {
        if let Some(r) = self.durable_ref.lock().as_ref() {
            let _ = r.cast(DurableMsg::Ensure);
        }
    }

    /// Triggers `workflow` with a JSON `input`; returns the run id.
    pub(crate) async fn trigger(
        &self,
        workflow: &str,
        input: String,
        opts: TriggerOptions,
    ) -> Result<String, Error> {
        const PATH: &str = "/WorkflowService/TriggerWorkflow";
        if self.ctx.lifecycle.is_cancelled() {
            return Err(Error::closed(PATH));
        }
        let metadata = opts
            .metadata
            .as_ref()
            .map(|m| serde_json::Value::Object(m.clone()).to_string());
        let (parent_id, parent_task, child_index) = match &opts.parent {
            Some((p, t, i)) => (Some(p.clone()), Some(t.clone()), Some(*i)),
            None => (None, None, None),
        };
        let req = v1::TriggerWorkflowRequest {
            name: self.config.namespaced(workflow),
            input,
            parent_id,
            parent_task_run_external_id: parent_task,
            child_index,
            child_key: opts.child_key.clone(),
            additional_metadata: metadata,
            desired_worker_id: None,
            priority: opts.priority,
            desired_worker_labels: Default::default(),
        };
        let over = if opts.parent.is_some() {
            Some(ClassOverride::ChildKeyed)
        } else if opts.idempotent {
            Some(ClassOverride::CallerIdempotent)
        } else {
            None
        };
        let client = self.workflows();
        let res = self
            .unary(
                PATH,
                over,
                opts.timeout,
                &client,
                &req,
                |mut c, r| async move { c.trigger_workflow(r).await },
            )
            .await
            .map(|r| r.workflow_run_id);
        match res {
            Ok(id) => Ok(id),
            // An idempotent trigger that collides resolves to the existing run (CONTRACT.md §2).
            Err(e) if opts.idempotent => match e.status().and_then(proto::idempotency_collision) {
                Some(c) => Ok(c.existing_run_external_id),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn run_no_wait_with<I: Serialize>(
        self: &Arc<Self>,
        workflow: &str,
        input: &I,
        opts: TriggerOptions,
    ) -> Result<RunHandle, Error> {
        let input = encode_input("trigger", input)?;
        let id = self.trigger(workflow, input, opts).await?;
        Ok(RunHandle::new(id, self.clone()))
    }

    pub(crate) async fn put_log(&self, req: proto::PutLogRequest) -> Result<(), Error> {
        let client = self.events();
        self.unary(
            "/EventsService/PutLog",
            None,
            None,
            &client,
            &req,
            |mut c, r| async move { c.put_log(r).await },
        )
        .await
        .map(|_| ())
    }

    pub(crate) async fn put_stream(&self, req: proto::PutStreamEventRequest) -> Result<(), Error> {
        let client = self.events();
        self.unary(
            "/EventsService/PutStreamEvent",
            None,
            None,
            &client,
            &req,
            |mut c, r| async move { c.put_stream_event(r).await },
        )
        .await
        .map(|_| ())
    }
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
        let core = Arc::new(RetryCore::new(policy, opts.budget, ledger.clone(), seed));
        let rest_core = Arc::new(RetryCore::new(
            rest_policy,
            opts.budget,
            ledger,
            seed.wrapping_add(1),
        ));
        let ctx = ListenerCtx {
            channel,
            auth,
            config: Arc::new(config.clone()),
            lifecycle: CancellationToken::new(),
            core,
            backoff: opts.stream_backoff,
            seed: seed.wrapping_add(2),
        };
        let health = [
            ListenerKind::WorkerActions,
            ListenerKind::WorkflowRuns,
            ListenerKind::DurableEvents,
            ListenerKind::DurableTask,
        ]
        .into_iter()
        .map(|k| (k, Arc::new(HealthReporter::new(k))))
        .collect();
        let http = crate::transport::http_client(&config)?;
        let shared = Arc::new(Shared {
            config: Arc::new(config),
            ctx,
            http,
            rest_core,
            runs: Arc::new(RunRegistry::default()),
            durable: Arc::new(DurableRegistry::default()),
            health,
            runs_ref: Mutex::new(None),
            durable_ref: Mutex::new(None),
            events: Arc::default(),
            events_ref: Mutex::new(None),
            legacy_durable: std::sync::atomic::AtomicBool::new(false),
            worker_ref: Mutex::new(None),
            stream_sup: Mutex::new(None),
            worker: Arc::new(crate::worker::WorkerCore::default()),
            root: Mutex::new(None),
            root_done: Mutex::new(None),
            logs: std::sync::OnceLock::new(),
        });
        supervisor::start(shared.clone()).await?;
        Ok(RuntimeHandle { shared })
    }
}

/// The handle of a runtime: cheap to clone, `Send + Sync`.
#[derive(Clone, Debug)]
pub struct RuntimeHandle {
    shared: Arc<Shared>,
}

impl RuntimeHandle {
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
        &self.shared.config
    }

    /// Registers a workflow with the engine (PutWorkflow) and with this runtime's worker.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: PutWorkflow is idempotent; the worker keeps the definition either way.
    pub async fn register(&self, workflow: Workflow) -> Result<(), Error> {
        let worker = self
            .shared
            .worker_ref
            .lock()
            .clone()
            .ok_or_else(|| Error::closed("register"))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        worker
            .cast(WorkerMsg::Register(Box::new(workflow), tx))
            .map_err(|_| Error::closed("register"))?;
        rx.await.map_err(|_| Error::closed("register"))?
    }

    /// Starts the worker: registers it (Register) and starts taking work.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the worker starts either way; the result only reports it.
    pub async fn start_worker(&self, opts: WorkerOptions) -> Result<(), Error> {
        // Engines before v0.80.0 have no DurableTask stream: durable waits take the legacy path.
        let legacy = match self.engine_version().await {
            Ok(v) => crate::worker::version_below(&v, (0, 80, 0)),
            Err(e) => e
                .status()
                .is_some_and(|s| s.code() == tonic::Code::Unimplemented),
        };
        if legacy {
            tracing::info!(
                "the engine predates the DurableTask stream (v0.80.0): durable waits use RegisterDurableEvent"
            );
        }
        self.shared
            .legacy_durable
            .store(legacy, std::sync::atomic::Ordering::Relaxed);
        let worker = self
            .shared
            .worker_ref
            .lock()
            .clone()
            .ok_or_else(|| Error::closed("start worker"))?;
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
        self.shared
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
        self.shared.run_no_wait_with(workflow, input, opts).await
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

    /// Triggers many runs; one result per input, in order (a failed trigger does not stop the
    /// others).
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_no_wait`].
    pub async fn run_many<I: Serialize>(
        &self,
        workflow: &str,
        inputs: &[I],
    ) -> Vec<Result<RunHandle, Error>> {
        futures::future::join_all(inputs.iter().map(|i| self.run_no_wait(workflow, i))).await
    }

    /// A handle for an existing run id.
    pub fn run_handle(&self, run_id: impl Into<String>) -> RunHandle {
        RunHandle::new(run_id.into(), self.shared.clone())
    }

    /// Pushes an event (triggers every workflow listening for `key`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write): a dropped push may or may not have happened.
    pub async fn push<P: Serialize>(&self, key: &str, payload: &P) -> Result<String, Error> {
        const PATH: &str = "/EventsService/Push";
        let payload = encode_input("push", payload)?;
        let req = proto::PushEventRequest {
            key: self.shared.config.namespaced(key),
            payload,
            event_timestamp: Some(proto::timestamp_now()),
            additional_metadata: None,
            priority: None,
            scope: None,
        };
        let client = self.shared.events();
        self.shared
            .unary(PATH, None, None, &client, &req, |mut c, r| async move {
                c.push(r).await
            })
            .await
            .map(|e| e.event_id)
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
        window: crate::proto::v1::RateLimitDuration,
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
            duration: window as i32,
        };
        let client = self.shared.workflows();
        self.shared
            .unary(PATH, None, None, &client, &req, |mut c, r| async move {
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
        let client = self.shared.ctx.dispatcher();
        self.shared
            .unary(
                "/Dispatcher/GetVersion",
                None,
                None,
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
    pub async fn run_details(&self, run_id: &str) -> Result<v1::GetRunDetailsResponse, Error> {
        let client = self.shared.ctx.admin();
        let req = v1::GetRunDetailsRequest {
            external_id: run_id.to_string(),
        };
        self.shared
            .unary(
                "/v1.AdminService/GetRunDetails",
                None,
                None,
                &client,
                &req,
                |mut c, r| async move { c.get_run_details(r).await },
            )
            .await
    }

    /// The events of one run, as a stream that ends after the run's final event. Reconnects on
    /// transient errors while held, marking gaps with [`crate::client::events::RunEvent::Gap`].
    pub fn run_events(
        &self,
        run_id: &str,
    ) -> impl futures::Stream<Item = crate::client::events::RunEvent> + Send + 'static {
        crate::client::events::subscribe(
            self.shared.clone(),
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
            self.shared.clone(),
            crate::client::events::Follow::Metadata(key.to_string(), value.to_string()),
        )
    }

    /// REST operations (run details, run lists, crons, schedules, workers, rate limits).
    pub fn api(&self) -> crate::client::api::Api {
        crate::client::api::Api::new(self.shared.clone())
    }

    /// Each listener's state, as watch channels.
    pub fn health(&self) -> BTreeMap<ListenerKind, watch::Receiver<ListenerState>> {
        self.shared
            .health
            .iter()
            .map(|(k, h)| (*k, h.subscribe()))
            .collect()
    }

    /// Task log lines dropped because the engine did not take them fast enough (the queue holds
    /// [`crate::worker::logs::LOG_QUEUE`] lines).
    pub fn logs_dropped(&self) -> u64 {
        self.shared.logs.get().map_or(0, |q| q.dropped())
    }

    /// Reconnects per listener so far.
    pub fn reconnects(&self) -> BTreeMap<ListenerKind, u64> {
        self.shared
            .health
            .iter()
            .map(|(k, h)| (*k, h.reconnects()))
            .collect()
    }

    /// Attempt counters per method.
    pub fn counters(&self) -> BTreeMap<String, MethodCounters> {
        self.shared.core().ledger().snapshot()
    }

    /// Result waiters pending, by run id count.
    pub fn pending_runs(&self) -> usize {
        self.shared.runs.pending()
    }

    /// The worker's current id, once registered.
    pub fn worker_id(&self) -> Option<String> {
        crate::worker::worker_id(&self.shared)
    }

    /// Test and chaos hook: makes a listener's actor panic; its supervisor restarts it.
    pub fn crash_listener(&self, kind: ListenerKind) {
        match kind {
            ListenerKind::WorkflowRuns => {
                if let Some(r) = self.shared.runs_ref.lock().as_ref() {
                    let _ = r.cast(RunsMsg::Crash);
                }
            }
            ListenerKind::DurableTask => {
                if let Some(r) = self.shared.durable_ref.lock().as_ref() {
                    let _ = r.cast(DurableMsg::Crash);
                }
            }
            _ => {
                if let Some(r) = self.shared.worker_ref.lock().as_ref() {
                    let _ = r.cast(WorkerMsg::CrashActions);
                }
            }
        }
    }

    /// Shuts down: the worker stops taking work and waits up to `drain` for running tasks (then
    /// cancels them), every pending waiter fails with the *closed* outcome, every stream closes
    /// and every actor stops.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdown is started at once; awaiting only waits for it to finish.
    pub async fn shutdown(&self, drain: Duration) {
        let s = &self.shared;
        let worker = s.worker_ref.lock().clone();
        if let Some(w) = worker {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if w.cast(WorkerMsg::Drain(drain, tx)).is_ok() {
                let _ = rx.await;
            }
        }
        s.ctx.lifecycle.cancel();
        s.runs.fail_all(true, |run| closed_error(run));
        s.events.fail_all(true, |(task, _)| {
            Error::closed("durable wait").with_detail(format!("task {task}"))
        });
        s.durable.close();
        for h in s.health.values() {
            h.stopped(None);
        }
        let root = s.root.lock().take();
        if let Some(root) = root {
            root.stop(None);
        }
        let done = s.root_done.lock().take();
        if let Some(done) = done {
            let _ = done.await;
        }
    }

    /// Whether the runtime was shut down.
    pub fn is_closed(&self) -> bool {
        self.shared.ctx.lifecycle.is_cancelled()
    }
}
