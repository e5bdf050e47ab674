//! Workers over REST: list, read one, pause and unpause. A paused worker stays connected and
//! finishes what it has; the engine assigns it nothing new until it is unpaused.

use serde::Deserialize;
use serde_json::json;

use super::{Api, Meta, Page, encode};
use crate::error::Error;

/// A worker.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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
    /// Its last heartbeat (RFC 3339).
    #[serde(default)]
    pub last_heartbeat_at: Option<String>,
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

impl Api {
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

    /// One worker, by id ([`crate::runtime::RuntimeHandle::worker_id`] for this runtime's).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn worker(&self, id: &str) -> Result<WorkerInfo, Error> {
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/workers/{id}",
            &format!("/api/v1/workers/{}", encode(id)),
            None,
        )
        .await
    }

    /// Pauses a worker: the engine assigns it no new task (queued tasks wait for another
    /// worker, or for [`Api::unpause_worker`]); what it runs now finishes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write (sent again, it pauses the same worker).
    pub async fn pause_worker(&self, id: &str) -> Result<(), Error> {
        self.set_worker_paused(id, true).await
    }

    /// Unpauses a worker: it gets assignments again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write.
    pub async fn unpause_worker(&self, id: &str) -> Result<(), Error> {
        self.set_worker_paused(id, false).await
    }

    async fn set_worker_paused(&self, id: &str, paused: bool) -> Result<(), Error> {
        // The answer's worker has `actions: null` on the real engine: read it with `worker`.
        self.checked(
            reqwest::Method::PATCH,
            "PATCH /api/v1/workers/{id}",
            &format!("/api/v1/workers/{}", encode(id)),
            Some(json!({ "isPaused": paused })),
        )
        .await
        .map(drop)
    }
}
