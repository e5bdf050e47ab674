//! Authenticated clients of the generated stubs, for tests that speak the protocol directly
//! (below the runtime): what a raw peer, or an official SDK, would send.
//!
//! The channel dials lazily, so building clients never blocks on the engine.

use hatchet_runtime::protocol::{self as proto, v1};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct BearerAuth(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl std::fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerAuth(<redacted>)")
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// A channel with the engine's token on every call.
pub type AuthChannel = InterceptedService<Channel, BearerAuth>;

/// One channel to an engine and the token interceptor; each accessor makes a cheap client on it.
#[derive(Clone)]
pub struct RawClients {
    /// The (lazily connected) channel.
    pub channel: Channel,
    /// Adds `authorization: Bearer <token>` to every call.
    pub auth: BearerAuth,
}

impl std::fmt::Debug for RawClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawClients").finish_non_exhaustive()
    }
}

impl RawClients {
    /// Clients for the plaintext engine at `grpc_uri` (`http://host:port`), presenting `token`.
    ///
    /// # Errors
    /// The address is not a URI, or the token is not a valid header value.
    pub fn new(grpc_uri: &str, token: &str) -> Result<Self, String> {
        let endpoint = Endpoint::from_shared(grpc_uri.to_string())
            .map_err(|e| format!("the engine's address {grpc_uri} is not a URI: {e}"))?
            .tcp_nodelay(true);
        let bearer = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_string())?;
        Ok(RawClients {
            channel: endpoint.connect_lazy(),
            auth: BearerAuth(bearer),
        })
    }

    /// `Dispatcher` (workers, listeners, step events).
    pub fn dispatcher(&self) -> proto::dispatcher_client::DispatcherClient<AuthChannel> {
        proto::dispatcher_client::DispatcherClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// `WorkflowService` (legacy triggers, schedules, rate limits).
    pub fn workflows(&self) -> proto::workflow_service_client::WorkflowServiceClient<AuthChannel> {
        proto::workflow_service_client::WorkflowServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// `EventsService` (push, logs, stream events).
    pub fn events(&self) -> proto::events_service_client::EventsServiceClient<AuthChannel> {
        proto::events_service_client::EventsServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// `v1.AdminService` (PutWorkflow, run details, cancel and replay).
    pub fn admin(&self) -> v1::admin_service_client::AdminServiceClient<AuthChannel> {
        v1::admin_service_client::AdminServiceClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// `v1.V1Dispatcher` (the DurableTask stream).
    pub fn durable(&self) -> v1::v1_dispatcher_client::V1DispatcherClient<AuthChannel> {
        v1::v1_dispatcher_client::V1DispatcherClient::with_interceptor(
            self.channel.clone(),
            self.auth.clone(),
        )
    }

    /// Registers workflow `name` of tasks `(readable_id, parents, retries, timeout)`, each with
    /// the action `name:readable_id`, triggered by the events `triggers`.
    ///
    /// # Errors
    /// The engine's answer to PutWorkflow.
    pub async fn put_tasks(
        &self,
        name: &str,
        tasks: &[(&str, &[&str], i32, &str)],
        triggers: &[&str],
    ) -> Result<(), tonic::Status> {
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
            .map(|_| ())
    }

    /// Opens a DurableTask stream: its request sender and its responses.
    ///
    /// # Errors
    /// The engine refused the stream.
    pub async fn durable_stream(
        &self,
    ) -> Result<
        (
            tokio::sync::mpsc::UnboundedSender<v1::DurableTaskRequest>,
            tonic::Streaming<v1::DurableTaskResponse>,
        ),
        tonic::Status,
    > {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let responses = self
            .durable()
            .durable_task(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok((tx, responses))
    }

    /// Restores an evicted task; whether the engine requeued it.
    ///
    /// # Errors
    /// The engine's answer to RestoreEvictedTask.
    pub async fn restore(&self, task: &str) -> Result<bool, tonic::Status> {
        Ok(self
            .dispatcher()
            .restore_evicted_task(proto::RestoreEvictedTaskRequest {
                task_run_external_id: task.to_string(),
            })
            .await?
            .into_inner()
            .requeued)
    }
}
