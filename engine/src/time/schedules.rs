//! Crons and one-off schedules: stored as the REST API shows them (`CronWorkflows`,
//! `ScheduledWorkflows` rows) and fired by the scheduler's pass.
//!
//! # Invariants
//!
//! 1. A row is validated when it is stored (a bad cron expression or time is refused then),
//!    so firing never meets bad input.
//! 2. Each pass fires every cron with an occurrence in (previous pass, now] once: occurrences
//!    missed while the engine was stopped collapse into one run, and none fires twice.
//! 3. A schedule fires once, at or after its time, and its row is then deleted (the real
//!    engine's ticker deletes a fired schedule: a read of it answers 404).
//! 4. Crons a workflow declares (`cron_triggers`) are method `DEFAULT` and are replaced when the
//!    workflow is put again; crons and schedules created through the API are method `API`.
//! 5. The rows live in [`Calendar`], whose fields only this file touches: the transports read
//!    and delete through its methods, so a row is never stored unvalidated (invariant 1).

use std::time::SystemTime;

use serde_json::{Value, json};

use hatchet_runtime::protocol::calendar::format_rfc3339;

/// What a new cron or schedule row holds besides its timing.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    /// The tenant.
    pub tenant: String,
    /// The workflow's name.
    pub workflow: String,
    /// The run's input.
    pub input: Value,
    /// The run's additional metadata.
    pub metadata: Value,
    /// `API` or `DEFAULT`.
    pub method: &'static str,
    /// 1–3.
    pub priority: Value,
}

/// The crons and one-off schedules (REST rows), and when they were last checked (Unix
/// seconds, see `hub/actions/fire.rs`, which reads and changes the fields through the methods below).
#[derive(Debug, Default)]
pub(crate) struct Calendar {
    pub(crate) crons: Vec<Value>,
    pub(crate) scheduled: Vec<Value>,
    pub(crate) checked: Option<i64>,
}

fn by_id<'a>(rows: &'a [Value], id: &str) -> Option<&'a Value> {
    rows.iter().find(|r| r["metadata"]["id"] == id)
}

fn remove_by_id(rows: &mut Vec<Value>, id: &str) -> bool {
    let before = rows.len();
    rows.retain(|r| r["metadata"]["id"] != id);
    rows.len() != before
}

impl Calendar {
    /// The crons, oldest first.
    pub(crate) fn crons(&self) -> &[Value] {
        &self.crons
    }

    /// The schedules not fired yet, oldest first (see [`State::scheduled_view`] for the row
    /// a reader sees).
    pub(crate) fn schedules(&self) -> &[Value] {
        &self.scheduled
    }

    /// The cron `id`.
    pub(crate) fn cron(&self, id: &str) -> Option<&Value> {
        by_id(&self.crons, id)
    }

    /// The schedule `id`.
    pub(crate) fn schedule(&self, id: &str) -> Option<&Value> {
        by_id(&self.scheduled, id)
    }

    /// Deletes the cron `id`; whether there was one.
    pub(crate) fn remove_cron(&mut self, id: &str) -> bool {
        remove_by_id(&mut self.crons, id)
    }

    /// Deletes the schedule `id`; whether there was one.
    pub(crate) fn remove_schedule(&mut self, id: &str) -> bool {
        remove_by_id(&mut self.scheduled, id)
    }

    /// Deletes the crons and schedules of the workflow `name` (it was deleted).
    pub(crate) fn drop_workflow(&mut self, name: &str) {
        self.crons.retain(|c| c["workflowName"] != name);
        self.scheduled.retain(|c| c["workflowName"] != name);
    }
}

pub(crate) fn row_meta(id: &str, created: SystemTime) -> Value {
    let at = format_rfc3339(created);
    json!({"id": id, "createdAt": at, "updatedAt": at})
}

/// What the real engine adds to a cron run's metadata (beside the cron's own): the
/// expression, when it fired, and the name of a cron created through the API.
pub(crate) fn cron_metadata(row: &Value, at: SystemTime) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("hatchet__cron_expression".into(), row["cron"].clone());
    m.insert(
        "hatchet__cron_scheduled_at".into(),
        json!(format_rfc3339(at)),
    );
    if row["method"] == "API"
        && let Some(name) = row["name"].as_str().filter(|n| !n.is_empty())
    {
        m.insert("hatchet__cron_name".into(), json!(name));
    }
    m
}
