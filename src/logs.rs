//! Task log lines (`Context::log`) shipped to the engine in the background, within bounds.
//!
//! # Invariants
//!
//! 1. `Context::log` never waits and never grows memory without limit: lines wait in a queue of
//!    [`LOG_QUEUE`]; when it is full (the engine is slow or down) a line is dropped and counted
//!    (`RuntimeHandle::logs_dropped`), with a warning on the first drop and every 1,000th.
//! 2. One shipper per runtime sends at most [`LOG_SENDS`] lines at once, each a unary
//!    `PutLog` under the retry core (an idempotent write); it stops with the runtime.
//! 3. [`TaskLogLayer`] (opt-in) forwards the `tracing` events a task's own code emits, while
//!    its handler runs, as that task's log lines (with their level), through the same queue.
//!    Events of the runtime itself (`hatchet_runtime::*`) are never forwarded, so shipping a
//!    line cannot produce another.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt as _;
use tokio::sync::mpsc;

use crate::connection::Connection;
use crate::protocol as proto;

/// Lines waiting to be sent.
pub(crate) const LOG_QUEUE: usize = 1024;
/// Lines sent at once.
pub(crate) const LOG_SENDS: usize = 8;

/// The runtime's log queue.
#[derive(Debug)]
pub(crate) struct LogQueue {
    tx: mpsc::Sender<proto::PutLogRequest>,
    dropped: AtomicU64,
}

/// The task a running handler logs for (set around each handler by the worker).
#[derive(Clone)]
pub(crate) struct TaskLogTarget {
    pub queue: std::sync::Arc<LogQueue>,
    pub task_run_id: String,
    /// Its run (an event the handler pushes names both as its source).
    pub run_id: String,
    pub retry_count: i32,
}

/// The longest log line the engine takes (characters).
pub(crate) const MAX_LOG_CHARS: usize = 10_000;

/// The engine's name for a `tracing` level: it knows `DEBUG`, `INFO`, `WARN` and `ERROR`, so
/// `TRACE` is sent as `DEBUG`.
pub(crate) fn engine_level(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::TRACE | tracing::Level::DEBUG => "DEBUG",
        tracing::Level::INFO => "INFO",
        tracing::Level::WARN => "WARN",
        tracing::Level::ERROR => "ERROR",
    }
}

tokio::task_local! {
    /// The task whose handler runs in this tokio task (its log lines; the source its events
    /// name).
    pub(crate) static CURRENT_TASK: TaskLogTarget;
}

impl TaskLogTarget {
    /// The run and task of the handler running in this tokio task, if one is.
    pub(crate) fn current_source() -> Option<(String, String)> {
        CURRENT_TASK
            .try_with(|t| (t.run_id.clone(), t.task_run_id.clone()))
            .ok()
    }

    /// Queues `message` at `level` as this task's log line: an empty line is not sent (the
    /// engine refuses it), a longer one is cut to [`MAX_LOG_CHARS`] characters.
    pub(crate) fn log(&self, level: tracing::Level, mut message: String) {
        if message.is_empty() {
            return;
        }
        if let Some((cut, _)) = message.char_indices().nth(MAX_LOG_CHARS) {
            message.truncate(cut);
        }
        self.queue.push(proto::PutLogRequest {
            task_run_external_id: self.task_run_id.clone(),
            created_at: Some(proto::timestamp_now()),
            message,
            level: Some(engine_level(level).to_string()),
            metadata: String::new(),
            task_retry_count: Some(self.retry_count),
        });
    }
}

/// A `tracing` layer that forwards events emitted inside a task's handler to the engine as
/// that task's log lines, the way the Python SDK captures a task's `logging` (invariant 3).
/// Opt-in: add it to your subscriber, e.g.
/// `tracing_subscriber::registry().with(fmt::layer()).with(TaskLogLayer::default())`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskLogLayer;

/// Collects an event's message and fields as one line.
#[derive(Default)]
struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for TaskLogLayer {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if event.metadata().target().starts_with("hatchet_runtime") {
            return;
        }
        let _ = CURRENT_TASK.try_with(|task| {
            let mut line = Line::default();
            event.record(&mut line);
            task.log(*event.metadata().level(), line.0.trim().to_string());
        });
    }
}

impl LogQueue {
    /// Starts the shipper on `conn` (it ends with the runtime's lifecycle).
    pub(crate) fn start(conn: &Connection) -> LogQueue {
        let (tx, rx) = mpsc::channel(LOG_QUEUE);
        let conn = conn.clone();
        let life = conn.lifecycle().clone();
        tokio::spawn(async move {
            let client = conn.events();
            let ship = tokio_stream::wrappers::ReceiverStream::new(rx).for_each_concurrent(
                LOG_SENDS,
                |req| {
                    let (conn, client) = (&conn, &client);
                    async move {
                        let _ = conn
                            .call(
                                "/EventsService/PutLog",
                                client,
                                &req,
                                |mut c, r| async move { c.put_log(r).await },
                            )
                            .await;
                    }
                },
            );
            tokio::select! {
                _ = ship => {}
                _ = life.cancelled() => {}
            }
        });
        LogQueue {
            tx,
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues a line, or drops and counts it when the queue is full (invariant 1).
    pub(crate) fn push(&self, req: proto::PutLogRequest) {
        if self.tx.try_send(req).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 1 || n.is_multiple_of(1000) {
                tracing::warn!(
                    dropped = n,
                    "task log lines dropped: the engine is not taking them as fast as tasks write them"
                );
            }
        }
    }

    /// Lines dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tracing_level_maps_to_one_the_engine_accepts() {
        use tracing::Level;
        let levels = [
            Level::TRACE,
            Level::DEBUG,
            Level::INFO,
            Level::WARN,
            Level::ERROR,
        ];
        let names: Vec<&str> = levels.into_iter().map(engine_level).collect();
        assert_eq!(names, ["DEBUG", "DEBUG", "INFO", "WARN", "ERROR"]);
    }
}
