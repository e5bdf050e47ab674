//! The runs and tasks tables: every run by id, and the order they were created in (lists read
//! newest first); every task by id; and in both, what changed since the status pipeline last read
//! them.
//!
//! # Invariants
//!
//! 1. Every run is in the creation order exactly once, and the order names only stored runs:
//!    a run is inserted once and never removed (a deleted workflow's runs stay readable).
//! 2. Every run is filed once under the trace its spans go to (`traces/spans.rs`
//!    `trace_of_run`), and a run an event started, whose event a task pushed, once under that
//!    task's run's derived trace (where the push is drawn): a trace read looks up its runs
//!    instead of scanning every run. Both are fixed when the run is created (its metadata never
//!    changes).
//! 3. A run or task handed out to change (`get_mut`, `insert`) is marked touched until the
//!    status pipeline takes the marks (`take_touched`): it reads what changed, not every run
//!    the engine ever held (`store/readable.rs`). Nothing changes a record without a mark.
//! 4. Every child run (one with a parent task) is filed once under its parent task, when it is
//!    created (its parent never changes): a run's children are looked up, not searched for.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::store::model::{Run, Task};
use crate::traces::spans;

/// Every run by id, in creation order, and by trace.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    by_id: HashMap<String, Run>,
    order: Vec<String>,
    /// Run ids by the trace their spans go to (invariant 2).
    by_trace: HashMap<Vec<u8>, Vec<String>>,
    /// Ids of runs a pushed event started, by the trace of the run that pushed it.
    pushed_into: HashMap<Vec<u8>, Vec<String>>,
    /// Runs handed out to change since the status pipeline last took the marks (invariant 3).
    touched: HashSet<String>,
    /// Child run ids by their parent task, in creation order (invariant 4).
    children: HashMap<String, Vec<String>>,
}

impl Runs {
    /// Stores a new run, last in creation order (invariant 1), filed by trace (invariant 2) and
    /// under its parent task (invariant 4). A second run with an id already stored replaces the
    /// record and keeps its place.
    pub(crate) fn insert(&mut self, run: Run) {
        if !self.by_id.contains_key(&run.id) {
            self.order.push(run.id.clone());
            if let Some(parent) = &run.parent_task_id {
                self.children
                    .entry(parent.clone())
                    .or_default()
                    .push(run.id.clone());
            }
            let trace = spans::trace_of_run(&run.additional_metadata, &run.id);
            self.by_trace.entry(trace).or_default().push(run.id.clone());
            if run.triggering_event.is_some()
                && let Some((source, _)) = spans::event_source(&run.additional_metadata)
            {
                let trace = spans::run_trace_id(&source);
                self.pushed_into
                    .entry(trace)
                    .or_default()
                    .push(run.id.clone());
            }
        }
        self.touched.insert(run.id.clone());
        self.by_id.insert(run.id.clone(), run);
    }

    /// The ids of the runs task `task` spawned (invariant 4), in creation order.
    pub(crate) fn children_of(&self, task: &str) -> &[String] {
        self.children.get(task).map_or(&[], Vec::as_slice)
    }

    /// The runs whose spans go to trace `trace` (invariant 2), in creation order.
    pub(crate) fn in_trace<'a>(&'a self, trace: &[u8]) -> impl Iterator<Item = &'a Run> + 'a {
        self.filed(&self.by_trace, trace)
    }

    /// The runs started by events that a task of a run in derived trace `trace` pushed.
    pub(crate) fn pushed_into<'a>(&'a self, trace: &[u8]) -> impl Iterator<Item = &'a Run> + 'a {
        self.filed(&self.pushed_into, trace)
    }

    fn filed<'a>(
        &'a self,
        index: &'a HashMap<Vec<u8>, Vec<String>>,
        trace: &[u8],
    ) -> impl Iterator<Item = &'a Run> + 'a {
        index
            .get(trace)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// The run `id`.
    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> Option<&Run>
    where
        String: Borrow<Q>,
    {
        self.by_id.get(id)
    }

    /// The run `id`, to change: marked touched (invariant 3).
    pub(crate) fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, id: &Q) -> Option<&mut Run>
    where
        String: Borrow<Q>,
    {
        let run = self.by_id.get_mut(id)?;
        if !self.touched.contains::<str>(&run.id) {
            self.touched.insert(run.id.clone());
        }
        Some(run)
    }

    /// The run `id`, to change without a mark: only for the status pipeline's own fields
    /// (`readable.rs`), which a mark would feed back to it.
    pub(in crate::store) fn get_unmarked(&mut self, id: &str) -> Option<&mut Run> {
        self.by_id.get_mut(id)
    }

    /// Takes the marks (invariant 3): `read` sees each run touched since the last call.
    pub(crate) fn take_touched(&mut self, mut read: impl FnMut(&mut Run)) {
        for id in std::mem::take(&mut self.touched) {
            if let Some(run) = self.by_id.get_mut(&id) {
                read(run);
            }
        }
    }

    /// Whether run `id` is stored.
    pub(crate) fn contains_key<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> bool
    where
        String: Borrow<Q>,
    {
        self.by_id.contains_key(id)
    }

    /// How many runs there are.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every run, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Run> {
        self.by_id.values()
    }

    /// The runs touched since the status pipeline last took the marks, in no order.
    #[cfg(test)]
    pub(crate) fn touched(&self) -> impl Iterator<Item = &Run> {
        self.touched.iter().filter_map(|id| self.by_id.get(id))
    }

    /// Every run, newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &Run> {
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

/// Every task by id, and which were handed out to change since the status pipeline last read
/// them (invariant 3).
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    by_id: HashMap<String, Task>,
    touched: HashSet<String>,
}

impl Tasks {
    /// Stores task `id`, marked touched.
    pub(crate) fn insert(&mut self, id: String, task: Task) {
        self.touched.insert(id.clone());
        self.by_id.insert(id, task);
    }

    /// The task `id`.
    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> Option<&Task>
    where
        String: Borrow<Q>,
    {
        self.by_id.get(id)
    }

    /// The task `id`, to change: marked touched (invariant 3).
    pub(crate) fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, id: &Q) -> Option<&mut Task>
    where
        String: Borrow<Q>,
    {
        let task = self.by_id.get_mut(id)?;
        if !self.touched.contains::<str>(&task.id) {
            self.touched.insert(task.id.clone());
        }
        Some(task)
    }

    /// Whether task `id` is stored.
    pub(crate) fn contains_key<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> bool
    where
        String: Borrow<Q>,
    {
        self.by_id.contains_key(id)
    }

    /// Every task, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Task> {
        self.by_id.values()
    }

    /// How many tasks there are.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The tasks touched since the status pipeline last took the marks, in no order.
    #[cfg(test)]
    pub(crate) fn touched(&self) -> impl Iterator<Item = &Task> {
        self.touched.iter().filter_map(|id| self.by_id.get(id))
    }

    /// The task `id`, to change without a mark: only for the status pipeline's own fields
    /// (`readable.rs`), which a mark would feed back to it.
    pub(in crate::store) fn get_unmarked(&mut self, id: &str) -> Option<&mut Task> {
        self.by_id.get_mut(id)
    }

    /// Takes the marks (invariant 3): `read` sees each task touched since the last call.
    pub(crate) fn take_touched(&mut self, mut read: impl FnMut(&mut Task)) {
        for id in std::mem::take(&mut self.touched) {
            if let Some(task) = self.by_id.get_mut(&id) {
                read(task);
            }
        }
    }
}

impl<Q: Hash + Eq + ?Sized> std::ops::Index<&Q> for Tasks
where
    String: Borrow<Q>,
{
    type Output = Task;

    fn index(&self, id: &Q) -> &Task {
        &self.by_id[id]
    }
}

#[cfg(test)]
mod tests {
    use crate::traces::spans;

    #[test]
    fn runs_are_filed_once_under_their_trace_and_a_pushed_event_s_runs_under_the_pusher_s() {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        let plain = crate::hub::plain_run(&mut st, "wf");
        let template = st.runs[plain.as_str()].clone();
        let sdk_trace = "0af7651916cd43dd8448eb211c80319c";
        let mut traced = template.clone();
        traced.id = uuid::Uuid::new_v4().to_string();
        traced.additional_metadata.insert(
            "traceparent".into(),
            format!("00-{sdk_trace}-b7ad6b7169203331-01").into(),
        );
        let mut pushed = template.clone();
        pushed.id = uuid::Uuid::new_v4().to_string();
        pushed.triggering_event = Some((uuid::Uuid::new_v4().to_string(), "k".into()));
        for (k, v) in [
            ("hatchet__source_workflow_run_id", plain.clone()),
            (
                "hatchet__source_step_run_id",
                uuid::Uuid::new_v4().to_string(),
            ),
        ] {
            pushed.additional_metadata.insert(k.into(), v.into());
        }
        st.runs.insert(traced.clone());
        st.runs.insert(pushed.clone());
        st.runs.insert(traced.clone()); // replaced: filed once still
        let ids = |it: Vec<&crate::store::model::Run>| -> Vec<String> {
            it.into_iter().map(|r| r.id.clone()).collect()
        };
        let sdk: Vec<u8> = (0..16)
            .map(|i| u8::from_str_radix(&sdk_trace[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        assert_eq!(ids(st.runs.in_trace(&sdk).collect()), [traced.id.clone()]);
        let own = spans::run_trace_id(&plain);
        assert!(ids(st.runs.in_trace(&own).collect()).contains(&plain));
        assert_eq!(
            ids(st.runs.pushed_into(&own).collect()),
            [pushed.id.clone()]
        );
        assert_eq!(st.runs.in_trace(&[0u8; 16]).count(), 0, "an unknown trace");
    }

    #[test]
    fn runs_are_listed_newest_first_once_each() {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        let ids: Vec<String> = (0..3)
            .map(|i| {
                st.create_run(
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
