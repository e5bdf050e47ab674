//! A run's trace: the spans the engine keeps for it, its own (`hatchet.engine.*`) and those the
//! SDKs' instrumentors exported to it.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Api, encode};
use crate::error::Error;

/// One span of a run's trace, as the engine reports it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TraceSpan {
    /// The trace's id (32 hex digits): a run's spans share it with the `traceparent` in its
    /// additional metadata.
    pub trace_id: String,
    /// This span's id (16 hex digits).
    pub span_id: String,
    /// Its parent's id; `None` for the trace's root.
    #[serde(default)]
    pub parent_span_id: Option<String>,
    /// Its name (`hatchet.engine.workflow_run`, `hatchet.engine.queued`,
    /// `hatchet.engine.start_step_run`, `hatchet.engine.event`, or an SDK's or user's span).
    #[serde(rename = "spanName")]
    pub name: String,
    /// `INTERNAL`, `SERVER`, `CLIENT`, `PRODUCER`, `CONSUMER` or `UNSPECIFIED`.
    #[serde(rename = "spanKind")]
    pub kind: String,
    /// The `service.name` of the process that made it (`hatchet-engine` for the engine's).
    pub service_name: String,
    /// `OK`, `ERROR` or `UNSET`.
    #[serde(rename = "statusCode")]
    pub status: String,
    /// Why it is an error, when it is one (the engine's own spans say `task failed` or
    /// `task cancelled`).
    #[serde(default)]
    pub status_message: Option<String>,
    /// How long it lasted (the real engine can report a span that ends before its start: its
    /// times come from different clocks).
    pub duration_ns: i64,
    /// When it started (RFC 3339).
    #[serde(rename = "createdAt")]
    pub started_at: String,
    /// Its attributes, each value as text (a number or list as its JSON).
    #[serde(default, rename = "spanAttributes", deserialize_with = "null_as_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Its process's attributes.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resource_attributes: BTreeMap<String, String>,
    /// The instrumentation scope (tracer) that made it.
    #[serde(default)]
    pub scope_name: Option<String>,
    /// The attempt it belongs to (0 for the first).
    #[serde(default)]
    pub retry_count: i32,
}

/// Attributes read as none when the engine answers `null` (the real engine does for a span
/// stored without any).
fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    Ok(Option::<BTreeMap<String, String>>::deserialize(d)?.unwrap_or_default())
}

impl Api {
    /// The trace of a run (or of one task run): its spans, earliest first, the first 1,000.
    /// The engine makes its own as the run goes (the run's creation, each task's time queued and
    /// each attempt), under the trace of the run's `traceparent`; spans an SDK exports with the
    /// run's `hatchet.step_run_id` join them.
    ///
    /// Not found ([`Error::is_not_found`]) until the engine has written a span that names the
    /// run's tasks: the real engine writes its spans a moment after the events they tell of, so
    /// poll a new run's trace.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn run_trace(&self, run_id: &str) -> Result<Vec<TraceSpan>, Error> {
        #[derive(Deserialize)]
        struct Spans {
            #[serde(default)]
            rows: Vec<TraceSpan>,
        }
        let spans: Spans = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/stable/tenants/{t}/traces",
                &format!(
                    "/api/v1/stable/tenants/{}/traces?run_external_id={}&limit=1000",
                    self.tenant(),
                    encode(run_id)
                ),
                None,
            )
            .await?;
        Ok(spans.rows)
    }
}
