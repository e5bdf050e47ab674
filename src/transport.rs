//! Connections to the engine: the gRPC channel (TLS, keepalive, auth) built from a [`ClientConfig`].
//!
//! # Invariants
//!
//! 1. One HTTP/2 connection per runtime, shared by every call and stream; `connect_lazy` so that
//!    building a runtime never blocks on the engine (the first call dials).
//! 2. Keepalive pings every 10 s with a 10 s ack timeout, also while idle (docs/contract.md §3: a
//!    half-open connection is noticed within ~20 s and redialled).
//! 3. The `authorization` metadata value is marked sensitive, so `Debug` of a request prints
//!    `Sensitive` instead of the token.
//! 4. Requests are sent uncompressed and gzip responses are accepted (the engine registers gzip).
//! 5. A first contact that failed is explained by one probe of what the address speaks
//!    ([`probe`]): a TLS ClientHello on a fresh connection, never plaintext, because every TLS
//!    stack answers a ClientHello (Go's crypto/tls, the real engine's, closes without an alert
//!    on a first record that is not a handshake) and a plaintext HTTP server answers it as
//!    garbage in its own protocol. What the answer means is decided by [`speaks`] over its first
//!    bytes alone; the probe never changes a working connection.

use std::time::Duration;

use std::sync::Arc;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::{ClientConfig, ConfigError, TlsStrategy, vars};

/// HTTP/2 keepalive ping interval (docs/contract.md §3).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive ack timeout (docs/contract.md §3).
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP connect timeout: a dial that takes longer is as good as refused.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the probe of [`probe`] may take, connect included.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the server at the engine's address speaks, read from the first bytes it answers to a
/// TLS ClientHello (a pure decision, invariant 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Speaks {
    /// A TLS record came back: a ServerHello (or HelloRetryRequest) or an alert.
    Tls,
    /// Plaintext HTTP came back: an HTTP/1.x status line, or an HTTP/2 SETTINGS or GOAWAY frame
    /// (an h2 server, gRPC's, sends its SETTINGS before it reads the client's preface).
    Plaintext,
    /// Nothing that says either: a close or reset with nothing, or other bytes.
    Unknown,
}

/// Reads what `first` bytes the server answered to a ClientHello say it speaks.
pub(crate) fn speaks(first: &[u8]) -> Speaks {
    match first {
        // A TLS record header: content type 22 (handshake) or 21 (alert), version 3.x.
        [21 | 22, 3, ..] => Speaks::Tls,
        [b'H', b'T', b'T', b'P', b'/', ..] => Speaks::Plaintext,
        // An HTTP/2 frame header: 3 bytes of length, type 4 (SETTINGS) or 7 (GOAWAY), flags,
        // and stream 0 (the reserved bit aside).
        [_, _, _, 4 | 7, _, s0, s1, s2, s3, ..] if (s0 & 0x7f) | s1 | s2 | s3 == 0 => {
            Speaks::Plaintext
        }
        _ => Speaks::Unknown,
    }
}

/// The host of a `host:port` (an IPv6 address without its brackets).
fn host_of(host_port: &str) -> &str {
    let host = host_port
        .rsplit_once(':')
        .map_or(host_port, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The first flight of a TLS client for `host`, as rustls writes it: one handshake record with
/// a ClientHello offering TLS 1.3 and 1.2, h2 by ALPN, and SNI when `host` is a name. The
/// handshake is never finished (nothing is verified): only the server's answer matters.
fn client_hello(host: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::ServerName;
    #[allow(deprecated)] // as in `rest_tls`
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    // A host that is no valid name still gets a ClientHello: the name only goes in SNI.
    let name = ServerName::try_from(host.to_string())
        .or_else(|_| ServerName::try_from("localhost"))
        .ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).ok()?;
    }
    Some(out)
}

/// Whether the engine's address speaks TLS or plaintext: one short probe on a fresh connection
/// (connect, a ClientHello, the first bytes of the answer), bounded by [`PROBE_TIMEOUT`]. Used
/// only to explain a first contact that failed, never on a working connection.
pub(crate) async fn probe(host_port: &str) -> Speaks {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Some(hello) = client_hello(host_of(host_port)) else {
        return Speaks::Unknown;
    };
    // Enough for a TLS record header, an HTTP/1 status line's start and an HTTP/2 frame header.
    let mut buf = [0u8; 16];
    let mut n = 0;
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(host_port).await?;
        s.set_nodelay(true)?;
        s.write_all(&hello).await?;
        // Until the bytes decide, the server closes, or the buffer is full; a reset after
        // some bytes keeps them (an h2 server may reset once it has read the ClientHello).
        while n < buf.len() && speaks(&buf[..n]) == Speaks::Unknown {
            match s.read(&mut buf[n..]).await? {
                0 => break,
                k => n += k,
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(PROBE_TIMEOUT, exchange).await;
    speaks(&buf[..n])
}

/// The words for a TLS mismatch between the configuration and what the engine speaks, if any.
pub(crate) fn mismatch(cfg: &ClientConfig, speaks: Speaks) -> Option<String> {
    let addr = &cfg.host_port;
    match (cfg.tls.strategy, speaks) {
        (TlsStrategy::Tls | TlsStrategy::Mtls, Speaks::Plaintext) => Some(format!(
            "TLS mismatch: the engine at {addr} speaks plaintext, and {} is {} (tls is the default when it is unset); set {}=none for a plaintext engine, or point {} at its TLS port",
            vars::TLS_STRATEGY,
            if cfg.tls.strategy == TlsStrategy::Mtls {
                "mtls"
            } else {
                "tls"
            },
            vars::TLS_STRATEGY,
            vars::HOST_PORT
        )),
        (TlsStrategy::None, Speaks::Tls) => Some(format!(
            "TLS mismatch: the engine at {addr} speaks TLS, and {}=none; set {}=tls (and {} if its certificate is not from a public CA)",
            vars::TLS_STRATEGY,
            vars::TLS_STRATEGY,
            vars::TLS_ROOT_CA_FILE
        )),
        _ => None,
    }
}

fn read_file(var: &'static str, path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError::UnreadableFile {
        var,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// What the engine's certificates are verified against: one answer for gRPC and REST.
enum Roots {
    /// The CA bundle of `HATCHET_CLIENT_TLS_ROOT_CA_FILE` (PEM), and nothing else.
    CaFile(Vec<u8>),
    /// The web PKI roots (Mozilla's, as webpki-roots carries them).
    WebPki,
}

fn roots(cfg: &ClientConfig) -> Result<Roots, ConfigError> {
    Ok(match &cfg.tls.root_ca_file {
        Some(p) => Roots::CaFile(read_file(vars::TLS_ROOT_CA_FILE, p)?),
        None => Roots::WebPki,
    })
}

/// The TLS client config for `cfg`, or `None` for plaintext.
pub(crate) fn tls_config(cfg: &ClientConfig) -> Result<Option<ClientTlsConfig>, ConfigError> {
    let tls = &cfg.tls;
    if tls.strategy == TlsStrategy::None {
        return Ok(None);
    }
    let mut c = ClientTlsConfig::new().domain_name(tls.server_name.clone());
    c = match roots(cfg)? {
        Roots::CaFile(pem) => c.ca_certificate(Certificate::from_pem(pem)),
        Roots::WebPki => c.with_webpki_roots(),
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
pub(crate) fn endpoint(cfg: &ClientConfig) -> Result<Endpoint, ConfigError> {
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
pub(crate) fn channel(cfg: &ClientConfig) -> Result<Channel, ConfigError> {
    Ok(endpoint(cfg)?.connect_lazy())
}

/// Adds `authorization: Bearer <token>` to every request and stream open.
#[derive(Clone)]
pub(crate) struct AuthInterceptor {
    value: AsciiMetadataValue,
}

impl std::fmt::Debug for AuthInterceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthInterceptor(***)")
    }
}

impl AuthInterceptor {
    /// An interceptor for `cfg`'s token.
    pub(crate) fn new(cfg: &ClientConfig) -> Result<Self, ConfigError> {
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

/// Verifies a certificate against one configured name (`TLS_SERVER_NAME`) instead of the URL's
/// host, with the web PKI rules otherwise.
#[derive(Debug)]
struct VerifyAs {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    name: rustls::pki_types::ServerName<'static>,
}

impl rustls::client::danger::ServerCertVerifier for VerifyAs {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _url_host: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The REST path's TLS: the same roots as gRPC ([`roots`]), `TLS_SERVER_NAME` when given, the
/// client identity for `mtls`, and HTTP/2 offered by ALPN.
fn rest_tls(cfg: &ClientConfig) -> Result<rustls::ClientConfig, ConfigError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let ca_error = |reason: String| ConfigError::UnreadableFile {
        var: vars::TLS_ROOT_CA_FILE,
        path: cfg
            .tls
            .root_ca_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        reason,
    };
    let mut store = rustls::RootCertStore::empty();
    match roots(cfg)? {
        Roots::CaFile(pem) => {
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| ca_error(format!("not a PEM certificate: {e}")))?;
                store
                    .add(cert)
                    .map_err(|e| ca_error(format!("not a usable CA certificate: {e}")))?;
            }
            if store.is_empty() {
                return Err(ca_error("no certificate in the file".into()));
            }
        }
        Roots::WebPki => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    // ring, as tonic's `tls-ring` (pure Rust to build, no cmake). rustls 0.23.48 deprecates
    // its provider for lacking post-quantum key exchange; the engine's TLS is classical.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let invalid = |e: String| ConfigError::InvalidUrl {
        var: vars::SERVER_URL,
        value: cfg.server_url.clone(),
        reason: e,
    };
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(store),
        provider.clone(),
    )
    .build()
    .map_err(|e| invalid(e.to_string()))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?;
    let builder = if cfg.tls.server_name_given {
        let name = ServerName::try_from(cfg.tls.server_name.clone()).map_err(|e| {
            ConfigError::InvalidUrl {
                var: vars::TLS_SERVER_NAME,
                value: cfg.tls.server_name.clone(),
                reason: e.to_string(),
            }
        })?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(VerifyAs {
                inner: verifier,
                name,
            }))
    } else {
        builder.with_webpki_verifier(verifier)
    };
    let mut config = match (&cfg.tls.cert_file, &cfg.tls.key_file) {
        (Some(cert), Some(key)) if cfg.tls.strategy == TlsStrategy::Mtls => {
            let key_error = |reason: String| ConfigError::UnreadableFile {
                var: vars::TLS_KEY_FILE,
                path: key.display().to_string(),
                reason,
            };
            let cert_pem = read_file(vars::TLS_CERT_FILE, cert)?;
            let chain = CertificateDer::pem_slice_iter(&cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ConfigError::UnreadableFile {
                    var: vars::TLS_CERT_FILE,
                    path: cert.display().to_string(),
                    reason: format!("not a PEM certificate: {e}"),
                })?;
            let key_pem = read_file(vars::TLS_KEY_FILE, key)?;
            let key = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| key_error(format!("not a PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| key_error(format!("not a usable certificate and key: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The HTTP client of the REST path: no built-in retries (the retry core owns them), the same
/// TLS roots and server name as gRPC ([`rest_tls`]), and HTTP/2 when the server offers it.
pub(crate) fn http_client(cfg: &ClientConfig) -> Result<reqwest::Client, ConfigError> {
    // Other rustls users of the process (a user's own reqwest client) may rely on a process
    // provider: install ring once (an existing provider is kept).
    #[allow(deprecated)] // as in `rest_tls`
    let _ = rustls::crypto::ring::default_provider().install_default();
    let b = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .tls_backend_preconfigured(rest_tls(cfg)?);
    b.build().map_err(|e| ConfigError::InvalidUrl {
        var: vars::SERVER_URL,
        value: cfg.server_url.clone(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ServerHello record's start, as Go's crypto/tls and rustls send it.
    const SERVER_HELLO: [u8; 10] = [22, 3, 3, 0, 0x7a, 2, 0, 0, 0x76, 3];
    /// A fatal `unexpected_message` alert (what rustls answers to bytes that are not TLS).
    const ALERT: [u8; 7] = [21, 3, 3, 0, 2, 2, 10];
    /// An empty SETTINGS frame on stream 0, as an h2 server sends it first.
    const SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
    /// A GOAWAY (PROTOCOL_ERROR) frame header on stream 0.
    const GOAWAY: [u8; 9] = [0, 0, 8, 7, 0, 0, 0, 0, 0];

    #[test]
    fn the_first_bytes_answered_to_a_client_hello_say_what_the_address_speaks() {
        assert_eq!(
            speaks(&[]),
            Speaks::Unknown,
            "a silent close (Go's crypto/tls on plaintext) says nothing by itself"
        );
        assert_eq!(speaks(&SERVER_HELLO), Speaks::Tls, "a ServerHello");
        assert_eq!(speaks(&ALERT), Speaks::Tls, "a TLS alert record");
        assert_eq!(
            speaks(b"HTTP/1.1 400 Bad Request\r\n"),
            Speaks::Plaintext,
            "an HTTP/1 server (nginx's plaintext port)"
        );
        assert_eq!(speaks(&SETTINGS), Speaks::Plaintext, "an h2 SETTINGS frame");
        assert_eq!(speaks(&GOAWAY), Speaks::Plaintext, "an h2 GOAWAY frame");
        let settings_then_more = [&SETTINGS[..], &[0, 0, 4, 8, 0]].concat();
        assert_eq!(speaks(&settings_then_more), Speaks::Plaintext);
        // Too little to decide, or something else.
        assert_eq!(speaks(&[22]), Speaks::Unknown, "one byte is no record");
        assert_eq!(
            speaks(&SETTINGS[..8]),
            Speaks::Unknown,
            "half a frame header"
        );
        assert_eq!(
            speaks(&[0, 0, 0, 4, 0, 0, 0, 0, 1]),
            Speaks::Unknown,
            "SETTINGS is never on a stream"
        );
        assert_eq!(speaks(b"SSH-2.0-OpenSSH"), Speaks::Unknown);
        assert_eq!(speaks(&[22, 9, 9]), Speaks::Unknown, "not version 3.x");
    }

    #[test]
    fn the_probe_sends_a_client_hello_record() {
        for host in ["engine.example.com", "127.0.0.1", "::1", "not a name"] {
            let hello = client_hello(host).expect("a ClientHello");
            // A handshake record (type 22, version 3.x), whose first message is a ClientHello
            // (type 1) that fills the record.
            assert_eq!(&hello[..2], &[22, 3], "{host}");
            let len = usize::from(u16::from_be_bytes([hello[3], hello[4]]));
            assert_eq!(hello.len(), 5 + len, "{host}: one record");
            assert_eq!(hello[5], 1, "{host}: a ClientHello");
        }
        let hello = client_hello("engine.example.com").expect("a ClientHello");
        let has = |needle: &[u8]| hello.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"engine.example.com"), "SNI names the host");
        assert!(has(b"\x02h2"), "h2 offered by ALPN");
        assert_eq!(host_of("engine.example.com:7070"), "engine.example.com");
        assert_eq!(host_of("[::1]:7070"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }

    /// A server on 127.0.0.1 that sends `answer` once it has read something, then closes.
    async fn answering(answer: &'static [u8]) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 5];
                let _ = s.read_exact(&mut buf).await;
                let _ = s.write_all(answer).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn the_probe_reads_the_answer_and_a_silent_close_is_unknown() {
        assert_eq!(probe(&answering(&SERVER_HELLO).await).await, Speaks::Tls);
        assert_eq!(
            probe(&answering(b"HTTP/1.1 400 Bad Request\r\n\r\n").await).await,
            Speaks::Plaintext
        );
        assert_eq!(probe(&answering(&[]).await).await, Speaks::Unknown);
    }

    #[test]
    fn a_mismatch_names_the_address_and_the_setting_to_change() {
        let cfg = |strategy| {
            ClientConfig::builder()
                .secret_token(crate::config::encode_dev_token(
                    "tenant",
                    "https://engine.example",
                    "engine.example:7070",
                    4_000_000_000,
                    "id",
                ))
                .host_port("engine.example:7070")
                .tls_strategy(strategy)
                .build()
                .expect("config")
        };
        let none = cfg(TlsStrategy::None);
        let why = mismatch(&none, Speaks::Tls).expect("a mismatch");
        assert!(
            why.contains("engine.example:7070 speaks TLS")
                && why.contains("HATCHET_CLIENT_TLS_STRATEGY=tls"),
            "{why}"
        );
        let tls = cfg(TlsStrategy::Tls);
        let why = mismatch(&tls, Speaks::Plaintext).expect("a mismatch");
        assert!(
            why.contains("engine.example:7070 speaks plaintext")
                && why.contains("HATCHET_CLIENT_TLS_STRATEGY=none"),
            "{why}"
        );
        for (c, s) in [
            (&none, Speaks::Plaintext),
            (&none, Speaks::Unknown),
            (&tls, Speaks::Tls),
            (&tls, Speaks::Unknown),
        ] {
            assert_eq!(mismatch(c, s), None, "{s:?}");
        }
    }
}
