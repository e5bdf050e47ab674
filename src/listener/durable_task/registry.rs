//! The durable registry: requests awaiting acks (one slot each, per invocation in send order),
//! waits by entry ref, early completions, and the typed refusals of the engine's answers. It
//! outlives listener restarts; the actor (`super`) publishes streams to it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{EARLY_COMPLETION_TTL, EvictHook, MAX_SEND_ATTEMPTS, OPERATION};
use crate::error::{Cause, DurableError, Error, Outcome};
use crate::listener::reconnect::StreamEnd;
use crate::proto::v1::{
    self, durable_task_request::Message as Req, durable_task_response::Message as Resp,
};

/// An entry ref: `(task, invocation, branch, node)`.
pub type EntryKey = (String, i32, i64, i64);

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
/// A request's ack slot: its id and its waiter (`None`: a tombstone, see `abandon`).
type AckSlot = (u64, Option<AckTx>);

/// A request awaiting its ack, and how many streams without progress it has ridden.
struct Unacked {
    req: v1::DurableTaskRequest,
    failed_streams: u32,
}
/// A sent request: its id, its ack, and whether a stream must be armed to carry it.
pub(super) type Sent = (u64, oneshot::Receiver<Result<Ack, Error>>, bool);
pub(super) type Sink = mpsc::UnboundedSender<v1::DurableTaskRequest>;

#[derive(Default)]
pub(super) struct Inner {
    sink: Option<(u64, Sink)>,
    /// Requests awaiting an ack, by request id (re-sent on reconnect, in order).
    unacked: BTreeMap<u64, Unacked>,
    /// Ack slots per (task, invocation), in send order.
    /// `None` is a tombstone: the request was abandoned after it went out on the current
    /// stream, so its ack may still come and must not be taken by the next request.
    acks: HashMap<(String, i32), VecDeque<AckSlot>>,
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
        Error::new(Outcome::Rejected, OPERATION)
            .with_detail(format!("the durable-task stream stopped: {why}")),
        end,
        why,
    )
}

fn rejected(refusal: DurableError) -> Error {
    Error::new(Outcome::Rejected, OPERATION).with_cause(Cause::Durable(refusal))
}

/// The durable registry. Outlives listener restarts.
#[derive(Default)]
pub struct DurableRegistry {
    inner: Mutex<Inner>,
    next: AtomicU64,
    on_evict: Mutex<Option<EvictHook>>,
}

impl std::fmt::Debug for DurableRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableRegistry(..)")
    }
}

pub(super) fn target(req: &v1::DurableTaskRequest) -> Option<(String, i32)> {
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
                if let Some(tx) = tx {
                    let _ = tx.send(Err(make()));
                }
            }
        }
    }

    /// Fails and removes the ack slots whose request id matches.
    fn fail_acks_where(&mut self, matches: impl Fn(u64) -> bool, make: impl Fn() -> Error) {
        for q in self.acks.values_mut() {
            let mut keep = VecDeque::with_capacity(q.len());
            for (id, tx) in q.drain(..) {
                if matches(id) {
                    if let Some(tx) = tx {
                        let _ = tx.send(Err(make()));
                    }
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
    /// Requests awaiting an ack, ack slots and waits held (tests check nothing is left).
    #[cfg(test)]
    pub(super) fn pending_counts(&self) -> (usize, usize, usize) {
        let g = self.inner.lock();
        (g.unacked.len(), g.acks.len(), g.waits.len())
    }

    /// Sets what runs when the engine evicts an invocation (the worker cancels it).
    pub fn set_evict_hook(&self, hook: EvictHook) {
        *self.on_evict.lock() = Some(hook);
    }

    /// Drops a request whose ack will no longer be awaited (its slot and its re-send).
    /// A request that is on the current stream keeps a tombstone in its slot, so its late ack
    /// is consumed there instead of waking the next request of the invocation.
    pub(super) fn abandon(&self, key: &(String, i32), id: u64) {
        let mut g = self.inner.lock();
        g.unacked.remove(&id);
        let on_stream = g.sink.is_some();
        if let Some(q) = g.acks.get_mut(key) {
            if on_stream {
                for slot in q.iter_mut().filter(|(i, _)| *i == id) {
                    slot.1 = None;
                }
            } else {
                q.retain(|(i, _)| *i != id);
            }
            if q.is_empty() {
                g.acks.remove(key);
            }
        }
    }

    /// Sends a request that expects an ack; returns the ack receiver and whether a stream must
    /// be armed.
    pub(super) fn send(&self, req: v1::DurableTaskRequest) -> Result<Sent, Error> {
        let key =
            target(&req).ok_or_else(|| Error::invalid("DurableTask", "request has no target"))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            return Err(Error::closed("DurableTask"));
        }
        if let Some(why) = &g.refused {
            return Err(stop_error(why, None));
        }
        g.acks.entry(key).or_default().push_back((id, Some(tx)));
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
    pub(super) fn send_no_ack(&self, req: v1::DurableTaskRequest) {
        if let Some((_, s)) = &self.inner.lock().sink {
            let _ = s.send(req);
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

    /// The oldest slot of an invocation takes the ack (`None` when it is a tombstone).
    pub(super) fn pop_ack(&self, key: &(String, i32)) -> Option<AckTx> {
        let mut g = self.inner.lock();
        let q = g.acks.get_mut(key)?;
        let (id, tx) = q.pop_front()?;
        if q.is_empty() {
            g.acks.remove(key);
        }
        g.unacked.remove(&id);
        tx
    }

    /// Handles one response from the engine.
    pub(super) fn on_response(&self, resp: v1::DurableTaskResponse) {
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
    pub(super) fn status_request(g: &Inner, worker_id: &str) -> Option<v1::DurableTaskRequest> {
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
    pub(super) fn send_status(&self, worker_id: &str) -> bool {
        let g = self.inner.lock();
        match (&g.sink, Self::status_request(&g, worker_id)) {
            (Some((_, sink)), Some(req)) => sink.send(req).is_ok(),
            _ => false,
        }
    }

    /// Publishes a new stream: register_worker, re-sent requests, worker_status (replay first).
    pub(super) fn publish(&self, generation: u64, sink: Sink, worker_id: &str) {
        let mut g = self.inner.lock();
        // Acks of the previous stream can no longer come: tombstones go.
        for q in g.acks.values_mut() {
            q.retain(|(_, tx)| tx.is_some());
        }
        g.acks.retain(|_, q| !q.is_empty());
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

    pub(super) fn unpublish(&self, generation: u64) {
        let mut g = self.inner.lock();
        if g.sink.as_ref().is_some_and(|(s, _)| *s == generation) {
            g.sink = None;
        }
    }

    /// Counts a stream of this registry's that ended: without progress, every request it carried
    /// has ridden one more failed stream, and those at [`MAX_SEND_ATTEMPTS`] fail; with progress,
    /// the count starts again.
    pub(super) fn stream_ended(&self, progressed: bool, why: &str) {
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

    /// Fails every pending request and wait with the listener's stop error. New requests re-arm
    /// the listener, unless it was stopped for good (`permanent`): then they are refused too.
    pub(super) fn stopped(&self, why: &str, end: Option<StreamEnd>, permanent: bool) {
        let mut g = self.inner.lock();
        if permanent {
            g.refused = Some(why.to_string());
        }
        let make = || stop_error(why, end);
        g.fail_acks(|_| true, make);
        g.fail_waits(|_| true, make);
        g.unacked.clear();
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
                e.status().map(tonic::Status::code),
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
        assert_eq!(r.pending_counts(), (0, 0, 0));
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
