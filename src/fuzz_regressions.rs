//! Inputs kept from fuzzing (`scripts/fuzz.sh`) and edge cases next to them: each must give a
//! clear error or value, never a panic. A crash the fuzzer finds gets its input added here.
//! Unit tests of the crate: the parsers they drive are internal (the fuzz targets reach them
//! through `test_hooks`).

use std::time::{Duration, SystemTime};

use crate::config::{SecretToken, parse_claims};
use crate::retry::pushback::{Pushback, parse_grpc_pushback, parse_retry_after};
use crate::worker::context::decode_action_payload;

#[test]
fn token_edge_cases() {
    for t in [
        "",
        ".",
        "..",
        "...",
        "a.b.c",
        "ey.ey.ey",
        "eyJ9.eyJ9.eyJ9",
        "\u{0}.\u{0}.\u{0}",
        "a.bnVsbA.c",
        "a.W10.c",
        "a.IjEi.c",
    ] {
        assert!(
            parse_claims("HATCHET_CLIENT_TOKEN", &SecretToken::new(t)).is_err(),
            "{t:?}"
        );
    }
}

#[test]
fn retry_after_edge_cases() {
    let now = SystemTime::now();
    assert_eq!(
        parse_retry_after("99999999999999999999999999", now),
        Some(Duration::from_secs(u64::MAX))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after(" 3 ", now), Some(Duration::from_secs(3)));
    assert_eq!(parse_retry_after("3.5", now), None);
    assert_eq!(parse_grpc_pushback("+5"), Pushback::DoNotRetry);
    assert_eq!(
        parse_grpc_pushback("٣"),
        Pushback::DoNotRetry,
        "non-ASCII digits are malformed"
    );
}

#[test]
fn action_payload_edge_cases() {
    assert!(decode_action_payload("").is_ok(), "empty means no input");
    assert!(decode_action_payload("null").is_err());
    assert!(decode_action_payload("[]").is_err());
    assert!(
        decode_action_payload(r#"{"input": null, "parents": 5}"#).is_ok(),
        "missing and mistyped keys are tolerated"
    );
    let p = decode_action_payload(
        r#"{"input": {"a": 1}, "parents": {"p": {"b": 2}}, "step_run_errors": {"t": "boom", "u": 7}, "triggers": {"k": 1}, "extra": true}"#,
    )
    .expect("ok");
    assert_eq!(
        (p.input["a"].as_i64(), p.parents["p"]["b"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(
        (p.errors["t"].as_str(), p.errors["u"].as_str()),
        ("boom", "7")
    );
    assert_eq!(p.triggers["k"], 1);
    assert_eq!(
        decode_action_payload(r#"{"input": null}"#)
            .expect("ok")
            .input,
        serde_json::json!({}),
        "a null input reads as no input"
    );
    let deep = "[".repeat(10_000);
    assert!(
        decode_action_payload(&format!(r#"{{"input": {deep}}}"#)).is_err(),
        "deep nesting is an error, not a stack overflow"
    );
}
