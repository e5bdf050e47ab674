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
//! 4. Sources with their own signing schemes are checked by them, as the real engine checks
//!    them, with the webhook's HMAC secret, algorithm, encoding and signature header:
//!    Slack signs `v0:{timestamp}:{body}` (`X-Slack-Request-Timestamp`, at most 5 minutes
//!    old, 403 otherwise) and answers its URL challenge before any check; Stripe signs
//!    `{t}.{body}` (header `t=...,v1=...`, at most 10 minutes old; a malformed or stale
//!    header is a 400, a wrong signature a 403); Svix signs `{id}.{timestamp}.{body}` with
//!    HMAC-SHA256 under the base64 key after `whsec_` (`svix-*` or `webhook-*` headers,
//!    timestamp within 5 minutes either way, 400 otherwise; any `v1,` signature of the
//!    space-separated list may match, else 403). Timestamps are read against the engine's
//!    clock (virtual time moves them).
//! 5. One webhook per name: creating a second with a taken name is refused.

use std::time::SystemTime;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};

use crate::dag::expr::Expr;

/// How a webhook authenticates its requests.
#[derive(Clone, PartialEq)]
pub(crate) enum Auth {
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
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Auth::Basic { .. } => "BASIC",
            Auth::ApiKey { .. } => "API_KEY",
            Auth::Hmac { .. } => "HMAC",
        }
    }

    /// From a create request's `authType` and `auth`.
    pub(crate) fn from_json(kind: Option<&str>, auth: &Value) -> Result<Auth, String> {
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
pub(crate) enum Algorithm {
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
pub(crate) enum Encoding {
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
pub(crate) const SOURCES: [&str; 6] = ["GENERIC", "GITHUB", "STRIPE", "SLACK", "LINEAR", "SVIX"];

/// A stored webhook.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
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
    pub(crate) fn to_json(&self, tenant: &str) -> Value {
        let at = |t| hatchet_runtime::protocol::rfc3339(t);
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

    /// Checks a request against the webhook's scheme at `now` (Unix seconds; invariants 1, 2
    /// and 4); `Err` is the status and the sentence to answer.
    pub(crate) fn check(
        &self,
        headers: &Map<String, Value>,
        body: &[u8],
        now: i64,
    ) -> Result<(), (u16, String)> {
        let header = |name: &str| headers.get(&name.to_lowercase()).and_then(Value::as_str);
        match self.source.as_str() {
            "GENERIC" | "GITHUB" | "LINEAR" => {}
            "SLACK" => return check_slack(&self.auth, &header, body, now),
            "STRIPE" => return check_stripe(&self.auth, &header, body, now),
            "SVIX" => return check_svix(&self.auth, &header, body, now),
            other => return Err((400, format!("unsupported source name: {other}"))),
        }
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
    pub(crate) fn event(
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
pub(crate) struct Incoming {
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

type Header<'a> = dyn Fn(&str) -> Option<&'a str> + 'a;

/// The HMAC settings a Slack or Stripe webhook signs with (the real engine reads them whatever
/// the auth type; without them it cannot decrypt a secret).
fn hmac_of(auth: &Auth) -> Result<(Algorithm, Encoding, &str, &str), (u16, String)> {
    match auth {
        Auth::Hmac {
            algorithm,
            encoding,
            header,
            secret,
        } => Ok((*algorithm, *encoding, header, secret)),
        _ => Err((
            500,
            "failed to decrypt HMAC signing secret: the webhook has no HMAC auth".into(),
        )),
    }
}

/// What each source signs (invariant 4): one definition for the checks and for `signing`.
fn signed_text(prefix: String, body: &[u8]) -> Vec<u8> {
    let mut text = prefix.into_bytes();
    text.extend_from_slice(body);
    text
}

/// Slack signs `v0:{timestamp}:{body}`.
fn slack_text(ts: i64, body: &[u8]) -> Vec<u8> {
    signed_text(format!("v0:{ts}:"), body)
}

/// Stripe signs `{t}.{body}`, `t` as the header spells it.
fn stripe_text(t: &str, body: &[u8]) -> Vec<u8> {
    signed_text(format!("{t}."), body)
}

/// Svix signs `{id}.{timestamp}.{body}`.
fn svix_text(id: &str, ts: i64, body: &[u8]) -> Vec<u8> {
    signed_text(format!("{id}.{ts}."), body)
}

/// A Svix secret's key: the base64 after `whsec_`.
fn svix_key(secret: &str) -> Result<Vec<u8>, base64::DecodeError> {
    base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
}

/// Slack: `v0=` + HMAC of `v0:{timestamp}:{body}` (invariant 4).
fn check_slack(
    auth: &Auth,
    header: &Header<'_>,
    body: &[u8],
    now: i64,
) -> Result<(), (u16, String)> {
    let ts = header("x-slack-request-timestamp").ok_or((
        403,
        "missing or invalid timestamp header: X-Slack-Request-Timestamp".to_string(),
    ))?;
    let ts: i64 = ts
        .trim()
        .parse()
        .map_err(|_| (403, "Invalid timestamp in header".to_string()))?;
    if ts < now - 5 * 60 {
        return Err((403, "timestamp in header is out of range".into()));
    }
    let (algorithm, encoding, name, secret) = hmac_of(auth)?;
    let base = slack_text(ts, body);
    let want = format!("v0={}", sign(algorithm, encoding, secret.as_bytes(), &base));
    let given = header(name)
        .ok_or_else(|| (403, format!("missing or invalid signature header: {name}")))?;
    if !same(bare(given).as_bytes(), bare(&want).as_bytes()) {
        return Err((403, "invalid HMAC signature".into()));
    }
    Ok(())
}

/// Stripe: `t=...,v1=...`, v1 the HMAC of `{t}.{body}` (invariant 4).
fn check_stripe(
    auth: &Auth,
    header: &Header<'_>,
    body: &[u8],
    now: i64,
) -> Result<(), (u16, String)> {
    let (algorithm, encoding, name, secret) = hmac_of(auth)?;
    let bad = || (400, format!("missing or invalid signature header: {name}"));
    let value = header(name).ok_or_else(bad)?;
    let mut parts = std::collections::HashMap::new();
    for part in value.split(',') {
        let kv: Vec<&str> = part.split('=').collect();
        let [k, v] = kv[..] else {
            return Err((400, format!("invalid signature header format: {name}")));
        };
        parts.insert(k.trim(), v.trim());
    }
    let (Some(t), Some(v1)) = (parts.get("t"), parts.get("v1")) else {
        return Err(bad());
    };
    if t.is_empty() || v1.is_empty() {
        return Err(bad());
    }
    let ts: i64 = t
        .parse()
        .map_err(|_| (400, "Invalid timestamp in signature header".to_string()))?;
    if ts < now - 10 * 60 {
        return Err((400, "timestamp in signature header is out of range".into()));
    }
    let want = sign(
        algorithm,
        encoding,
        secret.as_bytes(),
        &stripe_text(t, body),
    );
    if !same(bare(v1).as_bytes(), bare(&want).as_bytes()) {
        return Err((403, "invalid HMAC signature".into()));
    }
    Ok(())
}

/// Svix: `v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` (invariant 4).
fn check_svix(
    auth: &Auth,
    header: &Header<'_>,
    body: &[u8],
    now: i64,
) -> Result<(), (u16, String)> {
    let Auth::Hmac { secret, .. } = auth else {
        return Err((
            500,
            "failed to decrypt SVIX signing secret: the webhook has no HMAC auth".into(),
        ));
    };
    let key = svix_key(secret)
        .map_err(|e| (500, format!("failed to decode SVIX signing secret: {e}")))?;
    let trio = |p: &str| {
        Some((
            header(&format!("{p}-id"))?,
            header(&format!("{p}-signature"))?,
            header(&format!("{p}-timestamp"))?,
        ))
    };
    let (id, given, ts) = trio("svix")
        .filter(|(a, b, c)| !a.is_empty() && !b.is_empty() && !c.is_empty())
        .or_else(|| trio("webhook"))
        .filter(|(a, b, c)| !a.is_empty() && !b.is_empty() && !c.is_empty())
        .ok_or((400, "missing or invalid headers".to_string()))?;
    let ts: i64 = ts
        .parse()
        .map_err(|_| (400, "invalid timestamp header: invalid headers".to_string()))?;
    if now - ts > 5 * 60 {
        return Err((400, "invalid timestamp header: message too old".into()));
    }
    if ts > now + 5 * 60 {
        return Err((400, "invalid timestamp header: message too new".into()));
    }
    let want = sign(
        Algorithm::Sha256,
        Encoding::Base64,
        &key,
        &svix_text(id, ts, body),
    );
    let matched = given.split(' ').any(|versioned| {
        let mut p = versioned.splitn(2, ',');
        p.next() == Some("v1")
            && p.next()
                .is_some_and(|s| same(s.as_bytes(), want.as_bytes()))
    });
    if matched {
        Ok(())
    } else {
        Err((403, "invalid SVIX signature".into()))
    }
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
pub(crate) fn sign(algorithm: Algorithm, encoding: Encoding, secret: &[u8], body: &[u8]) -> String {
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

/// Requests signed as Stripe, Slack and Svix sign them (HMAC-SHA256), for tests that post to a
/// webhook of that source: on this engine or on the real one, which check them alike.
pub mod signing {
    use super::{Algorithm, Encoding, sign, slack_text, stripe_text, svix_key, svix_text};

    /// The `Stripe-Signature` value for `body` at Unix second `t`: `t={t},v1={hex}`.
    pub fn stripe(secret: &str, t: i64, body: &[u8]) -> String {
        let text = stripe_text(&t.to_string(), body);
        let v1 = sign(Algorithm::Sha256, Encoding::Hex, secret.as_bytes(), &text);
        format!("t={t},v1={v1}")
    }

    /// The `X-Slack-Signature` value for `body` sent with `X-Slack-Request-Timestamp: {ts}`:
    /// `v0={hex}`.
    pub fn slack(secret: &str, ts: i64, body: &[u8]) -> String {
        let text = slack_text(ts, body);
        let hash = sign(Algorithm::Sha256, Encoding::Hex, secret.as_bytes(), &text);
        format!("v0={hash}")
    }

    /// The `svix-signature` value for message `id` at Unix second `ts`, under a `whsec_`
    /// secret: `v1,{base64}`.
    ///
    /// # Errors
    ///
    /// A secret that is not base64 after `whsec_` (the engines answer such a webhook 500).
    pub fn svix(secret: &str, id: &str, ts: i64, body: &[u8]) -> Result<String, String> {
        let key = svix_key(secret)
            .map_err(|e| format!("the Svix secret is not base64 after whsec_: {e}"))?;
        let text = svix_text(id, ts, body);
        Ok(format!(
            "v1,{}",
            sign(Algorithm::Sha256, Encoding::Base64, &key, &text)
        ))
    }
}

/// The webhooks by name (invariant 5).
#[derive(Debug, Default)]
pub(crate) struct Webhooks {
    by_name: std::collections::BTreeMap<String, Webhook>,
}

impl Webhooks {
    /// Stores `hook` as `name`, unless a webhook has that name (then `false`).
    pub(crate) fn add(&mut self, name: &str, hook: Webhook) -> bool {
        if self.by_name.contains_key(name) {
            return false;
        }
        self.by_name.insert(name.to_string(), hook);
        true
    }

    /// Webhook `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Webhook> {
        self.by_name.get(name)
    }

    /// Webhook `name`, to change (its name stays).
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Webhook> {
        self.by_name.get_mut(name)
    }

    /// Removes webhook `name`.
    pub(crate) fn remove(&mut self, name: &str) -> Option<Webhook> {
        self.by_name.remove(name)
    }

    /// Every webhook, in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Webhook> {
        self.by_name.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock the checks read, in Unix seconds.
    const NOW: i64 = 1_800_000_000;

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
        assert!(
            h.check(&headers(&[("X-Signature", &sig)]), body, NOW)
                .is_ok()
        );
        let prefixed = format!("sha256={sig}");
        assert!(
            h.check(&headers(&[("x-signature", &prefixed)]), body, NOW)
                .is_ok()
        );
        let e = h
            .check(&headers(&[("X-Signature", &sig)]), b"{}", NOW)
            .unwrap_err();
        assert_eq!(e, (403, "invalid HMAC signature".to_string()));
        let e = h.check(&headers(&[]), body, NOW).unwrap_err();
        assert_eq!(e.0, 403);
    }

    /// A webhook of `source` signing with HMAC-SHA256 hex under `secret` in `header`.
    fn source_hook(source: &str, header: &str, secret: &str) -> Webhook {
        let mut h = hook(Auth::Hmac {
            algorithm: Algorithm::Sha256,
            encoding: Encoding::Hex,
            header: header.into(),
            secret: secret.into(),
        });
        h.source = source.into();
        h
    }

    fn hex_hmac(secret: &[u8], text: &[u8]) -> String {
        sign(Algorithm::Sha256, Encoding::Hex, secret, text)
    }

    #[test]
    fn slack_signs_v0_timestamp_and_body_and_refuses_a_stale_timestamp() {
        let h = source_hook("SLACK", "X-Slack-Signature", "s3cret");
        let body = br#"{"type":"event_callback"}"#;
        let ts = (NOW - 60).to_string();
        let mut base = format!("v0:{ts}:").into_bytes();
        base.extend_from_slice(body);
        let sig = format!("v0={}", hex_hmac(b"s3cret", &base));
        let req = |ts: &str, sig: &str| {
            headers(&[
                ("X-Slack-Request-Timestamp", ts),
                ("X-Slack-Signature", sig),
            ])
        };
        assert!(h.check(&req(&ts, &sig), body, NOW).is_ok());
        let e = h.check(&req(&ts, &sig), b"{}", NOW).unwrap_err();
        assert_eq!(e, (403, "invalid HMAC signature".into()), "another body");
        let stale = (NOW - 301).to_string();
        let e = h.check(&req(&stale, &sig), body, NOW).unwrap_err();
        assert_eq!(e.0, 403, "{e:?}");
        assert!(e.1.contains("out of range"), "{e:?}");
        let e = h
            .check(&headers(&[("X-Slack-Signature", &sig)]), body, NOW)
            .unwrap_err();
        assert!(e.1.contains("X-Slack-Request-Timestamp"), "{e:?}");
    }

    #[test]
    fn stripe_signs_t_dot_body_refusing_bad_headers_with_400_and_bad_signatures_with_403() {
        let h = source_hook("STRIPE", "Stripe-Signature", "whsec_stripe");
        let body = br#"{"id":"evt_1"}"#;
        let t = (NOW - 120).to_string();
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body);
        let v1 = hex_hmac(b"whsec_stripe", &signed);
        let req = |v: &str| headers(&[("Stripe-Signature", v)]);
        assert!(h.check(&req(&format!("t={t},v1={v1}")), body, NOW).is_ok());
        assert!(
            h.check(&req(&format!("t={t}, v1={v1}")), body, NOW).is_ok(),
            "parts are trimmed"
        );
        let wrong = h
            .check(&req(&format!("t={t},v1={}", "0".repeat(64))), body, NOW)
            .unwrap_err();
        assert_eq!(wrong.0, 403, "{wrong:?}");
        for bad in [format!("t={t}"), format!("t={t},v1"), String::new()] {
            let e = h.check(&req(&bad), body, NOW).unwrap_err();
            assert_eq!(e.0, 400, "{bad:?}: {e:?}");
        }
        let old = (NOW - 601).to_string();
        let e = h
            .check(&req(&format!("t={old},v1={v1}")), body, NOW)
            .unwrap_err();
        assert_eq!(e.0, 400, "{e:?}");
    }

    #[test]
    fn svix_signs_id_timestamp_body_under_the_decoded_key_and_takes_any_v1_signature() {
        let key = b"svix-key-bytes";
        let secret = format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        );
        let h = source_hook("SVIX", "ignored", &secret);
        let body = br#"{"type":"user.created"}"#;
        let ts = (NOW - 10).to_string();
        let mut signed = format!("msg_1.{ts}.").into_bytes();
        signed.extend_from_slice(body);
        let sig = sign(Algorithm::Sha256, Encoding::Base64, key, &signed);
        let req = |p: &str, sigs: &str, ts: &str| {
            headers(&[
                (&format!("{p}-id"), "msg_1"),
                (&format!("{p}-signature"), sigs),
                (&format!("{p}-timestamp"), ts),
            ])
        };
        assert!(
            h.check(&req("svix", &format!("v1,{sig}"), &ts), body, NOW)
                .is_ok()
        );
        assert!(
            h.check(
                &req("webhook", &format!("v1,AAAA v1,{sig}"), &ts),
                body,
                NOW
            )
            .is_ok(),
            "webhook-* headers, any signature of the list"
        );
        let e = h
            .check(&req("svix", &format!("v2,{sig}"), &ts), body, NOW)
            .unwrap_err();
        assert_eq!(e, (403, "invalid SVIX signature".into()), "only v1 counts");
        for ts in [(NOW - 301).to_string(), (NOW + 301).to_string()] {
            let e = h
                .check(&req("svix", &format!("v1,{sig}"), &ts), body, NOW)
                .unwrap_err();
            assert_eq!(e.0, 400, "{ts}: {e:?}");
        }
        let e = h.check(&headers(&[]), body, NOW).unwrap_err();
        assert_eq!(e, (400, "missing or invalid headers".into()));
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
                .check(&headers(&[("Authorization", &good)]), b"{}", NOW)
                .is_ok()
        );
        let bad = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("u:x")
        );
        assert_eq!(
            basic
                .check(&headers(&[("Authorization", &bad)]), b"{}", NOW)
                .unwrap_err()
                .1,
            "invalid basic auth credentials"
        );
        let key = hook(Auth::ApiKey {
            header: "X-Api-Key".into(),
            key: "k1".into(),
        });
        assert!(
            key.check(&headers(&[("X-Api-Key", "k1")]), b"{}", NOW)
                .is_ok()
        );
        assert_eq!(
            key.check(&headers(&[("X-Api-Key", "k2")]), b"{}", NOW)
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
