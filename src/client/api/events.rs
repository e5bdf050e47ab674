//! The tenant's events over REST: what was pushed, newest first, with the runs each started.

use std::time::SystemTime;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{Api, Meta, Page, RunStatus, query};
use crate::error::Error;
use crate::protocol::rfc3339;

/// A pushed event, as the events list shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EventInfo {
    /// Its id (what [`crate::runtime::RuntimeHandle::push`] answered).
    pub metadata: Meta,
    /// Its key.
    pub key: String,
    /// When the engine took it (RFC 3339).
    #[serde(default)]
    pub seen_at: Option<String>,
    /// Its scope, when pushed with one.
    #[serde(default)]
    pub scope: Option<String>,
    /// Its payload.
    #[serde(default)]
    pub payload: Value,
    /// Its additional metadata.
    #[serde(default)]
    pub additional_metadata: Value,
    /// The webhook it came through, if one.
    #[serde(default)]
    pub triggering_webhook_name: Option<String>,
    /// The runs it started (none: the engine answers `null`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub triggered_runs: Vec<TriggeredRun>,
}

/// A run an event started.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TriggeredRun {
    /// The run's id.
    pub workflow_run_id: String,
    /// The filter that let it start, when one did.
    #[serde(default)]
    pub filter_id: Option<String>,
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// Which events a list answers, newest first, 50 to a page. Without [`EventQuery::since`]
/// the engine answers the last 24 hours.
#[derive(Debug, Clone)]
pub struct EventQuery {
    since: Option<SystemTime>,
    until: Option<SystemTime>,
    keys: Vec<String>,
    event_ids: Vec<String>,
    workflow_ids: Vec<String>,
    run_statuses: Vec<RunStatus>,
    scopes: Vec<String>,
    metadata: Vec<(String, String)>,
    limit: usize,
    offset: usize,
}

impl Default for EventQuery {
    fn default() -> Self {
        EventQuery {
            since: None,
            until: None,
            keys: Vec::new(),
            event_ids: Vec::new(),
            workflow_ids: Vec::new(),
            run_statuses: Vec::new(),
            scopes: Vec::new(),
            metadata: Vec::new(),
            limit: 50,
            offset: 0,
        }
    }
}

impl EventQuery {
    /// The last 24 hours' events, 50 to a page.
    pub fn new() -> Self {
        EventQuery::default()
    }

    /// Only events taken at or after `t`.
    pub fn since(mut self, t: SystemTime) -> Self {
        self.since = Some(t);
        self
    }

    /// Only events taken at or before `t`.
    pub fn until(mut self, t: SystemTime) -> Self {
        self.until = Some(t);
        self
    }

    /// Only events with this key, namespaced as pushes are (call again to allow several).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.keys.push(key.into());
        self
    }

    /// Only this event (call again to allow several).
    pub fn event_id(mut self, id: impl Into<String>) -> Self {
        self.event_ids.push(id.into());
        self
    }

    /// Only events that started a run of this workflow id (call again to allow several).
    pub fn workflow_id(mut self, id: impl Into<String>) -> Self {
        self.workflow_ids.push(id.into());
        self
    }

    /// Only events that started a run now in this status (call again to allow several).
    pub fn run_status(mut self, status: RunStatus) -> Self {
        self.run_statuses.push(status);
        self
    }

    /// Only events pushed with this scope (call again to allow several).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scopes.push(scope.into());
        self
    }

    /// Only events whose metadata has `key` = `value` (every pair given must hold). Neither
    /// may be empty (the engine fails the whole list on such a pair).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// Rows per page (at least 1).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// Rows to skip.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// The query of the page after this one.
    pub fn next_page(mut self) -> Self {
        self.offset += self.limit;
        self
    }

    fn check(&self) -> Result<(), Error> {
        match self
            .metadata
            .iter()
            .find(|(k, v)| k.is_empty() || v.is_empty())
        {
            Some((k, v)) => Err(Error::invalid(
                "list events",
                format!("metadata pair {k:?}:{v:?} has an empty side; name both"),
            )),
            None => Ok(()),
        }
    }

    /// The query string, keys namespaced by `ns` (as pushes namespace them).
    fn to_query(&self, ns: impl Fn(&str) -> String) -> String {
        let mut q: Vec<(&str, String)> = vec![
            ("limit", self.limit.to_string()),
            ("offset", self.offset.to_string()),
        ];
        q.extend(self.since.map(|t| ("since", rfc3339(t))));
        q.extend(self.until.map(|t| ("until", rfc3339(t))));
        q.extend(self.keys.iter().map(|k| ("keys", ns(k))));
        q.extend(self.event_ids.iter().map(|k| ("eventIds", k.clone())));
        q.extend(self.workflow_ids.iter().map(|k| ("workflowIds", k.clone())));
        q.extend(
            self.run_statuses
                .iter()
                .map(|s| ("workflowRunStatuses", s.to_string())),
        );
        q.extend(self.scopes.iter().map(|k| ("scopes", k.clone())));
        q.extend(
            self.metadata
                .iter()
                .map(|(k, v)| ("additionalMetadata", format!("{k}:{v}"))),
        );
        query(q)
    }
}

impl Api {
    /// One page of the tenant's events, newest first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_events(&self, q: &EventQuery) -> Result<Page<EventInfo>, Error> {
        q.check()?;
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/stable/tenants/{t}/events",
            &format!(
                "/api/v1/stable/tenants/{}/events?{}",
                self.tenant(),
                q.to_query(|k| self.namespaced(k))
            ),
            None,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_without_runs_reads_an_empty_list_from_null() {
        let e: EventInfo = serde_json::from_str(
            r#"{"metadata":{"id":"e1"},"key":"k","tenantId":"","triggeredRuns":null,
                "workflowRunSummary":{"queued":0}}"#,
        )
        .expect("event");
        assert!(e.triggered_runs.is_empty());
    }

    #[test]
    fn an_event_query_uses_the_engine_s_camel_case_names() {
        let q = EventQuery::new()
            .key("user:created")
            .run_status(RunStatus::Completed)
            .metadata("a", "b")
            .limit(10)
            .to_query(|k| format!("ns_{k}"));
        assert_eq!(
            q,
            "limit=10&offset=0&keys=ns_user%3Acreated&workflowRunStatuses=COMPLETED\
             &additionalMetadata=a%3Ab"
        );
        let e = EventQuery::new().metadata("", "x").check().unwrap_err();
        assert!(e.to_string().contains("empty side"), "{e}");
    }
}
