//! What subscribers see: the run and task events the state's changes make, handed to the
//! subscriptions (`subscriptions.rs` keeps who follows what, and its invariants).

use crate::hub::State;
use crate::parse::timestamp;
use hatchet_runtime::protocol as proto;

impl State {
    pub(crate) fn track_metadata_subscribers(&mut self, run_id: &str) {
        let meta = &self.runs[run_id].additional_metadata;
        self.subscriptions.track(run_id, meta);
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
    pub(crate) fn publish_event(&self, run_id: &str, ev: proto::WorkflowEvent) {
        self.subscriptions.publish(run_id, &ev);
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
        let completed = kind == proto::ResourceEventType::Completed;
        self.subscriptions.publish_run_end(run_id, &base, completed);
    }
}
