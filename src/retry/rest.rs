//! The REST side of the retry core: a reqwest call run under a [`RetryCore`].
//!
//! # Invariants
//!
//! 1. GET and HEAD are reads: retried on 429, 502, 503, 504 and transport errors. Every other
//!    method is a write: sent once, retried only when the connection was refused before anything
//!    was sent (the body never left, so it is not replayed).
//! 2. `Retry-After` on 429 and 503, in delta-seconds or HTTP-date, replaces the backoff up to 60 s;
//!    a longer one (or one past the deadline) ends the retries.
//! 3. A discarded response body is read (up to [`MAX_BODY`]) so its connection is reused; the
//!    final response, success or not, is returned intact to the caller.
//! 4. The request is rebuilt for every attempt, so headers (`Authorization`) are on every one.
//! 5. No attempt runs without a timeout: the caller's deadline, else the 30 s backstop.

use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::class::RequestClass;
use super::decision::{Failure, TRANSIENT_HTTP};
use super::executor::{AttemptError, Operation, RetryCore};
use super::pushback::parse_retry_after;
use crate::error::{Cause, Error};

/// Largest body read from a response: a run's details carry every task's output (each up to
/// the 4 MiB a gRPC message holds), so a DAG's read is larger than one message.
pub(crate) const MAX_BODY: usize = 64 * 1024 * 1024;

/// A complete HTTP response.
#[derive(Debug, Clone)]
pub(crate) struct RestResponse {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body (at most [`MAX_BODY`]).
    pub body: bytes::Bytes,
}

impl RestResponse {
    /// Whether the status is 2xx.
    pub(crate) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The class of an HTTP method.
pub(crate) fn class_of_method(m: &reqwest::Method) -> RequestClass {
    if m == reqwest::Method::GET || m == reqwest::Method::HEAD {
        RequestClass::Read
    } else {
        RequestClass::Write
    }
}

async fn read_body(
    resp: reqwest::Response,
) -> Result<(u16, reqwest::header::HeaderMap, bytes::Bytes), reqwest::Error> {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut resp = resp;
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = resp.chunk().await? {
        if buf.len() + chunk.len() > MAX_BODY {
            buf.extend_from_slice(&chunk[..MAX_BODY - buf.len()]);
            break;
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((status, headers, buf.freeze()))
}

fn transport_failure(e: &reqwest::Error) -> Failure {
    if e.is_connect() {
        Failure::NotSent
    } else if e.is_timeout() {
        Failure::Status {
            code: tonic::Code::DeadlineExceeded,
            pushback: None,
            attempt_timed_out: true,
        }
    } else {
        Failure::Lost
    }
}

/// Sends the request `build` makes (called once per attempt) under `core`, and returns the final
/// response intact. `route` names the operation in spans, counters and errors.
///
/// # Cancel safety
///
/// Cancel safe: dropping the future abandons the attempt in flight and starts no other.
pub(crate) async fn send(
    core: &RetryCore,
    route: &str,
    method: reqwest::Method,
    timeout: Option<Duration>,
    cancel: Option<&tokio_util::sync::CancellationToken>,
    build: impl Fn(Duration) -> reqwest::RequestBuilder,
) -> Result<RestResponse, Error> {
    let class = class_of_method(&method);
    let last: Mutex<Option<RestResponse>> = Mutex::new(None);
    let op = Operation::new(route, class).timeout(timeout).cancel(cancel);
    let result = core
        .run(op, |t| {
            let req = build(t).timeout(t);
            let last = &last;
            async move {
                let resp = req.send().await.map_err(|e| AttemptError {
                    failure: transport_failure(&e),
                    cause: Cause::http(e),
                })?;
                let (status, headers, body) = read_body(resp).await.map_err(|e| AttemptError {
                    failure: Failure::Lost,
                    cause: Cause::http(e),
                })?;
                let response = RestResponse {
                    status,
                    headers,
                    body,
                };
                if response.is_success() || !TRANSIENT_HTTP.contains(&status) {
                    return Ok(response);
                }
                let retry_after = response
                    .headers
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now()));
                let text = String::from_utf8_lossy(&response.body[..response.body.len().min(4096)])
                    .into_owned();
                *last.lock() = Some(response);
                Err(AttemptError {
                    failure: Failure::Http {
                        status,
                        retry_after,
                    },
                    cause: Cause::HttpStatus { status, body: text },
                })
            }
        })
        .await;
    match result {
        Ok(r) => Ok(r),
        // The retries ended on an HTTP answer: hand back that answer intact (invariant 3).
        Err(e) if matches!(e.cause(), Some(Cause::HttpStatus { .. })) => match last.lock().take() {
            Some(r) => Ok(r),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[path = "rest_tests.rs"]
mod tests;
