//! The worker-actions listener: registration, `ListenV2` (falling back once and for good to
//! `Listen` on UNIMPLEMENTED), the heartbeat, and re-registration when the worker row is gone.
//!
//! # Invariants
//!
//! 1. Heartbeats run every [`HEARTBEAT_EVERY`] with their own [`HEARTBEAT_DEADLINE`], outside the
//!    unary retry layer: the next tick is the retry.
//! 2. FAILED_PRECONDITION or NOT_FOUND from a heartbeat reconnects the stream; NOT_FOUND, two OK
//!    ends without a message in a row, or rejections that continue after a reconnect register
//!    the worker again (a new worker id).
//! 3. Actions go to the worker through a bounded channel: a flood slows the stream (backpressure).
//! 4. Engine errors never panic or exit the process; only the lifecycle token stops the listener.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::Code;

use super::health::HealthReporter;
use super::reconnect::{self, Next, ReconnectState, StreamEnd};
use super::{ListenerCtx, end_of};
use crate::proto;
use crate::retry::grpc::{call_unary, request_with_timeout};

/// Heartbeat interval (the engine assigns only to workers heard from in the last 5 s).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(4);
/// Heartbeat deadline.
pub const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(3);
/// OK ends without a message, in a row, that mean the worker row is gone.
pub const EMPTY_ENDS_BEFORE_REREGISTER: u32 = 2;

/// What the worker registers with.
#[derive(Debug, Clone)]
pub struct Registration {
    /// Worker name.
    pub name: String,
    /// Action ids (`workflow:task`, lower case).
    pub actions: Vec<String>,
    /// Slots per slot type (`default`, `durable`).
    pub slot_config: std::collections::HashMap<String, i32>,
    /// Labels.
    pub labels: std::collections::HashMap<String, String>,
}

/// State shared with the worker: the current worker id, and heartbeat liveness.
#[derive(Debug, Default)]
pub struct WorkerIdentity {
    id: Mutex<Option<String>>,
    /// When a heartbeat last succeeded.
    pub last_heartbeat_ok: Mutex<Option<Instant>>,
    /// Registrations made.
    pub registrations: std::sync::atomic::AtomicU64,
}

impl WorkerIdentity {
    /// The current worker id.
    pub fn get(&self) -> Option<String> {
        self.id.lock().clone()
    }
}

/// Messages of the actions listener.
#[derive(Debug)]
pub enum ActionsMsg {
    /// Register if needed and open the stream.
    Start,
    /// The stream of `generation` ended.
    Ended {
        /// Generation.
        generation: u64,
        /// How.
        end: StreamEnd,
        /// Messages received on it.
        messages: u64,
        /// Whether it made progress.
        progressed: bool,
        /// Error text.
        error: String,
    },
    /// Backoff elapsed for `generation`.
    Reconnect(u64),
    /// Heartbeat tick.
    Heartbeat,
    /// A heartbeat succeeded.
    HeartbeatOk,
    /// A heartbeat was refused with this code.
    HeartbeatRefused(Code),
    /// Registration failed; try again later.
    RegisterFailed(String),
    /// Registered with this id.
    Registered(String),
    /// Test hook.
    Crash,
}

/// Arguments, kept by the supervisor across restarts.
#[derive(Clone)]
pub struct ActionsArgs {
    /// Shared context.
    pub ctx: ListenerCtx,
    /// What to register.
    pub registration: Arc<Registration>,
    /// Where actions go.
    pub sink: mpsc::Sender<proto::AssignedAction>,
    /// Health.
    pub health: Arc<HealthReporter>,
    /// Worker id and liveness.
    pub identity: Arc<WorkerIdentity>,
    /// Set once ListenV2 answered UNIMPLEMENTED: use Listen for good.
    pub legacy: Arc<AtomicBool>,
    /// The current reader task, here so a restarted listener stops its crashed predecessor's.
    pub reader: Arc<Mutex<Option<AbortHandle>>>,
}

/// The actor's state.
pub struct ActionsState {
    args: ActionsArgs,
    generation: u64,
    reader: Option<AbortHandle>,
    registering: bool,
    reconnect: ReconnectState,
    empty_ends: u32,
    refusals_since_reconnect: u32,
    rng: rand::rngs::StdRng,
}

/// The worker-actions listener actor.
#[derive(Debug, Clone, Copy)]
pub struct ActionsListener;

impl ActionsListener {
    fn register(myself: &ActorRef<ActionsMsg>, st: &mut ActionsState) {
        if st.registering {
            return;
        }
        st.registering = true;
        *st.args.identity.id.lock() = None;
        let args = st.args.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let r = &args.registration;
            let req = proto::WorkerRegisterRequest {
                worker_name: r.name.clone(),
                actions: r.actions.clone(),
                services: vec![],
                slots: None,
                labels: r
                    .labels
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            proto::WorkerLabels {
                                str_value: Some(v.clone()),
                                int_value: None,
                            },
                        )
                    })
                    .collect(),
                webhook_id: None,
                runtime_info: Some(proto::RuntimeInfo {
                    sdk_version: Some(env!("CARGO_PKG_VERSION").into()),
                    language: None,
                    language_version: Some("rust".into()),
                    os: Some(std::env::consts::OS.into()),
                    extra: None,
                }),
                slot_config: r.slot_config.clone(),
            };
            let core = args.ctx.core.clone();
            let client = args.ctx.dispatcher();
            let res = tokio::select! {
                r = call_unary(&core, "/Dispatcher/Register", None, None, Some(args.ctx.lifecycle.clone()), |t| {
                    let mut c = client.clone();
                    let req = req.clone();
                    async move { c.register(request_with_timeout(req, t)).await.map(|r| r.into_inner()) }
                }) => r,
                _ = args.ctx.lifecycle.cancelled() => return,
            };
            let _ = match res {
                Ok(resp) => me.cast(ActionsMsg::Registered(resp.worker_id)),
                Err(e) => me.cast(ActionsMsg::RegisterFailed(e.to_string())),
            };
        });
    }

    fn open(myself: &ActorRef<ActionsMsg>, st: &mut ActionsState) {
        let Some(worker_id) = st.args.identity.get() else {
            Self::register(myself, st);
            return;
        };
        if let Some(r) = st.reader.take() {
            r.abort();
        }
        if let Some(r) = st.args.reader.lock().take() {
            r.abort();
        }
        st.generation += 1;
        let generation = st.generation;
        let args = st.args.clone();
        let me = myself.clone();
        args.health.connecting();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut client = args.ctx.dispatcher();
            let req = proto::WorkerListenRequest { worker_id };
            let mut opened = if args.legacy.load(Ordering::Relaxed) {
                client.listen(req.clone()).await
            } else {
                client.listen_v2(req.clone()).await
            };
            if matches!(&opened, Err(s) if s.code() == Code::Unimplemented)
                && !args.legacy.swap(true, Ordering::Relaxed)
            {
                tracing::info!("engine has no ListenV2; falling back to Listen for good");
                opened = client.listen(req).await;
            }
            let mut messages = 0u64;
            let result = match opened {
                Err(s) => Err(s),
                Ok(resp) => {
                    args.health.connected();
                    let mut stream = resp.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(action)) => {
                                messages += 1;
                                if args.sink.send(action).await.is_err() {
                                    return; // the worker is gone: shutting down
                                }
                            }
                            Ok(None) => break Ok(()),
                            Err(s) => break Err(s),
                        }
                    }
                }
            };
            let progressed = messages > 0 || started.elapsed() >= reconnect::HEALTHY_STREAM;
            let error = match &result {
                Ok(()) => "stream ended (EOF)".to_string(),
                Err(s) => format!("{:?}: {}", s.code(), s.message()),
            };
            let _ = me.cast(ActionsMsg::Ended {
                generation,
                end: end_of(&result),
                messages,
                progressed,
                error,
            });
        });
        st.reader = Some(task.abort_handle());
        *st.args.reader.lock() = Some(task.abort_handle());
    }

    fn heartbeat(myself: &ActorRef<ActionsMsg>, st: &ActionsState) {
        let Some(worker_id) = st.args.identity.get() else {
            return;
        };
        let args = st.args.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let mut client = args.ctx.dispatcher();
            let req = proto::HeartbeatRequest {
                worker_id,
                heartbeat_at: Some(crate::proto::timestamp_now()),
            };
            let ledger = args.ctx.core.ledger();
            ledger.operation("/Dispatcher/Heartbeat");
            ledger.attempt("/Dispatcher/Heartbeat", false);
            match client
                .heartbeat(request_with_timeout(req, HEARTBEAT_DEADLINE))
                .await
            {
                Ok(_) => {
                    *args.identity.last_heartbeat_ok.lock() = Some(Instant::now());
                    ledger.finished("/Dispatcher/Heartbeat", "ok");
                    let _ = me.cast(ActionsMsg::HeartbeatOk);
                }
                Err(s) => {
                    ledger.failure("/Dispatcher/Heartbeat", &format!("{:?}", s.code()));
                    ledger.finished("/Dispatcher/Heartbeat", "failed");
                    if matches!(s.code(), Code::FailedPrecondition | Code::NotFound) {
                        let _ = me.cast(ActionsMsg::HeartbeatRefused(s.code()));
                    }
                }
            }
        });
    }
}

impl Actor for ActionsListener {
    type Msg = ActionsMsg;
    type State = ActionsState;
    type Arguments = ActionsArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ActionsMsg>,
        args: ActionsArgs,
    ) -> Result<ActionsState, ActorProcessingErr> {
        super::every(&args.ctx.lifecycle, HEARTBEAT_EVERY, &myself, || {
            ActionsMsg::Heartbeat
        });
        let _ = myself.cast(ActionsMsg::Start);
        let rng = args.ctx.rng("actions");
        Ok(ActionsState {
            args,
            generation: 0,
            reader: None,
            registering: false,
            reconnect: ReconnectState::default(),
            empty_ends: 0,
            refusals_since_reconnect: 0,
            rng,
        })
    }

    async fn post_stop(
        &self,
        _: ActorRef<ActionsMsg>,
        st: &mut ActionsState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(r) = st.reader.take() {
            r.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ActionsMsg>,
        msg: ActionsMsg,
        st: &mut ActionsState,
    ) -> Result<(), ActorProcessingErr> {
        if st.args.ctx.lifecycle.is_cancelled() {
            if let Some(r) = st.reader.take() {
                r.abort();
            }
            return Ok(());
        }
        match msg {
            ActionsMsg::Start => Self::open(&myself, st),
            ActionsMsg::Registered(id) => {
                st.registering = false;
                st.args
                    .identity
                    .registrations
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(worker_id = %id, "worker registered");
                *st.args.identity.id.lock() = Some(id);
                Self::heartbeat(&myself, st);
                Self::open(&myself, st);
            }
            ActionsMsg::RegisterFailed(e) => {
                st.registering = false;
                let attempt = st.reconnect.no_progress;
                st.reconnect.no_progress += 1;
                let delay = st.args.ctx.backoff.stream.delay(attempt, &mut st.rng);
                st.args.health.reconnecting(st.reconnect.no_progress, &e);
                let generation = st.generation;
                super::later(
                    &st.args.ctx.lifecycle,
                    delay,
                    &myself,
                    ActionsMsg::Reconnect(generation),
                );
            }
            ActionsMsg::Ended {
                generation,
                end,
                messages,
                progressed,
                error,
            } => {
                if generation != st.generation {
                    return Ok(());
                }
                st.reader = None;
                if end == StreamEnd::Eof && messages == 0 {
                    st.empty_ends += 1;
                } else {
                    st.empty_ends = 0;
                }
                let gone = end == StreamEnd::Code(Code::NotFound)
                    || st.empty_ends >= EMPTY_ENDS_BEFORE_REREGISTER;
                if gone {
                    tracing::warn!(error, "worker row looks gone; registering again");
                    st.empty_ends = 0;
                    *st.args.identity.id.lock() = None;
                }
                // Registration problems are not the stream's: judge NOT_FOUND as transient here.
                let judged = if gone { StreamEnd::Eof } else { end };
                match reconnect::decide(
                    &mut st.reconnect,
                    judged,
                    progressed,
                    true,
                    true,
                    &st.args.ctx.backoff.stream,
                    &mut st.rng,
                ) {
                    Next::Reconnect { delay, attempt } => {
                        st.args.health.reconnecting(attempt, &error);
                        super::later(
                            &st.args.ctx.lifecycle,
                            delay,
                            &myself,
                            ActionsMsg::Reconnect(generation),
                        );
                    }
                    Next::Idle => {}
                    Next::Stop { reason } => {
                        st.args.health.stopped(Some(format!("{reason}: {error}")))
                    }
                }
            }
            ActionsMsg::Reconnect(generation) => {
                if generation == st.generation && st.reader.is_none() {
                    Self::open(&myself, st);
                }
            }
            ActionsMsg::Heartbeat => Self::heartbeat(&myself, st),
            ActionsMsg::HeartbeatOk => st.refusals_since_reconnect = 0,
            ActionsMsg::HeartbeatRefused(code) => {
                st.refusals_since_reconnect += 1;
                if code == Code::NotFound || st.refusals_since_reconnect > 1 {
                    tracing::warn!(?code, "heartbeats keep being refused; registering again");
                    st.refusals_since_reconnect = 0;
                    if let Some(r) = st.reader.take() {
                        r.abort();
                    }
                    Self::register(&myself, st);
                } else {
                    tracing::warn!(?code, "heartbeat refused; reconnecting the action stream");
                    Self::open(&myself, st);
                }
            }
            ActionsMsg::Crash => panic!("actions listener crash requested by a test"),
        }
        Ok(())
    }
}
