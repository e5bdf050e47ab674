//! Quickstart (temporary form until the runtime lands): builds a configuration from a development
//! token, prints the retry ceiling of every unary method, and shows the retry core at work against
//! a port nobody listens on: every attempt is refused at connect, so it is retried (it never left)
//! and ends as `not_sent`.

use std::sync::Arc;
use std::time::Duration;

use hatchet_runtime::config::encode_dev_token;
use hatchet_runtime::proto::{GetVersionRequest, dispatcher_client::DispatcherClient};
use hatchet_runtime::retry::{self, BudgetConfig, Ledger, Policy, RetryCore};
use hatchet_runtime::{ClientConfig, TlsStrategy, transport};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let token = encode_dev_token(
        "707d0855-80ab-4e1f-a156-f1c4546cbf52",
        "http://127.0.0.1:8080",
        &format!("127.0.0.1:{port}"),
        4_000_000_000,
        "quickstart",
    );
    let config = ClientConfig::builder()
        .secret_token(token)
        .tls_strategy(TlsStrategy::None)
        .build()?;
    println!("config: {config:?}\n");

    println!(
        "{:<45} {:<17} {:>8} {:>10}",
        "method", "class", "attempts", "worst case"
    );
    for c in retry::ceiling_table(&Policy::default()) {
        println!(
            "{:<45} {:<17} {:>8} {:>9}s",
            c.method,
            c.class.as_str(),
            c.max_attempts,
            c.worst_case.as_secs()
        );
    }

    let channel = transport::channel(&config)?;
    let auth = transport::AuthInterceptor::new(&config)?;
    let client = DispatcherClient::with_interceptor(channel, auth);
    let ledger = Arc::new(Ledger::default());
    let core = RetryCore::new(
        Policy::default(),
        BudgetConfig::default(),
        ledger.clone(),
        1,
    );
    let path = "/Dispatcher/GetVersion";
    let result =
        retry::grpc::call_unary(&core, path, None, Some(Duration::from_secs(5)), None, |t| {
            let mut c = client.clone();
            async move {
                c.get_version(retry::grpc::request_with_timeout(GetVersionRequest {}, t))
                    .await
                    .map(|r| r.into_inner().version)
            }
        })
        .await;
    match result {
        Ok(v) => println!("\nengine version {v}"),
        Err(e) => println!("\n{e}"),
    }
    println!("counters: {:?}", ledger.snapshot()[path]);
    Ok(())
}
