//! The durable-events listener: the legacy durable path (`RegisterDurableEvent` +
//! `ListenForDurableEvent`), for engines older than v0.80.0 (hatchet-protocol.md §4.8). A
//! keyed stream like the workflow-runs one: keys are `(task id, signal key)`, replayed on every
//! new stream; idle without waiters.

use super::keyed::Keyed;
use super::subscriptions::{KeyedKind, KeyedStream};
use crate::connection::Connection;
use crate::error::{Error, Outcome};
use crate::protocol::v1;

/// The `ListenForDurableEvent` stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DurableEventsStream;

impl Keyed for DurableEventsStream {
    type Key = (String, String);
    type Req = v1::ListenForDurableEventRequest;
    type Resp = v1::DurableEvent;

    fn request(key: &(String, String)) -> Self::Req {
        v1::ListenForDurableEventRequest {
            task_id: key.0.clone(),
            signal_key: key.1.clone(),
        }
    }

    fn key_of(resp: &Self::Resp) -> (String, String) {
        (resp.task_id.clone(), resp.signal_key.clone())
    }

    fn stopped_error(key: &(String, String), why: &str) -> Error {
        Error::new(Outcome::Stopped, Self::OP).with_detail(format!(
            "the durable event stream stopped ({why}) while task {} waited on {}",
            key.0, key.1
        ))
    }
}

impl KeyedStream for DurableEventsStream {
    const OP: &'static str = "/v1.V1Dispatcher/ListenForDurableEvent";

    async fn open(
        conn: Connection,
        requests: tokio_stream::wrappers::UnboundedReceiverStream<Self::Req>,
    ) -> Result<tonic::Response<tonic::Streaming<Self::Resp>>, tonic::Status> {
        conn.v1_dispatcher()
            .listen_for_durable_event(requests)
            .await
    }

    fn backoff(conn: &Connection) -> crate::retry::Backoff {
        conn.backoff().stream
    }
}

/// The durable-events listener's kind.
pub(crate) type DurableEventsKind = KeyedKind<DurableEventsStream>;
