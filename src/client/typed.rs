//! Typed handles: a registered workflow as [`WorkflowRef<I, O>`] (runs take `I`, results are
//! `O`), its runs as [`TypedRun<O>`], and one typed model of a run read ([`RunView`]) whether
//! it came over gRPC (GetRunDetails) or REST.
//!
//! # Invariants
//!
//! 1. A `WorkflowRef` names the task its result comes from, and its types are checked against
//!    what that task's handler declares when the reference is made: adding a task to the DAG,
//!    or an `on_failure` task, cannot change what `result()` returns.
//! 2. `I` is checked against every root task's declared input (they all receive the run input).
//! 3. `RunView` decodes every task output once; a task whose output is not JSON keeps `None`
//!    and says so in `output_error`.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::api::RunStatus;
use super::bulk::BulkRun;
use super::{ClientCore, RunHandle, TriggerOptions};
use crate::error::{Cause, Error, Outcome};
use crate::proto::v1;
use crate::worker::task::{TaskTypes, Workflow};

/// A run, read back: status, input, metadata and every task's status, output and error.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RunView {
    /// The run id.
    pub run_id: String,
    /// The run's status.
    pub status: RunStatus,
    /// The run's input.
    pub input: Value,
    /// The run's additional metadata.
    pub metadata: serde_json::Map<String, Value>,
    /// Its tasks, by task name.
    pub tasks: BTreeMap<String, TaskView>,
}

/// One task of a [`RunView`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TaskView {
    /// The task run id.
    pub task_run_id: String,
    /// The task's status.
    pub status: RunStatus,
    /// Its output, decoded (`None` until it completed).
    pub output: Option<Value>,
    /// Its error, if it failed or was cancelled.
    pub error: Option<String>,
    /// Whether `output` is the output as the engine recorded it (a read of its run over REST
    /// found the task's finished event): without it, a REST read's `{}` may stand for an output
    /// that is not a JSON object.
    #[serde(skip)]
    pub(crate) recorded: bool,
}

impl RunView {
    /// Whether the run has finished.
    pub fn is_final(&self) -> bool {
        self.status.is_final()
    }

    /// Task `task`'s output decoded as `O`.
    pub fn output<O: DeserializeOwned>(&self, task: &str) -> Result<O, Error> {
        let Some(t) = self.tasks.get(task) else {
            return Err(Error::invalid(
                "read run output",
                format!(
                    "run {} has no task {task:?} (tasks: {:?})",
                    self.run_id,
                    self.tasks.keys().collect::<Vec<_>>()
                ),
            ));
        };
        let Some(v) = &t.output else {
            return Err(Error::new(Outcome::NotFinished, "read run output")
                .with_detail(format!(
                    "task {task:?} has no output yet (status {})",
                    t.status
                ))
                .with_run_id(&self.run_id));
        };
        serde_json::from_value(v.clone()).map_err(|e| {
            Error::new(Outcome::Invalid, "read run output")
                .with_detail(format!(
                    "task {task:?}'s output does not match the requested type"
                ))
                .with_cause(Cause::Json(e))
                .with_run_id(&self.run_id)
        })
    }

    /// The run-stream event these details describe (a finished run's results).
    pub(crate) fn into_event(self) -> crate::proto::WorkflowRunEvent {
        let results = self
            .tasks
            .into_iter()
            .map(|(name, t)| {
                let completed = t.status == RunStatus::Completed;
                crate::proto::StepRunResult {
                    task_run_external_id: t.task_run_id.clone(),
                    task_name: name,
                    job_run_id: String::new(),
                    error: match t.error {
                        Some(e) => Some(e),
                        // A cancelled task has no error text on the real engine.
                        None if !completed => Some(String::new()),
                        None => None,
                    },
                    output: completed.then(|| {
                        t.output
                            .map(|o| o.to_string())
                            .unwrap_or_else(|| "null".into())
                    }),
                }
            })
            .collect();
        crate::proto::WorkflowRunEvent {
            workflow_run_id: self.run_id,
            event_type: crate::proto::WorkflowRunEventType::Finished as i32,
            event_timestamp: None,
            results,
        }
    }

    /// From GetRunDetails.
    pub(crate) fn from_grpc(run_id: &str, d: v1::GetRunDetailsResponse) -> Self {
        let status = RunStatus::from_v1(d.status).unwrap_or(RunStatus::Running);
        let json = |b: &[u8]| serde_json::from_slice::<Value>(b).ok();
        let tasks = d
            .task_runs
            .into_iter()
            .map(|(name, t)| {
                let view = TaskView {
                    task_run_id: t.external_id,
                    status: RunStatus::from_v1(t.status).unwrap_or(RunStatus::Running),
                    output: t.output.as_deref().and_then(json),
                    // The real engine sends an empty error for a task that has none.
                    error: t.error.filter(|e| !e.is_empty()),
                    // GetRunDetails carries each output's bytes as the engine recorded them.
                    recorded: true,
                };
                (name, view)
            })
            .collect();
        RunView {
            run_id: run_id.to_string(),
            status,
            input: json(&d.input).map(run_input).unwrap_or(Value::Null),
            metadata: match json(&d.additional_metadata) {
                Some(Value::Object(m)) => m,
                _ => Default::default(),
            },
            tasks,
        }
    }

    /// From the REST `V1WorkflowRunDetails` object.
    pub(crate) fn from_rest(v: &Value) -> Result<Self, String> {
        let run = v.get("run").ok_or("the answer has no run")?;
        let status = |x: &Value| -> Result<RunStatus, String> {
            serde_json::from_value(x.get("status").cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("unknown status: {e}"))
        };
        let run_id = run["metadata"]["id"]
            .as_str()
            .ok_or("the run has no metadata.id")?
            .to_string();
        // Task names: the run's shape names each task by id (a task's displayName is
        // `<name>-<unix ms>` on the real engine); the action id `workflow:task` is the fallback.
        let shape: BTreeMap<&str, &str> = v
            .get("shape")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| Some((s["taskExternalId"].as_str()?, s["taskName"].as_str()?)))
            .collect();
        // The outputs as recorded: the run's FINISHED events carry each task's output as JSON
        // text, where its `tasks` rows show an output that is not a JSON object as `{}` (issue
        // 58, item 8; both engines).
        let recorded: BTreeMap<&str, Value> = {
            let mut by_task: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
            for e in v
                .get("taskEvents")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|e| e["eventType"] == "FINISHED")
            {
                let (Some(task), Some(text)) = (e["taskId"].as_str(), e["output"].as_str()) else {
                    continue;
                };
                let retry = e["retryCount"].as_i64().unwrap_or(0);
                if !text.is_empty() && by_task.get(task).is_none_or(|(r, _)| *r <= retry) {
                    by_task.insert(task, (retry, text));
                }
            }
            by_task
                .into_iter()
                .filter_map(|(task, (_, text))| Some((task, serde_json::from_str(text).ok()?)))
                .collect()
        };
        let mut tasks = BTreeMap::new();
        for t in v
            .get("tasks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = t["taskExternalId"].as_str().unwrap_or_default();
            let name = task_name(shape.get(id).copied(), t);
            let st = status(t)?;
            let error = t["errorMessage"]
                .as_str()
                .filter(|e| !e.is_empty())
                .map(str::to_string);
            let exact = recorded.get(id).cloned();
            let recorded = exact.is_some();
            let output =
                (st == RunStatus::Completed).then(|| exact.unwrap_or_else(|| t["output"].clone()));
            tasks.insert(
                name,
                TaskView {
                    task_run_id: t["taskExternalId"].as_str().unwrap_or_default().to_string(),
                    status: st,
                    output,
                    error,
                    recorded,
                },
            );
        }
        Ok(RunView {
            run_id,
            status: status(run)?,
            input: run
                .get("input")
                .cloned()
                .map(run_input)
                .unwrap_or(Value::Null),
            metadata: match run.get("additionalMetadata") {
                Some(Value::Object(m)) => m.clone(),
                _ => Default::default(),
            },
            tasks,
        })
    }
}

/// A task's name in a REST read: from the run's shape, else the task part of its action id
/// (`workflow:task`), else its display name without the real engine's `-<unix ms>` suffix.
fn task_name(from_shape: Option<&str>, t: &Value) -> String {
    if let Some(n) = from_shape {
        return n.to_string();
    }
    let display = t["displayName"].as_str().unwrap_or_default();
    let from_action = t["actionId"]
        .as_str()
        .and_then(|a| a.split_once(':'))
        .map(|(_, n)| n);
    match from_action {
        Some(n) if n.eq_ignore_ascii_case(display) => display.to_string(),
        Some(n) => match display.rsplit_once('-') {
            Some((base, ms))
                if base.eq_ignore_ascii_case(n) && ms.bytes().all(|b| b.is_ascii_digit()) =>
            {
                base.to_string()
            }
            _ => n.to_string(),
        },
        None => display.to_string(),
    }
}

/// The run's input as it was triggered. The real engine stores a task's input as
/// `{"input": ..., "parents": ..., "triggers": ..., "triggered_by": ...}` and a one-task run's
/// reads show that object; the trigger's input is its `input`.
fn run_input(v: Value) -> Value {
    match v {
        Value::Object(mut m)
            if m.contains_key("input")
                && (m.contains_key("triggered_by") || m.contains_key("triggers"))
                && m.contains_key("parents") =>
        {
            m.remove("input").unwrap_or(Value::Null)
        }
        other => other,
    }
}

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
    /// As [`crate::RuntimeHandle::run_no_wait`] until the trigger returns; then cancel safe.
    pub async fn run(&self, input: &I) -> Result<O, Error> {
        self.run_no_wait(input).await?.result().await
    }

    /// Triggers a run.
    ///
    /// # Cancel safety
    ///
    /// As [`crate::RuntimeHandle::run_no_wait`].
    pub async fn run_no_wait(&self, input: &I) -> Result<TypedRun<O>, Error> {
        self.run_no_wait_with(input, TriggerOptions::new()).await
    }

    /// Triggers a run with options (metadata, priority, idempotency).
    ///
    /// # Cancel safety
    ///
    /// As [`crate::RuntimeHandle::run_no_wait`].
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
