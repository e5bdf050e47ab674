//! Quickstart: the embedded development engine, a runtime with a worker, a DAG workflow and a
//! durable task, a few hundred concurrent runs, and an engine restart in the middle.
//!
//! Run it with `cargo run --example quickstart`. It prints a summary: runs completed, results
//! lost (must be 0), duplicates counted where they would happen (task executions per order in
//! the handlers, runs per trigger at the engine, results per waiter with a second waiter on every
//! tenth run: all must match), network attempts by method, reconnects by listener.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::durable::Condition;
use hatchet_runtime::run::PushOptions;
use hatchet_runtime::{Context, Runtime, TaskError, TaskOptions, WorkerOptions, Workflow};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const RUNS: usize = 300;
const DURABLE_RUNS: usize = 20;

#[derive(Serialize, Deserialize)]
struct Order {
    id: usize,
    amount: u64,
}

#[derive(Serialize, Deserialize)]
struct Priced {
    total: u64,
}

/// Task executions per (task, order id), counted in the handlers: where a duplicate would run.
type Executions = Arc<Mutex<HashMap<(&'static str, usize), usize>>>;

fn count(executions: &Executions, task: &'static str, order: usize) {
    *executions.lock().entry((task, order)).or_default() += 1;
}

fn order_pipeline(executions: &Executions) -> Workflow {
    let (e1, e2, e3) = (executions.clone(), executions.clone(), executions.clone());
    Workflow::new("order-pipeline")
        .task("validate", move |o: Order, _c: Context| {
            let e = e1.clone();
            async move {
                count(&e, "validate", o.id);
                if o.amount == 0 {
                    return Err(TaskError::non_retryable("empty order"));
                }
                Ok(json!({"ok": true}))
            }
        })
        .task("price", move |o: Order, _c: Context| {
            let e = e2.clone();
            async move {
                count(&e, "price", o.id);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, TaskError>(Priced {
                    total: o.amount * 110 / 100,
                })
            }
        })
        .task_with(
            "receipt",
            TaskOptions::new().parents(["validate", "price"]).retries(2),
            move |o: Order, c: Context| {
                let e = e3.clone();
                async move {
                    count(&e, "receipt", o.id);
                    let priced: Priced = c.parent_output("price")?;
                    Ok::<_, TaskError>(json!({"order": o.id, "total": priced.total}))
                }
            },
        )
}

fn approval() -> Workflow {
    Workflow::new("approval").durable_task(
        "await-approval",
        TaskOptions::new(),
        |o: Order, c: Context| async move {
            c.sleep_for(Duration::from_secs(1)).await?;
            // Scoped, with a lookback: the approval may be pushed while the task still sleeps.
            let decision = c
                .wait_for_event_with(
                    Condition::event("approval")
                        .lookback(format!("order-{}", o.id), Duration::from_secs(600)),
                )
                .await?;
            Ok::<_, TaskError>(json!({"order": o.id, "decision": decision}))
        },
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let started = Instant::now();
    let engine = Arc::new(DevEngine::start(DevEngineOptions::default()).await?);
    // The demo restarts the engine mid-run. A START lost in that cut would, as on the real
    // engine, run out its task's timeout (60 s) before its retry; the development engine's
    // fault offers it again at once, which keeps the demo about what the runtime does.
    engine.reoffer_unanswered_assignments(true);
    println!(
        "development engine: gRPC {}  REST {}",
        engine.grpc_addr(),
        engine.api_url()
    );
    // A window into the engine: runs, their DAGs, workers, events (refreshes itself). The URL
    // carries the dev engine's token in its fragment, which the browser never sends.
    println!("dashboard: {}", engine.dashboard_url());

    let rt = Runtime::spawn(engine.client_config()).await?;
    let executions: Executions = Arc::default();
    rt.register(order_pipeline(&executions)).await?;
    rt.register(approval()).await?;
    rt.start_worker(WorkerOptions::new("quickstart-worker", 64))
        .await?;

    let received: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let total = RUNS + DURABLE_RUNS;

    // Trigger everything concurrently; each run is awaited by its own task.
    let mut waits = Vec::new();
    for id in 0..RUNS {
        let rt = rt.clone();
        let (received, done, failed) = (received.clone(), done.clone(), failed.clone());
        waits.push(tokio::spawn(async move {
            let h = match rt
                .run_no_wait(
                    "order-pipeline",
                    &Order {
                        id,
                        amount: 100 + id as u64,
                    },
                )
                .await
            {
                Ok(h) => h,
                Err(e) => {
                    eprintln!("\ntrigger failed: {e}");
                    failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            // Every tenth run has a second waiter: a result delivered twice, or to the wrong
            // waiter, would show as a count that does not match its waiters.
            let waiters = if id % 10 == 0 { 2 } else { 1 };
            let results = futures::future::join_all(
                (0..waiters).map(|_| h.result_within::<Value>(Duration::from_secs(120))),
            )
            .await;
            let mut ok = true;
            for r in results {
                match r {
                    Ok(out) if out["receipt"]["order"] == id => {
                        *received.lock().entry(h.run_id().to_string()).or_default() += 1;
                    }
                    Ok(out) => {
                        eprintln!("\nrun {id} got another run's result: {out}");
                        ok = false;
                    }
                    Err(e) => {
                        eprintln!("\nrun failed: {e}");
                        ok = false;
                    }
                }
            }
            if ok {
                done.fetch_add(1, Ordering::Relaxed);
            } else {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for id in 0..DURABLE_RUNS {
        let rt = rt.clone();
        let (received, done, failed) = (received.clone(), done.clone(), failed.clone());
        waits.push(tokio::spawn(async move {
            let Ok(h) = rt.run_no_wait("approval", &Order { id, amount: 1 }).await else {
                failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            // Approved at once, while the task sleeps: its wait looks back for the event. A
            // push lost to the engine's restart is sent again until it lands.
            let approval = PushOptions::new().scope(format!("order-{id}"));
            while rt
                .push_with("approval", &json!({"approved": true}), approval.clone())
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let r = h.result_within::<Value>(Duration::from_secs(120)).await;
            match r {
                Ok(_) => {
                    *received.lock().entry(h.run_id().to_string()).or_default() += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    eprintln!("\ndurable run failed: {e}");
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    // Restart the engine in the middle of it all.
    let restarter = {
        let engine = engine.clone();
        let done = done.clone();
        tokio::spawn(async move {
            while done.load(Ordering::Relaxed) < total / 3 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            eprint!(
                "\r{:60}\rrestarting the engine at {} results...\n",
                "",
                done.load(Ordering::Relaxed)
            );
            let _ = engine.restart().await;
        })
    };

    // Progress bar.
    let progress = {
        let (done, failed) = (done.clone(), failed.clone());
        tokio::spawn(async move {
            let mut shown = usize::MAX;
            loop {
                let d = done.load(Ordering::Relaxed);
                let f = failed.load(Ordering::Relaxed);
                if d + f == shown {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                shown = d + f;
                let width = 40;
                let filled = (d + f) * width / total;
                eprint!(
                    "\r[{}{}] {}/{} results",
                    "#".repeat(filled),
                    ".".repeat(width - filled),
                    d + f,
                    total
                );
                let _ = std::io::stderr().flush();
                if d + f >= total {
                    eprintln!();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    for w in waits {
        let _ = w.await;
    }
    let _ = restarter.await;
    let _ = progress.await;

    let received = received.lock().clone();
    let completed = done.load(Ordering::Relaxed);
    let lost = total - received.len();
    // Results per run must equal the run's waiters (1, or 2 for every tenth order run).
    let expected_results = total + RUNS.div_ceil(10);
    let results: usize = received.values().sum();
    let executions = executions.lock().clone();
    let executed_twice = executions.values().filter(|n| **n > 1).count();
    let engine_runs =
        engine.runs_by_workflow("order-pipeline") + engine.runs_by_workflow("approval");
    let duplicates = executed_twice
        + engine_runs.saturating_sub(total)
        + results.saturating_sub(expected_results);

    println!("\nsummary");
    println!("  runs completed      {completed} / {total}");
    println!("  results lost        {lost}");
    println!(
        "  task executions     {} for {} tasks ({RUNS} orders x 3); executed twice: {executed_twice}",
        executions.values().sum::<usize>(),
        RUNS * 3
    );
    println!("  runs at the engine  {engine_runs} for {total} triggers");
    println!("  results delivered   {results} to {expected_results} waiters");
    println!("  duplicates          {duplicates}");
    println!("  failed              {}", failed.load(Ordering::Relaxed));
    println!("  elapsed             {:.2?}", started.elapsed());
    println!("  network attempts by method (attempts / operations):");
    for (method, c) in rt.counters() {
        println!(
            "    {method:<42} {:>6} / {:<6} retries {}",
            c.attempts, c.operations, c.retries
        );
    }
    println!("  reconnects by listener:");
    for (kind, n) in rt.reconnects() {
        println!("    {:<16} {n}", kind.as_str());
    }
    // QUICKSTART_HOLD_SECS=N keeps the engine and the worker up N seconds after the summary, to
    // look at the dashboard (the browser test uses it).
    let hold: u64 = std::env::var("QUICKSTART_HOLD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if hold > 0 {
        println!("holding for {hold} s: {}", engine.dashboard_url());
        let _ = std::io::stdout().flush();
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }
    rt.shutdown(Duration::from_secs(5)).await;
    engine.shutdown().await;
    let failed = failed.load(Ordering::Relaxed);
    if lost > 0 || duplicates > 0 || failed > 0 || executions.len() != RUNS * 3 {
        return Err(format!(
            "{lost} results lost, {duplicates} duplicated, {failed} failed, {} of {} tasks executed",
            executions.len(),
            RUNS * 3
        )
        .into());
    }
    Ok(())
}
