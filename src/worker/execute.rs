//! Running an assigned action: slots, dispatch, one attempt's execution in its own task, and
//! its step events (invariants 2 to 5).

use super::*;

/// The worker's slot bounds: ordinary tasks and durable tasks each have their own (as the
/// engine counts them), and STARTs waiting for a permit are bounded too.
pub(super) struct Slots {
    pub(super) ordinary: Arc<Semaphore>,
    pub(super) durable: Arc<Semaphore>,
    /// STARTs received and not yet running. Beyond it (an engine assigning past the slots) the
    /// stream waits: backpressure, not memory.
    pub(super) waiting: Arc<Semaphore>,
}

/// A running attempt's slot permit: held while it runs, given back early by
/// [`Context::release_slot`].
pub(crate) type SlotPermit = Arc<parking_lot::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>;

/// Reads the actions and acts on each at once: a START waits for its slot in its own task, so a
/// CANCEL (or any other action) is never stuck behind it while every slot is busy (the real
/// engine drops a CANCEL it cannot send).
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
        match ActionType::try_from(action.action_type) {
            Ok(ActionType::StartStepRun) => {
                let ticket = tokio::select! {
                    t = slots.waiting.clone().acquire_owned() => match t { Ok(t) => t, Err(_) => break },
                    _ = core.stop.cancelled() => break,
                };
                let token = core.stop.child_token();
                let key = running_key(&action);
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
                    execute(&core2, action, token, slot.clone()).await;
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
    let task_id = running_key(&action);
    let handler = core.handlers.lock().get(&action.action_id).cloned();
    let durable = handler.as_ref().filter(|h| h.durable).map(|_| {
        let home = core.listeners.durable.clone();
        DurableClient {
            registry: home.kind.registry.clone(),
            ensure: Arc::new(move || home.ensure()),
        }
    });
    core.counters.started.fetch_add(1, Ordering::Relaxed);
    // STARTED goes out alongside the handler instead of before it: the task does not wait a
    // round trip to begin, and the engine ignores a STARTED that arrives after the attempt's
    // final event (a finished attempt only moves forward).
    {
        let (core2, action2) = (core.clone(), action.clone());
        core.tracker.spawn(async move {
            send_event(
                &core2,
                &action2,
                E::StepEventTypeStarted,
                String::new(),
                false,
                false,
            )
            .await;
        });
    }
    #[cfg(feature = "otel")]
    let otel_cx = {
        let metadata = action
            .additional_metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        crate::otel::task_context(
            &action.action_id,
            &action.workflow_run_id,
            &action.task_run_external_id,
            action.retry_count,
            &metadata,
        )
    };
    let ctx = match handler {
        None => Err(TaskError::non_retryable(format!(
            "this worker has no handler for action {}",
            action.action_id
        ))),
        Some(h) => Context::new(
            action.clone(),
            h.about(),
            token.clone(),
            core.clone(),
            durable,
            slot,
        )
        .map(|ctx| (ctx, h.handler.clone()))
        .map_err(TaskError::non_retryable),
    };
    let result = match ctx {
        Err(e) => Err(e),
        Ok((ctx, run)) => {
            // One span per execution; the task's own `tracing` events can be forwarded to the
            // engine as its log lines (`logs::TaskLogLayer`).
            let span = tracing::info_span!(
                "task",
                workflow = %action.action_id.split(':').next().unwrap_or_default(),
                task = %action.action_id,
                run_id = %action.workflow_run_id,
                task_run_id = %action.task_run_external_id,
                retry_count = action.retry_count,
                worker_id = %core.identity.get().unwrap_or_default(),
            );
            let target = logs::TaskLogTarget {
                queue: core.log_queue().clone(),
                task_run_id: action.task_run_external_id.clone(),
                retry_count: action.retry_count,
            };
            let handler = std::panic::AssertUnwindSafe(run(ctx.clone())).catch_unwind();
            #[cfg(feature = "otel")]
            let handler = opentelemetry::trace::FutureExt::with_context(handler, otel_cx.clone());
            let fut =
                logs::CURRENT_TASK.scope(target, tracing::Instrument::instrument(handler, span));
            // Biased: the task is polled first, so it observes its own cancellation (and can
            // clean up) before its future is dropped.
            tokio::select! {
                biased;
                r = fut => match r {
                    // Cancelled while it finished (CANCEL_STEP_RUN, an eviction, shutdown): the
                    // engine no longer expects this attempt's result, so none is reported.
                    _ if token.is_cancelled() => {
                        core.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                        core.ended(&task_id);
                        return;
                    }
                    Ok(r) => r,
                    Err(p) => Err(TaskError::new(format!("the task panicked: {}", panic_text(&p)))),
                },
                _ = token.cancelled() => {
                    // Cancelled (CANCEL_STEP_RUN or shutdown): nothing is reported, as SDKs do.
                    core.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    core.ended(&task_id);
                    return;
                }
            }
        }
    };
    #[cfg(feature = "otel")]
    crate::otel::task_done(&otel_cx, result.as_ref().err().map(|e| e.message.as_str()));
    let (kind, payload, no_retry) = match result {
        Ok(v) => {
            let out = v.to_string();
            if out.len() > MAX_OUTPUT_BYTES {
                let msg = format!(
                    "the task's output is {} bytes, over the {} byte limit of a message; return less, or store it elsewhere and return a reference",
                    out.len(),
                    MAX_OUTPUT_BYTES
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
    send_event(core, &action, kind, payload, no_retry, true).await;
    core.ended(&task_id);
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// Sends a step event. With `until_delivered`, keeps trying through outages until it lands or the
/// attempt is stale (invariant 3).
async fn send_event(
    core: &WorkerCore,
    a: &proto::AssignedAction,
    kind: E,
    payload: String,
    no_retry: bool,
    until_delivered: bool,
) {
    const PATH: &str = "/Dispatcher/SendStepActionEvent";
    let started = tokio::time::Instant::now();
    loop {
        let worker_id = core.identity.get().unwrap_or_default();
        let req = proto::StepActionEvent {
            worker_id,
            job_id: String::new(),
            job_run_id: a.job_run_id.clone(),
            task_id: a.task_id.clone(),
            task_run_external_id: a.task_run_external_id.clone(),
            action_id: a.action_id.clone(),
            event_timestamp: Some(proto::timestamp_now()),
            event_type: kind as i32,
            event_payload: payload.clone(),
            retry_count: Some(a.retry_count),
            should_not_retry: no_retry.then_some(true),
        };
        let client = core.conn.dispatcher();
        let r = core
            .conn
            .call(PATH, &client, &req, |mut c, r| async move {
                c.send_step_action_event(r).await
            })
            .await
            .map(|_| ());
        let e = match r {
            Ok(()) => return,
            Err(e) => e,
        };
        if !until_delivered
            || matches!(
                e.outcome(),
                Outcome::Rejected | Outcome::Closed | Outcome::Cancelled | Outcome::Invalid
            )
        {
            if until_delivered {
                tracing::warn!(task = %a.task_run_external_id, error = %e, "step event not delivered");
            }
            return;
        }
        let last_ok = *core.identity.last_heartbeat_ok.lock();
        let silent_for = last_ok
            .map(|t| t.elapsed())
            .unwrap_or_else(|| started.elapsed());
        if silent_for >= STALE_AFTER && started.elapsed() >= STALE_AFTER {
            tracing::warn!(task = %a.task_run_external_id, "giving up a step event: no heartbeat for 30 s, the engine has reassigned the attempt");
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(REDELIVER_PAUSE) => {}
            _ = core.conn.lifecycle().cancelled() => return,
        }
    }
}
