//! The engine's clock: the wall clock plus a skew that only grows. With virtual time
//! ([`crate::DevEngineOptions::virtual_time`]) a test jumps it forward ([`crate::DevEngine::advance`]),
//! or the engine does when it has nothing to do but wait on a timer while a client waits on a
//! result, so an hour's durable sleep, a schedule or a retry backoff ends in milliseconds.
//!
//! # Invariants
//!
//! 1. Every time the engine's state reads (timers, deadlines, the times it reports) comes from
//!    here, so a jump moves all of them together; connection-level timing (fault windows,
//!    the gRPC gate) stays on the wall clock.
//! 2. The clock never goes back: a jump adds to the skew.
//! 3. A jump keeps connected workers alive: their last heartbeats move with it (a jump is not
//!    silence).
//! 4. The engine jumps by itself only when skipping is safe: virtual time is on, a client waits
//!    on an unfinished run (subscribed to it, or polled it in the last 5 s) or on a run stream's
//!    tick (a subscription of a run that had ended, `store/readable.rs` invariant 6), no task
//!    runs except durable tasks blocked in a wait, and no queued task could be assigned now. It
//!    jumps to the earliest timer (a durable or condition sleep, a retry's backoff, a schedule,
//!    a cron, a run stream's tick), never to a timeout.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// How long a poll of a run (GetRunDetails) counts as a client waiting on it.
const POLL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The wall clock plus a skew.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    skew_nanos: AtomicU64,
    virtual_time: AtomicBool,
    /// Runs a client polled, and when (on the wall clock): a waiter that polls instead of
    /// subscribing (the Python SDK's `run()`) waits on them too.
    polled: parking_lot::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl Clock {
    /// A clock that jumps by itself when the engine only waits (see invariant 4).
    pub(crate) fn set_virtual(&self, on: bool) {
        self.virtual_time.store(on, Ordering::Relaxed);
    }

    /// Whether the engine may jump by itself.
    pub(crate) fn is_virtual(&self) -> bool {
        self.virtual_time.load(Ordering::Relaxed)
    }

    /// How far ahead of the wall clock this clock is.
    pub(crate) fn skew(&self) -> Duration {
        Duration::from_nanos(self.skew_nanos.load(Ordering::Relaxed))
    }

    /// Now, for timers and deadlines.
    pub(crate) fn now(&self) -> Instant {
        Instant::now() + self.skew()
    }

    /// Now, for the times the engine reports.
    pub(crate) fn system_now(&self) -> SystemTime {
        SystemTime::now() + self.skew()
    }

    /// Notes that a client polled `run` (virtual time only).
    pub(crate) fn polled(&self, run: &str) {
        if self.is_virtual() {
            let now = std::time::Instant::now();
            let mut p = self.polled.lock();
            p.retain(|_, at| now.duration_since(*at) < POLL_WAIT);
            p.insert(run.to_string(), now);
        }
    }

    /// Runs polled within the last few seconds.
    pub(crate) fn recently_polled(&self) -> Vec<String> {
        let now = std::time::Instant::now();
        self.polled
            .lock()
            .iter()
            .filter(|(_, at)| now.duration_since(**at) < POLL_WAIT)
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// Moves the clock forward by `by` (invariant 2: only forward). For `hub/actions/skip.rs`.
    pub(crate) fn add(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.skew_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}
