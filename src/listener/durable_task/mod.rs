//! The durable-task listener: the `DurableTask` bidi stream, acks keyed per request, completions
//! routed by entry ref, early completions kept 10 s, and replay on reconnect (CONTRACT.md §3).
//!
//! # Invariants
//!
//! 1. Every request that expects an ack has its own slot (a FIFO per task invocation, in send
//!    order, as the engine acks in order): two requests of one invocation never share a waiter.
//!    A request abandoned after it went out (its caller gave up, or a timeout) leaves a
//!    tombstone in its slot that takes its late ack, so the next request never gets it.
//! 2. A request awaiting its ack when the stream drops is re-sent on the next stream, after
//!    `register_worker` and before `worker_status`; it is never reported as an ambiguous failure.
//! 3. Completions that arrive before their waiter are kept [`EARLY_COMPLETION_TTL`].
//! 4. An eviction ack not received in [`EVICTION_ACK_TIMEOUT`] fails that eviction, not the stream.
//! 5. Sending is a synchronous path (CONTRACT.md §3): a request rides at most
//!    [`MAX_SEND_ATTEMPTS`] consecutive streams that end without progress, then fails with
//!    [`Outcome::Exhausted`](crate::Outcome::Exhausted); it never blocks its task through an outage. A stream with progress
//!    resets the count. A listener that stops fails every pending request and wait at once.
//! 6. While waits are pending, `worker_status` is re-sent every [`STATUS_EVERY`] on the published
//!    stream: the engine re-sends completions it lost (routing, a cluster node change), so a lost
//!    completion delays a wait by about a second instead of forever.
//! 7. Every request that expects an ack gets one within [`ACK_TIMEOUT`] or fails: the engine
//!    answers nothing for requests it cannot process, so an unanswered request must not hang its
//!    task (the eviction's own timeout is shorter).
//! 8. The engine's refusals are typed ([`DurableError`](crate::error::DurableError)): a nondeterministic replay and a server
//!    eviction reach the operation that caused them with the task, invocation and node; an
//!    eviction also fails that invocation's waits and calls the eviction hook (the worker cancels
//!    the evicted invocation).

mod client;
mod registry;

pub use client::DurableClient;
pub use registry::{Ack, Completion, DurableRegistry, EntryKey};

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::actions::WorkerIdentity;
use super::health::HealthReporter;
use super::reconnect::{Next, StreamEnd};
use super::{ListenerCtx, Phase, StreamSlot, pump};

/// How long a completion that arrived before its waiter is kept.
pub const EARLY_COMPLETION_TTL: Duration = Duration::from_secs(10);
/// How long an eviction waits for its ack.
pub const EVICTION_ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// How often pending waits are listed to the engine (`worker_status`), as the SDKs do.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How long a request waits for its ack on any stream before it fails (the Python SDK's
/// 60 s for event acks).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(60);
/// Consecutive streams without progress a request may ride before it fails (the bound on
/// synchronous paths, CONTRACT.md §3).
pub const MAX_SEND_ATTEMPTS: u32 = 5;

const OPERATION: &str = "/v1.V1Dispatcher/DurableTask";

/// Called with `(task, invocation)` when the engine evicts that invocation and every older one.
pub type EvictHook = Arc<dyn Fn(&str, i32) + Send + Sync>;

/// Messages of the durable-task listener.
#[derive(Debug)]
pub enum DurableMsg {
    /// Someone needs the stream.
    Ensure,
    /// The stream of `generation` ended.
    Ended {
        /// Generation.
        generation: u64,
        /// How.
        end: StreamEnd,
        /// Progress.
        progressed: bool,
        /// Error text.
        error: String,
    },
    /// Backoff elapsed.
    Reconnect(u64),
    /// Time to list the pending waits again (invariant 6).
    StatusTick,
    /// Test hook.
    Crash,
}

/// Arguments, kept across restarts.
#[derive(Clone)]
pub struct DurableArgs {
    /// Shared context.
    pub ctx: ListenerCtx,
    /// Registry.
    pub registry: Arc<DurableRegistry>,
    /// Health.
    pub health: Arc<HealthReporter>,
    /// The worker's id.
    pub identity: Arc<WorkerIdentity>,
}

/// The actor's state.
pub struct DurableState {
    args: DurableArgs,
    slot: StreamSlot,
}

/// The durable-task listener actor.
#[derive(Debug, Clone, Copy)]
pub struct DurableListener;

impl DurableListener {
    fn open(myself: &ActorRef<DurableMsg>, st: &mut DurableState) {
        let Some(worker_id) = st.args.identity.get() else {
            // Not registered yet: try again shortly.
            st.slot.phase = Phase::BackingOff;
            let generation = st.slot.generation;
            super::later(
                &st.args.ctx.lifecycle,
                Duration::from_millis(200),
                myself,
                DurableMsg::Reconnect(generation),
            );
            return;
        };
        let generation = st.args.registry.next_generation();
        st.slot.opening(generation);
        let args = st.args.clone();
        let me = myself.clone();
        args.health.connecting();
        tokio::spawn(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            args.registry.publish(generation, tx, &worker_id);
            let started = Instant::now();
            let mut client = args.ctx.v1_dispatcher();
            let opened = tokio::select! {
                r = client.durable_task(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)) => r,
                _ = args.ctx.lifecycle.cancelled() => return,
            };
            let registry = args.registry.clone();
            let Some(out) = pump(opened, &args.ctx.lifecycle, &args.health, started, |r| {
                registry.on_response(r)
            })
            .await
            else {
                return;
            };
            args.registry.unpublish(generation);
            args.registry.stream_ended(out.progressed, &out.error);
            let _ = me.cast(DurableMsg::Ended {
                generation,
                end: out.end,
                progressed: out.progressed,
                error: out.error,
            });
        });
    }
}

impl Actor for DurableListener {
    type Msg = DurableMsg;
    type State = DurableState;
    type Arguments = DurableArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<DurableMsg>,
        args: DurableArgs,
    ) -> Result<DurableState, ActorProcessingErr> {
        super::every(&args.ctx.lifecycle, STATUS_EVERY, &myself, || {
            DurableMsg::StatusTick
        });
        let slot = StreamSlot::new(args.ctx.rng("durable_task"));
        let mut st = DurableState { args, slot };
        if st.args.registry.busy() {
            Self::open(&myself, &mut st);
        }
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<DurableMsg>,
        msg: DurableMsg,
        st: &mut DurableState,
    ) -> Result<(), ActorProcessingErr> {
        if st.args.ctx.lifecycle.is_cancelled() {
            return Ok(());
        }
        match msg {
            DurableMsg::Ensure => {
                if st.slot.phase.opens_on_demand() {
                    Self::open(&myself, st);
                }
            }
            DurableMsg::Ended {
                generation,
                end,
                progressed,
                error,
            } => {
                if !st.slot.ended(generation) {
                    return Ok(());
                }
                // The durable stream is wanted while the worker runs (CONTRACT.md §3).
                let backoff = st.args.ctx.backoff.stream;
                match st.slot.decide(end, progressed, true, true, &backoff) {
                    Next::Reconnect { delay, attempt } => {
                        st.args.health.reconnecting(attempt, &error);
                        super::later(
                            &st.args.ctx.lifecycle,
                            delay,
                            &myself,
                            DurableMsg::Reconnect(generation),
                        );
                    }
                    Next::Idle => st.args.health.idle(),
                    Next::Stop { reason } => {
                        let why = format!("{reason}: {error}");
                        st.args.registry.stopped(&why, end, &error);
                        st.args.health.stopped(Some(why));
                    }
                }
            }
            DurableMsg::Reconnect(generation) => {
                if st.slot.reconnect_due(generation) {
                    Self::open(&myself, st);
                }
            }
            DurableMsg::StatusTick => {
                if let Some(worker_id) = st.args.identity.get() {
                    st.args.registry.send_status(&worker_id);
                }
            }
            DurableMsg::Crash => panic!("durable listener crash requested by a test"),
        }
        Ok(())
    }
}
