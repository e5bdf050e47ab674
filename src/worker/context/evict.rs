//! Eviction while waiting ([`crate::worker::task::TaskOptions::evict_while_waiting`]): a durable task whose
//! wait outlasts its eviction time gives its slot back; so does every waiting durable task once
//! its worker drains (`drain` invariant 3). The worker asks the engine to evict the
//! invocation and stops it (nothing is reported); when the wait completes the engine runs the
//! task again, and the new invocation replays its durable log.
//!
//! # Invariants
//!
//! 1. An invocation is stopped only after the engine acknowledged its eviction; a refused
//!    eviction keeps the wait going.
//! 2. A completion that arrives while the eviction is on its way is not lost: the engine may
//!    have delivered it before it evicted the task, and nothing would then wake the task, so
//!    the worker asks for a restore at once.

use std::future::Future;

use super::Context;
use crate::error::{Cause, DurableError, Error, Outcome};
use crate::listener::durable_task::DurableClient;

/// What the engine is told, by cause.
const REASON: &str = "the task waited longer than its eviction time (evict_while_waiting)";
const DRAINING: &str = "the worker is shutting down; the task resumes on a worker that is up";

impl Context {
    /// Awaits `entry` (a wait, a child), or the task's cancellation, or its eviction time.
    pub(super) async fn await_entry<T>(
        &self,
        d: &DurableClient,
        inv: i32,
        op: &'static str,
        entry: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let ttl = self.inner.task.evict_after;
        let timer = async move {
            match ttl {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let draining = self.inner.core.draining.clone();
        tokio::pin!(entry);
        // Biased: an answer the engine already gave (an eviction, say) wins over the
        // cancellation it caused, so the task sees why it stops.
        let reason = tokio::select! {
            biased;
            r = &mut entry => return r,
            _ = self.inner.cancel.cancelled() => return Err(Error::new(Outcome::Cancelled, op)),
            _ = draining.cancelled() => DRAINING,
            _ = timer => REASON,
        };
        let task = self.task_run_id().to_string();
        // Invariant 1: refused, the wait goes on.
        if let Err(e) = d.evict(&task, inv, reason).await {
            tracing::debug!(task = %task, error = %e, "eviction refused; the task keeps waiting");
            return entry.await;
        }
        // Invariant 2.
        if futures::poll!(&mut entry).is_ready() {
            let api = crate::client::api::Api::new(self.inner.core.conn().clone());
            if let Err(e) = api.restore_task(&task).await {
                tracing::warn!(task = %task, error = %e, "an evicted task's restore failed");
            }
        }
        self.inner.core.cancel_running(&task, |i| i <= inv);
        Err(
            Error::new(Outcome::Cancelled, op).with_cause(Cause::Durable(DurableError::Evicted {
                task,
                invocation: inv,
                reason: reason.to_string(),
            })),
        )
    }
}
