//! The workflow-runs listener: one shared `SubscribeToWorkflowRuns` stream, a run-id waiter
//! registry, exactly-once delivery per waiter, and a polling fallback (docs/contract.md §4).
//!
//! # Invariants
//!
//! 1–3. Exactly-once delivery, one-shot sends, replay before publish: see [`super::keyed`].
//! 4. While waiters are pending the reconnect delay is capped at 5 s; after 30 s without a stream
//!    the waiters are also polled with GetRunDetails every 2 s, until the stream returns.

use super::keyed::{Keyed, KeyedRegistry, Origin};
use super::run_event::{RunEvent, RunEventCodec};
pub(crate) use super::run_key::RunKey;
use super::subscriptions::{KeyedKind, KeyedStream};
use crate::connection::Connection;
use crate::error::{Cause, Error, Outcome, TaskFailure};
use crate::protocol::{self as proto, v1};

/// The `SubscribeToWorkflowRuns` stream: keys are run ids.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunsStream;

impl Keyed for RunsStream {
    const SWEPT: bool = true;
    type Key = RunKey;
    type Req = proto::SubscribeToWorkflowRunsRequest;
    /// Read by the waiter that receives it ([`super::run_event`]).
    type Resp = RunEvent;

    fn request(key: &RunKey) -> Self::Req {
        proto::SubscribeToWorkflowRunsRequest {
            workflow_run_id: key.to_string(),
        }
    }

    fn key_of(resp: &RunEvent) -> RunKey {
        resp.key.clone()
    }

    fn stopped_error(run: &RunKey, why: &str) -> Error {
        Error::new(Outcome::Stopped, Self::OP)
            .with_detail(format!(
                "the result stream stopped ({why}); the run was triggered"
            ))
            .with_run_id(run.to_string())
    }
}

impl KeyedStream for RunsStream {
    const OP: &'static str = "/Dispatcher/SubscribeToWorkflowRuns";
    const POLLS: bool = true;
    const PROBES: bool = true;
    // A result that comes on both streams during the overlap reaches its waiters once.
    const ROTATES: bool = true;

    async fn open(
        conn: Connection,
        requests: tokio_stream::wrappers::UnboundedReceiverStream<Self::Req>,
    ) -> Result<tonic::Response<tonic::Streaming<Self::Resp>>, tonic::Status> {
        // The generated client decodes every event in full; this one keeps the bytes.
        let mut grpc = tonic::client::Grpc::new(conn.authed())
            .max_decoding_message_size(conn.config().max_recv_message_bytes);
        grpc.ready().await.map_err(|e| {
            tonic::Status::unavailable(format!("the channel to the engine is not ready: {e}"))
        })?;
        let mut req = tonic::Request::new(requests);
        req.extensions_mut().insert(tonic::GrpcMethod::new(
            "Dispatcher",
            "SubscribeToWorkflowRuns",
        ));
        grpc.streaming(
            req,
            http::uri::PathAndQuery::from_static(Self::OP),
            RunEventCodec,
        )
        .await
    }

    fn backoff(conn: &Connection) -> crate::retry::Backoff {
        conn.backoff().waiters
    }

    async fn poll(conn: &Connection, registry: &RunRegistry) {
        poll_once(conn, registry).await
    }
}

/// The waiter registry of run results.
pub(crate) type RunRegistry = KeyedRegistry<RunsStream>;
/// The workflow-runs listener's kind.
pub(crate) type RunsKind = KeyedKind<RunsStream>;

/// One polling pass: GetRunDetails (a read, under the retry core, bounded by the poll interval)
/// for every pending run; finished ones are delivered. A read that fails for its own run (not
/// found, a bad id, too slow, too large) does not stop the pass; a failing engine ends it
/// ([`pass_goes_on`]).
async fn poll_once(conn: &Connection, registry: &RunRegistry) {
    let deadline = conn
        .backoff()
        .poll_every
        .max(std::time::Duration::from_secs(1));
    for key in registry.pending_keys() {
        let run_id = key.to_string();
        match conn.run_details(&run_id, Some(deadline)).await {
            Ok(d) if details_settled(&d) => {
                registry.deliver(RunEvent::from_event(&event_from_details(&run_id, d)))
            }
            Ok(_) => {}
            Err(e) if pass_goes_on(&e) => {}
            Err(_) => return,
        }
    }
}

/// Whether a polling pass goes on past a failed read (a pure decision): yes when the failure is
/// the run's own (not found, a bad id, an answer over the message limit, a read slower than the
/// pass allows one run), no when the engine is failing (unreachable, the budget spent, the
/// runtime closing): the next pass tries again.
pub(crate) fn pass_goes_on(e: &Error) -> bool {
    match e.outcome() {
        Outcome::NotSent
        | Outcome::BudgetExhausted
        | Outcome::Exhausted
        | Outcome::Closed
        | Outcome::Stopped
        | Outcome::Cancelled => false,
        Outcome::DeadlineExceeded => true,
        _ => {
            e.grpc_status().is_some_and(|s| {
                matches!(
                    s.code(),
                    tonic::Code::NotFound
                        | tonic::Code::InvalidArgument
                        | tonic::Code::ResourceExhausted
                        | tonic::Code::OutOfRange
                )
            }) || e.outcome() == Outcome::Undecodable
        }
    }
}

/// How often pending waits are checked for runs the engine does not show.
pub(crate) const UNKNOWN_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// Runs checked per sweep at most: a million pending waits cost the engine no burst of reads,
/// and the sweep's load is at most 3.2 GetRunDetails a second however many runs are pending
/// (each run that exists is read once, 60 s after its trigger, and never again).
pub(crate) const UNKNOWN_SWEEP_MAX: usize = 16;

/// How the unknown-run sweep treats a run by where its id came from (a pure table;
/// docs/contract.md §4). The real engine answers GetRunDetails NotFound for a live run it has not made
/// visible yet: a run whose root tasks wait on a condition, a trigger it queued for its task
/// controller (load, restarts), a durable child acknowledged before it is created. So an id the
/// engine gave this process is never called unknown: its wait goes on to its caller's deadline
/// or cancellation, and while the engine shows no trace of it a warning naming it is logged
/// every [`SweepPlan::WARN_EVERY`], so a run the engine lost is visible, never a silent hang. It
/// is first read after [`SweepPlan::FIRST_CHECK`] (most runs have finished by then, and cost no
/// read). Only an id handed in from outside (`run_handle(id)`) ends its waits, after
/// [`SweepPlan::GIVEN_WINDOW`] missing, with [`Outcome::NotFound`] and words that say the run may
/// still appear.
pub(crate) struct SweepPlan;

/// What the sweep does about a run that read missing again (a pure decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Read it again later.
    Wait,
    /// Read it again later, and log a warning naming it now.
    Warn,
    /// End its waits with [`unknown_run_error`] (a given id only).
    GiveUp,
}

impl SweepPlan {
    /// How long a triggered run is waited on before its first read.
    pub(crate) const FIRST_CHECK: std::time::Duration = std::time::Duration::from_secs(60);
    /// How long a given id must read missing, from its first miss, before its waits end: a
    /// window of minutes, long enough for a slow write to land.
    pub(crate) const GIVEN_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);
    /// How often a triggered run the engine still shows no trace of is named in a warning.
    pub(crate) const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(5 * 60);

    /// What to do about a run missing since `first_miss` (last named in a warning at
    /// `last_warn`, if ever) and missing again `now`.
    pub(crate) fn missing(
        origin: Origin,
        first_miss: tokio::time::Instant,
        last_warn: Option<tokio::time::Instant>,
        now: tokio::time::Instant,
    ) -> Missing {
        match origin {
            Origin::Given if now.saturating_duration_since(first_miss) >= Self::GIVEN_WINDOW => {
                Missing::GiveUp
            }
            Origin::Given => Missing::Wait,
            Origin::Triggered => {
                let since = last_warn.unwrap_or(first_miss);
                let due = match last_warn {
                    // The first warning comes once the run has been missing a while.
                    None => Self::WARN_EVERY.saturating_sub(Self::FIRST_CHECK),
                    Some(_) => Self::WARN_EVERY,
                };
                if now.saturating_duration_since(since) >= due {
                    Missing::Warn
                } else {
                    Missing::Wait
                }
            }
        }
    }
}

/// What a sweep does with one key (a pure decision): `Some(true)` the run exists (never check it
/// again), `Some(false)` it is missing once more, `None` the read said nothing about it.
pub(crate) fn sweep_verdict(read: &Result<v1::GetRunDetailsResponse, Error>) -> Option<bool> {
    match read {
        Ok(_) => Some(true),
        Err(e)
            if e.grpc_status()
                .is_some_and(|s| s.code() == tonic::Code::NotFound) =>
        {
            Some(false)
        }
        Err(_) => None,
    }
}

/// Ends the waits on runs the engine does not show for a long time, which would otherwise wait
/// forever: the real engine ignores unknown ids on the run stream. Every
/// [`UNKNOWN_SWEEP_EVERY`], up to [`UNKNOWN_SWEEP_MAX`] pending runs that are due are read
/// (given ids at once, triggered ones after [`SweepPlan::FIRST_CHECK`]; the registry queues each
/// key once, so a sweep costs O([`UNKNOWN_SWEEP_MAX`]) however many wait); one found is never
/// read again, one missing is read again at each sweep ([`SweepPlan::missing`] says whether
/// to warn, or for a given id to end its waits with [`unknown_run_error`]); one the read could
/// not tell about is read again later, and ends the pass (the others wait for the next one: an
/// outage costs one read a pass, not one a pending run). Ends with the runtime's lifecycle.
pub(crate) async fn sweep_unknown(
    conn: Connection,
    registry: std::sync::Arc<RunRegistry>,
    life: tokio_util::sync::CancellationToken,
) {
    // Only keys found missing are remembered, with their first miss and last warning (a
    // missing id is rare).
    type Seen = (tokio::time::Instant, Option<tokio::time::Instant>);
    let mut misses: std::collections::HashMap<RunKey, Seen> = std::collections::HashMap::new();
    loop {
        tokio::select! {
            _ = life.cancelled() => return,
            _ = tokio::time::sleep(UNKNOWN_SWEEP_EVERY) => {}
        }
        if !registry.has_waiters() {
            misses.clear();
        }
        let batch = registry.take_unchecked(UNKNOWN_SWEEP_MAX, SweepPlan::FIRST_CHECK);
        misses.retain(|k, _| registry.is_pending(k));
        let mut batch = batch.into_iter();
        while let Some((key, origin)) = batch.next() {
            let run_id = key.to_string();
            let read = conn
                .run_details(&run_id, Some(std::time::Duration::from_secs(2)))
                .await;
            match sweep_verdict(&read) {
                Some(true) => {
                    misses.remove(&key);
                }
                Some(false) => {
                    let now = tokio::time::Instant::now();
                    let (first, last_warn) = *misses.entry(key.clone()).or_insert((now, None));
                    match SweepPlan::missing(origin, first, last_warn, now) {
                        Missing::GiveUp => {
                            misses.remove(&key);
                            registry.fail_key(&key, || unknown_run_error(&run_id));
                        }
                        Missing::Warn => {
                            tracing::warn!(
                                run_id = %run_id,
                                missing_for_s = now.saturating_duration_since(first).as_secs()
                                    + SweepPlan::FIRST_CHECK.as_secs(),
                                "the engine answered a trigger with this run id and still shows no run under it: it may have lost the trigger (a restart right after answering), or the workflow's idempotency key expression gave no key for this input; the wait goes on to its deadline. Read the run before triggering again"
                            );
                            misses.insert(key.clone(), (first, Some(now)));
                            registry.check_again(key, origin);
                        }
                        Missing::Wait => registry.check_again(key, origin),
                    }
                }
                None => {
                    // A read that could not tell (the engine is down, or refuses): the rest of
                    // the pass would only spend attempts and retry budget on the same outage, so
                    // they wait for the next pass, one read at a time until one answers.
                    registry.check_again(key, origin);
                    for (key, origin) in batch.by_ref() {
                        registry.check_again(key, origin);
                    }
                }
            }
        }
    }
}

/// The error of a wait on a run id the caller gave, which the engine has not shown for
/// [`SweepPlan::GIVEN_WINDOW`]: never a claim that the run does not exist, since it may still
/// appear.
pub(crate) fn unknown_run_error(run_id: &str) -> Error {
    let secs = SweepPlan::GIVEN_WINDOW.as_secs();
    Error::new(Outcome::NotFound, "wait for run")
        .with_detail(format!(
            "the engine shows no run {run_id} (missing in every read for {secs}s): check the id; if it came from a trigger just made, the run may still appear, and triggering again may run the work twice: read it with run_status first"
        ))
        .with_cause(Cause::status(tonic::Status::not_found(format!(
            "run {run_id} not found"
        ))))
        .with_run_id(run_id)
}

/// Builds the `WorkflowRunEvent` a finished run's details describe.
pub(crate) fn event_from_details(
    run_id: &str,
    d: v1::GetRunDetailsResponse,
) -> proto::WorkflowRunEvent {
    let mut results: Vec<proto::StepRunResult> = d
        .task_runs
        .into_iter()
        .map(|(name, t)| {
            // The real engine sends an empty error beside a completed task's output: a task
            // that completed has no error, and one that did not has no output.
            let completed = t.status == v1::RunStatus::Completed as i32;
            proto::StepRunResult {
                task_run_external_id: t.external_id.clone(),
                task_name: name,
                job_run_id: t.external_id,
                error: t.error.filter(|_| !completed),
                output: t
                    .output
                    .filter(|_| completed)
                    .map(|o| String::from_utf8_lossy(&o).into_owned()),
            }
        })
        .collect();
    results.sort_by(|a, b| a.task_name.cmp(&b.task_name));
    proto::WorkflowRunEvent {
        workflow_run_id: run_id.to_string(),
        event_type: proto::WorkflowRunEventType::Finished as i32,
        event_timestamp: None,
        results,
    }
}

/// The error a waiter gets when the runtime shuts down.
pub(crate) fn closed_error(run_id: &str) -> Error {
    Error::closed("wait for run").with_run_id(run_id)
}

/// Turns a run's result into its outputs or its error. Takes the event by value: names and
/// outputs move out of it (one decoded result costs no copies).
pub(crate) fn outputs_of(
    run_id: &str,
    ev: proto::WorkflowRunEvent,
) -> Result<serde_json::Map<String, serde_json::Value>, Error> {
    // A task with an error failed (or was cancelled with a reason); one with neither an output
    // nor an error was cancelled by a condition (the engine gives no text then).
    let failed = |r: &proto::StepRunResult| r.error.is_some() || r.output.is_none();
    if ev.results.iter().any(failed) {
        let failures: Vec<TaskFailure> = ev
            .results
            .into_iter()
            .filter(failed)
            .map(|r| TaskFailure {
                task: r.task_name,
                task_run_id: r.task_run_external_id,
                // The real engine sends an empty error for a cancelled task.
                error: r
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "cancelled".to_string()),
            })
            .collect();
        return Err(Error::new(Outcome::RunFailed, "run")
            .with_detail("the run failed")
            .with_cause(Cause::RunFailed(failures))
            .with_run_id(run_id));
    }
    let mut out = serde_json::Map::new();
    for r in ev.results {
        let v = match r.output.as_deref() {
            None | Some("") => serde_json::Value::Null,
            Some(o) => serde_json::from_str(o).map_err(|e| {
                Error::new(Outcome::Undecodable, "run")
                    .with_detail(format!(
                        "task {} returned output that is not JSON",
                        r.task_name
                    ))
                    .with_cause(Cause::Json(e))
                    .with_run_id(run_id)
            })?,
        };
        out.insert(r.task_name, v);
    }
    Ok(out)
}

/// Whether a run's details show it done with every completed task's output written (a task
/// that completed has an output; one that failed or was cancelled has none): only then are they
/// its result.
pub(crate) fn details_settled(d: &v1::GetRunDetailsResponse) -> bool {
    d.done
        && d.task_runs
            .values()
            .all(|t| t.status != v1::RunStatus::Completed as i32 || t.output.is_some())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pass_goes_on_past_a_slow_or_oversized_run_and_stops_for_a_failing_engine() {
        use super::pass_goes_on;
        use crate::error::{Cause, Error, Outcome};
        let status = |code, outcome| {
            Error::new(outcome, "x").with_cause(Cause::status(tonic::Status::new(code, "m")))
        };
        for (e, goes_on) in [
            (status(tonic::Code::NotFound, Outcome::Rejected), true),
            (
                status(tonic::Code::ResourceExhausted, Outcome::Rejected),
                true,
            ),
            (Error::new(Outcome::DeadlineExceeded, "x"), true),
            (status(tonic::Code::Unavailable, Outcome::NotSent), false),
            (status(tonic::Code::Unavailable, Outcome::Exhausted), false),
            (Error::new(Outcome::BudgetExhausted, "x"), false),
            (Error::closed("x"), false),
        ] {
            assert_eq!(pass_goes_on(&e), goes_on, "{e}");
        }
    }

    use super::*;

    fn result(name: &str, output: Option<&str>, error: Option<&str>) -> proto::StepRunResult {
        proto::StepRunResult {
            task_run_external_id: format!("{name}-id"),
            task_name: name.into(),
            job_run_id: "job".into(),
            error: error.map(Into::into),
            output: output.map(Into::into),
        }
    }

    /// docs/contract.md §4: an id the engine gave this process is never called unknown (the old
    /// sweep ended a wait after two misses 5 s apart, and later after 15 minutes): it is named
    /// in a warning every 5 minutes instead. A caller's id ends after two minutes missing.
    #[test]
    fn an_id_the_engine_gave_is_never_called_unknown_and_a_caller_s_ends_after_two_minutes() {
        let t0 = tokio::time::Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let triggered = |last: Option<u64>, now: u64| {
            SweepPlan::missing(Origin::Triggered, t0, last.map(at), at(now))
        };
        assert_eq!(triggered(None, 5), Missing::Wait);
        assert_eq!(triggered(None, 239), Missing::Wait);
        assert_eq!(
            triggered(None, 240),
            Missing::Warn,
            "5 minutes after the trigger"
        );
        assert_eq!(triggered(Some(240), 400), Missing::Wait);
        assert_eq!(triggered(Some(240), 540), Missing::Warn, "every 5 minutes");
        assert_eq!(
            triggered(Some(86_400), 86_400 + 299),
            Missing::Wait,
            "a day on: never"
        );
        let given = |now: u64| SweepPlan::missing(Origin::Given, t0, None, at(now));
        assert_eq!(given(119), Missing::Wait);
        assert_eq!(given(120), Missing::GiveUp);
        let err = unknown_run_error("r");
        assert_eq!(err.outcome(), Outcome::NotFound, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("may still appear")
                && text.contains("run the work twice")
                && !text.contains("does not know"),
            "never a claim that the run cannot exist: {err}"
        );
    }

    #[test]
    fn details_of_a_completed_task_with_the_real_engine_s_empty_error_are_its_output() {
        let d = v1::GetRunDetailsResponse {
            status: v1::RunStatus::Completed as i32,
            done: true,
            task_runs: [(
                "t".to_string(),
                v1::TaskRunDetail {
                    external_id: "x".into(),
                    status: v1::RunStatus::Completed as i32,
                    error: Some(String::new()),
                    output: Some(b"{\"n\":1}".to_vec()),
                    readable_id: "t".into(),
                    is_evicted: false,
                },
            )]
            .into(),
            ..Default::default()
        };
        let out = outputs_of("r", event_from_details("r", d)).expect("completed");
        assert_eq!(out["t"], serde_json::json!({"n": 1}));
    }

    #[test]
    fn a_failed_task_keeps_its_id_in_the_run_s_error() {
        let ev = proto::WorkflowRunEvent {
            workflow_run_id: "run".into(),
            event_type: 0,
            event_timestamp: Some(proto::timestamp_now()),
            results: vec![
                result("ok", Some("{\"a\":1}"), None),
                result("failed", None, Some("boom")),
                result("skipped", None, None),
            ],
        };
        let err = outputs_of("run", ev).expect_err("a task failed");
        let failures = err.run_failures();
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[0].task_run_id, "failed-id");
        assert_eq!(failures[1].task_run_id, "skipped-id");
        assert_eq!(
            failures[1].error, "cancelled",
            "no output and no error: cancelled"
        );
    }

    #[test]
    fn an_output_that_is_not_json_is_undecodable_and_a_stopped_stream_is_stopped() {
        let ev = proto::WorkflowRunEvent {
            workflow_run_id: "run".into(),
            event_type: 0,
            event_timestamp: None,
            results: vec![result("t", Some("not json"), None)],
        };
        let err = outputs_of("run", ev).expect_err("not JSON");
        assert_eq!(err.outcome(), Outcome::Undecodable, "{err}");
        assert!(err.to_string().contains("not JSON"), "{err}");
        let err = RunsStream::stopped_error(&RunKey::new("run"), "permanent error");
        assert_eq!(err.outcome(), Outcome::Stopped, "{err}");
        assert_eq!(err.run_id(), Some("run"), "the run id stays with the error");
    }
}
