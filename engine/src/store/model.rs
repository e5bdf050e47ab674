//! The development engine's in-memory records. Plain data: the rules that change them live with
//! the rooms of their concepts (`sched`, `dag`, `time`, `durable`) and the hub (`hub/`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::time::Instant;

use hatchet_runtime::protocol as proto;

/// Status of a task or a run, as the REST API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Waiting for its parents (tasks only; shown as QUEUED).
    #[serde(rename = "QUEUED")]
    Pending,
    /// Waiting for a worker.
    Queued,
    /// Assigned to a worker.
    Running,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl Status {
    /// Whether nothing can change it any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// The `v1.RunStatus` number.
    pub fn v1(self) -> i32 {
        use hatchet_runtime::protocol::v1::RunStatus as R;
        (match self {
            Status::Pending | Status::Queued => R::Queued,
            Status::Running => R::Running,
            Status::Completed => R::Completed,
            Status::Failed => R::Failed,
            Status::Cancelled => R::Cancelled,
        }) as i32
    }

    /// The older `WorkflowRunStatus` spelling (scheduled runs' REST rows).
    pub fn workflow_run(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Queued => "QUEUED",
            Status::Running => "RUNNING",
            Status::Completed => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::Cancelled => "CANCELLED",
        }
    }

    /// The REST spelling.
    pub fn rest(self) -> &'static str {
        match self {
            Status::Pending | Status::Queued => "QUEUED",
            Status::Running => "RUNNING",
            Status::Completed => "COMPLETED",
            Status::Failed => "FAILED",
            Status::Cancelled => "CANCELLED",
        }
    }
}

/// A task of a workflow definition.
#[derive(Debug, Clone)]
pub(crate) struct TaskDef {
    pub readable_id: String,
    pub action: String,
    pub parents: Vec<String>,
    pub timeout: Duration,
    /// The timeout as registered (`"3s"`): the real engine's timeout message quotes it.
    pub timeout_text: String,
    pub retries: i32,
    pub backoff_factor: Option<f32>,
    pub backoff_max_seconds: Option<i32>,
    pub is_durable: bool,
    pub slot_requests: HashMap<String, i32>,
    pub rate_limits: Vec<proto::v1::CreateTaskRateLimit>,
    /// The workflow's `on_failure` task: queued when another task fails for good, skipped
    /// (completed with `{"skipped": true}`) when the others all completed or were cancelled.
    pub on_failure: bool,
    /// Desired worker labels (`CreateTaskOpts.worker_labels`).
    pub worker_labels: Vec<crate::sched::placement::Desired>,
    /// Its `wait_for` / `skip_if` / `cancel_if` conditions.
    pub conditions: Option<proto::v1::TaskConditions>,
    /// How it batches its attempts, for a batch task (see `sched/batches.rs`).
    pub batch: Option<crate::sched::batches::BatchRule>,
}

/// A workflow: the latest version registered under its name.
#[derive(Debug, Clone)]
pub(crate) struct Workflow {
    pub id: String,
    pub version_id: String,
    pub name: String,
    /// As registered (the API shows it; the version label the request carries is not kept,
    /// as on the real engine, whose versions read `""`).
    pub description: String,
    pub tasks: Vec<TaskDef>,
    pub event_triggers: Vec<String>,
    pub idempotency: Option<proto::v1::IdempotencyConfig>,
    pub concurrency: Vec<crate::sched::concurrency::Limit>,
    /// Priority of a run that names none (1–3).
    pub default_priority: Option<i32>,
    /// Its sticky strategy (copied onto every task of its runs).
    pub sticky: crate::sched::placement::Sticky,
    pub created_at: SystemTime,
    /// Its definition as the real engine shows it (`workflowConfig`, see `definition.rs`).
    pub config: serde_json::Value,
    /// Deleted over REST: not listed, not triggered, its name free to register again (a new
    /// workflow then, with a new id); its runs finish and stay readable.
    pub deleted: bool,
}

/// One task of one run.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub id: String,
    pub run_id: String,
    pub readable_id: String,
    pub action: String,
    /// Changed only by the transitions of `impl Task` below (read it with [`Task::status`]).
    pub(in crate::store) status: Status,
    /// The status REST reads: `status` as of the status pipeline's last entry for its run (see
    /// `Switches::status_lag`; read it with `State::readable_task_status`).
    pub(in crate::store) readable: Status,
    /// The current attempt's retry count (the attempt key is `(id, retry_count)`).
    pub retry_count: i32,
    /// User-error retries used (internal requeues do not count).
    pub user_retries_used: i32,
    pub retries: i32,
    pub timeout: Duration,
    /// The timeout as registered (see [`TaskDef::timeout_text`]).
    pub timeout_text: String,
    pub parents: Vec<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub worker_id: Option<String>,
    pub slot_type: String,
    pub slot_held: bool,
    /// The listener session its current assignment went out on, and whether the worker has
    /// answered it (STARTED or ACKNOWLEDGED) since.
    pub session: Option<u64>,
    pub answered: bool,
    pub deadline: Option<Instant>,
    pub not_before: Option<Instant>,
    pub is_durable: bool,
    pub invocation_count: i32,
    /// Queued again as the same attempt and invocation (see `offer_again`).
    pub reoffered: bool,
    /// The current attempt called `ReleaseSlot`, whose statement clears the task's worker on the
    /// real engine (`v1_task_runtime.worker_id = NULL`): from then on a cancel or a timeout of
    /// the attempt sends its worker nothing (a cancellation is routed by that column) and a
    /// silent worker's reassignment does not find it (that query joins on it). Its slot is
    /// still counted (see `Switches::release_slot_frees`). Cleared by the next assignment.
    pub unlinked: bool,
    pub evicted: bool,
    pub created_at: SystemTime,
    /// When a DAG child's parents released it (the real engine creates the child's task
    /// then, so its time queued starts there); `None` for a task queued at its creation.
    pub released_at: Option<SystemTime>,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub backoff_factor: Option<f32>,
    pub backoff_max_seconds: Option<i32>,
    /// Children spawned with a child index or key: key → child run id.
    pub children: HashMap<String, String>,
    pub logs: Vec<LogLine>,
    /// Parked with its held run (see `concurrency.rs`).
    pub held: bool,
    /// Rate-limit keys and units each attempt takes, and how to create a dynamic key.
    pub rate_limits: Vec<crate::sched::rate_limits::RateLimitUse>,
    /// Its run's priority (its queue lane).
    pub priority: i32,
    /// The run's `on_failure` task.
    pub on_failure: bool,
    /// Which worker it wants: sticky target and desired labels.
    pub wish: crate::sched::placement::Wish,
    /// Its conditions as registered (a replay rebuilds the matcher from them).
    pub conditions: Option<proto::v1::TaskConditions>,
    /// How its attempts are batched, for a batch task.
    pub batch: Option<crate::sched::batches::BatchRule>,
    /// The batch its current attempt runs in.
    pub batch_id: Option<String>,
    /// What decides when it is queued, skipped or cancelled (a task with parents or
    /// conditions); see `matches.rs`.
    pub matcher: Option<crate::dag::matches::Matcher>,
    /// The satisfied sleep and event conditions' data (`action_payload.triggers`).
    pub triggers: serde_json::Map<String, serde_json::Value>,
    /// Attempts followed by another, oldest first (their spans in the run's trace).
    pub past_attempts: Vec<PastAttempt>,
    /// The message of the current attempt's end when the engine ended it (a timeout's, the
    /// reassignment limit's), as the real engine's event carries it: its span's status message.
    /// `None` for an end the worker reported, or none yet.
    pub end_message: Option<String>,
}

/// An attempt that ended and was followed by another (a retry, an internal requeue, a
/// replay): what its spans in the run's trace are made from.
#[derive(Debug, Clone)]
pub(crate) struct PastAttempt {
    pub retry_count: i32,
    /// When it went to a worker (`None` if it never did).
    pub started_at: Option<SystemTime>,
    pub ended_at: SystemTime,
    pub end: PastEnd,
    /// The engine's message for its end (see `Task::end_message`).
    pub end_message: Option<String>,
    /// Its error, when it failed.
    pub error: Option<String>,
    /// What started the next attempt.
    pub next: NextAttempt,
}

/// Why an attempt was followed by another (the event the real engine writes for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextAttempt {
    /// A retry of a failure (`RETRYING`, "This is retry number N."), the Nth retry.
    Retry(i32),
    /// A replay (`RETRIED_BY_USER`).
    Replay,
    /// Taken back from a worker that went away (`REASSIGNED`).
    Reassign,
}

/// How a past attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PastEnd {
    Finished,
    Failed,
    Cancelled,
    /// Taken back from its worker for another (no end of its own: the real engine reports
    /// the reassignment, not a terminal event).
    Requeued,
}

/// The task's life, one transition per cause: the only writers of its status (the engine's
/// rules decide which applies; each transition sets what belongs with the status it enters).
impl Task {
    /// A new task of `def` in run `run_id`, starting at `status` (Queued, or Pending behind its
    /// parents or conditions), nothing run yet: the only place a task's status starts. Where
    /// it may run (`slot_type`, `wish`), its rate limits and its priority are its creator's to
    /// set.
    pub(crate) fn created(
        def: &TaskDef,
        id: String,
        run_id: String,
        status: Status,
        now: SystemTime,
    ) -> Task {
        Task {
            id,
            run_id,
            readable_id: def.readable_id.clone(),
            action: def.action.clone(),
            status,
            readable: status,
            retry_count: 0,
            user_retries_used: 0,
            retries: def.retries,
            timeout: def.timeout,
            timeout_text: def.timeout_text.clone(),
            parents: def.parents.clone(),
            output: None,
            error: None,
            worker_id: None,
            slot_type: String::new(),
            slot_held: false,
            session: None,
            answered: false,
            deadline: None,
            not_before: None,
            is_durable: def.is_durable,
            invocation_count: 0,
            reoffered: false,
            unlinked: false,
            evicted: false,
            created_at: now,
            released_at: None,
            started_at: None,
            finished_at: None,
            backoff_factor: def.backoff_factor,
            backoff_max_seconds: def.backoff_max_seconds,
            children: HashMap::new(),
            logs: Vec::new(),
            held: false,
            rate_limits: Vec::new(),
            priority: 0,
            on_failure: def.on_failure,
            wish: Default::default(),
            conditions: def.conditions.clone(),
            batch: def.batch.clone(),
            batch_id: None,
            matcher: None,
            triggers: Default::default(),
            past_attempts: Vec::new(),
            end_message: None,
        }
    }

    /// Its status.
    pub(crate) fn status(&self) -> Status {
        self.status
    }

    /// The status pipeline has it as it was: REST reads `status` from now on.
    pub(in crate::store) fn publish(&mut self, status: Status) {
        self.readable = status;
    }

    /// Offered to `worker` on `session`: it runs there, holding a slot of `slot_type` (or none,
    /// a batch member's).
    pub(crate) fn assign(
        &mut self,
        worker: String,
        session: u64,
        slot_type: String,
        slot_held: bool,
    ) {
        self.status = Status::Running;
        self.worker_id = Some(worker);
        self.unlinked = false;
        self.session = Some(session);
        self.answered = false;
        self.slot_type = slot_type;
        self.slot_held = slot_held;
    }

    /// Its conditions (or its parents) let it run: queued, with what triggered it.
    pub(crate) fn release(
        &mut self,
        now: SystemTime,
        triggers: serde_json::Map<String, serde_json::Value>,
    ) {
        self.status = Status::Queued;
        self.released_at = Some(now);
        self.triggers = triggers;
    }

    /// An `on_failure` task, or one its parents were waiting to queue: queued.
    pub(crate) fn queue(&mut self) {
        self.status = Status::Queued;
    }

    /// Skipped (by its conditions, or left pending when its run settled): completed with
    /// `output`, the engine's skipped marker.
    pub(crate) fn skip(&mut self, now: SystemTime, output: &str) {
        self.status = Status::Completed;
        self.output = Some(output.to_string());
        self.finished_at = Some(now);
    }

    /// Cancelled by its conditions (no error text, as the real engine reports it).
    pub(crate) fn cancel_by_condition(&mut self, now: SystemTime) {
        self.status = Status::Cancelled;
        self.finished_at = Some(now);
    }

    /// Held by its concurrency group until a place frees.
    pub(crate) fn hold(&mut self) {
        self.status = Status::Pending;
        self.held = true;
    }

    /// Let through by its concurrency group: queued.
    pub(crate) fn admit(&mut self) {
        self.held = false;
        self.status = Status::Queued;
    }

    /// An evicted invocation restored: queued for its next invocation.
    pub(crate) fn restore(&mut self) {
        self.status = Status::Queued;
        self.worker_id = None;
        self.deadline = None;
    }

    /// Replayed by hand: queued when it has no parent in the replayed set (`rooted`), else
    /// pending on its parents again.
    pub(crate) fn replay(&mut self, rooted: bool) {
        self.status = if rooted {
            Status::Queued
        } else {
            Status::Pending
        };
    }

    /// Completed with `output`.
    pub(crate) fn complete(&mut self, output: String, now: SystemTime) {
        self.status = Status::Completed;
        self.output = Some(output);
        self.finished_at = Some(now);
        self.deadline = None;
    }

    /// Completed by an answer that came after its cancel (the real engine records it).
    pub(crate) fn complete_late(&mut self, output: String) {
        self.status = Status::Completed;
        self.output = Some(output);
        self.error = None;
    }

    /// Failed with retries left: queued again for the next attempt, not before `not_before`
    /// (a backoff's end), or at once without one.
    pub(crate) fn retry(&mut self, not_before: Option<Instant>) {
        self.status = Status::Queued;
        self.worker_id = None;
        self.not_before = not_before;
    }

    /// Failed for good with `error`.
    pub(crate) fn fail(&mut self, error: String, now: SystemTime) {
        self.status = Status::Failed;
        self.error = Some(error);
        self.finished_at = Some(now);
    }

    /// Taken from its worker for another (the worker went silent): queued as a new attempt.
    pub(crate) fn reassign(&mut self) {
        self.status = Status::Queued;
        self.worker_id = None;
        self.deadline = None;
        self.not_before = None;
        self.reoffered = false;
    }

    /// Offered again as the same attempt (its assignment may never have reached the worker).
    pub(crate) fn offer_again(&mut self) {
        self.status = Status::Queued;
        self.worker_id = None;
        self.session = None;
        self.deadline = None;
        self.reoffered = true;
    }

    /// Cancelled (no error text: the reason goes in its CANCELLED event).
    pub(crate) fn cancel(&mut self, now: SystemTime) {
        self.status = Status::Cancelled;
        self.error = Some(String::new());
        self.finished_at = Some(now);
        self.deadline = None;
    }

    /// Keeps the current attempt's times before the next attempt counts the retry up.
    pub(crate) fn keep_attempt(&mut self, end: PastEnd, now: SystemTime, next: NextAttempt) {
        self.past_attempts.push(PastAttempt {
            retry_count: self.retry_count,
            started_at: self.started_at,
            ended_at: now,
            end,
            end_message: self.end_message.take(),
            error: self.error.clone(),
            next,
        });
    }
}

impl Worker {
    /// Its status as the real engine's REST transformer decides it: INACTIVE once its last
    /// heartbeat is [`crate::limits::LIVE_HEARTBEAT`] old (a legacy `Listen` stream keeps it
    /// beating), whatever else; else PAUSED if paused; else ACTIVE. A worker whose stream just
    /// closed reads as before until its heartbeat ages, as there.
    pub(crate) fn status(&self, now: Instant) -> &'static str {
        let beating = self.sessions.iter().any(|s| s.legacy)
            || now.saturating_duration_since(self.last_heartbeat) < crate::limits::LIVE_HEARTBEAT;
        if !beating {
            "INACTIVE"
        } else if self.paused {
            "PAUSED"
        } else {
            "ACTIVE"
        }
    }
}

/// One line a task logged (`EventsService/PutLog`).
#[derive(Debug, Clone)]
pub(crate) struct LogLine {
    /// When the engine stored it (the request's `created_at` is ignored, as the real engine
    /// does).
    pub at: SystemTime,
    /// `INFO`, `ERROR`, `WARN` or `DEBUG`.
    pub level: String,
    pub message: String,
    /// A JSON object (`{}` when none was sent).
    pub metadata: serde_json::Value,
    pub retry_count: i32,
}

/// A workflow run.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub workflow_name: String,
    pub workflow_id: String,
    pub workflow_version_id: String,
    pub input: serde_json::Value,
    pub additional_metadata: serde_json::Map<String, serde_json::Value>,
    /// Changed only by the transitions of `impl Run` below (read it with [`Run::status`]).
    pub(in crate::store) status: Status,
    /// The status REST reads, and whether the run streams were told of its end: as of the
    /// status pipeline's last entry for it (see `Switches::status_lag`; read them with
    /// `State::readable_run_status` and `State::run_end_published`).
    pub(in crate::store) readable: Status,
    pub(in crate::store) end_published: bool,
    /// Whether the status pipeline has had it (its creation's entry was queued).
    pub(in crate::store) in_pipeline: bool,
    /// How many times it was replayed: an end on its way from before a replay is not news.
    pub(in crate::store) replays: u32,
    pub tasks: Vec<String>,
    pub parent_task_id: Option<String>,
    pub child_index: Option<i32>,
    pub child_key: Option<String>,
    pub priority: i32,
    pub created_at: SystemTime,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub triggering_event: Option<(String, String)>,
    /// Held by a full concurrency group (its root tasks are parked).
    pub held: bool,
    /// Its concurrency groups: (limit index, key).
    pub groups: Vec<(usize, String)>,
    /// The first task to fail for good: (readable id, error). What its `on_failure` task
    /// receives as `step_run_errors`.
    pub first_failure: Option<(String, String)>,
    /// The payload of the event filter that started it (`triggers.filter_payload`).
    pub filter_payload: Option<serde_json::Value>,
}

/// The run's life, one transition per cause: the only writers of its status. A run's status
/// follows its tasks': the engine's rules decide when a transition applies.
impl Run {
    /// A new run of `wf` (named `name` as triggered), queued, nothing published yet: the only
    /// place a run's status starts. Its tasks, its place among its parent's children, its
    /// priority and what triggered it are its creator's to set.
    pub(crate) fn queued(
        id: String,
        name: &str,
        wf: &Workflow,
        input: serde_json::Value,
        additional_metadata: serde_json::Map<String, serde_json::Value>,
        now: SystemTime,
    ) -> Run {
        Run {
            id,
            workflow_name: name.to_string(),
            workflow_id: wf.id.clone(),
            workflow_version_id: wf.version_id.clone(),
            input,
            additional_metadata,
            status: Status::Queued,
            readable: Status::Queued,
            end_published: false,
            in_pipeline: false,
            replays: 0,
            tasks: Vec::new(),
            parent_task_id: None,
            child_index: None,
            child_key: None,
            priority: 0,
            created_at: now,
            started_at: None,
            finished_at: None,
            triggering_event: None,
            held: false,
            groups: Vec::new(),
            first_failure: None,
            filter_payload: None,
        }
    }

    /// Its status.
    pub(crate) fn status(&self) -> Status {
        self.status
    }

    /// A task of it was assigned at `at`: a queued run runs from then on (a running or ended
    /// run keeps its status).
    pub(crate) fn start(&mut self, at: SystemTime) {
        if self.status == Status::Queued {
            self.status = Status::Running;
            self.started_at = Some(at);
        }
    }

    /// Every task ended: the run ends with `status` (completed, failed or cancelled) at `at`.
    pub(crate) fn end(&mut self, status: Status, at: SystemTime) {
        self.status = status;
        self.finished_at = Some(at);
    }

    /// Every task completed after all (a completion that came after a cancel, recorded as
    /// the real engine does): the run reads completed; its end time stays the cancel's.
    pub(crate) fn complete_late(&mut self) {
        self.status = Status::Completed;
    }

    /// Replayed: queued again, its end forgotten (the run streams hear of its next end).
    pub(crate) fn replay(&mut self) {
        self.status = Status::Queued;
        self.finished_at = None;
        self.end_published = false;
        self.replays += 1;
    }
}

/// A listener session of a worker (one ListenV2 or Listen stream).
#[derive(Debug)]
pub(crate) struct Session {
    pub id: u64,
    pub tx: mpsc::Sender<Result<proto::AssignedAction, tonic::Status>>,
    /// Legacy `Listen`: the stream itself keeps the worker alive, no Heartbeat needed.
    pub legacy: bool,
}

/// A registered worker.
#[derive(Debug)]
pub(crate) struct Worker {
    pub id: String,
    pub name: String,
    pub actions: HashSet<String>,
    pub slot_limits: BTreeMap<String, i32>,
    pub slots_used: BTreeMap<String, i32>,
    pub sessions: Vec<Session>,
    /// Streams the engine forgot while their worker's side stays open (the zombie fault,
    /// `DevEngine::forget_worker_streams`): held so they neither end nor carry anything.
    pub forgotten: Vec<Session>,
    pub last_heartbeat: Instant,
    pub last_heartbeat_at: SystemTime,
    pub ever_listened: bool,
    pub labels: BTreeMap<String, crate::sched::placement::LabelValue>,
    pub runtime_info: Option<proto::RuntimeInfo>,
    pub paused: bool,
    pub created_at: SystemTime,
    pub last_listener_established: Option<SystemTime>,
    /// Tasks assigned to it, ever (engine-side evidence for tests).
    pub assignments: u64,
    /// Heartbeats accepted from it, ever.
    pub heartbeats: u64,
}

/// A pushed event.
#[derive(Debug, Clone)]
pub(crate) struct StoredEvent {
    pub id: String,
    pub key: String,
    pub payload: serde_json::Value,
    pub at: SystemTime,
    pub seq: u64,
    /// The scope it was pushed with.
    pub scope: Option<String>,
    /// Its additional metadata.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The runs it started, in the order it started them.
    pub runs: Vec<String>,
    /// The webhook it came through, if one.
    pub webhook: Option<String>,
}

/// Options of one run creation.
#[derive(Debug, Default, Clone)]
pub(crate) struct TriggerOpts {
    pub parent_task: Option<String>,
    pub child_index: Option<i32>,
    pub child_key: Option<String>,
    /// The run's own priority; `None` takes the workflow's default, else 1.
    pub priority: Option<i32>,
    pub event: Option<(String, String)>,
    /// The worker its root tasks should stay on (honoured for sticky workflows only).
    pub desired_worker: Option<String>,
    /// The payload of the event filter that started it.
    pub filter_payload: Option<serde_json::Value>,
    /// Run-level desired labels: when given, they replace every task's own.
    pub desired_labels: Vec<crate::sched::placement::Desired>,
    /// The run's id when it was answered before the run was written (a deferred write);
    /// `None`: a new one.
    pub run_id: Option<String>,
}

/// The status pipeline (its actions are in `readable.rs`): runs as they were when they
/// changed, each to publish when it falls due, in order (the times never decrease).
#[derive(Debug, Default)]
pub(crate) struct Published {
    pub(in crate::store) queue: std::collections::VecDeque<Entry>,
    /// Run ends on their way to the run streams: when each goes out, the run, and its replay
    /// count then (the times never decrease).
    pub(in crate::store) ends: std::collections::VecDeque<(Instant, String, u32)>,
}

/// One change of a run on its way through the status pipeline: the run and its tasks as they
/// were then.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(in crate::store) due: Instant,
    pub(in crate::store) run: String,
    pub(in crate::store) status: Status,
    pub(in crate::store) tasks: Vec<(String, Status)>,
}
