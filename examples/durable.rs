//! Durable waits on the embedded engine: a task sleeps durably, waits for an approval event,
//! memoizes a timestamp, and finishes when the event arrives. The approval is pushed while the
//! task still sleeps (before its wait exists): the wait's scope and lookback take it anyway. A
//! wait without a lookback takes only events pushed after it is registered, and on the real
//! engine a durable timer can fire tens of seconds late, so this order is the race-free one.
//!
//! `cargo run --example durable`

use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::durable::Condition;
use hatchet_runtime::run::PushOptions;
use hatchet_runtime::{Context, Runtime, TaskError, TaskOptions, WorkerOptions, Workflow};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = DevEngine::start(DevEngineOptions::default()).await?;
    let rt = Runtime::spawn(engine.client_config()).await?;
    rt.register(Workflow::new("expense").durable_task(
        "approve",
        TaskOptions::new(),
        |input: Value, ctx: Context| async move {
            let started: u64 = ctx
                .memo("started-at", || async {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0)
                })
                .await?;
            println!("  [task] waiting 2 s before asking for approval (a durable timer)");
            ctx.sleep_for(Duration::from_secs(2)).await?;
            println!("  [task] waiting for the event expense:approved (looking back 10 minutes)");
            let scope = format!("expense-{}", input["id"]);
            let decision = ctx
                .wait_for_event_with(
                    Condition::event("expense:approved").lookback(scope, Duration::from_secs(600)),
                )
                .await?;
            Ok::<_, TaskError>(
                json!({"expense": input, "decision": decision, "started_at": started}),
            )
        },
    ))
    .await?;
    rt.start_worker(WorkerOptions::new("durable-demo", 4))
        .await?;
    let run = rt
        .run_no_wait("expense", &json!({"id": 7, "amount": 42}))
        .await?;
    println!("triggered run {}", run.run_id());
    println!("approving at once, while the task still sleeps");
    rt.push_with(
        "expense:approved",
        &json!({"by": "finance"}),
        PushOptions::new().scope("expense-7"),
    )
    .await?;
    let out: Value = run.result_within(Duration::from_secs(30)).await?;
    println!("result: {out}");
    rt.shutdown(Duration::from_secs(2)).await;
    Ok(())
}
