//! Chaos demo: a worker and a client run steadily while the engine drops connections, ends
//! streams with errors, freezes and restarts; the listeners' health is printed as it changes,
//! and at the end every result is accounted for.
//!
//! `cargo run --example chaos`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions, Fault};
use hatchet_runtime::health::ListenerState;
use hatchet_runtime::{Context, Runtime, TaskError, TriggerOptions, WorkerOptions, Workflow};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Arc::new(DevEngine::start(DevEngineOptions::default()).await?);
    // STARTs lost in the cuts and the restart are offered again (the engine's fault; the real
    // engine lets them run out their timeout), so the demo shows the runtime, not timeouts.
    engine.reoffer_unanswered_assignments(true);
    let rt = Runtime::spawn(engine.client_config()).await?;
    // Triggers are writes: one cut mid-flight may or may not have run. An idempotency key makes
    // them safe to retry, and a repeat resolves to the run that already exists.
    rt.register(
        Workflow::new("work")
            .task("t", |i: Value, _c: Context| async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, TaskError>(i)
            })
            .idempotency("input.i", Duration::from_secs(600)),
    )
    .await?;
    rt.start_worker(WorkerOptions::new("chaos-worker", 16))
        .await?;

    for (kind, mut rx) in rt.health() {
        tokio::spawn(async move {
            loop {
                let s = rx.borrow_and_update().clone();
                let line = match s {
                    ListenerState::Idle => "idle".to_string(),
                    ListenerState::Connecting => "connecting".to_string(),
                    ListenerState::Connected { .. } => "connected".to_string(),
                    ListenerState::Reconnecting {
                        attempts,
                        last_error,
                        ..
                    } => format!("reconnecting (attempt {attempts}: {last_error})"),
                    ListenerState::Stopped { error } => {
                        format!("stopped {}", error.unwrap_or_default())
                    }
                    other => format!("{other:?}"),
                };
                println!("  health {:<15} {line}", kind.as_str());
                if rx.changed().await.is_err() {
                    break;
                }
            }
        });
    }

    let done = Arc::new(AtomicUsize::new(0));
    let mut runs = Vec::new();
    for i in 0..200 {
        let (rt, done) = (rt.clone(), done.clone());
        runs.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i * 20)).await;
            let opts = TriggerOptions::new().idempotent();
            let h = rt.run_no_wait_with("work", &json!({"i": i}), opts).await?;
            let out: Value = h.result_within(Duration::from_secs(90)).await?;
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, hatchet_runtime::Error>(out)
        }));
    }

    let faults = engine.faults().clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("chaos: dropping every connection");
    faults.drop_connections();
    tokio::time::sleep(Duration::from_millis(700)).await;
    println!("chaos: the result stream ends with INTERNAL");
    faults.inject(
        "/Dispatcher/SubscribeToWorkflowRuns",
        1,
        Fault::EndStream {
            after: 3,
            code: Some(13),
        },
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    println!("chaos: restarting the engine");
    engine.restart().await?;

    let mut failed = 0;
    for r in runs {
        match r.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                failed += 1;
                println!("  a run did not complete: {e}");
            }
            Err(e) => {
                failed += 1;
                println!("  a run task died: {e}");
            }
        }
    }
    println!(
        "\n{} results, {failed} failed; reconnects {:?}",
        done.load(Ordering::Relaxed),
        rt.reconnects()
    );
    rt.shutdown(Duration::from_secs(2)).await;
    Ok(())
}
