//! One task as the worker keeps it: its name, workflow, options, durability, handler and the
//! Rust types its handler declares.

use std::any::TypeId;

use super::{TaskFn, TaskOptions};
use crate::worker::context::TaskAbout;

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

impl TaskDef {
    /// What a context needs of the task (the handler stays with the worker).
    pub(crate) fn about(&self) -> TaskAbout {
        TaskAbout {
            name: self.name.clone(),
            workflow: self.workflow.clone(),
            retries: self.options.retries,
            evict_after: self.options.evict_after,
        }
    }
}
