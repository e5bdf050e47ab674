//! Event filters and scopes (`hatchet-engine-semantics.md` §10): which runs a pushed event
//! starts, and the filters' records.
//!
//! # Invariants
//!
//! 1. A workflow with no filters at all is triggered once by a matching event, whatever its
//!    scope.
//! 2. A workflow with filters is triggered only by an event with a scope, and only by that
//!    scope's filters whose expression is true: each such filter starts its own run, carrying
//!    the filter's payload as `triggers.filter_payload`.
//! 3. An empty expression, a parse error or a non-bool result never triggers.
//! 4. Declarative filters (from the workflow's registration) are replaced only by a new version
//!    that declares some; registering with none keeps them.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::dag::expr::filter_matches;

/// A stored filter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Filter {
    pub id: String,
    pub workflow_id: String,
    pub scope: String,
    pub expression: String,
    pub payload: Value,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    pub declarative: bool,
}

impl Filter {
    /// The REST `V1Filter`.
    pub(crate) fn to_json(&self, tenant: &str) -> Value {
        json!({
            "metadata": {"id": self.id, "createdAt": hatchet_runtime::protocol::rfc3339(self.created_at),
                         "updatedAt": hatchet_runtime::protocol::rfc3339(self.updated_at)},
            "tenantId": tenant,
            "workflowId": self.workflow_id,
            "scope": self.scope,
            "expression": self.expression,
            "payload": self.payload,
            "isDeclarative": self.declarative,
        })
    }
}

/// What a pushed event means for one workflow whose trigger matches its key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// No filters: one run, no filter payload (invariant 1).
    Once,
    /// One run per matching filter, with its payload (invariant 2); may be empty.
    PerFilter(Vec<Value>),
}

/// The CEL variables of a filter: `input`, `additional_metadata`, `payload`, `event_key`,
/// `event_id`.
fn vars(
    input: &Value,
    meta: &Map<String, Value>,
    f: &Filter,
    key: &str,
    id: &str,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("input".into(), input.clone());
    m.insert("additional_metadata".into(), Value::Object(meta.clone()));
    m.insert("payload".into(), f.payload.clone());
    m.insert("event_key".into(), Value::String(key.into()));
    m.insert("event_id".into(), Value::String(id.into()));
    m
}

/// Every stored filter, in creation order: the room that keeps invariant 4.
#[derive(Debug, Default)]
pub(crate) struct Filters {
    all: Vec<Filter>,
}

impl Filters {
    /// Stores a filter made through the REST API.
    pub(crate) fn add(&mut self, f: Filter) {
        self.all.push(f);
    }

    /// Every filter, in creation order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Filter> {
        self.all.iter()
    }

    /// The filter `id`, to change.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Filter> {
        self.all.iter_mut().find(|f| f.id == id)
    }

    /// Removes and returns the filter `id`.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Filter> {
        let i = self.all.iter().position(|f| f.id == id)?;
        Some(self.all.remove(i))
    }

    /// What an event means for one workflow (invariants 1-3).
    pub(crate) fn decide(
        &self,
        workflow_id: &str,
        scope: Option<&str>,
        event: (&str, &str),
        input: &Value,
        meta: &Map<String, Value>,
    ) -> Decision {
        let mine: Vec<&Filter> = self
            .all
            .iter()
            .filter(|f| f.workflow_id == workflow_id)
            .collect();
        if mine.is_empty() {
            return Decision::Once;
        }
        let Some(scope) = scope else {
            return Decision::PerFilter(Vec::new());
        };
        let (key, id) = event;
        Decision::PerFilter(
            mine.into_iter()
                .filter(|f| f.scope == scope)
                .filter(|f| filter_matches(&f.expression, &vars(input, meta, f, key, id)))
                .map(|f| f.payload.clone())
                .collect(),
        )
    }

    /// Replaces a workflow's declarative filters when a version declares some (invariant 4).
    pub(crate) fn set_declarative(
        &mut self,
        workflow_id: &str,
        declared: &[hatchet_runtime::protocol::v1::DefaultFilter],
        now: SystemTime,
    ) {
        if declared.is_empty() {
            return;
        }
        self.all
            .retain(|f| !(f.declarative && f.workflow_id == workflow_id));
        for d in declared {
            let payload = d
                .payload
                .as_deref()
                .and_then(|p| serde_json::from_slice(p).ok())
                .unwrap_or_else(|| json!({}));
            self.all.push(Filter {
                id: crate::parse::new_id(),
                workflow_id: workflow_id.to_string(),
                scope: d.scope.clone(),
                expression: d.expression.clone(),
                payload,
                created_at: now,
                updated_at: now,
                declarative: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(wf: &str, scope: &str, expr: &str, payload: Value) -> Filter {
        Filter {
            id: crate::parse::new_id(),
            workflow_id: wf.into(),
            scope: scope.into(),
            expression: expr.into(),
            payload,
            created_at: SystemTime::UNIX_EPOCH,
            updated_at: SystemTime::UNIX_EPOCH,
            declarative: false,
        }
    }

    #[test]
    fn the_real_engines_three_cases() {
        let fs = Filters {
            all: vec![
                filter(
                    "w",
                    "tenant-a",
                    "input.amount > payload.min",
                    json!({"min": 10}),
                ),
                filter(
                    "w",
                    "tenant-a",
                    "event_key == 'order:created'",
                    json!({"tag": "all"}),
                ),
                filter("w", "tenant-b", "true", json!({"tag": "b"})),
                filter("w", "tenant-a", "", json!({"tag": "empty never matches"})),
            ],
        };
        let input = json!({"amount": 20});
        let meta = Map::new();
        let ev = ("order:created", "id");
        assert_eq!(fs.decide("other", None, ev, &input, &meta), Decision::Once);
        assert_eq!(
            fs.decide("w", None, ev, &input, &meta),
            Decision::PerFilter(vec![]),
            "filters exist but the event has no scope"
        );
        assert_eq!(
            fs.decide("w", Some("tenant-a"), ev, &input, &meta),
            Decision::PerFilter(vec![json!({"min": 10}), json!({"tag": "all"})])
        );
        assert_eq!(
            fs.decide("w", Some("tenant-c"), ev, &input, &meta),
            Decision::PerFilter(vec![])
        );
    }
}
