//! Triggering: runs made by triggers, bulk triggers, children and events.

use hatchet_runtime::protocol::{self as proto, v1};
use serde_json::Value;
use tonic::Status as GrpcStatus;

use super::{Engine, TRIGGER, check_event, check_priority};
use crate::limits::MAX_BULK_EVENTS;
use crate::parse::{key_matches, new_id, timestamp};
use crate::parse::{parse_json, parse_metadata};
use crate::store::model::{StoredEvent, TriggerOpts};

impl Engine {
    /// A single trigger from a client (`TriggerWorkflow`, `TriggerWorkflowRun`): written now,
    /// or, under the `defer_trigger_writes` fault, answered now and written later.
    pub(crate) fn trigger_from_client(
        self: &std::sync::Arc<Self>,
        req: v1::TriggerWorkflowRequest,
    ) -> Result<String, GrpcStatus> {
        let deferred = {
            let st = self.state.lock();
            st.switches.defer_trigger_writes.filter(|_| {
                st.workflows
                    .live(&req.name)
                    .is_some_and(|wf| wf.idempotency.is_none())
            })
        };
        let Some(after) = deferred else {
            return self.trigger(&req, None);
        };
        parse_json("payload", &req.input)?;
        parse_metadata(req.additional_metadata.as_deref())?;
        check_priority(req.priority, TRIGGER)?;
        let id = new_id();
        let (engine, run_id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Err(e) = engine.trigger(&req, Some(run_id)) {
                tracing::warn!(workflow = %req.name, error = %e, "a deferred trigger failed");
            }
        });
        Ok(id)
    }

    /// Creates a run of `req.name` (TriggerWorkflow, the DurableTask stream's trigger_runs),
    /// under `run_id` when it was answered before (a deferred write).
    pub(crate) fn trigger(
        &self,
        req: &v1::TriggerWorkflowRequest,
        run_id: Option<String>,
    ) -> Result<String, GrpcStatus> {
        let input = parse_json("payload", &req.input)?;
        let meta = parse_metadata(req.additional_metadata.as_deref())?;
        check_priority(req.priority, TRIGGER)?;
        let mut st = self.state.lock();
        let id = st.create_run(
            &req.name,
            input,
            meta,
            TriggerOpts {
                parent_task: req.parent_task_run_external_id.clone(),
                child_index: req.child_index,
                child_key: req.child_key.clone(),
                priority: req.priority,
                event: None,
                desired_worker: req.desired_worker_id.clone(),
                desired_labels: crate::sched::placement::desired_labels(&req.desired_worker_labels),
                filter_payload: None,
                run_id,
            },
        );
        drop(st);
        match id {
            Ok(id) => {
                self.wake.notify_one();
                Ok(id)
            }
            // Answered with an id no run will have, as the real engine answers it.
            Err(e) if crate::answers::is_skipped_trigger(&e) => Ok(new_id()),
            Err(e) => Err(e),
        }
    }

    /// `EventsService/Push`: stores the event and starts every workflow it triggers.
    /// `WorkflowService/BulkTriggerWorkflow`: every item is checked first (JSON, priority), so
    /// one bad item refuses the whole call and creates nothing, as the real engine does; an
    /// item of a workflow the engine does not know is answered with an id, as a single trigger.
    pub(crate) fn bulk_trigger(
        &self,
        reqs: &[v1::TriggerWorkflowRequest],
    ) -> Result<Vec<String>, GrpcStatus> {
        for (i, r) in reqs.iter().enumerate() {
            let item = |e: GrpcStatus| {
                GrpcStatus::invalid_argument(format!("workflow {i}: {}", e.message()))
            };
            parse_json("payload", &r.input).map_err(item)?;
            parse_metadata(r.additional_metadata.as_deref()).map_err(item)?;
            check_priority(r.priority, TRIGGER).map_err(item)?;
        }
        // Every item is triggered; items that collide on the workflow's idempotency key are
        // answered together afterwards, as the real engine does.
        let (mut created, mut collisions) = (Vec::with_capacity(reqs.len()), Vec::new());
        for r in reqs {
            match self.trigger(r, None) {
                Ok(id) => created.push(id),
                Err(e) => match proto::idempotency_collision(&e) {
                    // Named by the id its run would have had, as the real engine names it.
                    Some(c) => collisions.push(v1::IdempotencyCollisionError {
                        colliding_run_external_id: new_id(),
                        ..c
                    }),
                    None => return Err(e),
                },
            }
        }
        if collisions.is_empty() {
            Ok(created)
        } else {
            Err(crate::answers::bulk_idempotency_collision(
                created, collisions,
            ))
        }
    }

    /// `EventsService/BulkPush`: 1 to 1,000 events, all checked before any is stored.
    pub(crate) fn bulk_push(
        &self,
        reqs: &[proto::PushEventRequest],
    ) -> Result<Vec<proto::Event>, GrpcStatus> {
        if reqs.is_empty() {
            return Err(GrpcStatus::invalid_argument("No events to ingest"));
        }
        if reqs.len() > MAX_BULK_EVENTS {
            return Err(GrpcStatus::invalid_argument(format!(
                "{} events is over maximum ({MAX_BULK_EVENTS})",
                reqs.len()
            )));
        }
        for r in reqs {
            check_event(r)?;
        }
        reqs.iter().map(|r| self.push(r)).collect()
    }

    pub(crate) fn push(&self, req: &proto::PushEventRequest) -> Result<proto::Event, GrpcStatus> {
        let (payload, meta) = check_event(req)?;
        let at = self.clock.system_now();
        let mut st = self.state.lock();
        let ev = st.events.record(StoredEvent {
            id: new_id(),
            key: req.key.clone(),
            payload: payload.clone(),
            at,
            seq: 0,
            scope: req.scope.clone(),
            metadata: meta.clone(),
            runs: Vec::new(),
            webhook: None,
        });
        let targets: Vec<(String, String)> = st
            .workflows
            .live_ones()
            .filter(|w| w.event_triggers.iter().any(|t| key_matches(t, &req.key)))
            .map(|w| (w.name.clone(), w.id.clone()))
            .collect();
        // Event-triggered runs carry the event's id and key in their metadata.
        let mut run_meta = meta.clone();
        run_meta.insert("hatchet__event_id".into(), Value::String(ev.id.clone()));
        run_meta.insert("hatchet__event_key".into(), Value::String(ev.key.clone()));
        let mut started = Vec::new();
        for (name, workflow_id) in targets {
            let decision = st.filters.decide(
                &workflow_id,
                req.scope.as_deref(),
                (&ev.key, &ev.id),
                &payload,
                &meta,
            );
            let payloads = match decision {
                crate::dag::filters::Decision::Once => vec![None],
                crate::dag::filters::Decision::PerFilter(p) => p.into_iter().map(Some).collect(),
            };
            for filter_payload in payloads {
                let run = st.create_run(
                    &name,
                    payload.clone(),
                    run_meta.clone(),
                    TriggerOpts {
                        event: Some((ev.id.clone(), ev.key.clone())),
                        priority: req.priority,
                        filter_payload,
                        ..TriggerOpts::default()
                    },
                );
                match run {
                    Ok(run) => started.push(run),
                    Err(e) if crate::answers::is_skipped_trigger(&e) => {}
                    // A run whose idempotency key is taken is not created, and the push is
                    // accepted: the real engine stores the event and answers it (one run).
                    Err(e) if e.code() == tonic::Code::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
        }
        st.events.set_runs(&ev.id, started);
        st.durable_event_pushed(&ev);
        st.conditions_event(&ev);
        drop(st);
        self.wake.notify_one();
        Ok(proto::Event {
            tenant_id: self.tenant_id.clone(),
            event_id: ev.id,
            key: ev.key,
            payload: req.payload.clone(),
            event_timestamp: Some(timestamp(at)),
            additional_metadata: req.additional_metadata.clone(),
            scope: req.scope.clone(),
        })
    }
}
