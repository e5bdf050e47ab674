//! Registering workflows and running the worker.

use std::sync::Arc;

use ractor::ActorRef;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::RuntimeHandle;
use crate::error::Error;
use crate::runtime::typed::Registered;
use crate::worker::{WorkerMsg, WorkerOptions, Workflow};

impl crate::worker::Context {
    /// The runtime this task runs in, to trigger other workflows or read runs from a handler.
    /// Take it here rather than capturing a [`RuntimeHandle`] in the handler: the runtime owns
    /// its handlers, so a captured handle keeps it alive after your last one is dropped; this
    /// one lives as long as you hold it in the task.
    ///
    /// # Errors
    ///
    /// [`Outcome::Closed`](crate::error::Outcome::Closed) when the runtime is stopping (its last handle
    /// was dropped).
    pub fn runtime(&self) -> Result<RuntimeHandle, Error> {
        self.runtime_any()
            .and_then(|any| any.downcast::<super::Inner>().ok())
            .map(|inner| RuntimeHandle { inner })
            .ok_or_else(|| Error::closed("Context::runtime"))
    }
}

impl RuntimeHandle {
    fn worker(&self, op: &'static str) -> Result<ActorRef<WorkerMsg>, Error> {
        self.inner
            .tree
            .worker_ref
            .lock()
            .clone()
            .ok_or_else(|| self.inner.tree.gone(op))
    }

    /// Registers a standalone task ([`Task`](crate::worker::standalone::Task)) and returns its typed reference:
    /// `run` it with its input type, get its output type back.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::register`].
    pub async fn register_task<I, O>(
        &self,
        task: crate::worker::standalone::Task<I, O>,
    ) -> Result<crate::runtime::typed::WorkflowRef<I, O>, Error>
    where
        I: Serialize + serde::de::DeserializeOwned + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
    {
        let name = task.name().to_string();
        self.register(task.into_workflow())
            .await?
            .returning::<I, O>(&name)
    }

    /// Registers a workflow with the engine (PutWorkflow) and with this runtime's worker. A
    /// name this runtime has already registered is refused (`Invalid`, nothing sent): a second
    /// registration would silently replace the first one's handlers.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once the first poll has handed the workflow to the worker, dropping the
    /// future only loses the answer; PutWorkflow goes on, and a later `start_worker` waits for
    /// it and includes the workflow (a second `register` of it is then refused as above).
    pub async fn register(&self, mut workflow: Workflow) -> Result<Registered, Error> {
        workflow.apply_task_defaults();
        let worker = self.worker("register")?;
        let registered = Registered::new(&workflow, self.inner.client.clone());
        let name = workflow.name().to_string();
        let static_keys: Vec<String> = workflow.static_rate_limit_keys();
        let (tx, rx) = tokio::sync::oneshot::channel();
        worker
            .cast(WorkerMsg::Register(Box::new(workflow), tx))
            .map_err(|_| Error::closed("register"))?;
        match rx.await.map_err(|_| Error::closed("register"))? {
            Ok(()) => {
                self.inner.client.note_workflow(&name);
                Ok(registered)
            }
            // The real engine refuses a workflow naming a static rate limit that does not exist
            // with a bare INTERNAL: say what is the likely cause.
            Err(e)
                if !static_keys.is_empty()
                    && e.grpc_status()
                        .is_some_and(|s| s.code() == tonic::Code::Internal) =>
            {
                let hint = format!(
                    "the engine refused the workflow with INTERNAL; it names the static rate limit key(s) {static_keys:?}, which must exist before the workflow is registered: create them with RuntimeHandle::put_rate_limit, then register again"
                );
                Err(e.with_detail(hint))
            }
            Err(e) => Err(e),
        }
    }

    /// Starts the worker: registers it with the engine (Register) and starts taking work.
    /// Resolves with the worker id once the engine has accepted the registration, or fails with
    /// the registration's error: a refused token (UNAUTHENTICATED), PERMISSION_DENIED and
    /// INVALID_ARGUMENT fail at once; an unreachable engine fails after the bounded attempts of
    /// a synchronous path (docs/contract.md §3). Later re-registrations (the engine lost the worker
    /// row) happen in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that the start goes on without its caller (the worker starts, or its
    /// failure is logged); only the answer is lost.
    pub async fn start_worker(&self, opts: WorkerOptions) -> Result<String, Error> {
        let worker = self.worker("start worker")?;
        // The probes first: a port that cannot be bound fails the start before anything runs.
        if let Some(addr) = self.config().healthcheck
            && self.inner.ops_addr.lock().is_none()
        {
            let bound = super::ops::serve(
                Arc::downgrade(&self.inner),
                addr,
                self.inner.conn.lifecycle().clone(),
            )
                .await
                .map_err(|e| {
                    Error::new(crate::error::Outcome::Invalid, "start worker").with_detail(format!(
                        "cannot serve /health and /metrics on {addr}: {e}; free the port or set HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT"
                    ))
                })?;
            tracing::info!(%bound, "serving /health and /metrics");
            *self.inner.ops_addr.lock() = Some(bound);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        worker
            .cast(WorkerMsg::Start(opts, tx))
            .map_err(|_| Error::closed("start worker"))?;
        rx.await.map_err(|_| Error::closed("start worker"))?
    }

    /// Hands `value` to every task of this runtime: a task reads it with [`Context::state`]
    /// (`ctx.state::<T>()`), as axum handlers read `State<T>`, instead of an `Arc` cloned into
    /// each closure. One value per type: setting a type again replaces its value for the tasks
    /// that ask after that (a task holding the old one keeps it).
    ///
    /// [`Context::state`]: crate::worker::context::Context::state
    pub fn set_state<T: Send + Sync + 'static>(&self, value: T) {
        self.inner.tree.worker.state.set(value);
    }

    /// Sets labels on this runtime's worker at the engine; only the keys given change. Tasks
    /// that want or require labels ([`crate::worker::task::TaskOptions::desired_label`]) see them at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an upsert can be repeated.
    pub async fn upsert_labels<K: Into<String>, V: Into<crate::placement::LabelValue>>(
        &self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Result<(), Error> {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // Through the worker actor, in order with the start: an upsert sent while the worker
        // starts applies to the started worker.
        let worker = self.worker("/Dispatcher/UpsertWorkerLabels")?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        worker
            .cast(WorkerMsg::UpsertLabels(labels, tx))
            .map_err(|_| Error::closed("/Dispatcher/UpsertWorkerLabels"))?;
        rx.await
            .map_err(|_| Error::closed("/Dispatcher/UpsertWorkerLabels"))?
    }
}
