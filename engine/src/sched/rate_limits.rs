//! Rate limits: keys with a limit per window (`PutRateLimit`, or created on first use by a task's
//! dynamic key), and the units each task attempt takes when it is assigned.
//!
//! # Invariants
//!
//! 1. A window is fixed: it starts at the first use after the previous one ended, and its units
//!    are all back when it ends (the REST `value` is what is left in the current window).
//! 2. A task attempt is assigned only if every key it uses has its units left; the units are
//!    taken when the assignment is sent, never for a task that stays queued.
//! 3. A key nobody declared is unlimited (a static key without `PutRateLimit`), so a typo never
//!    blocks work forever; a dynamic key (`key_expr`) is created with `limit_values_expr`
//!    (a static key's `limit_values_expr` is ignored: the Python SDK sends `-1` there).

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::core::{State, key_of_expression};
use hatchet_protocol::v1;

/// A declared limit and its current window.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// The key.
    pub key: String,
    /// Units per window.
    pub limit: i64,
    /// The window's name (`SECOND`, `MINUTE`, ...).
    pub duration: String,
    /// The window's length.
    pub window: Duration,
    /// Units taken in the current window.
    pub used: i64,
    /// When the current window started (`None` before the first use).
    pub window_start: Option<Instant>,
    /// When it was last set or refilled (REST `lastRefill`).
    pub refilled_at: std::time::SystemTime,
}

impl RateLimit {
    /// A new limit of `limit` units per `duration`.
    pub fn new(key: &str, limit: i64, duration: v1::RateLimitDuration) -> Self {
        RateLimit {
            key: key.to_string(),
            limit,
            duration: duration.as_str_name().to_string(),
            window: window_of(duration),
            used: 0,
            window_start: None,
            refilled_at: std::time::SystemTime::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        if self
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window)
        {
            self.used = 0;
            self.window_start = None;
        }
    }

    /// Units left in the current window.
    pub fn remaining(&self) -> i64 {
        self.limit.saturating_sub(self.used).max(0)
    }
}

/// What one task attempt takes from one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitUse {
    /// The key (a dynamic key already evaluated).
    pub key: String,
    /// Units per attempt.
    pub units: i64,
    /// For a dynamic key: the limit and window it is created with on first use.
    pub create: Option<(i64, v1::RateLimitDuration)>,
}

/// The length of a named window (a month is 30 days, a year 365).
pub fn window_of(d: v1::RateLimitDuration) -> Duration {
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
pub fn uses_of(
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
pub enum Admission {
    /// Every key has its units left.
    Now,
    /// Some key's window is spent: wait for the next one.
    Later,
    /// It takes more units than a key's whole limit: it can never run (the message says which).
    Never(String),
}

impl State {
    /// Whether task `tid` may be assigned at `now` (invariant 2; refills ended windows).
    pub(crate) fn rate_limits_allow(&mut self, tid: &str, now: Instant) -> Admission {
        let Some(task) = self.tasks.get(tid) else {
            return Admission::Now;
        };
        for RateLimitUse { key, units, create } in task.rate_limits.clone() {
            let limit = match (self.rate_limits.contains_key(&key), create) {
                (true, _) => self.rate_limits.get_mut(&key),
                (false, Some((limit, duration))) => Some(
                    self.rate_limits
                        .entry(key.clone())
                        .or_insert_with(|| RateLimit::new(&key, limit, duration)),
                ),
                (false, None) => None, // undeclared: unlimited (invariant 3)
            };
            if let Some(l) = limit {
                if units > l.limit {
                    return Admission::Never(format!(
                        "the task takes {units} units of rate limit {key:?}, whose whole limit is {} per {}: it can never run; lower its units or raise the limit",
                        l.limit,
                        l.duration.to_lowercase()
                    ));
                }
                l.refill(now);
                if l.used.saturating_add(units) > l.limit {
                    return Admission::Later;
                }
            }
        }
        Admission::Now
    }

    /// Takes task `tid`'s units (its assignment was sent).
    pub(crate) fn take_rate_limits(&mut self, tid: &str, now: Instant) {
        let Some(task) = self.tasks.get(tid) else {
            return;
        };
        for RateLimitUse { key, units, .. } in task.rate_limits.clone() {
            if let Some(l) = self.rate_limits.get_mut(&key) {
                if l.window_start.is_none() {
                    l.window_start = Some(now);
                    l.refilled_at = self.clock.system_now();
                }
                l.used = l.used.saturating_add(units);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hatchet_protocol::v1::RateLimitDuration as D;
    use serde_json::json;

    fn state_with_limited_task(declared: v1::CreateTaskRateLimit) -> (State, Vec<String>) {
        let mut wf = crate::core::one_task_workflow();
        wf.tasks[0].rate_limits = vec![declared];
        let mut st = crate::core::state_with(wf);
        let runs: Vec<String> = ["a", "a", "b"]
            .iter()
            .map(|user| {
                st.create_run(
                    "tenant",
                    "wf",
                    json!({ "user": user }),
                    Default::default(),
                    Default::default(),
                )
                .expect("run")
            })
            .collect();
        (st, runs)
    }

    #[test]
    fn a_fixed_window_gives_its_units_back_when_it_ends() {
        let (mut st, runs) = state_with_limited_task(v1::CreateTaskRateLimit {
            key: "api".into(),
            units: Some(1),
            ..Default::default()
        });
        st.rate_limits
            .insert("api".into(), RateLimit::new("api", 2, D::Second));
        let t0 = Instant::now();
        for run in &runs[..2] {
            assert_eq!(Admission::Now, st.rate_limits_allow(run, t0));
            st.take_rate_limits(run, t0);
        }
        assert_eq!(
            Admission::Later,
            st.rate_limits_allow(&runs[2], t0),
            "two units per second"
        );
        assert_eq!(st.rate_limits["api"].remaining(), 0);
        assert_eq!(
            Admission::Later,
            st.rate_limits_allow(&runs[2], t0 + Duration::from_millis(999))
        );
        assert_eq!(
            Admission::Now,
            st.rate_limits_allow(&runs[2], t0 + Duration::from_secs(1))
        );
        assert_eq!(st.rate_limits["api"].remaining(), 2, "a new window");
    }

    #[test]
    fn dynamic_keys_get_their_own_limit_and_undeclared_keys_are_unlimited() {
        let (mut st, runs) = state_with_limited_task(v1::CreateTaskRateLimit {
            key: "input.user".into(),
            units: Some(1),
            key_expr: Some("input.user".into()),
            units_expr: None,
            limit_values_expr: Some("1".into()),
            duration: Some(D::Minute as i32),
        });
        let t0 = Instant::now();
        assert_eq!(Admission::Now, st.rate_limits_allow(&runs[0], t0));
        st.take_rate_limits(&runs[0], t0);
        assert_eq!(
            Admission::Later,
            st.rate_limits_allow(&runs[1], t0),
            "user a has used its unit"
        );
        assert_eq!(
            Admission::Now,
            st.rate_limits_allow(&runs[2], t0),
            "user b has its own"
        );
        assert_eq!(st.rate_limits["a"].window, Duration::from_secs(60));

        let (mut st, runs) = state_with_limited_task(v1::CreateTaskRateLimit {
            key: "never-declared".into(),
            units: Some(100),
            limit_values_expr: Some("-1".into()), // what the Python SDK sends for static keys
            duration: Some(D::Minute as i32),
            ..Default::default()
        });
        assert_eq!(Admission::Now, st.rate_limits_allow(&runs[0], t0));
        assert!(st.rate_limits.is_empty());
    }
}
