//! Shared helpers: a development engine with authenticated generated clients.

use std::time::Duration;

use futures::StreamExt as _;
use hatchet_dev_engine::clients::RawClients;
use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::protocol::{self as proto, v1};

/// A running engine and raw clients for it (`h.dispatcher()`, `h.admin()`, ... through `Deref`).
pub struct H {
    pub engine: DevEngine,
    pub raw: RawClients,
}

impl std::ops::Deref for H {
    type Target = RawClients;
    fn deref(&self) -> &RawClients {
        &self.raw
    }
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
        let raw = engine.raw_clients().expect("clients");
        H { engine, raw }
    }

    /// Opens a DurableTask stream: its request sender and its responses.
    pub async fn durable_stream(
        &self,
    ) -> (
        tokio::sync::mpsc::UnboundedSender<v1::DurableTaskRequest>,
        tonic::Streaming<v1::DurableTaskResponse>,
    ) {
        self.raw.durable_stream().await.expect("open")
    }

    /// GetRunDetails of `run`, read raw.
    pub async fn details(&self, run: &str) -> v1::GetRunDetailsResponse {
        self.admin()
            .get_run_details(v1::GetRunDetailsRequest {
                external_id: run.to_string(),
            })
            .await
            .expect("details")
            .into_inner()
    }

    /// Restores an evicted task; whether the engine requeued it.
    pub async fn restore(&self, task: &str) -> bool {
        self.raw.restore(task).await.expect("restore")
    }

    /// Registers a workflow of tasks `(readable_id, parents, retries, timeout)`.
    pub async fn put(&self, name: &str, tasks: &[(&str, &[&str], i32, &str)], triggers: &[&str]) {
        self.raw
            .put_tasks(name, tasks, triggers)
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

    /// Heartbeats `worker_id` every `every` until the returned task is aborted.
    pub fn keep_beating(&self, worker_id: &str, every: Duration) -> tokio::task::JoinHandle<()> {
        let (mut d, wid) = (self.dispatcher(), worker_id.to_string());
        tokio::spawn(async move {
            loop {
                let _ = d
                    .heartbeat(proto::HeartbeatRequest {
                        worker_id: wid.clone(),
                        heartbeat_at: None,
                    })
                    .await;
                tokio::time::sleep(every).await;
            }
        })
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

    /// Completes assignment `a` of worker `worker_id` with output `payload`.
    pub async fn complete(&self, worker_id: &str, a: &proto::AssignedAction, payload: &str) {
        self.event(
            worker_id,
            a,
            proto::StepActionEventType::StepEventTypeCompleted,
            payload,
        )
        .await
        .expect("the completion is accepted");
    }

    /// Workflow `name` of one task `s` (execution timeout `timeout`, "" for the default), a
    /// worker for it with its listener, and one run of it, started: the worker, its listener,
    /// the run and its task's assignment.
    pub async fn one_started(
        &self,
        name: &str,
        timeout: &str,
    ) -> (
        String,
        tonic::Streaming<proto::AssignedAction>,
        String,
        proto::AssignedAction,
    ) {
        self.put(name, &[("s", &[], 0, timeout)], &[]).await;
        let wid = self.register(&[format!("{name}:s")], 2).await;
        let mut actions = self.listen(&wid).await;
        let run = self.trigger(name, "{}").await;
        let start = next(&mut actions).await;
        (wid, actions, run, start)
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
