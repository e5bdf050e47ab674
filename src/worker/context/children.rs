//! Child runs of a task: spawned (a handle to await later) or run (spawned and awaited). In a
//! durable task a child is an entry of the durable log, triggered on the durable stream
//! (`trigger_runs`) and keyed by its child index, as the official SDKs do: a replay of the task
//! (a retry, a restore after eviction) finds the same child, and [`Context::run_child`] gets its
//! result from the log rather than from a listener, so the parent may be evicted while it waits.
//!
//! # Invariants
//!
//! 1. Child indexes count spawns of this attempt from 0, in call order, on both paths (see
//!    `child_index.rs`); an index is spent only when the engine answered the spawn.
//! 2. In a durable task on an engine with the durable stream, every spawn goes through it;
//!    otherwise (a plain task, an engine before v0.80.0) through `TriggerWorkflow`.
//! 3. A durable child's result is its entry's completion: a single-task child's output, a
//!    DAG's outputs by task name; a failed or cancelled child is [`Outcome::RunFailed`] with the
//!    engine's error text.

use std::sync::atomic::Ordering;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ChildOptions, Context};
use crate::client::{RunHandle, encode_input};
use crate::error::{Error, Outcome};
use crate::listener::durable_task::{Completion, DurableClient, EntryKey};

/// One child to spawn: its workflow, its input as JSON, its options.
type Spawn = (String, String, ChildOptions);

impl Context {
    /// Spawns a child run. The child index counts spawns in this task, so a retried task that
    /// spawns again gets the same children back from the engine instead of duplicates. In a
    /// durable task the child is an entry of the durable log (see [`Context::run_child`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an index is spent only when the spawn succeeds, so calling it again after a
    /// dropped (or failed) call uses the same index and the engine answers with the same child.
    pub async fn spawn_child<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<RunHandle, Error> {
        self.spawn_child_inner(workflow, input, ChildOptions::new(), None)
            .await
    }

    /// [`Context::spawn_child`] with options: a child key (the engine answers a second spawn
    /// with the same key with the same child, whatever its index), metadata, priority, labels.
    ///
    /// # Cancel safety
    ///
    /// As [`Context::spawn_child`].
    pub async fn spawn_child_with_options<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
        options: ChildOptions,
    ) -> Result<RunHandle, Error> {
        self.spawn_child_inner(workflow, input, options, None).await
    }

    /// Runs a child and waits for its output (`O`: a single-task child's output, a DAG's
    /// outputs by task name). In a durable task the wait is an entry of the durable log: a
    /// replay finds the same child and its result, and the task may be evicted while it waits.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the child keeps running; calling again (or a replay) finds the same child by
    /// its index.
    pub async fn run_child<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        input: &I,
    ) -> Result<O, Error> {
        self.run_child_with_options(workflow, input, ChildOptions::new())
            .await
    }

    /// [`Context::run_child`] with options (see [`Context::spawn_child_with_options`]).
    ///
    /// # Cancel safety
    ///
    /// As [`Context::run_child`].
    pub async fn run_child_with_options<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        input: &I,
        options: ChildOptions,
    ) -> Result<O, Error> {
        let spawn = (
            workflow.to_string(),
            encode_input("run child", input)?,
            options,
        );
        match self.durable_path() {
            Some((d, inv)) => {
                let mut entries = self.spawn_durable(d, inv, vec![spawn], None).await?;
                let (key, run) = entries.pop().ok_or_else(|| {
                    Error::new(Outcome::Undecodable, "run child")
                        .with_detail("the engine acknowledged no child")
                })?;
                self.child_result(d, inv, key, &run).await
            }
            None => {
                let (workflow, input, options) = spawn;
                let h = self.spawn_plain(&workflow, input, options, None).await?;
                h.result().await
            }
        }
    }

    /// Runs one child of `workflow` per input and waits for every output; each child's result
    /// is its own. In a durable task the children are one `trigger_runs` of the durable log.
    ///
    /// # Cancel safety
    ///
    /// As [`Context::run_child`].
    pub async fn run_children<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: &str,
        inputs: &[I],
    ) -> Result<Vec<Result<O, Error>>, Error> {
        let mut spawns = Vec::with_capacity(inputs.len());
        for input in inputs {
            spawns.push((
                workflow.to_string(),
                encode_input("run children", input)?,
                ChildOptions::new(),
            ));
        }
        match self.durable_path() {
            Some((d, inv)) => {
                let entries = self.spawn_durable(d, inv, spawns, None).await?;
                let waits = entries
                    .into_iter()
                    .map(|(key, run)| async move { self.child_result(d, inv, key, &run).await });
                Ok(futures::future::join_all(waits).await)
            }
            None => {
                let mut handles = Vec::with_capacity(spawns.len());
                for (workflow, input, options) in spawns {
                    handles.push(self.spawn_plain(&workflow, input, options, None).await?);
                }
                let waits = handles.iter().map(|h| h.result::<O>());
                Ok(futures::future::join_all(waits).await)
            }
        }
    }

    /// A child spawn with `options`, optionally wanting a worker (sticky children).
    pub(super) async fn spawn_child_inner<I: Serialize>(
        &self,
        workflow: &str,
        input: &I,
        options: ChildOptions,
        desired_worker_id: Option<String>,
    ) -> Result<RunHandle, Error> {
        let input = encode_input("spawn child", input)?;
        match self.durable_path() {
            Some((d, inv)) => {
                let spawn = (workflow.to_string(), input, options);
                let mut entries = self
                    .spawn_durable(d, inv, vec![spawn], desired_worker_id)
                    .await?;
                let (_, run) = entries.pop().ok_or_else(|| {
                    Error::new(Outcome::Undecodable, "spawn child")
                        .with_detail("the engine acknowledged no child")
                })?;
                Ok(RunHandle::new(run, self.inner.core.client().clone()))
            }
            None => {
                self.spawn_plain(workflow, input, options, desired_worker_id)
                    .await
            }
        }
    }

    /// The durable stream, when this is a durable task on an engine that has it (invariant 2).
    fn durable_path(&self) -> Option<(&DurableClient, i32)> {
        if self.inner.core.legacy_durable.load(Ordering::Relaxed) {
            return None;
        }
        self.durable().ok()
    }

    /// A spawn through `TriggerWorkflow`.
    async fn spawn_plain(
        &self,
        workflow: &str,
        input: String,
        options: ChildOptions,
        desired_worker_id: Option<String>,
    ) -> Result<RunHandle, Error> {
        let index = self.inner.child_index.take(workflow);
        let opts = self.child_trigger(index.index, options, desired_worker_id);
        let child = self
            .inner
            .core
            .client()
            .run_no_wait_encoded(workflow, input, opts)
            .await?;
        index.spend();
        Ok(child)
    }

    /// A child's trigger: this task as its parent, at `index`, with its key and options.
    fn child_trigger(
        &self,
        index: i32,
        options: ChildOptions,
        desired_worker_id: Option<String>,
    ) -> crate::client::TriggerOptions {
        let mut opts = options.trigger;
        opts.parent = Some((
            self.workflow_run_id().to_string(),
            self.task_run_id().to_string(),
            index,
        ));
        opts.child_key = options.key;
        if desired_worker_id.is_some() {
            opts.desired_worker_id = desired_worker_id;
        }
        opts
    }

    /// Spawns through the durable stream, one `trigger_runs` for all (invariants 1 and 2).
    async fn spawn_durable(
        &self,
        d: &DurableClient,
        inv: i32,
        spawns: Vec<Spawn>,
        desired_worker_id: Option<String>,
    ) -> Result<Vec<(EntryKey, String)>, Error> {
        let client = self.inner.core.client();
        let mut reserved = Vec::with_capacity(spawns.len());
        let mut requests = Vec::with_capacity(spawns.len());
        for (workflow, input, options) in spawns {
            let index = self.inner.child_index.take(&workflow);
            let opts = self.child_trigger(index.index, options, desired_worker_id.clone());
            crate::client::bulk::check_priority("spawn child", opts.priority)?;
            let metadata = opts.metadata.clone();
            requests.push(client.trigger_request(&workflow, input, &opts, metadata));
            reserved.push(index);
        }
        let entries = tokio::select! {
            biased;
            r = d.trigger_runs(self.task_run_id(), inv, requests) => r?,
            _ = self.inner.cancel.cancelled() => {
                return Err(Error::new(Outcome::Cancelled, "spawn child"));
            }
        };
        for index in reserved {
            index.spend();
        }
        Ok(entries)
    }

    /// Waits for a durable child's entry and reads its result (invariant 3).
    async fn child_result<O: DeserializeOwned>(
        &self,
        d: &DurableClient,
        inv: i32,
        key: EntryKey,
        run: &str,
    ) -> Result<O, Error> {
        let done = self
            .await_entry(d, inv, "run child", d.completion(key))
            .await
            .map_err(|e| e.with_run_id(run))?;
        decode_child(done, run)
    }
}

/// A child's result from its entry's completion (invariant 3).
fn decode_child<O: DeserializeOwned>(done: Completion, run: &str) -> Result<O, Error> {
    if done.is_failure {
        let why = done
            .error
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "the child run failed".to_string());
        return Err(Error::new(Outcome::RunFailed, "run child")
            .with_run_id(run)
            .with_detail(format!("the child run failed: {why}")));
    }
    serde_json::from_slice(&done.payload).map_err(|e| {
        Error::new(Outcome::Undecodable, "run child")
            .with_run_id(run)
            .with_detail("the child's output is not of the type asked for")
            .with_cause(crate::error::Cause::Json(e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_s_completion_reads_as_its_output_or_its_failure() {
        let ok = Completion {
            payload: br#"{"n": 2}"#.to_vec(),
            is_failure: false,
            error: None,
        };
        let v: serde_json::Value = decode_child(ok, "r1").expect("output");
        assert_eq!(v["n"], 2);
        let failed = Completion {
            payload: Vec::new(),
            is_failure: true,
            error: Some("it broke".into()),
        };
        let e = decode_child::<serde_json::Value>(failed, "r2").unwrap_err();
        assert_eq!(e.outcome(), Outcome::RunFailed);
        assert_eq!(e.run_id(), Some("r2"));
        assert!(e.to_string().contains("it broke"), "{e}");
        let wrong = Completion {
            payload: br#"{"n": "two"}"#.to_vec(),
            is_failure: false,
            error: None,
        };
        #[derive(serde::Deserialize, Debug)]
        struct N {
            #[allow(dead_code)]
            n: i64,
        }
        let e = decode_child::<N>(wrong, "r3").unwrap_err();
        assert_eq!(e.outcome(), Outcome::Undecodable);
    }
}
