//! Run control: cancel and replay runs by id or by a filter (`v1.AdminService/CancelTasks` and
//! `ReplayTasks`), and what a waiter sees when its run was cancelled.
//!
//! # Invariants
//!
//! 1. Ids and a filter are never sent together (the engine refuses it); an empty id list sends
//!    nothing and answers empty.
//! 2. A cancel is an idempotent write and is retried like one; a replay is a write (a lost
//!    answer is `MaybeExecuted`, never a second replay behind the caller's back).
//! 3. A waiter whose run finished with errors asks the engine for the run's status once: a
//!    cancelled run resolves to [`Outcome::RunCancelled`], a failed one stays
//!    [`Outcome::RunFailed`], and one whose details read COMPLETED resolves to the outputs its
//!    details hold. That last is the real engine's answer when a cancel could not reach the
//!    task's worker (the task had released its slot) and the task finished anyway: its run
//!    stream reports the cancel as an error, then the late completion is what it records.
//! 4. A replay by ids returns once the engine shows it taken. The real engine only queues a
//!    replay for its task controller and answers 200 ms later; until the controller applies it,
//!    every read (GetRunDetails, the run stream's tick) shows the run's old end, which a wait
//!    started right after the replay would take for the new one. So each run given that read
//!    ended before the replay, and has a task the engine answered replayed, is read again until
//!    it reads otherwise ([`replay_shown`]), for at most [`REPLAY_SHOWN_WITHIN`]. The read
//!    before the replay is bounded the same way, and covers the first [`REPLAY_WAITED_MAX`]
//!    ids; what a run read is kept as an [`EndSeen`] digest, not its payloads. A replay by
//!    filter names no runs, and is not waited for.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, SystemTime};

use super::api::RunStatus;
use super::{ClientCore, RunHandle};
use crate::error::{Error, Outcome};
use crate::protocol::{self as proto, v1};

/// How long a waiter spends asking whether a finished-with-errors run was cancelled.
const STATUS_CHECK_DEADLINE: Duration = Duration::from_secs(5);

/// How long a replay by ids waits for the engine to show it taken (invariant 4).
pub(crate) const REPLAY_SHOWN_WITHIN: Duration = Duration::from_secs(5);
/// How often a replayed run that does not show its replay yet is read again.
const REPLAY_READ_EVERY: Duration = Duration::from_millis(100);
/// Runs read at once around a replay.
const REPLAY_READS_AT_ONCE: usize = 8;
/// Runs of one replay by ids whose replay is waited for (invariant 4): a replay of more ids
/// than this waits for the first ones only, so its cost stays bounded.
pub(crate) const REPLAY_WAITED_MAX: usize = 100;

/// What a read of a run showed of its end, as a digest (invariant 4): the run's status and
/// whether it is done, each task's id and status, and a hash of its output and error. Two reads
/// of one end digest alike; a new end (another attempt's output or error) digests otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EndSeen {
    done: bool,
    status: i32,
    tasks: Vec<(String, i32, u64)>,
}

impl EndSeen {
    /// The digest of one read.
    pub(crate) fn of(d: &v1::GetRunDetailsResponse) -> Self {
        let mut tasks: Vec<(String, i32, u64)> = d
            .task_runs
            .values()
            .map(|t| {
                let mut h = DefaultHasher::new();
                t.output.hash(&mut h);
                t.error.hash(&mut h);
                (t.external_id.clone(), t.status, h.finish())
            })
            .collect();
        tasks.sort_unstable();
        EndSeen {
            done: d.done,
            status: d.status,
            tasks,
        }
    }

    /// Whether the run has a task among `replayed`.
    fn has_task_in(&self, replayed: &HashSet<&str>) -> bool {
        self.tasks
            .iter()
            .any(|(id, ..)| replayed.contains(id.as_str()))
    }
}

/// Whether a run read after its replay shows the replay taken (a pure rule, invariant 4): it no
/// longer reads done, or it reads otherwise than it did before the replay (a replay that ran
/// to a new end between two reads).
pub(crate) fn replay_shown(before: &EndSeen, after: &EndSeen) -> bool {
    !after.done || after != before
}

/// Runs selected by creation time, status, workflow and metadata (all given criteria must
/// hold). Used by [`crate::runtime::RuntimeHandle::cancel_where`] and
/// [`crate::runtime::RuntimeHandle::replay_where`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunFilter {
    /// Created at or after.
    pub(crate) since: SystemTime,
    /// Created at or before.
    pub(crate) until: Option<SystemTime>,
    /// Any of these statuses (all when empty).
    pub(crate) statuses: Vec<RunStatus>,
    /// Any of these workflow ids (all when empty).
    pub(crate) workflow_ids: Vec<String>,
    /// Every one of these additional-metadata pairs.
    pub(crate) metadata: Vec<(String, String)>,
}

impl RunFilter {
    /// Runs created at or after `since`.
    pub fn since(since: SystemTime) -> Self {
        RunFilter {
            since,
            until: None,
            statuses: Vec::new(),
            workflow_ids: Vec::new(),
            metadata: Vec::new(),
        }
    }

    /// Only runs created at or before `until`.
    pub fn until(mut self, until: SystemTime) -> Self {
        self.until = Some(until);
        self
    }

    /// Only runs with this status (call again to allow several).
    pub fn status(mut self, status: RunStatus) -> Self {
        self.statuses.push(status);
        self
    }

    /// Only runs of this workflow id (call again to allow several).
    pub fn workflow_id(mut self, id: impl Into<String>) -> Self {
        self.workflow_ids.push(id.into());
        self
    }

    /// Only runs whose additional metadata has `key` = `value`.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// The wire form.
    pub(crate) fn to_proto(&self) -> v1::TasksFilter {
        v1::TasksFilter {
            statuses: self.statuses.iter().map(|s| s.to_string()).collect(),
            since: Some(proto::timestamp(self.since)),
            until: self.until.map(proto::timestamp),
            workflow_ids: self.workflow_ids.clone(),
            additional_metadata: self
                .metadata
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect(),
        }
    }
}

/// What to cancel or replay.
#[derive(Debug, Clone)]
pub(crate) enum Selection {
    Ids(Vec<String>),
    Filter(RunFilter),
}

impl Selection {
    fn split(self) -> (Vec<String>, Option<v1::TasksFilter>) {
        match self {
            Selection::Ids(ids) => (ids, None),
            Selection::Filter(f) => (Vec::new(), Some(f.to_proto())),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Selection::Ids(ids) if ids.is_empty())
    }
}

impl ClientCore {
    /// CancelTasks: answers the ids the engine reports (the run ids given, or found).
    pub(crate) async fn cancel(&self, what: Selection) -> Result<Vec<String>, Error> {
        const PATH: &str = "/v1.AdminService/CancelTasks";
        if what.is_empty() {
            return Ok(Vec::new());
        }
        let (external_ids, filter) = what.split();
        let req = v1::CancelTasksRequest {
            external_ids,
            filter,
        };
        let client = self.conn.admin();
        self.conn
            .call(PATH, &client, &req, |mut c, r| async move {
                c.cancel_tasks(r).await
            })
            .await
            .map(|r| r.cancelled_tasks)
    }

    /// ReplayTasks: answers the task ids the engine replays.
    pub(crate) async fn replay(&self, what: Selection) -> Result<Vec<String>, Error> {
        const PATH: &str = "/v1.AdminService/ReplayTasks";
        if what.is_empty() {
            return Ok(Vec::new());
        }
        let (external_ids, filter) = what.split();
        let waited = &external_ids[..external_ids.len().min(REPLAY_WAITED_MAX)];
        let ended = tokio::time::timeout(REPLAY_SHOWN_WITHIN, self.read_ended(waited))
            .await
            .unwrap_or_default();
        let req = v1::ReplayTasksRequest {
            external_ids,
            filter,
        };
        let client = self.conn.admin();
        let replayed = self
            .conn
            .call(PATH, &client, &req, |mut c, r| async move {
                c.replay_tasks(r).await
            })
            .await
            .map(|r| r.replayed_tasks)?;
        let ids: HashSet<&str> = replayed.iter().map(String::as_str).collect();
        let ended: Vec<_> = ended
            .into_iter()
            .filter(|(_, seen)| seen.has_task_in(&ids))
            .collect();
        if !ended.is_empty() {
            self.until_replays_shown(ended).await;
        }
        Ok(replayed)
    }

    /// The runs among `ids` that read ended, with what their reads showed (invariant 4); an id
    /// that is not a run's, or that cannot be read, is left out.
    async fn read_ended(&self, ids: &[String]) -> Vec<(String, EndSeen)> {
        use futures::StreamExt as _;
        futures::stream::iter(ids.iter().cloned())
            .map(|id| async move {
                let read = self
                    .conn
                    .run_details(&id, Some(STATUS_CHECK_DEADLINE))
                    .await;
                read.ok().filter(|d| d.done).map(|d| (id, EndSeen::of(&d)))
            })
            .buffer_unordered(REPLAY_READS_AT_ONCE)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    /// Reads each replayed run until it shows its replay taken, within [`REPLAY_SHOWN_WITHIN`]
    /// (invariant 4).
    async fn until_replays_shown(&self, ended: Vec<(String, EndSeen)>) {
        use futures::StreamExt as _;
        let settle = futures::stream::iter(ended)
            .map(|(id, before)| async move {
                loop {
                    match self
                        .conn
                        .run_details(&id, Some(STATUS_CHECK_DEADLINE))
                        .await
                    {
                        Ok(after) if replay_shown(&before, &EndSeen::of(&after)) => return,
                        Err(_) => return, // the wait's own reads decide from here
                        Ok(_) => tokio::time::sleep(REPLAY_READ_EVERY).await,
                    }
                }
            })
            .buffer_unordered(REPLAY_READS_AT_ONCE)
            .collect::<Vec<()>>();
        if tokio::time::timeout(REPLAY_SHOWN_WITHIN, settle)
            .await
            .is_err()
        {
            tracing::debug!(
                "a replayed run still reads its old end {REPLAY_SHOWN_WITHIN:?} after the replay (a replay that ended as before, or a slow controller)"
            );
        }
    }

    /// Invariant 3: turns a run failure into a cancellation when the engine says so, or into
    /// [`Classified::Completed`] when its details say the run completed after all.
    pub(crate) async fn classify_run_error(&self, run_id: &str, e: Error) -> Classified {
        if e.outcome() != Outcome::RunFailed {
            return Classified::Error(e);
        }
        match self
            .conn
            .run_details(run_id, Some(STATUS_CHECK_DEADLINE))
            .await
        {
            Ok(d) if d.status == v1::RunStatus::Cancelled as i32 => Classified::Error(
                e.with_outcome(Outcome::RunCancelled)
                    .with_detail("the run was cancelled"),
            ),
            Ok(d) if d.status == v1::RunStatus::Completed as i32 => Classified::Completed(e),
            _ => Classified::Error(e),
        }
    }
}

/// What a run-stream failure turned out to be (invariant 3).
pub(crate) enum Classified {
    /// The error to report.
    Error(Error),
    /// The run's details read COMPLETED: its outputs are there (the stream's error is kept for
    /// when they cannot be read).
    Completed(Error),
}

impl RunHandle {
    /// Cancels this run: every task not yet finished is cancelled (a running one gets a
    /// cancellation on its worker), and waiters resolve with [`Outcome::RunCancelled`].
    /// Cancelling a finished run changes nothing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped cancel may or may not have happened; cancelling again is
    /// harmless.
    pub async fn cancel(&self) -> Result<(), Error> {
        self.client
            .cancel(Selection::Ids(vec![self.run_id.clone()]))
            .await
            .map(|_| ())
    }

    /// Replays this run: its failed or cancelled tasks (and everything downstream of them)
    /// run again as a new attempt with their full retries, on the input the run was created
    /// with. Running tasks are left alone. Returns the task ids replayed, once the engine shows
    /// the replay taken (at most 5 s), so a wait with [`RunHandle::result`] started after it
    /// gets the new outcome, never the old one.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped replay may have happened (it is a write).
    pub async fn replay(&self) -> Result<Vec<String>, Error> {
        self.client
            .replay(Selection::Ids(vec![self.run_id.clone()]))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(status: v1::RunStatus, done: bool, error: Option<&str>) -> v1::GetRunDetailsResponse {
        let task = |id: &str| v1::TaskRunDetail {
            external_id: id.into(),
            status: status as i32,
            error: error.map(Into::into),
            ..Default::default()
        };
        v1::GetRunDetailsResponse {
            status: status as i32,
            done,
            task_runs: [("a".to_string(), task("t1")), ("b".to_string(), task("t2"))]
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_replay_shows_once_the_run_reads_unended_or_otherwise_than_before() {
        use v1::RunStatus::*;
        let ended = EndSeen::of(&read(Failed, true, Some("boom")));
        assert!(
            !replay_shown(&ended, &EndSeen::of(&read(Failed, true, Some("boom")))),
            "the old end, read again (its tasks in another order of the map)"
        );
        assert!(replay_shown(
            &ended,
            &EndSeen::of(&read(Queued, false, None))
        ));
        assert!(
            replay_shown(&ended, &EndSeen::of(&read(Completed, true, None))),
            "a new end"
        );
        assert!(
            replay_shown(
                &ended,
                &EndSeen::of(&read(Failed, true, Some("boom again")))
            ),
            "a new failure of the same tasks"
        );
    }

    #[test]
    fn a_run_is_waited_for_only_when_one_of_its_tasks_was_replayed() {
        let seen = EndSeen::of(&read(v1::RunStatus::Failed, true, None));
        assert!(seen.has_task_in(&["t2", "x"].into_iter().collect()));
        assert!(!seen.has_task_in(&["x"].into_iter().collect()));
    }

    #[test]
    fn filters_reach_the_wire_with_the_engine_spellings() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let f = RunFilter::since(t)
            .until(t + Duration::from_secs(60))
            .status(RunStatus::Failed)
            .status(RunStatus::Cancelled)
            .workflow_id("wf")
            .metadata("customer", "acme:eu")
            .to_proto();
        assert_eq!(f.statuses, ["FAILED", "CANCELLED"]);
        assert_eq!(f.since.map(|s| s.seconds), Some(1_700_000_000));
        assert_eq!(f.until.map(|s| s.seconds), Some(1_700_000_060));
        assert_eq!(f.workflow_ids, ["wf"]);
        assert_eq!(f.additional_metadata, ["customer:acme:eu"]);
    }

    #[test]
    fn ids_and_filters_never_travel_together() {
        let (ids, filter) = Selection::Ids(vec!["a".into()]).split();
        assert_eq!((ids.len(), filter.is_none()), (1, true));
        let (ids, filter) = Selection::Filter(RunFilter::since(SystemTime::now())).split();
        assert_eq!((ids.len(), filter.is_some()), (0, true));
        assert!(Selection::Ids(Vec::new()).is_empty());
    }
}
