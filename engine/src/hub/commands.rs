//! The engine's entry points for what the transports change beyond the protocol's own calls
//! (those are in the other files of `hub/`): durable streams, REST writes (filters, webhooks, crons and
//! schedules, workflows, workers, evicted tasks). Each takes the state's lock once, so a
//! transport never holds it or reads the state's fields (`house.rs` checks).

use std::time::SystemTime;

use serde_json::Value;
use tokio::sync::mpsc;
use tonic::Status as GrpcStatus;

use crate::dag::filters::{Filter, Filters};
use crate::hub::{Engine, State};
use crate::store::model::Worker;
use crate::store::pause::PauseRule;
use crate::store::webhooks::Webhook;
use crate::time::schedules::Planned;
use hatchet_runtime::protocol::v1;

type DurableTx = mpsc::UnboundedSender<Result<v1::DurableTaskResponse, GrpcStatus>>;
type LegacyTx = mpsc::UnboundedSender<Result<v1::DurableEvent, GrpcStatus>>;

impl Engine {
    // ===== traces =====

    /// `TraceService/Export`: stores an SDK's spans (a repeated span is stored once). Answers
    /// how many it stored.
    pub(crate) fn export_spans(
        &self,
        req: &hatchet_runtime::protocol::otlp::ExportTraceServiceRequest,
    ) -> usize {
        let rows = crate::traces::otlp::rows(req);
        let n = rows.len();
        self.state.lock().traces.record(rows);
        n
    }

    // ===== durable streams =====

    /// Opens a `DurableTask` stream; answers its id.
    pub(crate) fn durable_open(&self, tx: DurableTx) -> u64 {
        self.state.lock().durable_open(tx)
    }

    /// How long a `DurableTask` stream collects requests before it handles them (a fault).
    pub(crate) fn durable_collect_window_ms(&self) -> u64 {
        self.state
            .lock()
            .switches
            .collect_durable_requests_ms
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Handles requests of stream `id`, in order.
    pub(crate) fn durable_requests(&self, id: u64, reqs: Vec<v1::DurableTaskRequest>) {
        let mut st = self.state.lock();
        for req in reqs {
            st.durable_request(id, req);
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Closes stream `id`.
    pub(crate) fn durable_close(&self, id: u64) {
        self.state.lock().durable_close(id);
    }

    /// `RegisterDurableEvent`.
    pub(crate) fn legacy_register(
        &self,
        req: &v1::RegisterDurableEventRequest,
    ) -> Result<(), GrpcStatus> {
        self.state.lock().legacy_register(req)?;
        self.wake.notify_one();
        Ok(())
    }

    /// Opens a `ListenForDurableEvent` stream; answers its id.
    pub(crate) fn legacy_listen_open(&self, tx: LegacyTx) -> u64 {
        self.state.lock().legacy_listen_open(tx)
    }

    /// One message of `ListenForDurableEvent` stream `id` (counted).
    pub(crate) fn legacy_listen(&self, id: u64, task: String, signal: String) {
        let mut st = self.state.lock();
        st.counters.durable_event_listen_messages += 1;
        st.legacy_listen(id, task, signal);
    }

    /// Closes `ListenForDurableEvent` stream `id`.
    pub(crate) fn legacy_listen_close(&self, id: u64) {
        self.state.lock().legacy_listen_close(id);
    }

    /// `BranchDurableTask`: a new branch of a durable task's log at a node, and the task runs
    /// again from there (`durable/mod.rs` invariant 4).
    pub(crate) fn branch_durable_task(
        &self,
        req: &v1::BranchDurableTaskRequest,
    ) -> Result<v1::BranchDurableTaskResponse, GrpcStatus> {
        let branch = self.state.lock().branch_durable_task(
            &req.task_external_id,
            req.node_id,
            req.branch_id,
        )?;
        self.wake.notify_one();
        Ok(v1::BranchDurableTaskResponse {
            task_external_id: req.task_external_id.clone(),
            node_id: req.node_id,
            branch_id: branch,
        })
    }

    // ===== crons and schedules =====

    /// Adds one-off schedules of `planned` at `times`; stops at the first bad one.
    pub(crate) fn add_schedules(
        &self,
        planned: &Planned,
        times: impl IntoIterator<Item = SystemTime>,
    ) -> Result<Vec<Value>, String> {
        let mut st = self.state.lock();
        let rows = times
            .into_iter()
            .map(|at| st.add_schedule(planned, at))
            .collect::<Result<Vec<_>, _>>();
        drop(st);
        self.wake.notify_one();
        rows
    }

    /// Adds a cron of `planned` named `name`.
    pub(crate) fn add_cron(
        &self,
        planned: &Planned,
        name: &str,
        expr: &str,
    ) -> Result<Value, String> {
        self.state.lock().add_cron(planned, name, expr)
    }

    /// Runs cron `id` now: its run's id, the reason it cannot start, or `None` for an unknown
    /// cron.
    pub(crate) fn trigger_cron(&self, id: &str) -> Option<Result<String, String>> {
        let now = self.clock.system_now();
        let started = self.state.lock().trigger_cron(id, now);
        if matches!(started, Some(Ok(_))) {
            self.wake.notify_one();
        }
        started
    }

    /// Moves the clock forward by `by` and runs a scheduler pass (every timer due in that time
    /// fires).
    pub(crate) fn advance_clock(&self, by: std::time::Duration) {
        self.state.lock().advance_clock(by);
        self.tick();
    }

    /// Removes cron `id`; whether it was there.
    pub(crate) fn remove_cron(&self, id: &str) -> bool {
        self.state.lock().calendar.remove_cron(id)
    }

    /// Removes schedule `id`; whether it was there.
    pub(crate) fn remove_schedule(&self, id: &str) -> bool {
        self.state.lock().calendar.remove_schedule(id)
    }

    // ===== filters =====

    /// Stores a filter made through the REST API.
    pub(crate) fn add_filter(&self, f: Filter) {
        self.state.lock().filters.add(f);
    }

    /// Runs `f` on the filters (read, change or remove one) and answers what it answers.
    pub(crate) fn with_filters<R>(&self, f: impl FnOnce(&mut Filters) -> R) -> R {
        f(&mut self.state.lock().filters)
    }

    // ===== webhooks =====

    /// Stores webhook `name`, unless one has that name (then `false`).
    pub(crate) fn add_webhook(&self, name: &str, hook: Webhook) -> bool {
        self.state.lock().webhooks.add(name, hook)
    }

    /// Changes webhook `name` with `f`; `None` if there is none.
    pub(crate) fn update_webhook<R>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Webhook) -> R,
    ) -> Option<R> {
        self.state.lock().webhooks.get_mut(name).map(f)
    }

    /// Removes webhook `name`.
    pub(crate) fn remove_webhook(&self, name: &str) -> Option<Webhook> {
        self.state.lock().webhooks.remove(name)
    }

    /// Notes that event `id` came through webhook `name`.
    pub(crate) fn mark_webhook_event(&self, id: &str, name: &str) {
        self.state.lock().events.mark_webhook(id, name);
    }

    // ===== workflows and workers =====

    /// Deletes the live workflow `id`: it leaves the lists and cannot be triggered, its crons and
    /// schedules go, what it held while paused is cancelled. `false` if there is none.
    pub(crate) fn delete_workflow(&self, id: &str) -> bool {
        let mut st = self.state.lock();
        let Some(name) = live_workflow_name(&st, id) else {
            return false;
        };
        st.workflows.delete(&name);
        st.drop_pause(&name);
        st.calendar.drop_workflow(&name);
        true
    }

    /// Pauses (`Some`) or unpauses (`None`) the live workflow `id`; answers its name, or `None`
    /// if there is none.
    pub(crate) fn pause_workflow(&self, id: &str, rule: Option<PauseRule>) -> Option<String> {
        let mut st = self.state.lock();
        let name = live_workflow_name(&st, id)?;
        let requeued = match rule {
            Some(rule) => {
                let now = st.clock.now();
                st.pause_workflow(&name, rule, now);
                0
            }
            None => st.unpause_workflow(&name),
        };
        drop(st);
        if requeued > 0 {
            self.wake.notify_one();
        }
        Some(name)
    }

    /// Changes worker `id` with `f`; `None` if there is none.
    pub(crate) fn update_worker<R>(&self, id: &str, f: impl FnOnce(&mut Worker) -> R) -> Option<R> {
        self.state.lock().workers.get_mut(id).map(f)
    }

    /// Queues evicted task `id` again (a task in another state is left as it is): whether it
    /// was requeued, or `None` for an unknown task.
    pub(crate) fn restore_evicted(&self, id: &str) -> Option<bool> {
        let requeued = self.state.lock().restore_evicted(id);
        self.wake.notify_one();
        requeued
    }
}

/// The name of the live (not deleted) workflow with id `id`.
fn live_workflow_name(st: &State, id: &str) -> Option<String> {
    st.workflows.live_by_id(id).map(|w| w.name.clone())
}
