//! The engine's answers in the real engine's words: a refused definition, a skipped trigger,
//! an idempotency collision (one trigger's, or a bulk trigger's). A leaf: it imports no other
//! engine file.

use hatchet_runtime::protocol::{self as proto, v1};
use tonic::Status as GrpcStatus;

/// A refused definition's message as the real engine words it (its validator's): one numbered
/// line per `(field, condition)`.
pub(crate) fn validation_failed(problems: &[(String, String)]) -> String {
    let mut m = String::from("Validation failed with the following errors:\n");
    for (i, (field, condition)) in problems.iter().enumerate() {
        m.push_str(&format!(
            "{i}: validation failed on field 'CreateWorkflowVersionOpts.{field}': {condition}\n"
        ));
    }
    m
}

/// What a skipped trigger's status says first (see [`skipped_trigger`]).
const SKIPPED: &str = "trigger skipped: ";

/// The answer inside the engine to a trigger it skips without creating a run (a workflow's
/// idempotency key expression gives no key): the real engine answers such a trigger with the
/// id the run would have had, so the callers that answer a client turn it into a fresh id
/// ([`is_skipped_trigger`]); the others create nothing.
pub(crate) fn skipped_trigger(why: &str) -> GrpcStatus {
    GrpcStatus::aborted(format!("{SKIPPED}{why}"))
}

/// Whether `status` is a [`skipped_trigger`].
pub(crate) fn is_skipped_trigger(status: &GrpcStatus) -> bool {
    status.code() == tonic::Code::Aborted && status.message().starts_with(SKIPPED)
}

/// An `ALREADY_EXISTS` "idempotency key collision" status carrying `detail` under `type_url`.
fn collision_status(type_url: &str, detail: Vec<u8>) -> GrpcStatus {
    use prost::Message as _;
    let status = proto::RpcStatus {
        code: tonic::Code::AlreadyExists as i32,
        message: "idempotency key collision".into(),
        details: vec![prost_types::Any {
            type_url: type_url.into(),
            value: detail,
        }],
    };
    GrpcStatus::with_details(
        tonic::Code::AlreadyExists,
        "idempotency key collision",
        status.encode_to_vec().into(),
    )
}

/// The `ALREADY_EXISTS` status with a `v1.IdempotencyCollisionError` detail.
pub(crate) fn idempotency_collision(existing: &str) -> GrpcStatus {
    use prost::Message as _;
    // The real engine names only the existing run here (a bulk trigger names both).
    let detail = v1::IdempotencyCollisionError {
        existing_run_external_id: existing.to_string(),
        colliding_run_external_id: String::new(),
    };
    collision_status(
        proto::IDEMPOTENCY_COLLISION_TYPE_URL,
        detail.encode_to_vec(),
    )
}

/// The `ALREADY_EXISTS` status of a bulk trigger some of whose items collided, as the real
/// engine answers it: a `v1.BulkTriggerIdempotencyCollisionError` with the runs it created and
/// the collisions, each in item order.
pub(crate) fn bulk_idempotency_collision(
    created: Vec<String>,
    collisions: Vec<v1::IdempotencyCollisionError>,
) -> GrpcStatus {
    use prost::Message as _;
    let detail = v1::BulkTriggerIdempotencyCollisionError {
        successful_workflow_run_external_ids: created,
        collisions,
    };
    collision_status(
        proto::BULK_IDEMPOTENCY_COLLISION_TYPE_URL,
        detail.encode_to_vec(),
    )
}
