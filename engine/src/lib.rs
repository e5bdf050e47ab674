#![doc = include_str!("../README.md")]
//! # Invariants
//!
//! 1. Both servers bind 127.0.0.1 (port 0 unless given) and set TCP_NODELAY on every connection.
//! 2. [`DevEngine::restart`] keeps the state and the ports: every stream is hung up (clients see
//!    EOF or a reset), then the same ports serve again, so clients reconnect.
//! 3. Every gRPC call and REST request needs the engine's token; the gate counts each attempt
//!    before anything else, so tests count real attempts.
//! 4. Messages over 4 MiB are refused (like the real engine).

#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

// The rooms (ARCHITECTURE.md draws them): the transports, the store of runs and tasks, the
// scheduler, the DAG rules, time, durable execution, and the test switches and counters.
mod answers;
mod api;
mod dag;
mod durable;
mod faults;
#[cfg(test)]
mod house;
mod hub;
mod limits;
mod parse;
mod sched;
mod store;
mod time;
mod traces;

pub use api::{clients, dashboard};
pub use store::control;
pub use store::webhooks::signing as webhook_signing;

use api::{gate, grpc, io, rest};

pub use crate::limits::ENGINE_VERSION;
pub use crate::parse::parse_duration;
pub use faults::{Fault, FaultRule, Faults};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;

use hatchet_runtime::config::{ClientConfig, SecretToken, TlsStrategy, encode_dev_token};
use hatchet_runtime::protocol::MAX_MESSAGE_BYTES;
use hatchet_runtime::protocol::{self as proto, v1};

/// How often the scheduler looks at timers when nothing wakes it.
const TICK: Duration = Duration::from_millis(100);
/// How long a stop waits for connections to close by themselves before dropping them.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// Token lifetime (the real engine's default).
const TOKEN_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);

/// Options of [`DevEngine::start`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DevEngineOptions {
    /// gRPC port on 127.0.0.1; 0 picks a free one.
    pub grpc_port: u16,
    /// REST port on 127.0.0.1; 0 picks a free one.
    pub api_port: u16,
    /// Tenant id; a fresh UUID when absent.
    pub tenant_id: Option<String>,
    /// What GetVersion answers ([`ENGINE_VERSION`] by default); an older version makes SDKs use
    /// the legacy durable path.
    pub version: Option<String>,
    /// Serve gRPC over TLS with this identity (and require client certificates signed by
    /// `client_ca_pem` when set: mTLS). REST stays plaintext on loopback.
    pub tls: Option<EngineTls>,
    /// Requeue running tasks of a worker silent this long (30 s, the engine's rule, by default;
    /// tests shorten it).
    pub reassign_after: Option<Duration>,
    /// Virtual time: when all the engine does is wait on a timer (a durable or condition
    /// sleep, a retry's backoff, a schedule, a cron) while a client waits on a result, its clock
    /// jumps to that timer. An hour's `sleep_for` ends in milliseconds; [`DevEngine::advance`]
    /// jumps by hand. Off by default (the real engine has no such thing).
    pub virtual_time: bool,
    /// The real engine's timing, all of it or none ([`Timing`]): [`Timing::Real`] by default.
    /// The one switch for it; [`DevEngine::poll_timers`], [`DevEngine::status_lag`] and
    /// [`DevEngine::end_hop`] turn its parts one by one on a running engine.
    pub timing: Timing,
}

/// The real engine's timing in the development engine ([`DevEngineOptions::timing`], or
/// `--instant-timing` on the binary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Timing {
    /// As the real engine (v0.104.9), the default: timers (timeouts, durable and condition
    /// sleeps, retry backoffs) read at a poll once a second ([`DevEngine::poll_timers`]); a
    /// new run's status reaching REST 1 to 2 s after its creation ([`DevEngine::status_lag`]);
    /// a task's end reaching `GetRunDetails` and the run streams 30 ms after the worker sent
    /// it ([`DevEngine::end_hop`]); and a subscription of a run that had already ended
    /// answered at its stream's next 1 s tick. A test that passes here does not fail on the
    /// real engine for timing ours hid.
    #[default]
    Real,
    /// None of it, a kindness for tests and benchmarks that measure something else: each
    /// timer read when it is due, REST reading the live state, a task's end read at once, and
    /// a subscription of a run that had ended answered at once.
    Instant,
}

/// One worker as the engine sees it ([`DevEngine::worker`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerView {
    /// Paused (REST `PATCH /api/v1/workers/{id}`): assigned nothing new.
    pub paused: bool,
    /// Tasks assigned to it, ever.
    pub assignments: u64,
    /// Heartbeats accepted from it, ever.
    pub heartbeats: u64,
    /// It has an open listener session.
    pub listening: bool,
    /// Its labels (given at registration or upserted), each value as text (an int label as
    /// its digits).
    pub labels: std::collections::BTreeMap<String, String>,
}

/// TLS material of the development engine (PEM).
#[derive(Clone, Default)]
pub struct EngineTls {
    /// Server certificate chain.
    pub cert_pem: String,
    /// Server private key.
    pub key_pem: String,
    /// When set, clients must present a certificate signed by this CA (mTLS).
    pub client_ca_pem: Option<String>,
}

impl std::fmt::Debug for EngineTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineTls")
            .field("mtls", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl DevEngineOptions {
    /// Runs on virtual time (see [`DevEngineOptions::virtual_time`]).
    pub fn virtual_time(mut self) -> Self {
        self.virtual_time = true;
        self
    }

    /// Sets the engine's timing ([`Timing`]): `DevEngineOptions::default().timing(Timing::Instant)`
    /// turns off all the real engine's timing at once.
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Serves gRPC over TLS.
    pub fn tls(mut self, tls: EngineTls) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Sets the gRPC port.
    pub fn grpc_port(mut self, p: u16) -> Self {
        self.grpc_port = p;
        self
    }
    /// Sets the REST port.
    pub fn api_port(mut self, p: u16) -> Self {
        self.api_port = p;
        self
    }
    /// Sets the version GetVersion reports.
    pub fn version(mut self, v: impl Into<String>) -> Self {
        self.version = Some(v.into());
        self
    }
    /// Sets the reassignment window.
    pub fn reassign_after(mut self, d: Duration) -> Self {
        self.reassign_after = Some(d);
        self
    }
}

/// What [`DevEngine::stats`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Workflow runs held (kept for reads; the engine is in memory).
    pub runs: usize,
    /// Tasks held.
    pub tasks: usize,
    /// Tasks waiting in the assignment queue.
    pub queued: usize,
    /// Open `SubscribeToWorkflowRuns` streams.
    pub run_subscriptions: usize,
    /// Run ids pending in them.
    pub pending_run_subscriptions: usize,
    /// Open `SubscribeToWorkflowEvents` streams.
    pub event_subscriptions: usize,
    /// Open worker listener sessions.
    pub listener_sessions: usize,
    /// Worker slots in use.
    pub slots_in_use: usize,
    /// Subscribe messages received on `SubscribeToWorkflowRuns` streams, ever (each run id a
    /// client sends, replays included).
    pub run_subscribe_messages: u64,
    /// Messages received on `ListenForDurableEvent` streams, ever.
    pub durable_event_listen_messages: u64,
    /// Assignments sent a second time by [`DevEngine::duplicate_next_assignments`].
    pub duplicated_assignments: u64,
    /// Assignments sent again later by [`DevEngine::duplicate_next_assignments_late`].
    pub late_duplicates_sent: u64,
    /// Durable log nodes ever recorded, all tasks (a request the engine got twice is two).
    pub durable_nodes_recorded: u64,
    /// `ReleaseSlot` calls accepted, ever (see [`DevEngine::release_slot_frees`]).
    pub slot_releases: u64,
}

struct Serving {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// A running development engine. Dropping it stops the servers.
pub struct DevEngine {
    engine: Arc<crate::hub::Engine>,
    tls: Option<EngineTls>,
    faults: Faults,
    grpc_addr: SocketAddr,
    api_addr: SocketAddr,
    token: SecretToken,
    /// Opens the dashboard's data and nothing else, so its URL can be printed and logged.
    dashboard_key: SecretToken,
    config: ClientConfig,
    serving: Mutex<Option<Serving>>,
}

impl std::fmt::Debug for DevEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevEngine")
            .field("grpc_addr", &self.grpc_addr)
            .field("api_addr", &self.api_addr)
            .field("tenant_id", &self.engine.tenant_id)
            .finish_non_exhaustive()
    }
}

fn bind(port: u16) -> std::io::Result<TcpListener> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let s = TcpSocket::new_v4()?;
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(1024)
}

impl DevEngine {
    /// Binds gRPC and REST on 127.0.0.1, issues a token and starts serving.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future mid-way may leave a bound port until the runtime ends.
    pub async fn start(opts: DevEngineOptions) -> std::io::Result<DevEngine> {
        let grpc = bind(opts.grpc_port)?;
        let api = bind(opts.api_port)?;
        let grpc_addr = grpc.local_addr()?;
        let api_addr = api.local_addr()?;
        let tenant_id = opts.tenant_id.unwrap_or_else(crate::parse::new_id);
        let exp = (SystemTime::now() + TOKEN_LIFETIME)
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(u64::MAX / 2);
        let token = encode_dev_token(
            &tenant_id,
            &format!("http://{api_addr}"),
            &grpc_addr.to_string(),
            exp,
            &crate::parse::new_id(),
        );
        let strategy = match &opts.tls {
            None => TlsStrategy::None,
            Some(t) if t.client_ca_pem.is_some() => TlsStrategy::Mtls,
            Some(_) => TlsStrategy::Tls,
        };
        let mut builder = ClientConfig::builder()
            .secret_token(token.clone())
            .tls_strategy(strategy);
        if strategy == TlsStrategy::Mtls {
            // The caller supplies the client identity; placeholders keep the config valid.
            builder = builder.tls_client_identity("client.pem", "client.key");
        }
        let config = builder
            .build()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let engine = DevEngine {
            tls: opts.tls.clone(),
            engine: Arc::new(crate::hub::Engine::new(
                tenant_id,
                opts.reassign_after.unwrap_or(crate::limits::REASSIGN_AFTER),
                opts.version
                    .clone()
                    .unwrap_or_else(|| ENGINE_VERSION.to_string()),
            )),
            faults: Faults::default(),
            grpc_addr,
            api_addr,
            token,
            dashboard_key: SecretToken::new(crate::parse::new_id().replace('-', "")),
            config,
            serving: Mutex::new(None),
        };
        engine.engine.clock.set_virtual(opts.virtual_time);
        if opts.timing == Timing::Instant {
            engine.poll_timers(None);
            engine.status_lag(None);
            engine.end_hop(None);
        }
        engine.serve(grpc, api)?;
        Ok(engine)
    }

    /// Moves the engine's clock forward by `by`: every timer due in that time fires (durable
    /// and condition sleeps, retry backoffs, schedules, crons, and timeouts too), and the times
    /// the engine reports move with it. Connected workers stay alive. Works with or without
    /// [`DevEngineOptions::virtual_time`].
    pub fn advance(&self, by: Duration) {
        self.engine.advance_clock(by);
    }

    /// How far the engine's clock is ahead of the wall clock (jumps, by hand or by itself).
    pub fn skipped(&self) -> Duration {
        self.engine.clock.skew()
    }

    /// The engine's time now (the wall clock plus [`DevEngine::skipped`]).
    pub fn now(&self) -> SystemTime {
        self.engine.clock.system_now()
    }

    fn serve(&self, grpc: TcpListener, api: TcpListener) -> std::io::Result<()> {
        let stop = CancellationToken::new();
        let token: Arc<str> = Arc::from(self.token.expose());
        let svc = grpc::Svc {
            engine: self.engine.clone(),
            faults: self.faults.clone(),
        };
        let gate = gate::Gate {
            faults: self.faults.clone(),
            token: token.clone(),
        };
        let listener = io::FaultyListener {
            inner: grpc,
            faults: self.faults.clone(),
        };
        let incoming = futures::stream::unfold(listener, |l| async move {
            let (io, _) = l.accept_io().await;
            Some((Ok::<_, std::io::Error>(io), l))
        });
        macro_rules! svc {
            ($server:ty) => {
                <$server>::new(svc.clone())
                    .accept_compressed(CompressionEncoding::Gzip)
                    .send_compressed(CompressionEncoding::Gzip)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
            };
        }
        // Large windows (the real engine uses a 10 MiB stream window): a client that sends many
        // small messages on one stream (20,000 run ids) must not hit h2's limit on buffered
        // DATA frames.
        let mut server = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(10 * 1024 * 1024))
            .initial_connection_window_size(Some(16 * 1024 * 1024));
        if let Some(tls) = &self.tls {
            let mut cfg = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem),
            );
            if let Some(ca) = &tls.client_ca_pem {
                cfg = cfg.client_ca_root(tonic::transport::Certificate::from_pem(ca));
            }
            server = server
                .tls_config(cfg)
                .map_err(|e| std::io::Error::other(format!("TLS configuration: {e}")))?;
        }
        let router = server
            .layer(gate)
            .add_service(svc!(proto::dispatcher_server::DispatcherServer<grpc::Svc>))
            .add_service(svc!(
                proto::events_service_server::EventsServiceServer<grpc::Svc>
            ))
            .add_service(svc!(
                proto::workflow_service_server::WorkflowServiceServer<grpc::Svc>
            ))
            .add_service(svc!(
                v1::admin_service_server::AdminServiceServer<grpc::Svc>
            ))
            .add_service(svc!(
                v1::v1_dispatcher_server::V1DispatcherServer<grpc::Svc>
            ))
            .add_service(svc!(
                proto::otlp::trace_service_server::TraceServiceServer<grpc::Svc>
            ));
        let s = stop.clone();
        let grpc_task = tokio::spawn(async move {
            if let Err(e) = router
                .serve_with_incoming_shutdown(incoming, s.cancelled_owned())
                .await
            {
                tracing::warn!(error = %e, "dev engine gRPC server ended");
            }
        });
        let rest_state = rest::Rest {
            engine: self.engine.clone(),
            faults: self.faults.clone(),
            token,
            dashboard_key: Arc::from(self.dashboard_key.expose()),
            server_url: Arc::from(self.api_url()),
        };
        let api_listener = io::FaultyListener {
            inner: api,
            faults: self.faults.clone(),
        };
        let s = stop.clone();
        let rest_task = tokio::spawn(async move {
            let server = axum::serve(api_listener, rest::router(rest_state))
                .with_graceful_shutdown(s.cancelled_owned());
            if let Err(e) = server.await {
                tracing::warn!(error = %e, "dev engine REST server ended");
            }
        });
        let engine = self.engine.clone();
        let s = stop.clone();
        let scheduler = tokio::spawn(async move {
            let mut next = TICK;
            loop {
                tokio::select! {
                    _ = s.cancelled() => break,
                    _ = engine.wake.notified() => {}
                    _ = tokio::time::sleep(next) => {}
                }
                // The next pass at the tick, or sooner when a status entry falls due before.
                next = engine.tick().map_or(TICK, |due| due.min(TICK));
            }
        });
        *self.serving.lock() = Some(Serving {
            stop,
            tasks: vec![grpc_task, rest_task, scheduler],
        });
        Ok(())
    }

    /// Stops serving; the state is kept. Streams end (workers see EOF), then connections close.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the stop is requested at once; awaiting only waits for it to finish.
    pub async fn shutdown(&self) {
        let Some(serving) = self.serving.lock().take() else {
            return;
        };
        serving.stop.cancel();
        self.engine.hang_up_all();
        let mut tasks = serving.tasks;
        let all = futures::future::join_all(tasks.iter_mut());
        if tokio::time::timeout(STOP_GRACE, all).await.is_err() {
            self.faults.drop_connections();
            for t in &tasks {
                t.abort();
            }
        }
        self.faults.drop_connections();
    }

    /// Stops and serves again on the same ports with the same state.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping it between the stop and the start leaves the engine stopped.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.shutdown().await;
        self.start_again().await
    }

    /// Serves again after [`DevEngine::shutdown`], on the same ports.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn start_again(&self) -> std::io::Result<()> {
        if self.serving.lock().is_some() {
            return Ok(());
        }
        let mut tries = 0;
        let (grpc, api) = loop {
            match (bind(self.grpc_addr.port()), bind(self.api_addr.port())) {
                (Ok(g), Ok(a)) => break (g, a),
                (Err(e), _) | (_, Err(e)) if tries >= 50 => return Err(e),
                _ => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        self.serve(grpc, api)
    }

    /// The gRPC address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The REST address.
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// The REST base URL.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.api_addr)
    }

    /// The tenant id.
    pub fn tenant_id(&self) -> &str {
        &self.engine.tenant_id
    }

    /// The token clients must present.
    pub fn token(&self) -> &SecretToken {
        &self.token
    }

    /// The dashboard's URL, with the dashboard's key in its fragment (browsers never send a
    /// fragment to the server; the page's script sends the key as a header). The key reads the
    /// dashboard's data and nothing else: it is not the engine's token, so the URL can be
    /// printed or logged without handing out the right to trigger, cancel or read the API.
    pub fn dashboard_url(&self) -> String {
        format!(
            "{}/dashboard#token={}",
            self.api_url(),
            self.dashboard_key.expose()
        )
    }

    /// Authenticated clients of the generated stubs, for tests below the runtime.
    ///
    /// # Errors
    /// The engine serves TLS (see [`EngineTls`]): the raw clients speak plaintext only.
    pub fn raw_clients(&self) -> Result<clients::RawClients, String> {
        let uri = self.client_config().grpc_uri();
        if uri.starts_with("https") {
            return Err(format!(
                "this engine serves TLS at {uri}; raw clients speak plaintext only: start it without EngineTls"
            ));
        }
        clients::RawClients::new(&uri, self.token.expose())
    }

    /// A ready client configuration (the engine's token and addresses).
    pub fn client_config(&self) -> ClientConfig {
        self.config.clone()
    }

    /// The fault switchboard and attempt counters.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Fault injection: rewrite the next `n` assignments with `f` before they are sent (bad
    /// payloads, unknown enum values, missing fields).
    pub fn mutate_next_actions(
        &self,
        n: u32,
        f: impl Fn(&mut proto::AssignedAction) + Send + Sync + 'static,
    ) {
        self.engine.state.lock().switches.mutate_actions =
            (n > 0).then(|| crate::faults::ActionMutator {
                remaining: n,
                f: Arc::new(f),
            });
    }

    /// Fault injection, a busy controller: each replay is answered with the targets it will
    /// replay and applied `lag` later (the real engine only queues it, then answers after
    /// 200 ms); until then every read shows the run's old end. `None` applies replays before
    /// answering.
    pub fn lag_replays(&self, lag: Option<std::time::Duration>) {
        self.engine.state.lock().switches.replay_lag = lag;
    }

    /// Fault injection, as the real engine does when it is killed after answering a completion
    /// and before its controller records it: the next `n` COMPLETED step events are answered OK
    /// and dropped; their attempts stay running until their timeout.
    pub fn lose_next_answered_completions(&self, n: u32) {
        self.engine
            .state
            .lock()
            .switches
            .lose_answered_completions
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Fault injection, as the real engine does when it is killed right after recording a
    /// completion: the next `n` task completions are recorded (the task reads COMPLETED with
    /// its output) and their follow-up is lost: the tasks that wait on them are never created
    /// and the run never finishes, until it is replayed.
    pub fn lose_next_completion_followups(&self, n: u32) {
        self.engine
            .state
            .lock()
            .switches
            .lose_completion_followups
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Fault injection: lose the next `n` durable completions before they reach a stream, as
    /// a cluster can; a worker's `worker_status` recovers them.
    pub fn lose_next_durable_completions(&self, n: u32) {
        self.engine
            .state
            .lock()
            .switches
            .lose_durable_completions
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Fault injection: the next `n` durable requests that expect an ack are recorded, and
    /// their stream ends before the ack goes out (a cut between the engine's write and the
    /// worker's read). See [`EngineStats::durable_nodes_recorded`].
    pub fn lose_next_durable_acks(&self, n: u32) {
        self.engine
            .state
            .lock()
            .switches
            .lose_durable_acks
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Fault injection: the next `n` evictions (`EvictInvocation`) find the task's open waits
    /// ended (their sleeps due) at the moment they arrive: each wait's completion goes out
    /// first, then the eviction is acknowledged, as when a wait ends while the eviction is on
    /// its way. Nothing then wakes the evicted task but a restore.
    pub fn complete_durable_waits_on_next_evictions(&self, n: u32) {
        self.engine.state.lock().switches.complete_waits_on_evict = n;
    }

    /// Fault injection: each DurableTask stream collects its requests for `window`, then
    /// handles them newest first. The real engine handles a stream's requests concurrently,
    /// so they may be numbered and answered in any order; by default what is already buffered
    /// is handled newest first, and this makes it certain for requests sent within `window`.
    pub fn answer_durable_requests_out_of_order(&self, window: Duration) {
        self.engine
            .state
            .lock()
            .switches
            .collect_durable_requests_ms
            .store(
                u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
                std::sync::atomic::Ordering::Relaxed,
            );
    }

    /// Fault injection, a kindness the real engine lacks: assignments a worker never answered
    /// are offered again (same attempt) when their stream closes. Off by default, as on the real
    /// engine: such an attempt stays with its worker and runs out its timeout.
    pub fn reoffer_unanswered_assignments(&self, on: bool) {
        self.engine.state.lock().switches.reoffer_unanswered = on;
    }

    /// A kindness the real engine lacks: `ReleaseSlot` gives the task's slot back to its
    /// worker at once, so another task can start there while it runs (what the call is for).
    /// Off by default, as on the real engine v0.104.9, which accepts the call and keeps counting
    /// the slot until the attempt ends (its release statement deletes none of the task's slot
    /// rows: the DELETE reads a `FOR UPDATE` CTE whose rows the same statement's UPDATE has
    /// already changed).
    pub fn release_slot_frees(&self, on: bool) {
        self.engine.state.lock().switches.release_slot_frees = on;
    }

    /// Fault injection, the real engine's single-task race: `GET /api/v1/stable/tasks/{task}`
    /// says QUEUED for a running task, as the real engine's read does when its QUEUED stamp
    /// (written in the background) lands after the worker's STARTED; it then says so for the
    /// whole run. Run reads, lists and gRPC details are not affected, on either engine.
    pub fn stamp_queued_late(&self, on: bool) {
        self.engine.state.lock().switches.stamp_queued_late = on;
    }

    /// The real engine's polled timers (on by default, every second): with `Some(every)`,
    /// execution timeouts, durable and condition sleeps and retry backoffs are read at polls
    /// `every` apart, so one falls due at a poll and waits for it, as on the real engine (see
    /// `TimerPoll` in `faults.rs`). `None` is a kindness for tests: each is read when it is due.
    /// Crons and schedules fire when due either way. One part of [`Timing`]: to turn all of it
    /// off, start the engine with [`DevEngineOptions::timing`]`(`[`Timing::Instant`]`)`.
    pub fn poll_timers(&self, every: Option<Duration>) {
        self.engine.state.lock().switches.poll_timers = every.map(crate::faults::TimerPoll::every);
        self.engine.wake.notify_one();
    }

    /// The real engine's status lag (on by default, 1 s): with `Some(lag)`, what REST reads
    /// of a task's or a run's status comes through one pipeline, in order, as on the real
    /// engine: a new run `lag` to `2 * lag` after its creation, later changes at once unless
    /// a run ahead of them is still on its way. So a run that ends within about a second of
    /// its creation reads COMPLETED over REST up to 2 s after it was created, and may never
    /// read RUNNING; a longer one at once. A run's end reaches the run streams
    /// (`SubscribeToWorkflowRuns`, what a client's `result()` waits on) and `GetRunDetails`
    /// without this lag, after [`DevEngine::end_hop`], as on the real engine; and once a run's
    /// end has gone out, its children that ended before it read ended over REST (the real
    /// engine's child ends reach REST tens of ms after them). A subscription of a run that had
    /// already ended is answered at the stream's next tick, every second from when the stream
    /// opened, as on the real engine. `None` is a kindness for tests: REST reads the live state
    /// at once, and a subscription of a run that had ended is answered at once. One part of
    /// [`Timing`]: to turn all of it off, start the engine with [`Timing::Instant`].
    pub fn status_lag(&self, lag: Option<Duration>) {
        self.engine.state.lock().switches.status_lag = lag;
        self.engine.wake.notify_one();
    }

    /// The real engine's hop from a worker's end of a task to `GetRunDetails` (on by default,
    /// 30 ms): with `Some(hop)`, a task whose end the engine received less than `hop` ago
    /// reads RUNNING there, without output, and its run not done, and the run streams have
    /// no end yet, as on the real engine until its task controller has recorded the end
    /// (measured 0 to 60 ms). A client that
    /// polls a short task's run for RUNNING sees it there, as it does on the real engine.
    /// `None` is a kindness for tests: the end reads at once, and a subscription of a run that
    /// had ended is answered at once, not at the stream's next tick. One part of [`Timing`]: to
    /// turn all of it off, start the engine with [`Timing::Instant`].
    pub fn end_hop(&self, hop: Option<Duration>) {
        self.engine.state.lock().switches.end_hop = hop;
    }

    /// Fault injection, the real engine's write backlog: single triggers of workflows without
    /// an idempotency key are answered with their run's id at once and written `after` later
    /// (reading NotFound until then), as the real engine does when its optimistic write slots
    /// are busy and its task controller creates the run from a queued message (v0.104.9,
    /// `AdminService.ingest`). `None` (the default) writes each before answering.
    pub fn defer_trigger_writes(&self, after: Option<Duration>) {
        self.engine.state.lock().switches.defer_trigger_writes = after;
    }

    /// Fault injection: assign beyond the workers' slots (a flood of actions).
    pub fn over_assign(&self, on: bool) {
        self.engine.state.lock().switches.over_assign = on;
        self.engine.wake.notify_one();
    }

    /// Fault injection, as the real engine does when the dispatcher that holds a worker's
    /// stream is killed between an assignment and its sending: the next `n` assignments are
    /// recorded (the task is the worker's, RUNNING, its slot taken) and never sent; each stays
    /// so until its timeout, or until the worker takes it back.
    pub fn lose_next_sends(&self, n: u32) {
        self.engine.state.lock().switches.lose_sends = n;
    }

    /// Fault injection, as a killed replica can leave the real engine's read model: the next `n`
    /// task ends are recorded in the core (`GetRunDetails` reads them once the run ends) and
    /// never in the read model, where each task reads RUNNING without its output for good.
    pub fn lose_next_read_model_ends(&self, n: u32) {
        self.engine.state.lock().switches.lose_read_model_ends = n;
    }

    /// Fault injection, the "zombie worker" of the official SDKs' reports: the engine forgets
    /// every actions stream of worker `id` while the worker's side of them stays open (a
    /// dispatcher that lost the session, a proxy that kept the client's half). Nothing is sent
    /// on them any more, and the worker's next heartbeat is refused with FAILED_PRECONDITION
    /// ("worker stream is not active"), as the real engine refuses it once its row reads
    /// inactive. Whether the worker was known.
    pub fn forget_worker_streams(&self, id: &str) -> bool {
        let mut st = self.engine.state.lock();
        match st.workers.get_mut(id) {
            Some(w) => {
                let held = std::mem::take(&mut w.sessions);
                w.forgotten.extend(held);
                true
            }
            None => false,
        }
    }

    /// Fault injection: sends each of the next `n` assignments twice on the same stream (the
    /// same attempt, as a broken stream's re-offer would); see
    /// [`EngineStats::duplicated_assignments`].
    pub fn duplicate_next_assignments(&self, n: u32) {
        self.engine.state.lock().switches.duplicate_assignments = n;
    }

    /// Fault injection: sends each of the next `n` assignments again 300 ms later (the same
    /// attempt, after the worker has most likely finished it: a re-offer racing its final event).
    pub fn duplicate_next_assignments_late(&self, n: u32) {
        self.engine.state.lock().switches.late_duplicates = n;
    }

    /// Counts of what the engine holds, for tests and leak checks.
    pub fn stats(&self) -> EngineStats {
        let st = self.engine.state.lock();
        let (run_subscriptions, pending_run_subscriptions) = st.subscriptions.run_counts();
        EngineStats {
            runs: st.runs.len(),
            tasks: st.tasks.len(),
            queued: st.queue.len(),
            run_subscriptions,
            pending_run_subscriptions,
            event_subscriptions: st.subscriptions.event_count(),
            listener_sessions: st.workers.values().map(|w| w.sessions.len()).sum(),
            slots_in_use: st
                .workers
                .values()
                .flat_map(|w| w.slots_used.values())
                .map(|n| *n as usize)
                .sum(),
            run_subscribe_messages: st.counters.run_subscribe_messages,
            durable_event_listen_messages: st.counters.durable_event_listen_messages,
            duplicated_assignments: st.counters.duplicated_assignments,
            late_duplicates_sent: st
                .counters
                .late_duplicates_sent
                .load(std::sync::atomic::Ordering::SeqCst),
            durable_nodes_recorded: st.counters.durable_nodes_recorded,
            slot_releases: st.counters.slot_releases,
        }
    }

    /// Run ids waiting in open `SubscribeToWorkflowRuns` subscriptions (engine side).
    pub fn pending_run_subscriptions(&self) -> usize {
        self.engine.state.lock().subscriptions.run_counts().1
    }

    /// Completes every queued task of `workflow` with `{}`, without a worker (a bench and test
    /// control). Returns how many tasks it completed.
    pub fn complete_queued(&self, workflow: &str) -> usize {
        self.engine.state.lock().complete_all_queued(workflow)
    }

    /// What the engine knows of worker `id`: whether it is paused, and how many tasks it was
    /// assigned and heartbeats it sent, ever (`None` for an unknown worker).
    pub fn worker(&self, id: &str) -> Option<WorkerView> {
        let st = self.engine.state.lock();
        st.workers.get(id).map(|w| WorkerView {
            paused: w.paused,
            assignments: w.assignments,
            heartbeats: w.heartbeats,
            listening: !w.sessions.is_empty(),
            labels: w
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect(),
        })
    }

    /// The log lines the engine holds for task run `task_run_id` (PutLog): `(level, message)`, in
    /// arrival order.
    pub fn task_logs(&self, task_run_id: &str) -> Vec<(String, String)> {
        let st = self.engine.state.lock();
        st.tasks
            .get(task_run_id)
            .map(|t| {
                t.logs
                    .iter()
                    .map(|l| (l.level.clone(), l.message.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many workflow runs the engine holds.
    pub fn run_count(&self) -> usize {
        self.engine.state.lock().runs.len()
    }

    /// How many times a run's tasks were started (attempts assigned), by run id — engine-side
    /// evidence that a write ran once.
    pub fn runs_by_workflow(&self, name: &str) -> usize {
        self.engine
            .state
            .lock()
            .runs
            .values()
            .filter(|r| r.workflow_name == name)
            .count()
    }
}

impl Drop for DevEngine {
    fn drop(&mut self) {
        if let Some(s) = self.serving.lock().take() {
            s.stop.cancel();
            self.engine.hang_up_all();
            for t in s.tasks {
                t.abort();
            }
            self.faults.drop_connections();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing_switches(engine: &DevEngine) -> (bool, bool, bool) {
        let st = engine.engine.state.lock();
        (
            st.switches.poll_timers.is_some(),
            st.switches.status_lag.is_some(),
            st.switches.end_hop.is_some(),
        )
    }

    #[tokio::test]
    async fn one_option_turns_all_the_real_engine_s_timing_on_or_off() {
        let real = DevEngine::start(DevEngineOptions::default())
            .await
            .expect("starts");
        assert_eq!(timing_switches(&real), (true, true, true), "on by default");
        let instant = DevEngine::start(DevEngineOptions::default().timing(Timing::Instant))
            .await
            .expect("starts");
        assert_eq!(timing_switches(&instant), (false, false, false), "all off");
        let named = DevEngine::start(DevEngineOptions::default().timing(Timing::Real))
            .await
            .expect("starts");
        assert_eq!(timing_switches(&named), (true, true, true));
    }
}
