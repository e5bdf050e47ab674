//! Long-lived streams: the reconnect decision, health, the one stream mechanism, and the kinds
//! that instantiate it.
//!
//! # Shape
//!
//! [`stream`] is the mechanism: a generic ractor actor per stream that owns its generation, opens
//! the stream, reads it in a per-generation task, and applies [`reconnect::decide`] when it ends.
//! What differs per stream is a [`stream::StreamKind`]:
//!
//! | kind | stream | module |
//! |---|---|---|
//! | worker actions | Register, then ListenV2 (Listen on UNIMPLEMENTED) | [`actions`] |
//! | workflow runs | SubscribeToWorkflowRuns, waiters by run id, polling fallback | [`runs`] over [`subscriptions`] |
//! | durable events | ListenForDurableEvent, waiters by (task, signal) | [`durable_events`] over [`subscriptions`] |
//! | durable task | the DurableTask bidi stream, acks and completions | [`durable_task`] |
//! | run events (caller-owned) | SubscribeToWorkflowEvents | `client::events` |
//!
//! The stream supervisor (`runtime::supervisor`) spawns the four listeners from their homes
//! ([`stream::Home`]), which keep their registries, generations and reconnect rules across
//! restarts.
//!
//! # Invariants
//!
//! 1. A generation number stamps every stream; an end or an open from an older generation is
//!    ignored, so it cannot overwrite a newer stream.
//! 2. Before a new stream is published, every current subscription is queued on it (replay
//!    before publish), under the registry lock, so no subscription falls in between.
//! 3. Only a listener's lifecycle token (a child of the runtime's) ends it; callers'
//!    cancellations only remove their own waiter.
//! 4. Nothing here imports the runtime, and nothing here reaches state or an actor of the worker
//!    or the client: listeners receive a [`Connection`](crate::connection::Connection) and their
//!    registries. Two pure items come from above (ARCHITECTURE.md, "Layers"):
//!    `runs::details_settled` (one rule for a run's end, the stream's and the client's) in
//!    `runs.rs`, and the worker's label type `worker::placement` in `actions.rs`.

pub(crate) mod actions;
pub(crate) mod durable_events;
pub(crate) mod durable_task;
pub(crate) mod health;
pub(crate) mod keyed;
pub(crate) mod reconnect;
pub(crate) mod run_event;
pub(crate) mod run_key;
pub(crate) mod runs;
mod set;
pub(crate) mod stream;
pub(crate) mod subscriptions;

pub(crate) use crate::connection::StreamBackoff;
pub(crate) use set::Listeners;

use tokio_util::sync::CancellationToken;

/// Attaches the gRPC status a stream ended with to `err` (a waiter failed because its listener
/// stopped), so callers can match the code instead of reading text.
pub(crate) fn with_end_status(
    err: crate::error::Error,
    end: Option<reconnect::StreamEnd>,
    message: &str,
) -> crate::error::Error {
    match end {
        Some(reconnect::StreamEnd::Code(code)) => err.with_cause(crate::error::Cause::status(
            tonic::Status::new(code, message.to_string()),
        )),
        _ => err,
    }
}

/// Where a listener's stream is, as its actor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Phase {
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
    pub(crate) fn opens_on_demand(self) -> bool {
        self == Phase::Closed
    }
}

/// Sends `msg` to `to` after `delay`, unless `life` is cancelled first (so no timer task outlives
/// its listener).
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

/// Sends `msg()` to `to` at each new value of `rx` (the engine's returns), until `life` is
/// cancelled, the actor is gone, or the channel closes.
pub(crate) fn on_each_change<M: ractor::Message, T: Send + Sync + 'static>(
    life: &CancellationToken,
    mut rx: tokio::sync::watch::Receiver<T>,
    to: &ractor::ActorRef<M>,
    msg: fn() -> M,
) {
    let (life, to) = (life.clone(), to.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = life.cancelled() => break,
                r = rx.changed() => {
                    if r.is_err() || to.cast(msg()).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// Sends `msg()` to `to` every `every`, until `life` is cancelled or the actor is gone.
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
