//! Task log lines (`Context::log`) shipped to the engine in the background, within bounds.
//!
//! # Invariants
//!
//! 1. `Context::log` never waits and never grows memory without limit: lines wait in a queue of
//!    [`LOG_QUEUE`]; when it is full (the engine is slow or down) a line is dropped and counted
//!    (`RuntimeHandle::logs_dropped`), with a warning on the first drop and every 1,000th.
//! 2. One shipper per runtime sends at most [`LOG_SENDS`] lines at once, each a unary
//!    `PutLog` under the retry core (an idempotent write); it stops with the runtime.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt as _;
use tokio::sync::mpsc;

use crate::connection::Connection;
use crate::proto;

/// Lines waiting to be sent.
pub const LOG_QUEUE: usize = 1024;
/// Lines sent at once.
pub const LOG_SENDS: usize = 8;

/// The runtime's log queue.
#[derive(Debug)]
pub(crate) struct LogQueue {
    tx: mpsc::Sender<proto::PutLogRequest>,
    dropped: AtomicU64,
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
                            .unary(
                                "/EventsService/PutLog",
                                None,
                                None,
                                None,
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
