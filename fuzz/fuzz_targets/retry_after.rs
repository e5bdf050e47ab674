#![no_main]
//! `Retry-After` and `grpc-retry-pushback-ms` parsing never panic.
use hatchet_runtime::test_hooks::{parse_grpc_pushback, parse_retry_after};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_retry_after(&text, std::time::SystemTime::now());
    let _ = parse_grpc_pushback(&text);
});
