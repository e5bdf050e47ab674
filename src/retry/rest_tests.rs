//! The REST retry path against a scripted HTTP server on loopback: what is retried, what is
//! sent once, what reaches the server.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Outcome;
use crate::retry::{BudgetConfig, Ledger, Policy, RetryCore};

/// What the scripted HTTP server does with one request.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// Reads the request, then resets the connection without answering.
    Reset,
    /// Answers with this status and a short body.
    Status(u16),
}

/// A raw HTTP/1.1 server on loopback that answers requests in script order (then 200) and
/// records each request's head.
struct ScriptedHttp {
    addr: std::net::SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl ScriptedHttp {
    async fn start(script: Vec<Reply>) -> ScriptedHttp {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let _ = sock.set_nodelay(true);
                let (seen, script) = (seen.clone(), script.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        // One request head (these requests carry no body we need).
                        let mut chunk = [0u8; 4096];
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let end = buf
                            .windows(4)
                            .position(|w| w == b"\r\n\r\n")
                            .map_or(buf.len(), |p| p + 4);
                        let head: Vec<u8> = buf.drain(..end).collect();
                        seen.lock()
                            .push(String::from_utf8_lossy(&head).into_owned());
                        let reply = script.lock().pop_front().unwrap_or(Reply::Status(200));
                        match reply {
                            Reply::Reset => {
                                let _ = sock.set_zero_linger();
                                return; // dropped with linger 0: an RST, no answer
                            }
                            Reply::Status(code) => {
                                let body = if code == 200 { "[]" } else { "busy" };
                                let resp = format!(
                                    "HTTP/1.1 {code} X\r\ncontent-length: {}\r\ncontent-type: application/json\r\n\r\n{body}",
                                    body.len()
                                );
                                if sock.write_all(resp.as_bytes()).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        ScriptedHttp { addr, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().clone()
    }
}

fn rest_core() -> RetryCore {
    RetryCore::new(
        Policy::default(),
        BudgetConfig::default(),
        Arc::new(Ledger::default()),
        9,
    )
}

async fn call(
    core: &RetryCore,
    server: &ScriptedHttp,
    method: reqwest::Method,
) -> Result<super::RestResponse, crate::error::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let url = format!("http://{}/api/v1/things?limit=5&offset=10", server.addr);
    super::send(core, "things", method.clone(), None, None, |_| {
        client
            .request(method.clone(), &url)
            .header("authorization", "Bearer scripted")
    })
    .await
}

#[tokio::test]
async fn a_get_is_retried_after_connection_resets_and_504s_with_its_path_query_and_auth() {
    let core = rest_core();
    let server = ScriptedHttp::start(vec![Reply::Reset, Reply::Reset]).await;
    let resp = call(&core, &server, reqwest::Method::GET)
        .await
        .expect("the third attempt is answered");
    assert_eq!(resp.status, 200);
    let heads = server.heads();
    assert_eq!(heads.len(), 3, "two resets, then the answer: {heads:?}");
    for h in &heads {
        assert!(
            h.starts_with("GET /api/v1/things?limit=5&offset=10 HTTP/1.1"),
            "{h}"
        );
        assert!(
            h.to_ascii_lowercase()
                .contains("authorization: bearer scripted"),
            "{h}"
        );
    }

    let server = ScriptedHttp::start(vec![Reply::Status(504), Reply::Status(502)]).await;
    let resp = call(&core, &server, reqwest::Method::GET)
        .await
        .expect("answered");
    assert_eq!((resp.status, server.heads().len()), (200, 3));
}

#[tokio::test]
async fn a_delete_or_post_whose_connection_resets_is_sent_once_and_reported_maybe_executed() {
    let core = rest_core();
    for method in [reqwest::Method::DELETE, reqwest::Method::POST] {
        let server = ScriptedHttp::start(vec![Reply::Reset]).await;
        let err = call(&core, &server, method.clone())
            .await
            .expect_err("the reset is the answer");
        assert_eq!(err.outcome(), Outcome::MaybeExecuted, "{method}: {err}");
        assert_eq!(server.heads().len(), 1, "{method}: sent once");

        let server = ScriptedHttp::start(vec![Reply::Status(503)]).await;
        let resp = call(&core, &server, method.clone())
            .await
            .expect("the 503 is handed back");
        assert_eq!(
            (resp.status, server.heads().len()),
            (503, 1),
            "{method}: a write's 503 is not retried"
        );
    }
}

#[tokio::test]
async fn a_rest_call_cancelled_before_it_starts_makes_no_request() {
    let core = rest_core();
    let server = ScriptedHttp::start(vec![]).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel.cancel();
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/v1/things", server.addr);
    let err = super::send(
        &core,
        "things",
        reqwest::Method::GET,
        None,
        Some(&cancel),
        |_| client.get(&url),
    )
    .await
    .expect_err("cancelled");
    assert_eq!(err.outcome(), Outcome::Cancelled);
    assert!(server.heads().is_empty(), "nothing reached the server");
}
