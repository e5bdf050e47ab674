//! A registry of waiters keyed by what a bidi stream answers (a run id; a task and signal key),
//! shared by the workflow-runs and durable-events listeners.
//!
//! # Invariants
//!
//! 1. A waiter is delivered at most once: delivery removes it under the lock, whichever path
//!    (stream, poll, shutdown) gets there first.
//! 2. Delivery is a one-shot send: a slow or abandoned waiter cannot stall the stream.
//! 3. Registering a waiter while a stream is published sends its key on that stream (under the
//!    lock); otherwise the key is replayed when the next stream is published (replay before
//!    publish, under the same lock, so no key falls in between).
//! 4. Stream generations come from the stream's home ([`super::stream::Home`]), so an old
//!    reader's `unpublish` cannot clear a newer stream.
//! 5. A registry whose listener was stopped for good refuses new waiters with the reason.
//! 6. A [`Waiter`] dropped before its reply removes itself and no other waiter of its key
//!    (`runtime_e2e::cancelling_a_result_wait_removes_only_that_waiter`).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;

/// What a keyed stream carries.
pub(crate) trait Keyed: Send + Sync + 'static {
    /// What waiters wait for.
    type Key: Clone + Eq + Hash + Send + Sync + std::fmt::Debug + 'static;
    /// The subscription request for a key.
    type Req: Send + 'static;
    /// A reply (delivered to every waiter of its key).
    type Resp: Clone + Send + 'static;
    /// The request that subscribes `key`.
    fn request(key: &Self::Key) -> Self::Req;
    /// The key a reply answers.
    fn key_of(resp: &Self::Resp) -> Self::Key;
    /// The error a waiter of `key` gets when the stream stops for `why`.
    fn stopped_error(key: &Self::Key, why: &str) -> Error;
    /// Drops the parts of a reply no waiter reads, before delivery: here, on the stream's
    /// thread that decoded them, freeing is cheap; a waiter on another thread would free them
    /// through the allocator's slower cross-thread path.
    fn trim(_resp: &mut Self::Resp) {}
    /// Whether new keys are queued for a sweep that checks them once
    /// ([`KeyedRegistry::take_unchecked`]): the runs registry's unknown-run sweep.
    const SWEPT: bool = false;
}

/// What a waiter receives: its key's reply, or the error that ended the wait (not to be
/// confused with [`crate::Outcome`], the kind of an error).
pub(crate) type Reply<P> = Result<<P as Keyed>::Resp, Error>;
/// The waiters of one key: almost always one, kept inline (no allocation of its own).
type KeyWaiters<P> = SmallVec<[(u64, oneshot::Sender<Reply<P>>); 1]>;
type Waiters<P> = HashMap<<P as Keyed>::Key, KeyWaiters<P>>;

struct Inner<P: Keyed> {
    waiters: Waiters<P>,
    /// Keys not yet checked by the sweep ([`Keyed::SWEPT`]), oldest first; entries whose key is
    /// no longer pending are skipped when taken and compacted away past twice the pending
    /// count, so the queue stays within a few words per waiter.
    unchecked: VecDeque<P::Key>,
    sink: Option<(u64, mpsc::UnboundedSender<P::Req>)>,
    closed: bool,
    refused: Option<String>,
}

/// The waiter registry. Outlives listener restarts.
pub(crate) struct KeyedRegistry<P: Keyed> {
    inner: Mutex<Inner<P>>,
    next_waiter: AtomicU64,
    delivered: AtomicU64,
}

impl<P: Keyed> Default for KeyedRegistry<P> {
    fn default() -> Self {
        KeyedRegistry {
            inner: Mutex::new(Inner {
                waiters: HashMap::new(),
                unchecked: VecDeque::new(),
                sink: None,
                closed: false,
                refused: None,
            }),
            next_waiter: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
        }
    }
}

impl<P: Keyed> std::fmt::Debug for KeyedRegistry<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedRegistry")
            .field("pending", &self.pending())
            .finish()
    }
}

/// A new waiter: its id, its receiver, and whether a stream must be armed (none published).
type Added<P> = (u64, oneshot::Receiver<Reply<P>>, bool);

/// One registered waiter as a future: it resolves with its key's reply (`None` when the
/// registry dropped it unanswered), and dropping it unresolved removes it from the registry
/// (other waiters of the key keep theirs). It is all a pending wait holds (a few words), so a
/// million of them stay small.
pub(crate) struct Waiter<'a, P: Keyed> {
    registry: &'a KeyedRegistry<P>,
    key: P::Key,
    id: u64,
    rx: oneshot::Receiver<Reply<P>>,
    done: bool,
}

impl<P: Keyed> std::future::Future for Waiter<'_, P>
where
    P::Key: Unpin,
{
    type Output = Option<Reply<P>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        std::pin::Pin::new(&mut this.rx).poll(cx).map(|r| {
            this.done = true;
            r.ok()
        })
    }
}

impl<P: Keyed> Drop for Waiter<'_, P> {
    fn drop(&mut self) {
        if !self.done {
            self.registry.remove(&self.key, self.id);
        }
    }
}

impl<P: Keyed> KeyedRegistry<P> {
    /// Adds a waiter for `key`; `closed` makes the error when the runtime is shut down.
    fn add(&self, key: &P::Key, closed: impl FnOnce() -> Error) -> Result<Added<P>, Error> {
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            return Err(closed());
        }
        if let Some(why) = &g.refused {
            return Err(P::stopped_error(key, why));
        }
        let list = g.waiters.entry(key.clone()).or_default();
        let first = list.is_empty();
        list.push((id, tx));
        if P::SWEPT && first {
            let g = &mut *g;
            if g.unchecked.len() >= 2 * g.waiters.len().max(32) {
                let waiters = &g.waiters;
                g.unchecked.retain(|k| waiters.contains_key(k));
            }
            g.unchecked.push_back(key.clone());
        }
        let need_stream = match &g.sink {
            Some((_, sink)) => first && sink.send(P::request(key)).is_err(),
            None => true,
        };
        Ok((id, rx, need_stream))
    }

    /// Adds a waiter for `key` as a [`Waiter`], and whether a stream must be armed (none
    /// published); `closed` makes the error when the runtime is shut down.
    pub(crate) fn wait(
        &self,
        key: P::Key,
        closed: impl FnOnce() -> Error,
    ) -> Result<(Waiter<'_, P>, bool), Error> {
        let (id, rx, arm) = self.add(&key, closed)?;
        Ok((
            Waiter {
                registry: self,
                key,
                id,
                rx,
                done: false,
            },
            arm,
        ))
    }

    /// Removes one waiter (its caller gave up).
    pub(crate) fn remove(&self, key: &P::Key, waiter: u64) {
        let mut g = self.inner.lock();
        if let Some(list) = g.waiters.get_mut(key) {
            list.retain(|(w, _)| *w != waiter);
            if list.is_empty() {
                g.waiters.remove(key);
            }
        }
    }

    /// Delivers a reply to every waiter of its key (once: they are removed).
    pub(crate) fn deliver(&self, mut resp: P::Resp) {
        let list = self.inner.lock().waiters.remove(&P::key_of(&resp));
        if let Some(mut list) = list {
            P::trim(&mut resp);
            self.delivered
                .fetch_add(list.len() as u64, Ordering::Relaxed);
            let last = list.pop();
            for (_, tx) in list {
                let _ = tx.send(Ok(resp.clone()));
            }
            if let Some((_, tx)) = last {
                let _ = tx.send(Ok(resp));
            }
        }
    }

    /// Fails every waiter of `key` with `make()` (once: they are removed).
    pub(crate) fn fail_key(&self, key: &P::Key, make: impl Fn() -> Error) {
        let list = self.inner.lock().waiters.remove(key);
        for (_, tx) in list.into_iter().flatten() {
            let _ = tx.send(Err(make()));
        }
    }

    /// Fails every waiter with `make(key)`, and refuses new ones when `close`.
    pub(crate) fn fail_all(&self, close: bool, make: impl Fn(&P::Key) -> Error) {
        let all: Vec<_> = {
            let mut g = self.inner.lock();
            g.closed |= close;
            g.sink = None;
            g.waiters.drain().collect()
        };
        for (key, list) in all {
            for (_, tx) in list {
                let _ = tx.send(Err(make(&key)));
            }
        }
    }

    /// Publishes a stream's sink after queueing every pending key on it (invariant 3).
    pub(crate) fn publish(&self, generation: u64, sink: mpsc::UnboundedSender<P::Req>) -> usize {
        let mut g = self.inner.lock();
        let n = g
            .waiters
            .keys()
            .filter(|k| sink.send(P::request(k)).is_ok())
            .count();
        g.sink = Some((generation, sink));
        n
    }

    /// Unpublishes generation `generation`'s sink (no-op for another generation).
    pub(crate) fn unpublish(&self, generation: u64) {
        let mut g = self.inner.lock();
        if g.sink.as_ref().is_some_and(|(s, _)| *s == generation) {
            g.sink = None;
        }
    }

    /// Refuses every later waiter with `why` (the listener was stopped for good, invariant 5).
    pub(crate) fn refuse(&self, why: &str) {
        self.inner.lock().refused = Some(why.to_string());
    }

    /// Keys with at least one waiter.
    pub(crate) fn pending(&self) -> usize {
        self.inner.lock().waiters.len()
    }

    /// The keys with waiters.
    pub(crate) fn pending_keys(&self) -> Vec<P::Key> {
        self.inner.lock().waiters.keys().cloned().collect()
    }

    /// Takes up to `max` keys not yet checked, oldest first, that are still pending (O(`max`)
    /// plus the stale entries skipped, under the lock: no copy of the whole registry).
    pub(crate) fn take_unchecked(&self, max: usize) -> Vec<P::Key> {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let mut out = Vec::with_capacity(max.min(g.unchecked.len()));
        while out.len() < max {
            let Some(k) = g.unchecked.pop_front() else {
                break;
            };
            if g.waiters.contains_key(&k) {
                out.push(k);
            }
        }
        out
    }

    /// Queues `key` to be checked again (a sweep that could not tell), if it is still pending.
    pub(crate) fn check_again(&self, key: P::Key) {
        let mut g = self.inner.lock();
        if g.waiters.contains_key(&key) {
            g.unchecked.push_back(key);
        }
    }

    /// Whether `key` has a waiter.
    pub(crate) fn is_pending(&self, key: &P::Key) -> bool {
        self.inner.lock().waiters.contains_key(key)
    }

    /// Keys queued for the sweep (tests check the queue stays bounded).
    #[cfg(test)]
    pub(crate) fn unchecked_len(&self) -> usize {
        self.inner.lock().unchecked.len()
    }

    /// Whether anyone waits.
    pub(crate) fn has_waiters(&self) -> bool {
        !self.inner.lock().waiters.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ids;
    impl Keyed for Ids {
        type Key = String;
        type Req = String;
        type Resp = String;
        fn request(key: &String) -> String {
            key.clone()
        }
        fn key_of(resp: &String) -> String {
            resp.clone()
        }
        fn stopped_error(key: &String, why: &str) -> Error {
            Error::closed("t").with_detail(format!("{key}: {why}"))
        }
    }

    struct Swept;
    impl Keyed for Swept {
        const SWEPT: bool = true;
        type Key = String;
        type Req = String;
        type Resp = String;
        fn request(key: &String) -> String {
            key.clone()
        }
        fn key_of(resp: &String) -> String {
            resp.clone()
        }
        fn stopped_error(key: &String, why: &str) -> Error {
            Error::closed("t").with_detail(format!("{key}: {why}"))
        }
    }

    #[test]
    fn the_sweep_takes_each_new_key_once_skips_delivered_ones_and_its_queue_stays_bounded() {
        let r = KeyedRegistry::<Swept>::default();
        let closed = || Error::closed("t");
        let mut held = Vec::new();
        for k in ["a", "b", "c"] {
            held.push(r.add(&k.to_string(), closed).expect("add"));
        }
        let _second = r.add(&"a".to_string(), closed).expect("add");
        r.deliver("b".to_string());
        assert_eq!(
            r.take_unchecked(2),
            ["a", "c"],
            "oldest first, delivered skipped, once per key"
        );
        assert!(r.take_unchecked(2).is_empty(), "each key is taken once");
        r.check_again("c".to_string());
        r.check_again("b".to_string());
        assert_eq!(
            r.take_unchecked(5),
            ["c"],
            "a key checked again if still pending"
        );
        let unswept = KeyedRegistry::<Ids>::default();
        let _w = unswept.add(&"x".to_string(), closed).expect("add");
        assert!(
            unswept.take_unchecked(1).is_empty(),
            "a registry that is not swept queues nothing"
        );
        // Many short waits: delivered keys never pile up past twice the pending count.
        for i in 0..10_000 {
            let k = format!("k{i}");
            let _w = r.add(&k, closed).expect("add");
            r.deliver(k);
        }
        assert!(
            r.unchecked_len() <= 2 * 32 + 1,
            "{} queued",
            r.unchecked_len()
        );
        drop(held);
    }

    #[tokio::test]
    async fn an_older_generation_cannot_unpublish_a_newer_stream_and_keys_replay_once() {
        let r = KeyedRegistry::<Ids>::default();
        let (_w, _rx, arm) = r.add(&"run-a".into(), || Error::closed("t")).expect("add");
        assert!(arm, "nothing published: the caller arms a stream");
        let (g1, g2) = (1, 2);
        let (old, _old_rx) = mpsc::unbounded_channel();
        let (new, mut new_rx) = mpsc::unbounded_channel();
        assert_eq!(r.publish(g1, old), 1);
        assert_eq!(
            r.publish(g2, new),
            1,
            "the pending key is replayed on the new stream"
        );
        r.unpublish(g1); // the old reader ends late
        let (_w, _rx, arm) = r.add(&"run-b".into(), || Error::closed("t")).expect("add");
        assert!(!arm, "the newer stream is still published");
        let (_w, _rx, arm) = r.add(&"run-a".into(), || Error::closed("t")).expect("add");
        assert!(!arm);
        let mut sent = Vec::new();
        while let Ok(k) = new_rx.try_recv() {
            sent.push(k);
        }
        assert_eq!(
            sent,
            ["run-a", "run-b"],
            "one replay, one new key; a second waiter of run-a sends nothing"
        );
        r.unpublish(g2);
        let (_w, _rx, arm) = r.add(&"run-c".into(), || Error::closed("t")).expect("add");
        assert!(arm, "its own generation unpublishes it");
    }

    #[tokio::test]
    async fn removing_a_waiter_twice_never_removes_a_later_waiter_of_the_same_key() {
        let r = KeyedRegistry::<Ids>::default();
        let key: String = "run-a".into();
        let (first, _rx1, _) = r.add(&key, || Error::closed("t")).expect("add");
        r.remove(&key, first);
        let (_second, rx2, _) = r.add(&key, || Error::closed("t")).expect("add");
        r.remove(&key, first); // a late guard of the first waiter runs again
        assert_eq!(r.pending(), 1, "the second waiter is still registered");
        r.deliver("run-a".into());
        assert_eq!(rx2.await.expect("delivered").expect("ok"), "run-a");
    }
}
