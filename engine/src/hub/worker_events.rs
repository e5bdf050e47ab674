//! Worker events: what workers report of their tasks (started, completed, failed, logs,
//! refreshed timeouts, released slots).

use std::time::SystemTime;

use hatchet_runtime::protocol::{self as proto};
use serde_json::Value;
use tonic::Status as GrpcStatus;

use super::{Engine, check_uuid, go_uuid_error, unknown_task_run};
use crate::limits::{LOG_LEVELS, MAX_LOG_LINES_PER_TASK, MAX_LOG_MESSAGE_CHARS};
use crate::parse::{parse_duration, timestamp};
use crate::store::model::{LogLine, Status};

impl Engine {
    /// `Dispatcher/SendStepActionEvent`.
    pub(crate) fn step_event(
        &self,
        ev: &proto::StepActionEvent,
    ) -> Result<proto::ActionEventResponse, GrpcStatus> {
        use proto::StepActionEventType as E;
        // The real engine's words: its lookup quotes the id and the parse or query error.
        let task_id = &ev.task_run_external_id;
        if let Some(why) = go_uuid_error(task_id) {
            return Err(GrpcStatus::invalid_argument(format!(
                "invalid task external run id {task_id}: {why}"
            )));
        }
        let kind = E::try_from(ev.event_type)
            .map_err(|_| GrpcStatus::invalid_argument("unknown event_type"))?;
        let mut st = self.state.lock();
        let task = st.tasks.get(&ev.task_run_external_id).ok_or_else(|| {
            GrpcStatus::invalid_argument(format!(
                "invalid task external run id {task_id}: no rows in result set"
            ))
        })?;
        let retry_count = ev.retry_count.unwrap_or(task.retry_count);
        let stale = retry_count != task.retry_count || task.status().is_terminal();
        match kind {
            E::StepEventTypeUnknown => {
                return Err(GrpcStatus::invalid_argument("event_type UNKNOWN"));
            }
            E::StepEventTypeStarted | E::StepEventTypeAcknowledged => {
                if !stale && let Some(t) = st.tasks.get_mut(&ev.task_run_external_id) {
                    t.started_at.get_or_insert_with(|| self.clock.system_now());
                    t.answered = true;
                }
            }
            E::StepEventTypeCompleted
                if !stale && crate::faults::take_one(&st.switches.lose_answered_completions) => {}
            E::StepEventTypeCompleted if !stale => {
                let payload = if ev.event_payload.trim().is_empty() {
                    "{}"
                } else {
                    &ev.event_payload
                };
                match serde_json::from_str::<Value>(payload) {
                    Ok(_) if !payload.contains("\\u0000") => {
                        st.complete_task(&ev.task_run_external_id, payload.to_string());
                    }
                    Ok(_) => st.fail_attempt(
                        &ev.task_run_external_id,
                        "output contains \\u0000".into(),
                        false,
                    ),
                    Err(e) => st.fail_attempt(
                        &ev.task_run_external_id,
                        format!("output is not valid JSON: {e}"),
                        false,
                    ),
                }
            }
            E::StepEventTypeFailed if !stale => {
                st.fail_attempt(
                    &ev.task_run_external_id,
                    ev.event_payload.clone(),
                    ev.should_not_retry.unwrap_or(false),
                );
            }
            E::StepEventTypeCancelled if !stale => {
                st.cancel_task(&ev.task_run_external_id, "cancelled by the worker");
            }
            // The cancel of an attempt that had released its slot never reached its worker,
            // which finished the task: the real engine records the completion.
            E::StepEventTypeCompleted
                if task.status() == Status::Cancelled
                    && task.unlinked
                    && retry_count == task.retry_count
                    && serde_json::from_str::<Value>(&ev.event_payload).is_ok()
                    && !ev.event_payload.contains("\\u0000") =>
            {
                st.complete_late(&ev.task_run_external_id, ev.event_payload.clone());
            }
            _ => {} // stale or duplicate: ignored (invariant 2)
        }
        drop(st);
        self.wake.notify_one();
        Ok(proto::ActionEventResponse {
            tenant_id: self.tenant_id.clone(),
            worker_id: ev.worker_id.clone(),
        })
    }

    /// `Dispatcher/RefreshTimeout`.
    pub(crate) fn refresh_timeout(
        &self,
        task_id: &str,
        by: &str,
    ) -> Result<SystemTime, GrpcStatus> {
        let inc = parse_duration(by).ok_or_else(|| {
            GrpcStatus::invalid_argument("increment_timeout_by is not a duration")
        })?;
        let mut st = self.state.lock();
        let t = st
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| unknown_task_run(task_id))?;
        if t.status() != Status::Running {
            return Err(GrpcStatus::not_found("task is not running"));
        }
        let base = t.deadline.unwrap_or_else(|| self.clock.now());
        let at = base + inc;
        t.deadline = Some(at);
        let id = t.id.clone();
        st.deadlines.add(at, &id);
        Ok(self.clock.system_now() + at.saturating_duration_since(self.clock.now()))
    }

    /// `Dispatcher/ReleaseSlot`: accepted, and the slot stays counted until the attempt ends,
    /// as on the real engine (see `Switches::release_slot_frees`, which gives it back at once).
    /// Either way a running attempt loses its worker link, as there (see [`Task::unlinked`]).
    pub(crate) fn release_slot(&self, task_id: &str) -> Result<(), GrpcStatus> {
        let mut st = self.state.lock();
        let Some(t) = st.tasks.get_mut(task_id) else {
            return Err(unknown_task_run(task_id));
        };
        if t.status() == Status::Running {
            t.unlinked = true;
        }
        st.counters.slot_releases += 1;
        if !st.switches.release_slot_frees {
            return Ok(());
        }
        st.free_slot(task_id);
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    /// `EventsService/PutLog`, validated the way the real engine validates it.
    pub(crate) fn put_log(&self, req: &proto::PutLogRequest) -> Result<(), GrpcStatus> {
        check_uuid("task_run_external_id", &req.task_run_external_id)?;
        let length = req.message.chars().count();
        if !(1..=MAX_LOG_MESSAGE_CHARS).contains(&length) {
            return Err(GrpcStatus::invalid_argument(format!(
                "a log message must have 1 to {MAX_LOG_MESSAGE_CHARS} characters, got {length}"
            )));
        }
        let level = req.level.clone().unwrap_or_else(|| "INFO".into());
        if !LOG_LEVELS.contains(&level.as_str()) {
            return Err(GrpcStatus::invalid_argument(format!(
                "log level {level:?} is not one of {LOG_LEVELS:?}"
            )));
        }
        let metadata = if req.metadata.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(&req.metadata) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(GrpcStatus::invalid_argument(
                        "log metadata must be a JSON object",
                    ));
                }
            }
        };
        let mut st = self.state.lock();
        let t = st
            .tasks
            .get_mut(&req.task_run_external_id)
            .ok_or_else(|| unknown_task_run(&req.task_run_external_id))?;
        if t.logs.len() < MAX_LOG_LINES_PER_TASK {
            let retry_count = req.task_retry_count.unwrap_or(t.retry_count);
            // The sender's time when it names one (the real engine's too): lines read back
            // in the order they were written, whatever order they arrived in.
            let at = req
                .created_at
                .as_ref()
                .and_then(hatchet_runtime::protocol::system_time)
                .filter(|t| *t > SystemTime::UNIX_EPOCH)
                .unwrap_or_else(|| self.clock.system_now());
            t.logs.push(LogLine {
                at,
                level,
                message: req.message.clone(),
                metadata,
                retry_count,
            });
        }
        Ok(())
    }

    /// `EventsService/PutStreamEvent`: fans a chunk out to the run's event subscribers.
    pub(crate) fn put_stream_event(
        &self,
        req: &proto::PutStreamEventRequest,
    ) -> Result<(), GrpcStatus> {
        let st = self.state.lock();
        let t = st
            .tasks
            .get(&req.task_run_external_id)
            .ok_or_else(|| GrpcStatus::not_found("task not found"))?;
        let ev = proto::WorkflowEvent {
            workflow_run_id: t.run_id.clone(),
            resource_type: proto::ResourceType::StepRun as i32,
            event_type: proto::ResourceEventType::Stream as i32,
            resource_id: t.id.clone(),
            event_timestamp: Some(timestamp(self.clock.system_now())),
            event_payload: String::from_utf8_lossy(&req.message).into_owned(),
            hangup: false,
            task_retries: None,
            retry_count: Some(t.retry_count),
            event_index: req.event_index,
        };
        let run_id = t.run_id.clone();
        st.publish_event(&run_id, ev);
        Ok(())
    }
}
