//! Whether the engine answers again: one probe loop for the whole runtime while it may not
//! (docs/contract.md §3, "Engine watch").
//!
//! A listener whose stream ends or fails to open because the engine could not be reached asks
//! the watch to look ([`Connection::suspect_engine`](super::Connection::suspect_engine)). The
//! watch probes the engine with a cheap read (GetVersion) until it answers, and publishes the
//! engine's return; every stream actor hears it and opens at once if it waits out a backoff
//! (reconnect rule 6). Without it an engine killed and back in two seconds, between two
//! heartbeats, left the listeners waiting out backoffs the failed opens had grown (3.4 to 3.7 s
//! after the real engine's return, where our bound is 3 s).
//!
//! # Invariants
//!
//! 1. One probe loop at a time, however many listeners ask ([`EngineWatch::begin`]).
//! 2. The engine is *back* only when a probe that could not reach it is followed by one it
//!    answers ([`reached`]: any answer of the server, a refusal included). A first probe that
//!    is answered publishes nothing: an engine that answers reads but ends a stream keeps that
//!    listener on its backoff, so a stream the engine refuses is never reopened in a hot loop.
//! 3. Probes go every [`PROBE_EVERY`] (less a jitter of up to a half, so runtimes that lost the
//!    engine together do not come back in step) for the first [`FAST_PROBES`] failures, then
//!    every [`SLOW_PROBE_EVERY`], until the engine answers or the runtime shuts down.
//! 4. Each return is published once, as a new epoch of a `watch` channel: a listener that was
//!    not waiting misses nothing it needed, and one that restarts subscribes afresh.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::RngExt as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::Code;

/// The gap between probes while the engine does not answer (invariant 3).
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Failed probes in a row at [`PROBE_EVERY`] before [`SLOW_PROBE_EVERY`] applies.
pub(crate) const FAST_PROBES: u32 = 10;
/// The gap between probes of a long outage.
pub(crate) const SLOW_PROBE_EVERY: Duration = Duration::from_secs(5);
/// A probe's own deadline.
pub(crate) const PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// Whether a call that failed with `code` could not reach the engine (rather than was answered
/// by it, a refusal included). Shared by the watch's probes and the worker's heartbeat.
pub(crate) fn unreachable(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::DeadlineExceeded)
}

/// Whether a probe's outcome is an answer of the engine (invariant 2): `None` for success,
/// the code of a failure otherwise. An `UNKNOWN` is a transport error that h2 reports without
/// a status, not an answer.
pub(crate) fn reached(failed: Option<Code>) -> bool {
    match failed {
        None => true,
        Some(code) => !unreachable(code) && code != Code::Unknown,
    }
}

/// The gap after the `failed_in_a_row`-th failed probe (pure, invariant 3); `u` in `[0, 1)`
/// draws the jitter.
pub(crate) fn probe_gap(failed_in_a_row: u32, u: f64) -> Duration {
    if failed_in_a_row <= FAST_PROBES {
        PROBE_EVERY.mul_f64(1.0 - u.clamp(0.0, 1.0) / 2.0)
    } else {
        SLOW_PROBE_EVERY
    }
}

/// The watch's state: whether a probe loop runs, and the epochs of the engine's returns.
#[derive(Debug)]
pub(crate) struct EngineWatch {
    probing: AtomicBool,
    back: watch::Sender<u64>,
}

impl Default for EngineWatch {
    fn default() -> Self {
        EngineWatch {
            probing: AtomicBool::new(false),
            back: watch::Sender::new(0),
        }
    }
}

impl EngineWatch {
    /// The engine's returns from now on (a new value each time it is back).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.back.subscribe()
    }

    /// Publishes a return of the engine (invariant 4), seen by the watch's probe.
    pub(crate) fn back(&self) {
        self.back.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// How many returns were published.
    #[cfg(test)]
    pub(crate) fn returns(&self) -> u64 {
        *self.back.borrow()
    }

    /// Whether a probe loop runs (the engine could not be reached and has not answered since).
    pub(crate) fn probing(&self) -> bool {
        self.probing.load(Ordering::Acquire)
    }

    /// Takes the one probe loop (invariant 1): `false` when one runs already.
    pub(crate) fn begin(&self) -> bool {
        !self.probing.swap(true, Ordering::AcqRel)
    }

    fn end(&self) {
        self.probing.store(false, Ordering::Release);
    }
}

/// The probe loop (the mechanism; [`reached`] and [`probe_gap`] decide): probes at once, then
/// after each failure at the gap, until the engine answers or `life` ends; publishes a return
/// when an answer follows a failure (invariant 2). The caller has won [`EngineWatch::begin`].
pub(crate) async fn probe_until_answered<P, F>(
    watch: &EngineWatch,
    life: &CancellationToken,
    rng: &mut impl rand::Rng,
    mut probe: P,
) where
    P: FnMut() -> F,
    F: Future<Output = Option<Code>>,
{
    let mut failed = 0u32;
    loop {
        let outcome = tokio::select! {
            o = probe() => o,
            _ = life.cancelled() => break,
        };
        if reached(outcome) {
            if failed > 0 {
                tracing::info!(probes = failed + 1, "the engine answers again");
                watch.back();
            }
            break;
        }
        failed = failed.saturating_add(1);
        let gap = probe_gap(failed, rng.random::<f64>());
        tokio::select! {
            _ = tokio::time::sleep(gap) => {}
            _ = life.cancelled() => break,
        }
    }
    watch.end();
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng as _;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;
    use tokio::time::Instant;

    #[test]
    fn only_an_answer_of_the_server_counts_as_reached() {
        assert!(reached(None));
        for code in [Code::Unimplemented, Code::Unauthenticated, Code::Internal] {
            assert!(reached(Some(code)), "{code:?} is an answer");
        }
        for code in [Code::Unavailable, Code::DeadlineExceeded, Code::Unknown] {
            assert!(!reached(Some(code)), "{code:?} is not");
        }
    }

    #[test]
    fn probes_come_within_a_second_for_ten_failures_then_every_five() {
        for n in 1..=FAST_PROBES {
            assert_eq!(probe_gap(n, 0.0), PROBE_EVERY);
            assert_eq!(probe_gap(n, 0.999_999), PROBE_EVERY.mul_f64(0.500_000_5));
        }
        assert_eq!(probe_gap(FAST_PROBES + 1, 0.3), SLOW_PROBE_EVERY);
        assert_eq!(probe_gap(u32::MAX, 0.3), SLOW_PROBE_EVERY);
    }

    /// A scripted engine: the probes' outcomes in order, the last one repeated.
    fn scripted(
        outcomes: Vec<Option<Code>>,
    ) -> (
        Arc<AtomicU32>,
        impl FnMut() -> std::future::Ready<Option<Code>>,
    ) {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let probe = move || {
            let n = c.fetch_add(1, Ordering::SeqCst) as usize;
            std::future::ready(outcomes[n.min(outcomes.len() - 1)])
        };
        (calls, probe)
    }

    /// Invariants 2 and 3: two failed probes a second apart at most, then an answer: one
    /// return, published at the third probe.
    #[tokio::test(start_paused = true)]
    async fn an_answer_after_failed_probes_is_one_return() {
        let watch = EngineWatch::default();
        let mut rx = watch.subscribe();
        let (calls, probe) = scripted(vec![Some(Code::Unavailable), Some(Code::Unavailable), None]);
        assert!(watch.begin());
        let t0 = Instant::now();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        probe_until_answered(&watch, &CancellationToken::new(), &mut rng, probe).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(t0.elapsed() <= 2 * PROBE_EVERY, "{:?}", t0.elapsed());
        assert!(t0.elapsed() >= PROBE_EVERY, "{:?}", t0.elapsed());
        assert!(rx.has_changed().expect("open"), "the return is published");
        assert_eq!(*rx.borrow_and_update(), 1);
        assert!(watch.begin(), "the loop is over: a new one may start");
    }

    /// Invariant 2: an engine that answers the first probe was never lost: nothing is published.
    #[tokio::test(start_paused = true)]
    async fn a_first_probe_answered_publishes_nothing() {
        let watch = EngineWatch::default();
        let (calls, probe) = scripted(vec![Some(Code::Unimplemented)]);
        assert!(watch.begin());
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        probe_until_answered(&watch, &CancellationToken::new(), &mut rng, probe).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(watch.returns(), 0);
    }

    /// Invariant 3: a long outage is probed ten times within ten seconds, then every five.
    #[tokio::test(start_paused = true)]
    async fn a_long_outage_is_probed_less_often_after_ten_failures() {
        let watch = EngineWatch::default();
        let mut script = vec![Some(Code::Unavailable); 14];
        script.push(None);
        let (calls, probe) = scripted(script);
        assert!(watch.begin());
        let t0 = Instant::now();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        probe_until_answered(&watch, &CancellationToken::new(), &mut rng, probe).await;
        assert_eq!(calls.load(Ordering::SeqCst), 15);
        let slow = SLOW_PROBE_EVERY * 4;
        assert!(t0.elapsed() >= slow + PROBE_EVERY * 5, "{:?}", t0.elapsed());
        assert!(
            t0.elapsed() <= slow + PROBE_EVERY * 10,
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(watch.returns(), 1);
    }

    /// Invariant 1: while a loop runs no second one starts; shutdown ends it, publishing
    /// nothing.
    #[tokio::test(start_paused = true)]
    async fn one_loop_at_a_time_and_shutdown_ends_it() {
        let watch = Arc::new(EngineWatch::default());
        let life = CancellationToken::new();
        let (calls, probe) = scripted(vec![Some(Code::Unavailable)]);
        assert!(watch.begin());
        let (w, l) = (watch.clone(), life.clone());
        let looping = tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            probe_until_answered(&w, &l, &mut rng, probe).await;
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!watch.begin(), "a loop runs");
        assert!(calls.load(Ordering::SeqCst) >= 3);
        life.cancel();
        looping.await.expect("the loop ends");
        assert_eq!(watch.returns(), 0);
        assert!(watch.begin(), "ended");
    }
}
