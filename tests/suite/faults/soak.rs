//! Soak: steady load with periodic engine restarts; tokio task counts and what the runtime holds
//! per run (result waiters, running attempts) sampled and shown flat in every run, so a leak of
//! either fails `cargo test`; resident memory too when the test runs alone. `SOAK_SECS` sets
//! the length (12 s by default, the CI version); `scripts/soak.sh` runs it alone for 10
//! minutes, where resident memory is meaningful and is asserted too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use hatchet_runtime::{Context, Outcome, TaskError, WorkerOptions, Workflow};
use parking_lot::Mutex;
use serde_json::{Value, json};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map(|p| p * 4)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_periodic_restarts_keeps_tasks_waiters_and_memory_flat() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let alone = std::env::var("SOAK_ALONE").is_ok();
    let engine = Arc::new(crate::support::engine().await);
    // The soak measures the runtime under load and restarts, not the engine's status lag
    // (which holds each result up to 1 s, as the real engine's lag does): ends go out at once.
    engine.status_lag(None);
    let rt = crate::support::runtime(&engine).await;
    // Executions per input, counted in the handler: where a duplicate would happen.
    let executions: Arc<Mutex<HashMap<(u64, u64), u32>>> = Arc::default();
    let counted = executions.clone();
    rt.register(
        Workflow::new("soak").task("t", move |i: Value, _c: Context| {
            let counted = counted.clone();
            async move {
                let key = (
                    i["c"].as_u64().unwrap_or(u64::MAX),
                    i["i"].as_u64().unwrap_or(u64::MAX),
                );
                *counted.lock().entry(key).or_default() += 1;
                Ok::<_, TaskError>(i)
            }
        }),
    )
    .await
    .expect("register");
    rt.start_worker(WorkerOptions::new("soak", 32))
        .await
        .expect("start");

    let metrics = tokio::runtime::Handle::current().metrics();
    let _: Value = rt
        .run("soak", &json!({"c": 99, "i": 0}))
        .await
        .expect("a first run");
    let before_load = metrics.num_alive_tasks();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let lost_results = Arc::new(AtomicU64::new(0));
    let cut_triggers = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for c in 0..16u64 {
        let (rt, stop, done) = (rt.clone(), stop.clone(), done.clone());
        let (lost_results, cut_triggers) = (lost_results.clone(), cut_triggers.clone());
        load.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                match rt.run_no_wait("soak", &json!({"c": c, "i": i})).await {
                    Ok(h) => match h.result_within::<Value>(Duration::from_secs(60)).await {
                        Ok(out) if out == json!({"c": c, "i": i}) => {
                            done.fetch_add(1, Ordering::Relaxed)
                        }
                        // A wait never fails through restarts, and a result is its own run's.
                        _ => lost_results.fetch_add(1, Ordering::Relaxed),
                    },
                    // A trigger cut by a restart is reported, never silently retried.
                    Err(e) => {
                        assert_eq!(e.outcome(), Outcome::MaybeExecuted, "{e}");
                        cut_triggers.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    let start = Instant::now();
    let mut samples = Vec::new(); // (elapsed s, tasks, rss KiB, results)
    let mut held = Vec::new(); // (result waiters, running attempts)
    let mut next_restart = Duration::from_secs(4);
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if start.elapsed() >= next_restart {
            // STARTs lost in a restart are offered again (the fault; the real engine lets
            // them run out their timeout): the soak measures the runtime, not the timeouts.
            engine.reoffer_unanswered_assignments(true);
            engine.restart().await.expect("restart");
            next_restart += Duration::from_secs(4);
        }
        samples.push((
            start.elapsed().as_secs(),
            metrics.num_alive_tasks(),
            rss_kib(),
            done.load(Ordering::Relaxed),
        ));
        held.push((rt.pending_runs(), rt.task_counts().running));
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("load task");
    }
    println!("soak samples (s, tokio tasks, RSS KiB, results): {samples:?}");
    let results = done.load(Ordering::Relaxed);
    assert!(
        results > secs * 20,
        "the load made progress: {results} results in {secs} s"
    );
    assert_eq!(
        lost_results.load(Ordering::Relaxed),
        0,
        "every accepted run's result arrived"
    );
    // Only the triggers in flight when the engine restarted may be cut: 16 callers per restart.
    let restarts = (secs.saturating_sub(1) / 4).max(1);
    let cut = cut_triggers.load(Ordering::Relaxed);
    assert!(
        cut <= 16 * restarts,
        "{cut} triggers cut by {restarts} restarts"
    );
    let twice: Vec<_> = executions
        .lock()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, n)| (*k, *n))
        .collect();
    assert!(
        twice.is_empty(),
        "inputs executed more than once: {twice:?}"
    );
    // Tasks: a leak raises the floor, where a restart only spikes a sample (the engine's own
    // connections and the reconnects run in this process): the later half's floor stays within
    // the earlier half's, and once the load has stopped the count goes back to what it was
    // before the load (checked below).
    let half = samples.len() / 2;
    let early = samples[..half].iter().map(|s| s.1).min().unwrap_or(0);
    let late = samples[half..].iter().map(|s| s.1).min().unwrap_or(0);
    assert!(
        late <= early + 16,
        "tokio tasks grew: early floor {early}, late floor {late}: {samples:?}"
    );
    // What the runtime holds per run stays bounded by the load, however many runs went by: at
    // most one waiter per caller and one attempt per slot (a waiter or an attempt kept after
    // its run would grow these with every run), and nothing once the load has stopped.
    println!("soak held (result waiters, running attempts): {held:?}");
    assert!(
        held.iter()
            .all(|&(waiters, running)| waiters <= 16 && running <= 32),
        "the runtime held more than the load: {held:?}"
    );
    assert_eq!(rt.pending_runs(), 0, "no waiter left after the load");
    crate::support::until("no attempt left running after the load", || {
        rt.task_counts().running == 0
    })
    .await;
    // Nothing the load or the restarts started outlives them.
    let mut settled = metrics.num_alive_tasks();
    for _ in 0..100 {
        if settled <= before_load + 16 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        settled = metrics.num_alive_tasks();
    }
    assert!(
        settled <= before_load + 16,
        "tokio tasks after the load: {settled}, before it: {before_load}"
    );
    if alone {
        let first = samples[half.min(samples.len() - 1)].2;
        let last = samples.last().map(|s| s.2).unwrap_or(0);
        // The engine keeps every run (it is in memory): allow ~2 KiB per run it stored.
        let allowance = 2 * results + 32 * 1024;
        assert!(
            last <= first + allowance,
            "RSS grew from {first} KiB to {last} KiB over {results} runs"
        );
    }
    rt.shutdown(Duration::from_secs(2)).await;
}
