//! Typed handles: a registered workflow as [`WorkflowRef<I, O>`] (runs take `I`, results are
//! `O`) and its runs as [`TypedRun<O>`]. They live above the client and the worker: a
//! reference is checked against the handlers the workflow declares.
//!
//! # Invariants
//!
//! 1. A `WorkflowRef` names the task its result comes from, and its types are checked against
//!    what that task's handler declares when the reference is made: adding a task to the DAG,
//!    or an `on_failure` task, cannot change what `result()` returns.
//! 2. `I` is checked against every root task's declared input (they all receive the run input).

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::bulk::BulkRun;
use crate::client::{ClientCore, RunHandle, TriggerOptions};
use crate::error::{Cause, Error, Outcome};
use crate::worker::task::{TaskTypes, Workflow};

/// A registered workflow whose runs take `I` and whose result is `O`, the output of the task it
/// names (invariant 1). Made by [`Registered::returning`]. Cheap to clone.
pub struct WorkflowRef<I, O> {
    name: String,
    output_task: String,
    client: Arc<ClientCore>,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Clone for WorkflowRef<I, O> {
    fn clone(&self) -> Self {
        WorkflowRef {
            name: self.name.clone(),
            output_task: self.output_task.clone(),
            client: self.client.clone(),
            _types: PhantomData,
        }
    }
}

impl<I, O> std::fmt::Debug for WorkflowRef<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowRef")
            .field("name", &self.name)
            .field("output_task", &self.output_task)
            .finish()
    }
}

/// What registration learned about a workflow: its name and each task's declared types. Turn
/// it into a typed reference with [`Registered::returning`].
#[derive(Debug, Clone)]
pub struct Registered {
    name: String,
    tasks: Vec<(String, Vec<String>, TaskTypes)>,
    client: Arc<ClientCore>,
}

impl Registered {
    pub(crate) fn new(wf: &Workflow, client: Arc<ClientCore>) -> Self {
        Registered {
            name: wf.name.clone(),
            tasks: wf
                .engine_tasks()
                .map(|t| (t.name.clone(), t.options.parents.clone(), t.types))
                .collect(),
            client,
        }
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A typed reference whose result is task `task`'s output. Fails (`Invalid`, nothing sent)
    /// when the workflow has no such task, when `O` is not the type that task returns, or when
    /// `I` is not the input type of every root task (invariants 1 and 2).
    pub fn returning<I, O>(&self, task: &str) -> Result<WorkflowRef<I, O>, Error>
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
    {
        const OP: &str = "typed workflow reference";
        let Some((_, _, types)) = self.tasks.iter().find(|(n, _, _)| n == task) else {
            return Err(Error::invalid(
                OP,
                format!("workflow {} has no task {task:?}", self.name),
            ));
        };
        let wanted = TaskTypes::of::<I, O>();
        if types.output != wanted.output {
            return Err(Error::invalid(
                OP,
                format!(
                    "task {task:?} of workflow {} returns {}, not {}",
                    self.name, types.output_name, wanted.output_name
                ),
            ));
        }
        for (name, parents, t) in &self.tasks {
            if parents.is_empty() && t.input != wanted.input {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "root task {name:?} of workflow {} takes {}, not {}",
                        self.name, t.input_name, wanted.input_name
                    ),
                ));
            }
        }
        Ok(WorkflowRef {
            name: self.name.clone(),
            output_task: task.to_string(),
            client: self.client.clone(),
            _types: PhantomData,
        })
    }
}

impl<I: Serialize, O: DeserializeOwned> WorkflowRef<I, O> {
    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Triggers a run and waits for its result.
    ///
    /// # Cancel safety
    ///
    /// As [`crate::runtime::RuntimeHandle::run_no_wait`] until the trigger returns; then cancel safe.
    pub async fn run(&self, input: &I) -> Result<O, Error> {
        self.run_no_wait(input).await?.result().await
    }

    /// Triggers a run.
    ///
    /// # Cancel safety
    ///
    /// As [`crate::runtime::RuntimeHandle::run_no_wait`].
    pub async fn run_no_wait(&self, input: &I) -> Result<TypedRun<O>, Error> {
        self.run_no_wait_with(input, TriggerOptions::new()).await
    }

    /// Triggers a run with options (metadata, priority, idempotency).
    ///
    /// # Cancel safety
    ///
    /// As [`crate::runtime::RuntimeHandle::run_no_wait`].
    pub async fn run_no_wait_with(
        &self,
        input: &I,
        opts: TriggerOptions,
    ) -> Result<TypedRun<O>, Error> {
        let handle = self
            .client
            .run_no_wait_with(&self.name, input, opts)
            .await?;
        Ok(self.typed(handle))
    }

    /// Triggers one run per item through BulkTriggerWorkflow; one answer per item, in order.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (writes): a dropped call may have created some of the runs.
    pub async fn run_many(&self, items: &[BulkRun<I>]) -> Vec<Result<TypedRun<O>, Error>> {
        let items: Vec<(&I, &TriggerOptions)> =
            items.iter().map(|b| (&b.input, &b.options)).collect();
        self.client
            .run_many(&self.name, &items)
            .await
            .into_iter()
            .map(|r| r.map(|h| self.typed(h)))
            .collect()
    }

    /// A typed handle for an existing run of this workflow.
    pub fn run_handle(&self, run_id: impl Into<String>) -> TypedRun<O> {
        self.typed(RunHandle::given(run_id.into(), self.client.clone()))
    }

    fn typed(&self, handle: RunHandle) -> TypedRun<O> {
        TypedRun {
            handle,
            output_task: self.output_task.clone(),
            _output: PhantomData,
        }
    }
}

/// A run of a [`WorkflowRef`]: its result is `O`.
pub struct TypedRun<O> {
    handle: RunHandle,
    output_task: String,
    _output: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for TypedRun<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedRun")
            .field("run_id", &self.handle.run_id())
            .field("output_task", &self.output_task)
            .finish()
    }
}

impl<O> Clone for TypedRun<O> {
    fn clone(&self) -> Self {
        TypedRun {
            handle: self.handle.clone(),
            output_task: self.output_task.clone(),
            _output: PhantomData,
        }
    }
}

impl<O: DeserializeOwned> TypedRun<O> {
    /// The run id.
    pub fn run_id(&self) -> &str {
        self.handle.run_id()
    }

    /// The untyped handle (every task's output, cancel, replay).
    pub fn handle(&self) -> &RunHandle {
        &self.handle
    }

    /// Waits for the run and decodes the named task's output.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (see [`RunHandle::outputs`]).
    pub async fn result(&self) -> Result<O, Error> {
        let mut outputs = self.handle.outputs().await?;
        let run_id = self.handle.run_id();
        let value = outputs.remove(&self.output_task).ok_or_else(|| {
            Error::new(Outcome::Undecodable, "decode run result")
                .with_detail(format!(
                    "the run finished without an output of task {:?}",
                    self.output_task
                ))
                .with_run_id(run_id)
        })?;
        serde_json::from_value(value).map_err(|e| {
            Error::new(Outcome::Invalid, "decode run result")
                .with_detail(format!(
                    "task {:?}'s output does not match the declared type",
                    self.output_task
                ))
                .with_cause(Cause::Json(e))
                .with_run_id(run_id)
        })
    }

    /// Cancels the run (see [`RunHandle::cancel`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancel(&self) -> Result<(), Error> {
        self.handle.cancel().await
    }
}
