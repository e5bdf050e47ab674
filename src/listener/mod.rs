//! Long-lived streams: the reconnect decision, health, and the four listeners.
//!
//! # Shape
//!
//! Each listener is a ractor actor supervised by the stream supervisor
//! ([`crate::runtime::supervisor`]). The actor owns its stream *generation* and lifecycle; its
//! handler registry (waiters, pending acks) lives in an `Arc` the supervisor keeps, so a listener
//! that panics is restarted with every waiter intact. Messages are read by a per-generation task
//! that delivers straight into the registry (a one-shot send: never blocks, never waits on the
//! actor), and reports the stream's end to the actor, which applies [`reconnect::decide`].
//!
//! # Invariants
//!
//! 1. A generation number stamps every stream; an end or an open from an older generation is
//!    ignored, so it cannot overwrite a newer stream.
//! 2. Before a new stream is published, every current subscription is queued on it (replay
//!    before publish), under the registry lock, so no subscription falls in between.
//! 3. Only the lifecycle token (runtime shutdown) ends a listener; callers' cancellations only
//!    remove their own waiter.

pub mod actions;
pub mod durable_events;
pub mod durable_task;
pub mod health;
pub mod keyed;
pub mod reconnect;
pub mod runs;
pub mod subscriptions;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::config::ClientConfig;
use crate::retry::RetryCore;
use crate::transport::AuthInterceptor;

/// The authenticated channel type every client uses.
pub type AuthChannel = InterceptedService<Channel, AuthInterceptor>;

/// What every listener needs.
#[derive(Clone, Debug)]
pub struct ListenerCtx {
    /// The shared connection.
    pub channel: Channel,
    /// Adds the token.
    pub auth: AuthInterceptor,
    /// Configuration.
    pub config: Arc<ClientConfig>,
    /// Cancelled only by runtime shutdown.
    pub lifecycle: CancellationToken,
    /// The unary retry core (for heartbeats, registration, polling).
    pub core: Arc<RetryCore>,
    /// Reconnect backoff: [`crate::retry::backoff::STREAM_BACKOFF`], and its 5 s-capped form
    /// while result waiters are pending. Tests scale them down to count attempts quickly.
    pub backoff: StreamBackoff,
    /// The runtime's jitter seed ([`crate::RuntimeOptions::seed`]); each listener draws from
    /// its own generator derived from it, so a seeded runtime reconnects on a reproducible
    /// schedule.
    pub seed: u64,
}

impl ListenerCtx {
    /// A jitter generator for one listener: the runtime seed mixed with the listener's name.
    pub fn rng(&self, listener: &str) -> rand::rngs::StdRng {
        use rand::SeedableRng as _;
        let salt = listener.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        rand::rngs::StdRng::seed_from_u64(self.seed ^ salt)
    }
}

/// Attaches the gRPC status a stream ended with to `err` (a waiter failed because its listener
/// stopped), so callers can match the code instead of reading text.
pub(crate) fn with_end_status(
    err: crate::error::Error,
    end: reconnect::StreamEnd,
    message: &str,
) -> crate::error::Error {
    match end {
        reconnect::StreamEnd::Code(code) => err.with_cause(crate::error::Cause::Status(
            tonic::Status::new(code, message.to_string()),
        )),
        reconnect::StreamEnd::Eof => err,
    }
}

/// Where a listener's stream is, as its actor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// No stream and no reconnect scheduled (never opened, idle, or stopped).
    #[default]
    Closed,
    /// A stream is open or opening.
    Open,
    /// A stream ended and a reconnect is scheduled after its backoff.
    BackingOff,
}

impl Phase {
    /// Whether a new need for the stream (a waiter, a request) opens one now. Only a closed
    /// listener opens on demand: an open stream, or the scheduled reconnect, carries the newcomer
    /// (everything pending is replayed before a stream is published), so new waiters arriving
    /// during an outage coalesce into the scheduled reconnect and never bypass its backoff.
    pub fn opens_on_demand(self) -> bool {
        self == Phase::Closed
    }
}

/// One listener's stream slot: its generation, its [`Phase`], and the state and jitter of its
/// reconnect decision. The keyed and durable-task listeners share these rules through it.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    /// The current (newest) stream generation.
    pub generation: u64,
    /// Where the stream is.
    pub phase: Phase,
    reconnect: reconnect::ReconnectState,
    rng: rand::rngs::StdRng,
}

impl StreamSlot {
    /// A closed slot drawing its jitter from `rng`.
    pub fn new(rng: rand::rngs::StdRng) -> Self {
        StreamSlot {
            generation: 0,
            phase: Phase::Closed,
            reconnect: reconnect::ReconnectState::default(),
            rng,
        }
    }

    /// A stream of `generation` is being opened.
    pub fn opening(&mut self, generation: u64) {
        self.generation = generation;
        self.phase = Phase::Open;
    }

    /// The stream of `generation` ended: whether it is the current one (an older generation
    /// cannot act); the slot is then closed until [`StreamSlot::decide`] says more.
    pub fn ended(&mut self, generation: u64) -> bool {
        if generation != self.generation {
            return false;
        }
        self.phase = Phase::Closed;
        true
    }

    /// The reconnect decision for the end just accepted; a reconnect is recorded as scheduled.
    pub fn decide(
        &mut self,
        end: reconnect::StreamEnd,
        progressed: bool,
        wanted: bool,
        alive: bool,
        backoff: &crate::retry::Backoff,
    ) -> reconnect::Next {
        let next = reconnect::decide(
            &mut self.reconnect,
            end,
            progressed,
            wanted,
            alive,
            backoff,
            &mut self.rng,
        );
        if matches!(next, reconnect::Next::Reconnect { .. }) {
            self.phase = Phase::BackingOff;
        }
        next
    }

    /// A reconnect scheduled for `generation` is due: whether to open now (the slot is closed
    /// then; a stream opened meanwhile, or a newer generation, makes it stale).
    pub fn reconnect_due(&mut self, generation: u64) -> bool {
        if generation != self.generation || self.phase != Phase::BackingOff {
            return false;
        }
        self.phase = Phase::Closed;
        true
    }
}

/// The two reconnect backoff profiles of the listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBackoff {
    /// Listeners in general (1 s base, 30 s cap).
    pub stream: crate::retry::Backoff,
    /// The workflow-runs listener while waiters are pending (1 s base, 5 s cap).
    pub waiters: crate::retry::Backoff,
    /// Without a result stream this long, waiters are also polled (30 s).
    pub poll_after: std::time::Duration,
    /// The polling interval then (2 s).
    pub poll_every: std::time::Duration,
}

impl Default for StreamBackoff {
    fn default() -> Self {
        StreamBackoff {
            stream: crate::retry::backoff::STREAM_BACKOFF,
            waiters: crate::retry::backoff::WAITER_STREAM_BACKOFF,
            poll_after: runs::POLL_AFTER,
            poll_every: runs::POLL_EVERY,
        }
    }
}

impl ListenerCtx {
    /// A Dispatcher client.
    pub fn dispatcher(&self) -> crate::proto::dispatcher_client::DispatcherClient<AuthChannel> {
        crate::proto::dispatcher_client::DispatcherClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// An AdminService client.
    pub fn admin(&self) -> crate::proto::v1::admin_service_client::AdminServiceClient<AuthChannel> {
        crate::proto::v1::admin_service_client::AdminServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// A V1Dispatcher client.
    pub fn v1_dispatcher(
        &self,
    ) -> crate::proto::v1::v1_dispatcher_client::V1DispatcherClient<AuthChannel> {
        crate::proto::v1::v1_dispatcher_client::V1DispatcherClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }
}

/// Sends `msg` to `to` after `delay`, unless the runtime shuts down first (so no timer task
/// outlives the runtime).
pub(crate) fn later<M: ractor::Message>(
    life: &CancellationToken,
    delay: std::time::Duration,
    to: &ractor::ActorRef<M>,
    msg: M,
) {
    let (life, to) = (life.clone(), to.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = life.cancelled() => {}
            _ = tokio::time::sleep(delay) => {
                let _ = to.cast(msg);
            }
        }
    });
}

/// Sends `msg()` to `to` every `every`, until the runtime shuts down or the actor is gone.
pub(crate) fn every<M: ractor::Message>(
    life: &CancellationToken,
    every: std::time::Duration,
    to: &ractor::ActorRef<M>,
    msg: fn() -> M,
) {
    let (life, to) = (life.clone(), to.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = life.cancelled() => break,
                _ = tick.tick() => {
                    if to.cast(msg()).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// How one stream generation ended, as the reconnect decision needs it.
#[derive(Debug)]
pub(crate) struct StreamOutcome {
    pub end: reconnect::StreamEnd,
    pub progressed: bool,
    pub error: String,
}

/// Reads an opened stream until it ends, handing each message to `on_message` (which must not
/// block: it delivers into a registry). Marks the listener connected once open. `None` when the
/// runtime shut down meanwhile (nothing to decide).
pub(crate) async fn pump<T>(
    opened: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>,
    life: &CancellationToken,
    health: &health::HealthReporter,
    started: tokio::time::Instant,
    mut on_message: impl FnMut(T),
) -> Option<StreamOutcome> {
    let mut progressed = false;
    let result = match opened {
        Err(s) => Err(s),
        Ok(resp) => {
            health.connected();
            let mut stream = resp.into_inner();
            loop {
                let m = tokio::select! {
                    m = stream.message() => m,
                    _ = life.cancelled() => return None,
                };
                match m {
                    Ok(Some(msg)) => {
                        progressed = true;
                        on_message(msg);
                    }
                    Ok(None) => break Ok(()),
                    Err(s) => break Err(s),
                }
            }
        }
    };
    let error = match &result {
        Ok(()) => "stream ended (EOF)".to_string(),
        Err(s) => format!("{:?}: {}", s.code(), s.message()),
    };
    Some(StreamOutcome {
        end: end_of(&result),
        progressed: progressed || started.elapsed() >= reconnect::HEALTHY_STREAM,
        error,
    })
}

/// A stream end as the reconnect decision sees it.
pub fn end_of(r: &Result<(), tonic::Status>) -> reconnect::StreamEnd {
    match r {
        Ok(()) => reconnect::StreamEnd::Eof,
        Err(s) => reconnect::StreamEnd::Code(s.code()),
    }
}
