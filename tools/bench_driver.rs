//! The Rust client side of the end-to-end throughput benchmark (`scripts/bench_python.sh`,
//! `benches/python/bench.py` with `BENCH_CLIENT=rust`): triggers runs of one workflow with our
//! client (`run_many`: one BulkTriggerWorkflow call per 1,000 runs) and waits for every result
//! (one pooled SubscribeToWorkflowRuns stream), so our worker is measured with our client, as
//! the Python SDK's worker is with the Python SDK's client.
//!
//! Protocol on stdio (the Python driver measures CPU around the measured part):
//!   1. runs `BENCH_WARMUP` runs and waits for them, then prints `{"event":"warm"}`;
//!   2. waits for one line on stdin;
//!   3. triggers `BENCH_TASKS` runs, waits for all, prints
//!      `{"event":"done","wall_s":..,"trigger_s":..,"failed":..}` and exits 0 (1 if any run
//!      failed or a trigger was refused).
//!
//! Env: the `HATCHET_CLIENT_*` variables, `BENCH_WORKFLOW` (rust-echo), `BENCH_TASKS` (2000),
//! `BENCH_WARMUP` (20).

use std::io::BufRead as _;
use std::process::ExitCode;
use std::time::Instant;

use hatchet_runtime::RuntimeHandle;
use serde_json::{Value, json};

fn env_num(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// Triggers `n` runs and waits for all; returns (trigger seconds, failed runs).
async fn batch(rt: &RuntimeHandle, workflow: &str, first: usize, n: usize) -> (f64, usize) {
    let t0 = Instant::now();
    let inputs: Vec<Value> = (first..first + n).map(|i| json!({ "i": i })).collect();
    let handles = rt.run_many(workflow, &inputs).await;
    let trigger_s = t0.elapsed().as_secs_f64();
    let mut failed = 0;
    let waits = handles.into_iter().map(|h| async move {
        match h {
            Ok(h) => h.outputs().await.is_err(),
            Err(e) => {
                eprintln!("trigger refused: {e}");
                true
            }
        }
    });
    for bad in futures::future::join_all(waits).await {
        failed += usize::from(bad);
    }
    (trigger_s, failed)
}

#[tokio::main]
async fn main() -> ExitCode {
    let workflow = std::env::var("BENCH_WORKFLOW").unwrap_or_else(|_| "rust-echo".into());
    let (tasks, warmup) = (env_num("BENCH_TASKS", 2000), env_num("BENCH_WARMUP", 20));
    let rt = match RuntimeHandle::from_env().await {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench driver: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (_, warm_failed) = batch(&rt, &workflow, 0, warmup).await;
    println!("{}", json!({"event": "warm", "failed": warm_failed}));
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let t0 = Instant::now();
    let (trigger_s, failed) = batch(&rt, &workflow, warmup, tasks).await;
    let wall_s = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"event": "done", "wall_s": wall_s, "trigger_s": trigger_s, "failed": failed})
    );
    rt.shutdown(std::time::Duration::from_secs(2)).await;
    if failed + warm_failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
