#![no_main]
//! Decoding an assignment's `action_payload` JSON never panics.
use hatchet_runtime::test_hooks::decode_action_payload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_action_payload(&String::from_utf8_lossy(data));
});
