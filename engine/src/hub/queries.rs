//! What the transports read: a view of the state through queries. A [`View`] holds the state's
//! lock for as long as it lives (a REST read or a dashboard snapshot is one consistent read)
//! and offers read-only queries of the rooms; it has no field of the state and changes
//! nothing. Changes go through the engine's entry points (`hub/`).

use parking_lot::MutexGuard;
use serde_json::Value;

use crate::dag::filters::Filters;
use crate::hub::{Engine, State};
use crate::sched::rate_limits::RateLimits;
use crate::store::events::EventLog;
use crate::store::model::{Run, Status, Task, Worker, Workflow};
use crate::store::pause::Pauses;
use crate::store::table::Runs;
use crate::store::webhooks::Webhooks;
use crate::time::schedules::Calendar;
use crate::traces::SpanRow;

/// A read-only view of the state, holding its lock.
pub(crate) struct View<'a> {
    st: MutexGuard<'a, State>,
}

impl Engine {
    /// A view of the state for one read (it holds the lock: keep it short, never across an
    /// await).
    pub(crate) fn view(&self) -> View<'_> {
        View {
            st: self.state.lock(),
        }
    }
}

impl View<'_> {
    /// Every run.
    pub(crate) fn runs(&self) -> &Runs {
        &self.st.runs
    }

    /// Task `id`.
    pub(crate) fn task(&self, id: &str) -> Option<&Task> {
        self.st.tasks.get(id)
    }

    /// The status REST reads of task `t`: as of the status pipeline's last entry for it
    /// (`store/readable.rs`).
    pub(crate) fn task_status(&self, t: &Task) -> Status {
        self.st.readable_task_status(t)
    }

    /// Whether the read model lost task `t`'s end (`DevEngine::lose_next_read_model_ends`): REST
    /// reads it without its output.
    pub(crate) fn end_lost(&self, t: &Task) -> bool {
        self.st.switches.read_model_lost.contains(&t.id)
    }

    /// The status REST reads of run `r`: as of the status pipeline's last entry for it.
    pub(crate) fn run_status(&self, r: &Run) -> Status {
        self.st.readable_run_status(r)
    }

    /// Every task, in no order.
    pub(crate) fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.st.tasks.values()
    }

    /// The input task `id` runs with (its run's input, or its parents' outputs for a DAG task).
    pub(crate) fn task_input(&self, id: &str) -> Value {
        self.st.task_input(id)
    }

    /// Workflow `name` (live or deleted).
    pub(crate) fn workflow(&self, name: &str) -> Option<&Workflow> {
        self.st.workflows.get(name)
    }

    /// The live (not deleted) workflow with id `id`.
    pub(crate) fn live_workflow(&self, id: &str) -> Option<&Workflow> {
        self.st.workflows.live_by_id(id)
    }

    /// Every workflow (live or deleted), in no order.
    pub(crate) fn workflows(&self) -> impl Iterator<Item = &Workflow> {
        self.st.workflows.values()
    }

    /// Worker `id`.
    pub(crate) fn worker(&self, id: &str) -> Option<&Worker> {
        self.st.workers.get(id)
    }

    /// Every worker, in no order.
    pub(crate) fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.st.workers.values()
    }

    /// The pushed events kept.
    pub(crate) fn events(&self) -> &EventLog {
        &self.st.events
    }

    /// Crons and schedules.
    pub(crate) fn calendar(&self) -> &Calendar {
        &self.st.calendar
    }

    /// A schedule's REST row with its run's state filled in.
    pub(crate) fn scheduled_view(&self, row: &Value) -> Value {
        self.st.scheduled_view(row)
    }

    /// Paused workflows and what they hold.
    pub(crate) fn pauses(&self) -> &Pauses {
        &self.st.pauses
    }

    /// Event filters.
    pub(crate) fn filters(&self) -> &Filters {
        &self.st.filters
    }

    /// Rate-limit keys.
    pub(crate) fn rate_limits(&self) -> &RateLimits {
        &self.st.rate_limits
    }

    /// The definition of version `version` of workflow `name`.
    pub(crate) fn workflow_config(&self, name: &str, version: &str) -> Option<&Value> {
        self.st.workflows.config_of(name, version)
    }

    /// Whether single-task reads say QUEUED for a running task (the real engine's race, a
    /// switch: `DevEngine::stamp_queued_late`).
    pub(crate) fn queued_stamped_late(&self) -> bool {
        self.st.switches.stamp_queued_late
    }

    /// Incoming webhooks by name.
    pub(crate) fn webhooks(&self) -> &Webhooks {
        &self.st.webhooks
    }

    /// The trace a run or task id's spans belong to (see `hub/actions/traces.rs`).
    pub(crate) fn trace_id_of(&self, id: &str) -> Option<Vec<u8>> {
        self.st.trace_id_of(id)
    }

    /// A page of a trace's spans, earliest first: the SDKs' and the engine's.
    pub(crate) fn trace_page(&self, trace: &[u8], offset: usize, limit: usize) -> Vec<SpanRow> {
        self.st.trace_page(trace, offset, limit)
    }
}
