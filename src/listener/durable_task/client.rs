//! What a task context uses to run durable operations: a request, its ack (bounded by
//! [`ACK_TIMEOUT`]), then the wait for its completion.

use std::sync::Arc;

use super::registry::{Ack, Completion, DurableRegistry, EntryKey, key_of, target};
use super::{ACK_TIMEOUT, EVICTION_ACK_TIMEOUT, OPERATION};
use crate::error::{Error, Outcome};
use crate::protocol::v1::{self, durable_task_request::Message as Req};

/// What a task context uses to run durable operations.
#[derive(Clone)]
pub(crate) struct DurableClient {
    /// Registry.
    pub registry: Arc<DurableRegistry>,
    /// Arms the stream.
    pub ensure: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for DurableClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableClient(..)")
    }
}

impl DurableClient {
    async fn request(&self, req: v1::DurableTaskRequest) -> Result<Ack, Error> {
        self.request_within(req, ACK_TIMEOUT).await
    }

    async fn request_within(
        &self,
        req: v1::DurableTaskRequest,
        within: std::time::Duration,
    ) -> Result<Ack, Error> {
        let key = target(&req);
        let (id, rx, arm) = self.registry.send(req)?;
        if arm {
            (self.ensure)();
        }
        // If this future is dropped (a timeout, a cancelled task), the request is abandoned: no
        // re-send on reconnect, and its slot cannot take a later ack meant for another request.
        struct Abandon<'a>(&'a DurableRegistry, Option<(String, i32)>, u64, bool);
        impl Drop for Abandon<'_> {
            fn drop(&mut self) {
                if !self.3
                    && let Some(k) = &self.1
                {
                    self.0.abandon(k, self.2);
                }
            }
        }
        let mut guard = Abandon(&self.registry, key, id, false);
        let r = match tokio::time::timeout(within, rx).await {
            Ok(r) => r.map_err(|_| Error::closed(OPERATION))?,
            // The guard drops the request: no re-send, no slot for a late ack.
            Err(_) => {
                return Err(Error::new(Outcome::DeadlineExceeded, OPERATION).with_detail(format!(
                    "the engine did not acknowledge this durable operation within {} s (it answers nothing for requests it cannot process); the attempt fails so the engine can run it again, and the operation replays by node",
                    within.as_secs()
                )));
            }
        };
        guard.3 = true;
        r
    }

    /// Registers a wait and returns its completion payload.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it forgets the wait locally; the engine keeps the node, and a replay
    /// of the same wait finds it.
    #[cfg(test)]
    pub(crate) async fn wait_for(
        &self,
        task: &str,
        invocation: i32,
        conds: v1::DurableEventListenerConditions,
    ) -> Result<Completion, Error> {
        let key = self.register_wait(task, invocation, conds).await?;
        self.completion(key).await
    }

    /// Registers a wait; the engine's ack names its entry, which [`Self::completion`] awaits.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before the ack, the wait may or may not be registered; a replay of
    /// the same wait finds it either way.
    pub(crate) async fn register_wait(
        &self,
        task: &str,
        invocation: i32,
        conds: v1::DurableEventListenerConditions,
    ) -> Result<EntryKey, Error> {
        let ack = self
            .request(v1::DurableTaskRequest {
                message: Some(Req::WaitFor(v1::DurableTaskWaitForRequest {
                    invocation_count: invocation,
                    durable_task_external_id: task.to_string(),
                    wait_for_conditions: Some(conds),
                    label: None,
                })),
            })
            .await?;
        let Ack::Wait(r) = ack else {
            return Err(Error::new(Outcome::Undecodable, "DurableTask")
                .with_detail("the engine answered wait_for with an ack of another kind"));
        };
        Ok(key_of(&r))
    }

    /// Waits for entry `key` to complete (a wait satisfied, a child run finished).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it forgets the wait locally; the engine keeps the entry, and a
    /// replay finds it.
    pub(crate) async fn completion(&self, key: EntryKey) -> Result<Completion, Error> {
        let rx = self.registry.wait(key.clone());
        struct Forget<'a>(&'a DurableRegistry, EntryKey);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.forget_wait(&self.1);
            }
        }
        let _guard = Forget(&self.registry, key);
        rx.await.map_err(|_| Error::closed(OPERATION))?
    }

    /// Evicts an invocation of this worker's durable task: the engine frees its slot and runs
    /// the task again when what it waits for completes.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have evicted the invocation.
    pub(crate) async fn evict(
        &self,
        task: &str,
        invocation: i32,
        reason: &str,
    ) -> Result<(), Error> {
        let ack = self
            .request_within(
                v1::DurableTaskRequest {
                    message: Some(Req::EvictInvocation(
                        v1::DurableTaskEvictInvocationRequest {
                            invocation_count: invocation,
                            durable_task_external_id: task.to_string(),
                            reason: Some(reason.to_string()),
                        },
                    )),
                },
                EVICTION_ACK_TIMEOUT,
            )
            .await?;
        match ack {
            Ack::Evicted => Ok(()),
            _ => Err(Error::new(Outcome::Undecodable, "DurableTask")
                .with_detail("the engine answered evict_invocation with an ack of another kind")),
        }
    }

    /// Triggers child runs as entries of the durable log; answers each child's entry and run
    /// id, in the order asked. A replay of the same children (same indexes or keys) finds the
    /// same runs.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call may have started the children, and a replay finds them.
    pub(crate) async fn trigger_runs(
        &self,
        task: &str,
        invocation: i32,
        children: Vec<v1::TriggerWorkflowRequest>,
    ) -> Result<Vec<(EntryKey, String)>, Error> {
        let asked = children.len();
        let ack = self
            .request(v1::DurableTaskRequest {
                message: Some(Req::TriggerRuns(v1::DurableTaskTriggerRunsRequest {
                    invocation_count: invocation,
                    durable_task_external_id: task.to_string(),
                    trigger_opts: children,
                })),
            })
            .await?;
        let Ack::Runs(r) = ack else {
            return Err(Error::new(Outcome::Undecodable, "DurableTask")
                .with_detail("the engine answered trigger_runs with an ack of another kind"));
        };
        entries_of(task, invocation, asked, r)
    }

    /// Memoizes `compute` under `key` for this task: a replay returns the stored value.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an interrupted memo is recomputed on replay.
    pub(crate) async fn memo<F, Fut>(
        &self,
        task: &str,
        invocation: i32,
        key: &[u8],
        compute: F,
    ) -> Result<Vec<u8>, Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, Error>>,
    {
        let ack = self
            .request(v1::DurableTaskRequest {
                message: Some(Req::Memo(v1::DurableTaskMemoRequest {
                    invocation_count: invocation,
                    durable_task_external_id: task.to_string(),
                    key: key.to_vec(),
                    payload: None,
                })),
            })
            .await?;
        let Ack::Memo(m) = ack else {
            return Err(Error::new(Outcome::Undecodable, "DurableTask")
                .with_detail("the engine answered memo with an ack of another kind"));
        };
        if let Some(v) = m.memo_result_payload.filter(|_| m.memo_already_existed) {
            return Ok(v);
        }
        // A value that cannot be serialised is the caller's error, and nothing is stored.
        let value = compute().await?;
        self.registry.send_no_ack(v1::DurableTaskRequest {
            message: Some(Req::CompleteMemo(v1::DurableTaskCompleteMemoRequest {
                r#ref: m.r#ref,
                payload: value.clone(),
                memo_key: key.to_vec(),
            })),
        });
        Ok(value)
    }
}

/// The entries of a `trigger_runs_ack`, matched to the children by position (as the official
/// SDKs match them); an ack with another count of entries is undecodable.
fn entries_of(
    task: &str,
    invocation: i32,
    asked: usize,
    ack: v1::DurableTaskEventTriggerRunsAckResponse,
) -> Result<Vec<(EntryKey, String)>, Error> {
    if ack.run_entries.len() != asked {
        return Err(
            Error::new(Outcome::Undecodable, "DurableTask").with_detail(format!(
                "the engine acknowledged {} children of the {asked} asked for",
                ack.run_entries.len()
            )),
        );
    }
    Ok(ack
        .run_entries
        .into_iter()
        .map(|e| {
            (
                (task.to_string(), invocation, e.branch_id, e.node_id),
                e.workflow_run_external_id,
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_runs_ack_maps_its_entries_by_position_and_must_count_every_child() {
        let entry = |node_id, run: &str| v1::DurableTaskRunAckEntry {
            node_id,
            branch_id: 1,
            workflow_run_external_id: run.into(),
        };
        let ack = |entries| v1::DurableTaskEventTriggerRunsAckResponse {
            durable_task_external_id: "t".into(),
            invocation_count: 2,
            run_entries: entries,
        };
        let got = entries_of("t", 2, 2, ack(vec![entry(3, "a"), entry(4, "b")])).expect("two");
        assert_eq!(
            got,
            [
                (("t".to_string(), 2, 1, 3), "a".to_string()),
                (("t".to_string(), 2, 1, 4), "b".to_string())
            ]
        );
        let short = entries_of("t", 2, 2, ack(vec![entry(3, "a")])).unwrap_err();
        assert_eq!(short.outcome(), Outcome::Undecodable);
        assert!(short.to_string().contains("1 children of the 2"), "{short}");
    }
    use crate::protocol::v1::durable_task_response::Message as Resp;
    use tokio::sync::mpsc;

    type Out = mpsc::Receiver<v1::DurableTaskRequest>;

    /// A client on a published stream whose registration the engine answered.
    fn ready_client() -> (Arc<DurableRegistry>, DurableClient, Out) {
        let registry = Arc::new(DurableRegistry::default());
        let (sink, out) = mpsc::channel(crate::listener::durable_task::registry::SINK_CAPACITY);
        registry.publish(1, sink, "w");
        registry.on_response(v1::DurableTaskResponse {
            message: Some(Resp::RegisterWorker(
                v1::DurableTaskResponseRegisterWorker {
                    worker_id: "w".into(),
                },
            )),
        });
        let client = DurableClient {
            registry: registry.clone(),
            ensure: Arc::new(|| {}),
        };
        (registry, client, out)
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_never_acknowledged_fails_after_sixty_seconds_and_its_late_ack_wakes_nobody()
    {
        let (registry, client, _out) = ready_client();
        let started = tokio::time::Instant::now();
        let err = client
            .wait_for("t", 1, v1::DurableEventListenerConditions::default())
            .await
            .expect_err("no ack");
        assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
        assert_eq!(started.elapsed(), ACK_TIMEOUT);
        // The next operation of the invocation goes out; then the first one's ack arrives late.
        let next = client.memo("t", 1, b"k", || async { Ok(b"v".to_vec()) });
        tokio::pin!(next);
        assert!(futures::poll!(&mut next).is_pending());
        let entry = |node_id| v1::DurableEventLogEntryRef {
            durable_task_external_id: "t".into(),
            invocation_count: 1,
            branch_id: 1,
            node_id,
        };
        let ack = |memo: bool| v1::DurableTaskResponse {
            message: Some(if memo {
                Resp::MemoAck(v1::DurableTaskEventMemoAckResponse {
                    r#ref: Some(entry(2)),
                    memo_already_existed: true,
                    memo_result_payload: Some(b"stored".to_vec()),
                })
            } else {
                Resp::WaitForAck(v1::DurableTaskEventWaitForAckResponse {
                    r#ref: Some(entry(1)),
                })
            }),
        };
        registry.on_response(ack(false));
        assert!(
            futures::poll!(&mut next).is_pending(),
            "the abandoned request's late ack is not the memo's"
        );
        registry.on_response(ack(true));
        assert_eq!(next.await.expect("memo"), b"stored");
        assert_eq!(registry.pending_counts(), (0, 0, 0), "nothing left behind");
    }

    /// Invariant 4 (docs/contract.md §3): an eviction not acknowledged in 30 s fails, the stream
    /// and the other operations untouched.
    #[tokio::test(start_paused = true)]
    async fn an_eviction_never_acknowledged_fails_after_thirty_seconds() {
        let (_registry, client, _out) = ready_client();
        let started = tokio::time::Instant::now();
        let err = client.evict("t", 1, "idle").await.expect_err("no ack");
        assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
        assert_eq!(started.elapsed(), EVICTION_ACK_TIMEOUT);
        assert_eq!(EVICTION_ACK_TIMEOUT, std::time::Duration::from_secs(30));
        assert!(err.to_string().contains("within 30 s"), "{err}");
    }
}
