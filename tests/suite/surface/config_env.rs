//! Configuration from the environment and the builder: precedence, and one test per bad input.

use std::collections::HashMap;

use hatchet_runtime::config::{ClientConfig, TlsStrategy};
use hatchet_runtime::config::{ConfigError, encode_dev_token, vars};

const TENANT: &str = "707d0855-80ab-4e1f-a156-f1c4546cbf52";

fn dev_token_text() -> String {
    use base64::Engine as _;
    let enc = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    format!(
        "{}.{}.{}",
        enc(serde_json::json!({"alg": "ES256", "typ": "JWT"})),
        enc(serde_json::json!({
            "sub": TENANT,
            "server_url": "http://127.0.0.1:8080",
            "grpc_broadcast_address": "127.0.0.1:7077",
            "exp": 4_000_000_000u64,
        })),
        "c2ln"
    )
}

fn env(pairs: &[(&str, &str)]) -> Result<ClientConfig, ConfigError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ClientConfig::from_lookup(|k| map.get(k).cloned())
}

fn jwt_with(payload: serde_json::Value) -> String {
    use base64::Engine as _;
    let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.sig",
        e.encode("{\"alg\":\"ES256\"}"),
        e.encode(payload.to_string())
    )
}

#[test]
fn claims_supply_the_addresses_and_tenant() {
    let t = dev_token_text();
    let cfg = env(&[(vars::TOKEN, &t), (vars::TLS_STRATEGY, "none")]).expect("valid");
    assert_eq!(cfg.host_port, "127.0.0.1:7077");
    assert_eq!(cfg.server_url, "http://127.0.0.1:8080");
    assert_eq!(cfg.tenant_id, TENANT);
    assert_eq!(cfg.tls.strategy, TlsStrategy::None);
    assert_eq!(cfg.tls.server_name, "127.0.0.1");
    assert_eq!(cfg.grpc_uri(), "http://127.0.0.1:7077");
    assert_eq!(cfg.token_expires_at, Some(4_000_000_000.0));
    assert!(!cfg.no_retry && !cfg.no_grpc_retry);
}

#[test]
fn dev_tokens_carry_the_claims_sdks_read() {
    let t = encode_dev_token(
        TENANT,
        "http://127.0.0.1:9999",
        "127.0.0.1:7777",
        4_000_000_000,
        "tid",
    );
    assert_eq!(format!("{t:?}"), "SecretToken(***)");
    let cfg = ClientConfig::builder()
        .secret_token(t)
        .build()
        .expect("dev token builds");
    assert_eq!(cfg.host_port, "127.0.0.1:7777");
    assert_eq!(cfg.server_url, "http://127.0.0.1:9999");
    assert_eq!(cfg.tenant_id, TENANT);
    // Unpadded base64url, three parts, payload starting with `ey` (what Go and Python require).
    let text = &cfg.env_lines()[0].1;
    assert_eq!(text.split('.').count(), 3);
    assert!(text.starts_with("ey") && !text.contains('='));
}

#[test]
fn variables_win_over_claims() {
    let t = dev_token_text();
    let cfg = env(&[
        (vars::TOKEN, &t),
        (vars::HOST_PORT, "engine.internal:443"),
        (vars::SERVER_URL, "https://engine.internal/"),
        (vars::TENANT_ID, "other-tenant"),
        (vars::NAMESPACE, "Staging"),
        (vars::TLS_SERVER_NAME, "hatchet.example"),
        (vars::NO_RETRY, "true"),
        (vars::NO_GRPC_RETRY, "1"),
    ])
    .expect("valid");
    assert_eq!(cfg.host_port, "engine.internal:443");
    assert_eq!(cfg.server_url, "https://engine.internal");
    assert_eq!(cfg.tenant_id, "other-tenant");
    assert_eq!(cfg.namespace, "staging_");
    assert_eq!(cfg.namespaced("orders"), "staging_orders");
    assert_eq!(cfg.namespaced("staging_orders"), "staging_orders");
    assert_eq!(
        cfg.tls.strategy,
        TlsStrategy::Tls,
        "tls is the default strategy"
    );
    assert_eq!(cfg.tls.server_name, "hatchet.example");
    assert_eq!(cfg.grpc_uri(), "https://engine.internal:443");
    assert!(cfg.no_retry && cfg.no_grpc_retry);
}

#[test]
fn nil_tenant_variable_falls_back_to_the_claim() {
    let t = dev_token_text();
    let cfg = env(&[
        (vars::TOKEN, &t),
        (vars::TENANT_ID, "00000000-0000-0000-0000-000000000000"),
    ])
    .expect("valid");
    assert_eq!(cfg.tenant_id, TENANT);
}

#[test]
fn missing_token() {
    assert_eq!(
        env(&[]).unwrap_err(),
        ConfigError::MissingToken { var: vars::TOKEN }
    );
    assert_eq!(
        env(&[(vars::TOKEN, "  ")]).unwrap_err(),
        ConfigError::MissingToken { var: vars::TOKEN }
    );
}

#[test]
fn token_that_is_not_a_jwt() {
    for bad in [
        "not-a-jwt",
        "a.b",
        "a.b.c.d",
        "eyJ.!!!.sig",
        "eyJ.bm90LWpzb24.sig",
    ] {
        match env(&[(vars::TOKEN, bad)]).unwrap_err() {
            ConfigError::MalformedToken { var, reason } => {
                assert_eq!(var, vars::TOKEN);
                assert!(!reason.contains(bad), "the reason must not echo the token");
            }
            other => panic!("{bad}: expected MalformedToken, got {other:?}"),
        }
    }
}

#[test]
fn claim_of_the_wrong_type() {
    let t = jwt_with(
        serde_json::json!({"sub": 5, "server_url": "http://x", "grpc_broadcast_address": "h:1"}),
    );
    assert!(matches!(
        env(&[(vars::TOKEN, &t)]).unwrap_err(),
        ConfigError::MalformedToken { .. }
    ));
    let t = jwt_with(
        serde_json::json!({"sub": "t", "server_url": "http://x", "grpc_broadcast_address": "h:1", "exp": "soon"}),
    );
    assert!(matches!(
        env(&[(vars::TOKEN, &t)]).unwrap_err(),
        ConfigError::MalformedToken { .. }
    ));
}

#[test]
fn missing_claims_name_the_override() {
    let t = jwt_with(serde_json::json!({"sub": "t", "server_url": "http://x"}));
    assert_eq!(
        env(&[(vars::TOKEN, &t)]).unwrap_err(),
        ConfigError::MissingClaim {
            var: vars::TOKEN,
            claim: "grpc_broadcast_address",
            override_var: vars::HOST_PORT
        }
    );
    let t = jwt_with(serde_json::json!({"sub": "t", "grpc_broadcast_address": "h:1"}));
    assert_eq!(
        env(&[(vars::TOKEN, &t)]).unwrap_err(),
        ConfigError::MissingClaim {
            var: vars::TOKEN,
            claim: "server_url",
            override_var: vars::SERVER_URL
        }
    );
    let t =
        jwt_with(serde_json::json!({"server_url": "http://x", "grpc_broadcast_address": "h:1"}));
    assert_eq!(
        env(&[(vars::TOKEN, &t)]).unwrap_err(),
        ConfigError::MissingClaim {
            var: vars::TOKEN,
            claim: "sub",
            override_var: vars::TENANT_ID
        }
    );
    // The variables make up for the missing claims.
    let t = jwt_with(serde_json::json!({}));
    let cfg = env(&[
        (vars::TOKEN, &t),
        (vars::HOST_PORT, "h:1"),
        (vars::SERVER_URL, "http://x"),
        (vars::TENANT_ID, "t"),
    ])
    .expect("variables suffice");
    assert_eq!(cfg.host_port, "h:1");
}

#[test]
fn bad_addresses() {
    let t = dev_token_text();
    for bad in [
        "localhost",
        "http://h:7070",
        ":7070",
        "h:0",
        "h:70000",
        "h:port",
        "::1:7070",
        "a b:1",
    ] {
        match env(&[(vars::TOKEN, &t), (vars::HOST_PORT, bad)]).unwrap_err() {
            ConfigError::InvalidAddress { var, value, .. } => {
                assert_eq!(var, vars::HOST_PORT);
                assert_eq!(value, bad);
            }
            other => panic!("{bad}: expected InvalidAddress, got {other:?}"),
        }
    }
    assert!(env(&[(vars::TOKEN, &t), (vars::HOST_PORT, "[::1]:7070")]).is_ok());
    // A bad address in the claim names the claim.
    let t2 = jwt_with(
        serde_json::json!({"sub": "t", "server_url": "http://x", "grpc_broadcast_address": "nope"}),
    );
    match env(&[(vars::TOKEN, &t2)]).unwrap_err() {
        ConfigError::InvalidAddress { var, .. } => assert!(var.contains("grpc_broadcast_address")),
        other => panic!("expected InvalidAddress, got {other:?}"),
    }
}

#[test]
fn bad_urls() {
    let t = dev_token_text();
    for bad in ["not a url", "ftp://h", "/relative"] {
        match env(&[(vars::TOKEN, &t), (vars::SERVER_URL, bad)]).unwrap_err() {
            ConfigError::InvalidUrl { var, .. } => assert_eq!(var, vars::SERVER_URL),
            other => panic!("{bad}: expected InvalidUrl, got {other:?}"),
        }
    }
}

#[test]
fn unknown_tls_strategy() {
    let t = dev_token_text();
    assert_eq!(
        env(&[(vars::TOKEN, &t), (vars::TLS_STRATEGY, "ssl")]).unwrap_err(),
        ConfigError::UnknownTlsStrategy {
            var: vars::TLS_STRATEGY,
            value: "ssl".into()
        }
    );
    let cfg = env(&[
        (vars::TOKEN, &t),
        (vars::TLS_STRATEGY, "MTLS"),
        (vars::TLS_CERT_FILE, "c.pem"),
        (vars::TLS_KEY_FILE, "k.pem"),
    ])
    .expect("case-insensitive");
    assert_eq!(cfg.tls.strategy, TlsStrategy::Mtls);
}

#[test]
fn mtls_without_key_or_cert() {
    let t = dev_token_text();
    assert_eq!(
        env(&[
            (vars::TOKEN, &t),
            (vars::TLS_STRATEGY, "mtls"),
            (vars::TLS_CERT_FILE, "c.pem")
        ])
        .unwrap_err(),
        ConfigError::MissingTlsFile {
            var: vars::TLS_KEY_FILE,
            what: "private key"
        }
    );
    assert_eq!(
        env(&[
            (vars::TOKEN, &t),
            (vars::TLS_STRATEGY, "mtls"),
            (vars::TLS_KEY_FILE, "k.pem")
        ])
        .unwrap_err(),
        ConfigError::MissingTlsFile {
            var: vars::TLS_CERT_FILE,
            what: "certificate"
        }
    );
}

#[test]
fn bad_booleans() {
    let t = dev_token_text();
    assert_eq!(
        env(&[(vars::TOKEN, &t), (vars::NO_RETRY, "maybe")]).unwrap_err(),
        ConfigError::InvalidBool {
            var: vars::NO_RETRY,
            value: "maybe".into()
        }
    );
    assert!(matches!(
        env(&[(vars::TOKEN, &t), (vars::NO_GRPC_RETRY, "2")]).unwrap_err(),
        ConfigError::InvalidBool {
            var: vars::NO_GRPC_RETRY,
            ..
        }
    ));
}

#[test]
fn every_error_names_its_variable() {
    let t = dev_token_text();
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![], vars::TOKEN),
        (vec![(vars::TOKEN, "x")], vars::TOKEN),
        (
            vec![(vars::TOKEN, &t), (vars::HOST_PORT, "x")],
            vars::HOST_PORT,
        ),
        (
            vec![(vars::TOKEN, &t), (vars::SERVER_URL, "x")],
            vars::SERVER_URL,
        ),
        (
            vec![(vars::TOKEN, &t), (vars::TLS_STRATEGY, "x")],
            vars::TLS_STRATEGY,
        ),
        (
            vec![(vars::TOKEN, &t), (vars::TLS_STRATEGY, "mtls")],
            vars::TLS_CERT_FILE,
        ),
        (
            vec![(vars::TOKEN, &t), (vars::NO_RETRY, "x")],
            vars::NO_RETRY,
        ),
    ];
    for (pairs, var) in cases {
        let msg = env(&pairs).unwrap_err().to_string();
        assert!(msg.contains(var), "{msg:?} should name {var}");
    }
}

#[test]
fn the_token_never_shows_in_debug_display_or_errors() {
    let t = dev_token_text();
    let cfg = env(&[(vars::TOKEN, &t)]).expect("valid");
    let debug = format!("{cfg:?}");
    assert!(!debug.contains(&t), "Debug leaks the token");
    assert!(debug.contains("SecretToken(***)"));
    // No token segment appears either (a partial leak is still a leak).
    for seg in t.split('.') {
        assert!(!debug.contains(seg), "Debug leaks a token segment");
    }
    // Errors built from a token-bearing environment do not echo it.
    let err = env(&[(vars::TOKEN, &t), (vars::HOST_PORT, "bad")]).unwrap_err();
    assert!(!format!("{err} {err:?}").contains(&t));
    let bad_token = format!("{t}.extra");
    let err = env(&[(vars::TOKEN, &bad_token)]).unwrap_err();
    assert!(!format!("{err} {err:?}").contains(&t));
    let runtime_err: hatchet_runtime::Error = err.into();
    assert!(!format!("{runtime_err} {runtime_err:?}").contains(&t));
}
