//! Full-jitter exponential backoff (AWS "Exponential Backoff And Jitter"), with profiles.
//!
//! The delay before retry `n` (0-based: the sleep after the first failed attempt is `n = 0`) is
//! drawn uniformly from `[0, min(cap, base * factor^n)]`. The RNG is a parameter so tests can
//! seed it.

use std::time::Duration;

use rand::RngExt as _;

/// A backoff profile: base, growth factor and cap of the jitter window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Window of the first retry.
    pub base: Duration,
    /// Growth factor of the window per retry.
    pub factor: u32,
    /// Largest window.
    pub cap: Duration,
}

/// Unary gRPC and REST calls: windows 0–250 ms, 0–500 ms, 0–1 s, 0–2 s (docs/contract.md §2).
pub(crate) const UNARY_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(250),
    factor: 2,
    cap: Duration::from_secs(5),
};

/// Stream reconnects: base 1 s, cap 30 s (docs/contract.md §3).
pub(crate) const STREAM_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    factor: 2,
    cap: Duration::from_secs(30),
};

/// Stream reconnects while result waiters are pending: capped at 5 s (docs/contract.md §4).
pub(crate) const WAITER_STREAM_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    factor: 2,
    cap: Duration::from_secs(5),
};

impl Backoff {
    /// The upper end of the jitter window before retry `retry` (0-based). Saturates, never
    /// overflows, for any `retry`.
    pub fn window(&self, retry: u32) -> Duration {
        let mult = self.factor.checked_pow(retry.min(32)).unwrap_or(u32::MAX);
        self.base.saturating_mul(mult).min(self.cap)
    }

    /// A delay drawn uniformly from `[0, window(retry)]`, in whole milliseconds (the resolution
    /// of tokio's timer, so the sleep is exactly the drawn delay).
    pub(crate) fn delay<R: rand::Rng + ?Sized>(&self, retry: u32, rng: &mut R) -> Duration {
        let w = self.window(retry).as_millis() as u64;
        Duration::from_millis(rng.random_range(0..=w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};

    #[test]
    fn unary_windows_match_the_contract() {
        let ms = |n| UNARY_BACKOFF.window(n).as_millis();
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(3), ms(4), ms(5)],
            [250, 500, 1000, 2000, 4000, 5000]
        );
    }

    #[test]
    fn stream_windows_cap_at_30s() {
        let s = |n| STREAM_BACKOFF.window(n).as_secs();
        assert_eq!([s(0), s(1), s(4), s(5), s(100)], [1, 2, 16, 30, 30]);
    }

    #[test]
    fn delays_are_seeded_and_within_window() {
        let mut a = StdRng::seed_from_u64(7);
        let mut b = StdRng::seed_from_u64(7);
        for n in 0..50 {
            let da = UNARY_BACKOFF.delay(n, &mut a);
            assert_eq!(da, UNARY_BACKOFF.delay(n, &mut b));
            assert!(da <= UNARY_BACKOFF.window(n));
        }
    }
}
