//! The worker's heartbeat: owned by the worker, not by the actions stream, so it runs from
//! registration to the end of a drain (docs/contract.md §3 "Heartbeat", §5 "Drain").
//!
//! # Invariants
//!
//! 1. One heartbeat every [`HEARTBEAT_EVERY`] (unless the runtime's options say otherwise), each with its own [`HEARTBEAT_DEADLINE`], one at a
//!    time (a slow engine never piles them up), outside the unary retry layer: the next tick is
//!    the retry. Each is counted in the ledger as one attempt of one operation.
//! 2. It stops only when the worker's heartbeat token is cancelled (the end of a drain, after the
//!    last final event) or the runtime shuts down; the actions stream's state never stops it.
//! 3. FAILED_PRECONDITION or NOT_FOUND reopens the actions stream; NOT_FOUND, or a refusal that
//!    continues after a reopen while no task runs, makes the worker register again (a new worker
//!    id). While tasks run it only reopens: their assignments are the old id's, a new id would
//!    stop their heartbeats, and the engine would reassign them after 30 s to run twice. Only
//!    NOT_FOUND (the worker's row is gone, and its tasks with it) registers again with tasks
//!    running.
//! 4. A heartbeat that cannot reach the engine (UNAVAILABLE, DEADLINE_EXCEEDED) asks the engine
//!    watch to probe it (`connection::watch`: one probe loop for the runtime, about every second
//!    for ten failures, then every 5 s) and keeps its own interval: the runtime probes an
//!    unreachable engine once, not twice (a heartbeat of its own each second beside the watch's
//!    GetVersion). When the watch publishes the engine's return the next heartbeat goes at once,
//!    so the engine hears the worker within a probe of its return (it assigns only to workers
//!    heard from in the last 5 s), and every listener waiting out a backoff opens on the same
//!    publication.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tonic::Code;

use super::WorkerCore;
use crate::protocol as proto;
use crate::retry::grpc::request_with_timeout;

/// Heartbeat interval (the engine assigns only to workers heard from in the last 5 s).
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(4);
/// Heartbeat deadline.
pub(crate) const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(3);

const PATH: &str = "/Dispatcher/Heartbeat";

pub(crate) use crate::connection::watch::unreachable;

/// What the worker does after a heartbeat refused with `code`, `refusals` in a row (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterRefusal {
    /// Nothing (a transient failure: the next tick retries).
    Wait,
    /// Reopen the actions stream.
    Reopen,
    /// Register again (the worker row is gone), then listen.
    Reregister,
}

/// The rule of invariant 3; `running`: whether tasks run under the worker's id.
pub(crate) fn after_refusal(code: Code, refusals: u32, running: bool) -> AfterRefusal {
    match code {
        Code::NotFound => AfterRefusal::Reregister,
        Code::FailedPrecondition if refusals > 1 && !running => AfterRefusal::Reregister,
        Code::FailedPrecondition => AfterRefusal::Reopen,
        _ => AfterRefusal::Wait,
    }
}

/// Starts the heartbeat of `core`'s registered worker.
pub(crate) fn spawn(core: Arc<WorkerCore>) {
    let stop = core.heartbeat_stop.clone();
    tokio::spawn(async move {
        let every = core.conn.heartbeat_every();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut refusals = 0u32;
        let mut returns = core.conn.engine_returns();
        returns.mark_unchanged();
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
                // Invariant 4: the watch saw the engine return; beat now, then at the interval.
                changed = returns.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    tick.reset();
                }
            }
            let code = tokio::select! {
                r = beat(&core) => match r {
                    Ok(()) => {
                        refusals = 0;
                        continue;
                    }
                    Err(code) => {
                        if unreachable(code) {
                            core.conn.suspect_engine();
                        }
                        code
                    }
                },
                _ = stop.cancelled() => break,
            };
            if matches!(code, Code::FailedPrecondition | Code::NotFound) {
                refusals += 1;
            }
            let Some(actions) = core.listeners.actions() else {
                continue;
            };
            let running = !core.running.lock().is_empty();
            match after_refusal(code, refusals, running) {
                AfterRefusal::Wait => {}
                AfterRefusal::Reopen => {
                    tracing::warn!(?code, "heartbeat refused; reopening the action stream");
                    actions.reopen();
                }
                AfterRefusal::Reregister => {
                    tracing::warn!(?code, "heartbeats keep being refused; registering again");
                    refusals = 0;
                    core.identity.clear();
                    actions.reopen();
                }
            }
        }
    });
}

/// One heartbeat; the refusal's code when it failed.
async fn beat(core: &WorkerCore) -> Result<(), Code> {
    let Some(worker_id) = core.identity.get() else {
        return Ok(()); // registering again: nothing to beat for yet
    };
    let mut client = core.conn.dispatcher();
    let req = proto::HeartbeatRequest {
        worker_id,
        heartbeat_at: Some(crate::protocol::timestamp_now()),
    };
    let sent = Instant::now();
    let ledger = core.conn.grpc_core().ledger();
    ledger.operation(PATH);
    ledger.attempt(PATH, false);
    match client
        .heartbeat(request_with_timeout(req, HEARTBEAT_DEADLINE))
        .await
    {
        Ok(_) => {
            core.identity.heartbeat_ok.send_replace(Some(sent));
            ledger.finished(PATH, "ok");
            Ok(())
        }
        Err(s) => {
            // Finals answered just before may have been lost with the engine (reclaim.rs).
            core.reclaim.disturbed();
            ledger.failure(PATH, &format!("{:?}", s.code()));
            ledger.finished(PATH, "failed");
            Err(s.code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_reopen_first_and_register_again_when_they_continue() {
        assert_eq!(
            after_refusal(Code::FailedPrecondition, 1, false),
            AfterRefusal::Reopen
        );
        assert_eq!(
            after_refusal(Code::FailedPrecondition, 2, false),
            AfterRefusal::Reregister
        );
        assert_eq!(
            after_refusal(Code::NotFound, 1, false),
            AfterRefusal::Reregister
        );
        assert_eq!(
            after_refusal(Code::Unavailable, 5, false),
            AfterRefusal::Wait
        );
    }

    /// While tasks run, a worker whose stream the engine calls inactive reopens it however often it
    /// is refused, and keeps its id: a new one would leave the running tasks without heartbeats,
    /// and the engine would run them again elsewhere after 30 s.
    #[test]
    fn with_tasks_running_a_refused_heartbeat_only_reopens() {
        for refusals in 1..10 {
            assert_eq!(
                after_refusal(Code::FailedPrecondition, refusals, true),
                AfterRefusal::Reopen
            );
        }
        assert_eq!(
            after_refusal(Code::NotFound, 1, true),
            AfterRefusal::Reregister,
            "the row is gone, and its tasks with it"
        );
    }
}
