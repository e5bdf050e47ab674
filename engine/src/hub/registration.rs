//! Registration: workflows, workers, labels and rate-limit keys put into the engine.

use std::collections::{BTreeMap, HashMap, HashSet};

use hatchet_runtime::protocol::{self as proto, v1};
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::Status as GrpcStatus;

use super::{Engine, check_uuid, go_uuid_error, unknown_worker};
use crate::answers::validation_failed;
use crate::limits::{DEFAULT_TASK_TIMEOUT, SESSION_BUFFER};
use crate::parse::{new_id, parse_duration, parse_json};
use crate::store::model::{Session, Status, TaskDef, Worker, Workflow};

impl Engine {
    /// `v1.AdminService/PutWorkflow`.
    pub(crate) fn put_workflow(
        &self,
        mut req: v1::CreateWorkflowVersionRequest,
    ) -> Result<v1::CreateWorkflowVersionResponse, GrpcStatus> {
        // The real engine's validator first, then the DAG's shape, in its words (v0.104.9).
        let problems = crate::store::definition::validation_problems(&req);
        if !problems.is_empty() {
            return Err(GrpcStatus::invalid_argument(validation_failed(&problems)));
        }
        if let Some(why) = crate::store::definition::shape_problem(&req) {
            tracing::warn!(workflow = %req.name, %why, "refusing a workflow");
            return Err(GrpcStatus::internal("An internal error occurred."));
        }
        let config = crate::store::definition::workflow_config(&req);
        let task_limits: Vec<v1::Concurrency> = req
            .tasks
            .iter()
            .flat_map(|t| t.concurrency.iter().cloned())
            .collect();
        let mut tasks = Vec::with_capacity(req.tasks.len() + 1);
        let ids: HashSet<&str> = req.tasks.iter().map(|t| t.readable_id.as_str()).collect();
        let on_failure = req.on_failure_task.take();
        for (t, is_on_failure) in req
            .tasks
            .iter()
            .map(|t| (t, false))
            .chain(on_failure.iter().map(|t| (t, true)))
        {
            for p in &t.parents {
                if is_on_failure || !ids.contains(p.as_str()) {
                    return Err(GrpcStatus::invalid_argument(format!(
                        "dag parent not found: parent step '{p}' not found for step '{}'",
                        t.readable_id
                    )));
                }
            }
            let timeout = if t.timeout.is_empty() {
                DEFAULT_TASK_TIMEOUT
            } else {
                parse_duration(&t.timeout).ok_or_else(|| {
                    GrpcStatus::invalid_argument(format!(
                        "timeout {:?} is not a duration",
                        t.timeout
                    ))
                })?
            };
            tasks.push(TaskDef {
                readable_id: t.readable_id.clone(),
                action: t.action.to_lowercase(),
                // An on_failure task's trigger is any failure, not parents (it must name none).
                parents: t.parents.clone(),
                timeout,
                timeout_text: if t.timeout.is_empty() {
                    format!("{}s", DEFAULT_TASK_TIMEOUT.as_secs())
                } else {
                    t.timeout.clone()
                },
                retries: t.retries.max(0),
                backoff_factor: t.backoff_factor,
                backoff_max_seconds: t.backoff_max_seconds,
                is_durable: t.is_durable,
                slot_requests: t.slot_requests.clone(),
                rate_limits: t.rate_limits.clone(),
                on_failure: is_on_failure,
                worker_labels: crate::sched::placement::desired_labels(&t.worker_labels),
                batch: match &t.batch {
                    Some(c) if !is_on_failure => Some(
                        crate::sched::batches::BatchRule::from_proto(&t.readable_id, c)
                            .map_err(GrpcStatus::invalid_argument)?,
                    ),
                    _ => None,
                },
                conditions: match &t.conditions {
                    Some(c) if !is_on_failure => {
                        crate::dag::matches::validate(c)?;
                        Some(c.clone())
                    }
                    _ => None,
                },
            });
        }
        let crons = std::mem::take(&mut req.cron_triggers);
        let default_filters = std::mem::take(&mut req.default_filters);
        for c in &crons {
            crate::time::cron::Cron::parse(c).map_err(GrpcStatus::invalid_argument)?;
        }
        let name = req.name.clone();
        let cron_input = match req.cron_input.as_deref() {
            Some(text) => parse_json("cron_input", text)?,
            None => Value::Object(Default::default()),
        };
        let mut st = self.state.lock();
        // Like the real engine: a task's static rate limit references the key, which must exist
        // (PutRateLimit) before the workflow; the real engine's answer is a bare INTERNAL.
        let missing_key = tasks.iter().flat_map(|t| &t.rate_limits).any(|r| {
            r.key_expr.is_none()
                && r.units_expr.is_none()
                && r.limit_values_expr.is_none()
                && !st.rate_limits.contains(&r.key)
        });
        if missing_key {
            return Err(GrpcStatus::internal("An internal error occurred."));
        }
        // A new version keeps the workflow's id; a deleted workflow's name starts a new one.
        let id = st.workflows.id_for(&req.name, new_id);
        let version_id = st.workflows.put(Workflow {
            id: id.clone(),
            version_id: new_id(),
            description: req.description,
            name: req.name,
            tasks,
            event_triggers: req.event_triggers,
            idempotency: req.idempotency,
            // Task-level limits (how the Python SDK declares a standalone task's) are applied
            // per run: the same for one-task workflows, stricter for a DAG.
            concurrency: crate::sched::concurrency::Limit::from_proto(
                req.concurrency
                    .into_iter()
                    .chain(req.concurrency_arr)
                    .chain(task_limits),
            ),
            default_priority: req.default_priority,
            sticky: crate::sched::placement::Sticky::from_proto(req.sticky),
            created_at: self.clock.system_now(),
            config,
            deleted: false,
        });
        let now = st.clock.system_now();
        st.filters.set_declarative(&id, &default_filters, now);
        let planned = crate::time::schedules::Planned {
            tenant: self.tenant_id.clone(),
            workflow: name.clone(),
            input: cron_input,
            metadata: Value::Object(Default::default()),
            method: "DEFAULT",
            priority: Value::from(1),
        };
        st.set_workflow_crons(&planned, &crons)
            .map_err(GrpcStatus::invalid_argument)?;
        Ok(v1::CreateWorkflowVersionResponse {
            id: version_id,
            workflow_id: id,
        })
    }

    /// `Dispatcher/Register`.
    pub(crate) fn register(
        &self,
        req: proto::WorkerRegisterRequest,
    ) -> Result<proto::WorkerRegisterResponse, GrpcStatus> {
        let name_ok = !req.worker_name.is_empty()
            && req
                .worker_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !name_ok {
            return Err(GrpcStatus::invalid_argument(
                "worker_name must match ^[a-zA-Z0-9.\\-_]+$",
            ));
        }
        for a in &req.actions {
            let parts = a.split(':').count();
            if !(2..=3).contains(&parts) || a.split(':').any(str::is_empty) {
                return Err(GrpcStatus::invalid_argument(format!(
                    "action {a:?} must be service:verb"
                )));
            }
        }
        if req.slots.is_some() && !req.slot_config.is_empty() {
            return Err(GrpcStatus::invalid_argument(
                "set slots or slot_config, not both",
            ));
        }
        let mut slot_limits: BTreeMap<String, i32> = req
            .slot_config
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        // Every worker has a `default` pool: the real engine's worker table gives a new worker
        // one of its `max_runs` (100) through an insert trigger (v0.104.9, migration 0_76), and
        // a `default` the registration names replaces it; a registration of durable slots only
        // still has 100 default slots there.
        slot_limits
            .entry("default".into())
            .or_insert(req.slots.unwrap_or(100));
        let id = new_id();
        let labels = crate::sched::placement::worker_labels(&req.labels);
        let now = self.clock.now();
        let worker = Worker {
            id: id.clone(),
            name: req.worker_name.clone(),
            actions: req.actions.iter().map(|a| a.to_lowercase()).collect(),
            slot_limits,
            slots_used: BTreeMap::new(),
            sessions: Vec::new(),
            forgotten: Vec::new(),
            last_heartbeat: now,
            last_heartbeat_at: self.clock.system_now(),
            ever_listened: false,
            labels,
            runtime_info: req.runtime_info,
            paused: false,
            created_at: self.clock.system_now(),
            last_listener_established: None,
            assignments: 0,
            heartbeats: 0,
        };
        self.state.lock().workers.insert(id.clone(), worker);
        Ok(proto::WorkerRegisterResponse {
            tenant_id: self.tenant_id.clone(),
            worker_id: id,
            worker_name: req.worker_name,
        })
    }

    /// Opens a listener session (`ListenV2`, or `Listen` when `legacy`).
    pub(crate) fn open_session(
        &self,
        worker_id: &str,
        legacy: bool,
    ) -> Result<
        (
            u64,
            mpsc::Receiver<Result<proto::AssignedAction, GrpcStatus>>,
        ),
        GrpcStatus,
    > {
        check_uuid("worker_id", worker_id)?;
        let (tx, rx) = mpsc::channel(SESSION_BUFFER);
        let mut st = self.state.lock();
        st.next_id += 1;
        let sid = st.next_id;
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| GrpcStatus::not_found("worker not found"))?;
        w.sessions.push(Session {
            id: sid,
            tx,
            legacy,
        });
        w.ever_listened = true;
        w.last_listener_established = Some(self.clock.system_now());
        if legacy {
            w.last_heartbeat = self.clock.now();
        }
        drop(st);
        self.wake.notify_one();
        Ok((sid, rx))
    }

    /// Closes a listener session (the stream ended).
    /// Assignments the worker never answered went out on a stream that is now gone (they may
    /// never have arrived). As on the real engine they stay with the worker and run out their
    /// timeout (or are reassigned when it goes silent), unless the `reoffer_unanswered` fault
    /// is on: then they are offered again, same attempt (a worker that did get one ignores the
    /// second copy).
    pub(crate) fn close_session(&self, worker_id: &str, session: u64) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(worker_id) {
            w.sessions.retain(|s| s.id != session);
            w.forgotten.retain(|s| s.id != session);
        }
        if !st.switches.reoffer_unanswered {
            return;
        }
        let unanswered: Vec<String> = st
            .tasks
            .values()
            .filter(|t| {
                t.status() == Status::Running
                    && !t.answered
                    && t.session == Some(session)
                    && t.worker_id.as_deref() == Some(worker_id)
            })
            .map(|t| t.id.clone())
            .collect();
        for tid in &unanswered {
            st.offer_again(tid);
        }
        if !unanswered.is_empty() {
            drop(st);
            self.wake.notify_one();
        }
    }

    /// `Dispatcher/Heartbeat`.
    pub(crate) fn heartbeat(&self, worker_id: &str) -> Result<(), GrpcStatus> {
        if go_uuid_error(worker_id).is_some() {
            return Err(GrpcStatus::invalid_argument(format!(
                "invalid worker ID format: {worker_id}"
            )));
        }
        let mut st = self.state.lock();
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| unknown_worker(worker_id))?;
        if w.ever_listened && w.sessions.is_empty() {
            return Err(GrpcStatus::failed_precondition(
                "Heartbeat rejected: worker stream is not active",
            ));
        }
        w.last_heartbeat = self.clock.now();
        w.last_heartbeat_at = self.clock.system_now();
        w.heartbeats += 1;
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// `Dispatcher/Unsubscribe`: drops the worker's routing.
    pub(crate) fn unsubscribe(&self, worker_id: &str) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(worker_id) {
            w.sessions.clear();
        }
    }

    /// `Dispatcher/UpsertWorkerLabels`.
    pub(crate) fn upsert_labels(
        &self,
        worker_id: &str,
        labels: &HashMap<String, proto::WorkerLabels>,
    ) -> Result<(), GrpcStatus> {
        let mut st = self.state.lock();
        let w = st
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| unknown_worker(worker_id))?;
        // Per-key upsert: other keys are kept; there is no delete.
        w.labels
            .extend(crate::sched::placement::worker_labels(labels));
        drop(st);
        self.wake.notify_one();
        Ok(())
    }
}
