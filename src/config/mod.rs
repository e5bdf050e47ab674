//! Client configuration: from the environment (same variables and precedence as the official
//! SDKs) or from a builder.
//!
//! # Precedence (docs/contract.md §6, hatchet-protocol.md §3.4)
//!
//! | value | first | then |
//! |---|---|---|
//! | gRPC `host:port` | `HATCHET_CLIENT_HOST_PORT` | token claim `grpc_broadcast_address` |
//! | REST base URL | `HATCHET_CLIENT_SERVER_URL` | token claim `server_url` |
//! | tenant id | `HATCHET_CLIENT_TENANT_ID` (unless the nil UUID) | token claim `sub` |
//! | TLS server name | `HATCHET_CLIENT_TLS_SERVER_NAME` | host part of the gRPC address |
//!
//! The namespace is lower-cased and gets a trailing `_`. Every value is validated when the config
//! is built: a bad one is a [`ConfigError`] naming its variable, never a panic later.

mod error;
mod tls;
mod token;

pub use error::ConfigError;
pub use tls::{TlsSettings, TlsStrategy};
pub(crate) use token::parse_claims;
pub use token::{SecretToken, encode_dev_token};

use std::path::PathBuf;

/// The environment variables the runtime reads, one constant each.
pub mod vars {
    /// API token (JWT).
    pub const TOKEN: &str = "HATCHET_CLIENT_TOKEN";
    /// gRPC `host:port`.
    pub const HOST_PORT: &str = "HATCHET_CLIENT_HOST_PORT";
    /// REST base URL.
    pub const SERVER_URL: &str = "HATCHET_CLIENT_SERVER_URL";
    /// Tenant id.
    pub const TENANT_ID: &str = "HATCHET_CLIENT_TENANT_ID";
    /// Resource-name prefix.
    pub const NAMESPACE: &str = "HATCHET_CLIENT_NAMESPACE";
    /// `none`, `tls` or `mtls`.
    pub const TLS_STRATEGY: &str = "HATCHET_CLIENT_TLS_STRATEGY";
    /// Client certificate file (mtls).
    pub const TLS_CERT_FILE: &str = "HATCHET_CLIENT_TLS_CERT_FILE";
    /// Client key file (mtls).
    pub const TLS_KEY_FILE: &str = "HATCHET_CLIENT_TLS_KEY_FILE";
    /// CA bundle file.
    pub const TLS_ROOT_CA_FILE: &str = "HATCHET_CLIENT_TLS_ROOT_CA_FILE";
    /// TLS verification name.
    pub const TLS_SERVER_NAME: &str = "HATCHET_CLIENT_TLS_SERVER_NAME";
    /// Turns off unary gRPC and REST retries.
    pub const NO_RETRY: &str = "HATCHET_CLIENT_NO_RETRY";
    /// Turns off unary gRPC retries only.
    pub const NO_GRPC_RETRY: &str = "HATCHET_CLIENT_NO_GRPC_RETRY";
    /// Serves the worker's `/health` and `/metrics` (as the Python SDK does).
    pub const WORKER_HEALTHCHECK_ENABLED: &str = "HATCHET_CLIENT_WORKER_HEALTHCHECK_ENABLED";
    /// Their port (8001 by default).
    pub const WORKER_HEALTHCHECK_PORT: &str = "HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT";
    /// The largest gRPC message the client reads, in bytes (the official SDKs' name).
    pub const GRPC_MAX_RECV_MESSAGE_LENGTH: &str = "HATCHET_CLIENT_GRPC_MAX_RECV_MESSAGE_LENGTH";
    /// The largest gRPC message the client sends, in bytes (the official SDKs' name).
    pub const GRPC_MAX_SEND_MESSAGE_LENGTH: &str = "HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH";
}

/// The health and metrics port when none is given (the Python SDK's).
pub const DEFAULT_HEALTHCHECK_PORT: u16 = 8001;
/// The gRPC message limit both ways when unset: what the real engine reads and sends by default
/// (4 MiB), as the official SDKs default.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// Everything the runtime needs to reach an engine. Build it with [`ClientConfig::from_env`] or
/// [`ClientConfig::builder`]. `Debug` never prints the token.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// The API token.
    pub token: SecretToken,
    /// gRPC `host:port`.
    pub host_port: String,
    /// REST base URL, without a trailing `/`.
    pub server_url: String,
    /// Tenant id.
    pub tenant_id: String,
    /// Namespace prefix (lower-case, ends with `_`), or empty.
    pub namespace: String,
    /// TLS settings.
    pub tls: TlsSettings,
    /// `HATCHET_CLIENT_NO_RETRY`: no unary gRPC or REST retries.
    pub no_retry: bool,
    /// `HATCHET_CLIENT_NO_GRPC_RETRY`: no unary gRPC retries.
    pub no_grpc_retry: bool,
    /// The token's `exp` claim, in Unix seconds.
    pub token_expires_at: Option<f64>,
    /// Where the worker serves `GET /health` and `GET /metrics`, when switched on
    /// (`HATCHET_CLIENT_WORKER_HEALTHCHECK_ENABLED=true`: all interfaces, port
    /// `HATCHET_CLIENT_WORKER_HEALTHCHECK_PORT` or 8001; or [`ClientConfigBuilder::healthcheck`]).
    pub healthcheck: Option<std::net::SocketAddr>,
    /// The largest gRPC message read from the engine (`HATCHET_CLIENT_GRPC_MAX_RECV_MESSAGE_LENGTH`,
    /// default [`DEFAULT_MAX_MESSAGE_BYTES`]): raise it with the engine's own limit.
    pub max_recv_message_bytes: usize,
    /// The largest gRPC message sent to the engine (`HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH`,
    /// default [`DEFAULT_MAX_MESSAGE_BYTES`]): a larger request is refused before it is sent.
    pub max_send_message_bytes: usize,
}

impl ClientConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (a variable name to its value), so tests and
    /// embedders need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let mut b = ClientConfigBuilder {
            token: get(vars::TOKEN).map(SecretToken::new),
            host_port: get(vars::HOST_PORT),
            server_url: get(vars::SERVER_URL),
            tenant_id: get(vars::TENANT_ID),
            namespace: get(vars::NAMESPACE),
            tls_cert_file: get(vars::TLS_CERT_FILE).map(PathBuf::from),
            tls_key_file: get(vars::TLS_KEY_FILE).map(PathBuf::from),
            tls_root_ca_file: get(vars::TLS_ROOT_CA_FILE).map(PathBuf::from),
            tls_server_name: get(vars::TLS_SERVER_NAME),
            ..ClientConfigBuilder::default()
        };
        if let Some(s) = get(vars::TLS_STRATEGY) {
            b.tls_strategy = Some(TlsStrategy::parse(vars::TLS_STRATEGY, &s)?);
        }
        if let Some(v) = get(vars::NO_RETRY) {
            b.no_retry = parse_bool(vars::NO_RETRY, &v)?;
        }
        if let Some(v) = get(vars::NO_GRPC_RETRY) {
            b.no_grpc_retry = parse_bool(vars::NO_GRPC_RETRY, &v)?;
        }
        for (var, slot) in [
            (
                vars::GRPC_MAX_RECV_MESSAGE_LENGTH,
                &mut b.max_recv_message_bytes,
            ),
            (
                vars::GRPC_MAX_SEND_MESSAGE_LENGTH,
                &mut b.max_send_message_bytes,
            ),
        ] {
            if let Some(v) = get(var) {
                *slot = Some(parse_size(var, &v)?);
            }
        }
        let enabled = match get(vars::WORKER_HEALTHCHECK_ENABLED) {
            Some(v) => parse_bool(vars::WORKER_HEALTHCHECK_ENABLED, &v)?,
            None => false,
        };
        if enabled {
            let port = match get(vars::WORKER_HEALTHCHECK_PORT) {
                Some(v) => v
                    .trim()
                    .parse::<u16>()
                    .map_err(|_| ConfigError::InvalidPort {
                        var: vars::WORKER_HEALTHCHECK_PORT,
                        value: v.clone(),
                    })?,
                None => DEFAULT_HEALTHCHECK_PORT,
            };
            b.healthcheck = Some(std::net::SocketAddr::from(([0, 0, 0, 0], port)));
        }
        b.build()
    }

    /// A builder; only the token is required when it carries the address claims.
    pub fn builder() -> ClientConfigBuilder {
        ClientConfigBuilder::default()
    }

    /// The gRPC endpoint URI (`http://host:port` or `https://host:port`).
    pub fn grpc_uri(&self) -> String {
        format!("{}://{}", self.tls.strategy.scheme(), self.host_port)
    }

    /// Prefixes the namespace to a workflow name or event key unless it already has it.
    pub fn namespaced(&self, name: &str) -> String {
        if self.namespace.is_empty() || name.starts_with(&self.namespace) {
            name.to_string()
        } else {
            format!("{}{}", self.namespace, name)
        }
    }

    /// `name` as the user wrote it: [`ClientConfig::namespaced`] undone (a condition key the
    /// engine reports back, say).
    pub(crate) fn unnamespaced<'a>(&self, name: &'a str) -> &'a str {
        if self.namespace.is_empty() {
            return name;
        }
        name.strip_prefix(self.namespace.as_str()).unwrap_or(name)
    }

    /// The `HATCHET_CLIENT_*` lines that reproduce this configuration (the token included:
    /// meant for handing to another process, never for logs).
    pub fn env_lines(&self) -> Vec<(String, String)> {
        let strategy = match self.tls.strategy {
            TlsStrategy::None => "none",
            TlsStrategy::Tls => "tls",
            TlsStrategy::Mtls => "mtls",
        };
        vec![
            (vars::TOKEN.into(), self.token.expose().to_string()),
            (vars::HOST_PORT.into(), self.host_port.clone()),
            (vars::SERVER_URL.into(), self.server_url.clone()),
            (vars::TENANT_ID.into(), self.tenant_id.clone()),
            (vars::TLS_STRATEGY.into(), strategy.into()),
        ]
    }
}

/// Builds a [`ClientConfig`]; explicit values win over token claims, as with the variables.
#[derive(Debug, Default, Clone)]
pub struct ClientConfigBuilder {
    token: Option<SecretToken>,
    host_port: Option<String>,
    server_url: Option<String>,
    tenant_id: Option<String>,
    namespace: Option<String>,
    tls_strategy: Option<TlsStrategy>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
    tls_root_ca_file: Option<PathBuf>,
    tls_server_name: Option<String>,
    no_retry: bool,
    no_grpc_retry: bool,
    healthcheck: Option<std::net::SocketAddr>,
    max_recv_message_bytes: Option<usize>,
    max_send_message_bytes: Option<usize>,
}

impl ClientConfigBuilder {
    /// The largest gRPC message read from the engine, in bytes (default 4 MiB).
    pub fn max_recv_message_bytes(mut self, n: usize) -> Self {
        self.max_recv_message_bytes = Some(n);
        self
    }

    /// The largest gRPC message sent to the engine, in bytes (default 4 MiB).
    pub fn max_send_message_bytes(mut self, n: usize) -> Self {
        self.max_send_message_bytes = Some(n);
        self
    }

    /// The API token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(SecretToken::new(token));
        self
    }
    /// The API token, already wrapped.
    pub fn secret_token(mut self, token: SecretToken) -> Self {
        self.token = Some(token);
        self
    }
    /// gRPC `host:port` (overrides the token claim).
    pub fn host_port(mut self, v: impl Into<String>) -> Self {
        self.host_port = Some(v.into());
        self
    }
    /// REST base URL (overrides the token claim).
    pub fn server_url(mut self, v: impl Into<String>) -> Self {
        self.server_url = Some(v.into());
        self
    }
    /// Tenant id (overrides the token's `sub`).
    pub fn tenant_id(mut self, v: impl Into<String>) -> Self {
        self.tenant_id = Some(v.into());
        self
    }
    /// Namespace prefix.
    pub fn namespace(mut self, v: impl Into<String>) -> Self {
        self.namespace = Some(v.into());
        self
    }
    /// TLS strategy (default `tls`).
    pub fn tls_strategy(mut self, v: TlsStrategy) -> Self {
        self.tls_strategy = Some(v);
        self
    }
    /// Client certificate and key for `mtls`.
    pub fn tls_client_identity(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls_cert_file = Some(cert.into());
        self.tls_key_file = Some(key.into());
        self
    }
    /// CA bundle to verify the server with.
    pub fn tls_root_ca_file(mut self, v: impl Into<PathBuf>) -> Self {
        self.tls_root_ca_file = Some(v.into());
        self
    }
    /// TLS verification name.
    pub fn tls_server_name(mut self, v: impl Into<String>) -> Self {
        self.tls_server_name = Some(v.into());
        self
    }
    /// Turns off unary gRPC and REST retries.
    pub fn no_retry(mut self, v: bool) -> Self {
        self.no_retry = v;
        self
    }
    /// Turns off unary gRPC retries.
    pub fn no_grpc_retry(mut self, v: bool) -> Self {
        self.no_grpc_retry = v;
        self
    }
    /// Serves the worker's `/health` and `/metrics` on `addr` (port 0 picks a free one; see
    /// `RuntimeHandle::ops_addr`).
    pub fn healthcheck(mut self, addr: std::net::SocketAddr) -> Self {
        self.healthcheck = Some(addr);
        self
    }

    /// Validates everything and builds the config.
    pub fn build(self) -> Result<ClientConfig, ConfigError> {
        let token = self
            .token
            .ok_or(ConfigError::MissingToken { var: vars::TOKEN })?;
        if token.expose().is_empty() {
            return Err(ConfigError::MissingToken { var: vars::TOKEN });
        }
        let claims = parse_claims(vars::TOKEN, &token)?;

        let (host_port, host_var) = match self.host_port {
            Some(h) => (h, vars::HOST_PORT),
            None => (
                claims
                    .grpc_broadcast_address
                    .clone()
                    .ok_or(ConfigError::MissingClaim {
                        var: vars::TOKEN,
                        claim: "grpc_broadcast_address",
                        override_var: vars::HOST_PORT,
                    })?,
                "the token claim grpc_broadcast_address",
            ),
        };
        let host = validate_host_port(host_var, &host_port)?;

        let (server_url, url_var) = match self.server_url {
            Some(u) => (u, vars::SERVER_URL),
            None => (
                claims.server_url.clone().ok_or(ConfigError::MissingClaim {
                    var: vars::TOKEN,
                    claim: "server_url",
                    override_var: vars::SERVER_URL,
                })?,
                "the token claim server_url",
            ),
        };
        validate_url(url_var, &server_url)?;

        let tenant_id = match self.tenant_id.filter(|t| t != NIL_UUID) {
            Some(t) => t,
            None => claims.tenant_id.clone().ok_or(ConfigError::MissingClaim {
                var: vars::TOKEN,
                claim: "sub",
                override_var: vars::TENANT_ID,
            })?,
        };

        let namespace = normalize_namespace(self.namespace.as_deref().unwrap_or(""));
        let tls = TlsSettings {
            server_name_given: self.tls_server_name.is_some(),
            strategy: self.tls_strategy.unwrap_or_default(),
            cert_file: self.tls_cert_file,
            key_file: self.tls_key_file,
            root_ca_file: self.tls_root_ca_file,
            server_name: self
                .tls_server_name
                .unwrap_or_else(|| host.to_string())
                .trim_matches(|c| c == '[' || c == ']')
                .to_string(),
        };
        tls.validate()?;

        Ok(ClientConfig {
            token,
            host_port,
            server_url: server_url.trim_end_matches('/').to_string(),
            tenant_id,
            namespace,
            tls,
            no_retry: self.no_retry,
            no_grpc_retry: self.no_grpc_retry,
            token_expires_at: claims.expires_at,
            healthcheck: self.healthcheck,
            max_recv_message_bytes: self
                .max_recv_message_bytes
                .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
            max_send_message_bytes: self
                .max_send_message_bytes
                .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
        })
    }
}

/// A message size in bytes: a whole number of at least 1 KiB.
fn parse_size(var: &'static str, v: &str) -> Result<usize, ConfigError> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n >= 1024)
        .ok_or_else(|| ConfigError::InvalidSize {
            var,
            value: v.to_string(),
        })
}

/// Lower-cases and appends `_` unless empty or already there (both SDKs do this).
pub(crate) fn normalize_namespace(ns: &str) -> String {
    let ns = ns.trim().to_lowercase();
    if ns.is_empty() || ns.ends_with('_') {
        ns
    } else {
        format!("{ns}_")
    }
}

/// Parses a boolean variable the way Go's `strconv.ParseBool` does.
pub(crate) fn parse_bool(var: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "yes" | "on" => Ok(true),
        "0" | "f" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::InvalidBool {
            var,
            value: value.to_string(),
        }),
    }
}

/// Checks `host:port` (IPv6 hosts in brackets) and returns the host.
pub(crate) fn validate_host_port<'a>(
    var: &'static str,
    value: &'a str,
) -> Result<&'a str, ConfigError> {
    let bad = |reason| ConfigError::InvalidAddress {
        var,
        value: value.to_string(),
        reason,
    };
    if value.contains("://") {
        return Err(bad("give host:port without a scheme"));
    }
    let (host, port) = value.rsplit_once(':').ok_or(bad("no :port"))?;
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad("IPv6 hosts go in brackets, as [::1]:7070"));
    }
    if host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(bad("the host has spaces or slashes"));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad("the port is not a number from 1 to 65535")),
        Ok(_) => Ok(host),
    }
}

fn validate_url(var: &'static str, value: &str) -> Result<(), ConfigError> {
    let url = reqwest::Url::parse(value).map_err(|e| ConfigError::InvalidUrl {
        var,
        value: value.to_string(),
        reason: e.to_string(),
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(ConfigError::InvalidUrl {
            var,
            value: value.to_string(),
            reason: format!("scheme {:?} is not http or https", url.scheme()),
        });
    }
    if url.host_str().is_none() {
        return Err(ConfigError::InvalidUrl {
            var,
            value: value.to_string(),
            reason: "no host".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn the_sdk_variables_set_the_message_limits() {
        assert_eq!(
            parse_size(vars::GRPC_MAX_RECV_MESSAGE_LENGTH, "8388608").ok(),
            Some(8 << 20)
        );
        let err = parse_size(vars::GRPC_MAX_SEND_MESSAGE_LENGTH, "4MB").expect_err("not bytes");
        assert!(
            err.to_string()
                .contains("HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH"),
            "{err}"
        );
        assert!(
            parse_size(vars::GRPC_MAX_SEND_MESSAGE_LENGTH, "10").is_err(),
            "under 1 KiB"
        );
    }
}
