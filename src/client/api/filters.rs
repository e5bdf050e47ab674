//! Event filters over REST: create, list, update, delete. An event pushed with a scope starts a
//! workflow that has filters only through that scope's filters whose expression holds (see
//! [`crate::worker::task::Workflow::default_filter`] for filters declared with the workflow).
//!
//! # Invariants
//!
//! 1. Creating needs a non-empty scope and expression: refused locally otherwise, nothing sent.
//! 2. An update changes only the fields it names.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Api, Meta};
use crate::error::Error;

/// A stored event filter.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Filter {
    /// Its id.
    pub metadata: Meta,
    /// The workflow it starts.
    pub workflow_id: String,
    /// The scope of the events it applies to.
    pub scope: String,
    /// CEL over `input`, `additional_metadata`, `payload`, `event_key`.
    pub expression: String,
    /// What the runs it starts get as `Context::filter_payload`.
    #[serde(default)]
    pub payload: Value,
    /// Declared with the workflow rather than created here.
    #[serde(default)]
    pub is_declarative: Option<bool>,
}

/// What an update changes (fields left `None` stay).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FilterUpdate {
    /// A new expression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// A new scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// A new payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

impl FilterUpdate {
    /// An update that changes nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a new expression.
    pub fn expression(mut self, expression: impl Into<String>) -> Self {
        self.expression = Some(expression.into());
        self
    }

    /// Sets a new scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Sets a new payload.
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }
}

#[derive(Deserialize)]
struct FilterList {
    #[serde(default)]
    rows: Vec<Filter>,
}

impl Api {
    /// Creates a filter for `workflow_id` (see [`Api::workflow_id`]).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write): a dropped call may have created the filter.
    pub async fn create_filter(
        &self,
        workflow_id: &str,
        scope: &str,
        expression: &str,
        payload: Value,
    ) -> Result<Filter, Error> {
        const ROUTE: &str = "POST /api/v1/stable/tenants/{t}/filters";
        if scope.trim().is_empty() || expression.trim().is_empty() {
            return Err(Error::invalid(
                ROUTE,
                "a filter needs a scope and an expression",
            ));
        }
        let body = json!({"workflowId": workflow_id, "scope": scope, "expression": expression, "payload": payload});
        let path = format!("/api/v1/stable/tenants/{}/filters", self.tenant());
        self.json(reqwest::Method::POST, ROUTE, &path, Some(body))
            .await
    }

    /// Filters, optionally only those of `workflow_ids` and `scopes`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_filters(
        &self,
        workflow_ids: &[&str],
        scopes: &[&str],
    ) -> Result<Vec<Filter>, Error> {
        const ROUTE: &str = "GET /api/v1/stable/tenants/{t}/filters";
        let mut q: Vec<String> = workflow_ids
            .iter()
            .map(|w| format!("workflowIds={w}"))
            .collect();
        q.extend(
            scopes
                .iter()
                .map(|s| format!("scopes={}", super::encode(s))),
        );
        let path = format!(
            "/api/v1/stable/tenants/{}/filters?{}",
            self.tenant(),
            q.join("&")
        );
        let list: FilterList = self.json(reqwest::Method::GET, ROUTE, &path, None).await?;
        Ok(list.rows)
    }

    /// Changes a filter (invariant 2).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the same update can be repeated.
    pub async fn update_filter(&self, id: &str, update: &FilterUpdate) -> Result<Filter, Error> {
        const ROUTE: &str = "PATCH /api/v1/stable/tenants/{t}/filters/{id}";
        let body = serde_json::to_value(update).unwrap_or_else(|_| json!({}));
        let path = format!(
            "/api/v1/stable/tenants/{}/filters/{}",
            self.tenant(),
            super::encode(id)
        );
        self.json(reqwest::Method::PATCH, ROUTE, &path, Some(body))
            .await
    }

    /// Deletes a filter; returns it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a repeated delete answers "not found".
    pub async fn delete_filter(&self, id: &str) -> Result<Filter, Error> {
        const ROUTE: &str = "DELETE /api/v1/stable/tenants/{t}/filters/{id}";
        let path = format!(
            "/api/v1/stable/tenants/{}/filters/{}",
            self.tenant(),
            super::encode(id)
        );
        self.json(reqwest::Method::DELETE, ROUTE, &path, None).await
    }

    /// The id of the workflow named `name` (namespaced), as filters and run lists want it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn workflow_id(&self, name: &str) -> Result<String, Error> {
        let full = self.namespaced(name);
        self.find_workflow_id(name).await?.ok_or_else(|| {
            Error::new(crate::error::Outcome::Rejected, WORKFLOWS_ROUTE)
                .with_detail(format!("no workflow named {full:?}; register it first"))
        })
    }

    /// The id of the workflow named `name` (namespaced), or `None` when the engine has none.
    /// The engine's `name` filter is a substring search (`ILIKE '%name%'`, newest first), so
    /// the exact name can sit past the first page behind newer names that contain it: every
    /// page is read until it is found or the list ends.
    pub(crate) async fn find_workflow_id(&self, name: &str) -> Result<Option<String>, Error> {
        let name = self.namespaced(name);
        let mut offset = 0usize;
        for _ in 0..LOOKUP_PAGES {
            let path = format!(
                "/api/v1/tenants/{}/workflows?name={}&limit={LOOKUP_PAGE}&offset={offset}",
                self.tenant(),
                super::encode(&name)
            );
            let v: Value = self
                .json(reqwest::Method::GET, WORKFLOWS_ROUTE, &path, None)
                .await?;
            let rows = v["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
            if let Some(id) = rows
                .iter()
                .find(|w| w["name"] == name.as_str())
                .and_then(|w| w["metadata"]["id"].as_str())
            {
                return Ok(Some(id.to_string()));
            }
            if rows.len() < LOOKUP_PAGE {
                return Ok(None);
            }
            offset += rows.len();
        }
        Ok(None)
    }
}

const WORKFLOWS_ROUTE: &str = "GET /api/v1/tenants/{t}/workflows";
/// Rows per page of a workflow lookup (the engine's own default).
const LOOKUP_PAGE: usize = 50;
/// Pages a lookup reads at most (10,000 workflows whose names contain the one looked up).
const LOOKUP_PAGES: usize = 200;

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(super::super::encode("a b:c/d"), "a%20b%3Ac%2Fd");
        assert_eq!(super::super::encode("plain-name_1.2~"), "plain-name_1.2~");
    }
}
