//! The durable-task listener: the `DurableTask` bidi stream, one request per invocation on the
//! wire, completions routed by entry ref, early completions kept 10 s, and what a reconnect may
//! and may not send again (docs/contract.md §3).
//!
//! # Invariants
//!
//! 1. One request per task invocation is on the wire at a time; the others wait in call order
//!    behind it, never written. The engine numbers each request's node itself and handles a
//!    stream's requests concurrently, so this is what makes the node order the call order (a
//!    replay finds the same log), and an ack of an invocation answers its one request on the
//!    wire, when it is of the kind that request expects. Two requests of one invocation never
//!    get each other's answer, in whatever order the engine answers. A request abandoned on the
//!    wire (its caller gave up, or a timeout) keeps its place until its ack or its stream's end.
//! 2. Requests are written to a stream only once the engine has answered its `register_worker`
//!    (or it stayed open [`READY_AFTER_TICKS`] status ticks after the engine answered the call;
//!    ticks while the call is still connecting do not count): a stream that ends before that
//!    carried none, and they go out on the next one. A request on the wire when its stream ends
//!    is never sent again (the engine may have recorded it: a second copy would be a second
//!    node), and its invocation is *in doubt*. Within a worker its requests are held unanswered
//!    and the invocation is restarted from the engine's log (the doubt hook: the worker evicts
//!    the invocation, asks the engine to restore it and cancels it here); the restored
//!    invocation replays onto the log the engine kept, whether or not it recorded the request,
//!    and no retry is spent. When the restart cannot be made (the eviction fails), the held
//!    request fails with [`Outcome::MaybeExecuted`](crate::error::Outcome::MaybeExecuted), and so does
//!    every later request of its invocation, so the attempt fails and its retry replays.
//! 3. Completions that arrive before their waiter are kept [`EARLY_COMPLETION_TTL`].
//! 4. An eviction ack not received in [`EVICTION_ACK_TIMEOUT`] fails that eviction, not the stream.
//! 5. Sending is a synchronous path (docs/contract.md §3): a request waits through at most
//!    [`MAX_SEND_ATTEMPTS`] consecutive streams that end without progress, then fails with
//!    [`Outcome::Exhausted`](crate::error::Outcome::Exhausted); it never blocks its task through an outage. A stream with progress
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

pub(crate) use client::DurableClient;
pub(crate) use registry::{Completion, DurableRegistry, EntryKey};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::actions::WorkerIdentity;
use super::reconnect::StreamEnd;
use super::stream::{EndReport, Flow, Judged, StreamKind};
use crate::connection::Connection;
use crate::protocol::v1;

/// How long a completion that arrived before its waiter is kept.
pub(crate) const EARLY_COMPLETION_TTL: Duration = Duration::from_secs(10);
/// How often pending waits are listed to the engine (`worker_status`), as the SDKs do.
pub(crate) const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How long a request waits for its ack on any stream before it fails (the Python SDK's
/// 60 s for event acks).
pub(crate) const ACK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an eviction waits for its ack before it fails (that eviction, not the stream:
/// docs/contract.md §3).
pub(crate) const EVICTION_ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// Consecutive streams without progress a request may ride before it fails (the bound on
/// synchronous paths, docs/contract.md §3).
pub(crate) const MAX_SEND_ATTEMPTS: u32 = 5;
/// Status ticks a stream stays open before requests go out on it without the engine's answer to
/// `register_worker` (an engine that does not answer it still serves the stream).
pub(crate) const READY_AFTER_TICKS: u32 = 2;

const OPERATION: &str = "/v1.V1Dispatcher/DurableTask";

/// A hook called with a task invocation `(task, invocation)`.
pub(crate) type InvocationHook = Arc<dyn Fn(&str, i32) + Send + Sync>;

/// Called with `(task, invocation)` when the engine evicts that invocation and every older one.
pub(crate) type EvictHook = InvocationHook;

/// Called with `(task, invocation)` when that invocation's request was on the wire of a stream
/// that ended (invariant 2): the worker restarts it from the engine's log.
pub(crate) type DoubtHook = InvocationHook;

/// The durable-task listener's kind: its registry and the worker's identity.
pub(crate) struct DurableTaskKind {
    /// Requests, acks, waits and completions.
    pub registry: Arc<DurableRegistry>,
    /// The worker's id (every stream starts by registering it).
    pub identity: Arc<WorkerIdentity>,
    /// Set once the stream was first needed: from then on it is wanted while the worker runs.
    armed: AtomicBool,
}

impl DurableTaskKind {
    /// The kind for `registry`, registering as `identity`'s worker.
    pub(crate) fn new(registry: Arc<DurableRegistry>, identity: Arc<WorkerIdentity>) -> Self {
        DurableTaskKind {
            registry,
            identity,
            armed: AtomicBool::new(false),
        }
    }
}

impl StreamKind for DurableTaskKind {
    type Item = v1::DurableTaskResponse;
    const NAME: &'static str = OPERATION;
    const TICK: Option<Duration> = Some(STATUS_EVERY);

    async fn open(
        &self,
        conn: &Connection,
        generation: u64,
    ) -> Result<tonic::Streaming<v1::DurableTaskResponse>, tonic::Status> {
        self.armed.store(true, Ordering::Relaxed);
        // Not registered (yet, or again after the worker row was lost): a transient end, so the
        // stream comes back after its backoff once the worker has an id.
        let worker_id = self.identity.get().ok_or_else(|| {
            tonic::Status::unavailable("the worker is not registered with the engine yet")
        })?;
        let (tx, rx) = mpsc::channel(registry::SINK_CAPACITY);
        self.registry.publish(generation, tx, &worker_id);
        let stream = conn
            .v1_dispatcher()
            .durable_task(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        self.registry.opened(generation);
        Ok(stream)
    }

    async fn on_message(&self, item: v1::DurableTaskResponse) -> Flow {
        self.registry.on_response(item);
        Flow::Continue
    }

    async fn on_end(&self, _conn: &Connection, generation: u64, report: &EndReport) -> Judged {
        self.registry.unpublish(generation, &report.error);
        self.registry.stream_ended(report.progressed, &report.error);
        Judged::Decide(report.end)
    }

    fn wanted(&self) -> bool {
        // Wanted while the worker runs (docs/contract.md §3), once first needed.
        self.armed.load(Ordering::Relaxed)
    }

    fn backoff(&self, conn: &Connection) -> crate::retry::Backoff {
        conn.backoff().stream
    }

    fn on_stop(&self, why: &str, end: Option<StreamEnd>, permanent: bool) {
        self.registry.stopped(why, end, permanent);
    }

    fn on_tick(&self) {
        // Invariant 6: pending waits are listed to the engine every second.
        if let Some(worker_id) = self.identity.get() {
            self.registry.tick(&worker_id);
        }
    }
}
