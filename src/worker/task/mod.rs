//! Workflow and task definitions, one concept per file: the DSL ([`Workflow`],
//! [`TaskOptions`], batch tasks), the task error, the type-erased handler, the task as the worker keeps it,
//! and the wire conversion to the registration request.

mod batch;
mod def;
mod erased;
mod error;
mod handler;
mod options;
mod wire;
mod workflow;

pub use batch::{Batch, BatchMember, Batching};
pub(crate) use def::{TaskDef, TaskTypes};
pub(crate) use erased::TaskFn;
pub use error::TaskError;
pub use handler::Handler;
pub use options::TaskOptions;
pub(crate) use workflow::dag_problem;
pub use workflow::{ConcurrencyStrategy, RateLimitWindow, Workflow};
