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
//! 4. A heartbeat accepted after a failed one says the engine is back: every listener waiting
//!    out a reconnect backoff opens at once (a killed engine is back in about 2 s; a backoff
//!    grown during its outage would otherwise keep the worker deaf for up to 30 s more).
//! 5. While the engine cannot be reached (UNAVAILABLE, DEADLINE_EXCEEDED) the next heartbeat
//!    goes sooner than a whole interval ([`next_beat_in`]): every [`PROBE_EVERY`] for the first
//!    [`PROBES`] such failures in a row, then at the interval. A blip or a restart (an engine
//!    killed and back in 2 to 10 s) is seen within about a second of its end and invariant 4
//!    acts then (a probe that backed off to the interval left the actions stream unserved 6.5 s
//!    after the real engine's return, where the bound is 3 s); a long outage costs one beat per
//!    interval after the first [`PROBES`]. A refusal keeps the interval: a stream reopened after
//!    one needs time to be taken before the next beat judges it.

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

/// The heartbeat's cadence while the engine cannot be reached (invariant 5).
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Failed heartbeats in a row probed at [`PROBE_EVERY`] before the interval applies again.
pub(crate) const PROBES: u32 = 10;

const PATH: &str = "/Dispatcher/Heartbeat";

pub(crate) use crate::connection::watch::unreachable;

/// How long after a heartbeat the next one goes (pure, invariant 5): `failed` is the code of a
/// heartbeat that failed, `None` for one accepted; `unreachable_in_a_row` counts the heartbeats,
/// this one included, that could not reach the engine.
pub(crate) fn next_beat_in(
    every: Duration,
    failed: Option<Code>,
    unreachable_in_a_row: u32,
) -> Duration {
    match failed {
        Some(code) if unreachable(code) && unreachable_in_a_row <= PROBES => PROBE_EVERY.min(every),
        _ => every,
    }
}

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
        let mut failing = false;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let code = tokio::select! {
                r = beat(&core) => match r {
                    Ok(()) => {
                        refusals = 0;
                        unreachable_in_a_row = 0;
                        if std::mem::take(&mut failing) {
                            // invariant 4: the engine is back; no listener waits out a backoff
                            // (published as the engine watch's own returns are).
                            core.conn.engine_back();
                        }
                        continue;
                    }
                    Err(code) => {
                        failing = true;
                        unreachable_in_a_row = if unreachable(code) {
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

    /// Invariant 5: an unreachable engine is probed every second for the first ten failures,
    /// then at the interval; a refusal, an accepted beat and any other failure keep the
    /// interval, and the probe never exceeds the interval.
    #[test]
    fn an_unreachable_engine_is_probed_soon_then_less_often_and_a_refusal_waits_the_interval() {
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
        assert_eq!(
            next_beat_in(every, Some(Code::Unavailable), u32::MAX),
            every
        );
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
