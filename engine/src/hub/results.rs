//! Results: run subscriptions, event streams and what clients read of runs.

use std::collections::{HashMap, HashSet};

use hatchet_runtime::protocol::{self as proto, v1};
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::Status as GrpcStatus;

use super::Engine;
use crate::store::model::{Status, Task};
use crate::store::subscriptions::{Ask, EventFilter};

impl Engine {
    /// Opens a `SubscribeToWorkflowRuns` subscription.
    pub(crate) fn open_run_subscription(
        &self,
    ) -> (
        u64,
        mpsc::UnboundedReceiver<Result<proto::WorkflowRunEvent, GrpcStatus>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.state.lock();
        let now = st.clock.now();
        let id = st.subscriptions.open_runs(tx, now);
        (id, rx)
    }

    /// Adds a run id to a subscription (`subscriptions.rs` invariant 1): a run not finished is
    /// delivered when it finishes; a finished one at the stream's next tick, as the real engine
    /// answers it, or at once with the status lag or the end hop off (the kindnesses).
    pub(crate) fn subscribe_run(&self, sub: u64, run_id: &str) {
        let mut st = self.state.lock();
        st.counters.run_subscribe_messages += 1;
        if uuid::Uuid::parse_str(run_id).is_err() {
            return; // invalid ids are skipped silently, as the engine does
        }
        let kindness = st.switches.status_lag.is_none() || st.switches.end_hop.is_none();
        let ask = match st.runs.get(run_id).filter(|r| st.run_end_published(r)) {
            None => Ask::Wait,
            Some(r) if kindness => Ask::Now(st.run_event(r)),
            Some(_) => Ask::AtTick(st.clock.now()),
        };
        let at_tick = matches!(ask, Ask::AtTick(_));
        st.subscriptions.want_run(sub, run_id, ask);
        drop(st);
        if at_tick {
            // The scheduler's next pass learns when the tick falls (`next_status_poll`).
            self.wake.notify_one();
        }
    }

    /// Closes a subscription.
    pub(crate) fn close_run_subscription(&self, sub: u64) {
        self.state.lock().subscriptions.close_runs(sub);
    }

    /// Opens a `SubscribeToWorkflowEvents` stream. `None` for the run means "already finished":
    /// the caller ends the stream at once.
    #[allow(clippy::type_complexity)]
    pub(crate) fn open_event_subscription(
        &self,
        req: &proto::SubscribeToWorkflowEventsRequest,
    ) -> Result<Option<mpsc::UnboundedReceiver<Result<proto::WorkflowEvent, GrpcStatus>>>, GrpcStatus>
    {
        let filter = match (
            &req.workflow_run_id,
            &req.additional_meta_key,
            &req.additional_meta_value,
        ) {
            (Some(id), None, None) if !id.is_empty() => EventFilter::Run(id.clone()),
            (None, Some(k), Some(v)) => EventFilter::Metadata {
                key: k.clone(),
                value: v.clone(),
                tracked: HashSet::new(),
            },
            _ => {
                return Err(GrpcStatus::invalid_argument(
                    "give workflow_run_id, or additional_meta_key and additional_meta_value",
                ));
            }
        };
        let mut st = self.state.lock();
        if let EventFilter::Run(id) = &filter {
            let run = st
                .runs
                .get(id)
                .ok_or_else(|| GrpcStatus::not_found("run not found"))?;
            if run.status().is_terminal() {
                return Ok(None);
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        st.subscriptions.open_events(tx, filter);
        Ok(Some(rx))
    }

    /// `v1.AdminService/GetRunDetails`.
    pub(crate) fn run_details(
        &self,
        run_id: &str,
    ) -> Result<v1::GetRunDetailsResponse, GrpcStatus> {
        let st = self.state.lock();
        // A client polling an unfinished run waits on it (virtual time skips for it).
        st.clock.polled(run_id);
        let run = st.runs.get(run_id).ok_or_else(|| {
            // In the real engine's words: a malformed id is refused, an unknown one not found.
            if uuid::Uuid::parse_str(run_id).is_err() {
                GrpcStatus::invalid_argument("invalid external id")
            } else {
                GrpcStatus::not_found("workflow run not found")
            }
        })?;
        // Like the real engine: until the run is finalized, a task reads QUEUED or RUNNING
        // (or EVICTED), without output or error, whether or not it finished; per-task progress
        // is the REST read's.
        // A task's end reads here once the hop after it has passed (the real engine's task
        // controller records it then); until then the task still reads RUNNING.
        let recorded_by = st.switches.end_hop.map(|hop| st.clock.system_now() - hop);
        let ended_unrecorded = |t: &Task| {
            t.status().is_terminal()
                && matches!((recorded_by, t.finished_at), (Some(by), Some(at)) if at > by)
        };
        let done = run.status().is_terminal()
            && !run
                .tasks
                .iter()
                .filter_map(|id| st.tasks.get(id))
                .any(ended_unrecorded);
        let mut any_running = false;
        let mut any_evicted = false;
        let mut task_runs = HashMap::new();
        for tid in &run.tasks {
            // Only the tasks that exist: the real engine creates a DAG's task when its parents
            // have completed (or its condition holds), and lists none before.
            if let Some(t) = st
                .tasks
                .get(tid)
                .filter(|t| done || t.status() != Status::Pending)
            {
                let (status, error, output) = if done {
                    (
                        t.status().v1(),
                        t.error.clone(),
                        t.output.clone().map(String::into_bytes),
                    )
                } else if t.evicted {
                    // The real engine says RUNNING for an evicted task, in the task's and the
                    // run's status, and says it only in `is_evicted` (its `ToProto`), the
                    // task's and the run's (any task evicted).
                    any_running = true;
                    any_evicted = true;
                    (v1::RunStatus::Running as i32, None, None)
                } else if t.status() == Status::Running
                    || (ended_unrecorded(t) && t.started_at.is_some())
                {
                    any_running = true;
                    (v1::RunStatus::Running as i32, None, None)
                } else {
                    (v1::RunStatus::Queued as i32, None, None)
                };
                task_runs.insert(
                    t.readable_id.clone(),
                    v1::TaskRunDetail {
                        external_id: t.id.clone(),
                        status,
                        error,
                        output,
                        readable_id: t.readable_id.clone(),
                        is_evicted: t.evicted,
                    },
                );
            }
        }
        let status = if done {
            run.status().v1()
        } else if any_running {
            v1::RunStatus::Running as i32
        } else {
            v1::RunStatus::Queued as i32
        };
        // A one-task run's input is its task's stored input (`input`, `parents`, `triggers`).
        let input = match run.tasks.as_slice() {
            [only] => st.task_input(only),
            _ => run.input.clone(),
        };
        Ok(v1::GetRunDetailsResponse {
            input: input.to_string().into_bytes(),
            status,
            task_runs,
            done,
            additional_metadata: Value::Object(run.additional_metadata.clone())
                .to_string()
                .into_bytes(),
            is_evicted: any_evicted,
        })
    }

    /// `WorkflowService/PutRateLimit`.
    pub(crate) fn put_rate_limit(
        &self,
        req: &proto::PutRateLimitRequest,
    ) -> Result<(), GrpcStatus> {
        if req.key.is_empty() {
            return Err(GrpcStatus::invalid_argument("key is required"));
        }
        let duration = v1::RateLimitDuration::try_from(req.duration)
            .map_err(|_| GrpcStatus::invalid_argument("unknown rate limit duration"))?;
        if req.limit < 0 {
            return Err(GrpcStatus::invalid_argument(
                "rate limit must not be negative",
            ));
        }
        let mut st = self.state.lock();
        let (now, wall) = (st.clock.now(), st.clock.system_now());
        st.rate_limits
            .put(&req.key, i64::from(req.limit), duration, now, wall);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }
}
