//! What the retry service answers for: whether each endpoint retries, and its budget now.

/// The retry state of one endpoint (unary gRPC, or REST).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointRetries {
    /// Whether a failed call is retried (within its class's rules): the environment's kill
    /// switch and [`crate::runtime::RuntimeHandle::set_retries`] both allow it.
    pub retrying: bool,
    /// The environment turned retries off at start (`HATCHET_CLIENT_NO_RETRY`, or
    /// `HATCHET_CLIENT_NO_GRPC_RETRY` for gRPC); `set_retries(true)` cannot turn them back on.
    pub off_by_environment: bool,
    /// First attempts in the budget's window.
    pub first_attempts: u64,
    /// Retries spent in the window.
    pub retries: u64,
    /// Retries the window allows at this moment (grows with first attempts).
    pub retry_limit: u64,
}

/// What the retry service says of both endpoints ([`crate::runtime::RuntimeHandle::retries`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryReport {
    /// Unary gRPC calls.
    pub grpc: EndpointRetries,
    /// REST calls.
    pub rest: EndpointRetries,
}
