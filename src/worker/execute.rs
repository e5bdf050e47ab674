//! Running an assigned action: slots, dispatch, one attempt's execution in its own task, and
//! its step events (invariants 2 to 5).

use super::*;
use std::pin::Pin;

use crate::logs;

/// The worker's slot bounds: ordinary tasks and durable tasks each have their own (as the
/// engine counts them), and STARTs waiting for a slot are bounded too, far above the slots.
pub(super) struct Slots {
    pub(super) ordinary: Arc<Semaphore>,
    pub(super) durable: Arc<Semaphore>,
    /// STARTs received and not yet running ([`waiting_bound`]). Only a flood past it (an engine
    /// assigning far beyond the slots) makes the loop wait, so the stream slows (backpressure)
    /// instead of memory growing (docs/contract.md §6).
    pub(super) waiting: Arc<Semaphore>,
}

/// How many STARTs may wait for a slot before the dispatch loop waits (a pure rule): 16 per
/// slot, at least 1,024. Far above what an engine assigns past the slots in practice (a
/// re-offer, a duplicate), so the loop keeps reading and a CANCEL is never stuck behind STARTs
/// waiting for the slot it would free; bounded, so a flood cannot grow memory without limit.
pub(super) fn waiting_bound(slots: usize) -> usize {
    slots.saturating_mul(16).max(1_024)
}

/// A running attempt's slot permit: held while it runs, given back early by
/// [`Context::release_slot`].
pub(crate) type SlotPermit = Arc<parking_lot::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>;

/// Reads the actions and acts on each at once: a START waits for its slot in its own task, so a
/// CANCEL (or any other action) is never stuck behind it while every slot is busy (the real
/// engine drops a CANCEL it cannot send). The loop itself waits only past [`waiting_bound`]
/// STARTs waiting for their slots: a bound near the slots would stop the reading, and the
/// CANCEL that frees a slot would sit unread behind the STARTs waiting for it.
pub(super) async fn dispatch(
    core: Arc<WorkerCore>,
    mut rx: mpsc::Receiver<proto::AssignedAction>,
    slots: Slots,
) {
    loop {
        let action = tokio::select! {
            a = rx.recv() => match a { Some(a) => a, None => break },
            _ = core.stop.cancelled() => break,
        };
        let kind = ActionType::try_from(action.action_type);
        match kind {
            Ok(kind @ (ActionType::StartStepRun | ActionType::StartBatch)) => {
                let ticket = tokio::select! {
                    t = slots.waiting.clone().acquire_owned() => match t { Ok(t) => t, Err(_) => break },
                    _ = core.stop.cancelled() => break,
                };
                let token = core.stop.child_token();
                let batch = kind == ActionType::StartBatch;
                let key = if batch {
                    (action.batch_id.clone().unwrap_or_default(), 0, 0)
                } else {
                    running_key(&action)
                };
                {
                    // The same attempt offered twice (its first assignment went out on a stream
                    // that broke): it already runs here, so the copy is ignored.
                    let mut running = core.running.lock();
                    if running.contains_key(&key) || core.finished.contains(&key) {
                        tracing::debug!(task = %action.task_run_external_id, "ignoring a repeated assignment");
                        continue;
                    }
                    running.insert(key.clone(), token.clone());
                }
                let durable = core
                    .handlers
                    .lock()
                    .get(&action.action_id)
                    .is_some_and(|h| h.durable);
                let bound = if durable {
                    &slots.durable
                } else {
                    &slots.ordinary
                };
                let bound = bound.clone();
                let core2 = core.clone();
                core.tracker.spawn(async move {
                    let permit = tokio::select! {
                        biased;
                        _ = token.cancelled() => None,
                        p = bound.acquire_owned() => p.ok(),
                    };
                    drop(ticket);
                    let Some(permit) = permit else {
                        // Cancelled (or stopped) before a slot was free: it never ran.
                        core2.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                        core2.ended(&key);
                        return;
                    };
                    let slot: SlotPermit = Arc::new(parking_lot::Mutex::new(Some(permit)));
                    if batch {
                        execute_batch(&core2, action, key, token, slot.clone()).await;
                    } else {
                        execute(&core2, action, token, slot.clone()).await;
                    }
                    slot.lock().take();
                });
            }
            Ok(ActionType::CancelStepRun) => {
                core.cancel_running(&action.task_run_external_id, |_| true);
            }
            _ => tracing::warn!(
                action_type = action.action_type,
                "ignoring an action type this worker does not run"
            ),
        }
    }
}

async fn execute(
    core: &Arc<WorkerCore>,
    action: proto::AssignedAction,
    token: CancellationToken,
    slot: SlotPermit,
) {
    let action = Arc::new(action);
    let task_id = running_key(&action);
    let handler = core.handlers.lock().get(&action.action_id).cloned();
    let durable = handler.as_ref().filter(|h| h.durable).map(|_| {
        let home = core.listeners.durable.clone();
        DurableClient {
            registry: home.kind.registry.clone(),
            ensure: Arc::new(move || home.ensure()),
        }
    });
    // However the attempt ends (a result, a cancel, a panic), its invocation's doubt goes with
    // it: a retry is another invocation, so the registry's set stays bounded by running attempts.
    let _doubt = durable.as_ref().map(|d| InvocationEnds {
        registry: d.registry.clone(),
        task: action.task_run_external_id.clone(),
        invocation: action.durable_task_invocation_count.unwrap_or(1),
    });
    core.counters.started.fetch_add(1, Ordering::Relaxed);
    // STARTED goes out alongside the handler, from this task (no task of its own, no copy of the
    // action): the handler does not wait a round trip to begin, and the engine ignores a STARTED
    // that arrives after the attempt's final event (a finished attempt only moves forward).
    let mut started = std::pin::pin!(send_event(
        core,
        &action,
        E::StepEventTypeStarted,
        String::new(),
        false,
        false,
    ));
    #[cfg(feature = "otel")]
    let otel_cx = {
        let metadata = action
            .additional_metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        crate::otel::task_context(&action, &metadata)
    };
    let prepared = prepare(core, handler, Arc::clone(&action), &token, durable, slot);
    let attempt = Attempt {
        action: &action,
        task_run_id: &action.task_run_external_id,
        token: &token,
        #[cfg(feature = "otel")]
        otel: otel_cx.clone(),
    };
    let (result, started_ended) =
        alongside(started.as_mut(), run_attempt(core, attempt, prepared)).await;
    let Some(result) = result else {
        // Cancelled: no event is expected any more, a STARTED still in flight included.
        core.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        core.ended(&task_id);
        return;
    };
    #[cfg(feature = "otel")]
    crate::otel::task_done(&otel_cx, result.as_ref().err().map(|e| e.message.as_str()));
    let (kind, payload, no_retry) = match result {
        Ok(v) => {
            let out = v.to_string();
            let max = super::max_output_bytes(core.conn.config());
            if out.len() > max {
                let msg = format!(
                    "the task's output is {} bytes, over the {max} byte limit of a message (HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH, which the engine's own limit bounds); return less, or store it elsewhere and return a reference",
                    out.len(),
                );
                (E::StepEventTypeFailed, msg, true)
            } else {
                (E::StepEventTypeCompleted, out, false)
            }
        }
        Err(e) => (E::StepEventTypeFailed, e.message, !e.retryable),
    };
    let counter = if kind == E::StepEventTypeCompleted {
        &core.counters.completed
    } else {
        &core.counters.failed
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let final_event = send_event(core, &action, kind, payload, no_retry, true);
    if started_ended {
        final_event.await;
    } else {
        // Still in flight (a slow engine, a trivial task): both go on, the final not behind it.
        futures::future::join(started, final_event).await;
    }
    core.ended(&task_id);
}

/// Polls `side` (first) and `main` together until `main` ends: `main`'s output, and whether
/// `side` has ended (if not, the caller finishes or drops it; it must not poll an ended one).
async fn alongside<M: Future>(
    side: Pin<&mut impl Future<Output = ()>>,
    main: M,
) -> (M::Output, bool) {
    match futures::future::select(side, std::pin::pin!(main)).await {
        futures::future::Either::Left(((), main)) => (main.await, true),
        futures::future::Either::Right((out, _)) => (out, false),
    }
}

/// Ends a durable attempt's invocation in the registry when the attempt's future goes.
struct InvocationEnds {
    registry: Arc<crate::listener::durable_task::DurableRegistry>,
    task: String,
    invocation: i32,
}

impl Drop for InvocationEnds {
    fn drop(&mut self) {
        self.registry.attempt_ended(&self.task, self.invocation);
    }
}

/// The context and handler for `action`, or why the attempt fails at once (no handler here, a
/// payload that cannot be read).
fn prepare(
    core: &Arc<WorkerCore>,
    handler: Option<Arc<TaskDef>>,
    action: Arc<proto::AssignedAction>,
    token: &CancellationToken,
    durable: Option<DurableClient>,
    slot: SlotPermit,
) -> Result<(Context, crate::worker::task::TaskFn), TaskError> {
    let Some(h) = handler else {
        return Err(TaskError::non_retryable(format!(
            "this worker has no handler for action {}",
            action.action_id
        )));
    };
    let ctx = Context::new(
        action,
        h.about(),
        token.clone(),
        core.clone(),
        durable,
        slot,
    )
    .map_err(TaskError::non_retryable)?;
    Ok((ctx, h.handler.clone()))
}

/// What one handler call runs under: its assignment, the task run its log lines belong to, its
/// cancellation, and (with `otel`) its trace context.
struct Attempt<'a> {
    action: &'a proto::AssignedAction,
    task_run_id: &'a str,
    token: &'a CancellationToken,
    #[cfg(feature = "otel")]
    otel: opentelemetry::Context,
}

/// Runs a handler in its span, with its log lines forwarded and its panics caught: its result,
/// or `None` when it was cancelled (CANCEL_STEP_RUN, an eviction, shutdown): then the engine no
/// longer expects a result, and none is reported, as the SDKs do.
async fn run_attempt(
    core: &Arc<WorkerCore>,
    at: Attempt<'_>,
    prepared: Result<(Context, crate::worker::task::TaskFn), TaskError>,
) -> Option<Result<serde_json::Value, TaskError>> {
    let (ctx, run) = match prepared {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    let action = at.action;
    // One span per execution; the task's own `tracing` events can be forwarded to the engine as
    // its log lines (`logs::TaskLogLayer`).
    let span = tracing::info_span!(
        "task",
        workflow = %action.action_id.split(':').next().unwrap_or_default(),
        task = %action.action_id,
        run_id = %action.workflow_run_id,
        task_run_id = %at.task_run_id,
        retry_count = action.retry_count,
        worker_id = %core.identity.get().unwrap_or_default(),
    );
    let target = logs::TaskLogTarget {
        queue: core.log_queue().clone(),
        task_run_id: at.task_run_id.to_string(),
        run_id: action.workflow_run_id.clone(),
        retry_count: action.retry_count,
    };
    let handler = std::panic::AssertUnwindSafe(run(ctx)).catch_unwind();
    #[cfg(feature = "otel")]
    let handler = opentelemetry::trace::FutureExt::with_context(handler, at.otel.clone());
    let fut = logs::CURRENT_TASK.scope(target, tracing::Instrument::instrument(handler, span));
    // Biased: the task is polled first, so it observes its own cancellation (and can clean up)
    // before its future is dropped.
    tokio::select! {
        biased;
        r = fut => match r {
            // Cancelled while it finished: no result is expected any more.
            _ if at.token.is_cancelled() => None,
            Ok(r) => Some(r),
            Err(p) => Some(Err(TaskError::new(format!("the task panicked: {}", panic_text(&p))))),
        },
        _ = at.token.cancelled() => None,
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// Sends a step event. With `until_delivered`, keeps trying through outages until it lands or the
/// attempt is stale (invariant 3); a final the engine answers is noted for the sweep
/// (`reclaim.rs`), which sends it once more if the engine lost it.
pub(super) async fn send_event(
    core: &WorkerCore,
    a: &proto::AssignedAction,
    kind: E,
    payload: String,
    no_retry: bool,
    until_delivered: bool,
) {
    let req = proto::StepActionEvent {
        worker_id: String::new(),
        job_id: String::new(),
        job_run_id: a.job_run_id.clone(),
        task_id: a.task_id.clone(),
        task_run_external_id: a.task_run_external_id.clone(),
        action_id: a.action_id.clone(),
        event_timestamp: None,
        event_type: kind as i32,
        event_payload: payload,
        retry_count: Some(a.retry_count),
        should_not_retry: no_retry.then_some(true),
    };
    // Sent until delivered, never again once answered: the real engine v0.104.9 takes a second
    // COMPLETED of a task whose DAG child exists for a replay, fails it ("could not acquire
    // advisory lock for replaying tasks") and strands the whole group of queue messages it read
    // with it (chaos run long4: 113 final events sent again after a PostgreSQL restart, 52 DAG
    // runs stalled). A completion the engine loses after answering it is its own loss: the
    // attempt times out and is retried (at-least-once).
    let final_event = matches!(kind, E::StepEventTypeCompleted | E::StepEventTypeFailed);
    if send_step_event(core, &req, until_delivered).await && final_event && until_delivered {
        core.reclaim.answered(&a.workflow_run_id, req);
    }
}

/// Sends `req` (its worker id and timestamp set at each attempt); whether the engine answered.
pub(super) async fn send_step_event(
    core: &WorkerCore,
    req: &proto::StepActionEvent,
    until_delivered: bool,
) -> bool {
    const PATH: &str = "/Dispatcher/SendStepActionEvent";
    deliver(
        core,
        &req.task_run_external_id,
        until_delivered,
        |worker_id| {
            let req = proto::StepActionEvent {
                worker_id,
                event_timestamp: Some(proto::timestamp_now()),
                ..req.clone()
            };
            async move {
                let client = core.conn.dispatcher();
                core.conn
                    .call(PATH, &client, &req, |mut c, r| async move {
                        c.send_step_action_event(r).await
                    })
                    .await
                    .map(|_| ())
            }
        },
    )
    .await
}

/// Sends one event for members of a batch (`items`: task run id and payload). With
/// `until_delivered`, keeps trying as [`send_event`] does.
async fn send_batch_event(
    core: &WorkerCore,
    a: &proto::AssignedAction,
    kind: E,
    items: &[(String, String)],
    no_retry: bool,
    until_delivered: bool,
) {
    const PATH: &str = "/Dispatcher/SendBatchActionEvent";
    if items.is_empty() {
        return;
    }
    let batch = a.batch_id.clone().unwrap_or_default();
    let _ = deliver(core, &batch, until_delivered, |worker_id| {
        let req = proto::BatchActionEvent {
            worker_id,
            job_id: String::new(),
            action_id: a.action_id.clone(),
            batch_id: a.batch_id.clone(),
            event_timestamp: Some(proto::timestamp_now()),
            event_type: kind as i32,
            items: items
                .iter()
                .map(|(id, payload)| proto::BatchActionEventItem {
                    task_run_external_id: id.clone(),
                    event_payload: payload.clone(),
                    retry_count: None,
                    should_not_retry: no_retry.then_some(true),
                })
                .collect(),
        };
        async move {
            let client = core.conn.dispatcher();
            core.conn
                .call(PATH, &client, &req, |mut c, r| async move {
                    c.send_batch_action_event(r).await
                })
                .await
                .map(|_| ())
        }
    })
    .await;
}

/// Sends with `send` (given the worker id). With `until_delivered`, keeps trying through
/// outages until it lands, the engine refuses it, or the attempt is stale (no heartbeat for
/// [`STALE_AFTER`]: the engine has reassigned it); `what` names it in the log. Whether the
/// engine answered.
async fn deliver<F, Fut>(core: &WorkerCore, what: &str, until_delivered: bool, mut send: F) -> bool
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let started = tokio::time::Instant::now();
    loop {
        let worker_id = core.identity.get().unwrap_or_default();
        let e = match send(worker_id).await {
            Ok(()) => return true,
            Err(e) => e,
        };
        if !until_delivered
            || matches!(
                e.outcome(),
                Outcome::Rejected | Outcome::Closed | Outcome::Cancelled | Outcome::Invalid
            )
        {
            if until_delivered {
                tracing::warn!(task = %what, error = %e, "step event not delivered");
            }
            return false;
        }
        let last_ok = *core.identity.heartbeat_ok.borrow();
        let silent_for = last_ok
            .map(|t| t.elapsed())
            .unwrap_or_else(|| started.elapsed());
        if silent_for >= STALE_AFTER && started.elapsed() >= STALE_AFTER {
            tracing::warn!(task = %what, "giving up a step event: no heartbeat for 30 s, the engine has reassigned the attempt");
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(REDELIVER_PAUSE) => {}
            _ = core.conn.lifecycle().cancelled() => return false,
        }
    }
}

/// One member of a `START_BATCH` assignment, as its payload carries it.
#[derive(serde::Deserialize)]
struct BatchItem {
    workflow_run_id: String,
    payload: serde_json::Value,
}

/// The members of a `START_BATCH` payload (task run id, run id, input), in task-run-id order.
fn batch_members(payload: &str) -> Result<Vec<(String, String, serde_json::Value)>, String> {
    let items: std::collections::BTreeMap<String, BatchItem> = serde_json::from_str(payload)
        .map_err(|e| format!("the engine's batch payload cannot be read: {e}"))?;
    Ok(items
        .into_iter()
        .map(|(id, item)| {
            let input = item
                .payload
                .get("input")
                .cloned()
                .unwrap_or(serde_json::Value::Object(Default::default()));
            (id, item.workflow_run_id, input)
        })
        .collect())
}

/// Runs one batch: every member is STARTED, the batch handler runs once, and each member gets
/// its own output (COMPLETED) or the batch's error (FAILED) in one event per kind
/// (`task/batch.rs` invariants).
async fn execute_batch(
    core: &Arc<WorkerCore>,
    action: proto::AssignedAction,
    key: RunningKey,
    token: CancellationToken,
    slot: SlotPermit,
) {
    let members = match batch_members(&action.action_payload) {
        Ok(m) => m,
        Err(why) => {
            tracing::warn!(batch = %key.0, "{why}");
            core.ended(&key);
            return;
        }
    };
    let ids: Vec<(String, String)> = members
        .iter()
        .map(|(id, _, _)| (id.clone(), String::new()))
        .collect();
    let n = members.len() as u64;
    core.counters.started.fetch_add(n, Ordering::Relaxed);
    {
        let (core2, action2, ids2) = (core.clone(), action.clone(), ids.clone());
        core.tracker.spawn(async move {
            send_batch_event(
                &core2,
                &action2,
                E::StepEventTypeStarted,
                &ids2,
                false,
                false,
            )
            .await;
        });
    }
    let handler = core
        .handlers
        .lock()
        .get(&action.action_id)
        .cloned()
        .filter(|h| h.options.batch.is_some());
    let first = members.first().map(|m| m.0.clone()).unwrap_or_default();
    let wire: Vec<serde_json::Value> = members
        .iter()
        .map(|(id, run, input)| serde_json::json!({"task_run_id": id, "run_id": run, "input": input}))
        .collect();
    let mut batch_action = action.clone();
    batch_action.action_payload = serde_json::json!({ "input": wire }).to_string();
    let prepared = prepare(core, handler, Arc::new(batch_action), &token, None, slot);
    let attempt = Attempt {
        action: &action,
        task_run_id: &first,
        token: &token,
        #[cfg(feature = "otel")]
        otel: opentelemetry::Context::current(),
    };
    let Some(result) = run_attempt(core, attempt, prepared).await else {
        core.counters.cancelled.fetch_add(n, Ordering::Relaxed);
        core.ended(&key);
        return;
    };
    let (mut done, mut failed, mut no_retry) = (Vec::new(), Vec::new(), false);
    match result {
        Ok(serde_json::Value::Array(outs)) if outs.len() == members.len() => {
            for ((id, _, _), out) in members.iter().zip(outs) {
                let out = out.to_string();
                let max = super::max_output_bytes(core.conn.config());
                if out.len() > max {
                    // Not retried: the same input gives the same output.
                    no_retry = true;
                    failed.push((id.clone(), format!(
                        "the task's output is {} bytes, over the {max} byte limit of a message; return less, or store it elsewhere and return a reference",
                        out.len()
                    )));
                } else {
                    done.push((id.clone(), out));
                }
            }
        }
        Ok(_) => {
            no_retry = true;
            let why = "the batch handler did not answer one output per member";
            failed = ids
                .iter()
                .map(|(id, _)| (id.clone(), why.to_string()))
                .collect();
        }
        Err(e) => {
            no_retry = !e.retryable;
            failed = ids
                .iter()
                .map(|(id, _)| (id.clone(), e.message.clone()))
                .collect();
        }
    }
    core.counters
        .completed
        .fetch_add(done.len() as u64, Ordering::Relaxed);
    core.counters
        .failed
        .fetch_add(failed.len() as u64, Ordering::Relaxed);
    send_batch_event(core, &action, E::StepEventTypeCompleted, &done, false, true).await;
    send_batch_event(
        core,
        &action,
        E::StepEventTypeFailed,
        &failed,
        no_retry,
        true,
    )
    .await;
    core.ended(&key);
}

#[cfg(test)]
mod tests {
    #[test]
    fn starts_waiting_for_a_slot_are_bounded_far_above_the_slots() {
        use super::waiting_bound;
        assert_eq!(waiting_bound(1), 1_024, "a one-slot worker still reads on");
        assert_eq!(waiting_bound(100), 1_600);
        assert_eq!(waiting_bound(usize::MAX), usize::MAX, "no overflow");
    }
}
