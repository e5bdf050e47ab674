//! DAG rules: the conditions that queue, skip or cancel a task, the CEL subset they and the
//! event filters use, and the filters themselves.

pub(crate) mod expr;
pub(crate) mod filters;
pub(crate) mod matches;
