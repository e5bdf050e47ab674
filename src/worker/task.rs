//! Workflow and task definitions: typed handlers, DAG parents, retries, timeouts, triggers.

use std::any::TypeId;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::conditions::{AnyOf, ConditionAction};
use super::context::Context;
use super::placement::{DesiredLabel, StickyStrategy, desired_to_proto};
use crate::proto::v1;

/// A task failure. `retryable: false` sets `should_not_retry` (the engine skips the retries left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    /// What went wrong (sent to the engine as the failure text).
    pub message: String,
    /// Whether the engine may retry the task.
    pub retryable: bool,
}

impl TaskError {
    /// A failure the engine may retry (per the task's `retries`).
    pub fn new(message: impl Into<String>) -> Self {
        TaskError {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure the engine must not retry.
    pub fn non_retryable(message: impl Into<String>) -> Self {
        TaskError {
            message: message.into(),
            retryable: false,
        }
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for TaskError {
    fn from(s: String) -> Self {
        TaskError::new(s)
    }
}

impl From<&str> for TaskError {
    fn from(s: &str) -> Self {
        TaskError::new(s)
    }
}

impl From<crate::Error> for TaskError {
    /// A nondeterministic replay is not retried: the retry would replay the same history and
    /// diverge the same way. Every other runtime error leaves the engine's retries in charge.
    fn from(e: crate::Error) -> Self {
        match e.durable() {
            Some(crate::error::DurableError::Nondeterminism { .. }) => {
                TaskError::non_retryable(e.to_string())
            }
            _ => TaskError::new(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for TaskError {
    fn from(e: serde_json::Error) -> Self {
        TaskError::non_retryable(format!("json: {e}"))
    }
}

/// A type-erased task handler.
pub(crate) type TaskFn =
    Arc<dyn Fn(Context) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync>;

/// Wraps a typed `async fn(input, ctx) -> Result<output, error>`.
pub(crate) fn typed<I, O, E, F, Fut>(f: F) -> TaskFn
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    E: Into<TaskError> + Send + 'static,
    F: Fn(I, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: Context| {
        let f = f.clone();
        Box::pin(async move {
            let input: I = serde_json::from_value(ctx.input().clone()).map_err(|e| {
                TaskError::non_retryable(format!(
                    "the input does not match the task's input type: {e}"
                ))
            })?;
            let out = f(input, ctx).await.map_err(Into::into)?;
            serde_json::to_value(out).map_err(|e| {
                TaskError::non_retryable(format!("the output cannot be serialized: {e}"))
            })
        })
    })
}

/// The tasks no other task names as a parent, in declaration order (a DAG's last tasks).
fn leaf_tasks(tasks: &[TaskDef]) -> Vec<String> {
    tasks
        .iter()
        .filter(|t| !tasks.iter().any(|o| o.options.parents.contains(&t.name)))
        .map(|t| t.name.clone())
        .collect()
}

/// Options of one task.
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
}

impl TaskOptions {
    /// Takes from `d` what this leaves unset (see [`Workflow::task_defaults`]).
    fn inherit(&mut self, d: &TaskOptions) {
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
    /// once; `strategy` says what happens to the others. The workflow-level limit
    /// ([`Workflow::concurrency`]) bounds whole runs instead.
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
    /// [`crate::RuntimeHandle::put_rate_limit`]); the engine holds the task while none are left.
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

/// One task of a workflow.
#[derive(Clone)]
pub(crate) struct TaskDef {
    /// Name (readable id).
    pub name: String,
    /// Its workflow's name, as declared (no namespace).
    pub workflow: String,
    /// Options.
    pub options: TaskOptions,
    /// Durable (sleeps and event waits survive worker restarts).
    pub durable: bool,
    /// The handler.
    pub handler: TaskFn,
    /// The input and output types its handler declares (typed workflow handles check them).
    pub types: TaskTypes,
}

/// The Rust types a task's handler takes and returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TaskTypes {
    /// The input type.
    pub input: TypeId,
    /// Its name, for messages.
    pub input_name: &'static str,
    /// The output type.
    pub output: TypeId,
    /// Its name, for messages.
    pub output_name: &'static str,
}

impl TaskTypes {
    /// The types of a handler `Fn(I, Context) -> Result<O, _>`.
    pub(crate) fn of<I: 'static, O: 'static>() -> Self {
        TaskTypes {
            input: TypeId::of::<I>(),
            input_name: std::any::type_name::<I>(),
            output: TypeId::of::<O>(),
            output_name: std::any::type_name::<O>(),
        }
    }
}

impl TaskDef {
    /// The task's part of the registration request (`namespaced` applies the namespace to
    /// event keys).
    pub(crate) fn to_proto(
        &self,
        workflow: &str,
        namespaced: &dyn Fn(&str) -> String,
    ) -> v1::CreateTaskOpts {
        let o = &self.options;
        v1::CreateTaskOpts {
            concurrency: o.concurrency.iter().map(Concurrency::to_proto).collect(),
            worker_labels: desired_to_proto(&o.desired_labels),
            conditions: super::conditions::task_conditions(
                workflow,
                &self.name,
                &o.conditions,
                namespaced,
            ),
            readable_id: self.name.clone(),
            action: Workflow::action_id(workflow, &self.name),
            timeout: o.timeout.map(wire_duration).unwrap_or_default(),
            schedule_timeout: o.schedule_timeout.map(wire_duration),
            parents: o.parents.clone(),
            retries: o.retries,
            backoff_factor: o.backoff_factor,
            backoff_max_seconds: o.backoff_max_seconds,
            is_durable: self.durable,
            rate_limits: o.rate_limits.clone(),
            slot_requests: if o.slot_requests.is_empty() {
                let kind = if self.durable { "durable" } else { "default" };
                [(kind.to_string(), 1)].into()
            } else {
                o.slot_requests.clone()
            },
            ..Default::default()
        }
    }
}

/// A duration as the engine's duration strings spell it (`1h2m3s`, `250ms`): whole seconds
/// when it has no milliseconds, milliseconds otherwise (rounded up, never `0ms` for a
/// non-zero duration).
pub(crate) fn wire_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        let ms = d.as_nanos().div_ceil(1_000_000);
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

impl std::fmt::Debug for TaskDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskDef")
            .field("name", &self.name)
            .field("workflow", &self.workflow)
            .field("options", &self.options)
            .field("durable", &self.durable)
            .finish()
    }
}

/// A workflow: one task, or a DAG of tasks with parents.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// Name.
    pub(crate) name: String,
    /// Tasks.
    pub(crate) tasks: Vec<TaskDef>,
    /// Event keys that trigger it (`*` wildcards).
    pub(crate) on_events: Vec<String>,
    /// Cron expressions (5 fields, UTC) the engine runs it on, and their input.
    pub(crate) on_crons: Vec<String>,
    /// The input of cron-triggered runs (JSON; `{}` when unset).
    pub(crate) cron_input: Option<serde_json::Value>,
    /// Idempotency key expression (`input.order_id`) and TTL.
    pub(crate) idempotency: Option<(String, std::time::Duration)>,
    /// Concurrency limits: a CEL expression grouping runs, and how many may run per group.
    pub(crate) concurrency: Vec<Concurrency>,
    /// Runs once after any task of a run fails for good (see [`Workflow::on_failure`]).
    pub(crate) on_failure: Option<TaskDef>,
    /// Runs once after every other task completed (see [`Workflow::on_success`]).
    pub(crate) on_success: Option<TaskDef>,
    /// Priority (1–3) of runs that name none.
    pub(crate) default_priority: Option<i32>,
    /// Keep a run's tasks (and its sticky children) on the worker that started it.
    pub(crate) sticky: Option<StickyStrategy>,
    /// Event filters declared with the workflow: (CEL expression, scope, payload).
    pub(crate) default_filters: Vec<(String, String, Value)>,
    /// Its description (shown by the engine's API and dashboard).
    pub(crate) description: String,
    /// Its version label (the engine's API shows it on the workflow version).
    pub(crate) version: String,
    /// What its tasks take where their own options leave it unset (see
    /// [`Workflow::task_defaults`]).
    pub(crate) task_defaults: Option<TaskOptions>,
}

/// A concurrency limit of a workflow (enforced by the engine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Concurrency {
    /// CEL expression giving the group key (e.g. `input.user_id`).
    pub(crate) expression: String,
    /// Runs allowed at once per group.
    pub(crate) max_runs: i32,
    /// What happens to runs over the limit.
    pub(crate) strategy: ConcurrencyStrategy,
}

impl Concurrency {
    fn new(expression: String, max_runs: i32, strategy: ConcurrencyStrategy) -> Self {
        Concurrency {
            expression,
            max_runs,
            strategy,
        }
    }

    fn to_proto(&self) -> v1::Concurrency {
        v1::Concurrency {
            expression: self.expression.clone(),
            max_runs: Some(self.max_runs),
            limit_strategy: Some(self.strategy.wire() as i32),
        }
    }
}

/// What the engine does with runs over a concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConcurrencyStrategy {
    /// Cancel the running ones to start the new.
    CancelInProgress,
    /// Drop the newest (legacy name of `CancelNewest` on older engines).
    DropNewest,
    /// Queue the newest until a slot of the group frees.
    QueueNewest,
    /// Take groups in turn, so no group starves the others.
    GroupRoundRobin,
    /// Cancel the newest.
    CancelNewest,
}

impl ConcurrencyStrategy {
    /// On the wire.
    pub(crate) fn wire(self) -> v1::ConcurrencyLimitStrategy {
        use v1::ConcurrencyLimitStrategy as W;
        match self {
            ConcurrencyStrategy::CancelInProgress => W::CancelInProgress,
            ConcurrencyStrategy::DropNewest => W::DropNewest,
            ConcurrencyStrategy::QueueNewest => W::QueueNewest,
            ConcurrencyStrategy::GroupRoundRobin => W::GroupRoundRobin,
            ConcurrencyStrategy::CancelNewest => W::CancelNewest,
        }
    }
}

/// The window of a rate limit: its units refill once per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RateLimitWindow {
    /// Per second.
    Second,
    /// Per minute.
    Minute,
    /// Per hour.
    Hour,
    /// Per day.
    Day,
    /// Per week.
    Week,
    /// Per month.
    Month,
    /// Per year.
    Year,
}

impl RateLimitWindow {
    /// On the wire.
    pub(crate) fn wire(self) -> v1::RateLimitDuration {
        use v1::RateLimitDuration as W;
        match self {
            RateLimitWindow::Second => W::Second,
            RateLimitWindow::Minute => W::Minute,
            RateLimitWindow::Hour => W::Hour,
            RateLimitWindow::Day => W::Day,
            RateLimitWindow::Week => W::Week,
            RateLimitWindow::Month => W::Month,
            RateLimitWindow::Year => W::Year,
        }
    }
}

impl Workflow {
    /// An empty workflow named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Workflow {
            name: name.into(),
            tasks: Vec::new(),
            on_events: Vec::new(),
            on_crons: Vec::new(),
            cron_input: None,
            idempotency: None,
            concurrency: Vec::new(),
            on_failure: None,
            on_success: None,
            description: String::new(),
            version: String::new(),
            default_priority: None,
            sticky: None,
            default_filters: Vec::new(),
            task_defaults: None,
        }
    }

    /// Keeps each run's later tasks, and the children it spawns with
    /// [`Context::spawn_sticky_child`], on the worker that started it: `Hard` waits for that
    /// worker, `Soft` prefers it and falls back to any.
    pub fn sticky(mut self, strategy: StickyStrategy) -> Self {
        self.sticky = Some(strategy);
        self
    }

    /// Declares an event filter with the workflow: an event pushed with `scope` starts a run
    /// only when `expression` (CEL over `input`, `additional_metadata`, `payload`, `event_key`)
    /// holds, and the run gets `payload` as [`Context::filter_payload`]. Registering a version
    /// with filters replaces the declared ones; one without keeps them.
    pub fn default_filter(
        mut self,
        expression: impl Into<String>,
        scope: impl Into<String>,
        payload: Value,
    ) -> Self {
        self.default_filters
            .push((expression.into(), scope.into(), payload));
        self
    }

    /// Sets the workflow's `on_failure` task: the engine runs it once per run, as soon as any
    /// other task has failed for good (retries used up), with the failed task's error in
    /// [`Context::task_run_errors`]. When every task completes (or the run is cancelled) it is
    /// skipped. The run still reads as failed whatever this task does.
    ///
    /// A workflow with an `on_failure` task is a DAG to the engine (two steps), so its run id
    /// differs from its task ids; typed handles ([`crate::WorkflowRef`]) return the task you
    /// name either way.
    pub fn on_failure<I, O, E, F, Fut>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.on_failure = Some(self.hook(name, options, f));
        self
    }

    /// A task that runs once every other task of a run has completed, with their outputs as
    /// its parents' (`Context::parent_output`); when a task fails for good or the run is
    /// cancelled it is skipped. As the official SDKs do, it is declared to the engine as a task
    /// whose parents are the workflow's leaf tasks (those no other task depends on), so the run's
    /// outputs include its output.
    pub fn on_success<I, O, E, F, Fut>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.on_success = Some(self.hook(name, options, f));
        self
    }

    /// A task the engine places itself (`on_failure`, `on_success`): no parents of its own.
    fn hook<I, O, E, F, Fut>(&self, name: &str, options: TaskOptions, f: F) -> TaskDef
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        TaskDef {
            workflow: self.name.clone(),
            name: name.to_string(),
            options: TaskOptions {
                parents: Vec::new(),
                ..options
            },
            durable: false,
            handler: typed(f),
            types: TaskTypes::of::<I, O>(),
        }
    }

    /// The `on_success` task as the engine sees it: its parents are the leaf tasks.
    pub(crate) fn on_success_task(&self) -> Option<TaskDef> {
        let mut t = self.on_success.clone()?;
        t.options.parents = leaf_tasks(&self.tasks);
        Some(t)
    }

    /// The tasks the engine is told of, in order: the declared ones, then `on_success` (as
    /// [`Workflow::on_success_task`] makes it); `on_failure` is sent apart.
    pub(crate) fn engine_tasks(&self) -> impl Iterator<Item = std::borrow::Cow<'_, TaskDef>> {
        self.tasks
            .iter()
            .map(std::borrow::Cow::Borrowed)
            .chain(self.on_success_task().map(std::borrow::Cow::Owned))
    }

    /// Runs that name no priority get `priority` (1 lowest to 3 highest; the engine's default
    /// is 1). The engine assigns queued tasks highest priority first.
    pub fn default_priority(mut self, priority: i32) -> Self {
        self.default_priority = Some(priority);
        self
    }

    /// Defaults for every task of this workflow (as the official SDKs' `task_defaults`): a
    /// task takes the retries (when its own are 0), execution and schedule timeouts, backoff and
    /// eviction time it does not set itself. Applied when the workflow is registered, whatever
    /// the order of the calls.
    pub fn task_defaults(mut self, defaults: TaskOptions) -> Self {
        self.task_defaults = Some(defaults);
        self
    }

    /// Gives every task what [`Workflow::task_defaults`] names and it leaves unset.
    pub(crate) fn apply_task_defaults(&mut self) {
        let Some(d) = self.task_defaults.take() else {
            return;
        };
        let hooks = self.on_failure.iter_mut().chain(self.on_success.iter_mut());
        for t in self.tasks.iter_mut().chain(hooks) {
            t.options.inherit(&d);
        }
    }

    /// Its description, as the engine's API and dashboard show it.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Its version label (`"1.4.0"`), sent with the registration as the official SDKs send it.
    /// The engine (v0.104.9) keeps none: its API reads every version's label as `""`.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Its name (as registered, before any namespace).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every task, the `on_failure` task last.
    pub(crate) fn all_tasks(&self) -> impl Iterator<Item = &TaskDef> {
        self.tasks
            .iter()
            .chain(self.on_success.iter())
            .chain(self.on_failure.iter())
    }

    /// The keys of its static rate limits (those that must exist before it is registered).
    pub(crate) fn static_rate_limit_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .all_tasks()
            .flat_map(|t| &t.options.rate_limits)
            .filter(|r| {
                r.key_expr.is_none() && r.units_expr.is_none() && r.limit_values_expr.is_none()
            })
            .map(|r| r.key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Adds a task with default options.
    pub fn task<I, O, E, F, Fut>(self, name: &str, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.task_with(name, TaskOptions::default(), f)
    }

    /// Adds a task with options.
    pub fn task_with<I, O, E, F, Fut>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.tasks.push(TaskDef {
            workflow: self.name.clone(),
            name: name.to_string(),
            options,
            durable: false,
            handler: typed(f),
            types: TaskTypes::of::<I, O>(),
        });
        self
    }

    /// Adds a durable task (its context can sleep, wait for events and memoize).
    pub fn durable_task<I, O, E, F, Fut>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.tasks.push(TaskDef {
            workflow: self.name.clone(),
            name: name.to_string(),
            options,
            durable: true,
            handler: typed(f),
            types: TaskTypes::of::<I, O>(),
        });
        self
    }

    /// Triggers the workflow on matching event keys.
    pub fn on_events<S: Into<String>>(mut self, keys: impl IntoIterator<Item = S>) -> Self {
        self.on_events = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Runs the workflow on each cron expression (`0 * * * *`: hourly; 5 fields, UTC), with
    /// `input` (`{}` when `None`). The engine validates the expressions at registration.
    pub fn on_crons<S: Into<String>>(
        mut self,
        expressions: impl IntoIterator<Item = S>,
        input: Option<serde_json::Value>,
    ) -> Self {
        self.on_crons = expressions.into_iter().map(Into::into).collect();
        self.cron_input = input;
        self
    }

    /// Makes triggers idempotent on `expression` (e.g. `input.order_id`) for `ttl`.
    pub fn idempotency(mut self, expression: impl Into<String>, ttl: std::time::Duration) -> Self {
        self.idempotency = Some((expression.into(), ttl));
        self
    }

    /// Limits how many runs of a group (by `expression`) run at once.
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

    /// The action id of a task (`workflow:task`, lower case, as the engine stores it).
    pub fn action_id(workflow: &str, task: &str) -> String {
        format!("{workflow}:{task}").to_lowercase()
    }

    /// The registration request (`v1.AdminService/PutWorkflow`), `name` already namespaced,
    /// with event keys (triggers and conditions) in `namespace`, as
    /// [`crate::RuntimeHandle::push`] namespaces the keys it pushes.
    pub(crate) fn to_proto_in(
        &self,
        name: &str,
        namespace: &str,
    ) -> v1::CreateWorkflowVersionRequest {
        let ns = |k: &str| {
            if namespace.is_empty() || k.starts_with(namespace) {
                k.to_string()
            } else {
                format!("{namespace}{k}")
            }
        };
        v1::CreateWorkflowVersionRequest {
            name: name.to_string(),
            description: self.description.clone(),
            version: self.version.clone(),
            event_triggers: self.on_events.iter().map(|k| ns(k)).collect(),
            sticky: self.sticky.map(|s| s.wire() as i32),
            default_filters: self
                .default_filters
                .iter()
                .map(|(expression, scope, payload)| v1::DefaultFilter {
                    expression: expression.clone(),
                    scope: scope.clone(),
                    payload: Some(payload.to_string().into_bytes()),
                })
                .collect(),
            cron_triggers: self.on_crons.clone(),
            cron_input: self.cron_input.as_ref().map(|v| v.to_string()),
            tasks: self.engine_tasks().map(|t| t.to_proto(name, &ns)).collect(),
            on_failure_task: self.on_failure.as_ref().map(|t| t.to_proto(name, &ns)),
            default_priority: self.default_priority,
            concurrency_arr: self.concurrency.iter().map(Concurrency::to_proto).collect(),
            idempotency: self
                .idempotency
                .as_ref()
                .map(|(e, ttl)| v1::IdempotencyConfig {
                    expression: e.clone(),
                    ttl_ms: ttl.as_millis() as i64,
                    method: None,
                }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_the_engine_parses_them() {
        let s = Duration::from_secs;
        assert_eq!(wire_duration(s(0)), "0s");
        assert_eq!(wire_duration(s(45)), "45s");
        assert_eq!(wire_duration(s(90)), "1m30s");
        assert_eq!(wire_duration(s(3600)), "1h");
        assert_eq!(wire_duration(s(3723)), "1h2m3s");
        assert_eq!(wire_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(wire_duration(Duration::from_micros(1)), "1ms");
    }

    #[test]
    fn definitions_carry_retries_timeouts_triggers_slots_concurrency_and_durability() {
        use crate::proto::v1::ConcurrencyLimitStrategy;
        let wf = Workflow::new("Orders")
            .task_with(
                "charge",
                TaskOptions::default()
                    .retries(3)
                    .timeout(Duration::from_secs(30))
                    .slots("default", 2),
                |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
            )
            .durable_task(
                "ship",
                TaskOptions::default().parents(["charge"]),
                |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
            )
            .on_events(["order:paid"])
            .concurrency(
                "input.user_id",
                2,
                crate::ConcurrencyStrategy::GroupRoundRobin,
            );
        let p = wf.to_proto_in("ns_orders", "");
        assert_eq!(p.name, "ns_orders");
        assert_eq!(p.event_triggers, ["order:paid"]);
        assert_eq!(
            p.tasks[0].action, "ns_orders:charge",
            "action ids are lower case"
        );
        assert_eq!(
            (p.tasks[0].retries, p.tasks[0].timeout.as_str()),
            (3, "30s")
        );
        assert_eq!(p.tasks[0].slot_requests["default"], 2);
        assert!(p.tasks[1].is_durable);
        assert_eq!(p.tasks[1].parents, ["charge"]);
        assert_eq!(p.tasks[1].slot_requests["durable"], 1);
        assert_eq!(p.concurrency_arr[0].max_runs, Some(2));
        assert_eq!(
            p.concurrency_arr[0].limit_strategy,
            Some(ConcurrencyLimitStrategy::GroupRoundRobin as i32)
        );
    }

    #[test]
    fn on_failure_and_default_priority_reach_the_registration() {
        let wf = Workflow::new("w")
            .task("a", |_: Value, _| async { Ok::<_, TaskError>(1) })
            .on_failure("cleanup", TaskOptions::default(), |_: Value, _| async {
                Ok::<_, TaskError>(())
            })
            .default_priority(3);
        let req = wf.to_proto_in("w", "");
        assert_eq!(req.tasks.len(), 1);
        let hook = req.on_failure_task.expect("on_failure_task is sent");
        assert_eq!(hook.readable_id, "cleanup");
        assert_eq!(hook.action, "w:cleanup");
        assert!(hook.parents.is_empty());
        assert_eq!(req.default_priority, Some(3));
        assert_eq!(wf.all_tasks().count(), 2);
    }

    #[test]
    fn a_task_level_concurrency_limit_is_sent_with_its_task() {
        let wf = Workflow::new("w").task_with(
            "a",
            TaskOptions::default().concurrency("input.user", 2, ConcurrencyStrategy::CancelNewest),
            |_: Value, _: Context| async { Ok::<_, TaskError>(1) },
        );
        let req = wf.to_proto_in("w", "");
        let c = &req.tasks[0].concurrency;
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].expression.as_str(), c[0].max_runs),
            ("input.user", Some(2))
        );
        assert_eq!(
            c[0].limit_strategy,
            Some(ConcurrencyStrategy::CancelNewest.wire() as i32)
        );
        assert!(req.concurrency_arr.is_empty(), "not a workflow-level limit");
    }

    #[test]
    fn an_on_success_task_is_sent_as_a_task_whose_parents_are_the_leaves() {
        let t = |_: Value, _: Context| async { Ok::<_, TaskError>(1) };
        let wf = Workflow::new("w")
            .task("a", t)
            .task_with("b", TaskOptions::default().parents(["a"]), t)
            .task_with("c", TaskOptions::default().parents(["a"]), t)
            .on_success("done", TaskOptions::default(), t);
        let req = wf.to_proto_in("w", "");
        let names: Vec<_> = req.tasks.iter().map(|t| t.readable_id.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "done"]);
        assert_eq!(req.tasks[3].parents, ["b", "c"], "after every leaf");
        assert_eq!(req.tasks[3].action, "w:done");
        assert!(req.on_failure_task.is_none());
        assert_eq!(wf.all_tasks().count(), 4);
    }

    #[test]
    fn timeouts_are_durations_on_the_wire_as_strings() {
        let o = TaskOptions::default()
            .timeout(Duration::from_secs(90))
            .schedule_timeout(Duration::from_secs(600));
        let wf =
            Workflow::new("w").task_with("a", o, |_: Value, _| async { Ok::<_, TaskError>(1) });
        let t = &wf.to_proto_in("w", "").tasks[0];
        assert_eq!(t.timeout, "1m30s");
        assert_eq!(t.schedule_timeout.as_deref(), Some("10m"));
    }
}
