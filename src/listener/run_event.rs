//! A workflow-run event as the run stream hands it to a waiter: the run's key, read from the
//! message's wire bytes on the stream's task, and the bytes themselves, decoded by the waiter
//! that reads them.
//!
//! # Invariants
//!
//! 1. [`scan_run_id`] finds the run id prost would decode from the same bytes (the last
//!    `workflow_run_id` field, empty when there is none), and refuses exactly what is not a
//!    well-formed sequence of protobuf fields
//!    (`tests::the_scan_agrees_with_a_full_decode`).
//! 2. The stream's task allocates nothing per event but its key (none for a canonical UUID):
//!    the bytes are a slice of the stream's read buffer.
//!
//! Why: the stream's task used to decode every event in full (a vector, four or five strings)
//! and the waiter, on another thread, freed them: at a million results the allocator's
//! cross-thread path and the stream's single thread were the limit. Now the stream reads one
//! field, and the decoding and freeing happen on the waiter's thread, in parallel with the next
//! events.

use bytes::{Buf as _, Bytes};
use prost::Message as _;

use super::run_key::RunKey;
use crate::protocol as proto;

/// A run's event, not yet decoded.
#[derive(Clone)]
pub(crate) struct RunEvent {
    /// The run it answers.
    pub key: RunKey,
    body: Bytes,
}

impl std::fmt::Debug for RunEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEvent")
            .field("key", &self.key)
            .field("bytes", &self.body.len())
            .finish()
    }
}

impl RunEvent {
    /// The event in `body` (a `WorkflowRunEvent`'s encoding), keyed by its run id.
    pub(crate) fn from_bytes(body: Bytes) -> Result<Self, ScanError> {
        let key = RunKey::new(scan_run_id(&body)?);
        Ok(RunEvent { key, body })
    }

    /// An event the runtime built itself (the polling fallback's): encoded once, so every
    /// waiter reads events the same way.
    pub(crate) fn from_event(ev: &proto::WorkflowRunEvent) -> Self {
        RunEvent {
            key: RunKey::new(&ev.workflow_run_id),
            body: Bytes::from(ev.encode_to_vec()),
        }
    }

    /// The whole event, decoded (on the caller's thread).
    pub(crate) fn decode(self) -> Result<proto::WorkflowRunEvent, prost::DecodeError> {
        proto::WorkflowRunEvent::decode(self.body)
    }
}

/// Why an event's bytes are not a protobuf message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScanError {
    /// A varint or a field runs past the end.
    Truncated,
    /// A field's wire type is not one protobuf defines (or is a deprecated group).
    WireType(u8),
    /// The run id is not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Truncated => f.write_str("a field runs past the message's end"),
            ScanError::WireType(w) => write!(f, "unknown wire type {w}"),
            ScanError::NotUtf8 => f.write_str("the run id is not UTF-8"),
        }
    }
}

/// `WorkflowRunEvent.workflow_run_id`'s field number.
const RUN_ID_FIELD: u64 = 1;

/// Groups nested deeper than this are refused (prost's own recursion limit).
const MAX_GROUP_DEPTH: usize = 100;

/// The run id in a `WorkflowRunEvent`'s encoding, without decoding the rest (a pure function):
/// every field is skipped by its wire type, and the last run id field wins, as in a decode.
pub(crate) fn scan_run_id(mut buf: &[u8]) -> Result<&str, ScanError> {
    let mut id: &[u8] = &[];
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        if key >> 3 == RUN_ID_FIELD && key & 7 == 2 {
            id = length_delimited(&mut buf)?;
        } else {
            skip(&mut buf, key, 0)?;
        }
    }
    std::str::from_utf8(id).map_err(|_| ScanError::NotUtf8)
}

/// Skips the value of the field whose key was just read (a group up to its end).
fn skip(buf: &mut &[u8], key: u64, depth: usize) -> Result<(), ScanError> {
    match (key & 7) as u8 {
        0 => varint(buf).map(drop),
        1 => take(buf, 8).map(drop),
        5 => take(buf, 4).map(drop),
        2 => length_delimited(buf).map(drop),
        3 if depth < MAX_GROUP_DEPTH => loop {
            if buf.is_empty() {
                return Err(ScanError::Truncated);
            }
            let inner = varint(buf)?;
            if inner & 7 == 4 {
                return if inner >> 3 == key >> 3 {
                    Ok(())
                } else {
                    Err(ScanError::WireType(4))
                };
            }
            skip(buf, inner, depth + 1)?;
        },
        w => Err(ScanError::WireType(w)),
    }
}

/// A length-delimited value.
fn length_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], ScanError> {
    let n = usize::try_from(varint(buf)?).map_err(|_| ScanError::Truncated)?;
    take(buf, n)
}

/// The next `n` bytes.
fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], ScanError> {
    if buf.len() < n {
        return Err(ScanError::Truncated);
    }
    let (v, rest) = buf.split_at(n);
    *buf = rest;
    Ok(v)
}

/// Reads one varint (at most ten bytes).
fn varint(buf: &mut &[u8]) -> Result<u64, ScanError> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(ScanError::Truncated);
        };
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(ScanError::Truncated)
}

/// The run stream's codec: requests encoded by prost, events kept as bytes with their key.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunEventCodec;

/// Encodes subscription requests.
#[derive(Debug)]
pub(crate) struct RequestEncoder;

/// Keys each event as it arrives.
#[derive(Debug)]
pub(crate) struct RunEventDecoder;

impl tonic::codec::Codec for RunEventCodec {
    type Encode = proto::SubscribeToWorkflowRunsRequest;
    type Decode = RunEvent;
    type Encoder = RequestEncoder;
    type Decoder = RunEventDecoder;

    fn encoder(&mut self) -> RequestEncoder {
        RequestEncoder
    }

    fn decoder(&mut self) -> RunEventDecoder {
        RunEventDecoder
    }
}

impl tonic::codec::Encoder for RequestEncoder {
    type Item = proto::SubscribeToWorkflowRunsRequest;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Self::Item,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(dst).map_err(|e| {
            tonic::Status::internal(format!("could not encode a run subscription: {e}"))
        })
    }
}

impl tonic::codec::Decoder for RunEventDecoder {
    type Item = RunEvent;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<RunEvent>, tonic::Status> {
        let body = src.copy_to_bytes(src.remaining());
        RunEvent::from_bytes(body).map(Some).map_err(|e| {
            tonic::Status::internal(format!(
                "the engine sent a run event that is not a WorkflowRunEvent ({e})"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event(id: &str, outputs: usize) -> proto::WorkflowRunEvent {
        proto::WorkflowRunEvent {
            workflow_run_id: id.into(),
            event_type: proto::WorkflowRunEventType::Finished as i32,
            event_timestamp: Some(proto::timestamp_now()),
            results: (0..outputs)
                .map(|i| proto::StepRunResult {
                    task_run_external_id: format!("t{i}"),
                    task_name: format!("task-{i}"),
                    job_run_id: "job".into(),
                    error: None,
                    output: Some(format!("{{\"i\":{i}}}")),
                })
                .collect(),
        }
    }

    #[test]
    fn an_event_is_keyed_by_its_run_and_decodes_whole() {
        let id = "6f1c2a9e-8b1d-4c3e-9f00-1a2b3c4d5e6f";
        let ev = event(id, 3);
        let raw = RunEvent::from_bytes(Bytes::from(ev.encode_to_vec())).expect("scans");
        assert_eq!(raw.key, RunKey::new(id));
        assert_eq!(raw.clone().decode().expect("decodes"), ev);
        assert_eq!(RunEvent::from_event(&ev).decode().expect("decodes"), ev);
        // Fields before the run id, and a later run id that wins (as in a decode).
        let mut bytes = event("", 1).encode_to_vec();
        bytes.extend(event("first", 0).encode_to_vec());
        bytes.extend(event("second", 0).encode_to_vec());
        assert_eq!(scan_run_id(&bytes), Ok("second"));
        assert_eq!(scan_run_id(&[]), Ok(""), "no run id: the empty default");
    }

    #[test]
    fn bytes_that_are_not_fields_are_refused_with_the_reason() {
        assert_eq!(scan_run_id(&[0x0a, 5, b'a']), Err(ScanError::Truncated));
        assert_eq!(scan_run_id(&[0x0e]), Err(ScanError::WireType(6)));
        assert_eq!(
            scan_run_id(&[0x0b]),
            Err(ScanError::Truncated),
            "a group never ended"
        );
        assert_eq!(scan_run_id(&[0x0a, 1, 0xff]), Err(ScanError::NotUtf8));
        assert_eq!(scan_run_id(&[0x80; 11]), Err(ScanError::Truncated));
        assert_eq!(
            scan_run_id(&[0x4b, 0x54]),
            Err(ScanError::WireType(4)),
            "a group ends as it began"
        );
        assert_eq!(
            scan_run_id(&[0x4b, 0x08, 0x01, 0x4c, 0x0a, 1, b'r']),
            Ok("r"),
            "a group is skipped"
        );
        assert!(ScanError::WireType(3).to_string().contains("wire type 3"));
    }

    proptest! {
        #[test]
        fn the_scan_agrees_with_a_full_decode(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            // Invariant 1: where prost decodes the bytes, the scan finds the same run id; where
            // the scan refuses them, prost refuses them too.
            let decoded = proto::WorkflowRunEvent::decode(bytes.as_slice());
            match scan_run_id(&bytes) {
                Ok(id) => {
                    if let Ok(ev) = decoded {
                        prop_assert_eq!(ev.workflow_run_id.as_str(), id);
                    }
                }
                Err(_) => prop_assert!(decoded.is_err()),
            }
        }

        #[test]
        fn the_scan_reads_every_encoded_event(id in "[a-z0-9-]{0,40}", n in 0usize..4) {
            let bytes = event(&id, n).encode_to_vec();
            prop_assert_eq!(scan_run_id(&bytes), Ok(id.as_str()));
        }
    }
}
