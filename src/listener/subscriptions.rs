//! The listener actor shared by the keyed streams (workflow runs, durable events): one stream,
//! replayed and re-armed as waiters come and go, reconnecting under [`reconnect::decide`].
//!
//! # Invariants
//!
//! 1. A generation stamps every stream; an end from an older generation is ignored.
//! 2. The stream is wanted while waiters remain; without waiters it goes idle and the next waiter
//!    re-arms it.
//! 3. Only a closed listener opens on demand ([`Phase::opens_on_demand`]): a waiter added while a
//!    stream is open, opening, or backing off rides that stream or the scheduled reconnect, so
//!    concurrent needs coalesce into one open and an outage never turns arrivals into a hot loop.
//! 4. A stream kind may poll its pending keys after `poll_after` without a stream (the runs
//!    listener polls GetRunDetails); the poll stops once the stream is back. One pass at a time:
//!    the next starts `poll_every` after the previous one ended.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::health::HealthReporter;
use super::keyed::{Keyed, KeyedRegistry};
use super::reconnect::{Next, StreamEnd};
use super::{ListenerCtx, StreamSlot, pump};
use crate::error::Error;
use crate::retry::Backoff;

/// A keyed bidi stream: how to open it, how to back off, how to fail its waiters.
pub trait KeyedStream: Keyed + Sized {
    /// Name in logs and errors (the method path).
    const OP: &'static str;
    /// Whether pending keys are polled when the stream stays down.
    const POLLS: bool = false;
    /// Opens the stream, feeding it `requests`.
    fn open(
        ctx: ListenerCtx,
        requests: tokio_stream::wrappers::UnboundedReceiverStream<Self::Req>,
    ) -> impl Future<Output = Result<tonic::Response<tonic::Streaming<Self::Resp>>, tonic::Status>> + Send;
    /// The reconnect backoff while waiters are pending.
    fn backoff(ctx: &ListenerCtx) -> Backoff;
    /// One polling pass over the pending keys (only called when [`KeyedStream::POLLS`]).
    fn poll(_args: &KeyedArgs<Self>) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// The error a waiter gets when the stream stops for good.
    fn stopped_error(key: &Self::Key, why: &str) -> Error;
}

/// Messages of a keyed-stream listener.
#[derive(Debug)]
pub enum KeyedMsg {
    /// Someone is waiting and no stream is published: open one if none is opening.
    Ensure,
    /// A stream of generation `generation` ended.
    Ended {
        /// Generation.
        generation: u64,
        /// How it ended.
        end: StreamEnd,
        /// Whether it made progress.
        progressed: bool,
        /// The error text.
        error: String,
    },
    /// The backoff for generation `generation` elapsed.
    Reconnect(u64),
    /// Poll the pending keys (fallback, when the stream kind has one).
    Poll,
    /// Test hook: panic inside the actor.
    Crash,
}

/// The listener's arguments (kept by the supervisor across restarts).
pub struct KeyedArgs<P: KeyedStream> {
    /// Shared context.
    pub ctx: ListenerCtx,
    /// The registry.
    pub registry: Arc<KeyedRegistry<P>>,
    /// Health.
    pub health: Arc<HealthReporter>,
}

impl<P: KeyedStream> Clone for KeyedArgs<P> {
    fn clone(&self) -> Self {
        KeyedArgs {
            ctx: self.ctx.clone(),
            registry: self.registry.clone(),
            health: self.health.clone(),
        }
    }
}

/// The actor's state.
pub struct KeyedState<P: KeyedStream> {
    args: KeyedArgs<P>,
    slot: StreamSlot,
    down_since: Option<Instant>,
    polling: bool,
}

/// A listener actor for one keyed stream kind.
pub struct KeyedListener<P>(PhantomData<fn() -> P>);

impl<P> Default for KeyedListener<P> {
    fn default() -> Self {
        KeyedListener(PhantomData)
    }
}

impl<P: KeyedStream> KeyedListener<P> {
    fn open(myself: &ActorRef<KeyedMsg>, st: &mut KeyedState<P>) {
        let generation = st.args.registry.next_generation();
        st.slot.opening(generation);
        let args = st.args.clone();
        let me = myself.clone();
        args.health.connecting();
        tokio::spawn(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let replayed = args.registry.publish(generation, tx);
            let started = Instant::now();
            let opened = tokio::select! {
                r = P::open(args.ctx.clone(), tokio_stream::wrappers::UnboundedReceiverStream::new(rx)) => r,
                _ = args.ctx.lifecycle.cancelled() => return,
            };
            tracing::debug!(generation, replayed, stream = P::OP, "stream opening");
            let registry = args.registry.clone();
            let Some(out) = pump(opened, &args.ctx.lifecycle, &args.health, started, |m| {
                registry.deliver(m)
            })
            .await
            else {
                return;
            };
            args.registry.unpublish(generation);
            let _ = me.cast(KeyedMsg::Ended {
                generation,
                end: out.end,
                progressed: out.progressed,
                error: out.error,
            });
        });
    }
}

impl<P: KeyedStream> Actor for KeyedListener<P> {
    type Msg = KeyedMsg;
    type State = KeyedState<P>;
    type Arguments = KeyedArgs<P>;

    async fn pre_start(
        &self,
        myself: ActorRef<KeyedMsg>,
        args: KeyedArgs<P>,
    ) -> Result<KeyedState<P>, ActorProcessingErr> {
        let slot = StreamSlot::new(args.ctx.rng(P::OP));
        let mut st = KeyedState {
            args,
            slot,
            down_since: None,
            polling: false,
        };
        // A restarted listener re-arms at once if waiters survived.
        if st.args.registry.has_waiters() {
            Self::open(&myself, &mut st);
        }
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<KeyedMsg>,
        msg: KeyedMsg,
        st: &mut KeyedState<P>,
    ) -> Result<(), ActorProcessingErr> {
        if st.args.ctx.lifecycle.is_cancelled() {
            return Ok(());
        }
        match msg {
            KeyedMsg::Ensure => {
                if st.slot.phase.opens_on_demand() {
                    Self::open(&myself, st);
                }
            }
            KeyedMsg::Ended {
                generation,
                end,
                progressed,
                error,
            } => {
                if !st.slot.ended(generation) {
                    return Ok(()); // invariant 1: an older generation cannot act
                }
                let wanted = st.args.registry.has_waiters();
                let alive = !st.args.ctx.lifecycle.is_cancelled();
                let backoff = P::backoff(&st.args.ctx);
                match st.slot.decide(end, progressed, wanted, alive, &backoff) {
                    Next::Reconnect { delay, attempt } => {
                        st.args.health.reconnecting(attempt, &error);
                        let since = *st.down_since.get_or_insert_with(Instant::now);
                        super::later(
                            &st.args.ctx.lifecycle,
                            delay,
                            &myself,
                            KeyedMsg::Reconnect(generation),
                        );
                        if !st.polling && P::POLLS {
                            st.polling = true;
                            let wait = st
                                .args
                                .ctx
                                .backoff
                                .poll_after
                                .saturating_sub(since.elapsed());
                            super::later(&st.args.ctx.lifecycle, wait, &myself, KeyedMsg::Poll);
                        }
                    }
                    Next::Idle => {
                        st.down_since = None;
                        st.args.health.idle();
                    }
                    Next::Stop { reason } => {
                        st.args.health.stopped(Some(format!("{reason}: {error}")));
                        let why = format!("{reason}: {error}");
                        st.args.registry.fail_all(false, |key| {
                            super::with_end_status(P::stopped_error(key, &why), end, &error)
                        });
                    }
                }
            }
            KeyedMsg::Reconnect(generation) => {
                if st.slot.reconnect_due(generation) {
                    if st.args.registry.has_waiters() {
                        Self::open(&myself, st);
                    } else {
                        st.args.health.idle();
                    }
                }
            }
            KeyedMsg::Poll => {
                let down = st.down_since.is_some_and(|_| {
                    !matches!(
                        st.args.health.get(),
                        super::health::ListenerState::Connected { .. }
                    )
                });
                if !down || !st.args.registry.has_waiters() {
                    st.polling = false;
                    st.down_since = None;
                    return Ok(());
                }
                // The next pass is scheduled when this one ends, so passes never pile up
                // however slow the engine answers.
                let args = st.args.clone();
                let me = myself.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = P::poll(&args) => {}
                        _ = args.ctx.lifecycle.cancelled() => return,
                    }
                    let every = args.ctx.backoff.poll_every;
                    super::later(&args.ctx.lifecycle, every, &me, KeyedMsg::Poll);
                });
            }
            KeyedMsg::Crash => panic!("{} listener crash requested by a test", P::OP),
        }
        Ok(())
    }
}
