//! Reading the engine and the runtime: run details and events, the REST API, health, the
//! retry service's report and switch, counters, and the test hooks.

use std::collections::BTreeMap;

use tokio::sync::watch;

use super::RuntimeHandle;
use super::supervisor::RetryMsg;
#[cfg(feature = "test-hooks")]
use super::supervisor::StreamSupMsg;
use crate::client::view::RunView;
use crate::error::Error;
use crate::listener::health::{ListenerKind, ListenerState};
use crate::protocol as proto;
use crate::retry::{MethodCounters, RetryReport};

impl RuntimeHandle {
    /// An exporter of the application's OpenTelemetry spans to the engine's collector (feature
    /// `otel-export`), over this runtime's connection and token: give it to the tracer provider
    /// ([`crate::otel_export::EngineSpanExporter`]), and the spans of triggers, tasks and the code they run
    /// join each run's trace at the engine ([`crate::client::api::Api::run_trace`]), as the official SDKs'
    /// instrumentors send theirs.
    #[cfg(feature = "otel-export")]
    pub fn span_exporter(&self) -> crate::otel_export::EngineSpanExporter {
        crate::otel_export::EngineSpanExporter::new(
            self.inner.conn.clone(),
            self.inner.tokio.clone(),
        )
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
    /// [`Outcome::Closed`](crate::error::Outcome::Closed) after shutdown (the service is gone).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only asks.
    pub async fn retries(&self) -> Result<RetryReport, Error> {
        self.ask_retry_service(RetryMsg::Report).await
    }

    /// Turns unary retries (gRPC and REST) off, or back on, while the runtime runs: the
    /// operator's kill switch that `HATCHET_CLIENT_NO_RETRY` is at start. Off, every call
    /// started after the switch makes one attempt. Streams keep their reconnect rules. `true` cannot undo the environment's switches (the report
    /// says `off_by_environment`). Returns the report after the switch.
    ///
    /// # Errors
    ///
    /// [`Outcome::Closed`](crate::error::Outcome::Closed) after shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe once polled: the first poll sends the switch, which then happens whether or
    /// not the answer is awaited.
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
            .ok_or_else(|| self.inner.tree.gone("ask the retry service"))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        actor.cast(msg(tx.into())).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())
    }

    /// Attempt counters per method.
    pub fn counters(&self) -> BTreeMap<String, MethodCounters> {
        self.inner.conn.counters()
    }

    /// Result waiters pending, by run id count. For this workspace's tests (feature
    /// `test-hooks`), not a stable API.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn pending_runs(&self) -> usize {
        self.inner.listeners.runs.kind.registry.pending()
    }

    /// Durable event waits pending on the legacy durable-events listener, by (task, signal)
    /// count: only engines before v0.80 use it (a newer engine's durable waits are on the
    /// durable-task stream, and this stays 0). For this workspace's tests (feature
    /// `test-hooks`), not a stable API.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn pending_durable_event_waits(&self) -> usize {
        self.inner.listeners.events.kind.registry.pending()
    }

    /// What the worker has done so far: attempts started, completed, failed, cancelled; slots.
    pub fn task_counts(&self) -> crate::worker::TaskCounts {
        self.inner.tree.worker.task_counts()
    }

    /// Where `/health` and `/metrics` are served, once `start_worker` started them
    /// ([`ClientConfig::healthcheck`](crate::config::ClientConfig::healthcheck)).
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

    /// Test hook: the next `n` acks of durable waits are dropped and their stream let go, as if
    /// it were cut between the engine's recording and its answer (works on any engine).
    #[cfg(feature = "test-hooks")]
    pub fn lose_next_durable_wait_acks(&self, n: u32) {
        self.inner
            .listeners
            .durable
            .kind
            .registry
            .lose_next_wait_acks(n);
    }

    /// Test and chaos hook: makes the worker actor panic; the root supervisor restarts it
    /// (within the restart intensity limit).
    #[cfg(feature = "test-hooks")]
    pub fn crash_worker_actor(&self) {
        if let Some(w) = self.inner.tree.worker_ref.lock().as_ref() {
            let _ = w.cast(crate::worker::WorkerMsg::Crash);
        }
    }

    /// Test and chaos hook: makes the retry service panic; the root supervisor restarts it
    /// (within the restart intensity limit).
    #[cfg(feature = "test-hooks")]
    pub fn crash_retry_service(&self) {
        if let Some(r) = self.inner.tree.retry_ref.lock().as_ref() {
            let _ = r.cast(crate::runtime::supervisor::RetryMsg::Crash);
        }
    }

    /// Test and chaos hook: makes the stream supervisor itself panic; the root supervisor
    /// restarts it, and it brings back every listener, the worker's included.
    #[cfg(feature = "test-hooks")]
    pub fn crash_stream_supervisor(&self) {
        if let Some(s) = self.inner.tree.stream_sup.lock().as_ref() {
            let _ = s.cast(StreamSupMsg::Crash);
        }
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
