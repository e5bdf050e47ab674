//! Metrics over REST: run counts by status, queue depths, rate limits.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::Value;

use super::{Api, Page, RunStatus, query};
use crate::error::Error;
use crate::protocol::rfc3339;

/// A rate limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RateLimitInfo {
    /// Key.
    pub key: String,
    /// Limit.
    pub limit_value: i64,
    /// Units left in the current window.
    #[serde(default)]
    pub value: i64,
    /// Window.
    #[serde(default)]
    pub window: String,
}

/// How many runs are in each status (a DAG counts once, as does a standalone task).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskMetrics {
    /// Queued.
    pub queued: u64,
    /// Running (evicted durable tasks included).
    pub running: u64,
    /// Completed.
    pub completed: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

impl TaskMetrics {
    /// The count of one status.
    pub fn count(&self, status: RunStatus) -> u64 {
        match status {
            RunStatus::Queued => self.queued,
            RunStatus::Running => self.running,
            RunStatus::Completed => self.completed,
            RunStatus::Failed => self.failed,
            RunStatus::Cancelled => self.cancelled,
        }
    }

    /// From the engine's `[{status, count}]` rows.
    fn from_rows(rows: &[StatusCount]) -> Self {
        let mut m = TaskMetrics::default();
        for r in rows {
            let slot = match r.status {
                RunStatus::Queued => &mut m.queued,
                RunStatus::Running => &mut m.running,
                RunStatus::Completed => &mut m.completed,
                RunStatus::Failed => &mut m.failed,
                RunStatus::Cancelled => &mut m.cancelled,
            };
            *slot += r.count;
        }
        m
    }
}

#[derive(Deserialize)]
struct StatusCount {
    status: RunStatus,
    count: u64,
}

#[derive(Deserialize)]
struct QueueMetrics {
    #[serde(default)]
    queues: BTreeMap<String, Value>,
}

impl Api {
    /// Rate limits of the tenant.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn rate_limits(&self) -> Result<Vec<RateLimitInfo>, Error> {
        let p: Page<RateLimitInfo> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/tenants/{t}/rate-limits",
                &format!("/api/v1/tenants/{}/rate-limits", self.tenant()),
                None,
            )
            .await?;
        Ok(p.rows)
    }

    /// Runs created since `since` (of one workflow id, or all), counted by status.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn task_metrics(
        &self,
        since: SystemTime,
        workflow_id: Option<&str>,
    ) -> Result<TaskMetrics, Error> {
        let mut q = vec![("since", rfc3339(since))];
        q.extend(workflow_id.map(|w| ("workflow_ids", w.to_string())));
        let rows: Vec<StatusCount> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/stable/tenants/{t}/task-metrics",
                &format!(
                    "/api/v1/stable/tenants/{}/task-metrics?{}",
                    self.tenant(),
                    query(q)
                ),
                None,
            )
            .await?;
        Ok(TaskMetrics::from_rows(&rows))
    }

    /// Tasks waiting in each queue, by action (`workflow:task`); queues with none are absent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn queue_depths(&self) -> Result<BTreeMap<String, u64>, Error> {
        const ROUTE: &str = "GET /api/v1/tenants/{t}/step-run-queue-metrics";
        let m: QueueMetrics = self
            .json(
                reqwest::Method::GET,
                ROUTE,
                &format!("/api/v1/tenants/{}/step-run-queue-metrics", self.tenant()),
                None,
            )
            .await?;
        // Beside the queues the engine lists, per workflow, its concurrency keys' unfilled
        // slots (an object): only the numbers are queue depths.
        let depths = m
            .queues
            .into_iter()
            .filter_map(|(k, v)| v.as_u64().map(|n| (k, n)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Ok(depths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_read_the_engine_s_five_rows_with_running_including_evicted() {
        let rows: Vec<StatusCount> = serde_json::from_str(
            r#"[{"status":"CANCELLED","count":1},{"status":"COMPLETED","count":3},
                {"status":"FAILED","count":0},{"status":"QUEUED","count":2},
                {"status":"RUNNING","count":4,"runningDetailCount":{"evicted":1,"onWorker":3}}]"#,
        )
        .expect("rows");
        let m = TaskMetrics::from_rows(&rows);
        assert_eq!(
            m,
            TaskMetrics {
                queued: 2,
                running: 4,
                completed: 3,
                failed: 0,
                cancelled: 1
            }
        );
        assert_eq!(m.count(RunStatus::Running), 4);
    }
}
