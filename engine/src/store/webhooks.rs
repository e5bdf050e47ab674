//! Incoming webhooks, as the real engine's v1 webhooks: a named endpoint per tenant that turns
//! an HTTP request from another service into an event. The request is authenticated by the
//! webhook's scheme (basic, an API-key header, an HMAC signature of the body), its JSON (or
//! form) body merged with the webhook's static payload, and the event key (and scope) computed
//! by CEL over `input` (that body) and `headers` (lower-cased names).
//!
//! # Invariants
//!
//! 1. A request that fails its webhook's check is refused (403) before its body is read as a
//!    payload; nothing is pushed.
//! 2. Secrets are compared in constant time and never shown: not in answers, not in `Debug`.
//! 3. The static payload wins over the body on a shared key; `tenant` and `v1-webhook` keys of
//!    the body are dropped, as the real engine drops them.
//! 4. Sources with their own signing schemes (Slack, Stripe, Svix) are stored but not checked
//!    here: a request to one is refused with a 400 that says so (Slack's URL challenge is
//!    answered, as the real engine answers it before any check).

use std::time::SystemTime;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};

use crate::core::State;
use crate::dag::expr::Expr;

impl State {
    /// Marks event `id` as having come through webhook `name` (the events list shows it).
    pub fn mark_webhook_event(&mut self, id: &str, name: &str) {
        if let Some(e) = self.events.iter_mut().rev().find(|e| e.id == id) {
            e.webhook = Some(name.to_string());
        }
    }
}

/// How a webhook authenticates its requests.
#[derive(Clone, PartialEq)]
pub enum Auth {
    /// `Authorization: Basic base64(username:password)`.
    Basic { username: String, password: String },
    /// A header carrying a fixed key.
    ApiKey { header: String, key: String },
    /// A header carrying an HMAC of the raw body.
    Hmac {
        algorithm: Algorithm,
        encoding: Encoding,
        header: String,
        secret: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl Auth {
    /// The engine's name for the kind (`BASIC`, `API_KEY`, `HMAC`).
    pub fn kind(&self) -> &'static str {
        match self {
            Auth::Basic { .. } => "BASIC",
            Auth::ApiKey { .. } => "API_KEY",
            Auth::Hmac { .. } => "HMAC",
        }
    }

    /// From a create request's `authType` and `auth`.
    pub fn from_json(kind: Option<&str>, auth: &Value) -> Result<Auth, String> {
        let text = |k: &str| {
            auth[k]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("auth.{k} is required"))
        };
        match kind {
            Some("BASIC") => Ok(Auth::Basic {
                username: text("username")?,
                password: text("password")?,
            }),
            Some("API_KEY") => Ok(Auth::ApiKey {
                header: text("headerName")?,
                key: text("apiKey")?,
            }),
            Some("HMAC") => Ok(Auth::Hmac {
                algorithm: Algorithm::parse(&text("algorithm")?)?,
                encoding: Encoding::parse(&text("encoding")?)?,
                header: text("signatureHeaderName")?,
                secret: text("signingSecret")?,
            }),
            Some(other) => Err(format!("unknown authType {other:?}")),
            None => Err("authType is required".into()),
        }
    }
}

/// An HMAC's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
    Md5,
}

impl Algorithm {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "SHA1" => Algorithm::Sha1,
            "SHA256" => Algorithm::Sha256,
            "SHA512" => Algorithm::Sha512,
            "MD5" => Algorithm::Md5,
            other => return Err(format!("unknown HMAC algorithm {other:?}")),
        })
    }
}

/// How a signature is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
    Base64Url,
}

impl Encoding {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "HEX" => Encoding::Hex,
            "BASE64" => Encoding::Base64,
            "BASE64URL" => Encoding::Base64Url,
            other => return Err(format!("unknown signature encoding {other:?}")),
        })
    }
}

/// The sources the real engine knows.
pub const SOURCES: [&str; 6] = ["GENERIC", "GITHUB", "STRIPE", "SLACK", "LINEAR", "SVIX"];

/// A stored webhook.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub name: String,
    pub source: String,
    pub event_key_expression: String,
    pub scope_expression: Option<String>,
    pub static_payload: Option<Value>,
    pub auth: Auth,
    pub return_event: bool,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

impl Webhook {
    /// The `V1Webhook` object (its id is the nil UUID on the real engine: webhooks go by name).
    pub fn to_json(&self, tenant: &str) -> Value {
        let at = |t| hatchet_protocol::rfc3339(t);
        let mut v = json!({
            "metadata": {"id": "00000000-0000-0000-0000-000000000000",
                         "createdAt": at(self.created_at), "updatedAt": at(self.updated_at)},
            "tenantId": tenant, "name": self.name, "sourceName": self.source,
            "eventKeyExpression": self.event_key_expression, "authType": self.auth.kind(),
            "returnEventAsResponsePayload": self.return_event,
        });
        if let Some(s) = &self.scope_expression {
            v["scopeExpression"] = json!(s);
        }
        if let Some(p) = &self.static_payload {
            v["staticPayload"] = p.clone();
        }
        v
    }

    /// Checks a request against the webhook's scheme (invariants 1, 2 and 4); `Err` is the
    /// status and the sentence to answer.
    pub fn check(&self, headers: &Map<String, Value>, body: &[u8]) -> Result<(), (u16, String)> {
        if !matches!(self.source.as_str(), "GENERIC" | "GITHUB" | "LINEAR") {
            return Err((
                400,
                format!(
                    "the development engine does not check {} signatures; use a GENERIC webhook",
                    self.source
                ),
            ));
        }
        let header = |name: &str| headers.get(&name.to_lowercase()).and_then(Value::as_str);
        match &self.auth {
            Auth::Basic { username, password } => {
                let given = header("authorization")
                    .and_then(|h| h.strip_prefix("Basic "))
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    .ok_or((403, "missing or invalid authorization header".to_string()))?;
                let want = format!("{username}:{password}");
                if !same(&given, want.as_bytes()) {
                    return Err((403, "invalid basic auth credentials".into()));
                }
            }
            Auth::ApiKey { header: name, key } => {
                let given = header(name)
                    .ok_or_else(|| (403, format!("missing or invalid api key header: {name}")))?;
                if !same(given.as_bytes(), key.as_bytes()) {
                    return Err((403, format!("invalid api key: {name}")));
                }
            }
            Auth::Hmac {
                algorithm,
                encoding,
                header: name,
                secret,
            } => {
                let given = header(name)
                    .ok_or_else(|| (403, format!("missing or invalid signature header: {name}")))?;
                let want = sign(*algorithm, *encoding, secret.as_bytes(), body);
                if !same(bare(given).as_bytes(), bare(&want).as_bytes()) {
                    return Err((403, "invalid HMAC signature".into()));
                }
            }
        }
        Ok(())
    }

    /// The event a checked request becomes: its key, payload and scope (invariant 3).
    pub fn event(
        &self,
        content_type: &str,
        headers: &Map<String, Value>,
        body: &[u8],
    ) -> Result<Incoming, String> {
        let mut input: Map<String, Value> =
            if content_type.contains("application/x-www-form-urlencoded") {
                if self.source != "GENERIC" {
                    return Err(format!(
                        "form-encoded requests are not supported for webhook source: {}",
                        self.source
                    ));
                }
                form_fields(body)
            } else {
                match serde_json::from_slice::<Value>(body) {
                    Ok(Value::Object(m)) => m,
                    _ => return Err("failed to unmarshal request body".into()),
                }
            };
        input.remove("tenant");
        input.remove("v1-webhook");
        if let Some(Value::Object(extra)) = &self.static_payload {
            for (k, v) in extra {
                input.insert(k.clone(), v.clone());
            }
        }
        let mut vars = Map::new();
        vars.insert("input".into(), Value::Object(input.clone()));
        vars.insert("headers".into(), Value::Object(headers.clone()));
        let key = match Expr::parse(&self.event_key_expression).and_then(|e| e.eval(&vars)) {
            Ok(Value::String(k)) => k,
            Ok(_) => return Err("Event key expression must evaluate to a string".into()),
            Err(_) => return Err("Failed to evaluate event key expression".into()),
        };
        let scope = match self.scope_expression.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(src) => match Expr::parse(src).and_then(|e| e.eval(&vars)) {
                Ok(Value::String(s)) => Some(s),
                _ => return Err("Failed to evaluate scope expression".into()),
            },
        };
        Ok(Incoming {
            key,
            payload: input,
            scope,
        })
    }
}

/// The event a webhook request becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// Its key (the event key expression's value).
    pub key: String,
    /// Its payload: the body with the static payload merged in.
    pub payload: Map<String, Value>,
    /// Its scope (the scope expression's value), if the webhook has one.
    pub scope: Option<String>,
}

/// A form body's fields, first value of each, as strings.
fn form_fields(body: &[u8]) -> Map<String, Value> {
    let text = String::from_utf8_lossy(body);
    let mut out = Map::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode_form(k), decode_form(v));
        out.entry(k).or_insert(Value::String(v));
    }
    out
}

fn decode_form(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A signature without its optional `sha256=`-style prefix, trimmed.
fn bare(sig: &str) -> &str {
    let sig = sig.trim();
    ["sha1=", "sha256=", "sha512=", "md5="]
        .iter()
        .find_map(|p| sig.strip_prefix(p))
        .unwrap_or(sig)
}

/// Constant-time equality (invariant 2).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `HMAC_algorithm(secret, body)`, encoded.
pub fn sign(algorithm: Algorithm, encoding: Encoding, secret: &[u8], body: &[u8]) -> String {
    // An HMAC takes a key of any length, so the key is never refused.
    macro_rules! mac {
        ($d:ty) => {
            match <Hmac<$d> as Mac>::new_from_slice(secret) {
                Ok(mut m) => {
                    m.update(body);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        };
    }
    let raw = match algorithm {
        Algorithm::Sha1 => mac!(sha1::Sha1),
        Algorithm::Sha256 => mac!(sha2::Sha256),
        Algorithm::Sha512 => mac!(sha2::Sha512),
        Algorithm::Md5 => mac!(md5::Md5),
    };
    match encoding {
        Encoding::Hex => raw.iter().map(|b| format!("{b:02x}")).collect(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(raw),
        Encoding::Base64Url => base64::engine::general_purpose::URL_SAFE.encode(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(auth: Auth) -> Webhook {
        Webhook {
            name: "h".into(),
            source: "GENERIC".into(),
            event_key_expression: "'order:' + input.kind".into(),
            scope_expression: Some("headers['x-tenant']".into()),
            static_payload: Some(json!({"from": "hook", "kind": "never-wins-over-static"})),
            auth,
            return_event: true,
            created_at: SystemTime::UNIX_EPOCH,
            updated_at: SystemTime::UNIX_EPOCH,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_lowercase(), json!(v)))
            .collect()
    }

    #[test]
    fn an_hmac_signature_of_the_body_is_checked_with_or_without_its_prefix() {
        let auth = Auth::Hmac {
            algorithm: Algorithm::Sha256,
            encoding: Encoding::Hex,
            header: "X-Signature".into(),
            secret: "s3cret".into(),
        };
        let h = hook(auth);
        let body = br#"{"kind":"paid"}"#;
        let sig = sign(Algorithm::Sha256, Encoding::Hex, b"s3cret", body);
        // RFC 4231-style check of the primitive: a known HMAC-SHA256.
        assert_eq!(
            sign(
                Algorithm::Sha256,
                Encoding::Hex,
                b"key",
                b"The quick brown fox jumps over the lazy dog"
            ),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
        assert!(h.check(&headers(&[("X-Signature", &sig)]), body).is_ok());
        let prefixed = format!("sha256={sig}");
        assert!(
            h.check(&headers(&[("x-signature", &prefixed)]), body)
                .is_ok()
        );
        let e = h
            .check(&headers(&[("X-Signature", &sig)]), b"{}")
            .unwrap_err();
        assert_eq!(e, (403, "invalid HMAC signature".to_string()));
        let e = h.check(&headers(&[]), body).unwrap_err();
        assert_eq!(e.0, 403);
    }

    #[test]
    fn sources_with_their_own_signing_are_refused_with_a_reason() {
        let mut h = hook(Auth::ApiKey {
            header: "k".into(),
            key: "v".into(),
        });
        h.source = "STRIPE".into();
        let (status, why) = h.check(&headers(&[("k", "v")]), b"{}").unwrap_err();
        assert_eq!(status, 400);
        assert!(why.contains("STRIPE") && why.contains("GENERIC"), "{why}");
    }

    #[test]
    fn basic_and_api_key_schemes_compare_what_was_configured() {
        let basic = hook(Auth::Basic {
            username: "u".into(),
            password: "p".into(),
        });
        let good = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("u:p")
        );
        assert!(
            basic
                .check(&headers(&[("Authorization", &good)]), b"{}")
                .is_ok()
        );
        let bad = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("u:x")
        );
        assert_eq!(
            basic
                .check(&headers(&[("Authorization", &bad)]), b"{}")
                .unwrap_err()
                .1,
            "invalid basic auth credentials"
        );
        let key = hook(Auth::ApiKey {
            header: "X-Api-Key".into(),
            key: "k1".into(),
        });
        assert!(key.check(&headers(&[("X-Api-Key", "k1")]), b"{}").is_ok());
        assert_eq!(
            key.check(&headers(&[("X-Api-Key", "k2")]), b"{}")
                .unwrap_err()
                .0,
            403
        );
        assert_eq!(format!("{:?}", key.auth), "API_KEY", "no secret in Debug");
    }

    #[test]
    fn the_body_becomes_the_event_with_the_static_payload_winning() {
        let h = hook(Auth::ApiKey {
            header: "k".into(),
            key: "v".into(),
        });
        let Incoming {
            key,
            payload,
            scope,
        } = h
            .event(
                "application/json",
                &headers(&[("X-Tenant", "acme")]),
                br#"{"kind":"paid","tenant":"dropped","n":1}"#,
            )
            .expect("event");
        // The static payload's `kind` wins, so the key reads it.
        assert_eq!(key, "order:never-wins-over-static");
        assert_eq!(scope.as_deref(), Some("acme"));
        assert_eq!(payload.get("n"), Some(&json!(1)));
        assert!(payload.get("tenant").is_none());
        assert_eq!(payload.get("from"), Some(&json!("hook")));
        assert_eq!(
            h.event("application/json", &headers(&[]), b"[1]")
                .unwrap_err(),
            "failed to unmarshal request body"
        );
        let form = h
            .event(
                "application/x-www-form-urlencoded",
                &headers(&[("X-Tenant", "t")]),
                b"a=1+2&b=%41",
            )
            .expect("form");
        assert_eq!(form.payload.get("a"), Some(&json!("1 2")));
        assert_eq!(form.payload.get("b"), Some(&json!("A")));
    }
}
