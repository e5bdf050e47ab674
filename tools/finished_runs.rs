//! Benchmark: awaiting runs that have already finished, one by one. A wait on a run that finished
//! before the wait began reads the run once and answers; the real engine would otherwise answer it
//! on its run stream only at its next 1 s tick. The official Python SDK's `result()`
//! (GetRunDetails, polled) and `aio_result()` (its run listener) await the same runs in the same
//! run when `HATCHET_BENCH_PYTHON` names a Python with `hatchet-sdk` installed.
//!
//! ```sh
//! scripts/real-engine.sh start && eval "$(scripts/real-engine.sh env)"
//! HATCHET_BENCH_PYTHON=tests/interop/.venv/bin/python cargo run --release --example finished_runs
//! ```
//!
//! Without `HATCHET_CLIENT_TOKEN` it runs on an embedded development engine.

use std::time::{Duration, Instant};

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::config::ClientConfig;
use hatchet_runtime::{Context, Runtime, TaskError, WorkerOptions, Workflow};
use serde_json::{Value, json};

const RUNS: usize = 100;

fn summary(ms: &mut [f64]) -> String {
    if ms.is_empty() {
        return "not measured".into();
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    let total: f64 = ms.iter().sum();
    format!(
        "p50 {:8.2} ms  p99 {:8.2} ms  total {:9.1} ms",
        pct(0.5),
        pct(0.99),
        total
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (engine, config) = match std::env::var("HATCHET_CLIENT_TOKEN") {
        Ok(_) => (None, ClientConfig::from_env()?),
        Err(_) => {
            let e = DevEngine::start(DevEngineOptions::default()).await?;
            let c = e.client_config();
            (Some(e), c)
        }
    };
    let rt = Runtime::spawn(config.clone()).await?;
    rt.register(
        Workflow::new("fin-echo").task("t", |i: Value, _c: Context| async move {
            Ok::<_, TaskError>(i)
        }),
    )
    .await?;
    rt.start_worker(WorkerOptions::new("finished-runs", 20))
        .await?;
    let inputs: Vec<Value> = (0..RUNS).map(|n| json!({ "n": n })).collect();
    let mut ids = Vec::new();
    for h in rt.run_many("fin-echo", &inputs).await {
        ids.push(h?.run_id().to_string());
    }
    for id in &ids {
        let _: Value = rt
            .run_handle(id)
            .result_within(Duration::from_secs(120))
            .await?;
    }
    // Every run has finished. Now await each again, one by one, as a user holding ids does.
    let mut ours = Vec::new();
    for id in &ids {
        let t0 = Instant::now();
        let _: Value = rt
            .run_handle(id)
            .result_within(Duration::from_secs(30))
            .await?;
        ours.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let (mut sync_ms, mut aio_ms) = (Vec::new(), Vec::new());
    if let Ok(python) = std::env::var("HATCHET_BENCH_PYTHON") {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/python/finished.py");
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        for (k, v) in config.env_lines() {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(ids.join("\n").as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        let line = String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .map(str::to_string)
            .unwrap_or_default();
        if let Ok(v) = serde_json::from_str::<Value>(&line) {
            let list = |k: &str| -> Vec<f64> {
                v[k].as_array()
                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                    .unwrap_or_default()
            };
            sync_ms = list("result_ms");
            aio_ms = list("aio_result_ms");
        }
    }
    let total = |v: &[f64]| v.iter().sum::<f64>();
    let (t_ours, t_sync, t_aio) = (total(&ours), total(&sync_ms), total(&aio_ms));
    println!(
        "awaiting {RUNS} finished runs one by one ({})",
        if engine.is_some() {
            "development engine"
        } else {
            "the engine of HATCHET_CLIENT_*"
        }
    );
    println!(
        "  ours: run_handle(id).result()        {}",
        summary(&mut ours)
    );
    println!(
        "  Python SDK: get_run_ref(id).result()     {}",
        summary(&mut sync_ms)
    );
    println!(
        "  Python SDK: get_run_ref(id).aio_result() {}",
        summary(&mut aio_ms)
    );
    if t_sync > 0.0 && t_aio > 0.0 {
        println!(
            "  ours / Python result(): {:.3}   ours / Python aio_result(): {:.3}",
            t_ours / t_sync,
            t_ours / t_aio
        );
    }
    println!(
        "reproduce: HATCHET_BENCH_PYTHON=tests/interop/.venv/bin/python cargo run --release --example finished_runs (with scripts/real-engine.sh env for the real engine)"
    );
    rt.shutdown(Duration::from_secs(5)).await;
    Ok(())
}
