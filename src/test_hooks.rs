//! Hooks for this workspace's own tests and chaos runs, behind the `test-hooks` feature (the
//! workspace's tests enable it; a user's build never has it). Each is a thin wrapper over an
//! internal, so the internals stay `pub(crate)`: what the tests read here is what they may
//! depend on, and nothing more. Not part of the public API: hidden from the docs, changed
//! without notice.

use std::time::Duration;

/// How the retry core reads a gRPC status (the `Debug` form of its failure: `Status { code,
/// pushback, attempt_timed_out }` or `Lost`): the engine's fault tests check that each fault
/// reads as the runtime expects.
pub fn read_status(status: &tonic::Status) -> String {
    format!("{:?}", crate::retry::grpc::failure_of_status(status))
}

/// The listeners' restart intensity limit (restarts per window before a listener stops).
pub const LISTENER_MAX_RESTARTS: usize = crate::runtime::supervisor::MAX_RESTARTS;

/// Times a durable request is sent before it fails.
pub const DURABLE_MAX_SEND_ATTEMPTS: u32 = crate::listener::durable_task::MAX_SEND_ATTEMPTS;

/// `Retry-After` parsing (the fuzz target's entry): the delay, if the value is one.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    crate::retry::pushback::parse_retry_after(value, now)
}

/// `grpc-retry-pushback-ms` parsing (the fuzz target's entry): `Some(delay)`, or `None` for
/// "do not retry".
pub fn parse_grpc_pushback(value: &str) -> Option<Duration> {
    match crate::retry::pushback::parse_grpc_pushback(value) {
        crate::retry::pushback::Pushback::After(d) => Some(d),
        crate::retry::pushback::Pushback::DoNotRetry => None,
    }
}

/// Decodes an assignment's `action_payload` (the fuzz target's entry): `Err` with the reason,
/// never a panic.
pub fn decode_action_payload(payload: &str) -> Result<(), String> {
    crate::worker::context::decode_action_payload(payload).map(|_| ())
}

/// Parses a token's claims (the fuzz target's entry).
pub fn parse_token_claims(token: &str) -> Result<(), String> {
    crate::config::parse_claims(
        "HATCHET_CLIENT_TOKEN",
        &crate::config::SecretToken::new(token),
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// Task log lines a worker queues before it drops (newest kept).
pub const LOG_QUEUE: usize = crate::logs::LOG_QUEUE;

/// Task log sends in flight at once.
pub const LOG_SENDS: usize = crate::logs::LOG_SENDS;

/// Every unary method the runtime calls (the retry class table's paths).
pub fn unary_methods() -> Vec<&'static str> {
    crate::retry::class::UNARY_METHODS
        .iter()
        .map(|(path, _, _)| *path)
        .collect()
}
