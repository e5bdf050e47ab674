//! Server pushback: gRPC `grpc-retry-pushback-ms` (gRFC A6) and HTTP `Retry-After` (RFC 9110).
//!
//! Both parsers are total: any input yields a value, never a panic.

use std::time::{Duration, SystemTime};

/// The trailer name of gRPC pushback.
pub(crate) const GRPC_PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// Largest `Retry-After` the runtime honours; a longer one ends the retries (docs/contract.md §2).
pub(crate) const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// What the server asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// Retry no sooner than this.
    After(Duration),
    /// Do not retry (a negative or malformed gRPC pushback).
    DoNotRetry,
}

/// Parses a `grpc-retry-pushback-ms` value: a non-negative decimal integer of milliseconds is
/// `After`; anything else (negative, malformed, empty) is `DoNotRetry`, as gRFC A6 says.
pub(crate) fn parse_grpc_pushback(value: &str) -> Pushback {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Pushback::DoNotRetry;
    }
    match v.parse::<u64>() {
        Ok(ms) => Pushback::After(Duration::from_millis(ms)),
        Err(_) => Pushback::DoNotRetry,
    }
}

/// Reads the pushback from a status's metadata (trailers), if present.
pub(crate) fn grpc_pushback(status: &tonic::Status) -> Option<Pushback> {
    let v = status.metadata().get(GRPC_PUSHBACK_KEY)?;
    Some(match v.to_str() {
        Ok(s) => parse_grpc_pushback(s),
        Err(_) => Pushback::DoNotRetry,
    })
}

/// Parses an HTTP `Retry-After` value, either delta-seconds or an HTTP-date (relative to `now`).
/// A date in the past means "now" (zero). Unparseable input is `None` (ignored: normal backoff).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long digit strings saturate rather than fail: they are "too long" anyway.
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_pushback_values() {
        assert_eq!(
            parse_grpc_pushback("1500"),
            Pushback::After(Duration::from_millis(1500))
        );
        assert_eq!(parse_grpc_pushback("0"), Pushback::After(Duration::ZERO));
        assert_eq!(parse_grpc_pushback("-1"), Pushback::DoNotRetry);
        assert_eq!(parse_grpc_pushback("soon"), Pushback::DoNotRetry);
        assert_eq!(parse_grpc_pushback(""), Pushback::DoNotRetry);
        assert_eq!(
            parse_grpc_pushback("99999999999999999999999"),
            Pushback::DoNotRetry
        );
    }

    #[test]
    fn retry_after_both_forms() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("later", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
