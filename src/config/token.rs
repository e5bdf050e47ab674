//! The API token: kept secret, and read (never verified) for its claims.
//!
//! # Invariants
//!
//! 1. The token's text is reachable only through [`SecretToken::expose`], which is crate-private
//!    and used only to build the `authorization` header. `Debug` prints `SecretToken(***)` and
//!    there is no `Display`, so the token cannot slip into logs or error messages by formatting.
//! 2. Claims are read the way the official SDKs read them: split on `.`, exactly three parts,
//!    base64url of the middle part (padded or not), JSON object. The signature is not checked: the
//!    engine does that.

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use serde::Deserialize;

use super::ConfigError;

/// An API token. Cloning is cheap; formatting never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretToken(std::sync::Arc<str>);

impl SecretToken {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        SecretToken(std::sync::Arc::from(token.into().trim()))
    }

    /// The token text, for an `authorization` header or a handshake file: never log it (this is
    /// the one way to read it; `Debug` and `Display` redact it).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The `authorization` header value the gRPC and REST paths send.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl std::fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretToken(***)")
    }
}

/// The claims the runtime reads from a token.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct TokenClaims {
    /// `sub`: the tenant id.
    pub tenant_id: Option<String>,
    /// `server_url`: the REST base URL.
    pub server_url: Option<String>,
    /// `grpc_broadcast_address`: the gRPC `host:port`.
    pub grpc_broadcast_address: Option<String>,
    /// `exp`: expiry in Unix seconds.
    pub expires_at: Option<f64>,
}

#[derive(Deserialize)]
struct RawClaims {
    sub: Option<serde_json::Value>,
    server_url: Option<serde_json::Value>,
    grpc_broadcast_address: Option<serde_json::Value>,
    exp: Option<serde_json::Value>,
}

fn string_claim(
    var: &'static str,
    name: &'static str,
    v: Option<serde_json::Value>,
) -> Result<Option<String>, ConfigError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ConfigError::MalformedToken {
            var,
            reason: format!("claim `{name}` is not a string"),
        }),
    }
}

/// Reads the claims of `token` without checking its signature. `var` names the source in errors.
pub(crate) fn parse_claims(
    var: &'static str,
    token: &SecretToken,
) -> Result<TokenClaims, ConfigError> {
    let malformed = |reason: &str| ConfigError::MalformedToken {
        var,
        reason: reason.to_string(),
    };
    let text = token.expose();
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 3 {
        return Err(malformed(&format!(
            "a JWT has three dot-separated parts, this has {}",
            parts.len()
        )));
    }
    let payload = parts[1];
    let bytes = URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(payload))
        .map_err(|_| malformed("the payload part is not base64url"))?;
    let raw: RawClaims = serde_json::from_slice(&bytes)
        .map_err(|_| malformed("the payload part is not a JSON object"))?;
    let expires_at = match raw.exp {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(_) => return Err(malformed("claim `exp` is not a number")),
    };
    Ok(TokenClaims {
        tenant_id: string_claim(var, "sub", raw.sub)?,
        server_url: string_claim(var, "server_url", raw.server_url)?,
        grpc_broadcast_address: string_claim(
            var,
            "grpc_broadcast_address",
            raw.grpc_broadcast_address,
        )?,
        expires_at,
    })
}

/// Builds an unsigned-looking development token (`header.payload.signature`, unpadded base64url)
/// with the claims the official SDKs require. Used by the development engine and by tests, not
/// by a runtime's users (a real engine's token comes from the engine): hidden from the docs.
#[doc(hidden)]
pub fn encode_dev_token(
    tenant_id: &str,
    server_url: &str,
    grpc_address: &str,
    expires_at: u64,
    token_id: &str,
) -> SecretToken {
    let header = serde_json::json!({"alg": "ES256", "typ": "JWT"});
    let payload = serde_json::json!({
        "sub": tenant_id,
        "server_url": server_url,
        "grpc_broadcast_address": grpc_address,
        "exp": expires_at,
        "iat": expires_at.saturating_sub(90 * 24 * 3600),
        "iss": server_url,
        "aud": [server_url],
        "token_id": token_id,
    });
    let seg = |v: &serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let signature = URL_SAFE_NO_PAD.encode(format!("hatchet-dev-engine:{token_id}"));
    SecretToken::new(format!("{}.{}.{}", seg(&header), seg(&payload), signature))
}
