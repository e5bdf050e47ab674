//! Workflows over REST: list, read one, delete, pause and unpause.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::{Api, Meta, Page, encode, query};
use crate::error::Error;

/// A registered workflow, as the REST API shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WorkflowInfo {
    /// Its id (what run filters and event filters name).
    pub metadata: Meta,
    /// Name (namespaced).
    pub name: String,
    /// Description (`""` when none was given).
    #[serde(default)]
    pub description: String,
    /// Paused: new runs are queued and not assigned until it is unpaused.
    #[serde(default)]
    pub is_paused: bool,
}

/// How a workflow is paused: how long its new runs wait before the engine cancels them, and
/// whether its crons and schedules queue runs meanwhile or skip their ticks.
#[derive(Debug, Clone)]
pub struct WorkflowPause {
    queue_ttl: Duration,
    drop_crons: bool,
    drop_schedules: bool,
}

impl WorkflowPause {
    /// Runs started while paused wait up to `queue_ttl` (whole seconds, at least one), then
    /// are cancelled; crons and schedules keep queueing runs.
    pub fn new(queue_ttl: Duration) -> Self {
        WorkflowPause {
            queue_ttl,
            drop_crons: false,
            drop_schedules: false,
        }
    }

    /// Cron ticks while paused start nothing.
    pub fn drop_cron_runs(mut self) -> Self {
        self.drop_crons = true;
        self
    }

    /// Scheduled runs due while paused wait, unstarted, until the workflow is unpaused.
    pub fn drop_scheduled_runs(mut self) -> Self {
        self.drop_schedules = true;
        self
    }

    /// The engine's duration form (`90s`): seconds, since it parses `ms`, `s`, `m`, `h`.
    fn ttl(&self) -> String {
        format!("{}s", self.queue_ttl.as_secs().max(1))
    }
}

/// `QUEUE` or `DROP`, the engine's words for what a paused workflow's triggers do.
fn behaviour(drop: bool) -> &'static str {
    if drop { "DROP" } else { "QUEUE" }
}

impl Api {
    /// One page of the tenant's workflows; `name` matches any part of the name, in any case
    /// (`""` for all).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_workflows(
        &self,
        name: &str,
        limit: usize,
        offset: usize,
    ) -> Result<Page<WorkflowInfo>, Error> {
        let mut q = vec![
            ("limit", limit.max(1).to_string()),
            ("offset", offset.to_string()),
        ];
        if !name.is_empty() {
            q.push(("name", self.namespaced(name)));
        }
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/tenants/{t}/workflows",
            &format!("/api/v1/tenants/{}/workflows?{}", self.tenant(), query(q)),
            None,
        )
        .await
    }

    /// One workflow, by id ([`Api::workflow_id`] finds it by name).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn workflow(&self, id: &str) -> Result<WorkflowInfo, Error> {
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/workflows/{id}",
            &format!("/api/v1/workflows/{}", encode(id)),
            None,
        )
        .await
    }

    /// Deletes a workflow: it leaves the lists, its crons and schedules stop, its runs stay
    /// readable, and its name is free to register again. Reading it afterwards is a 404
    /// ([`Error::is_not_found`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write (a second delete is a 404, the workflow stays gone).
    pub async fn delete_workflow(&self, id: &str) -> Result<(), Error> {
        self.delete(
            "DELETE /api/v1/workflows/{id}",
            &format!("/api/v1/workflows/{}", encode(id)),
        )
        .await
    }

    /// Pauses a workflow: its new runs are created and stay queued (cancelled after the
    /// pause's TTL), running tasks finish. Answers the workflow as paused.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write.
    pub async fn pause_workflow(
        &self,
        id: &str,
        pause: &WorkflowPause,
    ) -> Result<WorkflowInfo, Error> {
        let body = json!({"pause": {
            "action": "pause",
            "pausedWorkflowCronRunQueueBehavior": behaviour(pause.drop_crons),
            "pausedWorkflowScheduledRunQueueBehavior": behaviour(pause.drop_schedules),
            "pausedWorkflowQueueTTL": pause.ttl(),
        }});
        self.json(
            reqwest::Method::PATCH,
            "PATCH /api/v1/workflows/{id}",
            &format!("/api/v1/workflows/{}", encode(id)),
            Some(body),
        )
        .await
    }

    /// Unpauses a workflow: the runs it holds are assigned again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write.
    pub async fn unpause_workflow(&self, id: &str) -> Result<WorkflowInfo, Error> {
        self.json(
            reqwest::Method::PATCH,
            "PATCH /api/v1/workflows/{id}",
            &format!("/api/v1/workflows/{}", encode(id)),
            Some(json!({"pause": {"action": "unpause"}})),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_names_its_ttl_in_whole_seconds() {
        assert_eq!(WorkflowPause::new(Duration::from_millis(10)).ttl(), "1s");
        assert_eq!(
            WorkflowPause::new(Duration::from_secs(3_600)).ttl(),
            "3600s"
        );
        let p = WorkflowPause::new(Duration::from_secs(5)).drop_cron_runs();
        assert_eq!(
            (behaviour(p.drop_crons), behaviour(p.drop_schedules)),
            ("DROP", "QUEUE")
        );
    }
}
