//! What a task learns about the conditions around it, and durable waits on several conditions:
//! [`Context::wait_for`], [`Context::triggers`], [`Context::filter_payload`],
//! [`Context::was_skipped`].
//!
//! # Invariants
//!
//! 1. A durable wait takes sleeps and events only (a parent condition is refused locally, the
//!    engine would ignore it); groups are AND-ed, conditions inside a group OR-ed.
//! 2. The result names what fired by the conditions' keys, the same after a replay: the engine
//!    answers a replayed wait from its record.

use serde_json::Value;

use super::Context;
use crate::error::Error;
use crate::worker::conditions::{AnyOf, WaitResult, durable_conditions};

impl Context {
    /// Waits durably until every group holds (one condition of each): a sleep OR an event,
    /// say. The result says which conditions fired, by key; a restarted worker gets the same
    /// answer.
    ///
    /// ```no_run
    /// # async fn demo(ctx: hatchet_runtime::Context) -> Result<(), hatchet_runtime::Error> {
    /// use std::time::Duration;
    /// use hatchet_runtime::durable::{any_of, Condition};
    /// let r = ctx
    ///     .wait_for([any_of([
    ///         Condition::sleep(Duration::from_secs(3600)),
    ///         Condition::event("order:approved").expression("input.ok == true").into(),
    ///     ])])
    ///     .await?;
    /// if r.fired("order:approved") { /* approved within the hour */ }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe here, with a caveat for replays: dropping the future forgets the wait in this
    /// process only; the engine keeps it (its node is recorded) and the invocation's next
    /// operation is numbered after it. Drop it only where a replay would drop it too (see
    /// [`Context::sleep_for`]).
    pub async fn wait_for(
        &self,
        groups: impl IntoIterator<Item = AnyOf>,
    ) -> Result<WaitResult, Error> {
        let groups: Vec<AnyOf> = groups.into_iter().collect();
        if groups.is_empty() || groups.iter().any(|g| g.0.is_empty()) {
            return Err(Error::invalid(
                "durable wait",
                "wait for at least one condition in every group",
            ));
        }
        if groups.iter().flat_map(|g| &g.0).any(|c| c.is_parent()) {
            return Err(Error::invalid(
                "durable wait",
                "a durable wait takes sleeps and events; parent conditions belong to DAG tasks (TaskOptions::wait_for)",
            ));
        }
        let (d, inv) = self.durable()?;
        let config = self.inner.core.conn().config().clone();
        // A lookback counts back from the durable clock (a node of the log, asked only when a
        // condition has one): a replay sends the same instant.
        let now = if groups.iter().flat_map(|g| &g.0).any(|c| c.has_lookback()) {
            Some(self.now().await?)
        } else {
            None
        };
        let cond = durable_conditions(&groups, &|k| config.namespaced(k), now);
        let payload = self.wait(d, inv, cond).await?;
        Ok(WaitResult::from_payload_keyed(&payload, &|k| {
            config.unnamespaced(k).to_string()
        }))
    }

    /// What satisfied this task's conditions, by condition key (an event's payload, a sleep's
    /// duration), plus `filter_payload`. Empty for a task without conditions.
    pub fn triggers(&self) -> &serde_json::Map<String, Value> {
        &self.inner.triggers
    }

    /// The payload of the event filter that started this run (`{}` when none did).
    pub fn filter_payload(&self) -> Value {
        match self.inner.triggers.get("filter_payload") {
            Some(v @ Value::Object(_)) => v.clone(),
            _ => Value::Object(Default::default()),
        }
    }

    /// The id of the worker running this attempt (as the engine knows it).
    pub fn worker_id(&self) -> Option<String> {
        self.inner.core.identity.get()
    }

    /// Whether the parent task `parent` was skipped (its `skip_if` held, or all its own
    /// parents were skipped).
    pub fn was_skipped(&self, parent: &str) -> bool {
        self.inner
            .parents
            .get(parent)
            .and_then(|o| o.get("skipped"))
            == Some(&Value::Bool(true))
    }
}
