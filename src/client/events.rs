//! Streams of a run's events (`SubscribeToWorkflowEvents`), as `futures::Stream`s owned by the
//! caller (CONTRACT.md §3, caller-owned subscriptions).
//!
//! # Invariants
//!
//! 1. The stream ends after the run's final event (`hangup`), never before.
//! 2. A transient error or an early EOF reconnects while the caller still holds the stream
//!    (dropping it stops everything), and yields a [`RunEvent::Gap`] marker: events in the gap
//!    may be missed. After a gap, a subscription by run id reads the final state with
//!    GetRunDetails when the engine says the run is over, so the end is never missed.
//! 3. Items go through a bounded channel: a slow consumer slows the subscription (backpressure).

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use rand::SeedableRng as _;
use tokio::sync::mpsc;

use crate::listener::reconnect::TRANSIENT_STREAM_CODES;
use crate::proto::{self, ResourceEventType as K, ResourceType as T, v1};
use crate::retry::backoff::WAITER_STREAM_BACKOFF;
use crate::runtime::Shared;

/// Items buffered between the subscription and the consumer.
const BUFFER: usize = 256;

/// One event of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A task was created, completed, failed or cancelled.
    Task {
        /// The run.
        run_id: String,
        /// The task run id.
        task_id: String,
        /// STARTED, COMPLETED, FAILED or CANCELLED.
        kind: TaskEventKind,
        /// The output (completed) or error (failed).
        payload: String,
    },
    /// A chunk a task streamed (`Context::put_stream`).
    Chunk {
        /// The run.
        run_id: String,
        /// The task run id.
        task_id: String,
        /// Its index within the task's stream.
        index: Option<i64>,
        /// The bytes (as the engine relays them, UTF-8).
        data: String,
    },
    /// The subscription was interrupted and resumed: events in between may be missing.
    Gap {
        /// Why it was interrupted.
        reason: String,
    },
    /// The run finished (the last item).
    Finished {
        /// The run.
        run_id: String,
        /// COMPLETED, FAILED or CANCELLED.
        status: FinalStatus,
    },
}

/// What happened to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEventKind {
    /// Created (queued).
    Started,
    /// Completed.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// A run's final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalStatus {
    /// Completed.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// What the subscription follows.
#[derive(Debug, Clone)]
pub(crate) enum Follow {
    Run(String),
    Metadata(String, String),
}

fn translate(ev: proto::WorkflowEvent) -> Option<RunEvent> {
    let kind = K::try_from(ev.event_type).ok()?;
    match T::try_from(ev.resource_type).ok()? {
        T::WorkflowRun => {
            let status = match kind {
                K::Completed => FinalStatus::Completed,
                K::Failed | K::TimedOut => FinalStatus::Failed,
                K::Cancelled => FinalStatus::Cancelled,
                _ => return None,
            };
            Some(RunEvent::Finished {
                run_id: ev.workflow_run_id,
                status,
            })
        }
        T::StepRun => {
            let k = match kind {
                K::Stream => {
                    return Some(RunEvent::Chunk {
                        run_id: ev.workflow_run_id,
                        task_id: ev.resource_id,
                        index: ev.event_index,
                        data: ev.event_payload,
                    });
                }
                K::Started => TaskEventKind::Started,
                K::Completed => TaskEventKind::Completed,
                K::Failed | K::TimedOut => TaskEventKind::Failed,
                K::Cancelled => TaskEventKind::Cancelled,
                _ => return None,
            };
            Some(RunEvent::Task {
                run_id: ev.workflow_run_id,
                task_id: ev.resource_id,
                kind: k,
                payload: ev.event_payload,
            })
        }
        _ => None,
    }
}

fn final_of(d: &v1::GetRunDetailsResponse) -> Option<FinalStatus> {
    if !d.done {
        return None;
    }
    Some(match v1::RunStatus::try_from(d.status) {
        Ok(v1::RunStatus::Completed) => FinalStatus::Completed,
        Ok(v1::RunStatus::Cancelled) => FinalStatus::Cancelled,
        _ => FinalStatus::Failed,
    })
}

/// Opens the subscription; the returned stream owns it.
pub(crate) fn subscribe(
    shared: Arc<Shared>,
    follow: Follow,
) -> impl Stream<Item = RunEvent> + Send + 'static {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(run(shared, follow, tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

async fn run(shared: Arc<Shared>, follow: Follow, tx: mpsc::Sender<RunEvent>) {
    let life = shared.ctx.lifecycle.clone();
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    let mut failures = 0u32;
    let mut gap = false;
    loop {
        if tx.is_closed() || life.is_cancelled() {
            return;
        }
        let req = match &follow {
            Follow::Run(id) => proto::SubscribeToWorkflowEventsRequest {
                workflow_run_id: Some(id.clone()),
                ..Default::default()
            },
            Follow::Metadata(k, v) => proto::SubscribeToWorkflowEventsRequest {
                workflow_run_id: None,
                additional_meta_key: Some(k.clone()),
                additional_meta_value: Some(v.clone()),
            },
        };
        let mut client = shared.ctx.dispatcher();
        let reason = match client.subscribe_to_workflow_events(req).await {
            Err(s) if !TRANSIENT_STREAM_CODES.contains(&s.code()) => {
                // Not found, unauthenticated...: say so as the last item's reason and stop.
                let _ = tx
                    .send(RunEvent::Gap {
                        reason: format!("subscription refused: {:?}: {}", s.code(), s.message()),
                    })
                    .await;
                return;
            }
            Err(s) => format!("{:?}: {}", s.code(), s.message()),
            Ok(resp) => {
                let mut stream = resp.into_inner();
                let mut received = false;
                loop {
                    let m = tokio::select! {
                        m = stream.message() => m,
                        _ = tx.closed() => return,
                        _ = life.cancelled() => return,
                    };
                    match m {
                        Ok(Some(ev)) => {
                            received = true;
                            failures = 0;
                            let hangup = ev.hangup;
                            if let Some(item) = translate(ev)
                                && tx.send(item).await.is_err()
                            {
                                return;
                            }
                            if hangup {
                                return;
                            }
                        }
                        Ok(None) => {
                            break if received {
                                "stream ended early".to_string()
                            } else {
                                "stream ended (EOF)".to_string()
                            };
                        }
                        Err(s) => break format!("{:?}: {}", s.code(), s.message()),
                    }
                }
            }
        };
        // By run id: an EOF right after a gap may mean the run is already over: read its end.
        if let Follow::Run(id) = &follow
            && (gap || reason.contains("EOF"))
        {
            let mut admin = shared.ctx.admin();
            if let Ok(d) = admin
                .get_run_details(v1::GetRunDetailsRequest {
                    external_id: id.clone(),
                })
                .await
                && let Some(status) = final_of(&d.into_inner())
            {
                if gap {
                    let _ = tx.send(RunEvent::Gap { reason }).await;
                }
                let _ = tx
                    .send(RunEvent::Finished {
                        run_id: id.clone(),
                        status,
                    })
                    .await;
                return;
            }
        }
        if tx.send(RunEvent::Gap { reason }).await.is_err() {
            return;
        }
        gap = true;
        let delay = WAITER_STREAM_BACKOFF.delay(failures, &mut rng);
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(delay.max(Duration::from_millis(10))) => {}
            _ = tx.closed() => return,
            _ = life.cancelled() => return,
        }
    }
}
