//! A registry of waiters keyed by what a bidi stream answers (a run id; a task and signal key),
//! shared by the workflow-runs and durable-events listeners.
//!
//! # Invariants
//!
//! 1. A waiter is delivered at most once: delivery removes it under the lock, whichever path
//!    (stream, poll, shutdown) gets there first.
//! 2. Delivery answers the waiter's slot and wakes it, never waiting on it: a slow or abandoned
//!    waiter cannot stall the stream.
//! 3. Registering a waiter while a stream is published sends its key on that stream (under the
//!    lock); otherwise the key is replayed when the next stream is published (replay before
//!    publish, under the same lock, so no key falls in between).
//! 4. Stream generations come from the stream's home ([`super::stream::Home`]), so an old
//!    reader's `unpublish` cannot clear a newer stream.
//! 5. A registry whose listener was stopped for good refuses new waiters with the reason.
//! 6. A [`Waiter`] dropped before its reply removes itself and no other waiter of its key
//!    (`features::runtime_e2e::cancelling_a_result_wait_removes_only_that_waiter`,
//!    `tests::every_waiter_of_a_key_gets_its_reply_once_and_a_dropped_one_takes_only_itself`).
//! 7. A pending wait costs one allocation (its slot: key, state, waker) and a pointer in the
//!    table (`bench side_by_side -- fanin` measures the bytes).
//! 8. A burst of replies read together is delivered in stream order under one lock, each
//!    waiter answered once with the first reply of its key, as single deliveries would
//!    (`tests::a_burst_answers_every_waiter_of_each_key_once_with_its_first_reply`).

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::task::{Poll, Waker};

use hashbrown::HashTable;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::mpsc;

use crate::error::Error;

/// A burst of replies with their keys and hashes, taken out of the stream's read buffer.
type Burst<P> = SmallVec<[(<P as Keyed>::Resp, <P as Keyed>::Key, u64); 64]>;

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
    /// Whether new keys are queued for a sweep that checks them once
    /// ([`KeyedRegistry::take_unchecked`]): the runs registry's unknown-run sweep.
    const SWEPT: bool = false;
}

/// What a waiter receives: its key's reply, or the error that ended the wait (not to be
/// confused with [`crate::error::Outcome`], the kind of an error).
pub(crate) type Reply<P> = Result<<P as Keyed>::Resp, Error>;

/// One waiter's slot: its key, and its reply or the waker of the task waiting for it. The only
/// allocation a pending wait makes; the registry's table holds a pointer to it.
struct Slot<P: Keyed> {
    key: P::Key,
    state: Mutex<SlotState<P>>,
}

enum SlotState<P: Keyed> {
    /// Registered, not answered; the waker of the last poll.
    Waiting(Option<Waker>),
    /// Answered, not yet read.
    Answered(Reply<P>),
    /// Read (or its waiter is gone).
    Done,
}

impl<P: Keyed> Slot<P> {
    /// Answers the slot (once) and wakes its waiter.
    fn answer(&self, reply: Reply<P>) {
        let mut st = self.state.lock();
        if let SlotState::Waiting(waker) = &mut *st {
            let waker = waker.take();
            *st = SlotState::Answered(reply);
            drop(st);
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

type SlotRef<P> = Arc<Slot<P>>;

/// Where a swept key came from, which decides how long the sweep looks for it before it gives
/// up ([`crate::listener::runs::SweepPlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The engine answered this process's trigger with it: it is not concluded unknown
    /// quickly (the engine may create the run later).
    Triggered,
    /// The caller gave it (`run_handle(id)`): it may be a wrong id.
    Given,
}

struct Inner<P: Keyed> {
    /// Every registered waiter's slot, by its key's hash (a key with several waiters has a slot
    /// for each): a pointer per waiter, where a map of keys to lists held the key, the list and
    /// a channel's sender, in buckets at most half full.
    slots: HashTable<SlotRef<P>>,
    /// Keys with at least one waiter.
    keys: usize,
    /// Keys the sweep ([`Keyed::SWEPT`]) checks at its next pass, each with its [`Origin`]:
    /// given ids at once, triggered ones once they have waited [`SweepPlan::first_check`], and
    /// keys the sweep asked to see again.
    due: VecDeque<(SlotRef<P>, Origin)>,
    /// First waiters of triggered keys not yet due, oldest first, with the second (since
    /// `epoch`) they were added. Entries whose key is no longer pending are skipped when taken
    /// and compacted away past twice the pending count, so the queue stays within two words per
    /// waiter.
    later: VecDeque<(SlotRef<P>, u32)>,
    /// When the registry was made: `later`'s seconds count from it.
    epoch: tokio::time::Instant,
    sink: Option<(u64, mpsc::UnboundedSender<P::Req>)>,
    closed: bool,
    refused: Option<String>,
    /// A key the engine has answered (a run that has ended): a new stream is probed with it,
    /// and an engine that serves the stream answers it within its tick (`subscriptions.rs`).
    /// Set once: an ended run stays ended.
    probe: Option<P::Key>,
}

impl<P: Keyed> Inner<P> {
    /// Whether `key` has a waiter.
    fn has(&self, hash: u64, key: &P::Key) -> bool {
        self.slots.find(hash, |s| s.key == *key).is_some()
    }

    /// Removes every slot of `key`, and the key.
    fn take_key(&mut self, hash: u64, key: &P::Key) -> SmallVec<[SlotRef<P>; 1]> {
        let mut out = SmallVec::new();
        while let Ok(e) = self.slots.find_entry(hash, |s| s.key == *key) {
            out.push(e.remove().0);
        }
        if !out.is_empty() {
            self.keys -= 1;
            if self.probe.is_none() {
                self.probe = Some(key.clone());
            }
        }
        out
    }

    /// Each pending key once (the slot the table finds first for a key stands for it).
    fn distinct_keys<'a>(
        &'a self,
        hasher: &'a std::collections::hash_map::RandomState,
    ) -> impl Iterator<Item = &'a P::Key> + 'a {
        self.slots.iter().filter_map(move |s| {
            let first = self
                .slots
                .find(hasher.hash_one(&s.key), |o| o.key == s.key)?;
            Arc::ptr_eq(first, s).then_some(&s.key)
        })
    }
}

/// The waiter registry. Outlives listener restarts.
pub(crate) struct KeyedRegistry<P: Keyed> {
    inner: Mutex<Inner<P>>,
    hasher: std::collections::hash_map::RandomState,
    delivered: std::sync::atomic::AtomicU64,
}

impl<P: Keyed> Default for KeyedRegistry<P> {
    fn default() -> Self {
        KeyedRegistry {
            inner: Mutex::new(Inner {
                slots: HashTable::new(),
                keys: 0,
                due: VecDeque::new(),
                later: VecDeque::new(),
                epoch: tokio::time::Instant::now(),
                sink: None,
                closed: false,
                refused: None,
                probe: None,
            }),
            hasher: std::collections::hash_map::RandomState::new(),
            delivered: std::sync::atomic::AtomicU64::new(0),
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

/// One registered waiter as a future: it resolves with its key's reply (`None` if it was
/// already read), and dropping it unresolved removes it from the registry (other waiters of the
/// key keep theirs). It is all a pending wait holds (two pointers and a flag; the slot it points
/// to holds the key), so a million of them stay small.
pub(crate) struct Waiter<'a, P: Keyed> {
    registry: &'a KeyedRegistry<P>,
    slot: SlotRef<P>,
    done: bool,
}

impl<P: Keyed> std::future::Future for Waiter<'_, P> {
    type Output = Option<Reply<P>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut st = this.slot.state.lock();
        match &mut *st {
            SlotState::Waiting(w) => {
                match w {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *w = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Answered(_) => {
                let SlotState::Answered(reply) = std::mem::replace(&mut *st, SlotState::Done)
                else {
                    unreachable!("matched as answered under the same lock")
                };
                drop(st);
                this.done = true;
                Poll::Ready(Some(reply))
            }
            SlotState::Done => {
                drop(st);
                this.done = true;
                Poll::Ready(None)
            }
        }
    }
}

impl<P: Keyed> Drop for Waiter<'_, P> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let waiting = {
            let mut st = self.slot.state.lock();
            let waiting = matches!(*st, SlotState::Waiting(_));
            *st = SlotState::Done;
            waiting
        };
        // An answered slot is already out of the table.
        if waiting {
            self.registry.remove(&self.slot);
        }
    }
}

/// A new waiter: its slot, and whether a stream must be armed (none published).
type Added<P> = (SlotRef<P>, bool);

impl<P: Keyed> KeyedRegistry<P> {
    /// Adds a waiter for `key`; `closed` makes the error when the runtime is shut down.
    fn add(
        &self,
        key: P::Key,
        origin: Option<Origin>,
        closed: impl FnOnce() -> Error,
    ) -> Result<Added<P>, Error> {
        let hash = self.hasher.hash_one(&key);
        let slot = Arc::new(Slot {
            key,
            state: Mutex::new(SlotState::Waiting(None)),
        });
        let mut g = self.inner.lock();
        if g.closed {
            return Err(closed());
        }
        if let Some(why) = &g.refused {
            return Err(P::stopped_error(&slot.key, why));
        }
        let g = &mut *g;
        let first = !g.has(hash, &slot.key);
        g.slots
            .insert_unique(hash, slot.clone(), |s| self.hasher.hash_one(&s.key));
        if first {
            g.keys += 1;
        }
        // The first waiter of a key decides how it is swept (a triggered id is never swept as
        // a given one).
        match origin {
            Some(_) if !P::SWEPT || !first => {}
            None => {}
            Some(Origin::Given) => g.due.push_back((slot.clone(), Origin::Given)),
            Some(Origin::Triggered) => {
                if g.later.len() >= 2 * g.keys.max(32) {
                    let (slots, hasher) = (&g.slots, &self.hasher);
                    g.later.retain(|(s, _)| {
                        slots
                            .find(hasher.hash_one(&s.key), |o| o.key == s.key)
                            .is_some()
                    });
                }
                let at = g.epoch.elapsed().as_secs().min(u64::from(u32::MAX)) as u32;
                g.later.push_back((slot.clone(), at));
            }
        }
        let need_stream = match &g.sink {
            Some((_, sink)) => first && sink.send(P::request(&slot.key)).is_err(),
            None => true,
        };
        Ok((slot, need_stream))
    }

    /// Adds a waiter for `key` as a [`Waiter`], and whether a stream must be armed (none
    /// published); `closed` makes the error when the runtime is shut down.
    pub(crate) fn wait(
        &self,
        key: P::Key,
        closed: impl FnOnce() -> Error,
    ) -> Result<(Waiter<'_, P>, bool), Error> {
        self.wait_swept(key, None, closed)
    }

    /// [`KeyedRegistry::wait`], the key queued for the sweep as `origin` says (a registry
    /// that is not [`Keyed::SWEPT`] queues nothing).
    pub(crate) fn wait_swept(
        &self,
        key: P::Key,
        origin: Option<Origin>,
        closed: impl FnOnce() -> Error,
    ) -> Result<(Waiter<'_, P>, bool), Error> {
        let (slot, arm) = self.add(key, origin, closed)?;
        Ok((
            Waiter {
                registry: self,
                slot,
                done: false,
            },
            arm,
        ))
    }

    /// Removes one waiter's slot (its caller gave up), and its key if it was the last.
    fn remove(&self, slot: &SlotRef<P>) {
        let hash = self.hasher.hash_one(&slot.key);
        let mut g = self.inner.lock();
        if let Ok(e) = g.slots.find_entry(hash, |s| Arc::ptr_eq(s, slot)) {
            e.remove();
            if !g.has(hash, &slot.key) {
                g.keys -= 1;
            }
        }
    }

    /// Delivers a reply to every waiter of its key (once: they are removed).
    pub(crate) fn deliver(&self, resp: P::Resp) {
        let key = P::key_of(&resp);
        let hash = self.hasher.hash_one(&key);
        let slots = self.inner.lock().take_key(hash, &key);
        self.answer_all(resp, slots);
    }

    /// Delivers each reply to every waiter of its key, in order, as [`KeyedRegistry::deliver`]
    /// does, under one lock for all of them: the probes of a burst overlap in the table, and the
    /// answers (the wakes) come after the lock is released.
    pub(crate) fn deliver_all(&self, resps: impl Iterator<Item = P::Resp>) {
        let keyed: Burst<P> = resps
            .map(|resp| {
                let key = P::key_of(&resp);
                let hash = self.hasher.hash_one(&key);
                (resp, key, hash)
            })
            .collect();
        let taken: SmallVec<[SmallVec<[SlotRef<P>; 1]>; 64]> = {
            let mut g = self.inner.lock();
            keyed
                .iter()
                .map(|(_, key, hash)| g.take_key(*hash, key))
                .collect()
        };
        for ((resp, _, _), slots) in keyed.into_iter().zip(taken) {
            self.answer_all(resp, slots);
        }
    }

    /// Answers `slots` (taken out of the table) with `resp`.
    fn answer_all(&self, resp: P::Resp, mut slots: SmallVec<[SlotRef<P>; 1]>) {
        self.delivered
            .fetch_add(slots.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let last = slots.pop();
        for slot in slots {
            slot.answer(Ok(resp.clone()));
        }
        if let Some(slot) = last {
            slot.answer(Ok(resp));
        }
    }

    /// Fails every waiter of `key` with `make()` (once: they are removed).
    pub(crate) fn fail_key(&self, key: &P::Key, make: impl Fn() -> Error) {
        let hash = self.hasher.hash_one(key);
        let list = self.inner.lock().take_key(hash, key);
        for slot in list {
            slot.answer(Err(make()));
        }
    }

    /// Fails every waiter with `make(key)`, and refuses new ones when `close`.
    pub(crate) fn fail_all(&self, close: bool, make: impl Fn(&P::Key) -> Error) {
        let all: Vec<_> = {
            let mut g = self.inner.lock();
            g.closed |= close;
            g.sink = None;
            g.keys = 0;
            g.slots.drain().collect()
        };
        for slot in all {
            slot.answer(Err(make(&slot.key)));
        }
    }

    /// Publishes a stream's sink after queueing every pending key on it (invariant 3).
    pub(crate) fn publish(
        &self,
        generation: u64,
        sink: mpsc::UnboundedSender<P::Req>,
        probe: bool,
    ) -> usize {
        let mut g = self.inner.lock();
        let n = g
            .distinct_keys(&self.hasher)
            .filter(|k| sink.send(P::request(k)).is_ok())
            .count();
        if let Some(key) = g.probe.as_ref().filter(|_| probe) {
            let _ = sink.send(P::request(key));
        }
        g.sink = Some((generation, sink));
        n
    }

    /// Whether a new stream is probed with a key the engine has answered before.
    pub(crate) fn probes(&self) -> bool {
        self.inner.lock().probe.is_some()
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
        self.inner.lock().keys
    }

    /// The keys with waiters.
    pub(crate) fn pending_keys(&self) -> Vec<P::Key> {
        self.inner
            .lock()
            .distinct_keys(&self.hasher)
            .cloned()
            .collect()
    }

    /// Takes up to `max` keys due for the sweep that are still pending, with their origin:
    /// first the due queue, then triggered keys that have waited `first_check`, oldest first
    /// (O(`max`) plus the stale entries skipped, under the lock: no copy of the registry).
    pub(crate) fn take_unchecked(
        &self,
        max: usize,
        first_check: std::time::Duration,
    ) -> Vec<(P::Key, Origin)> {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let now = g.epoch.elapsed().as_secs();
        let mut out = Vec::with_capacity(max.min(g.due.len() + g.later.len()));
        while out.len() < max {
            let (s, origin) = match g.due.pop_front() {
                Some(e) => e,
                None => match g.later.front() {
                    Some((_, at)) if u64::from(*at) + first_check.as_secs() <= now => {
                        match g.later.pop_front() {
                            Some((s, _)) => (s, Origin::Triggered),
                            None => break,
                        }
                    }
                    _ => break,
                },
            };
            if g.has(self.hasher.hash_one(&s.key), &s.key) {
                out.push((s.key.clone(), origin));
            }
        }
        out
    }

    /// Queues `key` to be checked again at the next sweep (missing once more, or a read that
    /// could not tell), if it is still pending.
    pub(crate) fn check_again(&self, key: P::Key, origin: Origin) {
        let hash = self.hasher.hash_one(&key);
        let mut g = self.inner.lock();
        if let Some(s) = g.slots.find(hash, |s| s.key == key).cloned() {
            g.due.push_back((s, origin));
        }
    }

    /// Whether `key` has a waiter.
    pub(crate) fn is_pending(&self, key: &P::Key) -> bool {
        self.inner.lock().has(self.hasher.hash_one(key), key)
    }

    /// Keys queued for the sweep (tests check the queue stays bounded).
    #[cfg(test)]
    pub(crate) fn unchecked_len(&self) -> usize {
        let g = self.inner.lock();
        g.due.len() + g.later.len()
    }

    /// Whether anyone waits.
    pub(crate) fn has_waiters(&self) -> bool {
        self.inner.lock().keys > 0
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

    #[tokio::test(start_paused = true)]
    async fn the_sweep_takes_given_keys_at_once_triggered_ones_late_each_once_and_stays_bounded() {
        use std::time::Duration;
        let r = KeyedRegistry::<Swept>::default();
        let closed = || Error::closed("t");
        let first = Duration::from_secs(60);
        let mut held = Vec::new();
        for k in ["a", "b", "c"] {
            held.push(
                r.wait_swept(k.to_string(), Some(Origin::Triggered), closed)
                    .expect("add"),
            );
        }
        held.push(
            r.wait_swept("g".to_string(), Some(Origin::Given), closed)
                .expect("add"),
        );
        // A second waiter of a triggered key does not make it a given one.
        let _second = r
            .wait_swept("a".to_string(), Some(Origin::Given), closed)
            .expect("add");
        r.deliver("b".to_string());
        assert_eq!(
            r.take_unchecked(5, first),
            [("g".to_string(), Origin::Given)],
            "a given id at once, triggered ones not before they have waited"
        );
        tokio::time::advance(first).await;
        assert_eq!(
            r.take_unchecked(5, first),
            [
                ("a".to_string(), Origin::Triggered),
                ("c".to_string(), Origin::Triggered)
            ],
            "oldest first, delivered skipped, once per key"
        );
        assert!(
            r.take_unchecked(5, first).is_empty(),
            "each key is taken once"
        );
        r.check_again("c".to_string(), Origin::Triggered);
        r.check_again("b".to_string(), Origin::Triggered);
        assert_eq!(
            r.take_unchecked(5, first),
            [("c".to_string(), Origin::Triggered)],
            "a key checked again if still pending, with its origin"
        );
        let unswept = KeyedRegistry::<Ids>::default();
        let _w = unswept
            .wait_swept("x".to_string(), Some(Origin::Given), closed)
            .expect("add");
        let _v = r.wait("plain".to_string(), closed).expect("add");
        assert!(
            unswept.take_unchecked(1, Duration::ZERO).is_empty()
                && r.take_unchecked(5, Duration::ZERO).is_empty(),
            "a registry that is not swept, or a wait without an origin, queues nothing"
        );
        // Many short waits: delivered keys never pile up past twice the pending count.
        for i in 0..10_000 {
            let k = format!("k{i}");
            let _w = r
                .wait_swept(k.clone(), Some(Origin::Triggered), closed)
                .expect("add");
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
        let (_w, arm) = r.wait("run-a".into(), || Error::closed("t")).expect("add");
        assert!(arm, "nothing published: the caller arms a stream");
        let (g1, g2) = (1, 2);
        let (old, _old_rx) = mpsc::unbounded_channel();
        let (new, mut new_rx) = mpsc::unbounded_channel();
        assert_eq!(r.publish(g1, old, false), 1);
        assert_eq!(
            r.publish(g2, new, false),
            1,
            "the pending key is replayed on the new stream"
        );
        r.unpublish(g1); // the old reader ends late
        let (_w2, arm) = r.wait("run-b".into(), || Error::closed("t")).expect("add");
        assert!(!arm, "the newer stream is still published");
        let (_w3, arm) = r.wait("run-a".into(), || Error::closed("t")).expect("add");
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
        let (_w4, arm) = r.wait("run-c".into(), || Error::closed("t")).expect("add");
        assert!(arm, "its own generation unpublishes it");
    }

    /// A probing stream carries, after the pending keys, the first key ever answered (a run
    /// that ended), so an engine that serves it answers at once; a stream that does not probe,
    /// or a registry that has answered nothing, carries only the pending keys.
    #[tokio::test]
    async fn a_probing_stream_carries_an_answered_key_after_the_pending_ones() {
        let r = KeyedRegistry::<Ids>::default();
        let closed = || Error::closed("t");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _w = r.wait("pending".into(), closed).expect("add");
        assert!(!r.probes(), "nothing answered yet");
        assert_eq!(r.publish(1, tx, true), 1);
        assert_eq!(rx.try_recv().ok().as_deref(), Some("pending"));
        assert!(rx.try_recv().is_err(), "no probe before an answer");
        let (_e, _) = r.wait("ended".into(), closed).expect("add");
        r.deliver("ended".into());
        r.deliver("pending".into());
        assert!(r.probes());
        let _w2 = r.wait("next".into(), closed).expect("add");
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert_eq!(r.publish(2, tx, true), 1, "the probe is not a replayed key");
        let sent: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(
            sent,
            ["next", "ended"],
            "the first answered key, after the pending"
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        r.publish(3, tx, false);
        let sent: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(sent, ["next"], "a kind that does not probe sends no probe");
    }

    #[tokio::test]
    async fn removing_a_waiter_twice_never_removes_a_later_waiter_of_the_same_key() {
        let r = KeyedRegistry::<Ids>::default();
        let key: String = "run-a".into();
        let (first, _) = r.wait(key.clone(), || Error::closed("t")).expect("add");
        let first_slot = first.slot.clone();
        drop(first);
        assert_eq!(r.pending(), 0, "the dropped waiter took its key with it");
        let (second, _) = r.wait(key.clone(), || Error::closed("t")).expect("add");
        r.remove(&first_slot); // a late guard of the first waiter runs again
        assert_eq!(r.pending(), 1, "the second waiter is still registered");
        r.deliver("run-a".into());
        assert_eq!(second.await.expect("delivered").expect("ok"), "run-a");
    }

    #[tokio::test]
    async fn every_waiter_of_a_key_gets_its_reply_once_and_a_dropped_one_takes_only_itself() {
        let r = KeyedRegistry::<Ids>::default();
        let closed = || Error::closed("t");
        let (a1, arm) = r.wait("a".into(), closed).expect("add");
        assert!(arm);
        let (a2, _) = r.wait("a".into(), closed).expect("add");
        let (a3, _) = r.wait("a".into(), closed).expect("add");
        let (b, _) = r.wait("b".into(), closed).expect("add");
        assert_eq!(r.pending(), 2, "keys, not waiters");
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert_eq!(r.publish(1, tx, false), 2, "each key replayed once");
        assert_eq!((rx.try_recv().is_ok(), rx.try_recv().is_ok()), (true, true));
        assert!(rx.try_recv().is_err(), "no key twice");
        let mut keys = r.pending_keys();
        keys.sort();
        assert_eq!(keys, ["a", "b"]);
        drop(a2);
        assert_eq!(r.pending(), 2, "a still has waiters");
        r.deliver("a".into());
        assert_eq!(r.pending(), 1);
        assert_eq!(a1.await.expect("answered").expect("ok"), "a");
        assert_eq!(a3.await.expect("answered").expect("ok"), "a");
        r.deliver("a".into()); // a late duplicate reaches no one
        r.fail_key(&"b".into(), || Error::closed("failed"));
        assert!(b.await.expect("answered").is_err());
        assert!(!r.has_waiters());
        assert_eq!(r.delivered.load(std::sync::atomic::Ordering::Relaxed), 2);
        // Invariant 7: a waiter is its registry, its slot and a flag.
        assert_eq!(
            std::mem::size_of::<Waiter<'_, Ids>>(),
            3 * std::mem::size_of::<usize>()
        );
    }

    /// Replies that carry a payload beside their key, to tell two replies of one key apart.
    struct Tagged;
    impl Keyed for Tagged {
        type Key = String;
        type Req = String;
        type Resp = (String, u32);
        fn request(key: &String) -> String {
            key.clone()
        }
        fn key_of(resp: &(String, u32)) -> String {
            resp.0.clone()
        }
        fn stopped_error(key: &String, why: &str) -> Error {
            Error::closed("t").with_detail(format!("{key}: {why}"))
        }
    }

    #[tokio::test]
    async fn a_burst_answers_every_waiter_of_each_key_once_with_its_first_reply() {
        let r = KeyedRegistry::<Tagged>::default();
        let closed = || Error::closed("t");
        let (a1, _) = r.wait("a".into(), closed).expect("add");
        let (a2, _) = r.wait("a".into(), closed).expect("add");
        let (b, _) = r.wait("b".into(), closed).expect("add");
        let (c, _) = r.wait("c".into(), closed).expect("add");
        // "a" twice in one burst: its waiters take the first; the second reaches no one, as
        // two single deliveries would do.
        let burst = [("a", 1), ("zz", 2), ("b", 3), ("a", 4)].map(|(k, n)| (k.to_string(), n));
        r.deliver_all(burst.into_iter());
        assert_eq!(r.delivered.load(std::sync::atomic::Ordering::Relaxed), 3);
        assert_eq!(r.pending(), 1, "only c is left");
        for w in [a1, a2] {
            assert_eq!(w.await.expect("answered").expect("ok"), ("a".into(), 1));
        }
        assert_eq!(b.await.expect("answered").expect("ok"), ("b".into(), 3));
        r.deliver_all(std::iter::empty());
        r.deliver_all([("c".to_string(), 5)].into_iter());
        assert_eq!(c.await.expect("answered").expect("ok"), ("c".into(), 5));
        assert!(!r.has_waiters());
    }

    #[tokio::test]
    async fn a_waiter_answered_before_its_first_poll_reads_the_answer_and_one_polled_first_is_woken()
     {
        let r = KeyedRegistry::<Ids>::default();
        let closed = || Error::closed("t");
        let (early, _) = r.wait("early".into(), closed).expect("add");
        r.deliver("early".into());
        assert_eq!(early.await.expect("answered").expect("ok"), "early");
        let (mut late, _) = r.wait("late".into(), closed).expect("add");
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut late).poll(&mut cx).is_pending());
        let wake_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        struct Count(Arc<std::sync::atomic::AtomicUsize>);
        impl futures::task::ArcWake for Count {
            fn wake_by_ref(me: &Arc<Self>) {
                me.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let counting = futures::task::waker(Arc::new(Count(wake_count.clone())));
        let mut cx = std::task::Context::from_waker(&counting);
        assert!(std::pin::Pin::new(&mut late).poll(&mut cx).is_pending());
        r.deliver("late".into());
        assert_eq!(
            wake_count.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the last poll's waker"
        );
        let Poll::Ready(Some(Ok(v))) = std::pin::Pin::new(&mut late).poll(&mut cx) else {
            panic!("answered")
        };
        assert_eq!(v, "late");
        drop(late);
        assert!(!r.has_waiters());
    }
}
