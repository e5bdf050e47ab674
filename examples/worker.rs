//! A worker against any engine configured by the environment (`HATCHET_CLIENT_TOKEN`, ...):
//! registers `rust-echo` (returns its input with a marker) and `rust-dag` (two tasks), then
//! serves until SIGTERM or SIGINT, draining running tasks for up to 10 s (a second signal stops
//! at once).
//!
//! `cargo run --example worker` (with the variables the dev engine binary prints).

use std::time::Duration;

use hatchet_runtime::{Context, RuntimeHandle, TaskError, TaskOptions, WorkerOptions, Workflow};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let rt = RuntimeHandle::from_env().await?;
    rt.register(
        Workflow::new("rust-echo").task("echo", |input: Value, ctx: Context| async move {
            ctx.log("echoing from Rust");
            Ok::<_, TaskError>(json!({"echo": input, "worker": "rust"}))
        }),
    )
    .await?;
    rt.register(
        Workflow::new("rust-dag")
            .task("first", |i: Value, _c: Context| async move {
                Ok::<_, TaskError>(json!({"n": i["n"].as_i64().unwrap_or(0) + 1}))
            })
            .task_with(
                "second",
                TaskOptions::new().parents(["first"]),
                |_i: Value, c: Context| async move {
                    let first: Value = c.parent_output("first")?;
                    Ok::<_, TaskError>(json!({"n": first["n"].as_i64().unwrap_or(0) * 10}))
                },
            ),
    )
    .await?;
    let slots = std::env::var("WORKER_SLOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    rt.start_worker(WorkerOptions::new("rust-worker", slots))
        .await?;
    println!("worker ready (rust-echo, rust-dag), {slots} slots; SIGTERM or Ctrl-C to stop");
    // Under systemd or Kubernetes: SIGTERM drains (up to 10 s), a second signal stops at once.
    let signal = rt.run_until_signal(Duration::from_secs(10)).await?;
    println!("stopped on {signal:?}");
    Ok(())
}
