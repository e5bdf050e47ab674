//! What a running task sees: its input, its parents' outputs, its retry count, a cancellation
//! token, logging to the engine, child runs, stream chunks and durable operations.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::client::TriggerOptions;
use crate::connection::CallOpts;
use crate::error::{Error, Outcome};
use crate::listener::durable_task::DurableClient;
use crate::protocol::{self as proto, v1};
use crate::worker::WorkerCore;

mod about;
mod children;
mod clock;
mod control;
mod evict;
mod waits;

/// What an assignment's `action_payload` carries for the task.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub(crate) struct ActionPayload {
    /// The run's input (`{}` when absent or null).
    pub input: Value,
    /// The parents' outputs, by task name.
    pub parents: serde_json::Map<String, Value>,
    /// `step_run_errors` of an `on_failure` task: failed task name → error text.
    pub errors: std::collections::BTreeMap<String, String>,
    /// `triggers`: the satisfied conditions' data and the filter payload, by (namespaced) key.
    pub triggers: serde_json::Map<String, Value>,
}

/// Decodes an assignment's `action_payload`: the one parser the worker uses (and the fuzz
/// target drives). Tolerates missing, null, mistyped and extra keys (hatchet-protocol.md
/// §4.1.3); anything that is not a JSON object is an error that says so.
pub(crate) fn decode_action_payload(payload: &str) -> Result<ActionPayload, String> {
    let payload: Value = if payload.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(payload).map_err(|e| format!("action payload is not JSON: {e}"))?
    };
    let Value::Object(mut payload) = payload else {
        return Err("action payload is not a JSON object".into());
    };
    let object = |v: Option<Value>| match v {
        Some(Value::Object(m)) => m,
        _ => Default::default(),
    };
    let input = match payload.remove("input") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(v) => v,
    };
    let errors = object(payload.remove("step_run_errors"))
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k, text)
        })
        .collect();
    Ok(ActionPayload {
        input,
        parents: object(payload.remove("parents")),
        errors,
        triggers: object(payload.remove("triggers")),
    })
}

/// Options of a child run ([`Context::spawn_child_with_options`]); fields may be added.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ChildOptions {
    key: Option<String>,
    trigger: TriggerOptions,
}

impl ChildOptions {
    /// No options.
    pub fn new() -> Self {
        ChildOptions::default()
    }

    /// A child key: a second spawn with the same key (in this task, or its retry) gets the same
    /// child run back.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The child's additional metadata.
    pub fn metadata(mut self, metadata: serde_json::Map<String, Value>) -> Self {
        self.trigger = self.trigger.metadata(metadata);
        self
    }

    /// The child's priority, 1 (lowest) to 3 (highest).
    pub fn priority(mut self, priority: i32) -> Self {
        self.trigger = self.trigger.priority(priority);
        self
    }

    /// A worker label the child's tasks want or require.
    pub fn desired_label(
        mut self,
        key: impl Into<String>,
        label: crate::placement::DesiredLabel,
    ) -> Self {
        self.trigger = self.trigger.desired_label(key, label);
        self
    }
}

/// The context of one task attempt. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

/// What a context knows of its task's declaration: its names, retries and eviction time. Not
/// its handler (the worker runs that), so the context does not depend on the task DSL.
#[derive(Debug, Clone)]
pub(crate) struct TaskAbout {
    /// The task's name.
    pub(crate) name: String,
    /// Its workflow's name, as declared.
    pub(crate) workflow: String,
    /// Retries after the first attempt.
    pub(crate) retries: i32,
    /// How long a durable wait may last before the worker evicts the task.
    pub(crate) evict_after: Option<std::time::Duration>,
}

struct Inner {
    /// The assignment, shared with the attempt that runs it (never copied per attempt).
    action: Arc<proto::AssignedAction>,
    /// The task's declaration: names, retries, eviction.
    task: TaskAbout,
    input: Value,
    parents: serde_json::Map<String, Value>,
    /// `step_run_errors` of an `on_failure` task: failed task name → error.
    errors: std::collections::BTreeMap<String, String>,
    /// `triggers`: the satisfied conditions' data and the filter payload.
    triggers: serde_json::Map<String, Value>,
    metadata: serde_json::Map<String, Value>,
    cancel: CancellationToken,
    core: Arc<WorkerCore>,
    durable: Option<DurableClient>,
    /// This attempt's worker slot permit (`release_slot` gives it back early).
    slot: super::SlotPermit,
    child_index: super::child_index::ChildIndexes,
    stream_index: AtomicI64,
    /// Legacy durable waits, in call order: their signal keys (`wait:0`, `wait:1`, ...).
    legacy_signal: AtomicI32,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("task_run_id", &self.inner.action.task_run_external_id)
            .field("retry_count", &self.inner.action.retry_count)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub(crate) fn new(
        action: Arc<proto::AssignedAction>,
        task: TaskAbout,
        cancel: CancellationToken,
        core: Arc<WorkerCore>,
        durable: Option<DurableClient>,
        slot: super::SlotPermit,
    ) -> Result<Self, String> {
        let ActionPayload {
            input,
            parents,
            errors,
            triggers,
        } = decode_action_payload(&action.action_payload)?;
        // Condition keys travel namespaced; the task reads them as it declared them.
        let config = core.conn().config();
        let triggers = triggers
            .into_iter()
            .map(|(k, v)| (config.unnamespaced(&k).to_string(), v))
            .collect();
        let metadata = action
            .additional_metadata
            .as_deref()
            .and_then(|m| serde_json::from_str::<serde_json::Map<String, Value>>(m).ok())
            .unwrap_or_default();
        Ok(Context {
            inner: Arc::new(Inner {
                action,
                task,
                input,
                parents,
                errors,
                triggers,
                metadata,
                cancel,
                core,
                durable,
                slot,
                child_index: Default::default(),
                stream_index: AtomicI64::new(0),
                legacy_signal: AtomicI32::new(0),
            }),
        })
    }

    /// The run's input (raw JSON).
    pub fn input(&self) -> &Value {
        &self.inner.input
    }

    /// A parent task's output, typed.
    pub fn parent_output<T: DeserializeOwned>(&self, parent: &str) -> Result<T, Error> {
        let v = self.inner.parents.get(parent).ok_or_else(|| {
            Error::invalid("parent_output", format!("no parent task named {parent}"))
        })?;
        serde_json::from_value(v.clone()).map_err(|e| {
            Error::invalid(
                "parent_output",
                format!("parent {parent}'s output does not match the type: {e}"),
            )
        })
    }

    /// The run's additional metadata.
    pub fn metadata(&self) -> &serde_json::Map<String, Value> {
        &self.inner.metadata
    }

    /// This attempt's retry count (0 on the first attempt).
    pub fn retry_count(&self) -> i32 {
        self.inner.action.retry_count
    }

    /// The durable invocation this attempt runs as (`None` for a plain task). It grows by one
    /// each time the engine starts the task again (a retry, a restore after eviction); a
    /// replayed invocation finds the operations of the earlier ones.
    pub fn durable_invocation(&self) -> Option<i32> {
        self.inner.action.durable_task_invocation_count
    }

    /// The task run id.
    pub fn task_run_id(&self) -> &str {
        &self.inner.action.task_run_external_id
    }

    /// The workflow run id.
    pub fn workflow_run_id(&self) -> &str {
        &self.inner.action.workflow_run_id
    }

    /// Fires on CANCEL_STEP_RUN (timeout or cancellation) and on runtime shutdown.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// The runtime this worker belongs to, opaque ([`Context::runtime`] reads it back in the
    /// runtime layer); `None` once it is gone.
    pub(crate) fn runtime_any(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.inner
            .core
            .runtime
            .get()
            .and_then(std::sync::Weak::upgrade)
    }

    /// Sends a log line to the engine (PutLog), in the background. Never waits: when the engine
    /// falls behind by 1,024 lines, new lines are dropped and
    /// counted ([`crate::runtime::RuntimeHandle::logs_dropped`]).
    pub fn log(&self, message: impl Into<String>) {
        self.log_at(tracing::Level::INFO, message);
    }

    /// [`Context::log`] at `level`: the engine shows `ERROR`, `WARN`, `INFO` and `DEBUG`
    /// (`TRACE` lines arrive as `DEBUG`). Lines over 10,000 characters are cut; empty ones are
    /// not sent.
    pub fn log_at(&self, level: tracing::Level, message: impl Into<String>) {
        crate::logs::TaskLogTarget {
            queue: self.inner.core.log_queue().clone(),
            task_run_id: self.task_run_id().to_string(),
            run_id: self.workflow_run_id().to_string(),
            retry_count: self.retry_count(),
        }
        .log(level, message.into());
    }

    /// Streams a chunk to subscribers of the run's events (PutStreamEvent).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the chunk is sent or not.
    pub async fn put_stream(&self, chunk: impl Into<Vec<u8>>) -> Result<(), Error> {
        let index = self.inner.stream_index.fetch_add(1, Ordering::Relaxed);
        let conn = self.inner.core.conn();
        let req = proto::PutStreamEventRequest {
            task_run_external_id: self.task_run_id().to_string(),
            created_at: Some(proto::timestamp_now()),
            message: chunk.into(),
            metadata: String::new(),
            event_index: Some(index),
        };
        let client = conn.events();
        conn.unary(
            "/EventsService/PutStreamEvent",
            CallOpts::new().cancel(Some(self.inner.cancel.clone())),
            &client,
            &req,
            |mut c, r| async move { c.put_stream_event(r).await },
        )
        .await
        .map(|_| ())
    }

    pub(super) fn durable(&self) -> Result<(&DurableClient, i32), Error> {
        let d = self.inner.durable.as_ref().ok_or_else(|| {
            Error::invalid(
                "durable",
                "this task is not durable: declare it with Workflow::durable_task",
            )
        })?;
        Ok((
            d,
            self.inner.action.durable_task_invocation_count.unwrap_or(1),
        ))
    }

    /// Sleeps durably for `duration`: the engine keeps the timer, so a restarted worker does not
    /// sleep again.
    ///
    /// Like every durable operation, it is never sent twice: when the stream ends between the
    /// request and its acknowledgement, the engine may have recorded it, so the worker restarts
    /// the invocation from the engine's log instead (it evicts and restores it; this invocation
    /// is cancelled, the next replays, and no retry is spent). Only when that restart cannot be
    /// made does it fail with [`Outcome::MaybeExecuted`](crate::error::Outcome::MaybeExecuted): return
    /// the error (`?`), and the task's retry replays onto what the engine kept.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe here, with a caveat for replays: dropping the future forgets the timer in this
    /// process only; the engine keeps it (its node is recorded) and the invocation's next
    /// operation is numbered after it. A replay meets the same node, so drop it only where a
    /// replay would drop it too: race it against another durable condition (`wait_for` with
    /// `any_of`), never against a local timer, which a replay does not repeat.
    pub async fn sleep_for(&self, duration: std::time::Duration) -> Result<(), Error> {
        let (d, inv) = self.durable()?;
        let duration = crate::worker::duration::wire_duration(duration);
        let cond = v1::DurableEventListenerConditions {
            sleep_conditions: vec![v1::SleepMatchCondition {
                base: Some(v1::BaseMatchCondition {
                    readable_data_key: format!("sleep:{duration}"),
                    action: v1::Action::Create as i32,
                    or_group_id: uuid::Uuid::new_v4().to_string(),
                    expression: String::new(),
                }),
                sleep_for: duration,
            }],
            user_event_conditions: vec![],
        };
        self.wait(d, inv, cond).await.map(|_| ())
    }

    /// Waits durably for an event: `event` is a [`crate::worker::conditions::Condition::event`], with its scope,
    /// lookback and CEL expression; returns the payload of the event that satisfied it. With a
    /// scope and a lookback, an event pushed (with that scope) while the task was still
    /// sleeping, or before a replay reached this wait, is not missed:
    ///
    /// ```no_run
    /// # async fn f(ctx: hatchet_runtime::Context) -> Result<(), hatchet_runtime::Error> {
    /// use hatchet_runtime::durable::Condition;
    /// use std::time::Duration;
    /// let approval = ctx
    ///     .wait_for_event_with(
    ///         Condition::event("approval").lookback("order-7", Duration::from_secs(300)),
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe here, with a caveat for replays: dropping the future forgets the wait in this
    /// process only; the engine keeps it (its node is recorded, with the same lookback instant)
    /// and the invocation's next operation is numbered after it. Drop it only where a replay
    /// would drop it too (see [`Context::sleep_for`]).
    pub async fn wait_for_event_with(
        &self,
        event: crate::worker::conditions::EventCondition,
    ) -> Result<Value, Error> {
        let fired = self
            .wait_for([crate::worker::conditions::AnyOf::from(event)])
            .await?;
        Ok(fired
            .fired
            .into_values()
            .next()
            .and_then(|mut v| (!v.is_empty()).then(|| v.swap_remove(0)))
            .unwrap_or(Value::Null))
    }

    /// Waits durably for an event with `key` (pushed after the wait is registered: see
    /// [`Context::wait_for_event_with`] for a scope and a lookback); returns its payload.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe here, with a caveat for replays: dropping the future forgets the wait in this
    /// process only; the engine keeps it (its node is recorded) and the invocation's next
    /// operation is numbered after it. Drop it only where a replay would drop it too (see
    /// [`Context::sleep_for`]).
    pub async fn wait_for_event(&self, key: &str) -> Result<Value, Error> {
        let (d, inv) = self.durable()?;
        let key = self.inner.core.conn().config().namespaced(key);
        let cond = v1::DurableEventListenerConditions {
            sleep_conditions: vec![],
            user_event_conditions: vec![v1::UserEventMatchCondition {
                base: Some(v1::BaseMatchCondition {
                    readable_data_key: key.clone(),
                    action: v1::Action::Create as i32,
                    or_group_id: uuid::Uuid::new_v4().to_string(),
                    expression: String::new(),
                }),
                user_event_key: key.clone(),
                event_scope: None,
                consider_events_since: None,
            }],
        };
        let payload = self.wait(d, inv, cond).await?;
        Ok(payload
            .get("CREATE")
            .and_then(|c| c.get(&key))
            .and_then(|l| l.get(0))
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// The legacy durable path (engines before v0.80.0): RegisterDurableEvent, then the
    /// durable-events listener delivers the signal.
    async fn wait_legacy(&self, cond: v1::DurableEventListenerConditions) -> Result<Value, Error> {
        const PATH: &str = "/v1.V1Dispatcher/RegisterDurableEvent";
        let core = &self.inner.core;
        let conn = core.conn();
        let events = &core.listeners().events;
        let signal = format!(
            "wait:{}",
            self.inner.legacy_signal.fetch_add(1, Ordering::Relaxed)
        );
        let req = v1::RegisterDurableEventRequest {
            task_id: self.task_run_id().to_string(),
            signal_key: signal.clone(),
            conditions: Some(cond),
        };
        let client = conn.v1_dispatcher();
        conn.unary(
            PATH,
            CallOpts::new().cancel(Some(self.inner.cancel.clone())),
            &client,
            &req,
            |mut c, r| async move { c.register_durable_event(r).await },
        )
        .await?;
        let key = (self.task_run_id().to_string(), signal);
        let registry = &events.kind.registry;
        // Dropped unanswered (cancelled here, or the task's future dropped), the waiter
        // removes itself.
        let (waiter, arm) = registry.wait(key, || Error::closed("durable wait"))?;
        if arm {
            events.ensure();
        }
        let ev = tokio::select! {
            r = waiter => r.ok_or_else(|| Error::closed("durable wait"))??,
            _ = self.inner.cancel.cancelled() => {
                return Err(Error::new(Outcome::Cancelled, "durable wait"));
            }
        };
        serde_json::from_slice(&ev.data).map_err(|e| {
            Error::new(Outcome::Undecodable, "durable wait")
                .with_cause(crate::error::Cause::Json(e))
        })
    }

    pub(super) async fn wait(
        &self,
        d: &DurableClient,
        inv: i32,
        cond: v1::DurableEventListenerConditions,
    ) -> Result<Value, Error> {
        if self.inner.core.legacy_durable.load(Ordering::Relaxed) {
            return self.wait_legacy(cond).await;
        }
        // Registered first: an eviction (its time, a drain) only ever evicts a task whose wait
        // the engine holds, so the wait's end is what brings the task back.
        // Biased: an answer the engine already gave (a refusal of an evicted invocation) wins
        // over the cancellation it caused, so the task sees why it stops.
        let key = tokio::select! {
            biased;
            r = d.register_wait(self.task_run_id(), inv, cond) => r?,
            _ = self.inner.cancel.cancelled() => {
                return Err(Error::new(Outcome::Cancelled, "durable wait"));
            }
        };
        let done = self
            .await_entry(d, inv, "durable wait", d.completion(key))
            .await?;
        if done.is_failure {
            return Err(Error::new(Outcome::Rejected, "durable wait")
                .with_detail(done.error.unwrap_or_default()));
        }
        serde_json::from_slice(&done.payload).map_err(|e| {
            Error::new(Outcome::Undecodable, "durable wait")
                .with_cause(crate::error::Cause::Json(e))
        })
    }

    /// Memoizes `compute` under `key`: a replayed invocation gets the stored value back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an interrupted memo is recomputed on replay.
    pub async fn memo<T, F, Fut>(&self, key: &str, compute: F) -> Result<T, Error>
    where
        T: serde::Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let (d, inv) = self.durable()?;
        let bytes = d
            .memo(self.task_run_id(), inv, key.as_bytes(), || async {
                serde_json::to_vec(&compute().await).map_err(|e| {
                    Error::invalid(
                        "memo",
                        format!("the value of memo {key:?} cannot be serialised to JSON, so nothing was stored: {e}"),
                    )
                })
            })
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(Outcome::Undecodable, "memo").with_cause(crate::error::Cause::Json(e))
        })
    }
}
