//! Runs and tasks over REST: one run's details and status, run and task lists with the
//! engine's filters and pages, a task's log lines.

use std::time::SystemTime;

use serde::Deserialize;
use serde_json::Value;

use super::{Api, Page, RunStatus, encode, query};
use crate::client::control::RunFilter;
use crate::error::{Error, Outcome};
use crate::protocol::rfc3339;

/// The page size of a list when the caller names none (the engine's own default).
const DEFAULT_LIMIT: usize = 50;
/// The most log lines one read returns (the engine refuses more).
const MAX_LOG_LIMIT: usize = 10_000;

/// A run or a task, as the REST lists show it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskSummary {
    /// Task run id (the run id on a run row).
    pub task_external_id: String,
    /// Run id.
    pub workflow_run_external_id: String,
    /// Status.
    pub status: RunStatus,
    /// Task (or run) name.
    #[serde(default)]
    pub display_name: String,
    /// Workflow name.
    #[serde(default)]
    pub workflow_name: Option<String>,
    /// Workflow id.
    #[serde(default)]
    pub workflow_id: String,
    /// Created at (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// Started at, once started (RFC 3339).
    #[serde(default)]
    pub started_at: Option<String>,
    /// Finished at, once finished (RFC 3339).
    #[serde(default)]
    pub finished_at: Option<String>,
    /// Input (`{}` unless the list was asked for payloads).
    #[serde(default)]
    pub input: Value,
    /// Output (`{}` unless the list was asked for payloads).
    #[serde(default)]
    pub output: Value,
    /// The error of a failed task (`""` otherwise).
    #[serde(default)]
    pub error_message: Option<String>,
    /// Additional metadata.
    #[serde(default)]
    pub additional_metadata: Option<Value>,
    /// The task that spawned this run, for a child.
    #[serde(default)]
    pub parent_task_external_id: Option<String>,
    /// Retry count.
    #[serde(default)]
    pub retry_count: i32,
    /// The action a worker runs it as (`workflow:task`), on a task row.
    #[serde(default)]
    pub action_id: Option<String>,
    /// The tasks of a run row (run lists only).
    #[serde(default)]
    pub children: Vec<TaskSummary>,
}

/// Which runs (or tasks) a list answers, and which page: a [`RunFilter`] plus what only a
/// list has. Built from [`RunQuery::new`]; one row per run unless [`RunQuery::tasks`].
#[derive(Debug, Clone)]
pub struct RunQuery {
    filter: RunFilter,
    tasks: bool,
    payloads: bool,
    worker_id: Option<String>,
    parent_task_run_id: Option<String>,
    triggering_event_id: Option<String>,
    limit: usize,
    offset: usize,
}

impl RunQuery {
    /// The runs `filter` selects, newest first, 50 to a page, without payloads.
    pub fn new(filter: RunFilter) -> Self {
        RunQuery {
            filter,
            tasks: false,
            payloads: false,
            worker_id: None,
            parent_task_run_id: None,
            triggering_event_id: None,
            limit: DEFAULT_LIMIT,
            offset: 0,
        }
    }

    /// One row per task instead of one per run (a run's status filter then selects tasks).
    pub fn tasks(mut self) -> Self {
        self.tasks = true;
        self
    }

    /// Rows carry inputs and outputs (`{}` without).
    pub fn with_payloads(mut self) -> Self {
        self.payloads = true;
        self
    }

    /// Only tasks that ran on this worker (a task list: needs [`RunQuery::tasks`]).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// Only the children of this task (a run list: not with [`RunQuery::tasks`]).
    pub fn parent_task_run_id(mut self, id: impl Into<String>) -> Self {
        self.parent_task_run_id = Some(id.into());
        self
    }

    /// Only runs this event started (by the event id a push answers).
    pub fn triggering_event_id(mut self, id: impl Into<String>) -> Self {
        self.triggering_event_id = Some(id.into());
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

    /// Refuses the combinations the engine would silently ignore.
    fn check(&self) -> Result<(), Error> {
        const OP: &str = "list runs";
        if self.worker_id.is_some() && !self.tasks {
            return Err(Error::invalid(
                OP,
                "worker_id selects tasks: call RunQuery::tasks() to list tasks, \
                 the engine ignores a worker in a run list",
            ));
        }
        if self.parent_task_run_id.is_some() && self.tasks {
            return Err(Error::invalid(
                OP,
                "parent_task_run_id selects runs: drop RunQuery::tasks(), \
                 the engine ignores a parent in a task list",
            ));
        }
        Ok(())
    }

    /// The query string the engine reads.
    fn to_query(&self) -> String {
        let f = &self.filter;
        let mut q: Vec<(&str, String)> = vec![
            ("since", rfc3339(f.since)),
            ("only_tasks", self.tasks.to_string()),
            ("include_payloads", self.payloads.to_string()),
            ("limit", self.limit.to_string()),
            ("offset", self.offset.to_string()),
        ];
        if let Some(u) = f.until {
            q.push(("until", rfc3339(u)));
        }
        q.extend(f.statuses.iter().map(|s| ("statuses", s.to_string())));
        q.extend(f.workflow_ids.iter().map(|w| ("workflow_ids", w.clone())));
        q.extend(
            f.metadata
                .iter()
                .map(|(k, v)| ("additional_metadata", format!("{k}:{v}"))),
        );
        if f.metadata.len() > 1 {
            // Every pair must hold, as in cancel and replay (the engine's default is any).
            q.push(("additional_metadata_operator", "AND".to_string()));
        }
        for (name, v) in [
            ("worker_id", &self.worker_id),
            ("parent_task_external_id", &self.parent_task_run_id),
            ("triggering_event_external_id", &self.triggering_event_id),
        ] {
            if let Some(v) = v {
                q.push((name, v.clone()));
            }
        }
        query(q)
    }
}

/// One log line of a task.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LogLine {
    /// When it was written (RFC 3339).
    pub created_at: String,
    /// The text.
    pub message: String,
    /// `DEBUG`, `INFO`, `WARN` or `ERROR`.
    #[serde(default)]
    pub level: String,
    /// The attempt that wrote it (1 for the first).
    #[serde(default)]
    pub attempt: Option<i32>,
    /// Metadata sent with it.
    #[serde(default)]
    pub metadata: Value,
}

/// One event of a task's attempts, as the engine keeps them (one per attempt and kind).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AttemptEvent {
    /// When it happened (RFC 3339).
    pub timestamp: String,
    /// What happened: `QUEUED`, `ASSIGNED`, `SENT_TO_WORKER`, `STARTED`, then how the attempt
    /// ended (`FINISHED`, `FAILED`, `TIMED_OUT`, `CANCELLED`) and what started the next one
    /// (`RETRYING`, `RETRIED_BY_USER`, `REASSIGNED`), among others the engine may add.
    pub event_type: String,
    /// The attempt it belongs to (1 for the first).
    pub attempt: i32,
    /// The engine's words about it (a timeout's, a retry's), empty when it has none.
    #[serde(default)]
    pub message: String,
    /// The handler's error, on a `FAILED` event.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub error_message: Option<String>,
    /// The worker the attempt ran on, on the events of an attempt that had one.
    #[serde(default)]
    pub worker_id: Option<String>,
}

fn empty_as_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    Ok(s.filter(|s| !s.is_empty()))
}

/// Events per read of a task's attempt events: the engine reads none without a limit.
const ATTEMPT_EVENTS: usize = 1_000;

/// Which log lines of a task a read answers: oldest first, up to 1,000 unless told.
#[derive(Debug, Clone)]
pub struct LogQuery {
    limit: usize,
    since: Option<SystemTime>,
    until: Option<SystemTime>,
    search: Option<String>,
    levels: Vec<String>,
    newest_first: bool,
    attempt: Option<u32>,
}

impl Default for LogQuery {
    fn default() -> Self {
        LogQuery {
            limit: 1_000,
            since: None,
            until: None,
            search: None,
            levels: Vec::new(),
            newest_first: false,
            attempt: None,
        }
    }
}

impl LogQuery {
    /// Up to 1,000 lines, oldest first.
    pub fn new() -> Self {
        LogQuery::default()
    }

    /// At most `limit` lines (1 to 10,000).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit.clamp(1, MAX_LOG_LIMIT);
        self
    }

    /// Only lines written after `t`.
    pub fn since(mut self, t: SystemTime) -> Self {
        self.since = Some(t);
        self
    }

    /// Only lines written before `t`.
    pub fn until(mut self, t: SystemTime) -> Self {
        self.until = Some(t);
        self
    }

    /// Only lines containing `text` (any case).
    pub fn search(mut self, text: impl Into<String>) -> Self {
        self.search = Some(text.into());
        self
    }

    /// Only lines at this level (call again to allow several).
    pub fn level(mut self, level: tracing::Level) -> Self {
        self.levels
            .push(crate::logs::engine_level(level).to_string());
        self
    }

    /// Newest first.
    pub fn newest_first(mut self) -> Self {
        self.newest_first = true;
        self
    }

    /// Only lines of this attempt (1 for the first).
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    fn to_query(&self) -> String {
        let mut q: Vec<(&str, String)> = vec![("limit", self.limit.to_string())];
        q.extend(self.since.map(|t| ("since", rfc3339(t))));
        q.extend(self.until.map(|t| ("until", rfc3339(t))));
        q.extend(self.search.clone().map(|s| ("search", s)));
        q.extend(self.levels.iter().map(|l| ("levels", l.clone())));
        if self.newest_first {
            q.push(("order_by_direction", "DESC".to_string()));
        }
        q.extend(self.attempt.map(|a| ("attempt", a.to_string())));
        query(q)
    }
}

impl Api {
    /// `GET /api/v1/stable/workflow-runs/{id}`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn run(&self, run_id: &str) -> Result<crate::client::view::RunView, Error> {
        const ROUTE: &str = "GET /api/v1/stable/workflow-runs/{id}";
        let v: Value = self
            .json(
                reqwest::Method::GET,
                ROUTE,
                &format!("/api/v1/stable/workflow-runs/{}", encode(run_id)),
                None,
            )
            .await?;
        crate::client::view::RunView::from_rest(&v).map_err(|why| {
            Error::new(Outcome::Rejected, ROUTE)
                .with_detail(format!(
                    "the engine's answer has an unexpected shape: {why}"
                ))
                .with_run_id(run_id)
        })
    }

    /// `GET /api/v1/stable/workflow-runs/{id}/status`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn run_status(&self, run_id: &str) -> Result<RunStatus, Error> {
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/stable/workflow-runs/{id}/status",
            &format!("/api/v1/stable/workflow-runs/{}/status", encode(run_id)),
            None,
        )
        .await
    }

    /// One page of runs (or tasks) the query selects, newest first. Refuses, before sending,
    /// a filter the engine would ignore (a worker in a run list, a parent in a task list).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_runs(&self, q: &RunQuery) -> Result<Page<TaskSummary>, Error> {
        q.check()?;
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/stable/tenants/{t}/workflow-runs",
            &format!(
                "/api/v1/stable/tenants/{}/workflow-runs?{}",
                self.tenant(),
                q.to_query()
            ),
            None,
        )
        .await
    }

    /// Asks the engine to run an evicted durable task again: its new invocation replays its
    /// durable log (what it had done, the waits that completed meanwhile). The engine answers
    /// the same for a task that is not evicted, and does nothing with it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: restoring twice is restoring once (the second finds it queued).
    pub async fn restore_task(&self, task_run_id: &str) -> Result<(), Error> {
        self.checked(
            reqwest::Method::POST,
            "POST /api/v1/stable/tasks/{task}/restore",
            &format!("/api/v1/stable/tasks/{}/restore", encode(task_run_id)),
            None,
        )
        .await
        .map(drop)
    }

    /// Runs a durable task again from node `from_node` of its durable log's branch `branch` (the
    /// official SDKs' `reset_durable_task`): the engine makes a new branch of the log there, and
    /// the task's next run replays what it did before that node (sleeps, events, memos and
    /// children answer from the log) and does the rest again. Nodes count a task's durable
    /// operations from 1; the first run of a task is branch 1. Answers the new branch's id, to
    /// branch from again.
    ///
    /// # Cancel safety
    ///
    /// Not idempotent (every call makes a branch), so a call that may have reached the engine is
    /// not retried: on an error whose outcome says it may have been applied, read the run before
    /// calling again.
    pub async fn reset_durable_task(
        &self,
        task_run_id: &str,
        from_node: i64,
        branch: i64,
    ) -> Result<i64, Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Branched {
            branch_id: i64,
        }
        let b: Branched = self
            .json(
                reqwest::Method::POST,
                "POST /api/v1/stable/tenants/{t}/durable-tasks/branch",
                &format!(
                    "/api/v1/stable/tenants/{}/durable-tasks/branch",
                    self.tenant()
                ),
                Some(serde_json::json!({
                    "taskExternalId": task_run_id,
                    "nodeId": from_node,
                    "branchId": branch,
                })),
            )
            .await?;
        Ok(b.branch_id)
    }

    /// A task's events, every attempt's, newest first (by its task run id, not its run's id):
    /// when each attempt was queued, started and how it ended, with the handler's error on a
    /// failure. The engine writes them as the task goes, shortly after the task's status.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn task_events(&self, task_run_id: &str) -> Result<Vec<AttemptEvent>, Error> {
        let p: Page<AttemptEvent> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/stable/tasks/{task}/task-events",
                &format!(
                    "/api/v1/stable/tasks/{}/task-events?limit={ATTEMPT_EVENTS}",
                    encode(task_run_id)
                ),
                None,
            )
            .await?;
        Ok(p.rows)
    }

    /// A task's log lines (by its task run id, not its run's id).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn task_logs(&self, task_run_id: &str, q: &LogQuery) -> Result<Vec<LogLine>, Error> {
        let p: Page<LogLine> = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/stable/tasks/{task}/logs",
                &format!(
                    "/api/v1/stable/tasks/{}/logs?{}",
                    encode(task_run_id),
                    q.to_query()
                ),
                None,
            )
            .await?;
        Ok(p.rows)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn a_run_query_names_every_filter_once() {
        let since = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let q = RunQuery::new(
            RunFilter::since(since)
                .status(RunStatus::Failed)
                .workflow_id("w1")
                .metadata("k", "a:b")
                .metadata("j", "x"),
        )
        .tasks()
        .worker_id("wk")
        .limit(0)
        .next_page()
        .to_query();
        assert_eq!(
            q,
            "since=2023-11-14T22%3A13%3A20Z&only_tasks=true&include_payloads=false&limit=1\
             &offset=1&statuses=FAILED&workflow_ids=w1&additional_metadata=k%3Aa%3Ab\
             &additional_metadata=j%3Ax&additional_metadata_operator=AND&worker_id=wk"
        );
    }

    #[test]
    fn filters_the_engine_would_ignore_are_refused() {
        let f = RunFilter::since(UNIX_EPOCH);
        let e = RunQuery::new(f.clone()).worker_id("w").check().unwrap_err();
        assert_eq!(e.outcome(), Outcome::Invalid);
        assert!(e.to_string().contains("RunQuery::tasks()"), "{e}");
        let e = RunQuery::new(f.clone())
            .tasks()
            .parent_task_run_id("p")
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("parent"), "{e}");
        assert!(
            RunQuery::new(f.clone())
                .tasks()
                .worker_id("w")
                .check()
                .is_ok()
        );
        assert!(RunQuery::new(f).parent_task_run_id("p").check().is_ok());
    }

    #[test]
    fn a_log_query_defaults_to_a_thousand_oldest_first() {
        assert_eq!(LogQuery::new().to_query(), "limit=1000");
        let q = LogQuery::new()
            .limit(50_000)
            .search("disk full")
            .level(tracing::Level::WARN)
            .newest_first()
            .attempt(2)
            .to_query();
        assert_eq!(
            q,
            "limit=10000&search=disk%20full&levels=WARN&order_by_direction=DESC&attempt=2"
        );
    }
}
