//! The connection layer: everything that reaches the engine, as one value handed down to the
//! listeners, the worker and the client (never a hub they reach back up into).
//!
//! A [`Connection`] holds the configuration, the gRPC channel with its auth interceptor, the two
//! retry cores (gRPC and REST, one budget per endpoint, one ledger), the HTTP client, the
//! runtime's lifecycle token, the listeners' reconnect backoff, the jitter seed and the engine
//! watch ([`watch`]: whether the engine answers again after a listener lost it).
//!
//! # Invariants
//!
//! 1. Every unary gRPC call made through [`Connection::unary`] and every REST call made through
//!    [`Connection::rest`] runs under a retry core (ledger, deadlines, budget), cancelled by the
//!    runtime's lifecycle token unless the caller gives its own.
//! 2. Cloning is cheap (an `Arc`); every clone shares the same channel, cores and token.
//! 3. Nothing here imports the runtime, the worker, the client or the listeners: this module
//!    only looks down (config, transport, retry, proto).

pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::config::ClientConfig;
use crate::error::{Cause, Error, Outcome};
use crate::protocol::{self as proto, v1};
pub(crate) use crate::retry::grpc::CallOpts;
use crate::retry::grpc::{call_unary, request_with_timeout};
use crate::retry::rest::RestResponse;
use crate::retry::{Backoff, RetryCore};
use crate::transport::AuthInterceptor;

/// The authenticated channel type every client uses.
pub(crate) type AuthChannel = InterceptedService<Channel, AuthInterceptor>;

/// The two reconnect backoff profiles of the listeners, and the polling fallback's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamBackoff {
    /// Listeners in general (1 s base, 30 s cap).
    pub stream: Backoff,
    /// The workflow-runs listener while waiters are pending (1 s base, 5 s cap).
    pub waiters: Backoff,
    /// Without a result stream this long, waiters are also polled (30 s).
    pub poll_after: Duration,
    /// The polling interval then (2 s).
    pub poll_every: Duration,
}

/// Without a result stream this long, waiters are polled (docs/contract.md §4).
pub(crate) const POLL_AFTER: Duration = Duration::from_secs(30);
/// Poll interval of the fallback.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(2);

impl StreamBackoff {
    /// The defaults (docs/contract.md §3 and §4): listeners 1 s to 30 s, the workflow-runs listener
    /// with waiters 1 s to 5 s, polling every 2 s after 30 s without a result stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reconnect backoff of the listeners in general.
    pub fn stream(mut self, backoff: Backoff) -> Self {
        self.stream = backoff;
        self
    }

    /// The reconnect backoff of the workflow-runs listener while waiters are pending.
    pub fn waiters(mut self, backoff: Backoff) -> Self {
        self.waiters = backoff;
        self
    }

    /// How long waiters go without a result stream before they are also polled.
    pub fn poll_after(mut self, after: Duration) -> Self {
        self.poll_after = after;
        self
    }

    /// The polling interval then.
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.poll_every = every;
        self
    }
}

impl Default for StreamBackoff {
    fn default() -> Self {
        StreamBackoff {
            stream: crate::retry::backoff::STREAM_BACKOFF,
            waiters: crate::retry::backoff::WAITER_STREAM_BACKOFF,
            poll_after: POLL_AFTER,
            poll_every: POLL_EVERY,
        }
    }
}

/// The timing of the worker's sweep for attempts the engine holds as its own and lost
/// (`worker::reclaim`); kept here, beside the listeners' backoff, as a setting the connection
/// carries down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReclaimTiming {
    /// How often the engine's view of this worker's attempts is read (15 s).
    pub every: Duration,
    /// How long an attempt must be seen held and not received before it is run (45 s: longer
    /// than the engine's own way back on RabbitMQ, where a dispatcher queue's message dead-letters
    /// after 20 s and the scheduler retries the attempt as an internal failure; the worker acts
    /// only where the engine will not).
    pub grace: Duration,
    /// How long after its answer an at-risk final may be sent again (90 s).
    pub resend_after: Duration,
    /// How long the engine must have answered every heartbeat since the last disturbance, with
    /// no final of this worker answered since (so no witness), before its core counts as
    /// recording ends again (150 s: past a killed engine's start, its successor's one-minute
    /// rebalance of its tenant, and that minute again), so an idle worker's lost final of a
    /// one-task run is sent again too (a DAG task's waits for a witness).
    pub alone_after: Duration,
}

impl Default for ReclaimTiming {
    fn default() -> Self {
        ReclaimTiming {
            every: Duration::from_secs(15),
            grace: Duration::from_secs(45),
            resend_after: Duration::from_secs(90),
            alone_after: Duration::from_secs(150),
        }
    }
}

impl ReclaimTiming {
    /// The defaults: a read every 15 s, 45 s of grace, finals sent again after 90 s, and
    /// without a witness 150 s after the last disturbance.
    pub fn new() -> Self {
        Self::default()
    }

    /// How often the engine's view of this worker's attempts is read.
    pub fn every(mut self, d: Duration) -> Self {
        self.every = d;
        self
    }

    /// How long an attempt must be seen held and not received before it is run.
    pub fn grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }

    /// How long after its answer an at-risk final may be sent again.
    pub fn resend_after(mut self, d: Duration) -> Self {
        self.resend_after = d;
        self
    }

    /// How long after the last disturbance a worker that answered no final since sends its
    /// at-risk finals again without a witness.
    pub fn alone_after(mut self, d: Duration) -> Self {
        self.alone_after = d;
        self
    }
}

/// What a [`Connection`] is built from.
pub(crate) struct Parts {
    pub config: ClientConfig,
    pub channel: Channel,
    pub auth: AuthInterceptor,
    pub grpc: Arc<RetryCore>,
    pub rest: Arc<RetryCore>,
    pub http: reqwest::Client,
    pub lifecycle: CancellationToken,
    pub backoff: StreamBackoff,
    pub heartbeat_every: Duration,
    /// The worker's sweep for attempts the engine lost.
    pub reclaim: ReclaimTiming,
    /// How often long-lived streams move to a fresh one (`None`: never).
    pub rotation: Option<Duration>,
    pub seed: u64,
}

/// The connection to one engine. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connection {
    inner: Arc<Parts>,
    watch: Arc<watch::EngineWatch>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(crate) fn new(parts: Parts) -> Self {
        Connection {
            inner: Arc::new(parts),
            watch: Arc::default(),
        }
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The runtime's lifecycle token: cancelled only by shutdown.
    pub(crate) fn lifecycle(&self) -> &CancellationToken {
        &self.inner.lifecycle
    }

    /// The gRPC retry core (policy, budget, ledger).
    pub(crate) fn grpc_core(&self) -> &RetryCore {
        &self.inner.grpc
    }

    /// The REST retry core.
    pub(crate) fn rest_core(&self) -> &RetryCore {
        &self.inner.rest
    }

    /// Both endpoints' retry state now: the one read of it, which the retry service answers
    /// with (`runtime/supervisor.rs`).
    pub(crate) fn retry_report(&self) -> crate::retry::report::RetryReport {
        crate::retry::report::RetryReport {
            grpc: self.inner.grpc.report(),
            rest: self.inner.rest.report(),
        }
    }

    /// Every method's attempt counters, from the one ledger both retry cores count in: the one
    /// read of them (`RuntimeHandle::counters`, and through it `/metrics`).
    pub(crate) fn counters(
        &self,
    ) -> std::collections::BTreeMap<String, crate::retry::ledger::MethodCounters> {
        self.inner.grpc.ledger().snapshot()
    }

    /// The listeners' reconnect backoff.
    pub(crate) fn backoff(&self) -> StreamBackoff {
        self.inner.backoff
    }

    /// The worker's heartbeat interval.
    pub(crate) fn heartbeat_every(&self) -> Duration {
        self.inner.heartbeat_every
    }

    /// The timing of the worker's sweep for attempts the engine lost.
    pub(crate) fn reclaim_timing(&self) -> ReclaimTiming {
        self.inner.reclaim
    }

    /// How often the long-lived streams move to a fresh one (`None`: never).
    pub(crate) fn stream_rotation(&self) -> Option<Duration> {
        self.inner.rotation
    }

    /// A jitter generator for one consumer of randomness: the runtime seed mixed with `name`, so
    /// a seeded runtime reconnects on a reproducible schedule.
    pub(crate) fn rng(&self, name: &str) -> rand::rngs::StdRng {
        use rand::SeedableRng as _;
        let salt = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        rand::rngs::StdRng::seed_from_u64(self.inner.seed ^ salt)
    }

    /// A listener could not reach the engine: the engine watch probes it until it answers, once
    /// for the whole runtime ([`watch`]; a call while a probe loop runs joins it).
    pub(crate) fn suspect_engine(&self) {
        if !self.watch.begin() {
            return;
        }
        const PATH: &str = "/Dispatcher/GetVersion";
        let conn = self.clone();
        tokio::spawn(async move {
            let mut rng = conn.rng("engine_watch");
            let ledger = conn.grpc_core().ledger();
            let probe = || {
                let mut client = conn.dispatcher();
                ledger.operation(PATH);
                ledger.attempt(PATH, false);
                async move {
                    let r = client
                        .get_version(request_with_timeout(
                            proto::GetVersionRequest {},
                            watch::PROBE_DEADLINE,
                        ))
                        .await;
                    let failed = r.err().map(|s| s.code());
                    ledger.finished(PATH, if failed.is_none() { "ok" } else { "failed" });
                    failed
                }
            };
            watch::probe_until_answered(&conn.watch, conn.lifecycle(), &mut rng, probe).await;
        });
    }

    /// Whether the engine watch is probing (the engine could not be reached and has not
    /// answered since): the heartbeat leaves the probing to it.
    pub(crate) fn engine_unanswered(&self) -> bool {
        self.watch.probing()
    }

    /// The engine's returns from now on, for a stream actor to open at once on each.
    pub(crate) fn engine_returns(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch.subscribe()
    }

    /// The channel with the client's credentials (for a call no generated client makes).
    pub(crate) fn authed(&self) -> AuthChannel {
        InterceptedService::new(self.inner.channel.clone(), self.inner.auth.clone())
    }

    /// A `Dispatcher` client.
    pub(crate) fn dispatcher(&self) -> proto::dispatcher_client::DispatcherClient<AuthChannel> {
        proto::dispatcher_client::DispatcherClient::new(self.authed())
            .max_decoding_message_size(self.config().max_recv_message_bytes)
            .max_encoding_message_size(self.config().max_send_message_bytes)
    }

    /// A `v1.AdminService` client.
    pub(crate) fn admin(&self) -> v1::admin_service_client::AdminServiceClient<AuthChannel> {
        v1::admin_service_client::AdminServiceClient::new(self.authed())
            .max_decoding_message_size(self.config().max_recv_message_bytes)
            .max_encoding_message_size(self.config().max_send_message_bytes)
    }

    /// A `v1.V1Dispatcher` client.
    pub(crate) fn v1_dispatcher(
        &self,
    ) -> v1::v1_dispatcher_client::V1DispatcherClient<AuthChannel> {
        v1::v1_dispatcher_client::V1DispatcherClient::new(self.authed())
            .max_decoding_message_size(self.config().max_recv_message_bytes)
            .max_encoding_message_size(self.config().max_send_message_bytes)
    }

    /// A `WorkflowService` client.
    pub(crate) fn workflows(
        &self,
    ) -> proto::workflow_service_client::WorkflowServiceClient<AuthChannel> {
        proto::workflow_service_client::WorkflowServiceClient::new(self.authed())
            .max_decoding_message_size(self.config().max_recv_message_bytes)
            .max_encoding_message_size(self.config().max_send_message_bytes)
    }

    /// The engine's OTLP trace collector.
    #[cfg(feature = "otel-export")]
    pub(crate) fn otlp(
        &self,
    ) -> proto::otlp::trace_service_client::TraceServiceClient<AuthChannel> {
        proto::otlp::trace_service_client::TraceServiceClient::new(self.authed())
    }

    /// An `EventsService` client.
    pub(crate) fn events(&self) -> proto::events_service_client::EventsServiceClient<AuthChannel> {
        proto::events_service_client::EventsServiceClient::new(self.authed())
            .max_decoding_message_size(self.config().max_recv_message_bytes)
            .max_encoding_message_size(self.config().max_send_message_bytes)
    }

    /// Runs one unary call under the gRPC retry core (invariant 1), made as `opts` says:
    /// `call` gets a clone of `client` and of `req` for every attempt; the request carries
    /// `grpc-timeout` (what is left of the caller's deadline) only when `opts` has one.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the call between attempts or mid-attempt; whether a write
    /// reached the engine is then unknown, as for any dropped request.
    pub(crate) async fn unary<C, Req, Resp, F, Fut>(
        &self,
        path: &'static str,
        opts: CallOpts,
        client: &C,
        req: &Req,
        call: F,
    ) -> Result<Resp, Error>
    where
        C: Clone,
        Req: Clone + prost::Message,
        F: Fn(C, tonic::Request<Req>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let max = self.config().max_send_message_bytes;
        let size = req.encoded_len();
        if size > max {
            // The engine would refuse it unread (RESOURCE_EXHAUSTED): nothing would run.
            return Err(Error::over_message_limit(path, "the request", size, max));
        }
        let deadline = opts.deadline();
        let result = call_unary(self.grpc_core(), path, &opts, &self.inner.lifecycle, |t| {
            // Only the caller's deadline goes on the wire (docs/contract.md §1, Timing): the 30 s
            // backstop is enforced here, and sending it would only arm two more timers per call
            // (tonic's client side and the server's) for a bound nobody asked the server to keep.
            let request = match deadline {
                Some(_) => request_with_timeout(req.clone(), t),
                None => tonic::Request::new(req.clone()),
            };
            // Boxed: tonic's call future is about 1 KiB, and every layer above (the retry loop,
            // its select and timeout, the span) would otherwise carry and move it by value.
            let fut = Box::pin(call(client.clone(), request));
            async move { fut.await.map(tonic::Response::into_inner) }
        })
        .await;
        match result {
            Ok(v) => Ok(v),
            Err(e) => Err(Box::pin(self.explain_first_contact(path, e)).await),
        }
    }

    /// Says what a failed first contact with the engine means, before the engine has ever
    /// answered this runtime: a refused connection names the address and the setting; a
    /// transport failure is checked for a TLS mismatch (one short probe of what the address
    /// speaks), which ends as `Invalid` naming the address and the setting to change. Later
    /// failures are left as they are (the address worked).
    async fn explain_first_contact(&self, path: &'static str, e: Error) -> Error {
        if self.grpc_core().token_accepted() {
            return e;
        }
        let Some(status) = e.grpc_status().cloned() else {
            return e;
        };
        let addr = &self.config().host_port;
        if crate::retry::grpc::status_connection_refused(&status) {
            return e.with_detail(format!(
                "cannot connect to the engine at {addr} (connection refused): check {} (or the token's grpc_broadcast_address) and that the engine is running there",
                crate::config::vars::HOST_PORT
            ));
        }
        let transport = crate::retry::grpc::status_tls_garbled(&status)
            || crate::retry::grpc::status_connection_lost(&status);
        if !transport {
            return e;
        }
        let speaks = crate::transport::probe(addr).await;
        match crate::transport::mismatch(self.config(), speaks) {
            Some(why) => Error::new(Outcome::Invalid, path)
                .with_attempts(e.attempts())
                .with_detail(why)
                .with_cause(Cause::status(status)),
            None => e,
        }
    }

    /// [`Connection::unary`] with [`CallOpts::new`]: the method's own class, no deadline of
    /// the caller's, cancelled by shutdown.
    ///
    /// # Cancel safety
    ///
    /// As [`Connection::unary`].
    pub(crate) async fn call<C, Req, Resp, F, Fut>(
        &self,
        path: &'static str,
        client: &C,
        req: &Req,
        call: F,
    ) -> Result<Resp, Error>
    where
        C: Clone,
        Req: Clone + prost::Message,
        F: Fn(C, tonic::Request<Req>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        self.unary(path, CallOpts::new(), client, req, call).await
    }

    /// GetRunDetails (a read) of `run_id`, bounded by `deadline` when given. The one place the
    /// runtime reads a run's details: the caller's read, the polling fallback and the run-event
    /// streams' final-state read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub(crate) async fn run_details(
        &self,
        run_id: &str,
        deadline: Option<Duration>,
    ) -> Result<v1::GetRunDetailsResponse, Error> {
        let client = self.admin();
        let req = v1::GetRunDetailsRequest {
            external_id: run_id.to_string(),
        };
        self.unary(
            "/v1.AdminService/GetRunDetails",
            CallOpts::new().timeout(deadline),
            &client,
            &req,
            |mut c, r| async move { c.get_run_details(r).await },
        )
        .await
    }

    /// Sends one REST request under the REST retry core (invariant 1), with the token, to
    /// `path` of the configured server URL.
    ///
    /// # Cancel safety
    ///
    /// As [`Connection::unary`].
    pub(crate) async fn rest(
        &self,
        method: reqwest::Method,
        route: &'static str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<RestResponse, Error> {
        let url = format!("{}{}", self.inner.config.server_url, path);
        let auth = self.inner.config.token.bearer();
        let http = self.inner.http.clone();
        let m = method.clone();
        crate::retry::rest::send(
            self.rest_core(),
            route,
            method,
            None,
            Some(&self.inner.lifecycle),
            move |_| {
                let mut r = http
                    .request(m.clone(), &url)
                    .header(reqwest::header::AUTHORIZATION, &auth);
                if let Some(b) = &body {
                    r = r.json(b);
                }
                r
            },
        )
        .await
    }
}
