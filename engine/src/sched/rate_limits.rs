//! Rate limits: keys with a limit per window (`PutRateLimit`, or created on first use by a task's
//! dynamic key), and the units each task attempt takes when it is assigned.
//!
//! # Invariants
//!
//! 1. A window is fixed: windows follow each other from the key's creation, used or not, and a
//!    window's units are all back when it ends (the real engine refills at `lastRefill + window`;
//!    the REST `value` is what is left in the current window).
//! 2. Changing a key's limit never adds units to the current window: what is left is kept,
//!    clamped to the new limit (the real engine's upsert writes `value = min(limit, value)` and
//!    leaves `lastRefill`), so a raised limit shows from the next window on.
//! 3. A task attempt is assigned only if every key it uses has its units left; the units are
//!    taken when the assignment is sent, never for a task that stays queued.
//! 4. A key nobody declared is unlimited (a static key without `PutRateLimit`), so a typo never
//!    blocks work forever; a dynamic key (`key_expr`) is created with `limit_values_expr`
//!    (a static key's `limit_values_expr` is ignored: the Python SDK sends `-1` there).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::time::Instant;

use crate::parse::key_of_expression;
use hatchet_runtime::protocol::v1;

/// A declared limit and its current window.
#[derive(Debug, Clone)]
pub(crate) struct RateLimit {
    /// The key.
    pub key: String,
    /// Units per window.
    pub limit: i64,
    /// The window's name (`SECOND`, `MINUTE`, ...).
    pub duration: String,
    /// The window's length.
    pub window: Duration,
    /// Units taken in the current window (kept by [`RateLimits`]).
    used: i64,
    /// When the current window started.
    window_start: Instant,
    /// The same moment on the wall clock (REST `lastRefill`).
    pub refilled_at: SystemTime,
}

impl RateLimit {
    /// A new limit of `limit` units per `duration`.
    fn new(
        key: &str,
        limit: i64,
        duration: v1::RateLimitDuration,
        now: Instant,
        wall: SystemTime,
    ) -> Self {
        RateLimit {
            key: key.to_string(),
            limit,
            duration: duration.as_str_name().to_string(),
            window: window_of(duration),
            used: 0,
            window_start: now,
            refilled_at: wall,
        }
    }

    /// Moves on to the window `now` is in (invariant 1): the windows that ended are skipped
    /// whole, so the boundaries stay where the key's creation put them.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window_start);
        if self.window.is_zero() || elapsed < self.window {
            return;
        }
        let whole = elapsed.as_nanos() / self.window.as_nanos();
        let ended = u32::try_from(whole)
            .ok()
            .and_then(|n| self.window.checked_mul(n))
            .unwrap_or(elapsed);
        self.window_start += ended;
        self.refilled_at = self
            .refilled_at
            .checked_add(ended)
            .unwrap_or(self.refilled_at);
        self.used = 0;
    }

    /// Units left in the current window, as of the last refill.
    pub(crate) fn remaining(&self) -> i64 {
        self.limit.saturating_sub(self.used).max(0)
    }

    /// Units left at `now`: all of them once the current window has ended.
    pub(crate) fn remaining_at(&self, now: Instant) -> i64 {
        let mut l = self.clone();
        l.refill(now);
        l.remaining()
    }
}

/// What one task attempt takes from one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateLimitUse {
    /// The key (a dynamic key already evaluated).
    pub key: String,
    /// Units per attempt.
    pub units: i64,
    /// For a dynamic key: the limit and window it is created with on first use.
    pub create: Option<(i64, v1::RateLimitDuration)>,
}

/// The length of a named window (a month is 30 days, a year 365).
pub(crate) fn window_of(d: v1::RateLimitDuration) -> Duration {
    use v1::RateLimitDuration as D;
    Duration::from_secs(match d {
        D::Second => 1,
        D::Minute => 60,
        D::Hour => 3_600,
        D::Day => 86_400,
        D::Week => 7 * 86_400,
        D::Month => 30 * 86_400,
        D::Year => 365 * 86_400,
    })
}

/// The keys and units one task of a run takes, from its declaration and the run's input and
/// metadata (dynamic keys and units are key expressions such as `input.user_id`).
pub(crate) fn uses_of(
    declared: &[v1::CreateTaskRateLimit],
    input: &Value,
    meta: &serde_json::Map<String, Value>,
) -> Vec<RateLimitUse> {
    declared
        .iter()
        .map(|r| {
            let key_expr = r.key_expr.as_deref().filter(|e| !e.is_empty());
            let key = match key_expr {
                Some(e) => key_of_expression(e, input, meta),
                None => r.key.clone(),
            };
            let number = |expr: &str| {
                expr.trim()
                    .parse::<i64>()
                    .ok()
                    .or_else(|| key_of_expression(expr, input, meta).parse().ok())
            };
            let units = r
                .units_expr
                .as_deref()
                .and_then(number)
                .or(r.units.map(i64::from))
                .unwrap_or(1)
                .max(0);
            // Only a dynamic key creates its limit; SDKs send `-1` for "none" with static keys.
            let dynamic = key_expr
                .and(r.limit_values_expr.as_deref())
                .and_then(number)
                .filter(|limit| *limit >= 0)
                .map(|limit| {
                    let duration = r
                        .duration
                        .and_then(|d| v1::RateLimitDuration::try_from(d).ok())
                        .unwrap_or(v1::RateLimitDuration::Minute);
                    (limit, duration)
                });
            RateLimitUse {
                key,
                units,
                create: dynamic,
            }
        })
        .collect()
}

/// Whether a task attempt may be assigned now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Every key has its units left.
    Now,
    /// Some key's window is spent: wait for the next one.
    Later,
    /// It takes more units than a key's whole limit: it can never run (the message says which).
    Never(String),
}

/// Every key's limit and window: the room that keeps invariants 1-3.
#[derive(Debug, Default)]
pub(crate) struct RateLimits {
    keys: BTreeMap<String, RateLimit>,
}

impl RateLimits {
    /// Whether `key` is declared.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// Declares `key` (`PutRateLimit`), or changes its limit and window: a change keeps what
    /// the current window has left, clamped to the new limit, and the window's start
    /// (invariant 2).
    pub(crate) fn put(
        &mut self,
        key: &str,
        limit: i64,
        duration: v1::RateLimitDuration,
        now: Instant,
        wall: SystemTime,
    ) {
        let mut new = RateLimit::new(key, limit, duration, now, wall);
        if let Some(old) = self.keys.get_mut(key) {
            old.refill(now);
            let left = old.remaining().min(limit);
            new.used = limit.saturating_sub(left);
            new.window_start = old.window_start;
            new.refilled_at = old.refilled_at;
        }
        self.keys.insert(key.to_string(), new);
    }

    /// Every key, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &RateLimit> {
        self.keys.values()
    }

    /// Whether an attempt taking `uses` may be assigned at `now` (invariant 3; refills ended
    /// windows, creates a dynamic key on first use).
    pub(crate) fn allow(
        &mut self,
        uses: &[RateLimitUse],
        now: Instant,
        wall: SystemTime,
    ) -> Admission {
        for RateLimitUse { key, units, create } in uses {
            let limit = match (self.keys.contains_key(key), create) {
                (true, _) => self.keys.get_mut(key),
                (false, Some((limit, duration))) => Some(
                    self.keys
                        .entry(key.clone())
                        .or_insert_with(|| RateLimit::new(key, *limit, *duration, now, wall)),
                ),
                (false, None) => None, // undeclared: unlimited (invariant 4)
            };
            if let Some(l) = limit {
                if *units > l.limit {
                    return Admission::Never(format!(
                        "the task takes {units} units of rate limit {key:?}, whose whole limit is {} per {}: it can never run; lower its units or raise the limit",
                        l.limit,
                        l.duration.to_lowercase()
                    ));
                }
                l.refill(now);
                if l.used.saturating_add(*units) > l.limit {
                    return Admission::Later;
                }
            }
        }
        Admission::Now
    }

    /// Takes the units of `uses` (an assignment was sent at `now`).
    pub(crate) fn take(&mut self, uses: &[RateLimitUse], now: Instant) {
        for RateLimitUse { key, units, .. } in uses {
            if let Some(l) = self.keys.get_mut(key) {
                l.refill(now);
                l.used = l.used.saturating_add(*units);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hatchet_runtime::protocol::v1::RateLimitDuration as D;
    use serde_json::json;

    /// What the tasks of three runs (users a, a and b) take under `declared`.
    fn uses_of_three_runs(declared: v1::CreateTaskRateLimit) -> Vec<Vec<RateLimitUse>> {
        ["a", "a", "b"]
            .iter()
            .map(|user| {
                uses_of(
                    std::slice::from_ref(&declared),
                    &json!({ "user": user }),
                    &Default::default(),
                )
            })
            .collect()
    }

    /// Three runs taking one unit of `api` each, no limits yet, and the moment they start at.
    fn one_unit_of_api() -> (Vec<Vec<RateLimitUse>>, RateLimits, SystemTime, Instant) {
        let runs = uses_of_three_runs(v1::CreateTaskRateLimit {
            key: "api".into(),
            units: Some(1),
            ..Default::default()
        });
        (
            runs,
            RateLimits::default(),
            SystemTime::now(),
            Instant::now(),
        )
    }

    #[test]
    fn a_fixed_window_gives_its_units_back_when_it_ends() {
        let (runs, mut limits, wall, t0) = one_unit_of_api();
        limits.put("api", 2, D::Second, t0, wall);
        for run in &runs[..2] {
            assert_eq!(Admission::Now, limits.allow(run, t0, wall));
            limits.take(run, t0);
        }
        assert_eq!(
            Admission::Later,
            limits.allow(&runs[2], t0, wall),
            "two units per second"
        );
        let remaining =
            |l: &RateLimits| l.iter().find(|r| r.key == "api").map(RateLimit::remaining);
        assert_eq!(remaining(&limits), Some(0));
        assert_eq!(
            Admission::Later,
            limits.allow(&runs[2], t0 + Duration::from_millis(999), wall)
        );
        assert_eq!(
            Admission::Now,
            limits.allow(&runs[2], t0 + Duration::from_secs(1), wall)
        );
        assert_eq!(remaining(&limits), Some(2), "a new window");
    }

    #[test]
    fn a_changed_limit_adds_no_units_to_the_current_window() {
        let (runs, mut limits, wall, t0) = one_unit_of_api();
        let remaining =
            |l: &RateLimits| l.iter().find(|r| r.key == "api").map(RateLimit::remaining);
        limits.put("api", 1, D::Minute, t0, wall);
        limits.take(&runs[0], t0);
        // Raised: what is left (nothing) is kept until the window ends.
        let later = t0 + Duration::from_secs(10);
        limits.put("api", 2, D::Minute, later, wall + Duration::from_secs(10));
        assert_eq!(remaining(&limits), Some(0), "no units added mid-window");
        assert_eq!(Admission::Later, limits.allow(&runs[1], later, wall));
        let last_refill = limits
            .iter()
            .find(|r| r.key == "api")
            .map(|r| r.refilled_at);
        assert_eq!(last_refill, Some(wall), "a put leaves lastRefill");
        // The next window has the new limit.
        let next = t0 + Duration::from_secs(60);
        for run in &runs[1..] {
            assert_eq!(Admission::Now, limits.allow(run, next, wall));
            limits.take(run, next);
        }
        assert_eq!(remaining(&limits), Some(0));
        // Lowered: what is left is clamped to the new limit.
        let mut fresh = RateLimits::default();
        fresh.put("api", 5, D::Minute, t0, wall);
        fresh.take(&runs[0], t0);
        fresh.put("api", 2, D::Minute, t0, wall);
        assert_eq!(remaining(&fresh), Some(2), "min(limit, left)");
    }

    #[test]
    fn windows_follow_each_other_from_the_keys_creation_used_or_not() {
        let (runs, mut limits, wall, t0) = one_unit_of_api();
        limits.put("api", 1, D::Second, t0, wall);
        // First used 1.5 s after creation: inside the window that began at 1 s.
        let first = t0 + Duration::from_millis(1500);
        assert_eq!(Admission::Now, limits.allow(&runs[0], first, wall));
        limits.take(&runs[0], first);
        assert_eq!(
            Admission::Later,
            limits.allow(&runs[1], t0 + Duration::from_millis(1999), wall)
        );
        // Back at 2 s, the window's end, not 1 s after the first use.
        assert_eq!(
            Admission::Now,
            limits.allow(&runs[1], t0 + Duration::from_secs(2), wall)
        );
        let l = limits.iter().find(|r| r.key == "api").cloned();
        let l = l.expect("declared");
        assert_eq!(l.refilled_at, wall + Duration::from_secs(2), "lastRefill");
        assert_eq!(
            l.remaining_at(t0 + Duration::from_secs(3)),
            1,
            "read at 3 s"
        );
    }

    #[test]
    fn dynamic_keys_get_their_own_limit_and_undeclared_keys_are_unlimited() {
        let runs = uses_of_three_runs(v1::CreateTaskRateLimit {
            key: "input.user".into(),
            units: Some(1),
            key_expr: Some("input.user".into()),
            units_expr: None,
            limit_values_expr: Some("1".into()),
            duration: Some(D::Minute as i32),
        });
        let mut limits = RateLimits::default();
        let wall = SystemTime::now();
        let t0 = Instant::now();
        assert_eq!(Admission::Now, limits.allow(&runs[0], t0, wall));
        limits.take(&runs[0], t0);
        assert_eq!(
            Admission::Later,
            limits.allow(&runs[1], t0, wall),
            "user a has used its unit"
        );
        assert_eq!(
            Admission::Now,
            limits.allow(&runs[2], t0, wall),
            "user b has its own"
        );
        let a = limits.iter().find(|r| r.key == "a").map(|r| r.window);
        assert_eq!(a, Some(Duration::from_secs(60)));

        let runs = uses_of_three_runs(v1::CreateTaskRateLimit {
            key: "never-declared".into(),
            units: Some(100),
            limit_values_expr: Some("-1".into()), // what the Python SDK sends for static keys
            duration: Some(D::Minute as i32),
            ..Default::default()
        });
        let mut limits = RateLimits::default();
        assert_eq!(Admission::Now, limits.allow(&runs[0], t0, wall));
        assert_eq!(limits.iter().count(), 0);
    }
}
