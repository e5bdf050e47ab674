//! Triggering runs and pushing events.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::RuntimeHandle;
use crate::client::bulk::{BulkEvent, BulkRun};
use crate::client::{PushOptions, RunHandle, TriggerOptions};
use crate::error::Error;
use crate::protocol as proto;

impl RuntimeHandle {
    /// Triggers a run and returns its handle.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that matters for writes: if dropped after the request left,
    /// the run may exist without its id. Use [`TriggerOptions::idempotent`] with an idempotency
    /// key to make a repeat safe.
    pub async fn run_no_wait<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<RunHandle, Error> {
        self.inner
            .client
            .run_no_wait_with(workflow, input, TriggerOptions::new())
            .await
    }

    /// [`RuntimeHandle::run_no_wait`] with options.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_no_wait`].
    pub async fn run_no_wait_with<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
        opts: TriggerOptions,
    ) -> Result<RunHandle, Error> {
        self.inner
            .client
            .run_no_wait_with(workflow, input, opts)
            .await
    }

    /// Triggers a run and waits for its typed result.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_no_wait`] until the trigger returns; then cancel safe.
    pub async fn run<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<O, Error> {
        let h = self.run_no_wait(workflow, input).await?;
        h.result().await
    }

    /// Triggers one run per input through BulkTriggerWorkflow (1,000 runs per call); one
    /// answer per input, in order: its handle, or its own error (an input that does not
    /// serialize fails alone; a refused call fails the runs of its chunk).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (writes): a dropped call may have created some of the runs.
    pub async fn run_many<I: Serialize>(
        &self,
        workflow: &str,
        inputs: &[I],
    ) -> Vec<Result<RunHandle, Error>> {
        let defaults = TriggerOptions::new();
        let items: Vec<(&I, &TriggerOptions)> = inputs.iter().map(|i| (i, &defaults)).collect();
        self.inner.client.run_many(workflow, &items).await
    }

    /// Triggers one run per input (as [`RuntimeHandle::run_many`]) and waits for every
    /// result: one typed result or error per input, in order. The waits share the one result
    /// stream; a run that fails (or whose trigger was refused) gives its error in its place and
    /// the others still arrive.
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_many`] until the triggers return; then cancel safe (dropping it
    /// stops the waits, not the runs).
    pub async fn run_many_results<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        inputs: &[I],
    ) -> Vec<Result<O, Error>> {
        let handles = self.run_many(workflow, inputs).await;
        futures::future::join_all(handles.into_iter().map(|h| async move {
            match h {
                Ok(h) => h.result().await,
                Err(e) => Err(e),
            }
        }))
        .await
    }

    /// [`RuntimeHandle::run_many`] with per-run options (metadata, priority).
    ///
    /// # Cancel safety
    ///
    /// As [`RuntimeHandle::run_many`].
    pub async fn run_many_with<I: Serialize>(
        &self,
        workflow: &str,
        runs: &[BulkRun<I>],
    ) -> Vec<Result<RunHandle, Error>> {
        let items: Vec<(&I, &TriggerOptions)> =
            runs.iter().map(|b| (&b.input, &b.options)).collect();
        self.inner.client.run_many(workflow, &items).await
    }

    /// Pushes many events through BulkPush (1,000 per call), each with its own metadata and
    /// priority; one event id or error per event, in order.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (writes).
    pub async fn push_many<P: Serialize>(
        &self,
        events: &[BulkEvent<P>],
    ) -> Vec<Result<String, Error>> {
        self.inner.client.push_many(events).await
    }

    /// A handle for an existing run id.
    pub fn run_handle(&self, run_id: impl Into<String>) -> RunHandle {
        RunHandle::given(run_id.into(), self.inner.client.clone())
    }

    /// Pushes an event (triggers every workflow listening for `key`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write): a dropped push may or may not have happened.
    pub async fn push<P: Serialize>(&self, key: &str, payload: &P) -> Result<String, Error> {
        self.push_with(key, payload, PushOptions::new()).await
    }

    /// [`RuntimeHandle::push`] with metadata (copied onto the runs it starts), a priority for
    /// those runs, and a scope (which event filters apply). Pushed from inside a task's handler
    /// (its own tokio task), the metadata also names that task and its run as the event's
    /// source, as the official SDKs do, so the runs it starts join the task's trace.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write).
    pub async fn push_with<P: Serialize>(
        &self,
        key: &str,
        payload: &P,
        opts: PushOptions,
    ) -> Result<String, Error> {
        const PATH: &str = "/EventsService/Push";
        let conn = &self.inner.conn;
        let req = self.inner.client.push_request(PATH, key, payload, &opts)?;
        let client = conn.events();
        conn.call(
            PATH,
            &client,
            &req,
            |mut c, r| async move { c.push(r).await },
        )
        .await
        .map(|e| e.event_id)
    }

    /// Declares (or changes) the rate limit `key`: `limit` units per `window`, shared by every
    /// task that takes units of it ([`crate::worker::task::TaskOptions::rate_limit`]). Idempotent.
    ///
    /// A change adds no units to the current window: the engine keeps what is left (at most
    /// the new limit), and a raised limit counts from the next window. The windows follow each
    /// other from the key's first declaration.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: repeating it sets the same limit.
    pub async fn put_rate_limit(
        &self,
        key: &str,
        limit: i32,
        window: crate::worker::task::RateLimitWindow,
    ) -> Result<(), Error> {
        const PATH: &str = "/WorkflowService/PutRateLimit";
        if key.is_empty() || limit < 0 {
            return Err(Error::invalid(
                PATH,
                "a rate limit needs a key and a limit of 0 or more",
            ));
        }
        // Not namespaced, like the keys tasks name in `TaskOptions::rate_limit`.
        let req = proto::PutRateLimitRequest {
            key: key.to_string(),
            limit,
            duration: window.wire() as i32,
        };
        let conn = &self.inner.conn;
        let client = conn.workflows();
        conn.call(PATH, &client, &req, |mut c, r| async move {
            c.put_rate_limit(r).await
        })
        .await
        .map(|_| ())
    }
}
