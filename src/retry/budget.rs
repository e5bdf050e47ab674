//! The retry budget: one per engine endpoint, shared by every call to it.
//!
//! # Why a budget and not only max attempts?
//!
//! Five attempts per call multiplies the load on an engine that is already failing by five: every
//! caller retries at once and the outage feeds itself (a retry storm). A budget ties retries to the
//! traffic that is succeeding to be sent: retries may add at most [`BudgetConfig::retry_ratio_pct`]
//! percent of the first attempts seen in the last [`BudgetConfig::window`], plus a small reserve
//! ([`BudgetConfig::reserve_per_sec`] retries per second) so that a quiet client can still retry.
//! Under a sustained outage each logical operation then costs about 1.1–1.2 network attempts
//! instead of 5 (finagle's and tower's retry budgets; gRFC A6 throttling).
//!
//! # The reserve is a rate, not a pot (docs/contract.md §2)
//!
//! Two limits hold at once:
//! 1. *Rate*: in no 1-second window do retries exceed `reserve_per_sec` plus `retry_ratio_pct`
//!    percent of the first attempts of the whole window. A burst of callers at an outage's start
//!    gets about 10 retries in its first second, not the window's 100.
//! 2. *Window*: over the window, retries do not exceed `retry_ratio_pct` percent of its first
//!    attempts plus `reserve_per_sec` per second of window.
//!
//! tower's `TpsBudget` was considered: it implements the window limit (a ratio plus a reserve
//! per second of its time-to-live, deposited as one pot), not the per-second rate, so it would
//! grant the whole reserve in the first second, which is the burst this rule exists to stop.
//!
//! # Invariants
//!
//! 1. Time is `tokio::time::Instant`, so a paused test clock drives the window.
//! 2. The window is a ring of one-second slots; slots older than the window are cleared before
//!    every read or write, so counts never include stale traffic.
//! 3. Retries of requests that never left the client (connect refused) are not withdrawn here:
//!    they add no load to the engine.
//! 4. The rate limit is exact for every sliding 1-second window: the times of the retries of the
//!    last second are kept (at most as many as the limit allows), and a retry is granted only
//!    while fewer than the limit were granted in the second before it.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Budget parameters (docs/contract.md §2 defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetConfig {
    /// Sliding window; also the reserve's multiplier. Whole seconds, 1..=60.
    pub window: Duration,
    /// Retries allowed per 100 first attempts in the window.
    pub retry_ratio_pct: u32,
    /// Reserve of retries per second, available with no traffic at all (a rate: see the module
    /// docs).
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
    /// When each retry of the last second was granted (invariant 4).
    last_second: std::collections::VecDeque<Instant>,
}

/// A retry budget. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    cfg: BudgetConfig,
    ring: Mutex<Ring>,
}

const SLOT: Duration = Duration::from_secs(1);

impl RetryBudget {
    /// A budget with `cfg`; its window starts now.
    pub(crate) fn new(cfg: BudgetConfig) -> Self {
        let n = cfg.window.as_secs().clamp(1, 60) as usize;
        RetryBudget {
            cfg,
            ring: Mutex::new(Ring {
                slots: vec![Slot::default(); n],
                head: 0,
                slot_start: Instant::now(),
                last_second: std::collections::VecDeque::new(),
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
    pub(crate) fn deposit(&self) {
        let mut r = self.ring.lock();
        Self::roll(&mut r, Instant::now());
        let h = r.head;
        r.slots[h].first_attempts += 1;
    }

    /// First attempts and retries in the window now, and the retries it allows.
    pub(crate) fn snapshot(&self) -> (u64, u64, u64) {
        let mut r = self.ring.lock();
        Self::roll(&mut r, Instant::now());
        let (firsts, retries) = r.slots.iter().fold((0u64, 0u64), |(f, t), s| {
            (f + s.first_attempts, t + s.retries)
        });
        let limit = limits(&self.cfg, firsts, r.slots.len() as u64).window;
        (firsts, retries, limit)
    }

    /// Takes one retry from the budget; `false` when it is spent.
    pub(crate) fn try_withdraw(&self) -> bool {
        let now = Instant::now();
        let mut r = self.ring.lock();
        Self::roll(&mut r, now);
        while r
            .last_second
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= SLOT)
        {
            r.last_second.pop_front();
        }
        let (firsts, retries) = r.slots.iter().fold((0u64, 0u64), |(f, t), s| {
            (f + s.first_attempts, t + s.retries)
        });
        let limits = limits(&self.cfg, firsts, r.slots.len() as u64);
        if retries < limits.window && (r.last_second.len() as u64) < limits.per_second {
            let h = r.head;
            r.slots[h].retries += 1;
            r.last_second.push_back(now);
            true
        } else {
            false
        }
    }
}

/// The two limits of the module docs, for `firsts` first attempts in a window of `window_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Retries allowed in any 1-second window.
    pub per_second: u64,
    /// Retries allowed in the window.
    pub window: u64,
}

/// The budget's rule as a pure function.
pub(crate) fn limits(cfg: &BudgetConfig, firsts: u64, window_secs: u64) -> Limits {
    let ratio = firsts * u64::from(cfg.retry_ratio_pct) / 100;
    let reserve = u64::from(cfg.reserve_per_sec);
    Limits {
        per_second: reserve + ratio,
        window: reserve * window_secs + ratio,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_reserve_is_a_rate_not_a_pot() {
        let b = RetryBudget::new(BudgetConfig::default());
        // No traffic: 10 retries in the first second, not the window's 100.
        let granted = (0..150).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 10);
        // Each second brings 10 more, up to the window's 100 in all.
        let mut total = granted;
        for _ in 0..9 {
            tokio::time::advance(Duration::from_secs(1)).await;
            total += (0..150).filter(|_| b.try_withdraw()).count();
        }
        assert_eq!(total, 100);
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!b.try_withdraw(), "the window's 100 are spent");
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_adds_ten_percent_per_second_and_per_window() {
        let b = RetryBudget::new(BudgetConfig::default());
        for _ in 0..1000 {
            b.deposit();
        }
        // 10 + 10% of 1,000 in any one second.
        let granted = (0..500).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 110);
        tokio::time::advance(Duration::from_secs(1)).await;
        // The window allows 100 + 100 = 200 in all: 90 more.
        let granted = (0..500).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 90);
        // Once the window has passed, the old traffic and retries are forgotten.
        tokio::time::advance(Duration::from_secs(11)).await;
        let granted = (0..150).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn no_sliding_second_holds_more_than_the_rate() {
        // Retries asked for every 7 ms for 5 s: count them in every 1 s window that starts at a
        // grant.
        let b = RetryBudget::new(BudgetConfig::default());
        let start = Instant::now();
        let mut grants = Vec::new();
        while start.elapsed() < Duration::from_secs(5) {
            if b.try_withdraw() {
                grants.push(start.elapsed());
            }
            tokio::time::advance(Duration::from_millis(7)).await;
        }
        for (i, t) in grants.iter().enumerate() {
            let in_window = grants[i..]
                .iter()
                .take_while(|u| **u < *t + Duration::from_secs(1))
                .count();
            assert!(
                in_window <= 10,
                "{in_window} retries in the second after {t:?}"
            );
        }
        assert_eq!(grants.len(), 50, "10 per second for 5 s");
    }
}
