//! The five gRPC services of the development engine, each a thin adapter over [`Engine`].

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::{Request, Response, Status};

use crate::api::streams::{OnDrop, Out, guarded};
use crate::faults::Faults;
use crate::hub::Engine;
use crate::parse::{parse_json, parse_metadata, timestamp};
use crate::time::schedules::Planned;
use hatchet_runtime::protocol::{self as proto, v1};

/// Shared by every service.
#[derive(Debug, Clone)]
pub(crate) struct Svc {
    pub engine: Arc<Engine>,
    pub faults: Faults,
}

type R<T> = Result<Response<T>, Status>;

/// The targets of a CancelTasks or ReplayTasks request.
fn targets(
    ids: Vec<String>,
    filter: Option<v1::TasksFilter>,
) -> Result<crate::store::control::Targets, Status> {
    Ok(crate::store::control::Targets {
        ids,
        filter: filter
            .as_ref()
            .map(crate::store::control::RunFilter::from_proto)
            .transpose()?,
    })
}

fn ok<T>(t: T) -> R<T> {
    Ok(Response::new(t))
}

#[tonic::async_trait]
impl proto::dispatcher_server::Dispatcher for Svc {
    async fn register(
        &self,
        r: Request<proto::WorkerRegisterRequest>,
    ) -> R<proto::WorkerRegisterResponse> {
        ok(self.engine.register(r.into_inner())?)
    }

    type ListenStream = Out<proto::AssignedAction>;
    async fn listen(&self, r: Request<proto::WorkerListenRequest>) -> R<Self::ListenStream> {
        self.open_listen(r.into_inner().worker_id, true, "/Dispatcher/Listen")
    }

    type ListenV2Stream = Out<proto::AssignedAction>;
    async fn listen_v2(&self, r: Request<proto::WorkerListenRequest>) -> R<Self::ListenV2Stream> {
        self.open_listen(r.into_inner().worker_id, false, "/Dispatcher/ListenV2")
    }

    async fn heartbeat(&self, r: Request<proto::HeartbeatRequest>) -> R<proto::HeartbeatResponse> {
        self.engine.heartbeat(&r.into_inner().worker_id)?;
        ok(proto::HeartbeatResponse {})
    }

    type SubscribeToWorkflowEventsStream = Out<proto::WorkflowEvent>;
    async fn subscribe_to_workflow_events(
        &self,
        r: Request<proto::SubscribeToWorkflowEventsRequest>,
    ) -> R<Self::SubscribeToWorkflowEventsStream> {
        let plan = self
            .faults
            .stream_plan("/Dispatcher/SubscribeToWorkflowEvents");
        match self.engine.open_event_subscription(&r.into_inner())? {
            None => ok(Box::pin(futures::stream::empty())),
            Some(rx) => ok(guarded(UnboundedReceiverStream::new(rx), (), plan)),
        }
    }

    type SubscribeToWorkflowRunsStream = Out<proto::WorkflowRunEvent>;
    async fn subscribe_to_workflow_runs(
        &self,
        r: Request<tonic::Streaming<proto::SubscribeToWorkflowRunsRequest>>,
    ) -> R<Self::SubscribeToWorkflowRunsStream> {
        let plan = self
            .faults
            .stream_plan("/Dispatcher/SubscribeToWorkflowRuns");
        let (sub, rx) = self.engine.open_run_subscription();
        let mut inbound = r.into_inner();
        let engine = self.engine.clone();
        tokio::spawn(async move {
            while let Some(Ok(req)) = inbound.next().await {
                engine.subscribe_run(sub, &req.workflow_run_id);
            }
            // The client's send side ended: the whole stream is torn down, as the engine does.
            engine.close_run_subscription(sub);
        });
        let engine = self.engine.clone();
        let guard = OnDrop::new(move || engine.close_run_subscription(sub));
        ok(guarded(UnboundedReceiverStream::new(rx), guard, plan))
    }

    async fn send_step_action_event(
        &self,
        r: Request<proto::StepActionEvent>,
    ) -> R<proto::ActionEventResponse> {
        ok(self.engine.step_event(&r.into_inner())?)
    }

    async fn send_batch_action_event(
        &self,
        r: Request<proto::BatchActionEvent>,
    ) -> R<proto::ActionEventResponse> {
        let r = r.into_inner();
        for item in &r.items {
            let ev = proto::StepActionEvent {
                worker_id: r.worker_id.clone(),
                task_run_external_id: item.task_run_external_id.clone(),
                event_type: r.event_type,
                event_payload: item.event_payload.clone(),
                retry_count: item.retry_count,
                should_not_retry: item.should_not_retry,
                event_timestamp: r.event_timestamp,
                ..Default::default()
            };
            self.engine.step_event(&ev)?;
        }
        ok(proto::ActionEventResponse {
            tenant_id: self.engine.tenant_id.clone(),
            worker_id: r.worker_id,
        })
    }

    async fn send_group_key_action_event(
        &self,
        _: Request<proto::GroupKeyActionEvent>,
    ) -> R<proto::ActionEventResponse> {
        Err(Status::unimplemented(
            "group key actions are not used by v1 engines",
        ))
    }

    async fn put_overrides_data(
        &self,
        _: Request<proto::OverridesData>,
    ) -> R<proto::OverridesDataResponse> {
        ok(proto::OverridesDataResponse {})
    }

    async fn unsubscribe(
        &self,
        r: Request<proto::WorkerUnsubscribeRequest>,
    ) -> R<proto::WorkerUnsubscribeResponse> {
        let r = r.into_inner();
        self.engine.unsubscribe(&r.worker_id);
        ok(proto::WorkerUnsubscribeResponse {
            tenant_id: self.engine.tenant_id.clone(),
            worker_id: r.worker_id,
        })
    }

    async fn refresh_timeout(
        &self,
        r: Request<proto::RefreshTimeoutRequest>,
    ) -> R<proto::RefreshTimeoutResponse> {
        let r = r.into_inner();
        let at = self
            .engine
            .refresh_timeout(&r.task_run_external_id, &r.increment_timeout_by)?;
        ok(proto::RefreshTimeoutResponse {
            timeout_at: Some(timestamp(at)),
        })
    }

    async fn release_slot(
        &self,
        r: Request<proto::ReleaseSlotRequest>,
    ) -> R<proto::ReleaseSlotResponse> {
        self.engine
            .release_slot(&r.into_inner().task_run_external_id)?;
        ok(proto::ReleaseSlotResponse {})
    }

    async fn restore_evicted_task(
        &self,
        r: Request<proto::RestoreEvictedTaskRequest>,
    ) -> R<proto::RestoreEvictedTaskResponse> {
        let id = r.into_inner().task_run_external_id;
        let requeued = self
            .engine
            .restore_evicted(&id)
            .ok_or_else(|| Status::not_found("task not found"))?;
        ok(proto::RestoreEvictedTaskResponse { requeued })
    }

    async fn upsert_worker_labels(
        &self,
        r: Request<proto::UpsertWorkerLabelsRequest>,
    ) -> R<proto::UpsertWorkerLabelsResponse> {
        let r = r.into_inner();
        self.engine.upsert_labels(&r.worker_id, &r.labels)?;
        ok(proto::UpsertWorkerLabelsResponse {
            tenant_id: self.engine.tenant_id.clone(),
            worker_id: r.worker_id,
        })
    }

    async fn get_version(
        &self,
        _: Request<proto::GetVersionRequest>,
    ) -> R<proto::GetVersionResponse> {
        ok(proto::GetVersionResponse {
            version: self.engine.version.clone(),
        })
    }
}

impl Svc {
    fn open_listen(
        &self,
        worker_id: String,
        legacy: bool,
        path: &str,
    ) -> R<Out<proto::AssignedAction>> {
        let plan = self.faults.stream_plan(path);
        let (sid, rx) = self.engine.open_session(&worker_id, legacy)?;
        let engine = self.engine.clone();
        let guard = OnDrop::new(move || engine.close_session(&worker_id, sid));
        // Every assignment names its tenant, as the real engine's dispatcher sends it (the
        // SDKs put it on their spans as `hatchet.tenant_id`).
        let tenant = self.engine.tenant_id.clone();
        let actions = tokio_stream::StreamExt::map(ReceiverStream::new(rx), move |m| {
            m.map(|mut a| {
                if a.tenant_id.is_empty() {
                    a.tenant_id.clone_from(&tenant);
                }
                a
            })
        });
        ok(guarded(actions, guard, plan))
    }
}

#[tonic::async_trait]
impl proto::events_service_server::EventsService for Svc {
    async fn push(&self, r: Request<proto::PushEventRequest>) -> R<proto::Event> {
        ok(self.engine.push(&r.into_inner())?)
    }

    async fn bulk_push(&self, r: Request<proto::BulkPushEventRequest>) -> R<proto::Events> {
        ok(proto::Events {
            events: self.engine.bulk_push(&r.into_inner().events)?,
        })
    }

    async fn replay_single_event(&self, _: Request<proto::ReplayEventRequest>) -> R<proto::Event> {
        Err(Status::unimplemented(
            "ReplaySingleEvent is not implemented",
        ))
    }

    async fn put_log(&self, r: Request<proto::PutLogRequest>) -> R<proto::PutLogResponse> {
        self.engine.put_log(&r.into_inner())?;
        ok(proto::PutLogResponse {})
    }

    async fn put_stream_event(
        &self,
        r: Request<proto::PutStreamEventRequest>,
    ) -> R<proto::PutStreamEventResponse> {
        self.engine.put_stream_event(&r.into_inner())?;
        ok(proto::PutStreamEventResponse {})
    }
}

#[tonic::async_trait]
impl proto::workflow_service_server::WorkflowService for Svc {
    async fn put_workflow(
        &self,
        _: Request<proto::PutWorkflowRequest>,
    ) -> R<proto::WorkflowVersion> {
        Err(Status::unimplemented("use v1.AdminService/PutWorkflow"))
    }

    async fn schedule_workflow(
        &self,
        r: Request<proto::ScheduleWorkflowRequest>,
    ) -> R<proto::WorkflowVersion> {
        let r = r.into_inner();
        let name = r.name.clone();
        if self.engine.view().workflow(&name).is_none_or(|w| w.deleted) {
            return Err(Status::not_found("workflow not found"));
        }
        let input = parse_json("input", &r.input)?;
        let metadata = parse_metadata(r.additional_metadata.as_deref())?;
        let planned = Planned {
            tenant: self.engine.tenant_id.clone(),
            workflow: r.name.clone(),
            input,
            metadata: serde_json::Value::Object(metadata),
            method: "API",
            priority: serde_json::Value::from(r.priority.unwrap_or(1)),
        };
        // Kept with the REST schedules (listed there too) and fired by the scheduler's pass.
        let times = r.schedules.iter().map(|t| {
            hatchet_runtime::protocol::calendar::from_unix_secs(t.seconds)
                + std::time::Duration::from_nanos(t.nanos.clamp(0, 999_999_999) as u64)
        });
        self.engine
            .add_schedules(&planned, times)
            .map_err(Status::invalid_argument)?;
        let st = self.engine.view();
        let wf = st
            .workflow(&name)
            .ok_or_else(|| Status::invalid_argument("workflow not found"))?;
        ok(proto::WorkflowVersion {
            id: wf.version_id.clone(),
            created_at: Some(timestamp(wf.created_at)),
            updated_at: Some(timestamp(wf.created_at)),
            version: String::new(),
            order: 0,
            workflow_id: wf.id.clone(),
            scheduled_workflows: Vec::new(),
        })
    }

    async fn trigger_workflow(
        &self,
        r: Request<v1::TriggerWorkflowRequest>,
    ) -> R<proto::TriggerWorkflowResponse> {
        let id = self.engine.trigger_from_client(r.into_inner())?;
        ok(proto::TriggerWorkflowResponse {
            workflow_run_id: id,
        })
    }

    async fn bulk_trigger_workflow(
        &self,
        r: Request<proto::BulkTriggerWorkflowRequest>,
    ) -> R<proto::BulkTriggerWorkflowResponse> {
        ok(proto::BulkTriggerWorkflowResponse {
            workflow_run_ids: self.engine.bulk_trigger(&r.into_inner().workflows)?,
        })
    }

    async fn put_rate_limit(
        &self,
        r: Request<proto::PutRateLimitRequest>,
    ) -> R<proto::PutRateLimitResponse> {
        self.engine.put_rate_limit(&r.into_inner())?;
        ok(proto::PutRateLimitResponse {})
    }
}

#[tonic::async_trait]
impl v1::admin_service_server::AdminService for Svc {
    async fn put_workflow(
        &self,
        r: Request<v1::CreateWorkflowVersionRequest>,
    ) -> R<v1::CreateWorkflowVersionResponse> {
        ok(self.engine.put_workflow(r.into_inner())?)
    }

    async fn cancel_tasks(&self, r: Request<v1::CancelTasksRequest>) -> R<v1::CancelTasksResponse> {
        let r = r.into_inner();
        ok(v1::CancelTasksResponse {
            cancelled_tasks: self.engine.cancel(targets(r.external_ids, r.filter)?)?,
        })
    }

    async fn replay_tasks(&self, r: Request<v1::ReplayTasksRequest>) -> R<v1::ReplayTasksResponse> {
        let r = r.into_inner();
        ok(v1::ReplayTasksResponse {
            replayed_tasks: self.engine.replay(targets(r.external_ids, r.filter)?)?,
        })
    }

    async fn trigger_workflow_run(
        &self,
        r: Request<v1::TriggerWorkflowRunRequest>,
    ) -> R<v1::TriggerWorkflowRunResponse> {
        let r = r.into_inner();
        let text = |b: Vec<u8>, f: &str| {
            String::from_utf8(b)
                .map_err(|_| Status::invalid_argument(format!("{f} is not UTF-8 JSON")))
        };
        let meta = text(r.additional_metadata, "additional_metadata")?;
        let req = v1::TriggerWorkflowRequest {
            name: r.workflow_name,
            input: text(r.input, "input")?,
            additional_metadata: (!meta.is_empty()).then_some(meta),
            priority: r.priority,
            ..Default::default()
        };
        ok(v1::TriggerWorkflowRunResponse {
            external_id: self.engine.trigger_from_client(req)?,
        })
    }

    async fn get_run_details(
        &self,
        r: Request<v1::GetRunDetailsRequest>,
    ) -> R<v1::GetRunDetailsResponse> {
        ok(self.engine.run_details(&r.into_inner().external_id)?)
    }

    async fn branch_durable_task(
        &self,
        r: Request<v1::BranchDurableTaskRequest>,
    ) -> R<v1::BranchDurableTaskResponse> {
        ok(self.engine.branch_durable_task(&r.into_inner())?)
    }
}

/// The order a batch of durable requests is handled in: as the real engine does, the worker's
/// registration first, in its place, and each run of requests between (which it handles
/// concurrently) newest first.
fn concurrent_order(batch: Vec<v1::DurableTaskRequest>) -> Vec<v1::DurableTaskRequest> {
    use v1::durable_task_request::Message as Req;
    let mut out = Vec::with_capacity(batch.len());
    let mut run = Vec::new();
    for req in batch {
        if matches!(
            req.message,
            Some(Req::WaitFor(_) | Req::Memo(_) | Req::TriggerRuns(_))
        ) {
            run.push(req);
        } else {
            out.extend(run.drain(..).rev());
            out.push(req);
        }
    }
    out.extend(run.into_iter().rev());
    out
}

#[tonic::async_trait]
impl v1::v1_dispatcher_server::V1Dispatcher for Svc {
    type DurableTaskStream = Out<v1::DurableTaskResponse>;
    async fn durable_task(
        &self,
        r: Request<tonic::Streaming<v1::DurableTaskRequest>>,
    ) -> R<Self::DurableTaskStream> {
        let plan = self.faults.stream_plan("/v1.V1Dispatcher/DurableTask");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let id = self.engine.durable_open(tx);
        let mut inbound = r.into_inner();
        let engine = self.engine.clone();
        tokio::spawn(async move {
            // The real engine handles a stream's requests concurrently, so requests that arrive
            // together may be numbered and answered in any order: those already buffered are
            // handled newest first (and a fault can widen the window).
            let mut open = true;
            while open {
                let Some(Ok(first)) = inbound.next().await else {
                    break;
                };
                let mut batch = vec![first];
                let window = engine.durable_collect_window_ms();
                let until = tokio::time::Instant::now() + Duration::from_millis(window);
                loop {
                    let next = if window == 0 {
                        inbound.next().now_or_never()
                    } else {
                        tokio::time::timeout_at(until, inbound.next()).await.ok()
                    };
                    match next {
                        None => break,
                        Some(Some(Ok(req))) => batch.push(req),
                        Some(_) => {
                            open = false;
                            break;
                        }
                    }
                }
                engine.durable_requests(id, concurrent_order(batch));
            }
            engine.durable_close(id);
        });
        let engine = self.engine.clone();
        let guard = OnDrop::new(move || engine.durable_close(id));
        ok(guarded(UnboundedReceiverStream::new(rx), guard, plan))
    }

    async fn register_durable_event(
        &self,
        r: Request<v1::RegisterDurableEventRequest>,
    ) -> R<v1::RegisterDurableEventResponse> {
        self.engine.legacy_register(&r.into_inner())?;
        ok(v1::RegisterDurableEventResponse {})
    }

    type ListenForDurableEventStream = Out<v1::DurableEvent>;
    async fn listen_for_durable_event(
        &self,
        r: Request<tonic::Streaming<v1::ListenForDurableEventRequest>>,
    ) -> R<Self::ListenForDurableEventStream> {
        let plan = self
            .faults
            .stream_plan("/v1.V1Dispatcher/ListenForDurableEvent");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let id = self.engine.legacy_listen_open(tx);
        let mut inbound = r.into_inner();
        let engine = self.engine.clone();
        tokio::spawn(async move {
            while let Some(Ok(req)) = inbound.next().await {
                engine.legacy_listen(id, req.task_id, req.signal_key);
            }
            engine.legacy_listen_close(id);
        });
        let engine = self.engine.clone();
        let guard = OnDrop::new(move || engine.legacy_listen_close(id));
        ok(guarded(UnboundedReceiverStream::new(rx), guard, plan))
    }
}

/// The OTLP trace collector, on the engine's gRPC port as on the real engine (the SDKs'
/// instrumentors export there with the client token).
#[tonic::async_trait]
impl proto::otlp::trace_service_server::TraceService for Svc {
    async fn export(
        &self,
        r: Request<proto::otlp::ExportTraceServiceRequest>,
    ) -> R<proto::otlp::ExportTraceServiceResponse> {
        self.engine.export_spans(&r.into_inner());
        ok(proto::otlp::ExportTraceServiceResponse {
            partial_success: None,
        })
    }
}
