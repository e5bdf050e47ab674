//! The retry budget: one per engine endpoint, shared by every call to it.
//!
//! # Why a budget and not only max attempts?
//!
//! Five attempts per call multiplies the load on an engine that is already failing by five: every
//! caller retries at once and the outage feeds itself (a retry storm). A budget ties retries to the
//! traffic that is succeeding to be sent: retries may add at most [`BudgetConfig::retry_ratio_pct`]
//! percent of the first attempts seen in the last [`BudgetConfig::window`], plus a small reserve
//! ([`BudgetConfig::reserve_per_sec`] per second of window) so that a quiet client can still retry.
//! Under a sustained outage each logical operation then costs about 1.1–1.2 network attempts
//! instead of 5 (finagle's and tower's retry budgets; gRFC A6 throttling).
//!
//! # Invariants
//!
//! 1. Time is `tokio::time::Instant`, so a paused test clock drives the window.
//! 2. The window is a ring of one-second slots; slots older than the window are cleared before
//!    every read or write, so counts never include stale traffic.
//! 3. Retries of requests that never left the client (connect refused) are not withdrawn here:
//!    they add no load to the engine.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Budget parameters (CONTRACT.md §2 defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Sliding window; also the reserve's multiplier. Whole seconds, 1..=60.
    pub window: Duration,
    /// Retries allowed per 100 first attempts in the window.
    pub retry_ratio_pct: u32,
    /// Reserve of retries per second of window, available with no traffic at all.
    pub reserve_per_sec: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            window: Duration::from_secs(10), // 10 s: recent enough to follow an outage's start
            retry_ratio_pct: 10,             // 10%: an outage costs ~1.1 attempts per call
            reserve_per_sec: 10,             // 10/s: low-traffic clients keep their retries
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    first_attempts: u64,
    retries: u64,
}

#[derive(Debug)]
struct Ring {
    slots: Vec<Slot>,
    /// Index of the slot that `slot_start` opens.
    head: usize,
    slot_start: Instant,
}

/// A retry budget. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct RetryBudget {
    cfg: BudgetConfig,
    ring: Mutex<Ring>,
}

const SLOT: Duration = Duration::from_secs(1);

impl RetryBudget {
    /// A budget with `cfg`; its window starts now.
    pub fn new(cfg: BudgetConfig) -> Self {
        let n = cfg.window.as_secs().clamp(1, 60) as usize;
        RetryBudget {
            cfg,
            ring: Mutex::new(Ring {
                slots: vec![Slot::default(); n],
                head: 0,
                slot_start: Instant::now(),
            }),
        }
    }

    fn roll(ring: &mut Ring, now: Instant) {
        let n = ring.slots.len();
        let elapsed = now.saturating_duration_since(ring.slot_start);
        let steps = (elapsed.as_secs() as usize).min(n);
        if steps == 0 {
            return;
        }
        for _ in 0..steps {
            ring.head = (ring.head + 1) % n;
            ring.slots[ring.head] = Slot::default();
        }
        ring.slot_start += SLOT * (elapsed.as_secs() as u32);
    }

    /// Records a first attempt.
    pub fn deposit(&self) {
        let mut r = self.ring.lock();
        Self::roll(&mut r, Instant::now());
        let h = r.head;
        r.slots[h].first_attempts += 1;
    }

    /// Takes one retry from the budget; `false` when it is spent.
    pub fn try_withdraw(&self) -> bool {
        let mut r = self.ring.lock();
        Self::roll(&mut r, Instant::now());
        let (firsts, retries) = r.slots.iter().fold((0u64, 0u64), |(f, t), s| {
            (f + s.first_attempts, t + s.retries)
        });
        if retries < self.allowed(firsts, r.slots.len() as u64) {
            let h = r.head;
            r.slots[h].retries += 1;
            true
        } else {
            false
        }
    }

    fn allowed(&self, firsts: u64, window_secs: u64) -> u64 {
        firsts * u64::from(self.cfg.retry_ratio_pct) / 100
            + u64::from(self.cfg.reserve_per_sec) * window_secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reserve_then_ratio_then_refill() {
        let b = RetryBudget::new(BudgetConfig::default());
        // No traffic: the reserve (10/s x 10 s) allows 100 retries.
        let granted = (0..150).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 100);
        // 1,000 first attempts add 10%: 100 more.
        for _ in 0..1000 {
            b.deposit();
        }
        let granted = (0..150).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 100);
        // Once the window has passed, the old traffic and retries are forgotten.
        tokio::time::advance(Duration::from_secs(11)).await;
        let granted = (0..150).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 100);
    }
}
