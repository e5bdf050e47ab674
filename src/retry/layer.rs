//! The retry core as a tower layer over a tonic channel, so generated clients get the contract's
//! unary retries without calling [`super::grpc::call_unary`] themselves:
//!
//! ```no_run
//! # async fn demo(core: std::sync::Arc<hatchet_runtime::retry::RetryCore>, channel: tonic::transport::Channel) {
//! use hatchet_runtime::proto::dispatcher_client::DispatcherClient;
//! use hatchet_runtime::retry::layer::RetryLayer;
//! let channel = tower::ServiceBuilder::new().layer(RetryLayer::new(core)).service(channel);
//! let mut client = DispatcherClient::new(channel);
//! let _ = client.get_version(hatchet_runtime::proto::GetVersionRequest {}).await;
//! # }
//! ```
//!
//! # Invariants
//!
//! 1. Streams and unknown paths pass through untouched: only paths of the classification table
//!    are retried, so the layer never wraps a stream (the stream supervisor owns them).
//! 2. A unary request body is one small message (at most 4 MiB): it is buffered once and replayed
//!    from the buffer on each attempt.
//! 3. The caller's deadline is the request's `grpc-timeout`; each attempt carries what is left of
//!    it (or the 30 s backstop without one).
//! 4. A failure is read from a trailers-only response's `grpc-status` (how servers answer errors
//!    before any message). An error sent in trailers after a message passes through unretried.
//! 5. The final error is the original `tonic::Status`, with `x-hatchet-outcome` and
//!    `x-hatchet-attempts` metadata added; a per-request [`ClassOverride`] in the request's
//!    extensions (`tonic::Request::extensions_mut`) raises a write to an idempotent write.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt as _;
use tower::{Layer, Service, ServiceExt as _};

use super::class::{ClassOverride, request_class};
use super::executor::{Operation, RetryCore};
use super::grpc::attempt_error;
use crate::error::{Cause, Error};

/// Adds the retry core to a service.
#[derive(Debug, Clone)]
pub struct RetryLayer {
    core: Arc<RetryCore>,
}

impl RetryLayer {
    /// A layer running every unary call under `core`.
    pub fn new(core: Arc<RetryCore>) -> Self {
        RetryLayer { core }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryChannel<S>;
    fn layer(&self, inner: S) -> RetryChannel<S> {
        RetryChannel {
            inner,
            core: self.core.clone(),
        }
    }
}

/// A service that retries unary calls under the retry core.
#[derive(Debug, Clone)]
pub struct RetryChannel<S> {
    inner: S,
    core: Arc<RetryCore>,
}

/// The error type of [`RetryChannel`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Parses a `grpc-timeout` header value (`<digits><unit>`).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn grpc_timeout_value(d: Duration) -> String {
    // Milliseconds fit the 8-digit limit up to ~27 hours; beyond that, seconds.
    let ms = d.as_millis();
    if ms < 100_000_000 {
        format!("{}m", ms.max(1))
    } else {
        format!("{}S", d.as_secs().min(99_999_999))
    }
}

/// The status the caller sees for a final error, with the outcome and attempts as metadata.
pub fn status_of(e: Error) -> tonic::Status {
    let (outcome, attempts) = (e.outcome(), e.attempts());
    let mut status = match e.into_cause() {
        Some(Cause::Status(s)) => s,
        other => tonic::Status::unavailable(
            other
                .map(|c| c.to_string())
                .unwrap_or_else(|| outcome.hint().to_string()),
        ),
    };
    if let Ok(v) = outcome.as_str().parse() {
        status.metadata_mut().insert("x-hatchet-outcome", v);
    }
    if let Ok(v) = attempts.to_string().parse() {
        status.metadata_mut().insert("x-hatchet-attempts", v);
    }
    status
}

impl<S, ResBody> Service<http::Request<tonic::body::Body>> for RetryChannel<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let path = req.uri().path().to_string();
        let over = req.extensions().get::<ClassOverride>().copied();
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(class) = request_class(&path, over) else {
            // Invariant 1: streams and unknown paths pass through.
            return Box::pin(async move { inner.call(req).await.map_err(Into::into) });
        };
        let core = self.core.clone();
        Box::pin(async move {
            let timeout = req
                .headers()
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_grpc_timeout);
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map_err(|e| -> BoxError { format!("reading the request body: {e}").into() })?
                .to_bytes();
            let op = Operation::new(&path, class).timeout(timeout);
            let result = core
                .run(op, |t| {
                    let mut r = http::Request::new(tonic::body::Body::new(
                        http_body_util::Full::new(bytes.clone()),
                    ));
                    *r.method_mut() = parts.method.clone();
                    *r.uri_mut() = parts.uri.clone();
                    *r.version_mut() = parts.version;
                    *r.headers_mut() = parts.headers.clone();
                    if let Ok(v) = grpc_timeout_value(t).parse() {
                        r.headers_mut().insert("grpc-timeout", v);
                    }
                    let svc = inner.clone();
                    async move {
                        let resp = svc
                            .oneshot(r)
                            .await
                            .map_err(|e| attempt_error(tonic::Status::from_error(e.into())))?;
                        match tonic::Status::from_header_map(resp.headers()) {
                            Some(s) if s.code() != tonic::Code::Ok => Err(attempt_error(s)),
                            _ => Ok(resp),
                        }
                    }
                })
                .await;
            result.map_err(|e| -> BoxError { Box::new(status_of(e)) })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_round_trips() {
        for d in [
            Duration::from_millis(1),
            Duration::from_secs(30),
            Duration::from_secs(86_400 * 2),
        ] {
            let back = parse_grpc_timeout(&grpc_timeout_value(d)).expect("parses");
            assert!(back >= d.min(Duration::from_secs(99_999_999)) - Duration::from_millis(1));
        }
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        for bad in ["", "S", "5", "5x", "-5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
