//! The workflows table: every registered workflow by name, its latest version; and the
//! idempotency keys its runs claim.
//!
//! # Invariants
//!
//! 1. A new version of a live workflow keeps the workflow's id and gets a new version id; a
//!    deleted workflow's name registers a new workflow (a new id). A registration that
//!    declares what the live version declares is that version again (its id and time kept),
//!    as the real engine reuses a version whose checksum matches: a worker that starts again
//!    adds no version.
//! 4. Every version's definition stays readable by its id (a run shows its own version's,
//!    not the latest).
//! 2. A deleted workflow stays readable by name (its runs name it), but is not live: it is
//!    not listed, triggered or found by id.
//! 3. An idempotency key of a workflow is held by the run that claimed it: until its TTL ends,
//!    or (keys by status) until its TTL or that run's end, whichever comes first: the real
//!    engine releases a status key when its task reaches any terminal state, completed
//!    included (`ReleaseIdempotencyKeys`).

use std::collections::HashMap;

use tokio::time::Instant;

use crate::store::model::Workflow;

/// Every workflow by name, and every version's definition.
#[derive(Debug, Default)]
pub struct Workflows {
    by_name: HashMap<String, Workflow>,
    /// The definitions (`workflowConfig`) of versions a newer one replaced, by version id.
    past_configs: HashMap<String, serde_json::Value>,
}

impl Workflows {
    /// The id a new version of `name` takes (invariant 1): the live workflow's, or `new`.
    pub fn id_for(&self, name: &str, new: impl FnOnce() -> String) -> String {
        self.live(name).map(|w| w.id.clone()).unwrap_or_else(new)
    }

    /// Stores `w` as the latest version of its name.
    /// Answers the version id it has: the live version's when `w` declares the same (invariant
    /// 1), else its own.
    pub fn put(&mut self, mut w: Workflow) -> String {
        if let Some(old) = self.by_name.get(&w.name) {
            if !old.deleted && old.config == w.config {
                w.version_id = old.version_id.clone();
                w.created_at = old.created_at;
            } else {
                self.past_configs
                    .insert(old.version_id.clone(), old.config.clone());
            }
        }
        let version = w.version_id.clone();
        self.by_name.insert(w.name.clone(), w);
        version
    }

    /// The definition of version `version` of workflow `name` (invariant 4).
    pub fn config_of(&self, name: &str, version: &str) -> Option<&serde_json::Value> {
        match self.by_name.get(name) {
            Some(w) if w.version_id == version => Some(&w.config),
            _ => self.past_configs.get(version),
        }
    }

    /// Workflow `name`, live or deleted.
    pub fn get(&self, name: &str) -> Option<&Workflow> {
        self.by_name.get(name)
    }

    /// The live workflow `name` (invariant 2).
    pub fn live(&self, name: &str) -> Option<&Workflow> {
        self.by_name.get(name).filter(|w| !w.deleted)
    }

    /// The live workflow whose id is `id`.
    pub fn live_by_id(&self, id: &str) -> Option<&Workflow> {
        self.by_name.values().find(|w| w.id == id && !w.deleted)
    }

    /// Deletes the live workflow `name` (invariant 2); whether there was one.
    pub fn delete(&mut self, name: &str) -> bool {
        match self.by_name.get_mut(name).filter(|w| !w.deleted) {
            Some(w) => {
                w.deleted = true;
                true
            }
            None => false,
        }
    }

    /// Every workflow, live or deleted, in no order.
    pub fn values(&self) -> impl Iterator<Item = &Workflow> {
        self.by_name.values()
    }

    /// Every live workflow, in no order.
    pub fn live_ones(&self) -> impl Iterator<Item = &Workflow> {
        self.by_name.values().filter(|w| !w.deleted)
    }
}

/// The idempotency keys claimed, by workflow and key: the run and when the key's TTL ends.
#[derive(Debug, Default)]
pub struct IdempotencyKeys {
    claims: HashMap<(String, String), (String, Instant)>,
}

impl IdempotencyKeys {
    /// The run holding `key` of `workflow` at `now` (invariant 3): a claim holds until its TTL,
    /// and with `by_status` only while `held(run)` says so too.
    pub fn holder(
        &self,
        workflow: &str,
        key: &str,
        now: Instant,
        by_status: bool,
        held: impl Fn(&str) -> bool,
    ) -> Option<String> {
        self.claims
            .get(&(workflow.to_string(), key.to_string()))
            .filter(|(run, until)| *until > now && (!by_status || held(run)))
            .map(|(run, _)| run.clone())
    }

    /// `run` claims `key` of `workflow` until `until`.
    pub fn claim(&mut self, workflow: &str, key: String, run: &str, until: Instant) {
        self.claims
            .insert((workflow.to_string(), key), (run.to_string(), until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_version_keeps_the_id_and_a_deleted_name_starts_a_new_workflow() {
        let mut st = crate::core::state_with(crate::core::one_task_workflow());
        let first = st.workflows.live("wf").map(|w| w.id.clone()).expect("live");
        assert_eq!(st.workflows.id_for("wf", || "new".into()), first);
        assert!(st.workflows.delete("wf"));
        assert!(!st.workflows.delete("wf"), "deleted once");
        assert!(st.workflows.live("wf").is_none() && st.workflows.live_by_id(&first).is_none());
        assert!(st.workflows.get("wf").is_some(), "still readable by name");
        assert_eq!(st.workflows.id_for("wf", || "new".into()), "new");
        assert_eq!(st.workflows.live_ones().count(), 0);
    }

    #[test]
    fn an_idempotency_key_is_held_until_its_ttl_or_while_its_run_holds_it() {
        let now = Instant::now();
        let mut keys = IdempotencyKeys::default();
        keys.claim(
            "wf",
            "k".into(),
            "run",
            now + std::time::Duration::from_secs(1),
        );
        assert_eq!(
            keys.holder("wf", "k", now, false, |_| false),
            Some("run".into())
        );
        let later = now + std::time::Duration::from_secs(1);
        assert_eq!(
            keys.holder("wf", "k", later, false, |_| true),
            None,
            "TTL over"
        );
        assert_eq!(
            keys.holder("wf", "k", later, true, |r| r == "run"),
            None,
            "a status key ends at its TTL too"
        );
        assert_eq!(
            keys.holder("wf", "k", now, true, |r| r == "run"),
            Some("run".into())
        );
        assert_eq!(
            keys.holder("wf", "k", now, true, |_| false),
            None,
            "released by status"
        );
        assert_eq!(keys.holder("other", "k", now, false, |_| true), None);
    }
}
