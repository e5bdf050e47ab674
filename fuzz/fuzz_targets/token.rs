#![no_main]
//! Token parsing and configuration from a token-bearing environment never panic.
use hatchet_runtime::config::ClientConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let _ = hatchet_runtime::test_hooks::parse_token_claims(&text);
    let _ = ClientConfig::from_lookup(|k| (k == "HATCHET_CLIENT_TOKEN").then(|| text.clone()));
});
