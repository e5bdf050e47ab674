//! Connections to the engine: the gRPC channel (TLS, keepalive, auth) built from a [`ClientConfig`].
//!
//! # Invariants
//!
//! 1. One HTTP/2 connection per runtime, shared by every call and stream; `connect_lazy` so that
//!    building a runtime never blocks on the engine (the first call dials).
//! 2. Keepalive pings every 10 s with a 10 s ack timeout, also while idle (CONTRACT.md §3: a
//!    half-open connection is noticed within ~20 s and redialled).
//! 3. The `authorization` metadata value is marked sensitive, so `Debug` of a request prints
//!    `Sensitive` instead of the token.
//! 4. Requests are sent uncompressed and gzip responses are accepted (the engine registers gzip).

use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::{ClientConfig, ConfigError, TlsStrategy, vars};

/// HTTP/2 keepalive ping interval (CONTRACT.md §3).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive ack timeout (CONTRACT.md §3).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP connect timeout: a dial that takes longer is as good as refused.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest message sent or received (the engine's default limit).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

fn read_file(var: &'static str, path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError::UnreadableFile {
        var,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The TLS client config for `cfg`, or `None` for plaintext.
pub fn tls_config(cfg: &ClientConfig) -> Result<Option<ClientTlsConfig>, ConfigError> {
    let tls = &cfg.tls;
    if tls.strategy == TlsStrategy::None {
        return Ok(None);
    }
    let mut c = ClientTlsConfig::new().domain_name(tls.server_name.clone());
    c = match &tls.root_ca_file {
        Some(p) => c.ca_certificate(Certificate::from_pem(read_file(vars::TLS_ROOT_CA_FILE, p)?)),
        None => c.with_webpki_roots(),
    };
    if tls.strategy == TlsStrategy::Mtls
        && let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file)
    {
        let cert = read_file(vars::TLS_CERT_FILE, cert)?;
        let key = read_file(vars::TLS_KEY_FILE, key)?;
        c = c.identity(Identity::from_pem(cert, key));
    }
    Ok(Some(c))
}

/// The gRPC endpoint for `cfg`, with keepalive, nodelay and TLS set.
pub fn endpoint(cfg: &ClientConfig) -> Result<Endpoint, ConfigError> {
    let uri = cfg.grpc_uri();
    let mut ep = Endpoint::from_shared(uri.clone())
        .map_err(|e| ConfigError::InvalidAddress {
            var: vars::HOST_PORT,
            value: cfg.host_port.clone(),
            reason: if e.to_string().is_empty() {
                "not a URI"
            } else {
                "not a valid URI authority"
            },
        })?
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(tls) = tls_config(cfg)? {
        ep = ep.tls_config(tls).map_err(|e| ConfigError::InvalidUrl {
            var: vars::TLS_STRATEGY,
            value: uri,
            reason: e.to_string(),
        })?;
    }
    Ok(ep)
}

/// A lazily connected channel for `cfg`.
pub fn channel(cfg: &ClientConfig) -> Result<Channel, ConfigError> {
    Ok(endpoint(cfg)?.connect_lazy())
}

/// Adds `authorization: Bearer <token>` to every request and stream open.
#[derive(Clone)]
pub struct AuthInterceptor {
    value: AsciiMetadataValue,
}

impl std::fmt::Debug for AuthInterceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthInterceptor(***)")
    }
}

impl AuthInterceptor {
    /// An interceptor for `cfg`'s token.
    pub fn new(cfg: &ClientConfig) -> Result<Self, ConfigError> {
        let mut value: AsciiMetadataValue =
            MetadataValue::try_from(cfg.token.bearer()).map_err(|_| {
                ConfigError::MalformedToken {
                    var: vars::TOKEN,
                    reason: "the token has characters that cannot go in a header".into(),
                }
            })?;
        value.set_sensitive(true);
        Ok(AuthInterceptor { value })
    }
}

impl Interceptor for AuthInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut()
            .insert("authorization", self.value.clone());
        Ok(req)
    }
}

/// The HTTP client of the REST path: no built-in retries (the retry core owns them), the
/// configured CA, and HTTP/2 when the server offers it.
pub fn http_client(cfg: &ClientConfig) -> Result<reqwest::Client, ConfigError> {
    // reqwest is built without a default crypto provider: install ring once (an existing
    // provider is kept).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(std::time::Duration::from_secs(90));
    if let Some(ca) = &cfg.tls.root_ca_file {
        let pem = read_file(vars::TLS_ROOT_CA_FILE, ca)?;
        let cert =
            reqwest::Certificate::from_pem(&pem).map_err(|e| ConfigError::UnreadableFile {
                var: vars::TLS_ROOT_CA_FILE,
                path: ca.display().to_string(),
                reason: e.to_string(),
            })?;
        b = b.add_root_certificate(cert);
    }
    if cfg.tls.strategy == TlsStrategy::Mtls
        && let (Some(cert), Some(key)) = (&cfg.tls.cert_file, &cfg.tls.key_file)
    {
        let mut pem = read_file(vars::TLS_CERT_FILE, cert)?;
        pem.push(b'\n');
        pem.extend(read_file(vars::TLS_KEY_FILE, key)?);
        let identity =
            reqwest::Identity::from_pem(&pem).map_err(|e| ConfigError::UnreadableFile {
                var: vars::TLS_KEY_FILE,
                path: key.display().to_string(),
                reason: format!("not a PEM certificate and key: {e}"),
            })?;
        b = b.identity(identity);
    }
    b.build().map_err(|e| ConfigError::InvalidUrl {
        var: vars::SERVER_URL,
        value: cfg.server_url.clone(),
        reason: e.to_string(),
    })
}
