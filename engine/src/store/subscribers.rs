//! What subscribers see: run and task events on `SubscribeToWorkflowEvents` (by run id or by
//! metadata), and the end of a run.

use serde_json::Value;

use crate::core::*;
use crate::rules::*;
use crate::store::model::*;
use hatchet_protocol as proto;

impl State {
    pub(crate) fn track_metadata_subscribers(&mut self, run_id: &str) {
        let meta = self.runs[run_id].additional_metadata.clone();
        for sub in self.event_subs.values_mut() {
            if let EventFilter::Metadata {
                key,
                value,
                tracked,
            } = &mut sub.filter
            {
                let matches = meta.get(key.as_str()).is_some_and(|v| match v {
                    Value::String(s) => s == value,
                    other => &other.to_string() == value,
                });
                if matches {
                    tracked.insert(run_id.to_string());
                }
            }
        }
    }

    pub(crate) fn emit_task_event(
        &self,
        tid: &str,
        kind: proto::ResourceEventType,
        payload: String,
    ) {
        let Some(t) = self.tasks.get(tid) else { return };
        let ev = proto::WorkflowEvent {
            workflow_run_id: t.run_id.clone(),
            resource_type: proto::ResourceType::StepRun as i32,
            event_type: kind as i32,
            resource_id: t.id.clone(),
            event_timestamp: Some(timestamp(self.clock.system_now())),
            event_payload: payload,
            hangup: false,
            task_retries: Some(t.retries),
            retry_count: Some(t.retry_count),
            event_index: None,
        };
        self.publish_event(&t.run_id, ev);
    }

    /// Sends `ev` to every subscriber following `run_id`.
    pub fn publish_event(&self, run_id: &str, ev: proto::WorkflowEvent) {
        for sub in self.event_subs.values() {
            let follows = match &sub.filter {
                EventFilter::Run(id) => id == run_id,
                EventFilter::Metadata { tracked, .. } => tracked.contains(run_id),
            };
            if follows {
                let _ = sub.tx.send(Ok(ev.clone()));
            }
        }
    }

    pub(crate) fn emit_run_finished(&mut self, run_id: &str, kind: proto::ResourceEventType) {
        let base = proto::WorkflowEvent {
            workflow_run_id: run_id.to_string(),
            resource_type: proto::ResourceType::WorkflowRun as i32,
            event_type: kind as i32,
            resource_id: run_id.to_string(),
            event_timestamp: Some(timestamp(self.clock.system_now())),
            event_payload: String::new(),
            hangup: false,
            task_retries: None,
            retry_count: None,
            event_index: None,
        };
        let mut done = Vec::new();
        for (id, sub) in self.event_subs.iter_mut() {
            match &mut sub.filter {
                EventFilter::Run(r) if r == run_id => {
                    let _ = sub.tx.send(Ok(proto::WorkflowEvent {
                        hangup: true,
                        ..base.clone()
                    }));
                    done.push(*id);
                }
                EventFilter::Metadata { tracked, .. } if tracked.contains(run_id) => {
                    if kind == proto::ResourceEventType::Completed {
                        tracked.remove(run_id);
                    }
                    let hangup = tracked.is_empty();
                    let _ = sub.tx.send(Ok(proto::WorkflowEvent {
                        hangup,
                        ..base.clone()
                    }));
                    if hangup {
                        done.push(*id);
                    }
                }
                _ => {}
            }
        }
        for id in done {
            self.event_subs.remove(&id);
        }
    }
}
