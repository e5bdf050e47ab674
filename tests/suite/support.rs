//! Shared helpers: a development engine with authenticated generated clients.

use std::time::Duration;

use futures::StreamExt as _;
use hatchet_runtime::engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::proto::{self, v1};
use hatchet_runtime::transport::{self, AuthInterceptor};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub type Ch = InterceptedService<Channel, AuthInterceptor>;

/// A running engine and clients for it.
pub struct H {
    pub engine: DevEngine,
    pub channel: Channel,
    pub auth: AuthInterceptor,
}

/// Waits up to 5 s for a stream item.
pub async fn next<T>(s: &mut tonic::Streaming<T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("a message within 5 s")
        .expect("stream open")
        .expect("message ok")
}

impl H {
    pub async fn new() -> H {
        Self::with_engine(
            DevEngine::start(DevEngineOptions::default())
                .await
                .expect("engine starts"),
        )
        .await
    }

    pub async fn with_engine(engine: DevEngine) -> H {
        let cfg = engine.client_config();
        let channel = transport::channel(&cfg).expect("channel");
        let auth = AuthInterceptor::new(&cfg).expect("auth");
        H {
            engine,
            channel,
            auth,
        }
    }

    pub fn dispatcher(&self) -> proto::dispatcher_client::DispatcherClient<Ch> {
        proto::dispatcher_client::DispatcherClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }
    pub fn workflows(&self) -> proto::workflow_service_client::WorkflowServiceClient<Ch> {
        proto::workflow_service_client::WorkflowServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }
    pub fn events(&self) -> proto::events_service_client::EventsServiceClient<Ch> {
        proto::events_service_client::EventsServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }
    pub fn admin(&self) -> v1::admin_service_client::AdminServiceClient<Ch> {
        v1::admin_service_client::AdminServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }
    pub fn durable(&self) -> v1::v1_dispatcher_client::V1DispatcherClient<Ch> {
        v1::v1_dispatcher_client::V1DispatcherClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// Opens a DurableTask stream: its request sender and its responses.
    pub async fn durable_stream(
        &self,
    ) -> (
        tokio::sync::mpsc::UnboundedSender<v1::DurableTaskRequest>,
        tonic::Streaming<v1::DurableTaskResponse>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let resp = self
            .durable()
            .durable_task(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .expect("open")
            .into_inner();
        (tx, resp)
    }

    /// Restores an evicted task; whether the engine requeued it.
    pub async fn restore(&self, task: &str) -> bool {
        self.dispatcher()
            .restore_evicted_task(proto::RestoreEvictedTaskRequest {
                task_run_external_id: task.to_string(),
            })
            .await
            .expect("restore")
            .into_inner()
            .requeued
    }

    /// Registers a workflow of tasks `(readable_id, parents, retries, timeout)`.
    pub async fn put(&self, name: &str, tasks: &[(&str, &[&str], i32, &str)], triggers: &[&str]) {
        let tasks = tasks
            .iter()
            .map(|(id, parents, retries, timeout)| v1::CreateTaskOpts {
                readable_id: id.to_string(),
                action: format!("{name}:{id}"),
                parents: parents.iter().map(|p| p.to_string()).collect(),
                retries: *retries,
                timeout: timeout.to_string(),
                ..Default::default()
            })
            .collect();
        self.admin()
            .put_workflow(v1::CreateWorkflowVersionRequest {
                name: name.into(),
                tasks,
                event_triggers: triggers.iter().map(|t| t.to_string()).collect(),
                ..Default::default()
            })
            .await
            .expect("put workflow");
    }

    /// Registers a worker for `actions` with `slots` default slots; returns its id.
    pub async fn register(&self, actions: &[String], slots: i32) -> String {
        self.dispatcher()
            .register(proto::WorkerRegisterRequest {
                worker_name: "test-worker".into(),
                actions: actions.to_vec(),
                slot_config: [("default".to_string(), slots)].into(),
                ..Default::default()
            })
            .await
            .expect("register")
            .into_inner()
            .worker_id
    }

    pub async fn listen(&self, worker_id: &str) -> tonic::Streaming<proto::AssignedAction> {
        let s = self
            .dispatcher()
            .listen_v2(proto::WorkerListenRequest {
                worker_id: worker_id.into(),
            })
            .await
            .expect("listen")
            .into_inner();
        self.heartbeat(worker_id).await.expect("heartbeat");
        s
    }

    pub async fn heartbeat(&self, worker_id: &str) -> Result<(), tonic::Status> {
        self.dispatcher()
            .heartbeat(proto::HeartbeatRequest {
                worker_id: worker_id.into(),
                heartbeat_at: None,
            })
            .await
            .map(|_| ())
    }

    pub async fn trigger(&self, name: &str, input: &str) -> String {
        self.workflows()
            .trigger_workflow(v1::TriggerWorkflowRequest {
                name: name.into(),
                input: input.into(),
                ..Default::default()
            })
            .await
            .expect("trigger")
            .into_inner()
            .workflow_run_id
    }

    pub async fn event(
        &self,
        worker_id: &str,
        a: &proto::AssignedAction,
        kind: proto::StepActionEventType,
        payload: &str,
    ) -> Result<(), tonic::Status> {
        self.dispatcher()
            .send_step_action_event(proto::StepActionEvent {
                worker_id: worker_id.into(),
                task_run_external_id: a.task_run_external_id.clone(),
                action_id: a.action_id.clone(),
                event_type: kind as i32,
                event_payload: payload.into(),
                retry_count: Some(a.retry_count),
                ..Default::default()
            })
            .await
            .map(|_| ())
    }

    /// Subscribes to `run_ids` on a fresh stream; returns the receiving side and the sender.
    pub async fn subscribe(
        &self,
        run_ids: &[String],
    ) -> (
        tonic::Streaming<proto::WorkflowRunEvent>,
        tokio::sync::mpsc::UnboundedSender<proto::SubscribeToWorkflowRunsRequest>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for id in run_ids {
            tx.send(proto::SubscribeToWorkflowRunsRequest {
                workflow_run_id: id.clone(),
            })
            .expect("send");
        }
        let s = self
            .dispatcher()
            .subscribe_to_workflow_runs(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .expect("subscribe")
            .into_inner();
        (s, tx)
    }
}
