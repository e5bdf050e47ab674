//! The gRPC side of the retry core: turning a `tonic::Status` into a [`Failure`], and running a
//! unary call under a [`RetryCore`].
//!
//! # Invariants
//!
//! 1. A status is [`Failure::NotSent`] only when its source chain proves the request never left:
//!    a `tonic::ConnectError` (no connection), or an HTTP/2 `REFUSED_STREAM` (the server refused
//!    the stream before processing it, RFC 9113 §8.7).
//! 2. A status whose source chain shows the connection broke under the request (hyper's
//!    "operation was canceled", a closed or incomplete connection, an h2 CANCEL or GOAWAY, an I/O
//!    reset: any client-side transport error) is [`Failure::Lost`]: the request may have been sent, so writes are *maybe executed*
//!    and idempotent calls retry. Only a CANCELLED the server itself sent (no transport source)
//!    is the never-retried CANCELLED of the contract.
//! 3. A TLS handshake that read bytes that are not TLS is [`Failure::Misconfigured`]: the
//!    server speaks plaintext there; nothing ran and trying again never helps. Only a failure
//!    while connecting (a `tonic::ConnectError` in the chain) counts: a record that is not TLS
//!    on a connection already up may come after the request went, and is lost, not refused.
//! 4. RESOURCE_EXHAUSTED with grpc-go's words for a message over the server's receive limit is
//!    [`Failure::RefusedUnread`]: nothing ran, so a write is rejected, never *maybe executed*.
//! 5. Streams never come here: [`super::class::class_of`] has no entry for them, and
//!    [`call_unary`] refuses paths it cannot classify.

use std::error::Error as _;
use std::time::Duration;

use super::class::{ClassOverride, request_class};
use super::decision::Failure;
use super::executor::{AttemptError, Operation, RetryCore};
use super::pushback::grpc_pushback;
use crate::error::{Cause, Error};

/// Whether any error of the status's source chain satisfies `hit`.
fn chain_has(
    status: &tonic::Status,
    hit: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> bool {
    status.source().is_some_and(|e| error_chain_has(e, &hit))
}

/// Whether `e` or an error under it satisfies `hit`, looking inside an I/O error at the error
/// it wraps (tokio-rustls reports a TLS failure as an I/O error around the `rustls::Error`,
/// and `io::Error::source` skips the wrapped error itself).
fn error_chain_has(
    e: &(dyn std::error::Error + 'static),
    hit: &impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> bool {
    if hit(e) {
        return true;
    }
    let wrapped = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .is_some_and(|inner| error_chain_has(inner, hit));
    wrapped || e.source().is_some_and(|s| error_chain_has(s, hit))
}

/// Whether an error is a refused TCP connection.
fn is_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// Whether the status's source chain proves the request never reached the server.
pub(crate) fn status_not_sent(status: &tonic::Status) -> bool {
    chain_has(status, |e| {
        e.is::<tonic::ConnectError>()
            || e.downcast_ref::<h2::Error>()
                .is_some_and(|h2| h2.reason() == Some(h2::Reason::REFUSED_STREAM))
            || is_refused(e)
    })
}

/// Whether the TLS handshake read bytes that are not TLS (rustls's `InvalidMessage` while
/// connecting, invariant 3): the server speaks something else on that port, plaintext most
/// likely. Nothing was sent over TLS.
pub(crate) fn status_tls_garbled(status: &tonic::Status) -> bool {
    chain_has(status, |e| e.is::<tonic::ConnectError>())
        && chain_has(status, |e| {
            matches!(
                e.downcast_ref::<rustls::Error>(),
                Some(rustls::Error::InvalidMessage(_))
            )
        })
}

/// Whether the status's source chain is a refused TCP connection.
pub(crate) fn status_connection_refused(status: &tonic::Status) -> bool {
    chain_has(status, is_refused)
}

/// Whether the status is tonic's own client-side timeout (`grpc-timeout` expired locally), which
/// tonic reports as CANCELLED with a `TimeoutExpired` source.
pub(crate) fn status_is_local_timeout(status: &tonic::Status) -> bool {
    chain_has(status, |e| e.is::<tonic::TimeoutExpired>())
}

/// Whether the status's source chain shows the connection broke while the request was out: any
/// client-side transport error (hyper, h2, I/O, tonic transport) under the status. A status the
/// server sent has no such source.
pub(crate) fn status_connection_lost(status: &tonic::Status) -> bool {
    chain_has(status, |e| {
        e.is::<hyper::Error>()
            || e.is::<h2::Error>()
            || e.is::<std::io::Error>()
            || e.is::<tonic::transport::Error>()
    })
}

/// Whether the server's gRPC layer refused the request before reading it: RESOURCE_EXHAUSTED
/// with grpc-go's words for a message over its receive limit (`grpc: received message larger
/// than max (N vs. M)`). Nothing ran, and the same request is refused again: a rejection, not
/// a "maybe executed".
pub(crate) fn status_refused_unread(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::ResourceExhausted
        && status
            .message()
            .contains("received message larger than max")
}

/// The [`Failure`] a status represents.
pub(crate) fn failure_of_status(status: &tonic::Status) -> Failure {
    if status_tls_garbled(status) {
        return Failure::Misconfigured;
    }
    if status_not_sent(status) {
        return Failure::NotSent;
    }
    if status_is_local_timeout(status) {
        return Failure::Status {
            code: tonic::Code::DeadlineExceeded,
            pushback: None,
            attempt_timed_out: true,
        };
    }
    if status_connection_lost(status) {
        return Failure::Lost;
    }
    if status_refused_unread(status) {
        return Failure::RefusedUnread;
    }
    Failure::Status {
        code: status.code(),
        pushback: grpc_pushback(status),
        attempt_timed_out: false,
    }
}

/// Wraps a status as an [`AttemptError`].
pub(crate) fn attempt_error(status: tonic::Status) -> AttemptError {
    AttemptError {
        failure: failure_of_status(&status),
        cause: Cause::status(status),
    }
}

/// How one unary call is made, besides its request: its class (the method's own from
/// [`super::class::UNARY_METHODS`] unless overridden), the caller's deadline (the only one
/// sent as `grpc-timeout`) and what cancels it (the runtime's shutdown when unset).
#[derive(Debug, Clone, Default)]
pub(crate) struct CallOpts {
    class: Option<ClassOverride>,
    timeout: Option<Duration>,
    cancel: Option<tokio_util::sync::CancellationToken>,
}

impl CallOpts {
    /// The method's own class, no deadline, cancelled by shutdown: the common case.
    pub(crate) fn new() -> Self {
        CallOpts::default()
    }

    /// Overrides the method's class (an idempotency key makes a trigger idempotent).
    pub(crate) fn class(mut self, over: Option<ClassOverride>) -> Self {
        self.class = over;
        self
    }

    /// The caller's deadline for the whole operation, retries included.
    pub(crate) fn timeout(mut self, t: Option<Duration>) -> Self {
        self.timeout = t;
        self
    }

    /// What cancels the call (a task's cancellation, a stream's generation).
    pub(crate) fn cancel(mut self, c: Option<tokio_util::sync::CancellationToken>) -> Self {
        self.cancel = c;
        self
    }

    /// The caller's deadline.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.timeout
    }
}

/// Runs one unary gRPC call under `core`. `call` builds and sends the request; it receives the
/// attempt timeout, which it should set on the `tonic::Request` (so the server sees
/// `grpc-timeout`).
///
/// # Cancel safety
///
/// Cancel safe: see [`RetryCore::run`].
pub(crate) async fn call_unary<T, F, Fut>(
    core: &RetryCore,
    path: &'static str,
    opts: &CallOpts,
    shutdown: &tokio_util::sync::CancellationToken,
    mut call: F,
) -> Result<T, Error>
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let class = request_class(path, opts.class).ok_or_else(|| {
        Error::invalid(path, "not a unary method of the classification table; streams are owned by the stream supervisor")
    })?;
    let cancel = opts.cancel.as_ref().unwrap_or(shutdown);
    let op = Operation::new(path, class)
        .timeout(opts.timeout)
        .cancel(Some(cancel));
    core.run(op, |t| {
        let fut = call(t);
        async move { fut.await.map_err(attempt_error) }
    })
    .await
}

/// Builds a `tonic::Request` with the attempt's timeout set (sent as `grpc-timeout`).
pub(crate) fn request_with_timeout<M>(msg: M, timeout: Duration) -> tonic::Request<M> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant 3: a record that is not TLS on a connection already up (no `ConnectError` in
    /// the chain) may come after the request went: it is lost, not a misconfiguration.
    #[test]
    fn garbled_tls_after_connecting_is_lost_not_misconfigured() {
        let rustls = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls);
        let status = tonic::Status::from_error(Box::new(io));
        assert!(!status_tls_garbled(&status));
        assert!(matches!(failure_of_status(&status), Failure::Lost));
    }
}
