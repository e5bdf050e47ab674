//! Restarting a durable invocation in doubt from the engine's log (`durable_task` invariant 2):
//! its request was on the wire of a stream that ended before the engine acknowledged it, so the
//! engine may or may not have recorded it, and sending it again could record it twice. Instead
//! of failing the attempt (which, with no retries, fails the run), the worker evicts the
//! invocation, cancels it here and asks the engine to restore it: the new invocation replays
//! onto the log the engine kept, finding the request's node if it was recorded and making it if
//! not. No retry is spent and nothing is reported for the cancelled invocation.
//!
//! # Invariants
//!
//! 1. The invocation is cancelled here only after the engine acknowledged its eviction: an
//!    eviction that cannot be made (after [`EVICTION_TRIES`] tries) fails the held requests with
//!    [`Outcome::MaybeExecuted`](crate::error::Outcome::MaybeExecuted), and the attempt fails as it
//!    would without a restart.
//! 2. The restore is an idempotent write (restoring twice requeues once), retried as one; a
//!    restore the engine never gets leaves the evicted task to its timeout, which the engine
//!    keeps through an eviction, so it is never held forever.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::WorkerCore;
use crate::listener::durable_task::DurableClient;
use crate::protocol as proto;

/// Tries of the eviction (each waits out its own ack and the stream's bound on sending).
pub(super) const EVICTION_TRIES: u32 = 3;

/// What the engine is told.
const REASON: &str = "the durable stream ended before the engine acknowledged an operation of this invocation; it is restarted from its log";

/// Restarts invocation `invocation` of `task` from the engine's log (runs in its own task).
pub(super) async fn restart_from_log(core: Arc<WorkerCore>, task: String, invocation: i32) {
    let home = core.listeners.durable.clone();
    let d = DurableClient {
        registry: home.kind.registry.clone(),
        ensure: Arc::new(move || home.ensure()),
    };
    let mut last = None;
    for _ in 0..EVICTION_TRIES {
        match d.evict(&task, invocation, REASON).await {
            Ok(()) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    if let Some(e) = last {
        // Invariant 1.
        tracing::warn!(task = %task, invocation, error = %e, "a durable invocation in doubt could not be evicted; its attempt fails and its retry replays");
        d.registry.restart_failed(&task, invocation, &e.to_string());
        return;
    }
    core.cancel_running(&task, |i| i <= invocation);
    core.counters.restarted.fetch_add(1, Ordering::Relaxed);
    // Invariant 2.
    let req = proto::RestoreEvictedTaskRequest {
        task_run_external_id: task.clone(),
    };
    let client = core.conn.dispatcher();
    let restored = core
        .conn
        .call(
            "/Dispatcher/RestoreEvictedTask",
            &client,
            &req,
            |mut c, r| async move { c.restore_evicted_task(r).await },
        )
        .await;
    match restored {
        Ok(_) => {
            tracing::info!(task = %task, invocation, "a durable invocation in doubt was evicted and restored; it replays onto the engine's log")
        }
        Err(e) => {
            tracing::warn!(task = %task, invocation, error = %e, "an evicted invocation's restore failed; the engine runs the task again at its timeout")
        }
    }
}
