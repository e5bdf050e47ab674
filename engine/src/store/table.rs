//! The runs table: every run by id, and the order they were created in (lists read newest
//! first).
//!
//! # Invariants
//!
//! 1. Every run is in the creation order exactly once, and the order names only stored runs:
//!    a run is inserted once and never removed (a deleted workflow's runs stay readable).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use crate::store::model::Run;

/// Every run by id, in creation order.
#[derive(Debug, Default)]
pub struct Runs {
    by_id: HashMap<String, Run>,
    order: Vec<String>,
}

impl Runs {
    /// Stores a new run, last in creation order (invariant 1). A second run with an id already
    /// stored replaces the record and keeps its place.
    pub fn insert(&mut self, run: Run) {
        if !self.by_id.contains_key(&run.id) {
            self.order.push(run.id.clone());
        }
        self.by_id.insert(run.id.clone(), run);
    }

    /// The run `id`.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> Option<&Run>
    where
        String: Borrow<Q>,
    {
        self.by_id.get(id)
    }

    /// The run `id`, to change.
    pub fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, id: &Q) -> Option<&mut Run>
    where
        String: Borrow<Q>,
    {
        self.by_id.get_mut(id)
    }

    /// Whether run `id` is stored.
    pub fn contains_key<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> bool
    where
        String: Borrow<Q>,
    {
        self.by_id.contains_key(id)
    }

    /// How many runs there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every run, in no order.
    pub fn values(&self) -> impl Iterator<Item = &Run> {
        self.by_id.values()
    }

    /// Every run, newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Run> {
        self.order.iter().rev().filter_map(|id| self.by_id.get(id))
    }
}

impl<Q: Hash + Eq + ?Sized> std::ops::Index<&Q> for Runs
where
    String: Borrow<Q>,
{
    type Output = Run;

    fn index(&self, id: &Q) -> &Run {
        &self.by_id[id]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_are_listed_newest_first_once_each() {
        let mut st = crate::core::state_with(crate::core::one_task_workflow());
        let ids: Vec<String> = (0..3)
            .map(|i| {
                st.create_run(
                    "tenant",
                    "wf",
                    serde_json::json!({ "i": i }),
                    Default::default(),
                    Default::default(),
                )
                .expect("run")
            })
            .collect();
        let mut again = st.runs[ids[0].as_str()].clone();
        again.input = serde_json::json!({ "changed": true });
        st.runs.insert(again); // the same id: replaced, keeps its place
        let listed: Vec<&str> = st.runs.newest_first().map(|r| r.id.as_str()).collect();
        assert_eq!(listed, [&ids[2], &ids[1], &ids[0]]);
        assert_eq!(st.runs.len(), 3);
        assert_eq!(
            st.runs[&ids[0]].input,
            serde_json::json!({ "changed": true })
        );
    }
}
