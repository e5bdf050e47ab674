//! Incoming webhooks over REST: create, list, read, update, delete by name. A webhook is an
//! endpoint of the engine (see [`Api::webhook_url`]) that turns another service's HTTP request
//! into an event: the request is authenticated by the webhook's scheme, and the event's key
//! (and scope) is CEL over `input` (the request's JSON body) and `headers`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, Meta, encode, to_body};
use crate::error::Error;

/// Where a webhook's requests come from: the real engine checks each source's own signing
/// scheme (Stripe, Slack, Svix); `Generic`, `Github` and `Linear` use the webhook's auth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebhookSource {
    /// Any service, authenticated by the webhook's auth.
    Generic,
    /// GitHub (an HMAC-SHA256 `X-Hub-Signature-256`).
    Github,
    /// Stripe (`Stripe-Signature`).
    Stripe,
    /// Slack (`X-Slack-Signature`, and its URL challenge).
    Slack,
    /// Linear.
    Linear,
    /// Svix.
    Svix,
}

impl WebhookSource {
    /// The engine's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            WebhookSource::Generic => "GENERIC",
            WebhookSource::Github => "GITHUB",
            WebhookSource::Stripe => "STRIPE",
            WebhookSource::Slack => "SLACK",
            WebhookSource::Linear => "LINEAR",
            WebhookSource::Svix => "SVIX",
        }
    }
}

/// An HMAC's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HmacAlgorithm {
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
    /// MD5.
    Md5,
}

/// How an HMAC signature is written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureEncoding {
    /// Lower-case hex.
    Hex,
    /// Standard base64, padded.
    Base64,
    /// URL-safe base64, padded.
    Base64Url,
}

/// How a webhook authenticates its requests. Its `Debug` shows the kind, never the secret.
#[derive(Clone)]
#[non_exhaustive]
pub enum WebhookAuth {
    /// `Authorization: Basic ...` with this user and password.
    Basic {
        /// User.
        username: String,
        /// Password.
        password: String,
    },
    /// A header carrying this key.
    ApiKey {
        /// The header's name.
        header_name: String,
        /// The key.
        api_key: String,
    },
    /// A header carrying an HMAC of the raw body with this secret.
    Hmac {
        /// The hash.
        algorithm: HmacAlgorithm,
        /// How the signature is written.
        encoding: SignatureEncoding,
        /// The header's name.
        signature_header: String,
        /// The secret.
        signing_secret: String,
    },
}

impl std::fmt::Debug for WebhookAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl WebhookAuth {
    /// Basic auth.
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Self {
        WebhookAuth::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    /// An API key in `header_name`.
    pub fn api_key(header_name: impl Into<String>, api_key: impl Into<String>) -> Self {
        WebhookAuth::ApiKey {
            header_name: header_name.into(),
            api_key: api_key.into(),
        }
    }

    /// An HMAC signature of the body in `signature_header`.
    pub fn hmac(
        algorithm: HmacAlgorithm,
        encoding: SignatureEncoding,
        signature_header: impl Into<String>,
        signing_secret: impl Into<String>,
    ) -> Self {
        WebhookAuth::Hmac {
            algorithm,
            encoding,
            signature_header: signature_header.into(),
            signing_secret: signing_secret.into(),
        }
    }

    const fn kind(&self) -> &'static str {
        match self {
            WebhookAuth::Basic { .. } => "BASIC",
            WebhookAuth::ApiKey { .. } => "API_KEY",
            WebhookAuth::Hmac { .. } => "HMAC",
        }
    }

    fn to_json(&self) -> Value {
        match self {
            WebhookAuth::Basic { username, password } => {
                json!({"username": username, "password": password})
            }
            WebhookAuth::ApiKey {
                header_name,
                api_key,
            } => json!({"headerName": header_name, "apiKey": api_key}),
            WebhookAuth::Hmac {
                algorithm,
                encoding,
                signature_header,
                signing_secret,
            } => json!({
                "algorithm": match algorithm {
                    HmacAlgorithm::Sha1 => "SHA1",
                    HmacAlgorithm::Sha256 => "SHA256",
                    HmacAlgorithm::Sha512 => "SHA512",
                    HmacAlgorithm::Md5 => "MD5",
                },
                "encoding": match encoding {
                    SignatureEncoding::Hex => "HEX",
                    SignatureEncoding::Base64 => "BASE64",
                    SignatureEncoding::Base64Url => "BASE64URL",
                },
                "signatureHeaderName": signature_header,
                "signingSecret": signing_secret,
            }),
        }
    }
}

/// A webhook to create: [`NewWebhook::new`], then options.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    name: String,
    source: WebhookSource,
    event_key_expression: String,
    scope_expression: Option<String>,
    static_payload: Option<Value>,
    auth: WebhookAuth,
    return_event: bool,
}

impl NewWebhook {
    /// A generic webhook `name` whose event key is the CEL `event_key_expression` (over
    /// `input` and `headers`, e.g. `"'order:' + input.type"`), authenticated by `auth`.
    ///
    /// The key the expression makes is used as it is: the runtime's namespace
    /// (`HATCHET_CLIENT_NAMESPACE`) is not added, since the engine evaluates the expression,
    /// while a workflow's event triggers are registered namespaced. With a namespace, put it in
    /// the expression (`"'myns_order:' + input.type"`), or the events will not reach the
    /// namespaced workflows.
    pub fn new(
        name: impl Into<String>,
        event_key_expression: impl Into<String>,
        auth: WebhookAuth,
    ) -> Self {
        NewWebhook {
            name: name.into(),
            source: WebhookSource::Generic,
            event_key_expression: event_key_expression.into(),
            scope_expression: None,
            static_payload: None,
            auth,
            return_event: true,
        }
    }

    /// The source (generic by default).
    pub fn source(mut self, source: WebhookSource) -> Self {
        self.source = source;
        self
    }

    /// The event's scope, CEL over `input` and `headers` (which event filters apply).
    pub fn scope_expression(mut self, expression: impl Into<String>) -> Self {
        self.scope_expression = Some(expression.into());
        self
    }

    /// Fields merged into every event's payload (they win over the request's).
    pub fn static_payload(mut self, payload: impl serde::Serialize) -> Result<Self, Error> {
        self.static_payload = Some(to_body("create webhook", &payload)?);
        Ok(self)
    }

    /// Answer a request with 204 and no body, instead of the event it became.
    pub fn without_event_in_answer(mut self) -> Self {
        self.return_event = false;
        self
    }
}

/// What an update changes (fields left `None` stay; auth and source cannot change).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WebhookUpdate {
    /// A new event key expression.
    pub event_key_expression: Option<String>,
    /// A new scope expression (`""` removes it).
    pub scope_expression: Option<String>,
    /// A new static payload.
    pub static_payload: Option<Value>,
    /// Whether a request is answered with its event.
    pub return_event: Option<bool>,
}

impl WebhookUpdate {
    /// Changes nothing yet.
    pub fn new() -> Self {
        WebhookUpdate::default()
    }

    /// A new event key expression.
    pub fn event_key_expression(mut self, e: impl Into<String>) -> Self {
        self.event_key_expression = Some(e.into());
        self
    }

    /// A new scope expression (`""` removes it).
    pub fn scope_expression(mut self, e: impl Into<String>) -> Self {
        self.scope_expression = Some(e.into());
        self
    }

    /// Whether a request is answered with its event (else 204, no body).
    pub fn return_event(mut self, yes: bool) -> Self {
        self.return_event = Some(yes);
        self
    }
}

/// A webhook, as the REST API shows it (never its secrets).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WebhookInfo {
    /// Its metadata (webhooks go by name: the id is the nil UUID on the real engine).
    pub metadata: Meta,
    /// Its name.
    pub name: String,
    /// `GENERIC`, `GITHUB`, ...
    pub source_name: String,
    /// The event key's CEL expression.
    pub event_key_expression: String,
    /// The scope's CEL expression.
    #[serde(default)]
    pub scope_expression: Option<String>,
    /// Fields merged into every event's payload.
    #[serde(default)]
    pub static_payload: Option<Value>,
    /// `BASIC`, `API_KEY` or `HMAC`.
    pub auth_type: String,
    /// Whether a request is answered with its event.
    #[serde(default)]
    pub return_event_as_response_payload: bool,
}

#[derive(Deserialize)]
struct Rows {
    #[serde(default)]
    rows: Vec<WebhookInfo>,
}

impl Api {
    fn webhook_path(&self, name: &str) -> String {
        format!(
            "/api/v1/stable/tenants/{}/webhooks/{}",
            self.tenant(),
            encode(name)
        )
    }

    /// The URL other services send requests to, for webhook `name`.
    pub fn webhook_url(&self, name: &str) -> String {
        format!(
            "{}{}",
            self.conn.config().server_url,
            self.webhook_path(name)
        )
    }

    /// Creates a webhook.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write sent once; a second create of the name is refused).
    pub async fn create_webhook(&self, hook: &NewWebhook) -> Result<WebhookInfo, Error> {
        let mut body = json!({
            "sourceName": hook.source.as_str(), "name": hook.name,
            "eventKeyExpression": hook.event_key_expression,
            "authType": hook.auth.kind(), "auth": hook.auth.to_json(),
            "returnEventAsResponsePayload": hook.return_event,
        });
        if let Some(s) = &hook.scope_expression {
            body["scopeExpression"] = json!(s);
        }
        if let Some(p) = &hook.static_payload {
            body["staticPayload"] = p.clone();
        }
        self.json(
            reqwest::Method::POST,
            "POST /api/v1/stable/tenants/{t}/webhooks",
            &format!("/api/v1/stable/tenants/{}/webhooks", self.tenant()),
            Some(body),
        )
        .await
    }

    /// The tenant's webhooks, newest first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn list_webhooks(&self) -> Result<Vec<WebhookInfo>, Error> {
        let r: Rows = self
            .json(
                reqwest::Method::GET,
                "GET /api/v1/stable/tenants/{t}/webhooks",
                &format!("/api/v1/stable/tenants/{}/webhooks", self.tenant()),
                None,
            )
            .await?;
        Ok(r.rows)
    }

    /// One webhook, by name.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    pub async fn webhook(&self, name: &str) -> Result<WebhookInfo, Error> {
        self.json(
            reqwest::Method::GET,
            "GET /api/v1/stable/tenants/{t}/webhooks/{name}",
            &self.webhook_path(name),
            None,
        )
        .await
    }

    /// Changes what `update` names.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write.
    pub async fn update_webhook(
        &self,
        name: &str,
        update: &WebhookUpdate,
    ) -> Result<WebhookInfo, Error> {
        let mut body = json!({});
        if let Some(e) = &update.event_key_expression {
            body["eventKeyExpression"] = json!(e);
        }
        if let Some(e) = &update.scope_expression {
            body["scopeExpression"] = json!(e);
        }
        if let Some(p) = &update.static_payload {
            body["staticPayload"] = p.clone();
        }
        if let Some(r) = update.return_event {
            body["returnEventAsResponsePayload"] = json!(r);
        }
        self.json(
            reqwest::Method::PATCH,
            "PATCH /api/v1/stable/tenants/{t}/webhooks/{name}",
            &self.webhook_path(name),
            Some(body),
        )
        .await
    }

    /// Deletes a webhook; answers it as it was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an idempotent write (a second delete is a 404).
    pub async fn delete_webhook(&self, name: &str) -> Result<WebhookInfo, Error> {
        self.json(
            reqwest::Method::DELETE,
            "DELETE /api/v1/stable/tenants/{t}/webhooks/{name}",
            &self.webhook_path(name),
            None,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_auth_s_debug_names_its_kind_and_never_its_secret() {
        let a = WebhookAuth::hmac(
            HmacAlgorithm::Sha256,
            SignatureEncoding::Hex,
            "X-Signature",
            "very-secret",
        );
        assert_eq!(format!("{a:?}"), "HMAC");
        let hook = NewWebhook::new("h", "input.type", a);
        assert!(!format!("{hook:?}").contains("very-secret"), "{hook:?}");
        assert_eq!(
            WebhookAuth::api_key("X-Key", "k").to_json(),
            json!({"headerName": "X-Key", "apiKey": "k"})
        );
    }
}
