//! The keyed streams (workflow runs, durable events) as one [`StreamKind`]: a registry of waiters
//! by key, replayed on every new stream, wanted while waiters remain.
//!
//! # Invariants
//!
//! 1. Opening a stream publishes it to the registry after queueing every pending key on it
//!    (replay before publish, [`super::keyed`] invariant 3); its end unpublishes that generation
//!    only.
//! 2. The stream is wanted while waiters remain; without waiters it goes idle and the next waiter
//!    re-arms it ([`super::stream`] invariant 3 makes concurrent needs coalesce).
//! 3. A stream kind may poll its pending keys while the stream stays down (the runs listener
//!    polls GetRunDetails after 30 s); one pass at a time.
//! 4. When the stream stops, every waiter fails with the reason and the stream's status; when the
//!    listener is stopped for good, later waiters are refused with the same reason.
//! 5. A probing kind's new stream carries, after the pending keys, one key the engine has
//!    answered before; the engine's answer to it reaches no waiter (or one that wants it).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::keyed::{Keyed, KeyedRegistry};
use super::reconnect::StreamEnd;
use super::stream::{EndReport, Flow, Judged, StreamKind};
use crate::connection::Connection;
use crate::retry::Backoff;

/// A keyed bidi stream: how to open it, how to back off, how to poll.
pub(crate) trait KeyedStream: Keyed + Sized {
    /// Name in logs and errors (the method path).
    const OP: &'static str;
    /// Whether pending keys are polled when the stream stays down.
    const POLLS: bool = false;
    /// Whether a new stream is probed with a key the engine answered before (so a stream the
    /// engine took and does not serve is told from an idle one, [`super::stream`] invariant 7).
    const PROBES: bool = false;
    /// Whether the stream rotates (`stream` invariant 8).
    const ROTATES: bool = false;
    /// Opens the stream, feeding it `requests`.
    fn open(
        conn: Connection,
        requests: tokio_stream::wrappers::UnboundedReceiverStream<Self::Req>,
    ) -> impl Future<Output = Result<tonic::Response<tonic::Streaming<Self::Resp>>, tonic::Status>> + Send;
    /// The reconnect backoff while waiters are pending.
    fn backoff(conn: &Connection) -> Backoff;
    /// One polling pass over the pending keys (only called when [`KeyedStream::POLLS`]).
    fn poll(
        _conn: &Connection,
        _registry: &KeyedRegistry<Self>,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A keyed stream consumer: its registry.
pub(crate) struct KeyedKind<P: KeyedStream> {
    /// The waiters.
    pub registry: Arc<KeyedRegistry<P>>,
}

impl<P: KeyedStream> StreamKind for KeyedKind<P> {
    type Item = P::Resp;
    const NAME: &'static str = P::OP;
    const POLLS: bool = P::POLLS;
    const ROTATES: bool = P::ROTATES;

    async fn open(
        &self,
        conn: &Connection,
        generation: u64,
    ) -> Result<tonic::Streaming<P::Resp>, tonic::Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let replayed = self.registry.publish(generation, tx, P::PROBES);
        tracing::debug!(generation, replayed, stream = P::OP, "stream opening");
        P::open(
            conn.clone(),
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        )
        .await
        .map(tonic::Response::into_inner)
    }

    async fn on_message(&self, item: P::Resp) -> Flow {
        self.registry.deliver(item);
        Flow::Continue
    }

    /// A burst of results (a million waiters' results arrive as bursts of small messages).
    const BATCH: usize = 64;

    async fn on_batch(&self, items: &mut Vec<P::Resp>) -> Flow {
        self.registry.deliver_all(items.drain(..));
        Flow::Continue
    }

    async fn on_end(&self, _conn: &Connection, generation: u64, report: &EndReport) -> Judged {
        self.registry.unpublish(generation);
        Judged::Decide(report.end)
    }

    fn wanted(&self) -> bool {
        self.registry.has_waiters()
    }

    /// A probed stream must answer within [`super::stream::OPEN_HELD_AFTER`]: the probe is a
    /// key the engine has answered, so an engine that serves the stream answers it at its next
    /// tick (the real engine reads the ended runs of a stream's ids every second).
    fn answer_within(&self) -> Option<std::time::Duration> {
        (P::PROBES && self.registry.probes()).then_some(super::stream::OPEN_HELD_AFTER)
    }

    fn backoff(&self, conn: &Connection) -> Backoff {
        P::backoff(conn)
    }

    fn on_stop(&self, why: &str, end: Option<StreamEnd>, permanent: bool) {
        if permanent {
            self.registry.refuse(why);
        }
        self.registry.fail_all(false, |key| {
            super::with_end_status(P::stopped_error(key, why), end, why)
        });
    }

    fn poll(&self, conn: &Connection) -> impl Future<Output = ()> + Send {
        P::poll(conn, &self.registry)
    }
}
