//! REST reads and writes through the retry core, with typed results. One file per resource:
//! runs and tasks (`runs`), crons and schedules (`schedules`), workers (`workers`), workflows
//! (`workflows`), events (`events`), metrics and rate limits (`metrics`), event filters
//! (`filters`), incoming webhooks (`webhooks`), a run's trace (`traces`).
//!
//! # Invariants
//!
//! 1. Every call goes through the REST retry core: reads and idempotent writes (`PUT`,
//!    `PATCH`, `DELETE`) are retried on transient failures, a `POST` is sent once.
//! 2. A non-success answer is an [`Error`] carrying the status and up to 4 KiB of the body
//!    ([`Cause::HttpStatus`]); [`Error::is_not_found`] tells an unknown id apart.
//! 3. A list answers one page ([`Page`]) with the engine's pagination; nothing is fetched
//!    behind the caller's back.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::encode;
use crate::connection::Connection;
use crate::error::{Cause, Error, Outcome};
use crate::retry::rest::RestResponse;

mod events;
pub(crate) mod filters;
mod metrics;
mod runs;
mod schedules;
mod traces;
mod webhooks;
mod workers;
mod workflows;

pub use events::{EventInfo, EventQuery, TriggeredRun};
pub use metrics::{RateLimitInfo, TaskMetrics};
pub use runs::{AttemptEvent, LogLine, LogQuery, RunQuery, TaskSummary};
pub use schedules::{Cron, Schedule};
pub use traces::TraceSpan;
pub use webhooks::{
    HmacAlgorithm, NewWebhook, SignatureEncoding, WebhookAuth, WebhookInfo, WebhookSource,
    WebhookUpdate,
};
pub use workers::{SlotCapacity, WorkerInfo};
pub use workflows::{WorkflowInfo, WorkflowPause};

/// `metadata` of every REST resource.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Meta {
    /// Resource id.
    pub id: String,
    /// Creation time (RFC 3339).
    #[serde(default)]
    pub created_at: Option<String>,
}

/// One page of a list, as the engine pages it.
#[derive(Debug, Clone, Deserialize)]
#[non_exhaustive]
pub struct Page<T> {
    /// The rows of this page.
    #[serde(default = "Vec::new")]
    pub rows: Vec<T>,
    /// Where this page is (absent on lists the engine does not page).
    #[serde(default)]
    pub pagination: Option<Pagination>,
}

impl<T> Page<T> {
    /// Whether a page follows this one.
    pub fn has_more(&self) -> bool {
        self.pagination
            .is_some_and(|p| p.current_page < p.num_pages)
    }
}

/// Where a page is: pages are numbered from 1.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pagination {
    /// This page's number.
    #[serde(default)]
    pub current_page: i64,
    /// The next page's number (the engine answers `current + 1` even on the last page).
    #[serde(default)]
    pub next_page: i64,
    /// How many pages the whole list has (the real engine counts at most 20,000 rows).
    #[serde(default)]
    pub num_pages: i64,
}

/// A run's (or task's) status. Displays and serializes as the engine spells it (`COMPLETED`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
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
    pub(crate) fn from_v1(n: i32) -> Option<Self> {
        use crate::protocol::v1::RunStatus as V;
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

/// REST operations of a runtime; see [`crate::runtime::RuntimeHandle::api`].
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

    /// Sends and reads the answer as `T`; a non-success status is an error.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        route: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, Error> {
        let r = self.checked(method, route, path, body).await?;
        serde_json::from_slice(&r.body).map_err(|e| {
            Error::new(Outcome::Rejected, route)
                .with_detail("the engine's answer has an unexpected shape")
                .with_cause(Cause::Json(e))
        })
    }

    /// Sends; a non-success status is an error, the body is not read.
    async fn checked(
        &self,
        method: reqwest::Method,
        route: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<RestResponse, Error> {
        let r = self.call(method, route, path, body).await?;
        if r.is_success() {
            return Ok(r);
        }
        let outcome = if (400..500).contains(&r.status) {
            Outcome::Rejected
        } else {
            Outcome::Exhausted
        };
        Err(Error::new(outcome, route).with_cause(Cause::HttpStatus {
            status: r.status,
            body: String::from_utf8_lossy(&r.body[..r.body.len().min(4096)]).into_owned(),
        }))
    }

    async fn delete(&self, route: &'static str, path: &str) -> Result<(), Error> {
        self.checked(reqwest::Method::DELETE, route, path, None)
            .await
            .map(drop)
    }

    pub(crate) fn namespaced(&self, name: &str) -> String {
        self.conn.config().namespaced(name)
    }

    pub(crate) fn tenant(&self) -> &str {
        &self.conn.config().tenant_id
    }
}

/// A query string from `(name, value)` pairs, each value percent-encoded.
fn query<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> String {
    pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={}", encode(&v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Serializes a caller's value for a request body.
fn to_body<T: Serialize>(what: &'static str, v: &T) -> Result<Value, Error> {
    serde_json::to_value(v).map_err(|e| {
        Error::invalid(what, format!("the input does not serialize to JSON: {e}"))
            .with_cause(Cause::Json(e))
    })
}
