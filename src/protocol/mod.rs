//! The Hatchet wire protocol as the runtime and the development engine speak it: code generated
//! by `build.rs` from `proto/` (our own definitions, written from the protocol fact sheet), the
//! details the engine puts in its statuses, and the protocol's facts ([`calendar`]: the REST
//! API's time format; [`MAX_MESSAGE_BYTES`]).
//!
//! Private to the runtime: its public API converts to its own types at this boundary and never
//! names a generated type. The `protocol` feature makes it reachable (hidden from the docs, no
//! promise of stability) for the development engine, which serves it, and this workspace's
//! tests and benchmarks, which call it raw; `build.rs` generates the servers only then.
//!
//! The three legacy files have no package, so their types live at this module's root; the `v1`
//! files live in [`v1`]. The generated legacy code refers to `v1::…`, which resolves to the
//! sibling module below.

#![allow(
    missing_docs,
    unreachable_pub,
    unnameable_types,
    dead_code,
    clippy::all,
    clippy::pedantic
)]

pub mod calendar;
pub mod codec;

/// Largest message sent or received by default (the engine's default limit; the one copy of the
/// fact is the runtime's setting default).
pub const MAX_MESSAGE_BYTES: usize = crate::config::DEFAULT_MAX_MESSAGE_BYTES;

include!(concat!(env!("OUT_DIR"), "/_.rs"));

/// Package `v1`.
pub mod v1 {
    #![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/v1.rs"));
}

/// The OpenTelemetry trace export (OTLP/gRPC, package `opentelemetry.proto.collector.trace.v1`):
/// the spans an SDK sends to the engine's collector.
pub mod otlp {
    #![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
    include!(concat!(
        env!("OUT_DIR"),
        "/opentelemetry.proto.collector.trace.v1.rs"
    ));
}

/// The encoded `FileDescriptorSet` of every compiled file, for reflection in tests and tools.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/hatchet_descriptor.bin"));

/// `google.rpc.Status`: the container the engine puts in `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    /// The code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// The message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The details, as `Any`.
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<prost_types::Any>,
}

/// The type URL of the idempotency collision detail.
pub const IDEMPOTENCY_COLLISION_TYPE_URL: &str = "type.googleapis.com/v1.IdempotencyCollisionError";

/// The type URL of a bulk trigger's collision detail.
pub const BULK_IDEMPOTENCY_COLLISION_TYPE_URL: &str =
    "type.googleapis.com/v1.BulkTriggerIdempotencyCollisionError";

/// The `v1.BulkTriggerIdempotencyCollisionError` detail of an `ALREADY_EXISTS` status (a bulk
/// trigger some of whose items collided), if it carries one.
pub fn bulk_idempotency_collision(
    status: &tonic::Status,
) -> Option<v1::BulkTriggerIdempotencyCollisionError> {
    use prost::Message as _;
    if status.code() != tonic::Code::AlreadyExists || status.details().is_empty() {
        return None;
    }
    let rpc = RpcStatus::decode(status.details()).ok()?;
    rpc.details
        .iter()
        .find(|a| a.type_url == BULK_IDEMPOTENCY_COLLISION_TYPE_URL)
        .and_then(|a| v1::BulkTriggerIdempotencyCollisionError::decode(a.value.as_slice()).ok())
}

/// The `v1.IdempotencyCollisionError` detail of an `ALREADY_EXISTS` status, if it carries one.
pub fn idempotency_collision(status: &tonic::Status) -> Option<v1::IdempotencyCollisionError> {
    use prost::Message as _;
    if status.code() != tonic::Code::AlreadyExists || status.details().is_empty() {
        return None;
    }
    let rpc = RpcStatus::decode(status.details()).ok()?;
    rpc.details
        .iter()
        .find(|a| a.type_url == IDEMPOTENCY_COLLISION_TYPE_URL)
        .and_then(|a| v1::IdempotencyCollisionError::decode(a.value.as_slice()).ok())
}

/// The bytes a repeated message field of `encoded` bytes takes in its parent: its tag (one
/// byte, for field numbers under 16), its length prefix and itself.
pub fn framed_len(encoded: usize) -> usize {
    encoded + 1 + prost::length_delimiter_len(encoded)
}

/// A protobuf timestamp of `t`.
pub fn timestamp(t: std::time::SystemTime) -> prost_types::Timestamp {
    let d = t
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// The time a protobuf timestamp names; `None` for one out of range.
pub fn system_time(ts: &prost_types::Timestamp) -> Option<std::time::SystemTime> {
    let secs = u64::try_from(ts.seconds).ok()?;
    let nanos = u32::try_from(ts.nanos).ok()?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
}

/// A protobuf timestamp of now.
pub fn timestamp_now() -> prost_types::Timestamp {
    timestamp(std::time::SystemTime::now())
}

/// `t` as RFC 3339 in UTC (the REST API's time format), see [`calendar::format_rfc3339`].
pub fn rfc3339(t: std::time::SystemTime) -> String {
    calendar::format_rfc3339(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_dates() {
        let t = |s| std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        assert_eq!(rfc3339(t(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(t(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(t(1_796_083_200 + 3_723)), "2026-12-01T01:02:03Z");
    }
}
