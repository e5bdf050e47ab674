//! The one stream mechanism: a generic actor that owns a stream's generation, opens it, reads it,
//! reports how it ended, and carries out the reconnect decision. Every stream consumer of the
//! runtime is an instance: the four listeners (worker actions, workflow runs, durable events,
//! durable task) and the caller-owned run-event subscriptions. What differs is a
//! [`StreamKind`]: what to send when a stream opens, how to read a message, what an end means,
//! whether the stream is still wanted, what to fail when it stops.
//!
//! # Shape
//!
//! ```text
//! Home<K>  (kept by whoever spawns the actor: the stream supervisor, or a subscription)
//!   kind (registry, sink ...), health, lifecycle token (a child of the runtime's),
//!   reconnect rules (no-progress count, jitter), generation counter, current reader,
//!   restart count (for health; the supervisor owns the limit), the current actor (so callers
//!   can Ensure/Reopen it)
//! StreamActor<K>  (a ractor actor; restartable: all it keeps is its phase)
//!   Ensure | Reopen | Ended{generation, report, judged} | Reconnect(generation) | Poll | Tick | Crash
//! reader task (one per generation): open -> read -> judge the end -> report to the actor
//! ```
//!
//! # Invariants
//!
//! 1. A generation number stamps every stream and comes from the home, so a restarted actor
//!    never reuses one; an end, a reconnect or an unpublish from an older generation cannot act.
//! 2. One reader at a time per listener: opening aborts the previous reader (also a crashed
//!    predecessor's, kept in the home).
//! 3. Only a closed stream opens on demand ([`Phase::opens_on_demand`]): needs that arrive while a
//!    stream is open, opening or backing off ride it or the scheduled reconnect.
//! 4. The reconnect decision is [`reconnect::decide`], applied to the home's rules; it reads
//!    status codes and types, never error text. The rules outlive actor restarts.
//! 5. Only the listener's lifecycle token ends it; after it is cancelled nothing is opened,
//!    scheduled or delivered, and timers stop.
//! 6. A stream that stops for good tells its kind ([`StreamKind::on_stop`]) so every waiter fails
//!    at once with the reason, never hangs.
//! 7. An open is never waited on blindly where a live stream can be told from a held one
//!    ([`StreamKind::answer_within`]: the runs listener probes each new stream with a run it
//!    knows has ended, which the engine answers within its 1 s tick): an open the engine took
//!    and did not answer is abandoned and opened again under the reconnect rules. The actions
//!    stream cannot be probed (the engine answers it only with work): it counts as served once
//!    its open went a moment without an error and the engine accepted a heartbeat sent after
//!    it ([`StreamKind::serving`]), and a heartbeat the engine refuses because the worker's
//!    stream is not active reopens it (`worker::heartbeat`).
//! 8. A kind that rotates ([`StreamKind::ROTATES`]: the worker's actions and the results
//!    stream) moves to a fresh stream after a period drawn with jitter ([`rotation_delay`]), so
//!    streams spread onto replicas added behind a load balancer. The new stream opens before
//!    the old one closes: the old one is read on for [`ROTATION_OVERLAP`] (what the engine
//!    routed to it before the new one took over still arrives), and the listener reads
//!    connected throughout.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::health::{HealthReporter, ListenerState};
use super::reconnect::{self, Next, ReconnectState, StreamEnd};
use super::{Phase, later};
use crate::connection::Connection;
use crate::retry::Backoff;

/// How long a probed stream's open may go unanswered before it counts as held (invariant 7):
/// five ticks of the real engine's one-second read of ended runs.
pub(crate) const OPEN_HELD_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// The default rotation period of a rotating stream (invariant 8), before jitter.
pub(crate) const ROTATE_EVERY: Duration = Duration::from_secs(15 * 60);
/// How long a rotated stream is read on after its successor opened (invariant 8), at most half
/// the rotation period.
pub(crate) const ROTATION_OVERLAP: Duration = Duration::from_secs(10);

/// A rotation's delay (a pure rule): `period` scaled by `0.75 + u / 2` for `u` in `[0, 1)`, so
/// streams opened together move at different moments (±25%).
pub(crate) fn rotation_delay(period: Duration, u: f64) -> Duration {
    period.mul_f64(0.75 + u.clamp(0.0, 1.0) / 2.0)
}

/// Whether to keep reading after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read on.
    Continue,
    /// The consumer is done (a run's final event; the worker is gone): end without reconnecting.
    Finish,
}

/// How one stream generation ended.
#[derive(Debug, Clone)]
pub(crate) struct EndReport {
    /// How it ended (or failed to open).
    pub end: StreamEnd,
    /// Messages read on it.
    pub messages: u64,
    /// Whether it made progress (a message, or open [`reconnect::HEALTHY_STREAM`]).
    pub progressed: bool,
    /// The error, for health and logs (never used for decisions).
    pub error: String,
    /// Whether the stream opened (an end that is a refusal to open has `opened == false`).
    pub opened: bool,
}

/// What an end means to its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judged {
    /// Apply the reconnect rules to this end.
    Decide(StreamEnd),
    /// The consumer is done: stop without reconnecting.
    Finish,
}

/// What differs between stream consumers.
pub(crate) trait StreamKind: Send + Sync + Sized + 'static {
    /// A message read from the stream.
    type Item: Send + 'static;
    /// Name in logs, and the salt of the jitter generator.
    const NAME: &'static str;
    /// Whether pending work is polled while the stream stays down ([`StreamKind::poll`]).
    const POLLS: bool = false;
    /// A periodic tick while the listener lives ([`StreamKind::on_tick`]).
    const TICK: Option<Duration> = None;
    /// Whether the stream's life ends when the reconnect rules stop it (a caller-owned
    /// subscription ends; a listener stays, and a new need tries again).
    const ENDS_ON_STOP: bool = false;
    /// Whether the stream moves to a fresh one every rotation period (invariant 8). Only for a
    /// kind whose messages may come on two streams at once for a moment, and whose new stream
    /// takes over from the old without failing what is in flight on it.
    const ROTATES: bool = false;

    /// Opens the stream of `generation`: whatever must be sent when a stream opens (registration,
    /// replay of pending subscriptions) happens here.
    fn open(
        &self,
        conn: &Connection,
        generation: u64,
    ) -> impl Future<Output = Result<tonic::Streaming<Self::Item>, tonic::Status>> + Send;

    /// Resolves once the engine is known to serve a stream opened at `since` although it has
    /// not answered the open yet: the listener then reports itself connected. Never, by
    /// default (a stream counts as served when the engine answers it).
    fn serving(&self, _since: Instant) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// How long the engine may take to answer an open before the stream counts as held and is
    /// opened again ([`OPEN_HELD_AFTER`]); `None`: an open may wait for its answer as long as
    /// it takes (an idle stream of the real engine is answered only with its first message).
    fn answer_within(&self) -> Option<std::time::Duration> {
        None
    }

    /// Handles one message. It may wait (backpressure) but never on the actor.
    fn on_message(&self, item: Self::Item) -> impl Future<Output = Flow> + Send;

    /// Up to this many messages already read from the stream's buffer are handed over at once
    /// ([`StreamKind::on_batch`]); 1 hands each over as it is read.
    const BATCH: usize = 1;

    /// Handles the messages the stream had ready, in order (at most [`StreamKind::BATCH`];
    /// never called when that is 1). Only a kind that answers many waiters per message burst
    /// overrides it: one lock of its registry per burst, not per message. An end of the stream
    /// read while gathering is handled after the burst, as if read next, and nothing is read
    /// past it (`stream::tests::an_end_read_while_gathering_is_handled_after_its_burst`).
    fn on_batch(&self, items: &mut Vec<Self::Item>) -> impl Future<Output = Flow> + Send {
        async move {
            for item in items.drain(..) {
                if self.on_message(item).await == Flow::Finish {
                    return Flow::Finish;
                }
            }
            Flow::Continue
        }
    }

    /// The stream of `generation` ended: unpublish it and say what the end means.
    fn on_end(
        &self,
        conn: &Connection,
        generation: u64,
        report: &EndReport,
    ) -> impl Future<Output = Judged> + Send;

    /// Whether anyone needs the stream now (waiters, a running worker).
    fn wanted(&self) -> bool;

    /// The reconnect backoff.
    fn backoff(&self, conn: &Connection) -> Backoff;

    /// The stream stopped for good (`permanent`: the listener itself is stopped and refuses new
    /// work): fail everything waiting on it with `why`.
    fn on_stop(&self, why: &str, end: Option<StreamEnd>, permanent: bool);

    /// Periodic work ([`StreamKind::TICK`]).
    fn on_tick(&self) {}

    /// One polling pass over pending work while the stream is down ([`StreamKind::POLLS`]).
    fn poll(&self, _conn: &Connection) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The reconnect rules of one stream: the no-progress count and the jitter generator.
#[derive(Debug)]
pub(crate) struct ReconnectRules {
    state: ReconnectState,
    rng: rand::rngs::StdRng,
}

impl ReconnectRules {
    /// Fresh rules drawing jitter from `rng`.
    pub(crate) fn new(rng: rand::rngs::StdRng) -> Self {
        ReconnectRules {
            state: ReconnectState::default(),
            rng,
        }
    }

    /// The delay of a rotation of `period` ([`rotation_delay`], jitter from this stream's
    /// generator).
    pub(crate) fn rotation_after(&mut self, period: Duration) -> Duration {
        use rand::RngExt as _;
        rotation_delay(period, self.rng.random::<f64>())
    }

    /// The engine answers again: the backoff starts over (reconnect rule 6).
    pub(crate) fn engine_back(&mut self) {
        self.state.engine_back();
    }

    /// The decision for one end ([`reconnect::decide`]).
    pub(crate) fn decide(
        &mut self,
        end: StreamEnd,
        progressed: bool,
        wanted: bool,
        alive: bool,
        backoff: &Backoff,
    ) -> Next {
        reconnect::decide(
            &mut self.state,
            end,
            progressed,
            wanted,
            alive,
            backoff,
            &mut self.rng,
        )
    }
}

/// Messages of a stream actor.
#[derive(Debug)]
pub(crate) enum StreamMsg {
    /// Someone needs the stream: open one if none is open, opening or scheduled.
    Ensure,
    /// Drop the current stream and open a new one now (a heartbeat refused, a re-registration);
    /// ignored once the reconnect rules stopped the stream.
    Reopen,
    /// The stream of `generation` ended.
    Ended {
        /// Its generation.
        generation: u64,
        /// How.
        report: EndReport,
        /// What the kind made of it.
        judged: Judged,
    },
    /// The backoff scheduled after `generation` elapsed.
    Reconnect(u64),
    /// The stream of `generation` reached its rotation (invariant 8): open its successor.
    Rotate(u64),
    /// The engine answers again: a reconnect waiting out its backoff happens now (the old
    /// scheduled one then finds a newer generation and does nothing).
    EngineBack,
    /// Poll pending work (kinds that poll).
    Poll,
    /// Periodic tick (kinds with a tick).
    Tick,
    /// Test and chaos hook: panic inside the actor.
    #[cfg(feature = "test-hooks")]
    Crash,
}

/// What survives a stream actor's restart: kept by whoever spawns it.
pub(crate) struct Home<K: StreamKind> {
    /// The kind (its registry, sink, ...).
    pub kind: Arc<K>,
    /// Health, when the stream is one of the runtime's listeners.
    pub health: Option<Arc<HealthReporter>>,
    /// This stream's lifecycle: a child of the runtime's, so it can be stopped alone.
    pub token: CancellationToken,
    rules: Mutex<ReconnectRules>,
    generations: AtomicU64,
    reader: Mutex<Option<AbortHandle>>,
    actor: Mutex<Option<ActorRef<StreamMsg>>>,
    restarts_total: AtomicU64,
    stopped: Mutex<Option<String>>,
}

impl<K: StreamKind> std::fmt::Debug for Home<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Home")
            .field("stream", &K::NAME)
            .field("generation", &self.generations.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<K: StreamKind> Home<K> {
    /// A home for `kind`, living under `parent` (the runtime's lifecycle token).
    pub(crate) fn new(
        kind: K,
        health: Option<Arc<HealthReporter>>,
        parent: &CancellationToken,
        rng: rand::rngs::StdRng,
    ) -> Self {
        Home {
            kind: Arc::new(kind),
            health,
            token: parent.child_token(),
            rules: Mutex::new(ReconnectRules::new(rng)),
            generations: AtomicU64::new(0),
            reader: Mutex::new(None),
            actor: Mutex::new(None),
            restarts_total: AtomicU64::new(0),
            stopped: Mutex::new(None),
        }
    }

    /// Records the actor now serving this home.
    pub(crate) fn set_actor(&self, actor: ActorRef<StreamMsg>) {
        *self.actor.lock() = Some(actor);
    }

    /// The actor now serving this home.
    pub(crate) fn actor(&self) -> Option<ActorRef<StreamMsg>> {
        self.actor.lock().clone()
    }

    fn send(&self, msg: StreamMsg) {
        if let Some(a) = self.actor.lock().as_ref() {
            let _ = a.cast(msg);
        }
    }

    /// Asks for the stream (opens it if closed).
    pub(crate) fn ensure(&self) {
        self.send(StreamMsg::Ensure);
    }

    /// Asks for a fresh stream now.
    pub(crate) fn reopen(&self) {
        self.send(StreamMsg::Reopen);
    }

    /// Makes the actor panic (its supervisor restarts it).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn crash(&self) {
        self.send(StreamMsg::Crash);
    }

    /// Counts a restart of this listener's actor (its health's count; the stream supervisor
    /// owns the intensity limit).
    pub(crate) fn count_restart(&self) {
        self.restarts_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Restarts (after a crash) so far.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn restarts(&self) -> u64 {
        self.restarts_total.load(Ordering::Relaxed)
    }

    /// Stops the listener for good: its token is cancelled, its reader aborted, its actor
    /// stopped, health says why, and every waiter fails with `why` (invariant 6).
    pub(crate) fn stop_for_good(&self, why: &str) {
        *self.stopped.lock() = Some(why.to_string());
        self.stop();
        if let Some(h) = &self.health {
            h.stopped(Some(why.to_string()));
        }
        self.kind.on_stop(why, None, true);
    }

    /// Stops the listener quietly (runtime shutdown, end of a drain): nothing is failed here.
    pub(crate) fn stop(&self) {
        self.token.cancel();
        self.abort_reader();
        if let Some(a) = self.actor.lock().take() {
            a.stop(None);
        }
    }

    fn abort_reader(&self) {
        if let Some(r) = self.reader.lock().take() {
            r.abort();
        }
    }
}

/// The actor's arguments.
pub(crate) struct StreamArgs<K: StreamKind> {
    /// The connection.
    pub conn: Connection,
    /// The home.
    pub home: Arc<Home<K>>,
}

/// What the reader reads: a stream's messages, one at a time ([`tonic::Streaming`]; a scripted
/// source in tests).
pub(crate) trait Messages<T> {
    /// The next message, `Ok(None)` at the end of the stream.
    fn message(&mut self) -> impl Future<Output = Result<Option<T>, tonic::Status>> + Send;
}

impl<T: Send + 'static> Messages<T> for tonic::Streaming<T> {
    fn message(&mut self) -> impl Future<Output = Result<Option<T>, tonic::Status>> + Send {
        tonic::Streaming::message(self)
    }
}

/// How a stream read to its end: the end (`Ok` for EOF), the messages read, and whether the
/// kind finished it.
type Read = (Result<(), tonic::Status>, u64, bool);

/// Reads `stream` until it ends, the kind finishes it, or `token` is cancelled. With
/// [`StreamKind::BATCH`] over 1, the messages already in the read buffer go to
/// [`StreamKind::on_batch`] with the one awaited; an end found while gathering is handled after
/// that burst, as if read next, and nothing is read past it. `None`: the token was cancelled.
async fn pump<K: StreamKind>(
    kind: &K,
    stream: &mut impl Messages<K::Item>,
    token: &CancellationToken,
) -> Option<Read> {
    let mut messages = 0u64;
    let mut batch = Vec::with_capacity(K::BATCH);
    loop {
        let m = tokio::select! {
            m = stream.message() => m,
            _ = token.cancelled() => return None,
        };
        match m {
            Ok(Some(item)) if K::BATCH > 1 => {
                batch.push(item);
                let mut end = None;
                while batch.len() < K::BATCH {
                    match stream.message().now_or_never() {
                        Some(Ok(Some(more))) => batch.push(more),
                        Some(other) => {
                            end = Some(other);
                            break;
                        }
                        None => break,
                    }
                }
                messages += batch.len() as u64;
                if kind.on_batch(&mut batch).await == Flow::Finish {
                    return Some((Ok(()), messages, true));
                }
                match end {
                    None => {}
                    Some(Ok(_)) => return Some((Ok(()), messages, false)),
                    Some(Err(s)) => return Some((Err(s), messages, false)),
                }
            }
            Ok(Some(item)) => {
                messages += 1;
                if kind.on_message(item).await == Flow::Finish {
                    return Some((Ok(()), messages, true));
                }
            }
            Ok(None) => return Some((Ok(()), messages, false)),
            Err(s) => return Some((Err(s), messages, false)),
        }
    }
}

/// The actor's state: where the stream is. Everything else lives in the home.
pub(crate) struct StreamState<K: StreamKind> {
    conn: Connection,
    home: Arc<Home<K>>,
    phase: Phase,
    generation: u64,
    down_since: Option<Instant>,
    polling: bool,
    /// The rules stopped the stream: a reopen request does not revive it (only a new need does).
    stopped: bool,
}

/// The generic stream actor.
pub(crate) struct StreamActor<K>(PhantomData<fn() -> K>);

impl<K> Default for StreamActor<K> {
    fn default() -> Self {
        StreamActor(PhantomData)
    }
}

impl<K: StreamKind> StreamActor<K> {
    fn open(myself: &ActorRef<StreamMsg>, st: &mut StreamState<K>) {
        Self::open_as(myself, st, false);
    }

    /// Opens a stream; `rotating`: the successor of a stream that reads on (invariant 8), so
    /// the listener stays connected meanwhile.
    fn open_as(myself: &ActorRef<StreamMsg>, st: &mut StreamState<K>, rotating: bool) {
        let home = st.home.clone();
        home.abort_reader(); // invariant 2 (a rotated reader was taken out before)
        st.stopped = false;
        let generation = home.generations.fetch_add(1, Ordering::Relaxed) + 1;
        st.generation = generation;
        st.phase = Phase::Open;
        if !rotating && let Some(h) = &home.health {
            h.connecting();
        }
        let rotate_after = K::ROTATES
            .then(|| st.conn.stream_rotation())
            .flatten()
            .map(|p| home.rules.lock().rotation_after(p));
        let conn = st.conn.clone();
        let me = myself.clone();
        let task_home = home.clone();
        let task = tokio::spawn(async move {
            let home = task_home;
            let token = home.token.clone();
            let started = Instant::now();
            let held_after = home.kind.answer_within();
            let mut open = std::pin::pin!(home.kind.open(&conn, generation));
            let mut serving = std::pin::pin!(home.kind.serving(started));
            let mut serving_seen = false;
            let mut held = std::pin::pin!(async move {
                match held_after {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            });
            // invariant 8: at its rotation the successor opens; this one reads on (or waits on
            // for its answer: the real engine answers an idle actions stream only with work)
            // until the actor aborts it.
            let me_rotate = me.clone();
            let mut rotate = std::pin::pin!(async move {
                if let Some(d) = rotate_after {
                    tokio::time::sleep(d).await;
                    let _ = me_rotate.cast(StreamMsg::Rotate(generation));
                }
                std::future::pending::<()>().await
            });
            let opened = loop {
                tokio::select! {
                    r = &mut open => break r,
                    _ = &mut rotate => {}
                    _ = token.cancelled() => return,
                    // invariant 7: a stream the engine took and does not answer is opened again
                    _ = &mut held => break Err(tonic::Status::unavailable(format!(
                        "the engine took the stream and did not answer it within {:?} (a held stream); opening it again",
                        held_after.unwrap_or_default()
                    ))),
                    _ = &mut serving, if !serving_seen => {
                        serving_seen = true;
                        if let Some(h) = &home.health {
                            h.connected();
                        }
                    }
                }
            };
            let opened_ok = opened.is_ok();
            let (result, messages, finished) = match opened {
                Err(s) => (Err(s), 0, false),
                Ok(mut stream) => {
                    if let Some(h) = &home.health {
                        h.connected();
                    }
                    conn.grpc_core().note_token_accepted();
                    let read = tokio::select! {
                        r = pump(&*home.kind, &mut stream, &token) => r,
                        _ = &mut rotate => None,
                    };
                    match read {
                        Some(read) => read,
                        None => return,
                    }
                }
            };
            let report = EndReport {
                end: match &result {
                    Ok(()) => StreamEnd::Eof,
                    Err(s) => StreamEnd::Code(s.code()),
                },
                messages,
                progressed: messages > 0 || started.elapsed() >= reconnect::HEALTHY_STREAM,
                error: match &result {
                    Ok(()) => "stream ended (EOF)".to_string(),
                    Err(s) => format!("{:?}: {}", s.code(), s.message()),
                },
                opened: opened_ok,
            };
            // invariant 8: a stream rotated out (a newer generation opened while it read on)
            // ends quietly: its successor owns the listener, so its end is nobody's to judge
            // (an empty end would otherwise count towards registering the worker again).
            if home.generations.load(Ordering::Relaxed) != generation {
                return;
            }
            let judged = if finished {
                Judged::Finish
            } else {
                home.kind.on_end(&conn, generation, &report).await
            };
            if !token.is_cancelled() {
                let _ = me.cast(StreamMsg::Ended {
                    generation,
                    report,
                    judged,
                });
            }
        });
        *home.reader.lock() = Some(task.abort_handle());
    }

    fn stop_for_now(st: &mut StreamState<K>, why: String, end: Option<StreamEnd>) {
        st.stopped = true;
        if let Some(h) = &st.home.health {
            h.stopped(Some(why.clone()));
        }
        st.home.kind.on_stop(&why, end, false);
        if K::ENDS_ON_STOP {
            st.home.token.cancel();
        }
    }

    fn ended(
        myself: &ActorRef<StreamMsg>,
        st: &mut StreamState<K>,
        generation: u64,
        report: EndReport,
        judged: Judged,
    ) {
        if generation != st.generation || st.phase != Phase::Open {
            return; // invariant 1
        }
        st.phase = Phase::Closed;
        *st.home.reader.lock() = None;
        let end = match judged {
            Judged::Finish => {
                // The consumer is done: this stream's life ends with it.
                st.home.token.cancel();
                myself.stop(None);
                return;
            }
            Judged::Decide(end) => end,
        };
        let ambiguous = st.conn.grpc_core().token_accepted()
            && report
                .error
                .contains(crate::retry::executor::AMBIGUOUS_REFUSAL);
        let end = reconnect::end_after_acceptance(end, ambiguous);
        let lost = match end {
            StreamEnd::Eof => true,
            StreamEnd::Code(code) => !crate::connection::watch::reached(Some(code)),
        };
        if lost {
            // The engine may be gone (an EOF is how an engine that stops ends its streams): the
            // watch probes it and says when it answers again.
            st.conn.suspect_engine();
        }
        let wanted = st.home.kind.wanted();
        let alive = !st.home.token.is_cancelled();
        let backoff = st.home.kind.backoff(&st.conn);
        let next = st
            .home
            .rules
            .lock()
            .decide(end, report.progressed, wanted, alive, &backoff);
        match next {
            Next::Reconnect { delay, attempt } => {
                if let Some(h) = &st.home.health {
                    h.reconnecting(attempt, &report.error);
                }
                st.phase = Phase::BackingOff;
                let since = *st.down_since.get_or_insert_with(Instant::now);
                later(
                    &st.home.token,
                    delay,
                    myself,
                    StreamMsg::Reconnect(generation),
                );
                if K::POLLS && !st.polling {
                    st.polling = true;
                    let wait = st.conn.backoff().poll_after.saturating_sub(since.elapsed());
                    later(&st.home.token, wait, myself, StreamMsg::Poll);
                }
            }
            Next::Idle => {
                st.down_since = None;
                if let Some(h) = &st.home.health {
                    h.idle();
                }
            }
            Next::Stop { reason } => {
                Self::stop_for_now(st, format!("{reason}: {}", report.error), Some(end));
            }
        }
    }

    fn poll(myself: &ActorRef<StreamMsg>, st: &mut StreamState<K>) {
        let connected = st
            .home
            .health
            .as_ref()
            .is_some_and(|h| matches!(h.get(), ListenerState::Connected { .. }));
        let down = st.down_since.is_some() && !connected;
        if !down || !st.home.kind.wanted() {
            st.polling = false;
            st.down_since = None;
            return;
        }
        // The next pass is scheduled when this one ends, so passes never pile up however slow
        // the engine answers.
        let (conn, home, me) = (st.conn.clone(), st.home.clone(), myself.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = home.kind.poll(&conn) => {}
                _ = home.token.cancelled() => return,
            }
            later(&home.token, conn.backoff().poll_every, &me, StreamMsg::Poll);
        });
    }
}

impl<K: StreamKind> Actor for StreamActor<K> {
    type Msg = StreamMsg;
    type State = StreamState<K>;
    type Arguments = StreamArgs<K>;

    async fn pre_start(
        &self,
        myself: ActorRef<StreamMsg>,
        args: StreamArgs<K>,
    ) -> Result<StreamState<K>, ActorProcessingErr> {
        if let Some(every) = K::TICK {
            super::every(&args.home.token, every, &myself, || StreamMsg::Tick);
        }
        // The engine watch's returns (connection/watch.rs): a reconnect waiting out its backoff
        // happens at once when the engine answers again.
        super::on_each_change(
            &args.home.token,
            args.conn.engine_returns(),
            &myself,
            || StreamMsg::EngineBack,
        );
        let mut st = StreamState {
            conn: args.conn,
            home: args.home,
            phase: Phase::Closed,
            generation: 0,
            down_since: None,
            polling: false,
            stopped: false,
        };
        // A restarted listener takes over at once when its stream is still needed.
        if st.home.kind.wanted() && !st.home.token.is_cancelled() {
            Self::open(&myself, &mut st);
        }
        Ok(st)
    }

    async fn post_stop(
        &self,
        _: ActorRef<StreamMsg>,
        st: &mut StreamState<K>,
    ) -> Result<(), ActorProcessingErr> {
        if st.home.token.is_cancelled() {
            st.home.abort_reader();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<StreamMsg>,
        msg: StreamMsg,
        st: &mut StreamState<K>,
    ) -> Result<(), ActorProcessingErr> {
        if st.home.token.is_cancelled() {
            st.home.abort_reader(); // invariant 5
            return Ok(());
        }
        match msg {
            StreamMsg::Ensure => {
                if st.phase.opens_on_demand() {
                    Self::open(&myself, st);
                }
            }
            // A stream the rules stopped (a refused token, say) stays stopped: a reopen is for a
            // stream that looks broken, not for one the engine refused.
            StreamMsg::Reopen if !st.stopped => Self::open(&myself, st),
            StreamMsg::Reopen => {}
            StreamMsg::Ended {
                generation,
                report,
                judged,
            } => Self::ended(&myself, st, generation, report, judged),
            StreamMsg::Reconnect(generation) => {
                if generation == st.generation && st.phase == Phase::BackingOff {
                    st.phase = Phase::Closed;
                    if st.home.kind.wanted() {
                        Self::open(&myself, st);
                    } else if let Some(h) = &st.home.health {
                        h.idle();
                    }
                }
            }
            StreamMsg::Rotate(generation) => {
                if generation == st.generation && st.phase == Phase::Open && !st.stopped {
                    // invariant 8: the old reader is taken out of the home, so the open does
                    // not abort it; it reads on for the overlap.
                    let old = st.home.reader.lock().take();
                    Self::open_as(&myself, st, true);
                    if let Some(old) = old {
                        let token = st.home.token.clone();
                        let overlap = st
                            .conn
                            .stream_rotation()
                            .map_or(ROTATION_OVERLAP, |p| ROTATION_OVERLAP.min(p / 2));
                        tokio::spawn(async move {
                            tokio::select! {
                                _ = tokio::time::sleep(overlap) => {}
                                _ = token.cancelled() => {}
                            }
                            old.abort();
                        });
                    }
                }
            }
            StreamMsg::EngineBack => {
                st.home.rules.lock().engine_back();
                if st.phase == Phase::BackingOff && !st.stopped && st.home.kind.wanted() {
                    Self::open(&myself, st);
                }
            }
            StreamMsg::Poll => Self::poll(&myself, st),
            StreamMsg::Tick => st.home.kind.on_tick(),
            #[cfg(feature = "test-hooks")]
            StreamMsg::Crash => panic!("{} stream actor crash requested by a test", K::NAME),
        }
        Ok(())
    }
}

/// Spawns a stream actor for `home`, linked to `supervisor` when given, and records it in the
/// home.
///
/// # Cancel safety
///
/// Not cancel safe: dropping it mid-way may leave an actor that is not recorded in the home.
pub(crate) async fn spawn<K: StreamKind>(
    conn: Connection,
    home: Arc<Home<K>>,
    supervisor: Option<ractor::ActorCell>,
) -> Result<ActorRef<StreamMsg>, ractor::SpawnErr> {
    let args = StreamArgs {
        conn,
        home: home.clone(),
    };
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, StreamActor::<K>::default(), args, s).await?,
        None => Actor::spawn(None, StreamActor::<K>::default(), args).await?,
    };
    home.set_actor(actor.clone());
    Ok(actor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// One step of a scripted stream: a message, its end, or a read that is not ready yet (the
    /// next message is still on the wire).
    enum Step {
        Item(u32),
        Eof,
        Fail,
        NotReady,
    }

    /// A stream that plays `steps`, and fails the test if it is read past its end.
    struct Scripted(VecDeque<Step>);

    impl Messages<u32> for Scripted {
        async fn message(&mut self) -> Result<Option<u32>, tonic::Status> {
            if matches!(self.0.front(), Some(Step::NotReady)) {
                self.0.pop_front();
                tokio::task::yield_now().await; // pending once: now_or_never stops here
            }
            match self.0.pop_front() {
                Some(Step::Item(n)) => Ok(Some(n)),
                Some(Step::Eof) => Ok(None),
                Some(Step::Fail) => Err(tonic::Status::unavailable("scripted")),
                Some(Step::NotReady) | None => panic!("read past the end of the stream"),
            }
        }
    }

    /// Records what it is handed, burst by burst; finishes at `finish_at`. Bursts of `B`.
    #[derive(Default)]
    struct Recorder<const B: usize> {
        handed: Mutex<Vec<Vec<u32>>>,
        finish_at: Option<u32>,
    }

    impl<const B: usize> Recorder<B> {
        fn flow(&self, items: &[u32]) -> Flow {
            self.handed.lock().push(items.to_vec());
            match self.finish_at {
                Some(f) if items.contains(&f) => Flow::Finish,
                _ => Flow::Continue,
            }
        }
    }

    impl<const B: usize> StreamKind for Recorder<B> {
        type Item = u32;
        const NAME: &'static str = "scripted";
        const BATCH: usize = B;

        async fn open(
            &self,
            _: &Connection,
            _: u64,
        ) -> Result<tonic::Streaming<u32>, tonic::Status> {
            Err(tonic::Status::unimplemented(
                "a scripted kind is pumped, not opened",
            ))
        }
        async fn on_message(&self, item: u32) -> Flow {
            self.flow(&[item])
        }
        async fn on_batch(&self, items: &mut Vec<u32>) -> Flow {
            let flow = self.flow(items);
            items.clear();
            flow
        }
        async fn on_end(&self, _: &Connection, _: u64, _: &EndReport) -> Judged {
            Judged::Finish
        }
        fn wanted(&self) -> bool {
            false
        }
        fn backoff(&self, _: &Connection) -> Backoff {
            crate::retry::backoff::UNARY_BACKOFF
        }
        fn on_stop(&self, _: &str, _: Option<StreamEnd>, _: bool) {}
    }

    async fn pumped<const B: usize>(kind: &Recorder<B>, steps: Vec<Step>) -> (Read, Vec<Vec<u32>>) {
        let read = pump(kind, &mut Scripted(steps.into()), &CancellationToken::new())
            .await
            .expect("not cancelled");
        (read, kind.handed.lock().clone())
    }

    #[tokio::test]
    async fn an_end_read_while_gathering_is_handled_after_its_burst() {
        use Step::*;
        // Everything is in the buffer: one burst, then the EOF, and no read after it.
        let ((end, messages, finished), handed) = pumped(
            &Recorder::<64>::default(),
            vec![Item(1), Item(2), Item(3), Eof],
        )
        .await;
        assert!(end.is_ok() && !finished, "an EOF: the kind judges it");
        assert_eq!((messages, handed), (3, vec![vec![1, 2, 3]]));

        // A failure found while gathering is the end, with its status, after the burst.
        let ((end, messages, _), handed) =
            pumped(&Recorder::<64>::default(), vec![Item(1), Item(2), Fail]).await;
        let status = end.expect_err("the stream failed");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!((messages, handed), (2, vec![vec![1, 2]]));

        // A burst stops where the buffer does, and at BATCH; the end waits behind both.
        let ((end, messages, _), handed) = pumped(
            &Recorder::<2>::default(),
            vec![Item(1), NotReady, Item(2), Item(3), Item(4), Eof],
        )
        .await;
        assert!(end.is_ok());
        assert_eq!((messages, handed), (4, vec![vec![1], vec![2, 3], vec![4]]));

        // A burst that finishes the kind ends the read: the end behind it is never looked at.
        let kind = Recorder::<64> {
            finish_at: Some(2),
            ..Default::default()
        };
        let ((end, messages, finished), handed) = pumped(&kind, vec![Item(1), Item(2), Fail]).await;
        assert!(end.is_ok() && finished, "finished by the kind, not failed");
        assert_eq!((messages, handed), (2, vec![vec![1, 2]]));
    }

    #[tokio::test]
    async fn a_kind_without_bursts_is_handed_each_message_as_it_is_read() {
        use Step::*;
        let ((end, messages, finished), handed) =
            pumped(&Recorder::<1>::default(), vec![Item(1), Item(2), Eof]).await;
        assert!(end.is_ok() && !finished);
        assert_eq!((messages, handed), (2, vec![vec![1], vec![2]]));
    }

    #[tokio::test]
    async fn a_cancelled_token_ends_the_read_with_nothing_to_report() {
        let token = CancellationToken::new();
        token.cancel();
        let kind = Recorder::<64>::default();
        // The stream never answers: only the token can end the read.
        let mut never = Scripted(VecDeque::from([Step::NotReady, Step::NotReady]));
        assert!(pump(&kind, &mut never, &token).await.is_none());
        assert!(kind.handed.lock().is_empty());
    }

    #[test]
    fn a_rotation_falls_within_a_quarter_of_its_period_and_seeded_streams_spread() {
        let p = Duration::from_secs(100);
        assert_eq!(rotation_delay(p, 0.0), Duration::from_secs(75));
        assert_eq!(rotation_delay(p, 0.5), Duration::from_secs(100));
        assert_eq!(rotation_delay(p, 1.0), Duration::from_secs(125));
        assert_eq!(rotation_delay(p, 7.0), Duration::from_secs(125), "clamped");
        use rand::SeedableRng as _;
        let mut rules = ReconnectRules::new(rand::rngs::StdRng::seed_from_u64(7));
        let delays: Vec<Duration> = (0..20).map(|_| rules.rotation_after(p)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= Duration::from_secs(75) && *d <= Duration::from_secs(125))
        );
        let (lo, hi) = (delays.iter().min(), delays.iter().max());
        assert!(
            lo.zip(hi)
                .is_some_and(|(lo, hi)| *hi - *lo > Duration::from_secs(20)),
            "streams opened together move at different moments: {delays:?}"
        );
    }
}
