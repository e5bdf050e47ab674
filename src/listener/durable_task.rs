//! The durable-task listener: the `DurableTask` bidi stream, acks keyed per request, completions
//! routed by entry ref, early completions kept 10 s, and replay on reconnect (CONTRACT.md §3).
//!
//! # Invariants
//!
//! 1. Every request that expects an ack has its own slot (a FIFO per task invocation, in send
//!    order, as the engine acks in order): two requests of one invocation never share a waiter.
//! 2. A request awaiting its ack when the stream drops is re-sent on the next stream, after
//!    `register_worker` and before `worker_status`; it is never reported as an ambiguous failure.
//! 3. Completions that arrive before their waiter are kept [`EARLY_COMPLETION_TTL`].
//! 4. An eviction ack not received in [`EVICTION_ACK_TIMEOUT`] fails that eviction, not the stream.
//! 5. Sending is a synchronous path (CONTRACT.md §3): a request rides at most
//!    [`MAX_SEND_ATTEMPTS`] consecutive streams that end without progress, then fails with
//!    [`Outcome::Exhausted`]; it never blocks its task through an outage. A stream with progress
//!    resets the count. A listener that stops fails every pending request and wait at once.
//! 6. While waits are pending, `worker_status` is re-sent every [`STATUS_EVERY`] on the published
//!    stream: the engine re-sends completions it lost (routing, a cluster node change), so a lost
//!    completion delays a wait by about a second instead of forever.
//! 7. Every request that expects an ack gets one within [`ACK_TIMEOUT`] or fails: the engine
//!    answers nothing for requests it cannot process, so an unanswered request must not hang its
//!    task (the eviction's own timeout is shorter).
//! 8. The engine's refusals are typed ([`DurableError`]): a nondeterministic replay and a server
//!    eviction reach the operation that caused them with the task, invocation and node; an
//!    eviction also fails that invocation's waits and calls the eviction hook (the worker cancels
//!    the evicted invocation).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::actions::WorkerIdentity;
use super::health::HealthReporter;
use super::reconnect::{self, Next, ReconnectState, StreamEnd};
use super::{ListenerCtx, Phase, pump};
use crate::error::{Cause, DurableError, Error, Outcome};
use crate::proto::v1::{
    self, durable_task_request::Message as Req, durable_task_response::Message as Resp,
};

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

/// An entry ref: `(task, invocation, branch, node)`.
pub type EntryKey = (String, i32, i64, i64);

fn key_of(r: &v1::DurableEventLogEntryRef) -> EntryKey {
    (
        r.durable_task_external_id.clone(),
        r.invocation_count,
        r.branch_id,
        r.node_id,
    )
}

/// An ack.
#[derive(Debug)]
pub enum Ack {
    /// `wait_for_ack`.
    Wait(v1::DurableEventLogEntryRef),
    /// `memo_ack`.
    Memo(v1::DurableTaskEventMemoAckResponse),
    /// `trigger_runs_ack`.
    Runs(v1::DurableTaskEventTriggerRunsAckResponse),
    /// `eviction_ack`.
    Evicted,
}

/// A completed entry.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The payload (JSON bytes).
    pub payload: Vec<u8>,
    /// Whether it is a failure.
    pub is_failure: bool,
    /// The failure message.
    pub error: Option<String>,
}

type AckTx = oneshot::Sender<Result<Ack, Error>>;
type WaitTx = oneshot::Sender<Result<Completion, Error>>;

/// A request awaiting its ack, and how many streams without progress it has ridden.
struct Unacked {
    req: v1::DurableTaskRequest,
    failed_streams: u32,
}
/// A sent request: its id, its ack, and whether a stream must be armed to carry it.
type Sent = (u64, oneshot::Receiver<Result<Ack, Error>>, bool);
type Sink = mpsc::UnboundedSender<v1::DurableTaskRequest>;

#[derive(Default)]
struct Inner {
    sink: Option<(u64, Sink)>,
    /// Requests awaiting an ack, by request id (re-sent on reconnect, in order).
    unacked: BTreeMap<u64, Unacked>,
    /// Ack slots per (task, invocation), in send order.
    acks: HashMap<(String, i32), VecDeque<(u64, AckTx)>>,
    waits: HashMap<EntryKey, WaitTx>,
    early: HashMap<EntryKey, (Completion, Instant)>,
    closed: bool,
}

/// The typed refusal of an `error` response.
fn refusal_of(r: &v1::DurableEventLogEntryRef, kind: i32, message: String) -> DurableError {
    if kind == v1::DurableTaskErrorType::Nondeterminism as i32 {
        DurableError::Nondeterminism {
            task: r.durable_task_external_id.clone(),
            invocation: r.invocation_count,
            branch: r.branch_id,
            node: r.node_id,
            message,
        }
    } else {
        DurableError::Engine {
            task: r.durable_task_external_id.clone(),
            invocation: r.invocation_count,
            node: r.node_id,
            message,
        }
    }
}

fn rejected(refusal: DurableError) -> Error {
    Error::new(Outcome::Rejected, OPERATION).with_cause(Cause::Durable(refusal))
}

/// The durable registry. Outlives listener restarts.
#[derive(Default)]
pub struct DurableRegistry {
    inner: Mutex<Inner>,
    next: AtomicU64,
    /// Stream generations (see `RunRegistry`): never reused across listener restarts.
    generations: AtomicU64,
    on_evict: Mutex<Option<EvictHook>>,
}

impl std::fmt::Debug for DurableRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableRegistry(..)")
    }
}

fn target(req: &v1::DurableTaskRequest) -> Option<(String, i32)> {
    match req.message.as_ref()? {
        Req::WaitFor(w) => Some((w.durable_task_external_id.clone(), w.invocation_count)),
        Req::Memo(m) => Some((m.durable_task_external_id.clone(), m.invocation_count)),
        Req::TriggerRuns(t) => Some((t.durable_task_external_id.clone(), t.invocation_count)),
        Req::EvictInvocation(e) => Some((e.durable_task_external_id.clone(), e.invocation_count)),
        _ => None,
    }
}

impl Inner {
    /// Fails and removes every ack slot whose key matches, with the error `make` builds.
    fn fail_acks(&mut self, matches: impl Fn(&(String, i32)) -> bool, make: impl Fn() -> Error) {
        let keys: Vec<(String, i32)> = self.acks.keys().filter(|k| matches(k)).cloned().collect();
        for k in keys {
            for (id, tx) in self.acks.remove(&k).unwrap_or_default() {
                self.unacked.remove(&id);
                let _ = tx.send(Err(make()));
            }
        }
    }

    /// Fails and removes the ack slots whose request id matches.
    fn fail_acks_where(&mut self, matches: impl Fn(u64) -> bool, make: impl Fn() -> Error) {
        for q in self.acks.values_mut() {
            let mut keep = VecDeque::with_capacity(q.len());
            for (id, tx) in q.drain(..) {
                if matches(id) {
                    let _ = tx.send(Err(make()));
                } else {
                    keep.push_back((id, tx));
                }
            }
            *q = keep;
        }
        self.acks.retain(|_, q| !q.is_empty());
    }

    /// Fails and removes every wait whose key matches.
    fn fail_waits(&mut self, matches: impl Fn(&EntryKey) -> bool, make: impl Fn() -> Error) {
        let keys: Vec<EntryKey> = self.waits.keys().filter(|k| matches(k)).cloned().collect();
        for k in keys {
            if let Some(tx) = self.waits.remove(&k) {
                let _ = tx.send(Err(make()));
            }
        }
    }
}

impl DurableRegistry {
    /// Sets what runs when the engine evicts an invocation (the worker cancels it).
    pub fn set_evict_hook(&self, hook: EvictHook) {
        *self.on_evict.lock() = Some(hook);
    }

    /// Drops a request whose ack will no longer be awaited (its slot and its re-send).
    fn abandon(&self, key: &(String, i32), id: u64) {
        let mut g = self.inner.lock();
        g.unacked.remove(&id);
        if let Some(q) = g.acks.get_mut(key) {
            q.retain(|(i, _)| *i != id);
            if q.is_empty() {
                g.acks.remove(key);
            }
        }
    }

    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Sends a request that expects an ack; returns the ack receiver and whether a stream must
    /// be armed.
    fn send(&self, req: v1::DurableTaskRequest) -> Result<Sent, Error> {
        let key =
            target(&req).ok_or_else(|| Error::invalid("DurableTask", "request has no target"))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            return Err(Error::closed("DurableTask"));
        }
        g.acks.entry(key).or_default().push_back((id, tx));
        g.unacked.insert(
            id,
            Unacked {
                req: req.clone(),
                failed_streams: 0,
            },
        );
        let sent = g.sink.as_ref().is_some_and(|(_, s)| s.send(req).is_ok());
        Ok((id, rx, !sent))
    }

    /// Sends a request that expects no ack (`complete_memo`); dropped if no stream (the memo is
    /// then recomputed on replay).
    fn send_no_ack(&self, req: v1::DurableTaskRequest) {
        if let Some((_, s)) = &self.inner.lock().sink {
            let _ = s.send(req);
        }
    }

    fn wait(&self, key: EntryKey) -> oneshot::Receiver<Result<Completion, Error>> {
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            let _ = tx.send(Err(Error::closed(OPERATION)));
            return rx;
        }
        if let Some((c, at)) = g.early.remove(&key)
            && at.elapsed() < EARLY_COMPLETION_TTL
        {
            let _ = tx.send(Ok(c));
            return rx;
        }
        g.waits.insert(key, tx);
        rx
    }

    fn forget_wait(&self, key: &EntryKey) {
        self.inner.lock().waits.remove(key);
    }

    fn pop_ack(&self, key: &(String, i32)) -> Option<AckTx> {
        let mut g = self.inner.lock();
        let q = g.acks.get_mut(key)?;
        let (id, tx) = q.pop_front()?;
        if q.is_empty() {
            g.acks.remove(key);
        }
        g.unacked.remove(&id);
        Some(tx)
    }

    /// Handles one response from the engine.
    fn on_response(&self, resp: v1::DurableTaskResponse) {
        let Some(msg) = resp.message else { return };
        match msg {
            Resp::RegisterWorker(_) => {}
            Resp::WaitForAck(a) => {
                if let Some(r) = a.r#ref
                    && let Some(tx) =
                        self.pop_ack(&(r.durable_task_external_id.clone(), r.invocation_count))
                {
                    let _ = tx.send(Ok(Ack::Wait(r)));
                }
            }
            Resp::MemoAck(m) => {
                if let Some(r) = &m.r#ref
                    && let Some(tx) =
                        self.pop_ack(&(r.durable_task_external_id.clone(), r.invocation_count))
                {
                    let _ = tx.send(Ok(Ack::Memo(m)));
                }
            }
            Resp::TriggerRunsAck(t) => {
                if let Some(tx) =
                    self.pop_ack(&(t.durable_task_external_id.clone(), t.invocation_count))
                {
                    let _ = tx.send(Ok(Ack::Runs(t)));
                }
            }
            Resp::EvictionAck(e) => {
                if let Some(tx) =
                    self.pop_ack(&(e.durable_task_external_id.clone(), e.invocation_count))
                {
                    let _ = tx.send(Ok(Ack::Evicted));
                }
            }
            Resp::EntryCompleted(c) => {
                let Some(r) = c.r#ref else { return };
                let key = key_of(&r);
                let completion = Completion {
                    payload: c.payload,
                    is_failure: c.is_failure,
                    error: c.error_message,
                };
                let mut g = self.inner.lock();
                match g.waits.remove(&key) {
                    Some(tx) => {
                        let _ = tx.send(Ok(completion));
                    }
                    None => {
                        let now = Instant::now();
                        g.early.retain(|_, (_, at)| {
                            now.saturating_duration_since(*at) < EARLY_COMPLETION_TTL
                        });
                        g.early.insert(key, (completion, now));
                    }
                }
            }
            Resp::Error(e) => {
                let Some(r) = e.r#ref else { return };
                let refusal = refusal_of(&r, e.error_type, e.error_message);
                if let Some(tx) =
                    self.pop_ack(&(r.durable_task_external_id.clone(), r.invocation_count))
                {
                    let _ = tx.send(Err(rejected(refusal)));
                }
            }
            Resp::ServerEvict(e) => {
                let (task, invocation) = (e.durable_task_external_id, e.invocation_count);
                let evicted = || {
                    rejected(DurableError::Evicted {
                        task: task.clone(),
                        invocation,
                        reason: e.reason.clone(),
                    })
                };
                {
                    let mut g = self.inner.lock();
                    g.fail_acks(|(t, i)| *t == task && *i <= invocation, evicted);
                    g.fail_waits(|(t, i, _, _)| *t == task && *i <= invocation, evicted);
                }
                let hook = self.on_evict.lock().clone();
                if let Some(hook) = hook {
                    hook(&task, invocation);
                }
            }
        }
    }

    /// The `worker_status` listing every pending wait, or `None` when nothing waits.
    fn status_request(g: &Inner, worker_id: &str) -> Option<v1::DurableTaskRequest> {
        if g.waits.is_empty() {
            return None;
        }
        let waiting_entries = g
            .waits
            .keys()
            .map(|(t, i, b, n)| v1::DurableTaskAwaitedCompletedEntry {
                durable_task_external_id: t.clone(),
                branch_id: *b,
                node_id: *n,
                invocation_count: *i,
            })
            .collect();
        Some(v1::DurableTaskRequest {
            message: Some(Req::WorkerStatus(v1::DurableTaskWorkerStatusRequest {
                worker_id: worker_id.to_string(),
                waiting_entries,
            })),
        })
    }

    /// Lists the pending waits on the published stream (invariant 6); whether it sent one.
    fn send_status(&self, worker_id: &str) -> bool {
        let g = self.inner.lock();
        match (&g.sink, Self::status_request(&g, worker_id)) {
            (Some((_, sink)), Some(req)) => sink.send(req).is_ok(),
            _ => false,
        }
    }

    /// Publishes a new stream: register_worker, re-sent requests, worker_status (replay first).
    fn publish(&self, generation: u64, sink: Sink, worker_id: &str) {
        let mut g = self.inner.lock();
        let _ = sink.send(v1::DurableTaskRequest {
            message: Some(Req::RegisterWorker(v1::DurableTaskRequestRegisterWorker {
                worker_id: worker_id.to_string(),
            })),
        });
        for pending in g.unacked.values() {
            let _ = sink.send(pending.req.clone());
        }
        if let Some(status) = Self::status_request(&g, worker_id) {
            let _ = sink.send(status);
        }
        g.sink = Some((generation, sink));
    }

    fn unpublish(&self, generation: u64) {
        let mut g = self.inner.lock();
        if g.sink.as_ref().is_some_and(|(s, _)| *s == generation) {
            g.sink = None;
        }
    }

    /// Counts a stream of this registry's that ended: without progress, every request it carried
    /// has ridden one more failed stream, and those at [`MAX_SEND_ATTEMPTS`] fail; with progress,
    /// the count starts again.
    fn stream_ended(&self, progressed: bool, why: &str) {
        let mut g = self.inner.lock();
        if progressed {
            for p in g.unacked.values_mut() {
                p.failed_streams = 0;
            }
            return;
        }
        let mut spent = Vec::new();
        for (id, p) in g.unacked.iter_mut() {
            p.failed_streams += 1;
            if p.failed_streams >= MAX_SEND_ATTEMPTS {
                spent.push(*id);
            }
        }
        if spent.is_empty() {
            return;
        }
        let make = || {
            Error::new(Outcome::Exhausted, OPERATION)
                .with_attempts(MAX_SEND_ATTEMPTS)
                .with_detail(format!(
                    "the durable-task stream ended {MAX_SEND_ATTEMPTS} times in a row before the engine acknowledged this operation (last: {why}); the engine replays durable operations by node, so retrying the task is safe"
                ))
        };
        for id in &spent {
            g.unacked.remove(id);
        }
        let spent: std::collections::HashSet<u64> = spent.into_iter().collect();
        g.fail_acks_where(|id| spent.contains(&id), make);
    }

    /// Fails everything pending and refuses new work (runtime shutdown).
    pub fn close(&self) {
        let mut g = self.inner.lock();
        g.closed = true;
        g.sink = None;
        g.fail_acks(|_| true, || Error::closed(OPERATION));
        g.fail_waits(|_| true, || Error::closed(OPERATION));
        g.unacked.clear();
    }

    /// Fails every pending request and wait with the listener's stop error (new requests re-arm
    /// the listener).
    fn stopped(&self, why: &str) {
        let mut g = self.inner.lock();
        let make = || {
            Error::new(Outcome::Rejected, OPERATION)
                .with_detail(format!("the durable-task stream stopped: {why}"))
        };
        g.fail_acks(|_| true, make);
        g.fail_waits(|_| true, make);
        g.unacked.clear();
    }

    fn busy(&self) -> bool {
        let g = self.inner.lock();
        !g.acks.is_empty() || !g.waits.is_empty()
    }
}

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
    generation: u64,
    phase: Phase,
    reconnect: ReconnectState,
    rng: rand::rngs::StdRng,
}

/// The durable-task listener actor.
#[derive(Debug, Clone, Copy)]
pub struct DurableListener;

impl DurableListener {
    fn open(myself: &ActorRef<DurableMsg>, st: &mut DurableState) {
        let Some(worker_id) = st.args.identity.get() else {
            // Not registered yet: try again shortly.
            st.phase = Phase::BackingOff;
            let generation = st.generation;
            super::later(
                &st.args.ctx.lifecycle,
                Duration::from_millis(200),
                myself,
                DurableMsg::Reconnect(generation),
            );
            return;
        };
        st.generation = st.args.registry.next_generation();
        st.phase = Phase::Open;
        let generation = st.generation;
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
        let rng = args.ctx.rng("durable_task");
        let mut st = DurableState {
            args,
            generation: 0,
            phase: Phase::Closed,
            reconnect: ReconnectState::default(),
            rng,
        };
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
                if st.phase.opens_on_demand() {
                    Self::open(&myself, st);
                }
            }
            DurableMsg::Ended {
                generation,
                end,
                progressed,
                error,
            } => {
                if generation != st.generation {
                    return Ok(());
                }
                st.phase = Phase::Closed;
                // The durable stream is wanted while the worker runs (CONTRACT.md §3).
                match reconnect::decide(
                    &mut st.reconnect,
                    end,
                    progressed,
                    true,
                    true,
                    &st.args.ctx.backoff.stream,
                    &mut st.rng,
                ) {
                    Next::Reconnect { delay, attempt } => {
                        st.phase = Phase::BackingOff;
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
                        st.args.registry.stopped(&why);
                        st.args.health.stopped(Some(why));
                    }
                }
            }
            DurableMsg::Reconnect(generation) => {
                if generation == st.generation && st.phase == Phase::BackingOff {
                    st.phase = Phase::Closed;
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

/// What a task context uses to run durable operations.
#[derive(Clone)]
pub struct DurableClient {
    /// Registry.
    pub registry: Arc<DurableRegistry>,
    /// Arms the stream.
    pub ensure: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for DurableClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableClient(..)")
    }
}

impl DurableClient {
    async fn request(&self, req: v1::DurableTaskRequest) -> Result<Ack, Error> {
        let key = target(&req);
        let (id, rx, arm) = self.registry.send(req)?;
        if arm {
            (self.ensure)();
        }
        // If this future is dropped (a timeout, a cancelled task), the request is abandoned: no
        // re-send on reconnect, and its slot cannot take a later ack meant for another request.
        struct Abandon<'a>(&'a DurableRegistry, Option<(String, i32)>, u64, bool);
        impl Drop for Abandon<'_> {
            fn drop(&mut self) {
                if !self.3
                    && let Some(k) = &self.1
                {
                    self.0.abandon(k, self.2);
                }
            }
        }
        let mut guard = Abandon(&self.registry, key, id, false);
        let r = match tokio::time::timeout(ACK_TIMEOUT, rx).await {
            Ok(r) => r.map_err(|_| Error::closed(OPERATION))?,
            // The guard drops the request: no re-send, no slot for a late ack.
            Err(_) => {
                return Err(Error::new(Outcome::DeadlineExceeded, OPERATION).with_detail(
                    "the engine did not acknowledge this durable operation within 60 s (it answers nothing for requests it cannot process); the attempt fails so the engine can run it again, and the operation replays by node",
                ));
            }
        };
        guard.3 = true;
        r
    }

    /// Registers a wait and returns its completion payload.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it forgets the wait locally; the engine keeps the node, and a replay
    /// of the same wait finds it.
    pub async fn wait_for(
        &self,
        task: &str,
        invocation: i32,
        conds: v1::DurableEventListenerConditions,
    ) -> Result<Completion, Error> {
        let ack = self
            .request(v1::DurableTaskRequest {
                message: Some(Req::WaitFor(v1::DurableTaskWaitForRequest {
                    invocation_count: invocation,
                    durable_task_external_id: task.to_string(),
                    wait_for_conditions: Some(conds),
                    label: None,
                })),
            })
            .await?;
        let Ack::Wait(r) = ack else {
            return Err(Error::new(Outcome::Rejected, "DurableTask")
                .with_detail("unexpected ack for wait_for"));
        };
        let key = key_of(&r);
        let rx = self.registry.wait(key.clone());
        struct Forget<'a>(&'a DurableRegistry, EntryKey);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.forget_wait(&self.1);
            }
        }
        let _guard = Forget(&self.registry, key);
        rx.await.map_err(|_| Error::closed(OPERATION))?
    }

    /// Memoizes `compute` under `key` for this task: a replay returns the stored value.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an interrupted memo is recomputed on replay.
    pub async fn memo<F, Fut>(
        &self,
        task: &str,
        invocation: i32,
        key: &[u8],
        compute: F,
    ) -> Result<Vec<u8>, Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Vec<u8>>,
    {
        let ack = self
            .request(v1::DurableTaskRequest {
                message: Some(Req::Memo(v1::DurableTaskMemoRequest {
                    invocation_count: invocation,
                    durable_task_external_id: task.to_string(),
                    key: key.to_vec(),
                    payload: None,
                })),
            })
            .await?;
        let Ack::Memo(m) = ack else {
            return Err(
                Error::new(Outcome::Rejected, "DurableTask").with_detail("unexpected ack for memo")
            );
        };
        if let Some(v) = m.memo_result_payload.filter(|_| m.memo_already_existed) {
            return Ok(v);
        }
        let value = compute().await;
        self.registry.send_no_ack(v1::DurableTaskRequest {
            message: Some(Req::CompleteMemo(v1::DurableTaskCompleteMemoRequest {
                r#ref: m.r#ref,
                payload: value.clone(),
                memo_key: key.to_vec(),
            })),
        });
        Ok(value)
    }

    /// Tells the engine to evict this invocation; fails if no ack comes in 30 s.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn evict(&self, task: &str, invocation: i32, reason: &str) -> Result<(), Error> {
        let req = v1::DurableTaskRequest {
            message: Some(Req::EvictInvocation(
                v1::DurableTaskEvictInvocationRequest {
                    invocation_count: invocation,
                    durable_task_external_id: task.to_string(),
                    reason: Some(reason.to_string()),
                },
            )),
        };
        match tokio::time::timeout(EVICTION_ACK_TIMEOUT, self.request(req)).await {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(Error::new(Outcome::DeadlineExceeded, "DurableTask")
                .with_detail("no eviction ack within 30 s")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(task: &str, node: i64) -> v1::DurableTaskResponse {
        v1::DurableTaskResponse {
            message: Some(Resp::EntryCompleted(
                v1::DurableTaskEventLogEntryCompletedResponse {
                    r#ref: Some(eref(task, 1, node)),
                    payload: b"{}".to_vec(),
                    is_failure: false,
                    error_message: None,
                },
            )),
        }
    }

    fn eref(task: &str, inv: i32, node: i64) -> v1::DurableEventLogEntryRef {
        v1::DurableEventLogEntryRef {
            durable_task_external_id: task.into(),
            invocation_count: inv,
            branch_id: 1,
            node_id: node,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_completion_before_its_waiter_is_kept_ten_seconds() {
        let r = DurableRegistry::default();
        r.on_response(completed("t", 1));
        let got = r
            .wait(("t".into(), 1, 1, 1))
            .await
            .expect("kept")
            .expect("a completion");
        assert_eq!(got.payload, b"{}");
        let mut again = r.wait(("t".into(), 1, 1, 1));
        assert!(
            futures::poll!(&mut again).is_pending(),
            "a kept completion is handed over once"
        );
        r.on_response(completed("t", 2));
        tokio::time::advance(EARLY_COMPLETION_TTL + Duration::from_millis(1)).await;
        let mut late = r.wait(("t".into(), 1, 1, 2));
        assert!(
            futures::poll!(&mut late).is_pending(),
            "a completion older than 10 s is dropped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_eviction_without_an_ack_fails_after_thirty_seconds_and_is_dropped() {
        let registry = Arc::new(DurableRegistry::default());
        let client = DurableClient {
            registry: registry.clone(),
            ensure: Arc::new(|| {}),
        };
        let started = tokio::time::Instant::now();
        let err = client.evict("t", 1, "test").await.expect_err("no ack");
        assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
        assert_eq!(started.elapsed(), EVICTION_ACK_TIMEOUT);
        let g = registry.inner.lock();
        assert!(
            g.unacked.is_empty() && g.acks.is_empty(),
            "the abandoned request is neither re-sent nor awaited"
        );
    }

    #[tokio::test]
    async fn acks_of_one_invocation_go_to_their_requests_in_order() {
        let r = Arc::new(DurableRegistry::default());
        let (sink, mut out) = mpsc::unbounded_channel();
        r.publish(1, sink, "w");
        let wait = |node: i64| v1::DurableTaskRequest {
            message: Some(Req::WaitFor(v1::DurableTaskWaitForRequest {
                invocation_count: 1,
                durable_task_external_id: "t".into(),
                wait_for_conditions: None,
                label: Some(format!("n{node}")),
            })),
        };
        let (_, a, _) = r.send(wait(1)).expect("send");
        let (_, b, _) = r.send(wait(2)).expect("send");
        let ack = |node| v1::DurableTaskResponse {
            message: Some(Resp::WaitForAck(v1::DurableTaskEventWaitForAckResponse {
                r#ref: Some(eref("t", 1, node)),
            })),
        };
        r.on_response(ack(1));
        r.on_response(ack(2));
        let Ok(Ack::Wait(ra)) = a.await.expect("ack a") else {
            panic!("wait ack")
        };
        let Ok(Ack::Wait(rb)) = b.await.expect("ack b") else {
            panic!("wait ack")
        };
        assert_eq!(
            (ra.node_id, rb.node_id),
            (1, 2),
            "two requests of one invocation never share a waiter"
        );
        // register_worker went first on the stream, then the two requests.
        assert!(matches!(
            out.recv().await.and_then(|r| r.message),
            Some(Req::RegisterWorker(_))
        ));
    }

    fn wait_req(task: &str, inv: i32) -> v1::DurableTaskRequest {
        v1::DurableTaskRequest {
            message: Some(Req::WaitFor(v1::DurableTaskWaitForRequest {
                invocation_count: inv,
                durable_task_external_id: task.into(),
                wait_for_conditions: None,
                label: None,
            })),
        }
    }

    fn counts(r: &DurableRegistry) -> (usize, usize, usize) {
        let g = r.inner.lock();
        (g.unacked.len(), g.acks.len(), g.waits.len())
    }

    #[tokio::test]
    async fn a_nondeterminism_error_reaches_the_pending_ack_typed_with_its_entry() {
        let r = DurableRegistry::default();
        let (_, ack, arm) = r.send(wait_req("t", 2)).expect("send");
        assert!(arm, "no stream yet: the caller arms one");
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::Error(v1::DurableTaskErrorResponse {
                r#ref: Some(eref("t", 2, 3)),
                error_type: v1::DurableTaskErrorType::Nondeterminism as i32,
                error_message: "operation 3 differs".into(),
            })),
        });
        let err = ack.await.expect("answered").expect_err("refused");
        assert_eq!(err.outcome(), Outcome::Rejected);
        assert_eq!(
            err.durable(),
            Some(&DurableError::Nondeterminism {
                task: "t".into(),
                invocation: 2,
                branch: 1,
                node: 3,
                message: "operation 3 differs".into(),
            })
        );
        assert!(err.to_string().contains("nondeterministic replay"), "{err}");
        assert_eq!(counts(&r), (0, 0, 0));
        let task_error = crate::worker::TaskError::from(err);
        assert!(
            !task_error.retryable,
            "a nondeterministic replay is not retried"
        );
    }

    #[tokio::test]
    async fn a_server_eviction_fails_that_invocations_acks_and_waits_and_calls_the_hook() {
        let r = DurableRegistry::default();
        let evicted = Arc::new(Mutex::new(Vec::new()));
        let seen = evicted.clone();
        r.set_evict_hook(Arc::new(move |t: &str, i: i32| {
            seen.lock().push((t.to_string(), i))
        }));
        let (_, stale_ack, _) = r.send(wait_req("t", 1)).expect("send");
        let stale_wait = r.wait(("t".into(), 1, 1, 1));
        let (_, live_ack, _) = r.send(wait_req("t", 2)).expect("send");
        let mut live_wait = r.wait(("t".into(), 2, 1, 1));
        let (_, other_ack, _) = r.send(wait_req("u", 1)).expect("send");
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::ServerEvict(v1::DurableTaskServerEvictNotice {
                durable_task_external_id: "t".into(),
                invocation_count: 1,
                reason: "stale".into(),
            })),
        });
        let expected = DurableError::Evicted {
            task: "t".into(),
            invocation: 1,
            reason: "stale".into(),
        };
        let e = stale_ack.await.expect("answered").expect_err("evicted");
        assert_eq!(e.durable(), Some(&expected));
        let e = stale_wait.await.expect("answered").expect_err("evicted");
        assert_eq!(e.durable(), Some(&expected));
        assert_eq!(*evicted.lock(), vec![("t".to_string(), 1)]);
        assert!(
            futures::poll!(&mut live_wait).is_pending(),
            "invocation 2 lives"
        );
        assert_eq!(
            counts(&r),
            (2, 2, 1),
            "only invocation 1's entries are gone"
        );
        drop((live_ack, other_ack));
    }

    #[tokio::test]
    async fn a_request_fails_after_five_streams_without_progress_and_progress_resets_the_count() {
        let r = DurableRegistry::default();
        let (_, mut ack, _) = r.send(wait_req("t", 1)).expect("send");
        for _ in 0..MAX_SEND_ATTEMPTS - 1 {
            r.stream_ended(false, "status Unavailable");
        }
        r.stream_ended(true, "eof");
        for _ in 0..MAX_SEND_ATTEMPTS - 1 {
            r.stream_ended(false, "status Unavailable");
        }
        assert!(
            futures::poll!(&mut ack).is_pending(),
            "a stream with progress starts the count again"
        );
        r.stream_ended(false, "status Unavailable");
        let err = ack.await.expect("answered").expect_err("spent");
        assert_eq!(err.outcome(), Outcome::Exhausted);
        assert_eq!(err.attempts(), MAX_SEND_ATTEMPTS);
        assert!(err.to_string().contains("status Unavailable"), "{err}");
        assert_eq!(counts(&r), (0, 0, 0), "nothing is re-sent after the error");
    }

    #[tokio::test]
    async fn a_stopped_listener_fails_every_request_and_wait_at_once() {
        let r = DurableRegistry::default();
        let (_, ack, _) = r.send(wait_req("t", 1)).expect("send");
        let wait = r.wait(("t".into(), 1, 1, 1));
        r.stopped("permanent: status Unauthenticated");
        for e in [
            ack.await.expect("answered").expect_err("failed"),
            wait.await.expect("answered").expect_err("failed"),
        ] {
            assert!(e.to_string().contains("Unauthenticated"), "{e}");
        }
        assert_eq!(counts(&r), (0, 0, 0));
        r.close();
        let e = r
            .wait(("t".into(), 1, 1, 2))
            .await
            .expect("answered")
            .expect_err("closed");
        assert_eq!(e.outcome(), Outcome::Closed);
    }

    #[tokio::test]
    async fn a_request_queued_before_a_stream_follows_register_worker_and_gets_its_ack() {
        let r = DurableRegistry::default();
        let (_, ack, arm) = r.send(wait_req("t", 1)).expect("send");
        assert!(arm);
        r.stream_ended(false, "status Unavailable"); // a failed first connect keeps it
        let (sink, mut out) = mpsc::unbounded_channel();
        r.publish(7, sink, "w");
        assert!(matches!(
            out.recv().await.and_then(|m| m.message),
            Some(Req::RegisterWorker(w)) if w.worker_id == "w"
        ));
        assert!(matches!(
            out.recv().await.and_then(|m| m.message),
            Some(Req::WaitFor(w)) if w.durable_task_external_id == "t"
        ));
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::WaitForAck(v1::DurableTaskEventWaitForAckResponse {
                r#ref: Some(eref("t", 1, 1)),
            })),
        });
        assert!(matches!(ack.await, Ok(Ok(Ack::Wait(_)))));
        assert_eq!(counts(&r), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_never_acknowledged_fails_after_sixty_seconds_and_is_dropped() {
        let registry = Arc::new(DurableRegistry::default());
        let (sink, _out) = mpsc::unbounded_channel();
        registry.publish(1, sink, "w");
        let client = DurableClient {
            registry: registry.clone(),
            ensure: Arc::new(|| {}),
        };
        let started = tokio::time::Instant::now();
        let err = client
            .wait_for("t", 1, v1::DurableEventListenerConditions::default())
            .await
            .expect_err("no ack");
        assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
        assert_eq!(started.elapsed(), ACK_TIMEOUT);
        assert_eq!(counts(&registry), (0, 0, 0), "neither re-sent nor awaited");
    }

    #[tokio::test]
    async fn pending_waits_are_listed_on_the_published_stream_only_while_some_wait() {
        let r = DurableRegistry::default();
        let _early = r.wait(("t".into(), 1, 1, 1));
        assert!(
            !r.send_status("w"),
            "no stream published: nothing to send on"
        );
        let (sink, mut out) = mpsc::unbounded_channel();
        r.publish(1, sink, "w");
        let mut sent = Vec::new();
        while let Ok(m) = out.try_recv() {
            sent.push(m);
        }
        assert_eq!(sent.len(), 2, "register_worker, then the status on publish");
        assert!(r.send_status("w"));
        let Some(Req::WorkerStatus(status)) = out.try_recv().ok().and_then(|m| m.message) else {
            panic!("a worker_status")
        };
        assert_eq!(
            (status.worker_id.as_str(), status.waiting_entries.len()),
            ("w", 1)
        );
        assert_eq!(status.waiting_entries[0].node_id, 1);
        r.forget_wait(&("t".into(), 1, 1, 1));
        assert!(!r.send_status("w"), "nothing waits: nothing is sent");
    }
}
