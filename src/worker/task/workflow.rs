//! The workflow DSL: tasks and their DAG, hooks (on_failure, on_success), triggers (events,
//! crons), concurrency, stickiness, idempotency and defaults for its tasks.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::erased::typed;
use super::{Handler, TaskDef, TaskError, TaskOptions, TaskTypes};
use crate::placement::StickyStrategy;
use crate::protocol::v1;
#[cfg(doc)]
use crate::worker::context::Context;

/// The tasks no other task names as a parent, in declaration order (a DAG's last tasks).
fn leaf_tasks(tasks: &[TaskDef]) -> Vec<String> {
    tasks
        .iter()
        .filter(|t| !tasks.iter().any(|o| o.options.parents.contains(&t.name)))
        .map(|t| t.name.clone())
        .collect()
}

/// What keeps `tasks` from being a DAG the engine takes, in words a caller can act on: two
/// tasks of one name, a parent no task has, or parents that make a cycle. The real engine
/// answers the first and last with a bare "An internal error occurred.", so they are caught
/// before anything is sent.
pub(crate) fn dag_problem(tasks: &[TaskDef]) -> Option<String> {
    let mut names = std::collections::HashSet::new();
    for t in tasks {
        if !names.insert(t.name.as_str()) {
            return Some(format!("two tasks are named {:?}", t.name));
        }
    }
    for t in tasks {
        if let Some(p) = t
            .options
            .parents
            .iter()
            .find(|p| !names.contains(p.as_str()))
        {
            return Some(format!(
                "task {:?} names a parent {p:?} that no task of the workflow has",
                t.name
            ));
        }
    }
    // Kahn's order: a task whose parents all came before it comes next; any left form a cycle.
    let mut placed: std::collections::HashSet<&str> = std::collections::HashSet::new();
    while placed.len() < tasks.len() {
        let Some(next) = tasks.iter().find(|t| {
            !placed.contains(t.name.as_str())
                && t.options
                    .parents
                    .iter()
                    .all(|p| placed.contains(p.as_str()))
        }) else {
            let cycle: Vec<&str> = tasks
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| !placed.contains(n))
                .collect();
            return Some(format!("the parents of tasks {cycle:?} make a cycle"));
        };
        placed.insert(next.name.as_str());
    }
    None
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
    /// Cron expressions (5 fields, or 6 with a leading second; UTC) the engine runs it on, and
    /// their input.
    pub(crate) on_crons: Vec<String>,
    /// The input of cron-triggered runs (JSON; `{}` when unset).
    pub(crate) cron_input: Option<serde_json::Value>,
    /// Idempotency key expression (`input.order_id`) and TTL.
    /// The idempotency key: expression, TTL, and whether a run's end releases it (STATUS).
    pub(crate) idempotency: Option<(String, std::time::Duration, bool)>,
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
    pub(super) fn new(expression: String, max_runs: i32, strategy: ConcurrencyStrategy) -> Self {
        Concurrency {
            expression,
            max_runs,
            strategy,
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
    /// differs from its task ids; typed handles (`run::WorkflowRef`) return the task you
    /// name either way.
    pub fn on_failure<I, O, E, F>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
    {
        self.on_failure = Some(self.hook(name, options, f));
        self
    }

    /// A task that runs once every other task of a run has completed, with their outputs as
    /// its parents' (`Context::parent_output`); when a task fails for good or the run is
    /// cancelled it is skipped. As the official SDKs do, it is declared to the engine as a task
    /// whose parents are the workflow's leaf tasks (those no other task depends on), so the run's
    /// outputs include its output.
    pub fn on_success<I, O, E, F>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
    {
        self.on_success = Some(self.hook(name, options, f));
        self
    }

    /// A task the engine places itself (`on_failure`, `on_success`): no parents of its own.
    fn hook<I, O, E, F>(&self, name: &str, options: TaskOptions, f: F) -> TaskDef
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
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
    pub fn task<I, O, E, F>(self, name: &str, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
    {
        self.task_with(name, TaskOptions::new(), f)
    }

    /// Adds a task with options.
    pub fn task_with<I, O, E, F>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
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
    pub fn durable_task<I, O, E, F>(mut self, name: &str, options: TaskOptions, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
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

    /// Adds a batch task: the engine gathers its runs into batches (see [`Batching`](crate::worker::task::Batching)) and the
    /// handler gets each batch in one call, answering one output per member, in the batch's
    /// order (`Batch::members`). A handler error, or a wrong number of outputs, fails every
    /// member. The batch takes one slot of its worker.
    ///
    /// ```no_run
    /// # use hatchet_runtime::task::{Batch, Batching};
    /// # use hatchet_runtime::{Context, TaskError, TaskOptions, Workflow};
    /// # use std::time::Duration;
    /// let wf = Workflow::new("emails").batch_task(
    ///     "send",
    ///     Batching::up_to(50).interval(Duration::from_secs(2)).key("input.domain"),
    ///     TaskOptions::new(),
    ///     |batch: Batch<serde_json::Value>, _ctx: Context| async move {
    ///         // One call to the mail provider for the whole batch.
    ///         Ok::<_, TaskError>(batch.inputs().map(|_| "sent").collect::<Vec<_>>())
    ///     },
    /// );
    /// ```
    pub fn batch_task<I, O, E, F>(
        mut self,
        name: &str,
        batching: super::Batching,
        mut options: TaskOptions,
        f: F,
    ) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Handler<super::Batch<I>, Vec<O>, E>,
    {
        options.batch = Some(batching);
        self.tasks.push(TaskDef {
            workflow: self.name.clone(),
            name: name.to_string(),
            options,
            durable: false,
            handler: super::batch::batch_typed(f),
            types: TaskTypes::of::<I, O>(),
        });
        self
    }

    /// Triggers the workflow on matching event keys.
    pub fn on_events<S: Into<String>>(mut self, keys: impl IntoIterator<Item = S>) -> Self {
        self.on_events = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Runs the workflow on each cron expression (`0 * * * *`: hourly; 5 fields, or 6 with a leading second; UTC), with
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

    /// Makes triggers idempotent on a key: `expression` (CEL over `input`,
    /// `additional_metadata` and `workflow_run_id`, giving a string: `input.order_id`,
    /// `'order-' + input.id`) is evaluated by the engine for each trigger, and a second trigger
    /// whose key a run still holds is refused with that run's id (a trigger marked
    /// [`TriggerOptions::idempotent`](crate::client::TriggerOptions::idempotent) resolves to it). A key
    /// is held for `ttl` (at least 1 ms), whatever the run does.
    ///
    /// Keys are the tenant's, not the workflow's: two workflows whose expressions give the
    /// same string share it, so a trigger of one collides with a run of the other (put the
    /// workflow's name in the expression to keep them apart). An expression that fails on a
    /// trigger's input (a missing field) or gives anything but a string makes the engine
    /// create no run while it still answers the trigger with an id: waiting on that id ends
    /// with the runtime's not-found error (about 10 s).
    pub fn idempotency(mut self, expression: impl Into<String>, ttl: std::time::Duration) -> Self {
        self.idempotency = Some((expression.into(), ttl, false));
        self
    }

    /// As [`Workflow::idempotency`], but the key is released as soon as the run's first root
    /// task ends (completed, failed for good or cancelled; for a one-task workflow, when the
    /// run ends), and `ttl` only bounds how long a live run holds it: a key "while the run is
    /// in flight", the SDKs' status-based idempotency.
    pub fn idempotency_until_done(
        mut self,
        expression: impl Into<String>,
        ttl: std::time::Duration,
    ) -> Self {
        self.idempotency = Some((expression.into(), ttl, true));
        self
    }

    /// Limits how many runs of a group run at once: the group is the string `expression` (CEL
    /// over `input`, `additional_metadata` and `workflow_run_id`: `input.user_id`,
    /// `'user-' + input.user_id`) gives. An expression that fails on a run's input (a missing
    /// field) or gives anything but a string (a number) fails that run at once, on either
    /// engine, with the engine's "failed to parse step expression" reason.
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
    pub(crate) fn action_id(workflow: &str, task: &str) -> String {
        format!("{workflow}:{task}").to_lowercase()
    }
}
