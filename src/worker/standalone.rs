//! A typed standalone task: one task that is its own workflow, declared and run without writing
//! the one-task `Workflow` by hand (the official SDKs' `hatchet.task(...)`). Its input and output
//! types come from its handler, so the reference its registration returns is typed with them.

use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::task::{Handler, TaskError, TaskOptions, Workflow};

/// A task named `name` that is the whole workflow `name`, taking `I` and returning `O`.
/// Register it with [`RuntimeHandle::register_task`](crate::runtime::RuntimeHandle::register_task),
/// which gives back a `run::WorkflowRef<I, O>` to run it with.
pub struct Task<I, O> {
    workflow: Workflow,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> std::fmt::Debug for Task<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("name", &self.workflow.name())
            .finish_non_exhaustive()
    }
}

impl<I, O> Task<I, O>
where
    I: Serialize + DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    /// A task with default options.
    pub fn new<E, F>(name: &str, f: F) -> Self
    where
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
    {
        Self::with_options(name, TaskOptions::new(), f)
    }

    /// A task with `options` (retries, timeouts, rate limits, labels, conditions).
    pub fn with_options<E, F>(name: &str, options: TaskOptions, f: F) -> Self
    where
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
    {
        Self::of(Workflow::new(name).task_with(name, options, f))
    }

    /// A durable task (its sleeps, waits and memos survive worker restarts).
    pub fn durable<E, F>(name: &str, options: TaskOptions, f: F) -> Self
    where
        E: Into<TaskError> + Send + 'static,
        F: Handler<I, O, E>,
    {
        Self::of(Workflow::new(name).durable_task(name, options, f))
    }

    fn of(workflow: Workflow) -> Self {
        Task {
            workflow,
            _types: PhantomData,
        }
    }

    /// Its workflow-level settings (events and crons that trigger it, concurrency, priority,
    /// stickiness, idempotency, filters): `f` gets the one-task workflow to configure.
    pub fn workflow(mut self, f: impl FnOnce(Workflow) -> Workflow) -> Self {
        self.workflow = f(self.workflow);
        self
    }

    /// Its name (the task's and its workflow's).
    pub fn name(&self) -> &str {
        self.workflow.name()
    }

    pub(crate) fn into_workflow(self) -> Workflow {
        self.workflow
    }
}
