//! What an attempt is: its task and workflow, its attempt numbers, its priority, where it came
//! from (a parent task, an event) and the worker it runs on. The names the official SDKs' task
//! contexts give, read from the assignment and from this worker's own declarations; and the
//! shared state handed to the runtime (`worker::state`).

use std::collections::HashMap;

use super::Context;
use crate::placement::LabelValue;

impl Context {
    /// This attempt's number: 1 for the first attempt, 2 after one retry (the retry count plus
    /// one).
    pub fn attempt_number(&self) -> i32 {
        self.inner.action.retry_count.saturating_add(1)
    }

    /// How many attempts the task has in all: its retries plus one.
    pub fn max_attempts(&self) -> i32 {
        self.inner.task.retries.max(0).saturating_add(1)
    }

    /// The task's name, as its workflow declares it.
    pub fn task_name(&self) -> &str {
        &self.inner.task.name
    }

    /// The workflow's name, as declared (without the client's namespace).
    pub fn workflow_name(&self) -> &str {
        &self.inner.task.workflow
    }

    /// The run's priority as the engine holds it: 1 (lowest) to 3 (highest).
    pub fn priority(&self) -> i32 {
        self.inner.action.priority
    }

    /// For a child run: the task run that spawned it (the engine's `parent_workflow_run_id`,
    /// which holds the parent task run's id).
    pub fn parent_task_run_id(&self) -> Option<&str> {
        self.inner.action.parent_workflow_run_id.as_deref()
    }

    /// For a child run: its index among its parent's children.
    pub fn child_index(&self) -> Option<i32> {
        self.inner.action.child_workflow_index
    }

    /// For a child run spawned with a key: that key.
    pub fn child_key(&self) -> Option<&str> {
        self.inner.action.child_workflow_key.as_deref()
    }

    /// For a run an event triggered: the event's id.
    pub fn triggering_event_id(&self) -> Option<&str> {
        self.inner.action.triggering_event_external_id.as_deref()
    }

    /// For a run an event triggered: the event's key, as pushed (without the namespace).
    pub fn triggering_event_key(&self) -> Option<&str> {
        let key = self.inner.action.triggering_event_key.as_deref()?;
        Some(self.inner.core.conn().config().unnamespaced(key))
    }

    /// The workflow's id at the engine.
    pub fn workflow_id(&self) -> Option<&str> {
        self.inner.action.workflow_id.as_deref()
    }

    /// The id of the workflow version the run uses.
    pub fn workflow_version_id(&self) -> Option<&str> {
        self.inner.action.workflow_version_id.as_deref()
    }

    /// The shared state of type `T` ([`RuntimeHandle::set_state`](crate::runtime::RuntimeHandle::set_state)).
    ///
    /// # Errors
    /// No value of type `T` was handed to the runtime (the error names the type).
    pub fn state<T: Send + Sync + 'static>(
        &self,
    ) -> Result<std::sync::Arc<T>, crate::error::Error> {
        self.inner.core.state.get::<T>().ok_or_else(|| {
            crate::error::Error::invalid(
                "state",
                format!(
                    "no shared state of type {}: hand one to the runtime first with RuntimeHandle::set_state",
                    std::any::type_name::<T>()
                ),
            )
        })
    }

    /// The worker's labels now: as it registered them, with upserts since
    /// ([`Context::upsert_labels`]).
    pub fn worker_labels(&self) -> HashMap<String, LabelValue> {
        self.inner
            .core
            .registration
            .lock()
            .as_ref()
            .map(|r| r.labels.lock().clone())
            .unwrap_or_default()
    }
}
