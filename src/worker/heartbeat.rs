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
//!    for ten failures, then every 5 s). While the watch probes, the heartbeat does not: the
//!    runtime probes an unreachable engine once, not twice. When the watch publishes the
//!    engine's return the next heartbeat goes at once, so the engine hears the worker within a
//!    probe of its return (it assigns only to workers heard from in the last 5 s), and every
//!    listener waiting out a backoff opens on the same publication.
//! 5. When the engine answers the watch but not the heartbeat (its database restarting: a
//!    heartbeat writes, GetVersion does not), the watch publishes nothing and the heartbeat
//!    itself goes again sooner than the interval ([`next_beat_in`]): every [`RETRY_EVERY`] for
//!    the first [`RETRIES`] such failures in a row, then at the interval, so the worker is heard
//!    within about a second of the database's return.

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

/// The heartbeat's cadence after a failure the watch does not cover (invariant 5).
pub(crate) const RETRY_EVERY: Duration = Duration::from_secs(1);
/// Unreachable failures in a row retried at [`RETRY_EVERY`] before the interval applies again.
pub(crate) const RETRIES: u32 = 10;

const PATH: &str = "/Dispatcher/Heartbeat";

/// How long after a heartbeat the next one goes (pure, invariant 5): `failed` is the code of a
/// heartbeat that failed, `None` for one accepted; `unreachable_in_a_row` counts the heartbeats,
/// this one included, that could not reach the engine.
pub(crate) fn next_beat_in(
    every: Duration,
    failed: Option<Code>,
    unreachable_in_a_row: u32,
) -> Duration {
    match failed {
        Some(code) if unreachable(code) && unreachable_in_a_row <= RETRIES => {
            RETRY_EVERY.min(every)
        }
        _ => every,
    }
}

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
        let mut unreachable_in_a_row = 0u32;
        let mut returns = core.conn.engine_returns();
        returns.mark_unchanged();
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {
                    if unreachable_in_a_row > 0 && core.conn.engine_unanswered() {
                        // Invariant 4: the watch probes; its answer brings the next beat.
                        tick.reset();
                        continue;
                    }
                }
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
                        unreachable_in_a_row = 0;
                        continue;
                    }
                    Err(code) => {
                        unreachable_in_a_row = if unreachable(code) {
                            core.conn.suspect_engine();
                            unreachable_in_a_row.saturating_add(1)
                        } else {
                            0
                        };
                        tick.reset_after(next_beat_in(every, Some(code), unreachable_in_a_row));
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

    /// Invariant 5: a heartbeat the engine did not answer goes again within a second for the
    /// first ten such failures, then at the interval; a refusal, an accepted beat and any other
    /// failure keep the interval, and the retry never exceeds the interval.
    #[test]
    fn an_unanswered_heartbeat_goes_again_soon_then_less_often_and_a_refusal_waits_the_interval() {
        let every = HEARTBEAT_EVERY;
        let secs = Duration::from_secs;
        assert_eq!(next_beat_in(every, None, 0), every);
        for code in [Code::Unavailable, Code::DeadlineExceeded] {
            let gaps: Vec<_> = (1..=12)
                .map(|n| next_beat_in(every, Some(code), n))
                .collect();
            let mut want = vec![secs(1); 10];
            want.extend([every, every]);
            assert_eq!(gaps, want, "{code:?}");
        }
        for code in [
            Code::FailedPrecondition,
            Code::NotFound,
            Code::ResourceExhausted,
            Code::Unauthenticated,
        ] {
            assert_eq!(next_beat_in(every, Some(code), 1), every, "{code:?}");
        }
        let short = Duration::from_millis(300);
        assert_eq!(next_beat_in(short, Some(Code::Unavailable), 1), short);
    }

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
