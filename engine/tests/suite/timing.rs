//! The one switch for the real engine's timing (`DevEngineOptions::timing`): on by default, all
//! of it off with `Timing::Instant`.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hatchet_dev_engine::{DevEngine, DevEngineOptions, Timing};
use hatchet_runtime::protocol as proto;

use crate::support::{H, next};

async fn run_status(h: &H, run: &str) -> serde_json::Value {
    let path = format!("/api/v1/stable/workflow-runs/{run}/status");
    crate::parity::rest(h, reqwest::Method::GET, &path, None)
        .await
        .1
}

/// `Timing::Instant` turns off the status lag, the end hop, the run streams' tick for runs
/// that had ended and the timer poll, all at start.
#[tokio::test]
async fn instant_timing_turns_off_all_the_real_engine_s_timing_at_start() {
    let engine = DevEngine::start(DevEngineOptions::default().timing(Timing::Instant))
        .await
        .expect("engine starts");
    let h = H::with_engine(engine).await;
    let (wid, mut actions, run, start) = h.one_started("instant", "1s").await;
    assert_eq!(
        run_status(&h, &run).await,
        "RUNNING",
        "no status lag: REST reads the new run's live state"
    );
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&run)).await;
    h.complete(&wid, &start, "{}").await;
    let d = h.details(&run).await;
    assert!(
        d.done && d.status == proto::v1::RunStatus::Completed as i32,
        "no end hop: GetRunDetails reads the end at once: {d:?}"
    );
    assert_eq!(run_status(&h, &run).await, "COMPLETED");
    assert_eq!(next(&mut ends).await.workflow_run_id, run);
    let asked = Instant::now();
    let (mut late, _keep_late) = h.subscribe(std::slice::from_ref(&run)).await;
    let got = tokio::time::timeout(Duration::from_millis(500), late.next())
        .await
        .expect("no tick: a run that had ended is answered at once")
        .expect("open")
        .expect("ok");
    assert_eq!(got.workflow_run_id, run);
    assert!(asked.elapsed() < Duration::from_millis(500));
    // No timer poll: a 1 s timeout is read when it is due (the clock jumps past it).
    let second = h.trigger("instant", "{}").await;
    let _start = next(&mut actions).await;
    h.engine.advance(Duration::from_millis(1_100));
    assert_eq!(
        run_status(&h, &second).await,
        "FAILED",
        "the timeout read when due"
    );
}

/// By default (`Timing::Real`) the engine keeps the real engine's timing: REST reads a new run
/// late, a task's end reaches the run streams after the end hop, and a subscription of a run
/// that had ended is answered at its stream's next tick. (The timer poll's switch is checked
/// in `lib.rs`'s unit test; its effect in `faults.rs`.)
#[tokio::test]
async fn by_default_the_engine_keeps_the_real_engine_s_timing() {
    let h = H::new().await;
    let (wid, _actions, run, start) = h.one_started("real", "").await;
    assert_eq!(
        run_status(&h, &run).await,
        "QUEUED",
        "the status lag: a new run reaches REST 1 to 2 s after its creation"
    );
    let (mut ends, _keep) = h.subscribe(std::slice::from_ref(&run)).await;
    let sent = Instant::now();
    h.complete(&wid, &start, "{}").await;
    assert_eq!(next(&mut ends).await.workflow_run_id, run);
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(25),
        "the end hop: the end goes out 30 ms after the worker sent it, not at once: {took:?}"
    );
    let (mut late, _keep_late) = h.subscribe(std::slice::from_ref(&run)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), late.next())
            .await
            .is_err(),
        "the tick: a run that had ended is not answered at once"
    );
    assert_eq!(next(&mut late).await.workflow_run_id, run);
}
