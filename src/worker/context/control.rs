//! What a task can do about its own attempt: read the errors an `on_failure` task was started
//! for, extend its timeout, give its slot back, cancel its own run.
//!
//! # Invariants
//!
//! 1. Every call names this attempt's task run id; none of them can reach another task.
//! 2. The calls go through the retry core with their contract classes (RefreshTimeout,
//!    ReleaseSlot and CancelTasks are idempotent writes), bounded by the task's cancellation
//!    token: a cancelled task's call ends at once.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::Context;
use crate::connection::CallOpts;
use crate::error::Error;
use crate::placement::LabelValue;
use crate::protocol::{self as proto, v1};
use crate::worker::duration::wire_duration;

impl Context {
    /// In an `on_failure` task: the errors of the tasks whose failure started it, by task name
    /// (the engine sends the first task that failed for good). Empty in any other task.
    pub fn task_run_errors(&self) -> &BTreeMap<String, String> {
        &self.inner.errors
    }

    /// The error of the failed task `task`, if it is one of [`Context::task_run_errors`].
    pub fn task_run_error(&self, task: &str) -> Option<&str> {
        self.inner.errors.get(task).map(String::as_str)
    }

    /// Extends this attempt's execution timeout by `by` (added to the current deadline, not to
    /// now). Returns the new deadline as the engine reports it; the engine may coalesce calls
    /// made within half a second and answer with the previous deadline.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the strict sense: a dropped call may or may not have extended the
    /// deadline. Calling again extends it again.
    pub async fn refresh_timeout(&self, by: Duration) -> Result<SystemTime, Error> {
        const PATH: &str = "/Dispatcher/RefreshTimeout";
        if by.is_zero() {
            return Err(Error::invalid(
                PATH,
                "refresh the timeout by more than zero",
            ));
        }
        let conn = self.inner.core.conn();
        let req = proto::RefreshTimeoutRequest {
            task_run_external_id: self.task_run_id().to_string(),
            increment_timeout_by: wire_duration(by),
        };
        let client = conn.dispatcher();
        let r = conn
            .unary(
                PATH,
                CallOpts::new().cancel(Some(self.inner.cancel.clone())),
                &client,
                &req,
                |mut c, r| async move { c.refresh_timeout(r).await },
            )
            .await?;
        Ok(r.timeout_at
            .map(|t| {
                SystemTime::UNIX_EPOCH
                    + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32)
            })
            .unwrap_or_else(SystemTime::now))
    }

    /// Asks the engine to give this attempt's worker slot back while the task keeps running (a
    /// task that waits on something slow and wants its worker to take other work). The worker's
    /// own bound then lets another task run in its place; the task's result is still reported
    /// as usual.
    ///
    /// The real engine (v0.104.9) accepts the call but keeps counting the slot until the attempt
    /// ends: its release statement deletes none of the task's slot rows. So no other task is
    /// sent in its place there, and the development engine does the same unless a test turns on
    /// `DevEngine::release_slot_frees`.
    ///
    /// The same statement clears the task's worker, so from then on a cancel or a timeout of
    /// this attempt no longer reaches this handler (the engine routes a cancellation by that
    /// column), and the task is not reassigned if this worker goes silent; both engines do this.
    /// Bound the rest of the task's work yourself. A task that finishes after such a cancel has
    /// its completion recorded: waiters already waiting read the cancel, later ones the output.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: releasing twice is harmless. The worker's permit is given back once the
    /// engine has released its slot; if the call fails, both keep the slot.
    pub async fn release_slot(&self) -> Result<(), Error> {
        const PATH: &str = "/Dispatcher/ReleaseSlot";
        let conn = self.inner.core.conn();
        let req = proto::ReleaseSlotRequest {
            task_run_external_id: self.task_run_id().to_string(),
        };
        let client = conn.dispatcher();
        conn.unary(
            PATH,
            CallOpts::new().cancel(Some(self.inner.cancel.clone())),
            &client,
            &req,
            |mut c, r| async move { c.release_slot(r).await },
        )
        .await?;
        self.inner.slot.lock().take();
        Ok(())
    }

    /// Spawns a child run that stays on this worker when its workflow is sticky
    /// ([`crate::worker::task::Workflow::sticky`]): `Hard` waits for this worker, `Soft` prefers it. Same
    /// child index rules as [`Context::spawn_child`].
    ///
    /// # Cancel safety
    ///
    /// As [`Context::spawn_child`].
    pub async fn spawn_sticky_child<I: serde::Serialize>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<crate::client::RunHandle, Error> {
        let worker = self.inner.core.identity.get().ok_or_else(|| {
            Error::invalid("spawn child", "this worker has no id yet (not registered)")
        })?;
        self.spawn_child_inner(workflow, input, super::ChildOptions::new(), Some(worker))
            .await
    }

    /// Sets labels on this task's worker (only the keys given change), as
    /// [`crate::runtime::RuntimeHandle::upsert_labels`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an upsert can be repeated.
    pub async fn upsert_labels<K: Into<String>, V: Into<LabelValue>>(
        &self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Result<(), Error> {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.inner.core.upsert_labels(labels).await
    }

    /// Cancels this task's whole run (CancelTasks with the run id). The engine sends this
    /// attempt a cancellation, so [`Context::cancellation`] fires soon after: return then.
    ///
    /// The call is bound to this task's cancellation, as every call a task makes: once the task
    /// is cancelled (by this very call once the engine acts on it, a timeout, a shutdown) its
    /// retries stop, and it answers [`Outcome::Cancelled`](crate::error::Outcome::Cancelled). Either
    /// way the task should return.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelling twice is harmless.
    pub async fn cancel_run(&self) -> Result<(), Error> {
        const PATH: &str = "/v1.AdminService/CancelTasks";
        let conn = self.inner.core.conn();
        let req = v1::CancelTasksRequest {
            external_ids: vec![self.workflow_run_id().to_string()],
            filter: None,
        };
        let client = conn.admin();
        conn.unary(
            PATH,
            CallOpts::new().cancel(Some(self.inner.cancel.clone())),
            &client,
            &req,
            |mut c, r| async move { c.cancel_tasks(r).await },
        )
        .await
        .map(|_| ())
    }
}
