//! REST reads (and the few writes SDKs make) through the retry core, with typed results: run
//! details and status, run lists, crons, schedules, workers, rate limits.

use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::connection::Connection;
use crate::error::{Cause, Error, Outcome};
use crate::proto::rfc3339;
use crate::retry::rest::RestResponse;

/// `metadata` of every REST resource.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// Resource id.
    pub id: String,
    /// Creation time (RFC 3339).
    #[serde(default)]
    pub created_at: Option<String>,
}

/// A run's (or task's) status. Displays and serializes as the engine spells it (`COMPLETED`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    /// Waiting for a worker.
    Queued,
    /// Running.
    Running,
    /// Finished with outputs.
    Completed,
    /// Cancelled.
    Cancelled,
    /// Failed.
    Failed,
}

impl RunStatus {
    /// The engine's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "QUEUED",
            RunStatus::Running => "RUNNING",
            RunStatus::Completed => "COMPLETED",
            RunStatus::Cancelled => "CANCELLED",
            RunStatus::Failed => "FAILED",
        }
    }

    /// Whether the run has finished (completed, failed or cancelled).
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Cancelled | RunStatus::Failed
        )
    }

    /// From the gRPC `v1.RunStatus` number.
    pub fn from_v1(n: i32) -> Option<Self> {
        use crate::proto::v1::RunStatus as V;
        Some(match V::try_from(n).ok()? {
            V::Queued => RunStatus::Queued,
            // An evicted durable task is still running as far as its run is concerned.
            V::Running | V::Evicted => RunStatus::Running,
            V::Completed => RunStatus::Completed,
            V::Failed => RunStatus::Failed,
            V::Cancelled => RunStatus::Cancelled,
        })
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task, as the REST API shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// Task run id.
    pub task_external_id: String,
    /// Run id.
    pub workflow_run_external_id: String,
    /// Status.
    pub status: RunStatus,
    /// Task name.
    #[serde(default)]
    pub display_name: String,
    /// Output.
    #[serde(default)]
    pub output: Value,
    /// Retry count.
    #[serde(default)]
    pub retry_count: i32,
}

/// A page of rows.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Page<T> {
    /// Rows.
    pub rows: Vec<T>,
}

/// A cron trigger.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cron {
    /// Id.
    pub metadata: Meta,
    /// Name.
    pub name: String,
    /// Cron expression.
    pub cron: String,
    /// Workflow.
    pub workflow_name: String,
    /// Input.
    #[serde(default)]
    pub input: Value,
}

/// A scheduled run.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Id.
    pub metadata: Meta,
    /// When (RFC 3339).
    pub trigger_at: String,
    /// Workflow.
    pub workflow_name: String,
    /// Input.
    #[serde(default)]
    pub input: Value,
    /// The run it started, once it fired.
    #[serde(default)]
    pub workflow_run_id: Option<String>,
}

/// A worker.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerInfo {
    /// Id.
    pub metadata: Meta,
    /// Name.
    pub name: String,
    /// `ACTIVE`, `INACTIVE` or `PAUSED`.
    pub status: String,
    /// Actions it runs.
    #[serde(default)]
    pub actions: Vec<String>,
    /// Its slot pools by slot type (`default`; `durable` only for a worker with durable
    /// tasks): how many it registered and how many are free.
    #[serde(default)]
    pub slot_config: std::collections::BTreeMap<String, SlotCapacity>,
}

/// One slot pool of a worker, as the REST API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct SlotCapacity {
    /// Slots registered.
    pub limit: i32,
    /// Slots free now (the engine's view; it trails assignments a little).
    #[serde(default)]
    pub available: Option<i32>,
}

/// A rate limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
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

/// REST operations of a runtime; see [`crate::RuntimeHandle::api`].
#[derive(Clone, Debug)]
pub struct Api {
    conn: Connection,
}

impl Api {
    pub(crate) fn new(conn: Connection) -> Self {
        Api { conn }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        route: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<RestResponse, Error> {
        self.conn.rest(method, route, path, body).await
    }

    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        route: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, Error> {
        let r = self.call(method, route, path, body).await?;
        if !r.is_success() {
            let outcome = if r.status == 404 || (400..500).contains(&r.status) {
                Outcome::Rejected
            } else {
                Outcome::Exhausted
            };
            return Err(Error::new(outcome, route).with_cause(Cause::HttpStatus {
                status: r.status,
                body: String::from_utf8_lossy(&r.body[..r.body.len().min(4096)]).into_owned(),
            }));
        }
        serde_json::from_slice(&r.body).map_err(|e| {
            Error::new(Outcome::Rejected, route)
                .with_detail("the engine's answer has an unexpected shape")
                .with_cause(Cause::Json(e))
        })
    }

    pub(crate) fn namespaced(&self, name: &str) -> String {
        self.conn.config().namespaced(name)
    }

    pub(crate) fn tenant(&self) -> &str {
        &self.conn.config().tenant_id
    }

    /// `GET /api/v1/stable/workflow-runs/{id}`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn run(&self, run_id: &str) -> Result<crate::RunView, Error> {
        const ROUTE: &str = "GET /api/v1/stable/workflow-runs/{id}";
        let v: Value = self
            .json(
                reqwest::Method::GET,
                ROUTE,
                &format!("/api/v1/stable/workflow-runs/{}", super::encode(run_id)),
                None,
            )
            .await?;
        crate::RunView::from_rest(&v).map_err(|why| {
            Error::new(Outcome::Rejected, ROUTE)
                .with_detail(format!(
                    "the engine's answer has an unexpected shape: {why}"
                ))
                .with_run_id(run_id)
        })
    }

    /// `GET /api/v1/stable/workflow-runs/{id}/status`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn run_status(&self, run_id: &str) -> Result<RunStatus, Error> {
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/stable/workflow-runs/{id}/status",
            &format!(
                "/api/v1/stable/workflow-runs/{}/status",
                super::encode(run_id)
            ),
            None,
        )
        .await
    }

    /// Runs created since `since` (newest first), optionally by status.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_runs(
        &self,
        since: SystemTime,
        statuses: &[&str],
        limit: usize,
    ) -> Result<Vec<TaskSummary>, Error> {
        let mut q = format!("since={}&only_tasks=false&limit={limit}", rfc3339(since));
        for s in statuses {
            q.push_str(&format!("&statuses={s}"));
        }
        let p: Page<TaskSummary> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/stable/tenants/{t}/workflow-runs",
                &format!("/api/v1/stable/tenants/{}/workflow-runs?{q}", self.tenant()),
                None,
            )
            .await?;
        Ok(p.rows)
    }

    /// Cron triggers.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_crons(&self) -> Result<Vec<Cron>, Error> {
        let p: Page<Cron> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/tenants/{t}/workflows/crons",
                &format!("/api/v1/tenants/{}/workflows/crons", self.tenant()),
                None,
            )
            .await?;
        Ok(p.rows)
    }

    /// Creates a cron trigger.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write sent once).
    pub async fn create_cron<I: Serialize>(
        &self,
        workflow: &str,
        name: &str,
        expression: &str,
        input: &I,
    ) -> Result<Cron, Error> {
        let body = serde_json::json!({"cronName": name, "cronExpression": expression, "input": serde_json::to_value(input).map_err(|e| Error::invalid("create cron", e.to_string()))?, "additionalMetadata": {}});
        let wf = self.conn.config().namespaced(workflow);
        self.json(
            reqwest::Method::POST,
            "POST /api/v1/tenants/{t}/workflows/{w}/crons",
            &format!(
                "/api/v1/tenants/{}/workflows/{}/crons",
                self.tenant(),
                super::encode(&wf)
            ),
            Some(body),
        )
        .await
    }

    /// Deletes a cron trigger.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write sent once).
    pub async fn delete_cron(&self, id: &str) -> Result<(), Error> {
        self.delete(
            "DELETE /api/v1/tenants/{t}/workflows/crons/{id}",
            &format!(
                "/api/v1/tenants/{}/workflows/crons/{}",
                self.tenant(),
                super::encode(id)
            ),
        )
        .await
    }

    /// Scheduled runs.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_schedules(&self) -> Result<Vec<Schedule>, Error> {
        let p: Page<Schedule> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/tenants/{t}/workflows/scheduled",
                &format!("/api/v1/tenants/{}/workflows/scheduled", self.tenant()),
                None,
            )
            .await?;
        Ok(p.rows)
    }

    /// Schedules a run at `at`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write sent once).
    pub async fn create_schedule<I: Serialize>(
        &self,
        workflow: &str,
        at: SystemTime,
        input: &I,
    ) -> Result<Schedule, Error> {
        let body = serde_json::json!({"triggerAt": rfc3339(at), "input": serde_json::to_value(input).map_err(|e| Error::invalid("create schedule", e.to_string()))?, "additionalMetadata": {}});
        let wf = self.conn.config().namespaced(workflow);
        self.json(
            reqwest::Method::POST,
            "POST /api/v1/tenants/{t}/workflows/{w}/scheduled",
            &format!(
                "/api/v1/tenants/{}/workflows/{}/scheduled",
                self.tenant(),
                super::encode(&wf)
            ),
            Some(body),
        )
        .await
    }

    /// Deletes a scheduled run.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write sent once).
    pub async fn delete_schedule(&self, id: &str) -> Result<(), Error> {
        self.delete(
            "DELETE /api/v1/tenants/{t}/workflows/scheduled/{id}",
            &format!(
                "/api/v1/tenants/{}/workflows/scheduled/{}",
                self.tenant(),
                super::encode(id)
            ),
        )
        .await
    }

    async fn delete(&self, route: &'static str, path: &str) -> Result<(), Error> {
        let r = self
            .call(reqwest::Method::DELETE, route, path, None)
            .await?;
        if r.is_success() {
            Ok(())
        } else {
            Err(
                Error::new(Outcome::Rejected, route).with_cause(Cause::HttpStatus {
                    status: r.status,
                    body: String::from_utf8_lossy(&r.body).into_owned(),
                }),
            )
        }
    }

    /// Workers of the tenant.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, Error> {
        let p: Page<WorkerInfo> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/tenants/{t}/worker",
                &format!("/api/v1/tenants/{}/worker", self.tenant()),
                None,
            )
            .await?;
        Ok(p.rows)
    }

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
}
