//! Deadline arithmetic: when an operation must end, how long one attempt may take, and whether a
//! sleep followed by an attempt can still finish in time.
//!
//! # Invariants
//!
//! 1. Every operation has an end: the caller's deadline, or the 60 s backstop.
//! 2. An attempt gets the 30 s backstop only when the caller set no deadline; otherwise it gets
//!    whatever is left of the caller's deadline (and that is what `grpc-timeout` carries).
//! 3. A sleep is started only if, after it, at least [`MIN_ATTEMPT_TIME`] is left for the attempt.

use std::time::Duration;

use tokio::time::Instant;

/// Per-attempt timeout when the caller set no deadline.
pub(crate) const ATTEMPT_BACKSTOP: Duration = Duration::from_secs(30);
/// Whole-operation timeout when the caller set no deadline.
pub(crate) const OPERATION_BACKSTOP: Duration = Duration::from_secs(60);
/// The least time worth starting an attempt with: a loopback round trip is ~0.1 ms, a WAN one
/// tens of ms; under 5 ms an attempt would only produce another DEADLINE_EXCEEDED.
pub(crate) const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(5);

/// The time budget of one logical operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    /// When the operation must be over.
    pub end: Instant,
    /// Whether `end` is the caller's (true) or the backstop (false).
    pub caller_set: bool,
}

impl Deadline {
    /// The deadline of an operation starting at `now` with the caller's optional `timeout`.
    pub(crate) fn new(now: Instant, caller_timeout: Option<Duration>) -> Self {
        match caller_timeout {
            Some(t) => Deadline {
                end: now + t,
                caller_set: true,
            },
            None => Deadline {
                end: now + OPERATION_BACKSTOP,
                caller_set: false,
            },
        }
    }

    /// Time left at `now` (zero when past).
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        self.end.saturating_duration_since(now)
    }

    /// The timeout of an attempt started at `now`.
    pub(crate) fn attempt_timeout(&self, now: Instant) -> Duration {
        let left = self.remaining(now);
        if self.caller_set {
            left
        } else {
            left.min(ATTEMPT_BACKSTOP)
        }
    }

    /// Whether an attempt started at `now` can still do useful work.
    pub(crate) fn can_attempt(&self, now: Instant) -> bool {
        self.remaining(now) >= MIN_ATTEMPT_TIME
    }

    /// Whether sleeping `delay` from `now` still leaves time for an attempt.
    pub(crate) fn fits_sleep(&self, now: Instant, delay: Duration) -> bool {
        self.remaining(now) >= delay.saturating_add(MIN_ATTEMPT_TIME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn backstops_apply_only_without_a_caller_deadline() {
        let now = Instant::now();
        let none = Deadline::new(now, None);
        assert_eq!(none.attempt_timeout(now), ATTEMPT_BACKSTOP);
        assert_eq!(none.remaining(now), OPERATION_BACKSTOP);
        let caller = Deadline::new(now, Some(Duration::from_secs(45)));
        assert_eq!(caller.attempt_timeout(now), Duration::from_secs(45));
        let later = now + Duration::from_secs(40);
        assert_eq!(none.attempt_timeout(later), Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn sleeps_that_cannot_finish_are_not_started() {
        let now = Instant::now();
        let d = Deadline::new(now, Some(Duration::from_millis(300)));
        assert!(d.fits_sleep(now, Duration::from_millis(250)));
        assert!(!d.fits_sleep(now, Duration::from_millis(299)));
        assert!(!d.can_attempt(now + Duration::from_millis(299)));
    }
}
