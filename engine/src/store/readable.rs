//! What REST and the run streams see of statuses. The real engine publishes REST's late: REST
//! reads OLAP tables its controller fills from buffered events. Measured on v0.104.9
//! (`benches/python/status_lag.py`): a run that ends 0.5 s into its life reads COMPLETED over
//! REST 0.55 to 1.48 s after its task returned; a run that ends 3 s into its life, or after
//! durable sleeps, 0.02 to 0.06 s after. The lag is the new run's: once the pipeline has a run,
//! its changes pass at once, and a change behind a run still on its way waits for it (a
//! parent's end never reads before its children read as they are). A run's end reaches the run
//! streams (`SubscribeToWorkflowRuns`) without that lag: the engine's task controller tells the
//! dispatcher as it records the end (a "finished candidate"), and the official Python SDK's
//! `aio_result()` returned 19 to 54 ms after the task did, a new run or not. `GetRunDetails`
//! reads the live tables, each task's end once the end hop after it has passed
//! (`Switches::end_hop`, 30 ms; the real engine's task controller records a worker's end 0 to
//! 60 ms after the worker sent it).
//!
//! # Invariants
//!
//! 1. With the lag on (the default, `faults::STATUS_LAG`), runs reach REST through one
//!    pipeline, in order: a new run `lag` to `2 * lag` after its creation (a draw fixed by its
//!    id), every later change of it or its tasks the end hop after the pass that took it (so
//!    never before `GetRunDetails` reads it), except that no entry overtakes an earlier one
//!    (but see invariant 5).
//!    Until its entry is through, REST reads the run and its tasks as they were then (a new
//!    run: as created).
//! 2. A run's end reaches the run streams the end hop after the pass that saw it (at once with
//!    the hop off), whatever the pipeline holds: once per end (a replay's end is a new one, an
//!    end from before a replay is not news).
//! 3. With the lag off (`DevEngine::status_lag(None)`, a kindness for tests), REST reads the
//!    live status.
//! 4. A pass reads only the runs and tasks that changed since the last (table.rs invariant 3)
//!    and the entries, ends and ticks that fall due: nothing scans every run.
//! 5. With the lag on, when a run's end goes out to the run streams, its children (the runs
//!    its tasks spawned, table.rs invariant 4) that ended before it, and theirs, read as they
//!    ended over REST from then on: their entries still on their way come through at once, out
//!    of their turn; every other entry keeps its place. On the real engine a child's end
//!    reaches REST tens of ms after it, so once a parent that waited for its children has
//!    ended, REST lists them ended (the official Python suite's
//!    `durable_child_key_duplicate_child` and `durable_spawn_index_collision` read them right
//!    after the parent's result); here a child made within the last second or two would
//!    otherwise still be behind its creation's lag.
//! 6. A subscription of a run whose end went out before it is answered at the stream's next
//!    tick (`subscriptions.rs` invariant 1), by the first pass at or after it (the scheduler
//!    wakes for it, and virtual time may jump to it: `next_status_poll`); at once with the lag
//!    or the end hop off (the kindnesses: `hub/results.rs`).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use crate::hub::State;
use crate::store::model::{Entry, Run, Status, Task};
use crate::store::subscriptions::Ask;

/// How long after its creation run `id` comes through the pipeline under `lag`: `lag` to
/// `2 * lag`, the same for one id every time (invariant 1).
pub(crate) fn new_run_lag(id: &str, lag: Duration) -> Duration {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    lag + lag.mul_f64((h.finish() % 1_000) as f64 / 1_000.0)
}

impl State {
    /// The status REST reads of task `t` (invariants 1 and 3).
    pub(crate) fn readable_task_status(&self, t: &Task) -> Status {
        if self.switches.read_model_lost.contains(&t.id) {
            return Status::Running;
        }
        match self.switches.status_lag {
            Some(_) => t.readable,
            None => t.status(),
        }
    }

    /// The status REST reads of run `r` (invariants 1 and 3).
    pub(crate) fn readable_run_status(&self, r: &Run) -> Status {
        match self.switches.status_lag {
            Some(_) => r.readable,
            None => r.status,
        }
    }

    /// Whether the run streams were told that `r` ended (and it has not been replayed since).
    pub(crate) fn run_end_published(&self, r: &Run) -> bool {
        r.status.is_terminal() && r.end_published
    }

    /// Run `run_id` just ended: with the end hop off its end goes out now (invariant 2); with
    /// it on, the next pass queues it.
    pub(crate) fn end_to_publish(&mut self, run_id: &str) {
        if self.switches.end_hop.is_none()
            && let Some(replays) = self.runs.get(run_id).map(|r| r.replays)
        {
            self.send_end(run_id, replays);
        }
    }

    /// Ends a pass at `now` found: each goes to the run streams the end hop from now.
    fn queue_ends(&mut self, ended: Vec<(String, u32)>, now: Instant) {
        for (run, replays) in ended {
            match self.switches.end_hop {
                None => self.send_end(&run, replays),
                Some(hop) => {
                    let due = self
                        .published
                        .ends
                        .back()
                        .map_or(now + hop, |(last, _, _)| (now + hop).max(*last));
                    self.published.ends.push_back((due, run, replays));
                }
            }
        }
    }

    /// The run streams hear that run `run_id` ended, once per end: not if it was replayed
    /// since (`replays` is its count when it ended) or its end already went out.
    fn send_end(&mut self, run_id: &str, replays: u32) {
        let Some(r) = self.runs.get_unmarked(run_id) else {
            return;
        };
        if !r.status.is_terminal() || r.end_published || r.replays != replays {
            return;
        }
        r.end_published = true;
        let event = self.run_event(&self.runs[run_id]);
        self.subscriptions.run_ended(run_id, &event);
        self.publish_ended_children(run_id);
    }

    /// Run `run_id`'s end went out: its children that ended before it, and theirs, read as
    /// they are over REST now, their entries on their way taken out of the pipeline
    /// (invariant 5). Nothing to do with the lag off (REST reads the live state).
    fn publish_ended_children(&mut self, run_id: &str) {
        if self.switches.status_lag.is_none() {
            return;
        }
        let mut parents = vec![run_id.to_string()];
        while let Some(parent) = parents.pop() {
            let Some(p) = self.runs.get(&parent) else {
                continue;
            };
            let ended = p.finished_at;
            let children: Vec<String> = p
                .tasks
                .iter()
                .flat_map(|t| self.runs.children_of(t))
                .filter(|c| {
                    self.runs.get(c.as_str()).is_some_and(|c| {
                        c.status.is_terminal()
                            && match (c.finished_at, ended) {
                                (Some(child), Some(parent)) => child <= parent,
                                _ => true,
                            }
                    })
                })
                .cloned()
                .collect();
            for child in children {
                self.publish_now(&child);
                parents.push(child);
            }
        }
    }

    /// Run `run_id` and its tasks read as they are now over REST, and its entries on their way
    /// are dropped (they hold older states of it).
    fn publish_now(&mut self, run_id: &str) {
        self.published.queue.retain(|e| e.run != run_id);
        let Some(r) = self.runs.get_unmarked(run_id) else {
            return;
        };
        r.readable = r.status;
        r.in_pipeline = true;
        let tasks = r.tasks.clone();
        for tid in tasks {
            if let Some(t) = self.tasks.get_unmarked(&tid) {
                let status = t.status();
                t.publish(status);
            }
        }
    }

    /// The subscriptions whose stream's tick has come by `now` get the ends they wait for
    /// (invariant 6); a run replayed since it was asked for waits for its new end.
    fn answer_due_ticks(&mut self, now: Instant) {
        for (sub, run) in self.subscriptions.take_due_ticks(now) {
            let ended = self
                .runs
                .get(&run)
                .filter(|r| self.run_end_published(r))
                .map(|r| self.run_event(r));
            match ended {
                Some(ev) => self.subscriptions.send_run(sub, ev),
                None => self.subscriptions.want_run(sub, &run, Ask::Wait),
            }
        }
    }

    /// One pass of the pipeline at `now`: ends due go to the run streams, and so do the
    /// answers of the run streams' ticks due (invariant 6), new ends are queued,
    /// what changed since the last pass joins the pipeline as it is now, and what falls due
    /// comes through (invariants 1, 2 and 4). With the lag off
    /// everything comes through at once, so that turning the lag on later starts from the
    /// live state.
    pub(crate) fn publish_statuses(&mut self, now: Instant) {
        while self
            .published
            .ends
            .front()
            .is_some_and(|(due, _, _)| *due <= now)
        {
            if let Some((_, run, replays)) = self.published.ends.pop_front() {
                self.send_end(&run, replays);
            }
        }
        self.answer_due_ticks(now);
        // A run that ended and whose end has not gone out (invariant 2).
        let unsent = |r: &Run| {
            (r.status.is_terminal() && !r.end_published).then(|| (r.id.clone(), r.replays))
        };
        let mut ended = Vec::new();
        if self.switches.status_lag.is_none() && self.published.queue.is_empty() {
            // Lag off (the benchmarks' setting): reads are live, so the readable statuses are
            // only kept in step, in place, with no snapshot.
            self.tasks.take_touched(|t| t.publish(t.status()));
            self.runs.take_touched(|r| {
                r.readable = r.status;
                ended.extend(unsent(r));
            });
            self.queue_ends(ended, now);
            return;
        }
        let mut changed = HashSet::new();
        self.tasks.take_touched(|t| {
            changed.insert(t.run_id.clone());
        });
        self.runs.take_touched(|r| {
            changed.insert(r.id.clone());
            ended.extend(unsent(r));
        });
        self.queue_ends(ended, now);
        for id in changed {
            if let Some(entry) = self.entry(&id, now) {
                self.published.queue.push_back(entry);
            }
        }
        while self
            .published
            .queue
            .front()
            .is_some_and(|entry| entry.due <= now)
        {
            if let Some(entry) = self.published.queue.pop_front() {
                self.publish(entry);
            }
        }
    }

    /// Run `run_id` as it is, to come through the pipeline: a new run's own lag after `now`,
    /// a known one's the end hop after `now`, and never before the last entry (invariant 1).
    fn entry(&mut self, run_id: &str, now: Instant) -> Option<Entry> {
        let lag = self.switches.status_lag;
        let r = self.runs.get_unmarked(run_id)?;
        let due = match lag {
            Some(lag) if !r.in_pipeline => now + new_run_lag(run_id, lag),
            Some(_) => now + self.switches.end_hop.unwrap_or_default(),
            None => now,
        };
        r.in_pipeline = true;
        let due = self
            .published
            .queue
            .back()
            .map_or(due, |last| due.max(last.due));
        let r = &self.runs[run_id];
        let tasks = r
            .tasks
            .iter()
            .filter_map(|tid| self.tasks.get(tid))
            .map(|t| (t.id.clone(), t.status()))
            .collect();
        Some(Entry {
            due,
            run: run_id.to_string(),
            status: r.status,
            tasks,
        })
    }

    /// `entry` comes through the pipeline: REST reads its run and tasks as they were then
    /// (invariant 1).
    fn publish(&mut self, entry: Entry) {
        let Some(r) = self.runs.get_unmarked(&entry.run) else {
            return;
        };
        r.readable = entry.status;
        for (tid, status) in entry.tasks {
            if let Some(t) = self.tasks.get_unmarked(&tid) {
                t.publish(status);
            }
        }
    }

    /// When the pipeline next has something to do (the scheduler's next pass, and where virtual
    /// time may jump): its first entry, its first end or the first run stream tick that
    /// answers a run (invariant 6), whichever falls due first.
    pub(crate) fn next_status_poll(&self, now: Instant) -> Option<Instant> {
        let entry = self
            .switches
            .status_lag
            .and(self.published.queue.front())
            .map(|e| e.due);
        let end = self.published.ends.front().map(|(due, _, _)| *due);
        let tick = self.subscriptions.next_tick();
        entry
            .into_iter()
            .chain(end)
            .chain(tick)
            .filter(|due| *due > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc::UnboundedReceiver;
    use tokio::time::Instant;

    use super::new_run_lag;
    use crate::hub::State;
    use crate::store::model::Status;

    type Ends =
        UnboundedReceiver<Result<hatchet_runtime::protocol::WorkflowRunEvent, tonic::Status>>;

    const LAG: Duration = Duration::from_secs(1);

    /// An engine with the status lag `lag`, and its clock's start.
    fn engine(lag: Option<Duration>) -> (State, Instant) {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        st.switches.status_lag = lag;
        let t0 = st.clock.now();
        (st, t0)
    }

    /// A new one-task run a subscription waits for, after a pass at `now`: the run, its task,
    /// the subscription's receiver and when the run comes through.
    fn new_run(st: &mut State, now: Instant) -> (String, String, Ends, Instant) {
        let run = crate::hub::plain_run(st, "wf");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sub = st.subscriptions.open_runs(tx, now);
        st.subscriptions
            .want_run(sub, &run, crate::store::subscriptions::Ask::Wait);
        let tid = st.runs[&run].tasks[0].clone();
        st.publish_statuses(now);
        let due = now + new_run_lag(&run, LAG);
        (run, tid, rx, due)
    }

    /// Completes task `tid` and makes a pass at `now`.
    fn complete(st: &mut State, tid: &str, now: Instant) {
        st.complete_task(tid, "{}".into());
        st.publish_statuses(now);
    }

    /// The run id of the next end on `rx`, if one is there.
    fn end(rx: &mut Ends) -> Option<String> {
        rx.try_recv()
            .ok()
            .and_then(Result::ok)
            .map(|e| e.workflow_run_id)
    }

    #[test]
    fn a_run_s_own_lag_is_one_to_two_lags_and_fixed_by_its_id() {
        for i in 0..200 {
            let id = format!("run-{i}");
            let lag = new_run_lag(&id, LAG);
            assert!(lag >= LAG && lag < 2 * LAG, "{id}: {lag:?}");
            assert_eq!(new_run_lag(&id, LAG), lag, "the same draw for one id");
        }
        let spread: std::collections::HashSet<_> = (0..50)
            .map(|i| new_run_lag(&format!("r{i}"), LAG))
            .collect();
        assert!(spread.len() > 40, "the draws spread: {}", spread.len());
    }

    #[test]
    fn a_new_run_s_end_goes_out_the_end_hop_after_it_and_rest_reads_lag_until_it_comes_through() {
        let (mut st, t0) = engine(Some(LAG));
        let hop = crate::faults::END_HOP;
        let (run, tid, mut rx, due) = new_run(&mut st, t0);
        complete(&mut st, &tid, t0);
        assert_eq!(st.runs[&run].status(), Status::Completed, "live");
        assert_eq!(end(&mut rx), None, "not before the hop");
        assert_eq!(
            st.next_status_poll(t0),
            Some(t0 + hop),
            "virtual time may jump to it"
        );
        st.publish_statuses(t0 + hop - Duration::from_millis(1));
        assert_eq!(end(&mut rx), None, "not a moment early");
        st.publish_statuses(t0 + hop);
        assert_eq!(end(&mut rx), Some(run.clone()));
        assert!(st.run_end_published(&st.runs[&run]));
        // REST reads the run as created until it comes through.
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Queued);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Queued);
        assert_eq!(st.next_status_poll(t0 + hop), Some(due));
        st.publish_statuses(due);
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Completed);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
        st.publish_statuses(due + 3 * LAG);
        assert_eq!(end(&mut rx), None, "once");
        assert_eq!(st.next_status_poll(due + 3 * LAG), None, "nothing waits");
    }

    #[test]
    fn a_run_the_pipeline_has_passes_its_changes_after_the_end_hop() {
        let (mut st, t0) = engine(Some(LAG));
        let hop = crate::faults::END_HOP;
        let (run, tid, mut rx, due) = new_run(&mut st, t0);
        st.publish_statuses(due);
        assert_eq!(end(&mut rx), None, "it has not ended");
        let later = due + LAG;
        complete(&mut st, &tid, later);
        assert_eq!(end(&mut rx), None, "not before the hop");
        assert_eq!(st.next_status_poll(later), Some(later + hop));
        st.publish_statuses(later + hop);
        assert_eq!(end(&mut rx), Some(run), "after the hop");
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
    }

    #[test]
    fn a_change_waits_behind_a_newer_run_still_on_its_way_and_the_ends_do_not() {
        let (mut st, t0) = engine(Some(LAG));
        let hop = crate::faults::END_HOP;
        let (older, older_task, mut older_ends, due) = new_run(&mut st, t0);
        st.publish_statuses(due);
        let (newer, newer_task, mut newer_ends, newer_due) = new_run(&mut st, due);
        complete(&mut st, &newer_task, due);
        complete(&mut st, &older_task, due);
        st.publish_statuses(due + hop);
        assert_eq!(end(&mut newer_ends), Some(newer.clone()));
        assert_eq!(end(&mut older_ends), Some(older.clone()));
        assert_eq!(
            st.readable_run_status(&st.runs[&older]),
            Status::Queued,
            "REST: behind the newer run"
        );
        assert_eq!(st.next_status_poll(due + hop), Some(newer_due));
        st.publish_statuses(newer_due);
        assert_eq!(st.readable_run_status(&st.runs[&older]), Status::Completed);
        assert_eq!(st.readable_run_status(&st.runs[&newer]), Status::Completed);
    }

    #[test]
    fn an_entry_publishes_the_run_as_it_was_then_not_as_it_is() {
        let (mut st, t0) = engine(Some(LAG));
        let (older, older_task, _older_ends, older_due) = new_run(&mut st, t0);
        // A newer run, due after the older one's creation comes through (at least 2 s in).
        let (_newer, _newer_task, _newer_ends, newer_due) = new_run(&mut st, t0 + LAG);
        assert!(older_due < newer_due);
        complete(&mut st, &older_task, t0 + LAG);
        st.publish_statuses(older_due);
        assert_eq!(
            st.readable_run_status(&st.runs[&older]),
            Status::Queued,
            "its creation came through, as it was then"
        );
        assert_eq!(
            st.readable_task_status(&st.tasks[&older_task]),
            Status::Queued
        );
        st.publish_statuses(newer_due);
        assert_eq!(st.readable_run_status(&st.runs[&older]), Status::Completed);
    }

    #[test]
    fn an_end_from_before_a_replay_is_not_news_the_replay_s_end_is() {
        let (mut st, t0) = engine(Some(LAG));
        let hop = crate::faults::END_HOP;
        let (older, older_task, mut ends, due) = new_run(&mut st, t0);
        st.publish_statuses(due);
        complete(&mut st, &older_task, due);
        assert_eq!(
            st.next_status_poll(due),
            Some(due + hop),
            "the end is on its way"
        );
        // Replayed and ended again before the first end went out: that end is not news.
        st.replay_ids(std::slice::from_ref(&older));
        st.publish_statuses(due + hop);
        assert_eq!(
            end(&mut ends),
            None,
            "the end before the replay does not go out"
        );
        complete(&mut st, &older_task, due + hop);
        st.publish_statuses(due + 2 * hop);
        assert_eq!(end(&mut ends), Some(older), "the replay's end does");
        assert_eq!(end(&mut ends), None, "once");
    }

    /// A child run of the parent's task `parent_task`, after a pass at `now`: its id and task.
    fn child_run(st: &mut State, parent_task: &str, now: Instant) -> (String, String) {
        let opts = crate::store::model::TriggerOpts {
            parent_task: Some(parent_task.to_string()),
            ..Default::default()
        };
        let run = st
            .create_run("wf", serde_json::json!({}), Default::default(), opts)
            .expect("a child run");
        st.publish_statuses(now);
        let tid = st.runs[&run].tasks[0].clone();
        (run, tid)
    }

    #[test]
    fn a_parent_s_end_makes_the_children_that_ended_before_it_readable_and_nothing_else() {
        let (mut st, t0) = engine(Some(LAG));
        let hop = crate::faults::END_HOP;
        let ms = Duration::from_millis;
        let (parent, parent_task, mut ends, parent_due) = new_run(&mut st, t0);
        st.publish_statuses(parent_due);
        // Two children and an unrelated run, all new: REST holds them behind their lag.
        let t1 = parent_due;
        let (child, child_task) = child_run(&mut st, &parent_task, t1);
        let (running, running_task) = child_run(&mut st, &parent_task, t1);
        let (other, _other_task, _other_ends, _) = new_run(&mut st, t1);
        complete(&mut st, &child_task, t1 + ms(10));
        complete(&mut st, &parent_task, t1 + ms(20));
        st.publish_statuses(t1 + ms(20) + hop);
        assert_eq!(
            end(&mut ends),
            Some(parent.clone()),
            "the parent's end went out"
        );
        assert_eq!(
            st.readable_run_status(&st.runs[&child]),
            Status::Completed,
            "the child that ended before it reads ended, not as created"
        );
        assert_eq!(
            st.readable_task_status(&st.tasks[&child_task]),
            Status::Completed
        );
        assert_eq!(
            st.readable_run_status(&st.runs[&running]),
            Status::Queued,
            "a child still running keeps its turn"
        );
        assert_eq!(
            st.readable_task_status(&st.tasks[&running_task]),
            Status::Queued
        );
        assert_eq!(
            st.readable_run_status(&st.runs[&other]),
            Status::Queued,
            "another run keeps its turn"
        );
        assert_eq!(
            st.readable_run_status(&st.runs[&parent]),
            Status::Queued,
            "the parent's own end keeps its turn, behind the runs made before it ended"
        );
        st.publish_statuses(t1 + 3 * LAG);
        assert_eq!(st.readable_run_status(&st.runs[&parent]), Status::Completed);
        assert_eq!(st.readable_run_status(&st.runs[&child]), Status::Completed);
        assert!(st.published.queue.is_empty());
    }

    #[test]
    fn with_the_lag_and_the_hop_off_reads_are_live_and_an_end_goes_out_at_once() {
        let (mut st, t0) = engine(None);
        st.switches.end_hop = None;
        let (run, tid, mut rx, _) = new_run(&mut st, t0);
        st.complete_task(&tid, "{}".into());
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Completed);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
        assert_eq!(end(&mut rx), Some(run), "without a pass");
    }

    #[test]
    fn a_pass_reads_only_what_changed_and_leaves_no_marks() {
        let (mut st, t0) = engine(Some(LAG));
        let (run, tid, _rx, due) = new_run(&mut st, t0);
        st.complete_task(&tid, "{}".into());
        assert!(
            st.tasks.touched().any(|t| t.id == tid),
            "a changed task is marked"
        );
        assert!(
            st.runs.touched().any(|r| r.id == run),
            "a changed run is marked"
        );
        st.publish_statuses(t0);
        st.publish_statuses(due);
        assert_eq!(
            st.tasks.touched().count(),
            0,
            "the pass took every task mark"
        );
        assert_eq!(st.runs.touched().count(), 0, "the pass took every run mark");
        assert_eq!(st.published.queue.len(), 0, "nothing left on its way");
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
    }

    #[test]
    fn turned_on_after_running_off_the_lag_starts_from_the_live_state() {
        let (mut st, t0) = engine(None);
        let (run, tid, _rx, _) = new_run(&mut st, t0);
        complete(&mut st, &tid, t0);
        assert_eq!(
            st.tasks.touched().count(),
            0,
            "marks do not pile up with the lag off"
        );
        st.switches.status_lag = Some(LAG);
        assert_eq!(st.readable_run_status(&st.runs[&run]), Status::Completed);
        assert_eq!(st.readable_task_status(&st.tasks[&tid]), Status::Completed);
    }
}
