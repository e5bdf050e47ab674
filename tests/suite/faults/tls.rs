//! TLS and mTLS with certificates made at test time (rcgen): `tls` verifies the engine, a wrong
//! CA or server name is a clear error, `mtls` presents the client certificate and the engine can
//! require it.

use std::path::PathBuf;
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions, EngineTls};
use hatchet_runtime::Runtime;
use hatchet_runtime::config::{ClientConfig, TlsStrategy};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().expect("key")).expect("ca"),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf certificate for `names`: (cert PEM, key PEM).
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("params");
        let cert = p.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}

fn file(contents: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("hatchet-tls-{}.pem", uuid::Uuid::new_v4()));
    std::fs::write(&p, contents).expect("write");
    p
}

async fn tls_engine(ca: &Ca, client_ca: Option<&Ca>) -> DevEngine {
    let (cert_pem, key_pem) = ca.leaf(&["localhost"]);
    let tls = EngineTls {
        cert_pem,
        key_pem,
        client_ca_pem: client_ca.map(Ca::pem),
    };
    crate::support::engine_with(DevEngineOptions::default().tls(tls)).await
}

fn client(
    engine: &DevEngine,
    strategy: TlsStrategy,
    ca: &Ca,
    name: &str,
    identity: Option<(PathBuf, PathBuf)>,
) -> ClientConfig {
    let token = engine.client_config().env_lines()[0].1.clone();
    let mut b = ClientConfig::builder()
        .token(token)
        .tls_strategy(strategy)
        .tls_root_ca_file(file(&ca.pem()))
        .tls_server_name(name);
    if let Some((c, k)) = identity {
        b = b.tls_client_identity(c, k);
    }
    b.build().expect("config")
}

async fn version(cfg: ClientConfig) -> Result<String, hatchet_runtime::Error> {
    let rt = Runtime::spawn(cfg).await?;
    let r = tokio::time::timeout(Duration::from_secs(20), rt.engine_version())
        .await
        .expect("bounded");
    rt.shutdown(Duration::from_millis(100)).await;
    r
}

#[tokio::test]
async fn tls_verifies_the_engine_against_the_given_ca() {
    let ca = Ca::new();
    let engine = tls_engine(&ca, None).await;
    let v = version(client(&engine, TlsStrategy::Tls, &ca, "localhost", None))
        .await
        .expect("TLS works");
    assert_eq!(v, "v0.94.16");
}

#[tokio::test]
async fn a_wrong_ca_or_server_name_is_a_clear_error() {
    let ca = Ca::new();
    let engine = tls_engine(&ca, None).await;
    let other = Ca::new();
    let err = version(client(&engine, TlsStrategy::Tls, &other, "localhost", None))
        .await
        .expect_err("untrusted");
    let text = format!("{err} {err:?}").to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("unknownissuer"),
        "{text}"
    );
    assert_eq!(
        err.outcome(),
        hatchet_runtime::Outcome::NotSent,
        "a failed handshake sent nothing"
    );
    let err = version(client(
        &engine,
        TlsStrategy::Tls,
        &ca,
        "engine.example",
        None,
    ))
    .await
    .expect_err("wrong name");
    let text = format!("{err} {err:?}").to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("name"),
        "{text}"
    );
}

#[tokio::test]
async fn mtls_presents_the_client_certificate_and_the_engine_can_require_it() {
    let server_ca = Ca::new();
    let client_ca = Ca::new();
    let engine = tls_engine(&server_ca, Some(&client_ca)).await;
    let (cert, key) = client_ca.leaf(&["worker.local"]);
    let v = version(client(
        &engine,
        TlsStrategy::Mtls,
        &server_ca,
        "localhost",
        Some((file(&cert), file(&key))),
    ))
    .await;
    assert_eq!(v.expect("mTLS works"), "v0.94.16");
    // Plain TLS (no client certificate) is refused by an engine that requires one.
    let err = version(client(
        &engine,
        TlsStrategy::Tls,
        &server_ca,
        "localhost",
        None,
    ))
    .await
    .expect_err("no client cert");
    assert!(!err.to_string().is_empty());
    // A client certificate from another CA is refused too.
    let stranger = Ca::new();
    let (cert, key) = stranger.leaf(&["intruder"]);
    version(client(
        &engine,
        TlsStrategy::Mtls,
        &server_ca,
        "localhost",
        Some((file(&cert), file(&key))),
    ))
    .await
    .expect_err("untrusted client");
}

#[tokio::test]
async fn an_unreadable_certificate_file_names_its_variable() {
    let ca = Ca::new();
    let engine = tls_engine(&ca, None).await;
    let token = engine.client_config().env_lines()[0].1.clone();
    let cfg = ClientConfig::builder()
        .token(token)
        .tls_strategy(TlsStrategy::Tls)
        .tls_root_ca_file("/nonexistent/ca.pem")
        .build()
        .expect("config");
    let err = Runtime::spawn(cfg).await.expect_err("unreadable CA");
    assert!(
        err.to_string().contains("HATCHET_CLIENT_TLS_ROOT_CA_FILE"),
        "{err}"
    );
}

/// A TLS REST endpoint for `cert` that answers every request with an empty page, counting the
/// handshakes that completed (the development engine's REST is plaintext).
async fn https_api(
    cert_pem: &str,
    key_pem: &str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicU32>,
) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key");
    let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handshakes = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = vec![0u8; 16 * 1024];
                let _ = tls.read(&mut buf).await;
                let body =
                    r#"{"rows":[],"pagination":{"current_page":1,"num_pages":1,"next_page":1}}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, handshakes)
}

#[tokio::test]
async fn grpc_and_rest_trust_the_same_roots_and_both_verify_tls_server_name() {
    let ca = Ca::new();
    // Certificates for a name that is not the address the client dials.
    let (cert_pem, key_pem) = ca.leaf(&["engine.test"]);
    let engine = DevEngine::start(DevEngineOptions::default().tls(EngineTls {
        cert_pem: cert_pem.clone(),
        key_pem: key_pem.clone(),
        client_ca_pem: None,
    }))
    .await
    .expect("engine");
    let (api, handshakes) = https_api(&cert_pem, &key_pem).await;
    let token = engine.client_config().env_lines()[0].1.clone();
    let config = |server_name: Option<&str>| {
        let mut b = ClientConfig::builder()
            .token(token.clone())
            .host_port(engine.grpc_addr().to_string())
            .server_url(format!("https://{api}"))
            .tls_strategy(TlsStrategy::Tls)
            .tls_root_ca_file(file(&ca.pem()));
        if let Some(n) = server_name {
            b = b.tls_server_name(n);
        }
        b.build().expect("config")
    };
    let rt = Runtime::spawn(config(Some("engine.test")))
        .await
        .expect("runtime");
    rt.engine_version()
        .await
        .expect("gRPC verifies the engine as engine.test");
    let workers = rt
        .api()
        .workers()
        .await
        .expect("REST verifies the API as engine.test too");
    assert!(workers.is_empty());
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 1);
    rt.shutdown(Duration::from_millis(100)).await;

    // Without the name both verify the address they dial, which the certificate does not name.
    let rt = Runtime::spawn(config(None)).await.expect("runtime");
    let grpc = rt
        .engine_version()
        .await
        .expect_err("127.0.0.1 is not engine.test");
    let rest = rt
        .api()
        .workers()
        .await
        .expect_err("127.0.0.1 is not engine.test");
    for err in [grpc, rest] {
        let text = format!("{err} {err:?}").to_lowercase();
        assert!(
            text.contains("certificate") || text.contains("name"),
            "{text}"
        );
    }
    assert_eq!(
        handshakes.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no handshake completed without the name"
    );
    rt.shutdown(Duration::from_millis(100)).await;
}

/// A TLS mismatch says so: TLS against a plaintext engine, or plaintext against a TLS one, ends as
/// a configuration error (`Invalid`: nothing ran, and trying again never helps) that names the
/// address and the setting to change; a refused connection names its address in `Display`.
#[tokio::test]
async fn a_tls_mismatch_and_a_refused_connection_say_what_to_change() {
    let plain = crate::support::engine().await;
    let ca = Ca::new();
    let tls = tls_engine(&ca, None).await;
    for (engine, strategy) in [(&plain, TlsStrategy::Tls), (&tls, TlsStrategy::None)] {
        let cfg = client(engine, strategy, &ca, "localhost", None);
        let addr = cfg.host_port.clone();
        let err = version(cfg).await.expect_err("a mismatch");
        let text = err.to_string();
        assert_eq!(err.outcome(), hatchet_runtime::Outcome::Invalid, "{text}");
        if strategy == TlsStrategy::Tls {
            // The handshake read bytes that are not TLS: known at the first attempt. (The
            // other way round the server just closes, as a transient failure does: the
            // mismatch is found by a probe once the attempts are spent.)
            assert_eq!(err.attempts(), 1, "a mismatch is not retried: {text}");
        }
        assert!(
            text.contains("TLS mismatch")
                && text.contains(&addr)
                && text.contains("HATCHET_CLIENT_TLS_STRATEGY"),
            "{text}"
        );
    }
    // Nothing listens: the address is in what a user prints.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = free.local_addr().expect("addr").port();
    drop(free);
    let token = plain.client_config().env_lines()[0].1.clone();
    let cfg = ClientConfig::builder()
        .token(token)
        .host_port(format!("127.0.0.1:{port}"))
        .tls_strategy(TlsStrategy::None)
        .build()
        .expect("config");
    let err = version(cfg).await.expect_err("nothing listens");
    assert_eq!(err.outcome(), hatchet_runtime::Outcome::NotSent, "{err}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}

/// A TLS server on Go's crypto/tls (tests/tls_server), as the real engine's port is: it drops a
/// first record that is not a handshake without a TLS alert. Killed when dropped.
struct GoTlsServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for GoTlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds and starts tests/tls_server, or `None` (with a printed line) when `go` is not on PATH.
fn go_tls_server() -> Option<GoTlsServer> {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    if Command::new("go").arg("version").output().is_err() {
        println!("skipped: `go` is not on PATH, so there is no Go TLS server to probe");
        return None;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tls_server");
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hatchet_go_tls_server");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg("main.go")
        .current_dir(&dir)
        .output()
        .expect("go build runs");
    assert!(
        built.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the Go TLS server starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the port line");
    let port = line.trim().parse().expect("a port");
    Some(GoTlsServer { child, port })
}

/// Plaintext against a Go TLS server: Go sends no alert for a first record that is not a handshake,
/// it just closes; the runtime still says the port speaks TLS and what to set, within a few
/// seconds.
#[tokio::test]
async fn plaintext_against_a_go_tls_server_says_the_port_speaks_tls() {
    let Some(server) = go_tls_server() else {
        return;
    };
    let plain = crate::support::engine().await;
    let token = plain.client_config().env_lines()[0].1.clone();
    let addr = format!("127.0.0.1:{}", server.port);
    let cfg = ClientConfig::builder()
        .token(token)
        .host_port(addr.clone())
        .tls_strategy(TlsStrategy::None)
        .build()
        .expect("config");
    let started = std::time::Instant::now();
    let err = version(cfg).await.expect_err("a mismatch");
    let took = started.elapsed();
    let text = err.to_string();
    assert_eq!(err.outcome(), hatchet_runtime::Outcome::Invalid, "{text}");
    assert!(
        text.contains("speaks TLS")
            && text.contains(&addr)
            && text.contains("HATCHET_CLIENT_TLS_STRATEGY=tls"),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}: {text}");
}
