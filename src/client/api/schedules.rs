//! Crons and scheduled runs over REST: list, create, delete, and run a cron now.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Api, Meta, Page, encode, to_body};
use crate::error::Error;
use crate::protocol::rfc3339;

/// A cron trigger.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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
#[non_exhaustive]
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Triggered {
    external_id: String,
}

impl Api {
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
        // The real engine stores any text here and never fires one it cannot parse (five
        // fields, or six with a leading second): refused before it is sent.
        let fields = expression.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(Error::invalid(
                "create cron",
                format!(
                    "cron expression {expression:?} has {fields} fields; the engine fires five (minute hour day-of-month month day-of-week) or six (a leading second), and would store this one and never run it: nothing was sent"
                ),
            ));
        }
        let body = serde_json::json!({"cronName": name, "cronExpression": expression, "input": to_body("create cron", input)?, "additionalMetadata": {}});
        let wf = self.namespaced(workflow);
        self.json(
            reqwest::Method::POST,
            "POST /api/v1/tenants/{t}/workflows/{w}/crons",
            &format!(
                "/api/v1/tenants/{}/workflows/{}/crons",
                self.tenant(),
                encode(&wf)
            ),
            Some(body),
        )
        .await
    }

    /// Deletes a cron trigger. An id no cron has is the engine's failure, not a not-found:
    /// the real engine (v0.104.9) answers its cron lookup's error with a bare 500, and the
    /// development engine does the same ([`Outcome::Rejected`](crate::error::Outcome::Rejected)).
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
                encode(id)
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
        let body = serde_json::json!({"triggerAt": rfc3339(at), "input": to_body("create schedule", input)?, "additionalMetadata": {}});
        let wf = self.namespaced(workflow);
        self.json(
            reqwest::Method::POST,
            "POST /api/v1/tenants/{t}/workflows/{w}/scheduled",
            &format!(
                "/api/v1/tenants/{}/workflows/{}/scheduled",
                self.tenant(),
                encode(&wf)
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
                encode(id)
            ),
        )
        .await
    }

    /// Runs a cron's workflow now, with the cron's input and metadata (the cron keeps its
    /// schedule); answers the new run's id. The engine marks the run as started by the cron.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write sent once: a lost answer may have started the run).
    pub async fn trigger_cron(&self, id: &str) -> Result<String, Error> {
        let t: Triggered = self
            .json(
                reqwest::Method::POST,
                "POST /api/v1/tenants/{t}/workflows/crons/{id}",
                &format!(
                    "/api/v1/tenants/{}/workflows/crons/{}",
                    self.tenant(),
                    encode(id)
                ),
                None,
            )
            .await?;
        Ok(t.external_id)
    }
}
