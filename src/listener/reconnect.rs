//! The reconnect decision shared by every listener (docs/contract.md §3), as a pure function.
//!
//! # Rules
//!
//! 1. Only the lifecycle token ends a listener: CANCELLED on a stream whose token is alive is a
//!    transport event (a proxy's RST_STREAM), so it reconnects.
//! 2. Transient ends ([`TRANSIENT_STREAM_CODES`], connection loss, EOF) reconnect without limit,
//!    with full-jitter backoff growing over consecutive ends without progress.
//! 3. Permanent codes ([`PERMANENT_STREAM_CODES`]) stop at once; any other code stops after
//!    [`MAX_NO_PROGRESS`] consecutive ends without progress.
//! 4. *Progress* is a message received or a stream that stayed open [`HEALTHY_STREAM`]; a connect
//!    that fails right after opening is not progress (so a failing server is never a hot loop).
//! 5. A listener that nobody needs (no waiter) goes idle instead of reconnecting.
//! 6. The backoff grows over the ends since the engine was last known back
//!    ([`ReconnectState::engine_back`]: the engine watch's answer after failed probes), not over the
//!    whole outage: an engine that answers heartbeats but refuses a stream for a moment as it
//!    comes up is tried again after a second, not after the 16-30 s the outage grew the backoff
//!    to. The stop rule (3) still counts every end without progress.

use std::time::Duration;

use tonic::Code;

use crate::retry::backoff::Backoff;

/// Codes that reconnect without limit.
pub(crate) const TRANSIENT_STREAM_CODES: [Code; 6] = [
    Code::Unavailable,
    Code::Internal,
    Code::DeadlineExceeded,
    Code::ResourceExhausted,
    Code::Cancelled,
    Code::Unknown, // connection loss surfaces as UNKNOWN from hyper/h2 in some paths
];

/// Codes that stop a listener at once.
pub(crate) const PERMANENT_STREAM_CODES: [Code; 3] = [
    Code::Unauthenticated,
    Code::PermissionDenied,
    Code::InvalidArgument,
];

/// The real engine's ambiguous UNAUTHENTICATED (`invalid auth token`, answered for any error of
/// its token check, a database it cannot reach included: `grpc/middleware/auth.go`) from an
/// engine that has accepted the token before is not taken as a permanent refusal (a pure
/// decision; `ambiguous` says both hold), or a restart of its PostgreSQL would stop every
/// listener for good. It ends as a code that is neither
/// transient nor permanent: the listener reconnects with backoff and stops after
/// [`MAX_NO_PROGRESS`] such ends in a row (a revoked token).
pub(crate) fn end_after_acceptance(end: StreamEnd, ambiguous: bool) -> StreamEnd {
    match end {
        StreamEnd::Code(Code::Unauthenticated) if ambiguous => StreamEnd::Code(Code::Aborted),
        other => other,
    }
}

/// Consecutive ends without progress after which a non-transient error stops the listener.
pub(crate) const MAX_NO_PROGRESS: u32 = 10;

/// How long a stream must stay open to count as progress.
pub(crate) const HEALTHY_STREAM: Duration = Duration::from_secs(30);

/// How a stream ended (or failed to open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The server closed it with OK.
    Eof,
    /// It ended (or failed to open) with this code.
    Code(Code),
}

/// What the listener should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Open a new stream after `delay`.
    Reconnect {
        /// The backoff delay.
        delay: Duration,
        /// Consecutive ends without progress so far.
        attempt: u32,
    },
    /// Nobody needs the stream: stay closed until someone does.
    Idle,
    /// Stop for good and surface the error.
    Stop {
        /// Why.
        reason: &'static str,
    },
}

/// The per-listener counters the decision reads and updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReconnectState {
    /// Consecutive stream ends without progress.
    pub no_progress: u32,
    /// `no_progress` when the engine was last known back (rule 6).
    pub back_at: u32,
}

impl ReconnectState {
    /// The engine answers again (rule 6): the backoff starts over from here.
    pub(crate) fn engine_back(&mut self) {
        self.back_at = self.no_progress;
    }
}

/// Decides what follows a stream end.
pub(crate) fn decide<R: rand::Rng + ?Sized>(
    state: &mut ReconnectState,
    end: StreamEnd,
    progressed: bool,
    wanted: bool,
    lifecycle_alive: bool,
    backoff: &Backoff,
    rng: &mut R,
) -> Next {
    if !lifecycle_alive {
        return Next::Stop {
            reason: "runtime shut down",
        };
    }
    if progressed {
        state.no_progress = 0;
        state.back_at = 0;
    }
    if let StreamEnd::Code(c) = end
        && PERMANENT_STREAM_CODES.contains(&c)
    {
        return Next::Stop {
            reason: "permanent error",
        };
    }
    if !wanted {
        return Next::Idle;
    }
    let transient = match end {
        StreamEnd::Eof => true,
        StreamEnd::Code(c) => TRANSIENT_STREAM_CODES.contains(&c),
    };
    let attempt = state.no_progress.saturating_sub(state.back_at);
    state.no_progress = state.no_progress.saturating_add(1);
    if !transient && state.no_progress >= MAX_NO_PROGRESS {
        return Next::Stop {
            reason: "no progress after repeated errors",
        };
    }
    Next::Reconnect {
        delay: backoff.delay(attempt, rng),
        attempt: state.no_progress,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ambiguous_unauthenticated_after_acceptance_does_not_stop_at_once() {
        let refused = StreamEnd::Code(Code::Unauthenticated);
        assert_eq!(end_after_acceptance(refused, false), refused);
        let later = end_after_acceptance(refused, true);
        assert!(
            !PERMANENT_STREAM_CODES.contains(&Code::Aborted)
                && !TRANSIENT_STREAM_CODES.contains(&Code::Aborted)
                && later == StreamEnd::Code(Code::Aborted),
            "bounded by MAX_NO_PROGRESS, not at once and not forever"
        );
        assert_eq!(
            end_after_acceptance(StreamEnd::Eof, true),
            StreamEnd::Eof,
            "other ends unchanged"
        );
    }

    use super::*;
    use crate::retry::backoff::STREAM_BACKOFF;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn run(end: StreamEnd, progressed: bool, n: usize) -> Vec<Next> {
        let mut s = ReconnectState::default();
        let mut rng = StdRng::seed_from_u64(1);
        (0..n)
            .map(|_| {
                decide(
                    &mut s,
                    end,
                    progressed,
                    true,
                    true,
                    &STREAM_BACKOFF,
                    &mut rng,
                )
            })
            .collect()
    }

    #[test]
    fn transient_ends_reconnect_forever_with_growing_windows() {
        let out = run(StreamEnd::Code(Code::Unavailable), false, 50);
        for (i, n) in out.iter().enumerate() {
            match n {
                Next::Reconnect { delay, .. } => assert!(*delay <= STREAM_BACKOFF.window(i as u32)),
                other => panic!("{other:?}"),
            }
        }
        assert!(
            run(StreamEnd::Eof, false, 50)
                .iter()
                .all(|n| matches!(n, Next::Reconnect { .. }))
        );
        // CANCELLED with a live lifecycle is a transport event.
        assert!(
            run(StreamEnd::Code(Code::Cancelled), false, 50)
                .iter()
                .all(|n| matches!(n, Next::Reconnect { .. }))
        );
    }

    #[test]
    fn permanent_codes_stop_at_once() {
        for c in PERMANENT_STREAM_CODES {
            assert!(
                matches!(run(StreamEnd::Code(c), false, 1)[0], Next::Stop { .. }),
                "{c:?}"
            );
        }
    }

    #[test]
    fn other_codes_stop_after_ten_without_progress_but_progress_resets() {
        let out = run(StreamEnd::Code(Code::NotFound), false, 12);
        let stops = out.iter().position(|n| matches!(n, Next::Stop { .. }));
        assert_eq!(stops, Some(9), "the 10th consecutive failure stops");
        assert!(
            run(StreamEnd::Code(Code::NotFound), true, 30)
                .iter()
                .all(|n| matches!(n, Next::Reconnect { .. }))
        );
    }

    #[test]
    fn unwanted_streams_go_idle_and_shutdown_stops() {
        let mut s = ReconnectState::default();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            decide(
                &mut s,
                StreamEnd::Eof,
                false,
                false,
                true,
                &STREAM_BACKOFF,
                &mut rng
            ),
            Next::Idle
        );
        assert!(matches!(
            decide(
                &mut s,
                StreamEnd::Eof,
                false,
                true,
                false,
                &STREAM_BACKOFF,
                &mut rng
            ),
            Next::Stop { .. }
        ));
    }

    /// Rule 6: after an outage of six failed opens the backoff window is 30 s; once the engine is
    /// known back, the next failed open waits at most the base again, and the stop rule still
    /// counts every end.
    #[test]
    fn once_the_engine_is_back_the_backoff_starts_over_and_the_stop_rule_keeps_counting() {
        let mut s = ReconnectState::default();
        let mut rng = StdRng::seed_from_u64(7);
        let unavailable = StreamEnd::Code(Code::Unavailable);
        let mut delay = |s: &mut ReconnectState| match decide(
            s,
            unavailable,
            false,
            true,
            true,
            &STREAM_BACKOFF,
            &mut rng,
        ) {
            Next::Reconnect { delay, .. } => delay,
            other => panic!("reconnects: {other:?}"),
        };
        for _ in 0..6 {
            delay(&mut s);
        }
        assert_eq!(s.no_progress, 6);
        s.engine_back();
        for _ in 0..20 {
            let mut again = s;
            assert!(
                delay(&mut again) <= STREAM_BACKOFF.window(0),
                "the first end after the engine came back waits at most the base"
            );
        }
        delay(&mut s);
        assert!(
            delay(&mut s) <= STREAM_BACKOFF.window(1),
            "then grows again"
        );
        assert_eq!(
            s.no_progress, 8,
            "every end still counts toward the stop rule"
        );
    }
}
