//! Triggering runs and awaiting their results: `run`, `run_no_wait`, [`RunHandle`], events.
//!
//! # Invariants
//!
//! 1. Once a trigger has succeeded, the run id is always handed back: a later failure (the result
//!    stream, a reconnect, shutdown) is an error that carries the run id, never one that invites
//!    a second trigger.
//! 2. [`RunHandle::result`] is cancel safe: dropping the future removes its waiter.

pub(crate) mod api;
pub(crate) mod bulk;
pub(crate) mod control;
pub(crate) mod events;
pub(crate) mod view;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::connection::CallOpts;
use crate::connection::Connection;
use crate::error::{Cause, Error, Outcome};
use crate::listener::keyed::Origin;
use crate::listener::runs::{RunKey, RunRegistry, RunsKind, outputs_of};
use crate::listener::stream::Home;
use crate::protocol::{self as proto, v1};
use crate::retry::class::ClassOverride;

/// What the client layer needs: the connection and the workflow-runs listener (its waiter
/// registry, and a way to ask for its stream).
#[derive(Debug)]
pub(crate) struct ClientCore {
    pub conn: Connection,
    pub runs: Arc<Home<RunsKind>>,
    /// Workflow names (namespaced) known to exist at the engine: registered by this process or
    /// found once by a lookup. The real engine answers a trigger of a name it does not know
    /// with an id no run will ever have, so a name is checked before its first trigger.
    pub known_workflows: parking_lot::Mutex<std::collections::HashMap<String, KnownCell>>,
    /// Names whose lookup could not tell (REST unreachable or slow), with when: triggers go
    /// ahead without asking again for [`UNDECIDED_FOR`], instead of each waiting
    /// [`LOOKUP_WITHIN`] on a REST API that is down.
    pub undecided_workflows:
        parking_lot::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

/// How long a workflow lookup that could not tell is remembered.
pub(crate) const UNDECIDED_FOR: Duration = Duration::from_secs(60);

/// One workflow name's lookup, shared by the triggers that wait for it (one lookup per name).
pub(crate) type KnownCell = Arc<tokio::sync::OnceCell<()>>;

impl ClientCore {
    fn registry(&self) -> &RunRegistry {
        &self.runs.kind.registry
    }

    /// A finished run's outputs (or its failure) when its result event came without them: read
    /// from GetRunDetails, which carries each task's output bytes from the engine's main tables
    /// (the REST read turns an output that is not a JSON object into `{}`). The read is
    /// repeated until it shows the run done with every completed task's output written, for
    /// up to [`DETAILS_SETTLE`]. Only an answer too large for a gRPC message is read over REST,
    /// and then a `{}` output is not taken for the task's (it may be an output that is not an
    /// object).
    async fn outputs_from_details(
        &self,
        run_id: &str,
    ) -> Result<serde_json::Map<String, Value>, Error> {
        let give_up = tokio::time::Instant::now() + DETAILS_SETTLE;
        let mut every = Duration::from_millis(100);
        loop {
            let read = self.conn.run_details(run_id, None).await;
            match read {
                Ok(d) if crate::listener::runs::details_settled(&d) => {
                    return outputs_of(
                        run_id,
                        crate::listener::runs::event_from_details(run_id, d),
                    );
                }
                Err(e) if too_large(&e) => {
                    return self.outputs_from_rest(run_id).await;
                }
                Ok(_) | Err(_) if tokio::time::Instant::now() + every < give_up => {}
                Ok(d) => {
                    return Err(Error::new(Outcome::NotFinished, "wait for run")
                        .with_detail(format!(
                            "the engine reported the run finished without results, and its details still read {:?} (done: {}) after {}s; read it again with RuntimeHandle::run_details",
                            v1::RunStatus::try_from(d.status).unwrap_or(v1::RunStatus::Queued),
                            d.done,
                            DETAILS_SETTLE.as_secs()
                        ))
                        .with_run_id(run_id));
                }
                Err(e) => return Err(e.with_run_id(run_id)),
            }
            tokio::time::sleep(every).await;
            every = (every * 2).min(Duration::from_secs(2));
        }
    }

    /// [`ClientCore::outputs_from_details`] over REST, for details too large for a gRPC
    /// message; outputs are read from the tasks' finished events (as recorded), and a `{}` of a
    /// task whose event the read did not hold is refused as undecodable. REST reads tables the engine fills after the run's end reached the run stream
    /// (the real engine's OLAP tables: up to about 1.5 s later), so the read is repeated until
    /// it shows the run and every task finished, for up to [`DETAILS_SETTLE`]; a run it still
    /// shows unfinished is never read as failed or cancelled.
    async fn outputs_from_rest(
        &self,
        run_id: &str,
    ) -> Result<serde_json::Map<String, Value>, Error> {
        let api = api::Api::new(self.conn.clone());
        let give_up = tokio::time::Instant::now() + DETAILS_SETTLE;
        let mut every = Duration::from_millis(100);
        let view = loop {
            let view = api.run(run_id).await.map_err(|e| e.with_run_id(run_id))?;
            if rest_view_settled(&view) {
                break view;
            }
            if tokio::time::Instant::now() + every >= give_up {
                return Err(Error::new(Outcome::NotFinished, "wait for run")
                    .with_detail(format!(
                        "the engine reported the run finished, its details are too large for a gRPC message, and its REST read still shows it {} after {}s; read it again with RuntimeHandle::api().run",
                        view.status.as_str(),
                        DETAILS_SETTLE.as_secs()
                    ))
                    .with_run_id(run_id));
            }
            tokio::time::sleep(every).await;
            every = (every * 2).min(Duration::from_secs(2));
        };
        // A `{}` in the read's task rows may stand for an output that is not an object; the
        // read takes each output from the task's finished event, as recorded, and only a task
        // whose event it did not find is left in doubt.
        let unconfirmed = view
            .tasks
            .iter()
            .find(|(_, t)| {
                t.status == api::RunStatus::Completed
                    && !t.recorded
                    && t.output
                        .as_ref()
                        .is_some_and(|o| o.as_object().is_some_and(|o| o.is_empty()))
            })
            .map(|(task, _)| task.clone());
        let outputs = outputs_of(run_id, view.into_event())?;
        if let Some(task) = unconfirmed {
            return Err(Error::new(Outcome::Undecodable, "wait for run")
                .with_detail(format!(
                    "the run's details are too large for a gRPC message, and the REST read shows task {task}'s output as {{}}, which the engine's REST API also shows for an output that is not a JSON object, and the read held no finished event of the task (which carries the output as recorded); the run finished, and its outputs are at the engine. To read them over gRPC, raise the engine's message limit (SERVER_GRPC_MAX_MSG_SIZE: it refuses to send a larger message) and the client's (HATCHET_CLIENT_GRPC_MAX_RECV_MESSAGE_LENGTH), then read the run again; or have tasks return objects, which REST shows whole"
                ))
                .with_run_id(run_id));
        }
        Ok(outputs)
    }

    /// What the engine's read shows of a run whose wait ran out (one REST read, bounded), as a
    /// clause for the error: its tasks and their states, and, when it has tasks that finished
    /// and none queued or running, what that means ([`stall_hint`]). REST reads a model that
    /// lags the engine's core, and both conclusions that invite a new trigger (a stall, no run)
    /// are checked against the core first (GetRunDetails): a run the core has is never called
    /// missing, and a stall is named only when the core holds no task the read shows unfinished
    /// or does not show. Empty when the reads fail.
    async fn describe_pending(&self, run_id: &str) -> String {
        let api = api::Api::new(self.conn.clone());
        let core = || self.conn.run_details(run_id, Some(LOOKUP_WITHIN));
        match tokio::time::timeout(LOOKUP_WITHIN, api.run(run_id)).await {
            Ok(Ok(view)) => {
                let confirmed = looks_stalled(&view)
                    && matches!(core().await, Ok(d) if core_agrees_stalled(&view, &d));
                stall_hint(&view, confirmed)
            }
            Ok(Err(e)) if e.is_not_found() => match core().await {
                Ok(d) => format!(
                    "; the engine's core has the run ({:?}, tasks [{}]) though its REST read model does not show it yet",
                    v1::RunStatus::try_from(d.status).unwrap_or(v1::RunStatus::Queued),
                    d.task_runs.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
                Err(_) => "; the engine shows no run under this id yet, in its core or its read model (it may still be creating it, or it lost the trigger: read it again before triggering again)".to_string(),
            },
            _ => String::new(),
        }
    }

    /// Reads a run's details once, in the background, and delivers its result to its waiters if
    /// it has finished (a late wait on a finished run answers at once, where the run stream
    /// would tell it at the engine's next tick). Spawned: a dropped wait does not cancel it, and
    /// a delivery finds only the waiters still there.
    fn read_if_finished(self: &Arc<Self>, run_id: &str) {
        let (me, run_id) = (self.clone(), run_id.to_string());
        tokio::spawn(async move {
            if let Ok(d) = me.conn.run_details(&run_id, Some(LOOKUP_WITHIN)).await
                && crate::listener::runs::details_settled(&d)
            {
                let ev = crate::listener::runs::event_from_details(&run_id, d);
                me.registry()
                    .deliver(crate::listener::run_event::RunEvent::from_event(&ev));
            }
        });
    }

    /// Notes that `workflow` (as the caller names it) exists at the engine.
    pub(crate) fn note_workflow(&self, workflow: &str) {
        let name = self.conn.config().namespaced(workflow);
        let cell = KnownCell::default();
        let _ = cell.set(());
        self.known_workflows.lock().insert(name, cell);
    }

    /// Refuses a trigger of a workflow the engine does not have (it would answer with an id no
    /// run will ever have, and the wait would last until its deadline). A name registered by
    /// this process, or found once, costs a map lookup; an unknown one costs one REST read,
    /// shared by the triggers that wait for it. When the REST API cannot tell (unreachable,
    /// refused), the trigger goes ahead and the engine decides.
    pub(crate) async fn ensure_workflow_known(
        &self,
        op: &'static str,
        workflow: &str,
    ) -> Result<(), Error> {
        let name = self.conn.config().namespaced(workflow);
        if self
            .undecided_workflows
            .lock()
            .get(&name)
            .is_some_and(|at| at.elapsed() < UNDECIDED_FOR)
        {
            return Ok(()); // the engine decides, as after the lookup that could not tell
        }
        let cell = {
            let mut known = self.known_workflows.lock();
            match known.get(&name) {
                Some(c) if c.initialized() => return Ok(()),
                Some(c) => c.clone(),
                None => known.entry(name.clone()).or_default().clone(),
            }
        };
        let api = api::Api::new(self.conn.clone());
        let lookup = cell
            .get_or_try_init(|| async {
                match tokio::time::timeout(LOOKUP_WITHIN, api.find_workflow_id(workflow)).await {
                    Ok(Ok(Some(_))) => Ok(()),
                    Ok(Ok(None)) => Err(true),
                    Ok(Err(e)) => {
                        tracing::debug!(workflow = %name, error = %e, "the workflow lookup could not tell; triggering anyway");
                        Err(false)
                    }
                    Err(_) => Err(false),
                }
            })
            .await;
        match lookup {
            Ok(()) => Ok(()),
            Err(false) => {
                self.undecided_workflows
                    .lock()
                    .insert(name, tokio::time::Instant::now());
                Ok(())
            }
            Err(true) => Err(Error::new(Outcome::Rejected, op).with_detail(format!(
                "the engine has no workflow named {name:?}; nothing was triggered: register it first (a worker's register, or RuntimeHandle::register) and check the name and the namespace"
            ))),
        }
    }

    /// Triggers `workflow` with a JSON `input`; returns the run id.
    pub(crate) async fn trigger(
        &self,
        workflow: &str,
        input: String,
        opts: TriggerOptions,
    ) -> Result<String, Error> {
        const PATH: &str = "/WorkflowService/TriggerWorkflow";
        if self.conn.lifecycle().is_cancelled() {
            return Err(Error::closed(PATH));
        }
        bulk::check_priority(PATH, opts.priority)?;
        self.ensure_workflow_known(PATH, workflow).await?;
        #[cfg_attr(not(feature = "otel"), allow(unused_mut))]
        let mut metadata = opts.metadata.clone();
        #[cfg(feature = "otel")]
        let trace = {
            let mut m = metadata.take().unwrap_or_default();
            let cx = crate::otel::trigger_span(workflow, &mut m);
            metadata = (!m.is_empty()).then_some(m);
            cx
        };
        let req = self.trigger_request(workflow, input, &opts, metadata);
        let over = if opts.parent.is_some() {
            Some(ClassOverride::ChildKeyed)
        } else if opts.idempotent {
            Some(ClassOverride::CallerIdempotent)
        } else {
            None
        };
        let client = self.conn.workflows();
        let res = self
            .conn
            .unary(
                PATH,
                CallOpts::new().class(over).timeout(opts.timeout),
                &client,
                &req,
                |mut c, r| async move { c.trigger_workflow(r).await },
            )
            .await
            .map(|r| r.workflow_run_id);
        #[cfg(feature = "otel")]
        crate::otel::trigger_done(&trace, res.as_deref());
        match res {
            Ok(id) => Ok(id),
            // An idempotent trigger that collides resolves to the existing run (docs/contract.md §2).
            Err(e) if opts.idempotent => {
                match e.grpc_status().and_then(proto::idempotency_collision) {
                    Some(c) => Ok(c.existing_run_external_id),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The TriggerWorkflow request of one run (`workflow` namespaced here).
    pub(crate) fn trigger_request(
        &self,
        workflow: &str,
        input: String,
        opts: &TriggerOptions,
        metadata: Option<serde_json::Map<String, Value>>,
    ) -> v1::TriggerWorkflowRequest {
        let (parent_id, parent_task, child_index) = match &opts.parent {
            Some((p, t, i)) => (Some(p.clone()), Some(t.clone()), Some(*i)),
            None => (None, None, None),
        };
        v1::TriggerWorkflowRequest {
            name: self.conn.config().namespaced(workflow),
            input,
            parent_id,
            parent_task_run_external_id: parent_task,
            child_index,
            child_key: opts.child_key.clone(),
            additional_metadata: metadata.map(|m| Value::Object(m).to_string()),
            desired_worker_id: opts.desired_worker_id.clone(),
            priority: opts.priority,
            desired_worker_labels: crate::placement::desired_to_proto(&opts.desired_labels),
        }
    }

    /// The Push request of one event (`key` namespaced here); a priority outside 1–3 or a
    /// payload that does not serialize is refused locally as `op`. Pushed from inside a task's
    /// handler, its metadata names that task and its run as the event's source
    /// ([`with_source`]).
    pub(crate) fn push_request<P: Serialize>(
        &self,
        op: &'static str,
        key: &str,
        payload: &P,
        opts: &PushOptions,
    ) -> Result<proto::PushEventRequest, Error> {
        bulk::check_priority(op, opts.priority)?;
        Ok(proto::PushEventRequest {
            key: self.conn.config().namespaced(key),
            payload: encode_input(op, payload)?,
            event_timestamp: Some(proto::timestamp_now()),
            additional_metadata: with_source(
                opts.metadata.clone(),
                crate::logs::TaskLogTarget::current_source(),
            )
            .map(|m| Value::Object(m).to_string()),
            priority: opts.priority,
            scope: opts.scope.clone(),
        })
    }

    /// Triggers a run and returns its handle.
    pub(crate) async fn run_no_wait_with<I: Serialize>(
        self: &Arc<Self>,
        workflow: &str,
        input: &I,
        opts: TriggerOptions,
    ) -> Result<RunHandle, Error> {
        let input = encode_input("trigger", input)?;
        self.run_no_wait_encoded(workflow, input, opts).await
    }

    /// [`ClientCore::run_no_wait_with`] with the input already JSON.
    pub(crate) async fn run_no_wait_encoded(
        self: &Arc<Self>,
        workflow: &str,
        input: String,
        opts: TriggerOptions,
    ) -> Result<RunHandle, Error> {
        let id = self.trigger(workflow, input, opts).await?;
        Ok(RunHandle::new(id, self.clone()))
    }
}

/// Percent-encodes a path segment or a query value (an id or a name from the caller).
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// How long a workflow-name lookup before a first trigger may take before the trigger goes
/// ahead without it.
const LOOKUP_WITHIN: Duration = Duration::from_secs(3);

/// What a run's read says about a wait that ran out (a pure decision): its tasks' states, and,
/// when some finished and none is queued or running while the run is not final, that the
/// engine may have lost the step that starts the next task. Seen on the real engine: a crash
/// right after it recorded a task's completion leaves the next task's trigger unsatisfied
/// (`v1_match`), the run RUNNING forever, and v0.104.9 discards a replay of it.
pub(crate) fn stall_hint(view: &crate::client::view::RunView, confirmed: bool) -> String {
    if view.is_final() {
        return "; the engine reads it finished now: wait again to take its result".to_string();
    }
    let tasks: Vec<String> = view
        .tasks
        .iter()
        .map(|(name, t)| format!("{name} {:?}", t.status))
        .collect();
    let mut out = format!(
        "; the engine reads it {:?} with tasks [{}]",
        view.status,
        tasks.join(", ")
    );
    if confirmed && looks_stalled(view) {
        out.push_str(": no task is queued or running. Unless a task waits on a condition (a sleep, an event) this long, the engine lost the step that starts the next task (it does when it stops right after recording a completion) and the run will not finish; the real engine v0.104.9 discards a replay of such a run ('failed preflight check for DAG'), so trigger the work again as a new run (its finished tasks run again)");
    }
    out
}

/// Whether a REST read shows a run stalled (pure): not final, a task finished, none queued or
/// running. The read model lags, so this alone never names a stall ([`core_agrees_stalled`]).
pub(crate) fn looks_stalled(view: &crate::client::view::RunView) -> bool {
    use crate::client::api::RunStatus as S;
    let active = view
        .tasks
        .values()
        .any(|t| matches!(t.status, S::Queued | S::Running));
    let finished = view.tasks.values().any(|t| t.status == S::Completed);
    !view.is_final() && finished && !active
}

/// Whether the engine's core agrees with a REST read that shows a run stalled (pure): the core
/// holds no task running, and no task the read does not show finished (a next task the core has
/// created, queued or running, is one the read model has not caught up with).
pub(crate) fn core_agrees_stalled(
    view: &crate::client::view::RunView,
    core: &v1::GetRunDetailsResponse,
) -> bool {
    let finished_in_view = |name: &str| {
        view.tasks
            .get(name)
            .is_some_and(|t| t.status == crate::client::api::RunStatus::Completed)
    };
    !core.done
        && core
            .task_runs
            .iter()
            .all(|(name, t)| t.status != v1::RunStatus::Running as i32 && finished_in_view(name))
}

/// Whether a call failed on a message over a gRPC size limit: the engine's (ResourceExhausted)
/// or this client's decoder's (OutOfRange).
fn too_large(e: &Error) -> bool {
    e.grpc_status().is_some_and(|s| {
        matches!(
            s.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        )
    })
}

/// How long after its trigger a wait still counts as the trigger's own (a pure decision): one
/// that starts within it costs no read (the run stream carries the result: the engine answers a
/// run that ends after its subscription at once); a later one, or a wait on an id the caller
/// gave, reads the run once ([`ClientCore::read_if_finished`]), because the engine answers a
/// subscription to a run that has already ended only at its stream's next one-second tick
/// (v0.104.9 `subscribeToWorkflowRunsV1`). 20 ms: no run ends sooner after its trigger (the
/// engine's own hops take longer), so a wait that starts within it finds the run still going.
pub(crate) const FRESH_FOR: Duration = Duration::from_millis(20);

/// Whether a wait reads its run once first ([`FRESH_FOR`]).
pub(crate) fn late_wait(origin: Origin, since_trigger: Duration) -> bool {
    origin == Origin::Given || since_trigger >= FRESH_FOR
}

/// Whether a REST read shows the run finished with every task finished (the read may lag the
/// run stream: see [`ClientCore::outputs_from_rest`]).
fn rest_view_settled(view: &crate::client::view::RunView) -> bool {
    view.status.is_final() && view.tasks.values().all(|t| t.status.is_final())
}

/// How long a finished run's details may trail its result on the run stream.
pub(crate) const DETAILS_SETTLE: Duration = Duration::from_secs(60);

/// Options of one trigger: [`TriggerOptions::new`], then a method for each option that applies
/// (fields may be added: the struct is `#[non_exhaustive]`). A child run is spawned from its parent's task
/// ([`crate::worker::context::Context::spawn_child_with_options`]), never forged here.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TriggerOptions {
    /// Additional metadata (a JSON object).
    pub(crate) metadata: Option<serde_json::Map<String, Value>>,
    /// Priority 1–3.
    pub(crate) priority: Option<i32>,
    /// The caller declares this trigger idempotent: the workflow has an idempotency key, so a
    /// repeat is answered with the existing run. The trigger is then retried like a read, and an
    /// `ALREADY_EXISTS` collision resolves to the existing run id.
    pub(crate) idempotent: bool,
    /// Child run: `(parent run id, parent task run id, child index)` (set by the task context).
    pub(crate) parent: Option<(String, String, i32)>,
    /// Child key (instead of, or with, the index; set by the task context).
    pub(crate) child_key: Option<String>,
    /// Deadline of the trigger call.
    pub(crate) timeout: Option<Duration>,
    /// The worker the run should start on (honoured for sticky workflows:
    /// [`crate::worker::task::Workflow::sticky`]).
    pub(crate) desired_worker_id: Option<String>,
    /// Labels the run's workers should have; when given they replace every task's own.
    pub(crate) desired_labels: std::collections::HashMap<String, crate::placement::DesiredLabel>,
}

impl TriggerOptions {
    /// No options: the workflow's defaults.
    pub fn new() -> Self {
        TriggerOptions::default()
    }

    /// Sets the additional metadata (a JSON object), copied onto the run's tasks.
    pub fn metadata(mut self, metadata: serde_json::Map<String, Value>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Adds one additional metadata entry.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    /// Sets the priority, 1 (lowest) to 3 (highest); without it the workflow's default applies.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Declares the trigger idempotent (the workflow has an idempotency key): it is retried like
    /// a read, and a collision resolves to the existing run.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Bounds the trigger call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Asks for the run to start on this worker (sticky workflows).
    pub fn desired_worker(mut self, worker_id: impl Into<String>) -> Self {
        self.desired_worker_id = Some(worker_id.into());
        self
    }

    /// Wants (or requires) a worker label for the run's tasks; given labels replace every
    /// task's own.
    pub fn desired_label(
        mut self,
        key: impl Into<String>,
        label: crate::placement::DesiredLabel,
    ) -> Self {
        self.desired_labels.insert(key.into(), label);
        self
    }
}

/// Options of one event push: [`PushOptions::new`], then a method for each option that applies
/// (fields may be added: the struct is `#[non_exhaustive]`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PushOptions {
    /// Additional metadata, copied onto the runs the event starts.
    pub(crate) metadata: Option<serde_json::Map<String, Value>>,
    /// Priority (1–3) of the runs it starts.
    pub(crate) priority: Option<i32>,
    /// Its scope: a workflow with event filters is started only through that scope's filters.
    pub(crate) scope: Option<String>,
}

impl PushOptions {
    /// No metadata, the workflows' own priority, no scope.
    pub fn new() -> Self {
        PushOptions::default()
    }

    /// Additional metadata, copied onto the runs the event starts (replaces what was set).
    pub fn metadata(mut self, metadata: serde_json::Map<String, Value>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// One additional-metadata pair.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    /// The priority (1–3) of the runs it starts; checked when pushed.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Its scope: a workflow with event filters is started only through that scope's filters.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
}

/// A triggered run: its id, and a way to await its result.
#[derive(Clone)]
pub struct RunHandle {
    run_id: String,
    client: Arc<ClientCore>,
    /// Whether the engine gave this id to this process (a trigger) or the caller did: the
    /// unknown-run sweep gives up on a caller's id much sooner (`SweepPlan`).
    origin: Origin,
    /// When the handle was made: a wait that starts later reads the run once (it may have
    /// finished already, and the engine's run stream tells of a finished run only at its next
    /// tick, a second on the real engine).
    born: tokio::time::Instant,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("run_id", &self.run_id)
            .finish()
    }
}

/// A delivered result that is not yet outputs.
enum Unsettled {
    /// The event carried no results: the run's details have them.
    NoResults,
    /// The run failed (or its result could not be read): the error, to classify.
    Failed(Error),
}

/// A delivered result as its outputs, decoded here on the waiter's thread (the stream only
/// read its run id), or what is left to find out.
fn read_event(
    run_id: &str,
    ev: crate::listener::run_event::RunEvent,
) -> Result<serde_json::Map<String, Value>, Unsettled> {
    let ev = ev.decode().map_err(|e| {
        Unsettled::Failed(
            Error::new(Outcome::Undecodable, "wait for run")
                .with_detail(format!(
                    "the engine sent a result for this run that is not a WorkflowRunEvent \
                     ({e}); the run's details (Runtime::run_details) still say how it ended"
                ))
                .with_run_id(run_id),
        )
    })?;
    // A finished run's event without results: the engine left them out (the real one does
    // when the outputs together reach its message limit, 4 MiB by default). Never success:
    // the run's details say what happened.
    if ev.results.is_empty() {
        return Err(Unsettled::NoResults);
    }
    outputs_of(run_id, ev).map_err(Unsettled::Failed)
}

impl RunHandle {
    /// The handle of a run this process triggered (the engine answered with `run_id`).
    pub(crate) fn new(run_id: String, client: Arc<ClientCore>) -> Self {
        RunHandle {
            run_id,
            client,
            origin: Origin::Triggered,
            born: tokio::time::Instant::now(),
        }
    }

    /// The handle of a run id the caller gave (it may be wrong).
    pub(crate) fn given(run_id: String, client: Arc<ClientCore>) -> Self {
        RunHandle {
            run_id,
            client,
            origin: Origin::Given,
            born: tokio::time::Instant::now(),
        }
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Waits for the run to finish and returns every task's output, by task name.
    ///
    /// Waits through outages (the stream reconnects, and after 30 s the run is also polled) until
    /// the runtime shuts down; use [`RunHandle::result_within`] for a deadline.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future removes this waiter (other waiters of the run keep
    /// theirs), and the run keeps running on the engine.
    pub async fn outputs(&self) -> Result<serde_json::Map<String, Value>, Error> {
        let reg = self.client.registry();
        let (waiter, arm) = reg.wait_swept(RunKey::new(&self.run_id), Some(self.origin), || {
            Error::closed("wait for run").with_run_id(&self.run_id)
        })?;
        if arm {
            self.client.runs.ensure();
        }
        if late_wait(self.origin, self.born.elapsed()) {
            self.client.read_if_finished(&self.run_id);
        }
        let ev = match waiter.await {
            Some(r) => r?,
            None => return Err(Error::closed("wait for run").with_run_id(&self.run_id)),
        };
        match read_event(&self.run_id, ev) {
            Ok(outputs) => Ok(outputs),
            // Boxed: the reads after an unusual result are the rare path, and their futures
            // are large; a pending waiter (a million of them, say) stays small.
            Err(slow) => Box::pin(self.settle(slow)).await,
        }
    }

    /// What an unusual result still needs: the run's details, or the error's classification.
    async fn settle(&self, slow: Unsettled) -> Result<serde_json::Map<String, Value>, Error> {
        let e = match slow {
            Unsettled::NoResults => match self.client.outputs_from_details(&self.run_id).await {
                Ok(o) => return Ok(o),
                Err(e) => e,
            },
            Unsettled::Failed(e) => e,
        };
        match self.client.classify_run_error(&self.run_id, e).await {
            control::Classified::Error(e) => Err(e),
            control::Classified::Completed(e) => self
                .client
                .outputs_from_details(&self.run_id)
                .await
                .map_err(|_| e),
        }
    }

    /// Waits for the result and decodes it: a single-task run's output, or for a DAG the object
    /// of outputs by task name.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (see [`RunHandle::outputs`]).
    pub async fn result<O: DeserializeOwned>(&self) -> Result<O, Error> {
        let outputs = self.outputs().await?;
        decode_outputs(&self.run_id, outputs)
    }

    /// [`RunHandle::result`] with a deadline; on timeout the error carries the run id.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn result_within<O: DeserializeOwned>(&self, timeout: Duration) -> Result<O, Error> {
        match tokio::time::timeout(timeout, self.result()).await {
            Ok(r) => r,
            Err(_) => {
                let seen = Box::pin(self.client.describe_pending(&self.run_id)).await;
                Err(Error::new(Outcome::DeadlineExceeded, "wait for run")
                    .with_detail(format!(
                        "no result within {timeout:?}; the run goes on{seen}"
                    ))
                    .with_run_id(&self.run_id))
            }
        }
    }
}

/// A single-task run decodes from its one output; a DAG from the map of outputs.
pub(crate) fn decode_outputs<O: DeserializeOwned>(
    run_id: &str,
    outputs: serde_json::Map<String, Value>,
) -> Result<O, Error> {
    let value = if outputs.len() == 1 {
        outputs
            .into_iter()
            .next()
            .map(|(_, v)| v)
            .unwrap_or(Value::Null)
    } else {
        Value::Object(outputs)
    };
    serde_json::from_value(value).map_err(|e| {
        Error::new(Outcome::Invalid, "decode run result")
            .with_detail("the run's output does not match the requested type")
            .with_cause(Cause::Json(e))
            .with_run_id(run_id)
    })
}

/// Serializes an input, refusing locally what cannot be sent.
pub(crate) fn encode_input<I: Serialize>(op: &'static str, input: &I) -> Result<String, Error> {
    serde_json::to_string(input).map_err(|e| {
        Error::invalid(op, "the input cannot be serialized to JSON").with_cause(Cause::Json(e))
    })
}

/// An event's metadata with its source, the run and task whose handler pushed it, under the
/// keys the official SDKs write (`hatchet__source_workflow_run_id`,
/// `hatchet__source_step_run_id`; theirs win over the caller's, as in those SDKs): the engine
/// puts the runs the event starts in the source run's trace and draws the event there.
pub(crate) fn with_source(
    meta: Option<serde_json::Map<String, Value>>,
    source: Option<(String, String)>,
) -> Option<serde_json::Map<String, Value>> {
    let Some((run, task)) = source else {
        return meta;
    };
    let mut meta = meta.unwrap_or_default();
    meta.insert("hatchet__source_workflow_run_id".into(), Value::String(run));
    meta.insert("hatchet__source_step_run_id".into(), Value::String(task));
    Some(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listener::run_event::RunEvent;
    use prost::Message as _;

    #[test]
    fn an_event_pushed_in_a_handler_names_its_source_over_the_caller_s_keys() {
        let src = || Some(("run-1".to_string(), "task-1".to_string()));
        assert_eq!(with_source(None, None), None, "outside a handler: as given");
        let mine: serde_json::Map<String, Value> = serde_json::from_value(serde_json::json!(
            {"user": 1, "hatchet__source_step_run_id": "forged"}
        ))
        .expect("a map");
        assert_eq!(with_source(Some(mine.clone()), None), Some(mine.clone()));
        let got = with_source(Some(mine), src()).expect("metadata");
        assert_eq!(
            Value::Object(got),
            serde_json::json!({
                "user": 1,
                "hatchet__source_workflow_run_id": "run-1",
                "hatchet__source_step_run_id": "task-1",
            })
        );
        assert_eq!(
            with_source(None, src()).map(|m| m.len()),
            Some(2),
            "no metadata of the caller's: the source alone"
        );
    }

    /// A stall is named only when the core agrees with the read model: the read model lags,
    /// and the hint invites a new run (that would run the work twice if the run was going).
    #[test]
    fn a_stall_is_named_only_when_the_core_agrees() {
        use crate::client::api::RunStatus as S;
        use crate::client::view::{RunView, TaskView};
        let task = |status| TaskView {
            task_run_id: "t".into(),
            status,
            output: None,
            error: None,
            recorded: false,
        };
        let view = RunView {
            run_id: "r".into(),
            status: S::Running,
            input: serde_json::json!({}),
            metadata: Default::default(),
            tasks: [("a".to_string(), task(S::Completed))]
                .into_iter()
                .collect(),
        };
        assert!(looks_stalled(&view));
        let core = |tasks: &[(&str, v1::RunStatus)]| v1::GetRunDetailsResponse {
            task_runs: tasks
                .iter()
                .map(|(n, st)| {
                    (
                        n.to_string(),
                        v1::TaskRunDetail {
                            status: *st as i32,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            ..Default::default()
        };
        // The core shows a running DAG's finished tasks as queued, and nothing else: a stall.
        let stalled = core(&[("a", v1::RunStatus::Queued)]);
        assert!(core_agrees_stalled(&view, &stalled));
        assert!(stall_hint(&view, true).contains("trigger the work again"));
        // The core has created the next task, which the read model has not caught up with.
        let going = core(&[("a", v1::RunStatus::Queued), ("b", v1::RunStatus::Queued)]);
        assert!(!core_agrees_stalled(&view, &going));
        let running = core(&[("a", v1::RunStatus::Running)]);
        assert!(!core_agrees_stalled(&view, &running));
        assert!(!stall_hint(&view, false).contains("trigger the work again"));
    }

    #[test]
    fn a_result_that_does_not_decode_fails_its_waiter_as_undecodable_with_the_run_id() {
        // The stream reads only the run id; a result whose rest is not a WorkflowRunEvent
        // reaches its waiter, which says so (the stream stays up for the other runs).
        let mut bytes = proto::WorkflowRunEvent {
            workflow_run_id: "run-1".into(),
            ..Default::default()
        }
        .encode_to_vec();
        bytes.extend([0x22, 0x02, 0xff, 0xff]); // results: a nested message that is garbage
        let ev = RunEvent::from_bytes(bytes.into()).expect("its run id scans");
        let Err(Unsettled::Failed(e)) = read_event("run-1", ev) else {
            panic!("undecodable")
        };
        assert_eq!(e.outcome(), Outcome::Undecodable, "{e}");
        assert_eq!(e.run_id(), Some("run-1"));
        assert!(e.to_string().contains("not a WorkflowRunEvent"), "{e}");
        // An event without results is left to the run's details; one with them is its outputs.
        let empty = RunEvent::from_event(&proto::WorkflowRunEvent::default());
        assert!(matches!(read_event("r", empty), Err(Unsettled::NoResults)));
        let ok = RunEvent::from_event(&proto::WorkflowRunEvent {
            results: vec![proto::StepRunResult {
                task_name: "t".into(),
                output: Some("{\"a\":1}".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let Ok(out) = read_event("r", ok) else {
            panic!("outputs")
        };
        assert_eq!(out["t"]["a"], 1);
    }
}
