//! The gRPC gate: every request passes here first. It counts the attempt, checks the token,
//! and applies request-level faults, before any service code runs.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tonic::Status;
use tower::{Layer, Service};

use crate::faults::{Fault, Faults};

/// What the gate needs.
#[derive(Clone)]
pub(crate) struct Gate {
    pub faults: Faults,
    pub token: Arc<str>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate(..)")
    }
}

/// Whether an `authorization` value carries `token` (scheme match case-insensitive).
pub(crate) fn bearer_ok(header: Option<&str>, token: &str) -> bool {
    let Some(h) = header else { return false };
    let mut parts = h.splitn(2, ' ');
    let scheme = parts.next().unwrap_or("");
    let value = parts.next().unwrap_or("").trim();
    scheme.eq_ignore_ascii_case("bearer") && !value.is_empty() && value == token
}

impl<S> Layer<S> for Gate {
    type Service = GateService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GateService {
            gate: self.clone(),
            inner,
        }
    }
}

/// The gate around the tonic router.
#[derive(Clone, Debug)]
pub(crate) struct GateService<S> {
    gate: Gate,
    inner: S,
}

impl<S, B> Service<http::Request<B>> for GateService<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req.uri().path().to_string();
        self.gate.faults.count(&path);
        if req.headers().contains_key("grpc-timeout") {
            self.gate.faults.count_deadline(&path);
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authorized = bearer_ok(
            req.headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
            &self.gate.token,
        );
        let fault = if authorized {
            self.gate.faults.take(&path)
        } else {
            None
        };
        Box::pin(async move {
            if !authorized {
                return Ok(Status::unauthenticated("invalid auth token").into_http());
            }
            match fault {
                Some(Fault::Fail {
                    code,
                    message,
                    pushback_ms,
                }) => {
                    let mut s = Status::new(tonic::Code::from_i32(code), message);
                    if let Some(p) = pushback_ms
                        && let Ok(v) = p.parse()
                    {
                        s.metadata_mut().insert("grpc-retry-pushback-ms", v);
                    }
                    Ok(s.into_http())
                }
                Some(Fault::Delay { ms }) => {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    inner.call(req).await
                }
                Some(Fault::DelayAnswer { ms }) => {
                    let answer = inner.call(req).await?;
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    Ok(answer)
                }
                Some(Fault::Hang) => std::future::pending().await,
                _ => inner.call(req).await,
            }
        })
    }
}
