//! Streams of a run's events (`SubscribeToWorkflowEvents`), as `futures::Stream`s owned by the
//! caller (docs/contract.md §3, caller-owned subscriptions).
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
use std::sync::atomic::{AtomicBool, Ordering};

use futures::Stream;
use tokio::sync::mpsc;

use crate::connection::Connection;
use crate::listener::reconnect::{StreamEnd, TRANSIENT_STREAM_CODES};
use crate::listener::stream::{self, EndReport, Flow, Home, Judged, StreamKind};
use crate::protocol::{self as proto, ResourceEventType as K, ResourceType as T, v1};

/// Items buffered between the subscription and the consumer.
const BUFFER: usize = 256;

/// One event of a run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
#[non_exhaustive]
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
#[non_exhaustive]
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

/// A caller-owned subscription as a [`StreamKind`] of the one stream mechanism.
struct RunEventsKind {
    follow: Follow,
    tx: mpsc::Sender<RunEvent>,
    /// An interruption happened: events may be missing (invariant 2).
    gap: AtomicBool,
}

impl RunEventsKind {
    fn request(&self) -> proto::SubscribeToWorkflowEventsRequest {
        match &self.follow {
            Follow::Run(id) => proto::SubscribeToWorkflowEventsRequest {
                workflow_run_id: Some(id.clone()),
                ..Default::default()
            },
            Follow::Metadata(k, v) => proto::SubscribeToWorkflowEventsRequest {
                workflow_run_id: None,
                additional_meta_key: Some(k.clone()),
                additional_meta_value: Some(v.clone()),
            },
        }
    }

    /// After an interruption or an EOF, a subscription by run id reads the run's final state
    /// (GetRunDetails, a read under the retry core): `Some` when the run is over.
    async fn final_state(&self, conn: &Connection) -> Option<(String, FinalStatus)> {
        let Follow::Run(id) = &self.follow else {
            return None;
        };
        let d = conn.run_details(id, Some(FINAL_READ_DEADLINE)).await.ok()?;
        final_of(&d).map(|s| (id.clone(), s))
    }
}

/// Deadline of the read that looks for a run's end after an interruption.
const FINAL_READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

impl StreamKind for RunEventsKind {
    type Item = proto::WorkflowEvent;
    const NAME: &'static str = "/Dispatcher/SubscribeToWorkflowEvents";
    const ENDS_ON_STOP: bool = true;

    async fn open(
        &self,
        conn: &Connection,
        _generation: u64,
    ) -> Result<tonic::Streaming<proto::WorkflowEvent>, tonic::Status> {
        conn.dispatcher()
            .subscribe_to_workflow_events(self.request())
            .await
            .map(tonic::Response::into_inner)
    }

    async fn on_message(&self, ev: proto::WorkflowEvent) -> Flow {
        let hangup = ev.hangup;
        if let Some(item) = translate(ev)
            && self.tx.send(item).await.is_err()
        {
            return Flow::Finish; // the caller dropped the stream
        }
        if hangup { Flow::Finish } else { Flow::Continue }
    }

    async fn on_end(&self, conn: &Connection, _generation: u64, report: &EndReport) -> Judged {
        if let StreamEnd::Code(code) = report.end
            && !report.opened
            && !TRANSIENT_STREAM_CODES.contains(&code)
        {
            // Not found, unauthenticated...: say so as the last item's reason and stop.
            let _ = self
                .tx
                .send(RunEvent::Gap {
                    reason: format!("subscription refused: {}", report.error),
                })
                .await;
            return Judged::Finish;
        }
        let reason = if report.end == StreamEnd::Eof && report.messages > 0 {
            "stream ended early".to_string()
        } else {
            report.error.clone()
        };
        let gap = self.gap.load(Ordering::Relaxed);
        // By run id: an EOF, or any end after a gap, may mean the run is already over.
        if (gap || report.end == StreamEnd::Eof)
            && let Some((run_id, status)) = self.final_state(conn).await
        {
            if gap {
                let _ = self.tx.send(RunEvent::Gap { reason }).await;
            }
            let _ = self.tx.send(RunEvent::Finished { run_id, status }).await;
            return Judged::Finish;
        }
        if self.tx.send(RunEvent::Gap { reason }).await.is_err() {
            return Judged::Finish;
        }
        self.gap.store(true, Ordering::Relaxed);
        // An EOF before the final event is an interruption like a transient error.
        Judged::Decide(match report.end {
            StreamEnd::Eof => StreamEnd::Code(tonic::Code::Unavailable),
            end => end,
        })
    }

    fn wanted(&self) -> bool {
        !self.tx.is_closed()
    }

    fn backoff(&self, conn: &Connection) -> crate::retry::Backoff {
        conn.backoff().waiters
    }

    fn on_stop(&self, why: &str, _end: Option<StreamEnd>, _permanent: bool) {
        let _ = self.tx.try_send(RunEvent::Gap {
            reason: format!("subscription stopped: {why}"),
        });
    }
}

/// Opens the subscription; the returned stream owns it: dropping it stops the subscription's
/// actor, its reader and its timers (nothing outlives the consumer or the runtime).
pub(crate) fn subscribe(
    conn: Connection,
    follow: Follow,
) -> impl Stream<Item = RunEvent> + Send + 'static {
    let (tx, rx) = mpsc::channel(BUFFER);
    let home = Arc::new(Home::new(
        RunEventsKind {
            follow,
            tx,
            gap: AtomicBool::new(false),
        },
        None,
        conn.lifecycle(),
        conn.rng("run_events"),
    ));
    tokio::spawn(async move {
        if stream::spawn(conn, home.clone(), None).await.is_err() {
            return;
        }
        // Opened by its actor (a caller-owned stream is wanted from the start); ends when the
        // caller drops the stream, the subscription finishes, or the runtime shuts down.
        home.ensure();
        tokio::select! {
            _ = home.kind.tx.closed() => {}
            _ = home.token.cancelled() => {}
        }
        home.stop();
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
