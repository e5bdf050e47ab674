//! Batch tasks: a task whose attempts the engine gathers and hands to one handler call
//! ([`Workflow::batch_task`]), as the official SDKs' `batch_task` does.
//!
//! # Invariants
//!
//! 1. The handler sees every member of its batch once, in the order the batch lists them, and
//!    returns one output per member in that order: output `i` is member `i`'s result. Any
//!    other number of outputs fails every member, saying so.
//! 2. A handler error fails every member of the batch with that error (not retried when the
//!    error says so).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Handler, TaskError, TaskFn};
use crate::protocol::v1;
use crate::worker::context::Context;

/// How the engine gathers a batch task's runs into batches.
///
/// A batch starts when it has [`Batching::up_to`] members, or when [`Batching::interval`]
/// has passed since the first member arrived, whichever comes first. Runs are batched only
/// with runs of the same key ([`Batching::key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Batching {
    pub(crate) max_size: i32,
    pub(crate) interval: Option<Duration>,
    pub(crate) key: Option<String>,
    pub(crate) max_running: Option<i32>,
}

impl Batching {
    /// Batches of at most `max_size` members (the engine takes 1 to 100,000).
    pub fn up_to(max_size: i32) -> Self {
        Batching {
            max_size,
            interval: None,
            key: None,
            max_running: None,
        }
    }

    /// How long a batch waits for more members before it starts anyway (the engine's default
    /// is one second; it takes 1 ms to 24 h).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Runs are batched only with runs whose key is the same: a CEL expression over `input`,
    /// `additional_metadata`, `workflow_run_id` and `parents` that gives a string, such as
    /// `input.customer`. A run whose key is not a string fails, with the engine's reason.
    pub fn key(mut self, expression: impl Into<String>) -> Self {
        self.key = Some(expression.into());
        self
    }

    /// At most this many batches of one key run at once (the engine's default is 100).
    pub fn max_running(mut self, n: i32) -> Self {
        self.max_running = Some(n);
        self
    }

    /// The registration's batch options.
    pub(crate) fn to_proto(&self) -> v1::TaskBatchConfig {
        v1::TaskBatchConfig {
            batch_max_size: self.max_size,
            batch_max_interval_ms: self
                .interval
                .map(|d| i32::try_from(d.as_millis()).unwrap_or(i32::MAX)),
            batch_group_key: self.key.clone(),
            batch_group_max_runs: self.max_running,
            broadcast_output: None,
        }
    }
}

/// One member of a batch: a run's task, waiting for its output.
#[derive(Debug, Clone)]
pub struct BatchMember<I> {
    task_run_id: String,
    run_id: String,
    input: I,
}

impl<I> BatchMember<I> {
    /// The member's task run id.
    pub fn task_run_id(&self) -> &str {
        &self.task_run_id
    }

    /// The run it belongs to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Its input.
    pub fn input(&self) -> &I {
        &self.input
    }

    /// Takes its input.
    pub fn into_input(self) -> I {
        self.input
    }
}

/// The members of one batch, in the order the handler answers them (invariant 1).
#[derive(Debug, Clone)]
pub struct Batch<I> {
    members: Vec<BatchMember<I>>,
}

impl<I> Batch<I> {
    /// How many members it has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has none (the engine never sends an empty batch).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members, in order.
    pub fn members(&self) -> &[BatchMember<I>] {
        &self.members
    }

    /// The inputs, in order.
    pub fn inputs(&self) -> impl Iterator<Item = &I> {
        self.members.iter().map(|m| &m.input)
    }

    /// Takes the members.
    pub fn into_members(self) -> Vec<BatchMember<I>> {
        self.members
    }
}

/// One member as the worker hands it to the typed handler: the context's input of a batch is
/// a list of these.
#[derive(serde::Deserialize)]
struct WireMember {
    task_run_id: String,
    run_id: String,
    input: Value,
}

/// Wraps a typed `async fn(batch, ctx) -> Result<Vec<output>, error>`: the context's input is
/// the batch's members (see `worker/execute.rs`), and the answer is one output per member.
pub(crate) fn batch_typed<I, O, E, F>(f: F) -> TaskFn
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    E: Into<TaskError> + Send + 'static,
    F: Handler<Batch<I>, Vec<O>, E>,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: Context| {
        let f = f.clone();
        Box::pin(async move {
            let wire: Vec<WireMember> = serde_json::from_value(ctx.input().clone())
                .map_err(|e| TaskError::non_retryable(format!("the batch cannot be read: {e}")))?;
            let mut members = Vec::with_capacity(wire.len());
            for m in wire {
                let input = serde_json::from_value(m.input).map_err(|e| {
                    TaskError::non_retryable(format!(
                        "the input of batch member {} does not match the task's input type: {e}",
                        m.task_run_id
                    ))
                })?;
                members.push(BatchMember {
                    task_run_id: m.task_run_id,
                    run_id: m.run_id,
                    input,
                });
            }
            let n = members.len();
            let outs = f(Batch { members }, ctx).await.map_err(Into::into)?;
            if outs.len() != n {
                return Err(TaskError::non_retryable(format!(
                    "the batch handler returned {} outputs for {n} members; return one output per member, in the batch's order",
                    outs.len()
                )));
            }
            serde_json::to_value(outs).map_err(|e| {
                TaskError::non_retryable(format!("the outputs cannot be serialized: {e}"))
            })
        })
    })
}
