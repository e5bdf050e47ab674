//! A task's options: parents, retries and backoff, timeouts, conditions, slots, rate limits,
//! labels and concurrency.

use std::collections::HashMap;
use std::time::Duration;

use super::workflow::{Concurrency, ConcurrencyStrategy, RateLimitWindow};
use crate::placement::DesiredLabel;
use crate::protocol::v1;
use crate::worker::conditions::{AnyOf, ConditionAction};

/// Options of one task: [`TaskOptions::new`], then a method for each option that applies
/// (fields may be added: the struct is `#[non_exhaustive]`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TaskOptions {
    /// Parent tasks (by name) in the same workflow.
    pub(crate) parents: Vec<String>,
    /// Retries after a failure.
    pub(crate) retries: i32,
    /// Execution timeout of one attempt; the engine default is 60 s.
    pub(crate) timeout: Option<Duration>,
    /// How long a run may wait for a worker before it fails; the engine default is 5 minutes.
    pub(crate) schedule_timeout: Option<Duration>,
    /// Exponential retry backoff factor.
    pub(crate) backoff_factor: Option<f32>,
    /// Cap of the retry backoff, in seconds.
    pub(crate) backoff_max_seconds: Option<i32>,
    /// Slot requests (`default: 1` when empty; `durable: 1` for durable tasks).
    pub(crate) slot_requests: HashMap<String, i32>,
    /// Rate limits each attempt takes units of (see [`TaskOptions::rate_limit`]).
    pub(crate) rate_limits: Vec<v1::CreateTaskRateLimit>,
    /// Labels its worker should have (see [`TaskOptions::desired_label`]).
    pub(crate) desired_labels: HashMap<String, DesiredLabel>,
    /// Its conditions: what it waits for, what skips it, what cancels it.
    pub(crate) conditions: Vec<(ConditionAction, AnyOf)>,
    /// Task-level concurrency limits (see [`TaskOptions::concurrency`]).
    pub(crate) concurrency: Vec<Concurrency>,
    /// A durable task waiting longer than this evicts itself (see
    /// [`TaskOptions::evict_while_waiting`]).
    pub(crate) evict_after: Option<Duration>,
    /// How a batch task's runs are gathered (set by [`Workflow::batch_task`]).
    pub(crate) batch: Option<super::Batching>,
}

impl TaskOptions {
    /// Takes from `d` what this leaves unset (see [`Workflow::task_defaults`]).
    pub(super) fn inherit(&mut self, d: &TaskOptions) {
        if self.retries == 0 {
            self.retries = d.retries;
        }
        self.timeout = self.timeout.or(d.timeout);
        self.schedule_timeout = self.schedule_timeout.or(d.schedule_timeout);
        if self.backoff_factor.is_none() {
            self.backoff_factor = d.backoff_factor;
            self.backoff_max_seconds = d.backoff_max_seconds;
        }
        self.evict_after = self.evict_after.or(d.evict_after);
    }

    /// A durable task whose wait (a sleep, an event, a child) lasts longer than `after` is
    /// evicted: the worker tells the engine, which frees its slot, and stops the invocation
    /// (nothing is reported). When the wait completes the engine runs the task again, and
    /// the new invocation replays its durable log to where it was. Keep what the task does
    /// before its waits replayable (`Context::memo` for side effects). Plain tasks ignore it.
    pub fn evict_while_waiting(mut self, after: Duration) -> Self {
        self.evict_after = Some(after);
        self
    }

    /// A concurrency limit on this task alone: at most `max_runs` of its attempts whose
    /// `expression` (CEL over the input, e.g. `input.user_id`) gives the same group run at
    /// once; `strategy` says what happens to the others. The group must be a string, as for
    /// [`Workflow::concurrency`](crate::worker::task::Workflow::concurrency), which bounds whole runs instead.
    pub fn concurrency(
        mut self,
        expression: impl Into<String>,
        max_runs: i32,
        strategy: ConcurrencyStrategy,
    ) -> Self {
        self.concurrency
            .push(Concurrency::new(expression.into(), max_runs, strategy));
        self
    }

    /// The retry backoff: each retry waits `factor` times longer than the one before, up to
    /// `max_seconds` (the engine's defaults apply when unset).
    pub fn backoff(mut self, factor: f32, max_seconds: i32) -> Self {
        self.backoff_factor = Some(factor);
        self.backoff_max_seconds = Some(max_seconds);
        self
    }
    /// Requests `units` slots of `slot_type` (e.g. a heavy task taking 4 default slots).
    pub fn slots(mut self, slot_type: impl Into<String>, units: i32) -> Self {
        self.slot_requests.insert(slot_type.into(), units);
        self
    }
}

impl TaskOptions {
    /// No options: no parents, no retries, the engine's timeouts.
    pub fn new() -> Self {
        TaskOptions::default()
    }

    /// Sets the parents.
    pub fn parents<S: Into<String>>(mut self, p: impl IntoIterator<Item = S>) -> Self {
        self.parents = p.into_iter().map(Into::into).collect();
        self
    }
    /// Sets the retries.
    pub fn retries(mut self, n: i32) -> Self {
        self.retries = n;
        self
    }
    /// Sets the execution timeout of one attempt (sent as a duration string: `1m30s`).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }
    /// Wants a worker whose label `key` satisfies `label` (a required label excludes other
    /// workers; the others add their weight to a worker's score).
    pub fn desired_label(mut self, key: impl Into<String>, label: DesiredLabel) -> Self {
        self.desired_labels.insert(key.into(), label);
        self
    }
    /// Runs only once `group` holds (AND-ed with the parents and other `wait_for` groups): a
    /// sleep, an event, or a parent's output.
    pub fn wait_for(mut self, group: impl Into<AnyOf>) -> Self {
        self.conditions.push((ConditionAction::Queue, group.into()));
        self
    }
    /// Is skipped (completes with `{"skipped": true}`) when `group` holds first.
    pub fn skip_if(mut self, group: impl Into<AnyOf>) -> Self {
        self.conditions.push((ConditionAction::Skip, group.into()));
        self
    }
    /// Is cancelled when `group` holds first.
    pub fn cancel_if(mut self, group: impl Into<AnyOf>) -> Self {
        self.conditions
            .push((ConditionAction::Cancel, group.into()));
        self
    }
    /// Sets how long the task may wait for a worker before it fails.
    pub fn schedule_timeout(mut self, t: Duration) -> Self {
        self.schedule_timeout = Some(t);
        self
    }
    /// Each attempt takes `units` of the rate limit `key` (declared with
    /// [`crate::runtime::RuntimeHandle::put_rate_limit`]); the engine holds the task while none are left.
    pub fn rate_limit(mut self, key: impl Into<String>, units: i32) -> Self {
        self.rate_limits.push(v1::CreateTaskRateLimit {
            key: key.into(),
            units: Some(units),
            ..Default::default()
        });
        self
    }
    /// Each attempt takes `units` of a limit keyed by `key_expression` (`input.user_id`): every
    /// key gets its own `limit` per `window`.
    pub fn rate_limit_by(
        mut self,
        key_expression: impl Into<String>,
        units: i32,
        limit: i32,
        window: RateLimitWindow,
    ) -> Self {
        let expr = key_expression.into();
        self.rate_limits.push(v1::CreateTaskRateLimit {
            key: expr.clone(),
            units: Some(units),
            key_expr: Some(expr),
            units_expr: None,
            limit_values_expr: Some(limit.to_string()),
            duration: Some(window.wire() as i32),
        });
        self
    }
}
