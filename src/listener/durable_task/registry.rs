//! The durable registry: one lane per task invocation (at most one request on the wire, the rest
//! queued in call order), waits by entry ref, early completions, and the typed refusals of the
//! engine's answers. It outlives listener restarts; the actor (`super`) publishes streams to it.
//!
//! Why one request per invocation on the wire: the engine numbers a request's node itself (the
//! next node of the invocation's log) and handles the requests of a stream concurrently, so two
//! requests of one invocation in flight together could be numbered, and answered, in either
//! order. One at a time, the node order is the call order (a replay finds the same log) and the
//! ack of an invocation answers its one request on the wire.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{
    DoubtHook, EARLY_COMPLETION_TTL, EvictHook, MAX_SEND_ATTEMPTS, OPERATION, READY_AFTER_TICKS,
};
use crate::error::{Cause, DurableError, Error, Outcome};
use crate::listener::reconnect::StreamEnd;
use crate::protocol::v1::{
    self, durable_task_request::Message as Req, durable_task_response::Message as Resp,
};

/// An entry ref: `(task, invocation, branch, node)`.
pub(crate) type EntryKey = (String, i32, i64, i64);

/// A task invocation: `(task, invocation)`, the unit whose requests go out one at a time.
pub(super) type Lane = (String, i32);

pub(super) fn key_of(r: &v1::DurableEventLogEntryRef) -> EntryKey {
    (
        r.durable_task_external_id.clone(),
        r.invocation_count,
        r.branch_id,
        r.node_id,
    )
}

/// An ack.
#[derive(Debug)]
pub(crate) enum Ack {
    /// `wait_for_ack`.
    Wait(v1::DurableEventLogEntryRef),
    /// `memo_ack`.
    Memo(v1::DurableTaskEventMemoAckResponse),
    /// `trigger_runs_ack`: one entry per child, with its run id.
    Runs(v1::DurableTaskEventTriggerRunsAckResponse),
    /// `eviction_ack`.
    Evicted,
}

/// Which ack a request expects: an answer of another kind is not its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckKind {
    Wait,
    Memo,
    Runs,
    Evict,
}

impl AckKind {
    fn of_request(req: &v1::DurableTaskRequest) -> Option<AckKind> {
        match req.message.as_ref()? {
            Req::WaitFor(_) => Some(AckKind::Wait),
            Req::Memo(_) => Some(AckKind::Memo),
            Req::TriggerRuns(_) => Some(AckKind::Runs),
            Req::EvictInvocation(_) => Some(AckKind::Evict),
            _ => None,
        }
    }

    fn of_ack(ack: &Ack) -> AckKind {
        match ack {
            Ack::Wait(_) => AckKind::Wait,
            Ack::Memo(_) => AckKind::Memo,
            Ack::Runs(_) => AckKind::Runs,
            Ack::Evicted => AckKind::Evict,
        }
    }
}

/// A completed entry.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    /// The payload (JSON bytes).
    pub payload: Vec<u8>,
    /// Whether it is a failure.
    pub is_failure: bool,
    /// The failure message.
    pub error: Option<String>,
}

type AckTx = oneshot::Sender<Result<Ack, Error>>;
type WaitTx = oneshot::Sender<Result<Completion, Error>>;

/// A request that expects an ack.
struct Request {
    id: u64,
    req: v1::DurableTaskRequest,
    kind: AckKind,
    /// `None`: abandoned by its caller. On the wire it stays, so its late ack is taken here and
    /// the invocation's next request is not written before the engine has numbered this one.
    tx: Option<AckTx>,
    /// Streams without progress this request waited through, never written.
    failed_streams: u32,
}

/// One invocation's requests: the one on the wire (written on the current stream) and the
/// ones queued behind it, never written.
#[derive(Default)]
struct LaneQueue {
    on_wire: Option<Request>,
    queued: VecDeque<Request>,
}

impl LaneQueue {
    fn is_empty(&self) -> bool {
        self.on_wire.is_none() && self.queued.is_empty()
    }
}

/// A request was sent; its id, its ack, and whether a stream must be armed to carry it.
pub(super) type Sent = (u64, oneshot::Receiver<Result<Ack, Error>>, bool);
pub(super) type Sink = mpsc::Sender<v1::DurableTaskRequest>;

/// Messages a published stream holds before it is read: a stream that stalls (a frozen link)
/// stops taking more at this many, instead of piling up a status every second. A request that
/// finds it full stays queued and goes out once there is room (the next tick looks).
pub(super) const SINK_CAPACITY: usize = 1024;

/// The published stream.
struct Published {
    generation: u64,
    sink: Sink,
    /// Requests are written only once the engine has answered `register_worker` on this stream
    /// (or it stayed open [`READY_AFTER_TICKS`] status ticks): a stream that ends before that
    /// carried none of them, so they go out again on the next one without any doubt.
    ready: bool,
    /// The engine answered the call (its response headers arrived). Ticks count only from then:
    /// a call still connecting to an unreachable engine is not a stream that stayed open.
    opened: bool,
    ticks: u32,
}

#[derive(Default)]
pub(super) struct Inner {
    published: Option<Published>,
    lanes: HashMap<Lane, LaneQueue>,
    /// Invocations whose request was on the wire when its stream ended: the engine may have
    /// numbered it, so nothing more of that invocation is written (its node order is unknown);
    /// the attempt fails and its retry replays onto the log the engine kept. A lane leaves when
    /// its attempt ends ([`DurableRegistry::attempt_ended`]), so the set is bounded by the
    /// attempts running, and never forgets one of them.
    in_doubt: HashSet<Lane>,
    /// The requests of invocations in doubt, held unanswered while the worker restarts the
    /// invocation from the engine's log (the doubt hook): an invocation restarted this way is
    /// cancelled, and its task never sees the doubt. Answered with the doubt's error when the
    /// restart cannot be made ([`DurableRegistry::restart_failed`]); gone with the attempt.
    held: HashMap<Lane, Vec<Request>>,
    waits: HashMap<EntryKey, WaitTx>,
    early: HashMap<EntryKey, (Completion, Instant)>,
    closed: bool,
    /// The listener was stopped for good: new work is refused with this reason.
    refused: Option<String>,
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

/// The error of work failed because the durable-task listener stopped for `why`.
fn stop_error(why: &str, end: Option<StreamEnd>) -> Error {
    crate::listener::with_end_status(
        Error::new(Outcome::Stopped, OPERATION)
            .with_detail(format!("the durable-task stream stopped: {why}")),
        end,
        why,
    )
}

fn rejected(refusal: DurableError) -> Error {
    Error::new(Outcome::Rejected, OPERATION).with_cause(Cause::Durable(refusal))
}

/// The error of the request that was on the wire when its stream ended.
fn in_doubt_error(why: &str) -> Error {
    Error::new(Outcome::MaybeExecuted, OPERATION).with_detail(format!(
        "the durable-task stream ended ({why}) after this operation was written and before the engine acknowledged it; the engine may have recorded it, and sending it again would record it twice, so this attempt fails: its retry replays onto the log the engine kept"
    ))
}

/// The error of a request of an invocation in doubt (never written).
fn behind_doubt_error() -> Error {
    Error::new(Outcome::MaybeExecuted, OPERATION).with_detail(
        "an earlier durable operation of this invocation was in doubt when its stream ended, so the engine's numbering of the next one is unknown; nothing was sent, and this attempt fails: its retry replays onto the log the engine kept",
    )
}

/// The durable registry. Outlives listener restarts.
#[derive(Default)]
pub(crate) struct DurableRegistry {
    inner: Mutex<Inner>,
    next: AtomicU64,
    on_evict: Mutex<Option<EvictHook>>,
    /// Restarts an invocation in doubt from the engine's log (invariant 2); without it, a
    /// doubted invocation's requests fail at once.
    on_doubt: Mutex<Option<DoubtHook>>,
    /// Test fault: the next this many wait acks are dropped and their stream let go, as if it
    /// were cut between the engine's recording and its answer (on any engine).
    #[cfg(any(test, feature = "test-hooks"))]
    lose_acks: std::sync::atomic::AtomicU32,
    /// The largest message the stream may carry (the connection's send limit); `0`: the
    /// default limit.
    max_message: AtomicUsize,
}

/// Room left in a `worker_status` message for its worker id and framing.
const STATUS_HEADROOM: usize = 1024;

impl std::fmt::Debug for DurableRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableRegistry(..)")
    }
}

pub(super) fn target(req: &v1::DurableTaskRequest) -> Option<Lane> {
    match req.message.as_ref()? {
        Req::WaitFor(w) => Some((w.durable_task_external_id.clone(), w.invocation_count)),
        Req::Memo(m) => Some((m.durable_task_external_id.clone(), m.invocation_count)),
        Req::TriggerRuns(t) => Some((t.durable_task_external_id.clone(), t.invocation_count)),
        Req::EvictInvocation(e) => Some((e.durable_task_external_id.clone(), e.invocation_count)),
        _ => None,
    }
}

fn answer(r: Request, result: Result<Ack, Error>) {
    if let Some(tx) = r.tx {
        let _ = tx.send(result);
    }
}

impl Inner {
    /// Writes the head of `lane`'s queue when nothing of the lane is on the wire and a ready
    /// stream is published.
    fn pump(&mut self, lane: &Lane) {
        let Some(p) = self.published.as_ref().filter(|p| p.ready) else {
            return;
        };
        let Some(q) = self.lanes.get_mut(lane) else {
            return;
        };
        if q.on_wire.is_some() {
            return;
        }
        while let Some(r) = q.queued.pop_front() {
            if r.tx.as_ref().is_none_or(|tx| tx.is_closed()) {
                continue; // abandoned before it was written: nothing to send
            }
            if p.sink.try_send(r.req.clone()).is_ok() {
                q.on_wire = Some(r);
            } else {
                q.queued.push_front(r); // full (or closing): it waits for room, never written
            }
            break;
        }
        if q.is_empty() {
            self.lanes.remove(lane);
        }
    }

    fn pump_all(&mut self) {
        let lanes: Vec<Lane> = self.lanes.keys().cloned().collect();
        for lane in &lanes {
            self.pump(lane);
        }
    }

    /// The stream carrying the requests on the wire is gone: each of them is in doubt, and so
    /// is its invocation. With `hold`, the requests of a doubted invocation are held for its
    /// restart (invariant 2) and its lane is returned; without, they fail at once. An eviction
    /// on the wire is never held: it is the restart's own request, and its caller decides.
    fn cut(&mut self, why: &str, hold: bool) -> Vec<Lane> {
        let mut doubted = Vec::new();
        let mut restart = Vec::new();
        for (lane, q) in self.lanes.iter_mut() {
            let Some(r) = q.on_wire.take() else { continue };
            doubted.push(lane.clone());
            if hold && r.kind != AckKind::Evict {
                let held = self.held.entry(lane.clone()).or_default();
                held.push(r);
                held.extend(q.queued.drain(..));
                restart.push(lane.clone());
                continue;
            }
            // Abandoned (`tx` is `None`), nobody waits for it; its invocation is in doubt all
            // the same.
            answer(r, Err(in_doubt_error(why)));
            for r in q.queued.drain(..) {
                answer(r, Err(behind_doubt_error()));
            }
        }
        for lane in doubted {
            if self.lanes.get(&lane).is_some_and(LaneQueue::is_empty) {
                self.lanes.remove(&lane);
            }
            self.in_doubt.insert(lane);
        }
        restart
    }

    /// Fails and removes every request whose lane matches, with the error `make` builds.
    fn fail_lanes(&mut self, matches: impl Fn(&Lane) -> bool, make: impl Fn() -> Error) {
        let keys: Vec<Lane> = self.lanes.keys().filter(|k| matches(k)).cloned().collect();
        for k in keys {
            if let Some(q) = self.lanes.remove(&k) {
                for r in q.on_wire.into_iter().chain(q.queued) {
                    answer(r, Err(make()));
                }
            }
        }
    }

    /// Fails every held request (the listener stopped: no restart can be made).
    fn fail_held(&mut self, make: impl Fn() -> Error) {
        for (_, held) in self.held.drain() {
            for r in held {
                answer(r, Err(make()));
            }
        }
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

    /// Takes the request on the wire of `lane` when `kind` (`None`: any) is what it expects.
    fn answered(&mut self, lane: &Lane, kind: Option<AckKind>) -> Option<Request> {
        let q = self.lanes.get_mut(lane)?;
        let expected = q.on_wire.as_ref()?.kind;
        if kind.is_some_and(|k| k != expected) {
            tracing::warn!(
                task = %lane.0,
                invocation = lane.1,
                ?expected,
                got = ?kind,
                "the engine answered a durable request with an ack of another kind; ignored"
            );
            return None;
        }
        let r = q.on_wire.take();
        self.pump(lane);
        r
    }
}

impl DurableRegistry {
    /// A registry whose stream carries messages of at most `max_message` bytes (the
    /// connection's send limit, `HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH`).
    pub(crate) fn with_max_message(max_message: usize) -> Self {
        let r = Self::default();
        r.max_message.store(max_message, Ordering::Relaxed);
        r
    }

    fn max_message(&self) -> usize {
        match self.max_message.load(Ordering::Relaxed) {
            0 => crate::config::DEFAULT_MAX_MESSAGE_BYTES,
            n => n,
        }
    }

    /// Requests held (on the wire or queued), lanes and waits (tests check nothing is left).
    #[cfg(test)]
    pub(super) fn pending_counts(&self) -> (usize, usize, usize) {
        let g = self.inner.lock();
        let requests = g
            .lanes
            .values()
            .map(|q| q.queued.len() + usize::from(q.on_wire.is_some()))
            .sum();
        (requests, g.lanes.len(), g.waits.len())
    }

    /// The attempt running `lane` ended: its doubt goes with it (a retry is another invocation),
    /// and so do its held requests (the attempt was cancelled for its restart, or failed).
    pub(crate) fn attempt_ended(&self, task: &str, invocation: i32) {
        let lane = (task.to_string(), invocation);
        let mut g = self.inner.lock();
        g.in_doubt.remove(&lane);
        g.held.remove(&lane);
    }

    /// The restart of invocation `(task, invocation)` from the engine's log could not be made
    /// (its eviction failed): its held requests fail with the doubt's error, so the attempt
    /// fails and its retry replays onto the log the engine kept.
    pub(crate) fn restart_failed(&self, task: &str, invocation: i32, why: &str) {
        let held = self
            .inner
            .lock()
            .held
            .remove(&(task.to_string(), invocation))
            .unwrap_or_default();
        let mut held = held.into_iter();
        if let Some(first) = held.next() {
            answer(first, Err(in_doubt_error(why)));
        }
        for r in held {
            answer(r, Err(behind_doubt_error()));
        }
    }

    /// Sets what restarts an invocation in doubt (the worker evicts and restores it).
    pub(crate) fn set_doubt_hook(&self, hook: DoubtHook) {
        *self.on_doubt.lock() = Some(hook);
    }

    /// Calls the doubt hook for each lane whose requests were held.
    fn restart(&self, lanes: Vec<Lane>) {
        if lanes.is_empty() {
            return;
        }
        let hook = self.on_doubt.lock().clone();
        if let Some(hook) = hook {
            for (task, invocation) in lanes {
                hook(&task, invocation);
            }
        }
    }

    /// Invocations in doubt (tests check the set empties as attempts end).
    #[cfg(test)]
    pub(super) fn in_doubt_count(&self) -> usize {
        self.inner.lock().in_doubt.len()
    }

    /// Sets what runs when the engine evicts an invocation (the worker cancels it).
    pub(crate) fn set_evict_hook(&self, hook: EvictHook) {
        *self.on_evict.lock() = Some(hook);
    }

    /// Drops a request whose ack will no longer be awaited. Queued, it goes; on the wire, it
    /// stays until its ack (or its stream's end), so the invocation's next request is numbered
    /// after it.
    pub(super) fn abandon(&self, lane: &Lane, id: u64) {
        let mut g = self.inner.lock();
        let Some(q) = g.lanes.get_mut(lane) else {
            return;
        };
        if let Some(r) = q.on_wire.as_mut().filter(|r| r.id == id) {
            r.tx = None;
            return;
        }
        q.queued.retain(|r| r.id != id);
        if q.is_empty() {
            g.lanes.remove(lane);
        }
    }

    /// Sends a request that expects an ack; returns the ack receiver and whether a stream must
    /// be armed.
    pub(super) fn send(&self, req: v1::DurableTaskRequest) -> Result<Sent, Error> {
        let lane =
            target(&req).ok_or_else(|| Error::invalid(OPERATION, "request has no target"))?;
        let kind = AckKind::of_request(&req)
            .ok_or_else(|| Error::invalid(OPERATION, "request expects no ack"))?;
        let (size, max) = (prost::Message::encoded_len(&req), self.max_message());
        if size > max {
            // On the stream every durable task shares, an oversized message would end it (the
            // encoder refuses it) and fail every other task's operation in flight.
            return Err(Error::over_message_limit(
                OPERATION,
                "this durable operation",
                size,
                max,
            ));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            return Err(Error::closed(OPERATION));
        }
        if let Some(why) = &g.refused {
            return Err(stop_error(why, None));
        }
        // An eviction is not a node of the log: it may go out for an invocation in doubt (its
        // restart is made of one).
        let evict = kind == AckKind::Evict;
        if let Some(held) = g.held.get_mut(&lane).filter(|_| !evict) {
            // Its invocation is being restarted (invariant 2): held with the rest, so the task
            // never sees the doubt its restart takes away.
            held.push(Request {
                id,
                req,
                kind,
                tx: Some(tx),
                failed_streams: 0,
            });
            return Ok((id, rx, false));
        }
        if !evict && g.in_doubt.contains(&lane) {
            return Err(behind_doubt_error());
        }
        g.lanes
            .entry(lane.clone())
            .or_default()
            .queued
            .push_back(Request {
                id,
                req,
                kind,
                tx: Some(tx),
                failed_streams: 0,
            });
        g.pump(&lane);
        let arm = g.published.is_none();
        Ok((id, rx, arm))
    }

    /// Sends a request that expects no ack (`complete_memo`); dropped if no stream (the memo is
    /// then recomputed on replay).
    pub(super) fn send_no_ack(&self, req: v1::DurableTaskRequest) {
        if let Some(p) = &self.inner.lock().published {
            let _ = p.sink.try_send(req);
        }
    }

    pub(super) fn wait(&self, key: EntryKey) -> oneshot::Receiver<Result<Completion, Error>> {
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            let _ = tx.send(Err(Error::closed(OPERATION)));
            return rx;
        }
        if let Some(why) = &g.refused {
            let _ = tx.send(Err(stop_error(why, None)));
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

    pub(super) fn forget_wait(&self, key: &EntryKey) {
        self.inner.lock().waits.remove(key);
    }

    /// Test fault: drops the next `n` wait acks, letting their stream go as a cut would.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn lose_next_wait_acks(&self, n: u32) {
        self.lose_acks.store(n, Ordering::SeqCst);
    }

    /// Whether this ack is lost to the fault; the stream is let go (its sink dropped, so the
    /// engine sees the stream end and the listener opens another) and what it carried is in
    /// doubt.
    #[cfg(any(test, feature = "test-hooks"))]
    fn ack_lost(&self, ack: &Ack) -> bool {
        if !matches!(ack, Ack::Wait(_))
            || self
                .lose_acks
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err()
        {
            return false;
        }
        let hold = self.on_doubt.lock().is_some();
        let restart = {
            let mut g = self.inner.lock();
            g.published = None;
            g.cut(
                "test fault: the stream was let go before this ack was read",
                hold,
            )
        };
        self.restart(restart);
        true
    }

    /// Hands an ack to the request on the wire of its invocation, when it expects that kind.
    fn ack(&self, lane: Lane, ack: Ack) {
        #[cfg(any(test, feature = "test-hooks"))]
        if self.ack_lost(&ack) {
            return;
        }
        let taken = self
            .inner
            .lock()
            .answered(&lane, Some(AckKind::of_ack(&ack)));
        if let Some(r) = taken {
            answer(r, Ok(ack));
        }
    }

    /// Handles one response from the engine.
    pub(super) fn on_response(&self, resp: v1::DurableTaskResponse) {
        let Some(msg) = resp.message else { return };
        match msg {
            Resp::RegisterWorker(_) => {
                let mut g = self.inner.lock();
                if let Some(p) = g.published.as_mut() {
                    p.ready = true;
                }
                g.pump_all();
            }
            Resp::WaitForAck(a) => {
                if let Some(r) = a.r#ref {
                    let lane = (r.durable_task_external_id.clone(), r.invocation_count);
                    self.ack(lane, Ack::Wait(r));
                }
            }
            Resp::MemoAck(m) => {
                if let Some(r) = &m.r#ref {
                    let lane = (r.durable_task_external_id.clone(), r.invocation_count);
                    self.ack(lane, Ack::Memo(m));
                }
            }
            Resp::TriggerRunsAck(t) => {
                let lane = (t.durable_task_external_id.clone(), t.invocation_count);
                self.ack(lane, Ack::Runs(t));
            }
            Resp::EvictionAck(e) => {
                let lane = (e.durable_task_external_id.clone(), e.invocation_count);
                self.ack(lane, Ack::Evicted);
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
                let lane = (r.durable_task_external_id.clone(), r.invocation_count);
                let refusal = refusal_of(&r, e.error_type, e.error_message);
                let taken = self.inner.lock().answered(&lane, None);
                if let Some(req) = taken {
                    answer(req, Err(rejected(refusal)));
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
                    g.fail_lanes(|(t, i)| *t == task && *i <= invocation, evicted);
                    g.fail_waits(|(t, i, _, _)| *t == task && *i <= invocation, evicted);
                }
                let hook = self.on_evict.lock().clone();
                if let Some(hook) = hook {
                    hook(&task, invocation);
                }
            }
        }
    }

    /// The `worker_status` messages listing every pending wait (none when nothing waits), each
    /// under the message limit: one oversized message would end the stream every task shares.
    fn status_requests(&self, g: &Inner, worker_id: &str) -> Vec<v1::DurableTaskRequest> {
        use prost::Message as _;
        let limit = self.max_message().saturating_sub(STATUS_HEADROOM);
        let message = |waiting_entries| v1::DurableTaskRequest {
            message: Some(Req::WorkerStatus(v1::DurableTaskWorkerStatusRequest {
                worker_id: worker_id.to_string(),
                waiting_entries,
            })),
        };
        let mut out = Vec::new();
        let mut batch = Vec::new();
        let mut size = 0;
        for (t, i, b, n) in g.waits.keys() {
            let entry = v1::DurableTaskAwaitedCompletedEntry {
                durable_task_external_id: t.clone(),
                branch_id: *b,
                node_id: *n,
                invocation_count: *i,
            };
            let len = crate::protocol::framed_len(entry.encoded_len());
            if !batch.is_empty() && size + len > limit {
                out.push(message(std::mem::take(&mut batch)));
                size = 0;
            }
            size += len;
            batch.push(entry);
        }
        if !batch.is_empty() {
            out.push(message(batch));
        }
        out
    }

    /// A status tick: lists the pending waits on the published stream (invariant 6), and makes
    /// a stream that stayed open [`READY_AFTER_TICKS`] ticks ready even without the engine's
    /// `register_worker` answer. Returns whether a status was sent.
    pub(super) fn tick(&self, worker_id: &str) -> bool {
        let mut g = self.inner.lock();
        if let Some(p) = g.published.as_mut().filter(|p| !p.ready && p.opened) {
            p.ticks += 1;
            if p.ticks >= READY_AFTER_TICKS {
                p.ready = true;
                g.pump_all();
            }
        }
        let Some(p) = &g.published else {
            return false;
        };
        let statuses = self.status_requests(&g, worker_id);
        // A full stream skips this tick's status: the next tick sends a fresh one.
        let sent =
            !statuses.is_empty() && statuses.into_iter().all(|req| p.sink.try_send(req).is_ok());
        if g.published.as_ref().is_some_and(|p| p.ready) {
            g.pump_all(); // requests held back by a full stream
        }
        sent
    }

    /// Publishes a new stream: `register_worker` and `worker_status` (replay first) go out at
    /// once; requests once the engine has answered the registration.
    pub(super) fn publish(&self, generation: u64, sink: Sink, worker_id: &str) {
        let restart = self.publish_locked(generation, sink, worker_id);
        self.restart(restart);
    }

    fn publish_locked(&self, generation: u64, sink: Sink, worker_id: &str) -> Vec<Lane> {
        let hold = self.on_doubt.lock().is_some();
        let mut g = self.inner.lock();
        let mut restart = Vec::new();
        if g.published.is_some() {
            restart = g.cut("a newer stream replaced it", hold);
        }
        let _ = sink.try_send(v1::DurableTaskRequest {
            message: Some(Req::RegisterWorker(v1::DurableTaskRequestRegisterWorker {
                worker_id: worker_id.to_string(),
            })),
        });
        for status in self.status_requests(&g, worker_id) {
            let _ = sink.try_send(status);
        }
        g.published = Some(Published {
            generation,
            sink,
            ready: false,
            opened: false,
            ticks: 0,
        });
        restart
    }

    /// The engine answered the call of stream `generation`: from now its status ticks count
    /// towards readiness without a `register_worker` answer.
    pub(super) fn opened(&self, generation: u64) {
        if let Some(p) = self
            .inner
            .lock()
            .published
            .as_mut()
            .filter(|p| p.generation == generation)
        {
            p.opened = true;
        }
    }

    /// The stream of `generation` ended: what it carried without an answer is in doubt.
    pub(super) fn unpublish(&self, generation: u64, why: &str) {
        let hold = self.on_doubt.lock().is_some();
        let restart = {
            let mut g = self.inner.lock();
            if g.published
                .as_ref()
                .is_some_and(|p| p.generation == generation)
            {
                g.published = None;
                g.cut(why, hold)
            } else {
                Vec::new()
            }
        };
        self.restart(restart);
    }

    /// Counts a stream of this registry's that ended: without progress, every queued request
    /// has waited through one more failed stream, and those at [`MAX_SEND_ATTEMPTS`] fail;
    /// with progress, the count starts again.
    pub(super) fn stream_ended(&self, progressed: bool, why: &str) {
        let mut g = self.inner.lock();
        let make = || {
            Error::new(Outcome::Exhausted, OPERATION)
                .with_attempts(MAX_SEND_ATTEMPTS)
                .with_detail(format!(
                    "the durable-task stream ended {MAX_SEND_ATTEMPTS} times in a row before this operation could be sent (last: {why}); nothing was sent, and the engine replays durable operations by node, so retrying the task is safe"
                ))
        };
        for q in g.lanes.values_mut() {
            let mut keep = VecDeque::with_capacity(q.queued.len());
            for mut r in q.queued.drain(..) {
                if progressed {
                    r.failed_streams = 0;
                } else {
                    r.failed_streams += 1;
                }
                if r.failed_streams >= MAX_SEND_ATTEMPTS {
                    answer(r, Err(make()));
                } else {
                    keep.push_back(r);
                }
            }
            q.queued = keep;
        }
        g.lanes.retain(|_, q| !q.is_empty());
    }

    /// Fails everything pending and refuses new work (runtime shutdown).
    pub(crate) fn close(&self) {
        let mut g = self.inner.lock();
        g.closed = true;
        g.published = None;
        g.fail_lanes(|_| true, || Error::closed(OPERATION));
        g.fail_waits(|_| true, || Error::closed(OPERATION));
        g.fail_held(|| Error::closed(OPERATION));
    }

    /// Fails every pending request and wait with the listener's stop error. New requests re-arm
    /// the listener, unless it was stopped for good (`permanent`): then they are refused too.
    pub(super) fn stopped(&self, why: &str, end: Option<StreamEnd>, permanent: bool) {
        let mut g = self.inner.lock();
        if permanent {
            g.refused = Some(why.to_string());
        }
        let make = || stop_error(why, end);
        g.fail_lanes(|_| true, make);
        g.fail_waits(|_| true, make);
        g.fail_held(make);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

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

    fn memo_req(task: &str, inv: i32) -> v1::DurableTaskRequest {
        v1::DurableTaskRequest {
            message: Some(Req::Memo(v1::DurableTaskMemoRequest {
                invocation_count: inv,
                durable_task_external_id: task.into(),
                key: b"k".to_vec(),
                payload: None,
            })),
        }
    }

    fn wait_ack(task: &str, inv: i32, node: i64) -> v1::DurableTaskResponse {
        v1::DurableTaskResponse {
            message: Some(Resp::WaitForAck(v1::DurableTaskEventWaitForAckResponse {
                r#ref: Some(eref(task, inv, node)),
            })),
        }
    }

    fn registered() -> v1::DurableTaskResponse {
        v1::DurableTaskResponse {
            message: Some(Resp::RegisterWorker(
                v1::DurableTaskResponseRegisterWorker {
                    worker_id: "w".into(),
                },
            )),
        }
    }

    type Out = mpsc::Receiver<v1::DurableTaskRequest>;

    /// Publishes stream `generation` and has the engine answer its registration.
    fn ready_stream(r: &DurableRegistry, generation: u64) -> Out {
        let (sink, out) = mpsc::channel(SINK_CAPACITY);
        r.publish(generation, sink, "w");
        r.on_response(registered());
        out
    }

    /// The requests written so far, by kind and target (`register_worker`: "register").
    fn written(out: &mut Out) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(m) = out.try_recv() {
            seen.push(match m.message {
                Some(Req::RegisterWorker(_)) => "register".to_string(),
                Some(Req::WorkerStatus(_)) => "status".to_string(),
                Some(Req::WaitFor(w)) => {
                    format!("wait {} {}", w.durable_task_external_id, w.invocation_count)
                }
                Some(Req::Memo(m)) => {
                    format!("memo {} {}", m.durable_task_external_id, m.invocation_count)
                }
                other => format!("{other:?}"),
            });
        }
        seen
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

    #[tokio::test]
    async fn one_request_per_invocation_is_on_the_wire_and_its_ack_is_its_own() {
        let r = Arc::new(DurableRegistry::default());
        let mut out = ready_stream(&r, 1);
        let (_, mut a, _) = r.send(wait_req("t", 1)).expect("send");
        let (_, mut b, _) = r.send(memo_req("t", 1)).expect("send");
        let (_, other, _) = r.send(wait_req("u", 1)).expect("send");
        assert_eq!(
            written(&mut out),
            ["register", "wait t 1", "wait u 1"],
            "the memo waits behind the wait of its invocation; another invocation does not"
        );
        // An ack of another kind is not the wait's answer.
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::MemoAck(v1::DurableTaskEventMemoAckResponse {
                r#ref: Some(eref("t", 1, 9)),
                memo_already_existed: false,
                memo_result_payload: None,
            })),
        });
        assert!(futures::poll!(&mut a).is_pending());
        assert!(futures::poll!(&mut b).is_pending());
        r.on_response(wait_ack("t", 1, 1));
        let Ok(Ack::Wait(ra)) = a.await.expect("ack a") else {
            panic!("wait ack")
        };
        assert_eq!(ra.node_id, 1);
        assert_eq!(
            written(&mut out),
            ["memo t 1"],
            "the memo is written once the wait is numbered"
        );
        assert!(futures::poll!(&mut b).is_pending());
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::MemoAck(v1::DurableTaskEventMemoAckResponse {
                r#ref: Some(eref("t", 1, 2)),
                memo_already_existed: false,
                memo_result_payload: None,
            })),
        });
        assert!(
            matches!(b.await, Ok(Ok(Ack::Memo(m))) if m.r#ref.as_ref().map(|r| r.node_id) == Some(2))
        );
        drop(other);
    }

    #[tokio::test]
    async fn a_request_on_the_wire_when_its_stream_ends_is_in_doubt_and_never_sent_again() {
        let r = DurableRegistry::default();
        let mut first = ready_stream(&r, 1);
        let (_, on_wire, _) = r.send(wait_req("t", 1)).expect("send");
        let (_, behind, _) = r.send(memo_req("t", 1)).expect("send");
        let (_, other, _) = r.send(memo_req("u", 1)).expect("send");
        let (_, other_behind, _) = r.send(wait_req("u", 1)).expect("send");
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::MemoAck(v1::DurableTaskEventMemoAckResponse {
                r#ref: Some(eref("u", 1, 1)),
                memo_already_existed: false,
                memo_result_payload: None,
            })),
        });
        assert!(matches!(other.await, Ok(Ok(Ack::Memo(_)))));
        assert_eq!(
            written(&mut first),
            ["register", "wait t 1", "memo u 1", "wait u 1"]
        );
        r.unpublish(1, "status Unavailable");
        r.stream_ended(true, "status Unavailable");
        for (what, rx) in [
            ("on the wire", on_wire),
            ("behind it", behind),
            ("on the wire of u", other_behind),
        ] {
            let e = rx.await.expect("answered").expect_err(what);
            assert_eq!(e.outcome(), Outcome::MaybeExecuted, "{what}: {e}");
        }
        let e = r
            .send(wait_req("t", 1))
            .expect_err("the invocation is in doubt");
        assert_eq!(e.outcome(), Outcome::MaybeExecuted);
        assert!(e.to_string().contains("retry replays"), "{e}");
        let (_, next_attempt, _) = r
            .send(wait_req("t", 2))
            .expect("the retry's invocation is new");
        let mut second = ready_stream(&r, 2);
        assert_eq!(
            written(&mut second),
            ["register", "wait t 2"],
            "nothing in doubt goes out again"
        );
        drop(next_attempt);
        assert_eq!(r.in_doubt_count(), 2, "t 1 and u 1");
        r.attempt_ended("t", 1);
        r.attempt_ended("u", 1);
        assert_eq!(
            r.in_doubt_count(),
            0,
            "ended attempts take their doubt along"
        );
    }

    fn evict_req(task: &str, inv: i32) -> v1::DurableTaskRequest {
        v1::DurableTaskRequest {
            message: Some(Req::EvictInvocation(
                v1::DurableTaskEvictInvocationRequest {
                    invocation_count: inv,
                    durable_task_external_id: task.into(),
                    reason: None,
                },
            )),
        }
    }

    /// Invariant 2 with a doubt hook (a worker): the doubted invocation's requests are held
    /// unanswered and the hook is called for it; a later request of it is held too, so the task
    /// sees nothing while it is restarted; its eviction still goes out; a failed restart answers
    /// the held requests with the doubt; an ended attempt takes its held requests along.
    #[tokio::test]
    async fn with_a_doubt_hook_an_invocation_in_doubt_is_held_for_its_restart() {
        let r = Arc::new(DurableRegistry::default());
        let doubted: Arc<Mutex<Vec<Lane>>> = Arc::default();
        let seen = doubted.clone();
        r.set_doubt_hook(Arc::new(move |t: &str, i: i32| {
            seen.lock().push((t.to_string(), i))
        }));
        let _first = ready_stream(&r, 1);
        let (_, mut on_wire, _) = r.send(wait_req("t", 1)).expect("send");
        let (_, mut behind, _) = r.send(memo_req("t", 1)).expect("send");
        let (_, mut other, _) = r.send(wait_req("u", 1)).expect("send");
        r.unpublish(1, "status Unavailable");
        assert_eq!(doubted.lock().len(), 2, "t 1 and u 1: {:?}", doubted.lock());
        let (_, mut later, _) = r.send(wait_req("t", 1)).expect("held, not refused");
        for rx in [&mut on_wire, &mut behind, &mut later, &mut other] {
            assert!(futures::poll!(rx).is_pending(), "held unanswered");
        }
        let mut second = ready_stream(&r, 2);
        let (_, evicted, _) = r.send(evict_req("t", 1)).expect("an eviction may go out");
        let writes = written(&mut second);
        assert_eq!(writes.len(), 2, "nothing held goes out: {writes:?}");
        assert!(writes[1].contains("EvictInvocation"), "{writes:?}");
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::EvictionAck(v1::DurableTaskEvictionAckResponse {
                invocation_count: 1,
                durable_task_external_id: "t".into(),
            })),
        });
        assert!(matches!(evicted.await, Ok(Ok(Ack::Evicted))));
        // t 1 restarted: its attempt ends and takes its held requests along.
        r.attempt_ended("t", 1);
        for rx in [on_wire, behind, later] {
            assert!(
                rx.await.is_err(),
                "dropped with the attempt, never answered"
            );
        }
        // u 1's restart failed: its held request fails with the doubt.
        r.restart_failed("u", 1, "the eviction was refused");
        let e = other.await.expect("answered").expect_err("in doubt");
        assert_eq!(e.outcome(), Outcome::MaybeExecuted, "{e}");
        let e = r.send(memo_req("u", 1)).expect_err("still in doubt");
        assert_eq!(e.outcome(), Outcome::MaybeExecuted, "{e}");
        r.attempt_ended("u", 1);
        assert_eq!((r.in_doubt_count(), r.pending_counts()), (0, (0, 0, 0)));
    }

    #[tokio::test]
    async fn a_stream_that_ends_before_the_registration_is_answered_carried_no_request() {
        let r = DurableRegistry::default();
        let (sink, mut first) = mpsc::channel(SINK_CAPACITY);
        r.publish(1, sink, "w");
        let (_, ack, arm) = r.send(wait_req("t", 1)).expect("send");
        assert!(!arm, "a stream is published");
        assert_eq!(
            written(&mut first),
            ["register"],
            "not ready: nothing written"
        );
        r.unpublish(1, "status Unavailable");
        r.stream_ended(false, "status Unavailable");
        let mut second = ready_stream(&r, 2);
        assert_eq!(written(&mut second), ["register", "wait t 1"]);
        r.on_response(wait_ack("t", 1, 1));
        assert!(matches!(ack.await, Ok(Ok(Ack::Wait(_)))));
        assert_eq!(r.pending_counts(), (0, 0, 0));
    }

    #[tokio::test]
    async fn a_stream_whose_registration_is_never_answered_carries_requests_after_two_ticks() {
        let r = DurableRegistry::default();
        let (sink, mut out) = mpsc::channel(SINK_CAPACITY);
        r.publish(1, sink, "w");
        r.opened(1);
        let (_, _ack, _) = r.send(wait_req("t", 1)).expect("send");
        for _ in 1..READY_AFTER_TICKS {
            r.tick("w");
        }
        assert_eq!(written(&mut out), ["register"]);
        r.tick("w");
        assert_eq!(written(&mut out), ["wait t 1"]);
    }

    /// A call still connecting (an unreachable engine) is not a stream that stayed open. However
    /// many ticks pass, nothing is written to it, and when it fails its requests are still queued,
    /// never sent, for the next stream: not failed as maybe executed.
    #[tokio::test]
    async fn ticks_while_the_call_is_still_connecting_write_nothing_and_put_nothing_in_doubt() {
        let r = DurableRegistry::default();
        let (sink, mut out) = mpsc::channel(SINK_CAPACITY);
        r.publish(1, sink, "w");
        let (_, mut ack, _) = r.send(wait_req("t", 1)).expect("send");
        for _ in 0..READY_AFTER_TICKS * 5 {
            r.tick("w");
        }
        assert_eq!(
            written(&mut out),
            ["register"],
            "not opened: nothing written"
        );
        r.unpublish(1, "status Unavailable: connection refused");
        r.stream_ended(false, "status Unavailable: connection refused");
        assert!(ack.try_recv().is_err(), "still queued, not failed");
        assert_eq!(r.pending_counts().0, 1);
        let mut second = ready_stream(&r, 2);
        assert_eq!(written(&mut second), ["register", "wait t 1"]);
        r.on_response(wait_ack("t", 1, 1));
        assert!(matches!(ack.await, Ok(Ok(Ack::Wait(_)))));
    }

    #[tokio::test]
    async fn an_abandoned_request_on_the_wire_holds_its_invocation_until_its_ack() {
        let r = DurableRegistry::default();
        let mut out = ready_stream(&r, 1);
        let (id, first, _) = r.send(wait_req("t", 1)).expect("send");
        drop(first);
        r.abandon(&("t".into(), 1), id);
        let (_, mut next, _) = r.send(memo_req("t", 1)).expect("send");
        assert_eq!(written(&mut out), ["register", "wait t 1"]);
        r.on_response(wait_ack("t", 1, 1));
        assert!(
            futures::poll!(&mut next).is_pending(),
            "the abandoned wait's late ack is not the memo's"
        );
        assert_eq!(written(&mut out), ["memo t 1"]);
        r.on_response(v1::DurableTaskResponse {
            message: Some(Resp::MemoAck(v1::DurableTaskEventMemoAckResponse {
                r#ref: Some(eref("t", 1, 2)),
                memo_already_existed: false,
                memo_result_payload: None,
            })),
        });
        assert!(matches!(next.await, Ok(Ok(Ack::Memo(_)))));
        assert_eq!(r.pending_counts(), (0, 0, 0));
    }

    #[tokio::test]
    async fn a_nondeterminism_error_reaches_the_pending_ack_typed_with_its_entry() {
        let r = DurableRegistry::default();
        let (_, ack, arm) = r.send(wait_req("t", 2)).expect("send");
        assert!(arm, "no stream yet: the caller arms one");
        let _out = ready_stream(&r, 1);
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
        assert_eq!(r.pending_counts(), (0, 0, 0));
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
            r.pending_counts(),
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
        assert_eq!(
            r.pending_counts(),
            (0, 0, 0),
            "nothing is re-sent after the error"
        );
    }

    #[tokio::test]
    async fn a_stopped_listener_fails_every_request_and_wait_at_once() {
        let r = DurableRegistry::default();
        let (_, ack, _) = r.send(wait_req("t", 1)).expect("send");
        let wait = r.wait(("t".into(), 1, 1, 1));
        r.stopped(
            "permanent error: Unauthenticated: no token",
            Some(StreamEnd::Code(tonic::Code::Unauthenticated)),
            false,
        );
        for e in [
            ack.await.expect("answered").expect_err("failed"),
            wait.await.expect("answered").expect_err("failed"),
        ] {
            assert!(e.to_string().contains("Unauthenticated"), "{e}");
            assert_eq!(
                e.grpc_status().map(tonic::Status::code),
                Some(tonic::Code::Unauthenticated),
                "the code is kept as the cause"
            );
        }
        assert_eq!(r.pending_counts(), (0, 0, 0));
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
        let mut out = ready_stream(&r, 7);
        assert_eq!(written(&mut out), ["register", "wait t 1"]);
        r.on_response(wait_ack("t", 1, 1));
        assert!(matches!(ack.await, Ok(Ok(Ack::Wait(_)))));
        assert_eq!(r.pending_counts(), (0, 0, 0));
    }

    #[tokio::test]
    async fn pending_waits_are_listed_on_the_published_stream_only_while_some_wait() {
        let r = DurableRegistry::default();
        let _early = r.wait(("t".into(), 1, 1, 1));
        assert!(!r.tick("w"), "no stream published: nothing to send on");
        let mut out = ready_stream(&r, 1);
        assert_eq!(
            written(&mut out),
            ["register", "status"],
            "register_worker, then the status on publish"
        );
        assert!(r.tick("w"));
        let Some(Req::WorkerStatus(status)) = out.try_recv().ok().and_then(|m| m.message) else {
            panic!("a worker_status")
        };
        assert_eq!(
            (status.worker_id.as_str(), status.waiting_entries.len()),
            ("w", 1)
        );
        assert_eq!(status.waiting_entries[0].node_id, 1);
        r.forget_wait(&("t".into(), 1, 1, 1));
        assert!(!r.tick("w"), "nothing waits: nothing is sent");
    }

    /// An oversized durable request is refused before it is written: on the shared stream it would
    /// end the stream and fail every other task's operation in flight.
    #[tokio::test]
    async fn an_oversized_request_is_refused_unsent_and_the_others_ride_on() {
        let r = DurableRegistry::with_max_message(2048);
        let mut out = ready_stream(&r, 1);
        let (_, other, _) = r.send(wait_req("u", 1)).expect("send");
        let mut big = memo_req("t", 1);
        if let Some(Req::Memo(m)) = big.message.as_mut() {
            m.key = vec![b'k'; 4096];
        }
        let e = r.send(big).expect_err("over the limit");
        assert_eq!(e.outcome(), Outcome::Invalid, "{e}");
        assert!(e.to_string().contains("nothing was sent"), "{e}");
        assert!(e.to_string().contains("2048 byte"), "{e}");
        assert_eq!(written(&mut out), ["register", "wait u 1"]);
        r.on_response(wait_ack("u", 1, 1));
        assert!(matches!(other.await, Ok(Ok(Ack::Wait(_)))));
        assert_eq!(r.pending_counts(), (0, 0, 0));
    }

    /// Pending waits past one message's room are listed in several `worker_status` messages, each
    /// under the limit, every wait in one of them.
    #[tokio::test]
    async fn a_status_over_the_message_limit_is_split_and_lists_every_wait() {
        use prost::Message as _;
        let limit = 4096;
        let r = DurableRegistry::with_max_message(limit);
        let _waits: Vec<_> = (0..500)
            .map(|n| r.wait((format!("task-{n:04}"), 1, 1, n)))
            .collect();
        let mut out = ready_stream(&r, 1);
        let _ = written(&mut out);
        assert!(r.tick("w"));
        let mut listed = std::collections::BTreeSet::new();
        let mut messages = 0;
        while let Ok(m) = out.try_recv() {
            assert!(m.encoded_len() <= limit, "{} bytes", m.encoded_len());
            let Some(Req::WorkerStatus(status)) = m.message else {
                panic!("a worker_status")
            };
            messages += 1;
            listed.extend(status.waiting_entries.into_iter().map(|e| e.node_id));
        }
        assert!(messages > 1, "split: {messages}");
        assert_eq!(listed.len(), 500, "every wait listed once or more");
    }

    /// A stream that is not read (a frozen link) holds at most [`SINK_CAPACITY`] messages: an
    /// hour of status ticks does not pile up, and a request that found it full goes out, once,
    /// when there is room again.
    #[tokio::test]
    async fn a_stalled_stream_holds_a_bounded_backlog_and_a_held_request_goes_out_later() {
        let r = DurableRegistry::default();
        let _wait = r.wait(("t".into(), 1, 1, 1));
        let mut out = ready_stream(&r, 1);
        for _ in 0..3_600 {
            r.tick("w");
        }
        let (_, _ack, _) = r.send(wait_req("u", 1)).expect("send");
        let held: Vec<String> = written(&mut out);
        assert_eq!(
            held.len(),
            SINK_CAPACITY,
            "bounded, not an hour of statuses"
        );
        assert!(
            !held.iter().any(|m| m == "wait u 1"),
            "no room: the request waits"
        );
        r.tick("w");
        let after = written(&mut out);
        assert_eq!(
            after.iter().filter(|m| *m == "wait u 1").count(),
            1,
            "sent once there is room: {after:?}"
        );
    }
}
