//! One typed model of a run read ([`RunView`]), whether it came over gRPC (GetRunDetails) or
//! REST.
//!
//! # Invariants
//!
//! 1. `RunView` decodes every task output once; a task whose output is not JSON keeps `None`
//!    and says so in `output_error`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::api::RunStatus;
use crate::error::{Cause, Error, Outcome};
use crate::protocol::v1;

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
    pub(crate) fn into_event(self) -> crate::protocol::WorkflowRunEvent {
        let results = self
            .tasks
            .into_iter()
            .map(|(name, t)| {
                let completed = t.status == RunStatus::Completed;
                crate::protocol::StepRunResult {
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
        crate::protocol::WorkflowRunEvent {
            workflow_run_id: self.run_id,
            event_type: crate::protocol::WorkflowRunEventType::Finished as i32,
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
        // text, where its `tasks` rows show an output that is not a JSON object as `{}` (both
        // engines).
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
