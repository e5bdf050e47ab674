//! Draining the worker (docs/contract.md §5): pause, finish, report, then stop.
//!
//! # Invariants
//!
//! 1. The worker is paused at the engine first (REST `PATCH /api/v1/workers/{id}` with
//!    `isPaused: true`, as the official SDKs do before exiting), so the engine assigns nothing
//!    new; a pause that fails is logged and the drain goes on.
//! 2. The heartbeat goes on until every running task has ended and reported its final event (or
//!    was cancelled at the drain's deadline): a drain longer than the engine's heartbeat window
//!    never gets a running task reassigned and run twice.
//! 3. Durable tasks waiting on a sleep, an event or a child (or starting to wait during the
//!    drain) are evicted, as the official SDKs' graceful termination does: the engine holds the
//!    wait and runs the task again, replaying its log, on a worker that is up when the wait
//!    completes; the drain does not sit out a wait that may last hours.
//! 4. At the deadline (or at once when the drain is cut: a second signal), what still runs is
//!    cancelled (a cancelled task reports nothing); then the
//!    heartbeat and the actions listener stop and the worker unsubscribes.

use std::sync::Arc;
use std::time::Duration;

use super::WorkerCore;
use crate::connection::CallOpts;
use crate::protocol as proto;

/// How long the pause may take before the drain goes on without it (the Python SDK's 10 s).
pub(super) const PAUSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long cancelled tasks get to end after the deadline.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// How long the final Unsubscribe may take.
const UNSUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Drains `core`'s worker, waiting up to `timeout` for running tasks.
pub(crate) async fn drain(core: &Arc<WorkerCore>, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    let worker_id = core.identity.get();
    if let Some(id) = &worker_id {
        pause(core, id).await;
    }
    // Invariant 3.
    core.draining.cancel();
    // Invariant 2: wait for running attempts (each ends after its final event is delivered).
    loop {
        let ended = core.attempt_ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if core.running() == 0 {
            break;
        }
        tokio::select! {
            _ = ended => {}
            _ = tokio::time::sleep_until(deadline) => break,
            _ = core.drain_cut.cancelled() => break,
        }
    }
    core.stop.cancel();
    core.tracker.close();
    let _ = tokio::time::timeout(CANCEL_GRACE, core.tracker.wait()).await;
    core.heartbeat_stop.cancel();
    if let Some(actions) = core.listeners.actions() {
        actions.stop();
    }
    if let Some(id) = worker_id {
        unsubscribe(core, id).await;
    }
}

async fn pause(core: &WorkerCore, worker_id: &str) {
    let path = format!("/api/v1/workers/{worker_id}");
    let r = tokio::time::timeout(
        PAUSE_TIMEOUT,
        core.conn.rest(
            reqwest::Method::PATCH,
            "PATCH /api/v1/workers/{worker}",
            &path,
            Some(serde_json::json!({ "isPaused": true })),
        ),
    )
    .await;
    match r {
        Ok(Ok(resp)) if resp.is_success() => tracing::info!("worker paused; draining"),
        Ok(Ok(resp)) => {
            tracing::warn!(
                status = resp.status,
                "the engine did not pause the worker; draining anyway"
            )
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "could not pause the worker; draining anyway"),
        Err(_) => tracing::warn!("pausing the worker took over 10 s; draining anyway"),
    }
}

async fn unsubscribe(core: &WorkerCore, worker_id: String) {
    let client = core.conn.dispatcher();
    let req = proto::WorkerUnsubscribeRequest { worker_id };
    let _ = core
        .conn
        .unary(
            "/Dispatcher/Unsubscribe",
            CallOpts::new().timeout(Some(UNSUBSCRIBE_TIMEOUT)),
            &client,
            &req,
            |mut c, r| async move { c.unsubscribe(r).await },
        )
        .await;
}
