//! Side-by-side benchmarks: each compares our path with a baseline in the same run and prints
//! ratios (machines are noisy; absolute numbers are context only).
//!
//! `cargo bench --bench side_by_side` runs them all; name some to run a subset:
//! `cargo bench --bench side_by_side -- unary outage`. Environment knobs (for quick runs):
//! `BENCH_SECS` (seconds per unary measurement, 2), `BENCH_FANIN` (runs, 1000000),
//! `BENCH_RECONNECT` (waiters, 10000), `BENCH_OUTAGE_SECS` (20), `BENCH_IDLE_SECS` (60),
//! `BENCH_LATENCY_RUNS` (1000; 300 on the real engine), `BENCH_COLD_STARTS` (20).
//! `BENCH_ENGINE=real` runs benchmark 7 on the real engine the `HATCHET_CLIENT_*` variables name
//! (`scripts/bench_real.sh`); the other benchmarks need the development engine's faults and
//! counters and ignore it.
//! Baselines, each measured in the same run: raw tonic (1, 2, 7: the protocol floor on the
//! generated stubs), the official Python SDK (3, 5, 7; with `HATCHET_BENCH_PYTHON`), the Go
//! SDK's documented retry policy (4), our example worker as a process (5; with
//! `HATCHET_RUST_WORKER_BIN`). Benchmark 8 (cold start) has a target, not a baseline.
//! `scripts/bench.sh` sets both variables and adds benchmark 6 (end-to-end throughput against
//! the Python SDK's worker and client).
//! Under `cargo test --all-targets` (no `--bench` argument) every benchmark runs once at a tiny
//! size instead: a smoke test, not a measurement.
//! Writes `target/bench-report/report.md` and `target/bench-report/outage.svg`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hatchet_dev_engine::{DevEngine, DevEngineOptions, Fault};
use hatchet_runtime::protocol::{self as proto, v1};
use hatchet_runtime::{
    Context, Runtime, RuntimeHandle, RuntimeOptions, TaskError, WorkerOptions, Workflow,
};
use serde_json::Value;

#[path = "side_by_side/go_sdk_policy.rs"]
mod go_sdk_policy;
#[path = "side_by_side/latency.rs"]
mod latency;
#[path = "side_by_side/sdk_baselines.rs"]
mod sdk_baselines;

fn env_num(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map(|pages| pages * 4)
        .unwrap_or(0)
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

struct Report {
    md: String,
}

impl Report {
    fn line(&mut self, s: &str) {
        println!("{s}");
        let _ = writeln!(self.md, "{s}");
    }
}

/// A raw tonic client of the generated stubs (the development engine's plain channel with the
/// token on every call): the baseline our paths are measured against.
type Raw = proto::dispatcher_client::DispatcherClient<hatchet_dev_engine::clients::AuthChannel>;

fn raw_dispatcher(engine: &DevEngine) -> Raw {
    engine.raw_clients().expect("raw clients").dispatcher()
}

async fn measure<F, Fut>(callers: usize, secs: u64, call: F) -> (Vec<Duration>, f64)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (stop, call) = (stop.clone(), call.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if call().await {
                    lat.push(t.elapsed());
                }
            }
            lat
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    let thr = all.len() as f64 / secs as f64;
    (all, thr)
}

/// Latencies of two paths measured in the same callers at the same moments: each of `callers`
/// tasks alternates one call of `a` and one of `b` (swapping which goes first every round), so
/// drift in the machine or the engine lands on both sides alike. Counts are equal by design:
/// throughput comes from [`measure`].
async fn measure_interleaved<A, AF, B, BF>(
    callers: usize,
    secs: u64,
    a: A,
    b: B,
) -> (Vec<Duration>, Vec<Duration>)
where
    A: Fn() -> AF + Clone + Send + 'static,
    AF: std::future::Future<Output = bool> + Send,
    B: Fn() -> BF + Clone + Send + 'static,
    BF: std::future::Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (stop, a, b) = (stop.clone(), a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            let (mut la, mut lb) = (Vec::new(), Vec::new());
            let mut a_first = true;
            while !stop.load(Ordering::Relaxed) {
                for side in [a_first, !a_first] {
                    let t = Instant::now();
                    let ok = if side { a().await } else { b().await };
                    if ok {
                        if side {
                            la.push(t.elapsed())
                        } else {
                            lb.push(t.elapsed())
                        }
                    }
                }
                a_first = !a_first;
            }
            (la, lb)
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for t in tasks {
        let (x, y) = t.await.unwrap_or_default();
        la.extend(x);
        lb.extend(y);
    }
    (la, lb)
}

async fn unary(r: &mut Report, smoke: bool) {
    let secs = env_num("BENCH_SECS", if smoke { 1 } else { 2 });
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let raw = raw_dispatcher(&engine);
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("runtime");
    let raw_size = std::mem::size_of_val(&raw.clone().get_version(proto::GetVersionRequest {}));
    let our_size = std::mem::size_of_val(&rt.engine_version());
    r.line("\n## 1. Unary overhead: GetVersion, runtime path (retry core + ledger + span) vs raw tonic (p50s from calls interleaved in the same callers; throughput from separate alternating rounds)\n");
    r.line(
        "| callers | raw p50 | ours p50 | p50 ratio | raw req/s | ours req/s | throughput ratio |",
    );
    r.line("|---|---|---|---|---|---|---|");
    for callers in [1usize, 16, 64] {
        // Warm both paths, then alternate raw/ours twice to spread drift over both.
        let mut raw_lat = Vec::new();
        let mut our_lat = Vec::new();
        let (mut raw_thr, mut our_thr) = (0.0, 0.0);
        for round in 0..3 {
            let c = raw.clone();
            let (l, t) = measure(callers, secs, move || {
                let mut c = c.clone();
                async move { c.get_version(proto::GetVersionRequest {}).await.is_ok() }
            })
            .await;
            let rt2 = rt.clone();
            let (l2, t2) = measure(callers, secs, move || {
                let rt = rt2.clone();
                async move { rt.engine_version().await.is_ok() }
            })
            .await;
            if round > 0 {
                raw_thr += t / 2.0;
                our_thr += t2 / 2.0;
            }
            let _ = (l, l2);
        }
        // The p50s come from calls interleaved in the same callers (the separate rounds above
        // moved by more than 10 % between runs of the same code on this machine).
        {
            let (c, rt2) = (raw.clone(), rt.clone());
            let (l, l2) = measure_interleaved(
                callers,
                2 * secs,
                move || {
                    let mut c = c.clone();
                    async move { c.get_version(proto::GetVersionRequest {}).await.is_ok() }
                },
                move || {
                    let rt = rt2.clone();
                    async move { rt.engine_version().await.is_ok() }
                },
            )
            .await;
            raw_lat.extend(l);
            our_lat.extend(l2);
        }
        let (rp, op) = (pct(raw_lat, 0.5), pct(our_lat, 0.5));
        r.line(&format!(
            "| {callers} | {:.0} µs | {:.0} µs | **{:.2}** | {:.0} | {:.0} | **{:.2}** |",
            rp.as_secs_f64() * 1e6,
            op.as_secs_f64() * 1e6,
            op.as_secs_f64() / rp.as_secs_f64().max(1e-9),
            raw_thr,
            our_thr,
            our_thr / raw_thr.max(1e-9)
        ));
    }
    r.line(&format!(
        "\nTargets: p50 ratio <= 1.02 and throughput ratio >= 0.95 at every caller count. \
         Future of one call: raw {raw_size} B, ours {our_size} B (the tonic call is boxed once \
         instead of being carried by value through every layer of the retry core)."
    ));
    rt.shutdown(Duration::from_secs(1)).await;
}

fn noop() -> Workflow {
    Workflow::new("noop").task("t", |_i: Value, _c: Context| async move {
        Ok::<_, TaskError>(Value::Null)
    })
}

async fn bulk_trigger(engine: &DevEngine, n: usize) -> Vec<String> {
    let mut wf = engine.raw_clients().expect("raw clients").workflows();
    let mut ids = Vec::with_capacity(n);
    while ids.len() < n {
        let k = (n - ids.len()).min(1000);
        let req = proto::BulkTriggerWorkflowRequest {
            workflows: (0..k)
                .map(|_| v1::TriggerWorkflowRequest {
                    name: "noop".into(),
                    input: "{}".into(),
                    ..Default::default()
                })
                .collect(),
        };
        ids.extend(
            wf.bulk_trigger_workflow(req)
                .await
                .expect("bulk trigger")
                .into_inner()
                .workflow_run_ids,
        );
    }
    ids
}

/// One side of the fan-in: results delivered, their rate, and resident-set bytes per pending
/// subscription or waiter.
struct FaninSide {
    delivered: usize,
    /// Results per second from the engine's completing the runs to the last result.
    rate: f64,
    /// Results per second from the engine's sending them (its completions done) to the last.
    delivery: f64,
    bytes_each: f64,
}

impl FaninSide {
    /// `delivered` results, counted from `t` (the engine's completions started) and `sent`
    /// (they returned) to now.
    fn measured(delivered: usize, t: Instant, sent: Instant, bytes_each: f64) -> Self {
        FaninSide {
            delivered,
            rate: delivered as f64 / t.elapsed().as_secs_f64(),
            delivery: delivered as f64 / sent.elapsed().as_secs_f64(),
            bytes_each,
        }
    }
}

/// A fan-in side's engine, runtime and `n` queued runs of `noop`.
async fn fanin_setup(n: usize) -> (DevEngine, hatchet_runtime::RuntimeHandle, Vec<String>) {
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("runtime");
    rt.register(noop()).await.expect("register");
    let ids = bulk_trigger(&engine, n).await;
    (engine, rt, ids)
}

/// One raw SubscribeToWorkflowRuns stream with every id of `ids` sent on it (the sender keeps
/// the stream's request side open).
async fn raw_subscription(
    raw: &mut Raw,
    ids: &[String],
) -> (
    tokio::sync::mpsc::UnboundedSender<proto::SubscribeToWorkflowRunsRequest>,
    tonic::Streaming<proto::WorkflowRunEvent>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for id in ids {
        let _ = tx.send(proto::SubscribeToWorkflowRunsRequest {
            workflow_run_id: id.clone(),
        });
    }
    let stream = raw
        .subscribe_to_workflow_runs(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await
        .expect("sub")
        .into_inner();
    (tx, stream)
}

/// The raw consumer: one SubscribeToWorkflowRuns stream, every run id sent on it, messages counted.
async fn fanin_raw(n: usize) -> FaninSide {
    let (engine, rt, ids) = fanin_setup(n).await;
    let mut raw = raw_dispatcher(&engine);
    // The raw consumer's resident-set growth while its subscriptions are registered: what the
    // in-process engine (and the requests) hold per subscription, subtracted from ours.
    let before = rss_kib();
    let (tx, mut stream) = raw_subscription(&mut raw, &ids).await;
    while engine.pending_run_subscriptions() < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let bytes_each = (rss_kib().saturating_sub(before)) as f64 * 1024.0 / n as f64;
    let t = Instant::now();
    engine.complete_queued("noop");
    let sent = Instant::now();
    let mut got = 0;
    while got < n {
        match stream.next().await {
            Some(Ok(_)) => got += 1,
            _ => break,
        }
    }
    let side = FaninSide::measured(got, t, sent, bytes_each);
    drop(tx);
    rt.shutdown(Duration::from_secs(1)).await;
    side
}

/// The hand-routed raw consumer, what a user writes with tonic alone: the same stream, a reader
/// task routing each event by run id to its waiter's oneshot (a mutex-guarded `HashMap`), the
/// waiters as futures on one task, as ours are.
async fn fanin_routed(n: usize) -> FaninSide {
    use std::collections::HashMap;
    use tokio::sync::oneshot;
    type Routes = parking_lot::Mutex<HashMap<String, oneshot::Sender<proto::WorkflowRunEvent>>>;
    let (engine, rt, ids) = fanin_setup(n).await;
    let mut raw = raw_dispatcher(&engine);
    let before = rss_kib();
    let routes: Arc<Routes> = Arc::default();
    let mut waits = futures::stream::FuturesUnordered::new();
    {
        let mut r = routes.lock();
        for id in &ids {
            let (tx, rx) = oneshot::channel();
            r.insert(id.clone(), tx);
            waits.push(rx);
        }
    }
    let (tx, mut stream) = raw_subscription(&mut raw, &ids).await;
    while engine.pending_run_subscriptions() < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let bytes_each = (rss_kib().saturating_sub(before)) as f64 * 1024.0 / n as f64;
    let reader = tokio::spawn({
        let routes = routes.clone();
        async move {
            while let Some(Ok(ev)) = stream.next().await {
                let waiter = routes.lock().remove(&ev.workflow_run_id);
                if let Some(w) = waiter {
                    let _ = w.send(ev);
                }
            }
        }
    });
    let t = Instant::now();
    engine.complete_queued("noop");
    let sent = Instant::now();
    let mut got = 0;
    while let Some(r) = waits.next().await {
        got += usize::from(r.is_ok());
    }
    let side = FaninSide::measured(got, t, sent, bytes_each);
    reader.abort();
    drop(tx);
    rt.shutdown(Duration::from_secs(1)).await;
    side
}

/// Ours: n waiters through one handle, as futures on one task (no task per waiter).
async fn fanin_ours(n: usize) -> FaninSide {
    let (engine, rt, ids) = fanin_setup(n).await;
    let before = rss_kib();
    let handles: Vec<_> = ids.into_iter().map(|id| rt.run_handle(id)).collect();
    let mut waits: futures::stream::FuturesUnordered<_> =
        handles.iter().map(|h| h.outputs()).collect();
    // Poll every waiter once (registering it), then wait for the engine to hold them all.
    let mut ours = 0usize;
    loop {
        tokio::select! {
            biased;
            Some(r) = waits.next() => ours += usize::from(r.is_ok()),
            _ = tokio::time::sleep(Duration::from_millis(5)) => {
                if engine.pending_run_subscriptions() >= n {
                    break;
                }
            }
        }
    }
    let bytes_each = (rss_kib().saturating_sub(before)) as f64 * 1024.0 / n as f64;
    let t = Instant::now();
    engine.complete_queued("noop");
    let sent = Instant::now();
    while let Some(r) = waits.next().await {
        ours += usize::from(r.is_ok());
    }
    let side = FaninSide::measured(ours, t, sent, bytes_each);
    rt.shutdown(Duration::from_secs(1)).await;
    side
}

/// The environment variable that makes this binary run one fan-in side and print it.
const FANIN_SIDE: &str = "BENCH_FANIN_SIDE";

/// Runs one side of the fan-in in a child process of this binary and reads its answer.
fn fanin_side_in_child(side: &str, n: usize) -> FaninSide {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let out = std::process::Command::new(exe)
        .arg("--bench")
        .env(FANIN_SIDE, side)
        .env("BENCH_FANIN", n.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the fan-in child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("FANIN_SIDE "))
        .unwrap_or_else(|| panic!("the {side} fan-in child printed no answer: {text}"));
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|v| v.parse().expect("a number"))
        .collect();
    FaninSide {
        delivered: f[0] as usize,
        rate: f[1],
        delivery: f[2],
        bytes_each: f[3],
    }
}

/// In a fan-in child: runs the side it was asked for and prints it for the parent.
async fn fanin_child(side: &str) {
    let n = env_num("BENCH_FANIN", 1_000_000) as usize;
    let s = match side {
        "raw" => fanin_raw(n).await,
        "routed" => fanin_routed(n).await,
        _ => fanin_ours(n).await,
    };
    println!(
        "FANIN_SIDE {} {} {} {}",
        s.delivered, s.rate, s.delivery, s.bytes_each
    );
}

async fn fanin(r: &mut Report, smoke: bool) {
    let n = env_num("BENCH_FANIN", if smoke { 100 } else { 1_000_000 }) as usize;
    r.line(&format!("\n## 2. Result fan-in: {n} runs awaited through one handle vs a raw SubscribeToWorkflowRuns consumer\n"));
    // Each side runs in a fresh process of this binary: neither inherits the other's heap (a
    // second side in the same process ran on the first one's freed, fragmented memory, and its
    // resident-set delta reused that memory instead of measuring its own).
    // Two alternating rounds; each side's better round counts (one side's rate varies by up to
    // a third between fresh processes here, with the machine's other load).
    let rounds = if smoke { 1 } else { 2 };
    let (mut raws, mut routeds, mut ourss) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        if smoke {
            raws.push(fanin_raw(n).await);
            routeds.push(fanin_routed(n).await);
            ourss.push(fanin_ours(n).await);
        } else {
            raws.push(fanin_side_in_child("raw", n));
            routeds.push(fanin_side_in_child("routed", n));
            ourss.push(fanin_side_in_child("ours", n));
        }
    }
    let rates = |v: &[FaninSide], f: fn(&FaninSide) -> f64| {
        v.iter()
            .map(|s| format!("{:.0}", f(s)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    r.line("| path | delivered | results/s, engine's completions included (each round) | results/s, delivery alone (each round) |");
    r.line("|---|---|---|---|");
    r.line(&format!(
        "| raw stream | {} | {} | {} |",
        raws[0].delivered,
        rates(&raws, |s| s.rate),
        rates(&raws, |s| s.delivery)
    ));
    r.line(&format!(
        "| raw stream routed by hand (a reader task, a `HashMap` of oneshots, the waiters on one task) | {} | {} | {} |",
        routeds[0].delivered,
        rates(&routeds, |s| s.rate),
        rates(&routeds, |s| s.delivery)
    ));
    r.line(&format!(
        "| runtime (one `RunHandle::outputs` future each, all on one task) | {} | {} | {} |",
        ourss[0].delivered,
        rates(&ourss, |s| s.rate),
        rates(&ourss, |s| s.delivery)
    ));
    let best = |v: Vec<FaninSide>| {
        v.into_iter()
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
            .expect("one round at least")
    };
    let (raw, routed, ours) = (best(raws), best(routeds), best(ourss));
    r.line(&format!(
        "\nDelivery-rate ratio, best round of each side, **{:.2}** (target >= 0.95; each side runs in a fresh process); \
         delivery alone (from the engine's completions returning to the last result) **{:.2}**. Memory per pending waiter: **{:.0} B** \
         beyond the raw consumer's {:.0} B per subscription (ours {:.0} B in all; \
         target <= 256 B; resident-set deltas / waiters, the engine in-process on both sides).",
        ours.rate / raw.rate.max(1e-9),
        ours.delivery / raw.delivery.max(1e-9),
        (ours.bytes_each - raw.bytes_each).max(0.0),
        raw.bytes_each,
        ours.bytes_each,
    ));
    r.line(&format!(
        "\nAgainst the raw stream routed by hand (what a tonic user writes to give each waiter its \
         result): **{:.2}** end to end, **{:.2}** delivery alone; its memory per waiter {:.0} B \
         beyond the raw consumer's, ours {:.0} B.",
        ours.rate / routed.rate.max(1e-9),
        ours.delivery / routed.delivery.max(1e-9),
        (routed.bytes_each - raw.bytes_each).max(0.0),
        (ours.bytes_each - raw.bytes_each).max(0.0),
    ));
}

async fn reconnect(r: &mut Report, smoke: bool) {
    let n = env_num("BENCH_RECONNECT", if smoke { 50 } else { 10_000 }) as usize;
    r.line(&format!(
        "\n## 3. Reconnect: {n} pending waiters, engine restarted\n"
    ));
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("runtime");
    rt.register(noop()).await.expect("register");
    let ids = bulk_trigger(&engine, n).await;
    let results: Arc<parking_lot::Mutex<std::collections::HashMap<String, u32>>> = Arc::default();
    let mut waits = Vec::new();
    for id in ids {
        let h = rt.run_handle(id.clone());
        let res = results.clone();
        waits.push(tokio::spawn(async move {
            if h.outputs().await.is_ok() {
                *res.lock().entry(id).or_default() += 1;
            }
        }));
    }
    while engine.pending_run_subscriptions() < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engine.shutdown().await;
    // Wait until the listener has noticed the outage, then bring the engine back.
    let mut health = rt.health()[&hatchet_runtime::health::ListenerKind::WorkflowRuns].clone();
    while matches!(
        *health.borrow_and_update(),
        hatchet_runtime::health::ListenerState::Connected { .. }
    ) {
        let _ = health.changed().await;
    }
    let back = Instant::now();
    let published = tokio::spawn(async move {
        loop {
            if matches!(
                *health.borrow_and_update(),
                hatchet_runtime::health::ListenerState::Connected { .. }
            ) {
                return Instant::now();
            }
            if health.changed().await.is_err() {
                return Instant::now();
            }
        }
    });
    engine.start_again().await.expect("start again");
    // Time to every subscription replayed on the new stream.
    while engine.pending_run_subscriptions() < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let replayed = back.elapsed();
    let connected_after = published
        .await
        .map(|t| t.saturating_duration_since(back))
        .unwrap_or_default();
    engine.complete_queued("noop");
    let completed = Instant::now();
    for w in waits {
        let _ = w.await;
    }
    let delivery = completed.elapsed();
    let (lost, dup) = {
        let res = results.lock();
        (n - res.len(), res.values().filter(|c| **c > 1).count())
    };
    rt.shutdown(Duration::from_secs(1)).await;
    r.line("| client | engine back -> stream published (backoff) | engine back -> all subscriptions replayed | runs completed -> every result delivered | lost | duplicated |");
    r.line("|---|---|---|---|---|---|");
    r.line(&format!(
        "| ours | {:.0} ms | **{:.0} ms** | **{:.0} ms** | {lost} | {dup} |",
        connected_after.as_secs_f64() * 1e3,
        replayed.as_secs_f64() * 1e3,
        delivery.as_secs_f64() * 1e3,
    ));
    // Baseline: the official Python SDK awaiting the same number of runs across a restart.
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("runtime");
    rt.register(noop()).await.expect("register");
    let ids = bulk_trigger(&engine, n).await;
    match sdk_baselines::reconnect(&engine, &ids).await {
        Some((replay, deliver, delivered, errors)) => r.line(&format!(
            "| official Python SDK | - | **{:.0} ms** | **{:.0} ms** | {} | - |",
            replay.as_secs_f64() * 1e3,
            deliver.as_secs_f64() * 1e3,
            n as u64 - delivered.min(n as u64) + errors.min(n as u64),
        )),
        None => r.line("| official Python SDK | not measured: run `scripts/bench.sh` (it sets `HATCHET_BENCH_PYTHON` to a Python with the pinned SDK) | | | | |"),
    }
    rt.shutdown(Duration::from_secs(1)).await;
    // The official Go SDK: its process triggers the runs itself (it awaits only its own runs).
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let rt = Runtime::spawn(engine.client_config())
        .await
        .expect("runtime");
    rt.register(noop()).await.expect("register");
    match sdk_baselines::go_reconnect(&engine, "noop", n).await {
        Some((replay, deliver, delivered, errors)) => r.line(&format!(
            "| official Go SDK | - | **{:.0} ms** | **{:.0} ms** | {} | - |",
            replay.as_secs_f64() * 1e3,
            deliver.as_secs_f64() * 1e3,
            n as u64 - delivered.min(n as u64) + errors.min(n as u64),
        )),
        None => r.line(&format!("| official Go SDK | not measured: run `scripts/bench.sh` (it builds `tests/interop/go` and sets `HATCHET_GO_BENCH_BIN`); log {} | | | | |", sdk_baselines::log_path().display())),
    }
    rt.shutdown(Duration::from_secs(1)).await;
    r.line("\nTarget: ours, the backoff delay plus <= 1 s to replay; lost 0, duplicated 0. The Python and Go rows are the same restart and the same number of runs, awaited through each SDK's run refs.");
}

/// The method benchmark 4 takes down.
const OUTAGE_PATH: &str = "/Dispatcher/GetVersion";

/// Benchmark 4's outage: every GetVersion fails UNAVAILABLE from now on, counted from zero.
fn begin_outage(engine: &DevEngine) {
    engine.faults().reset_counters();
    engine.faults().inject(
        OUTAGE_PATH,
        u32::MAX,
        Fault::Fail {
            code: tonic::Code::Unavailable as i32,
            message: "outage".into(),
            pushback_ms: None,
        },
    );
}

/// The network attempts the engine sees during `secs` s of outage: per second, and in all.
async fn outage_attempts(engine: &DevEngine, secs: u64) -> (Vec<u64>, u64) {
    let mut per_sec = Vec::new();
    let mut last = 0;
    for _ in 0..secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = engine.faults().attempts(OUTAGE_PATH);
        per_sec.push(now - last);
        last = now;
    }
    (per_sec, engine.faults().attempts(OUTAGE_PATH))
}

/// Which retry policy an outage run uses.
#[derive(Clone, Copy)]
enum OutagePolicy {
    /// Our retry core: the contract's policy and budget.
    Ours,
    /// The Go SDK's documented policy (`go_sdk_policy`), no budget.
    GoSdk,
}

async fn outage_run(
    engine: &DevEngine,
    policy: OutagePolicy,
    callers: usize,
    secs: u64,
) -> (u64, u64, Vec<u64>) {
    // Ours: a fresh runtime (its own retry budget), every reader calling `engine_version`.
    let rt = Runtime::spawn_with(
        engine.client_config(),
        hatchet_runtime::RuntimeOptions::new().seed(7),
    )
    .await
    .expect("runtime");
    let raw = raw_dispatcher(engine);
    begin_outage(engine);
    let ops = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for reader in 0..callers {
        let (rt, ops, stop) = (rt.clone(), ops.clone(), stop.clone());
        let client = raw.clone();
        readers.push(tokio::spawn(async move {
            use rand::SeedableRng as _;
            let mut rng = rand::rngs::StdRng::seed_from_u64(reader as u64);
            while !stop.load(Ordering::Relaxed) {
                ops.fetch_add(1, Ordering::Relaxed);
                match policy {
                    OutagePolicy::Ours => {
                        let _ = rt.engine_version().await;
                    }
                    OutagePolicy::GoSdk => {
                        let attempt = |t: Duration| {
                            let mut c = client.clone();
                            let mut req = tonic::Request::new(proto::GetVersionRequest {});
                            req.set_timeout(t);
                            async move { c.get_version(req).await.map(|_| ()) }
                        };
                        go_sdk_policy::call(&mut rng, attempt).await;
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    let (per_sec, attempts) = outage_attempts(engine, secs).await;
    stop.store(true, Ordering::Relaxed);
    let operations = ops.load(Ordering::Relaxed);
    engine.faults().clear();
    for r in readers {
        r.abort();
        let _ = r.await;
    }
    rt.shutdown(Duration::from_secs(1)).await;
    (attempts, operations, per_sec)
}

fn svg(series: &[(&str, &str, &[u64])]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.2.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let n = series.iter().map(|s| s.2.len()).max().unwrap_or(1).max(2) as f64;
    let (w, h, pad) = (640.0, 320.0, 40.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    out += &format!(
        "<text x=\"{pad}\" y=\"20\">network attempts per second during the outage (max {max:.0})</text>\n"
    );
    out += &format!(
        "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - pad,
        w - pad,
        h - pad
    );
    for (i, (name, color, data)) in series.iter().enumerate() {
        let pts: Vec<String> = data
            .iter()
            .enumerate()
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    pad + x as f64 * (w - 2.0 * pad) / (n - 1.0),
                    h - pad - *y as f64 * (h - 2.0 * pad) / max
                )
            })
            .collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        out += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>\n",
            w - 220.0,
            40.0 + 16.0 * i as f64
        );
    }
    out += "</svg>\n";
    out
}

async fn outage(r: &mut Report, smoke: bool) {
    let secs = env_num("BENCH_OUTAGE_SECS", if smoke { 2 } else { 20 });
    r.line(&format!(
        "\n## 4. Outage amplification: readers (one read per second each) during a {secs} s full outage\n"
    ));
    // The Go SDK itself when its binary is given (`scripts/bench.sh` builds it); otherwise its
    // policy rebuilt from the documented constants, named as such.
    let real_go = sdk_baselines::go_sdk().is_some() && !smoke;
    let go_name = if real_go {
        "Go SDK v0.104.9 (its client, its gRPC retry interceptor)"
    } else {
        "Go SDK policy rebuilt from its documented constants"
    };
    if real_go {
        r.line("Baseline: the official Go SDK in its own process (`tests/interop/go bench-outage`): readers on one client calling `GetEngineVersion`, which goes through the SDK's own gRPC retry interceptor, against the same engine in the same run.\n");
    } else {
        r.line("Baseline: the Go SDK's unary policy rebuilt from its documented constants (5 attempts, full jitter from 5 s doubling, no budget; `benches/side_by_side/go_sdk_policy.rs`), against the same engine in the same run; `scripts/bench.sh` measures the Go SDK itself instead.\n");
    }
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    r.line(&format!("| readers | ours: operations / attempts | ours: attempts per operation | {go_name}: operations / attempts | attempts per operation |"));
    r.line("|---|---|---|---|---|");
    let counts: &[usize] = if smoke { &[20] } else { &[20, 100, 1000] };
    let mut plot = Vec::new();
    for &callers in counts {
        let (oa, oo, ots) = outage_run(&engine, OutagePolicy::Ours, callers, secs).await;
        let go = if real_go {
            sdk_baselines::go_outage(&engine, callers, secs).await
        } else {
            Some(outage_run(&engine, OutagePolicy::GoSdk, callers, secs).await)
        };
        let (go_cell, go_ratio, gts) = match go {
            Some((ga, go, gts)) => (
                format!("{go} / {ga}"),
                format!("**{:.2}**", ga as f64 / go.max(1) as f64),
                gts,
            ),
            None => (
                format!("not measured (see {})", sdk_baselines::log_path().display()),
                String::new(),
                Vec::new(),
            ),
        };
        r.line(&format!(
            "| {callers} | {oo} / {oa} | **{:.2}** | {go_cell} | {go_ratio} |",
            oa as f64 / oo.max(1) as f64,
        ));
        if callers == *counts.last().unwrap_or(&callers) {
            plot = vec![ots, gts];
        }
    }
    r.line("\nTarget: ours <= 1.2 attempts per operation at 1,000 readers (the reserve of 10 retries/s weighs more with fewer readers). Plot (the largest reader count): `target/bench-report/outage.svg`.");
    if let [ours, go] = plot.as_slice() {
        let _ = std::fs::write(
            "target/bench-report/outage.svg",
            svg(&[("ours", "#1f77b4", ours), (go_name, "#d62728", go)]),
        );
    }
}

async fn memory(r: &mut Report, smoke: bool) {
    let secs = env_num("BENCH_IDLE_SECS", if smoke { 1 } else { 60 });
    r.line(&format!(
        "\n## 5. At rest: a runtime with a worker and its listeners idle for {secs} s\n"
    ));
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let metrics = tokio::runtime::Handle::current().metrics();
    // The engine's own tasks settle first (its listeners start as it comes up): counted at once,
    // the baseline read 3 or 4 in back-to-back runs, and "left after shutdown" with it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tasks_before = metrics.num_alive_tasks();
    let rss_before = rss_kib();
    let rt: RuntimeHandle = Runtime::spawn_with(engine.client_config(), RuntimeOptions::new())
        .await
        .expect("runtime");
    rt.register(noop()).await.expect("register");
    rt.start_worker(WorkerOptions::new("idle", 8))
        .await
        .expect("start");
    let _: Value = rt.run("noop", &Value::Null).await.unwrap_or(Value::Null);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let tasks_idle = metrics.num_alive_tasks();
    let rss_idle = rss_kib();
    rt.shutdown(Duration::from_secs(1)).await;
    drop(rt); // the last handle: the shared connection's task ends with it
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tasks_after = metrics.num_alive_tasks();
    r.line("| tokio tasks before (engine only) | while idle | after shutdown and drop | RSS growth while idle |");
    r.line("|---|---|---|---|");
    r.line(&format!(
        "| {tasks_before} | {tasks_idle} (+{}) | {tasks_after} (+{}) | {} KiB |",
        tasks_idle.saturating_sub(tasks_before),
        tasks_after.saturating_sub(tasks_before),
        rss_idle.saturating_sub(rss_before)
    ));
    r.line("\nAfter shutdown the runtime leaves no task: the count returns to the engine's own.\n");
    // Process level, side by side: our example worker and the Python SDK's bench worker, each
    // its own process (with its children) against the same engine, idle for the same time.
    r.line("| idle worker process (8 slots) | resident memory | threads |");
    r.line("|---|---|---|");
    let row = |name: &str, m: Option<(u64, u64)>| match m {
        Some((rss, threads)) => format!(
            "| {name} | **{:.1} MiB** | **{threads}** |",
            rss as f64 / 1024.0
        ),
        None => format!(
            "| {name} | not measured: run `scripts/bench.sh` (it builds the workers and sets the Python and the Go binary) | |"
        ),
    };
    let ours = match sdk_baselines::rust_worker() {
        Some(bin) => sdk_baselines::idle_worker(bin, &[], &engine, secs).await,
        None => None,
    };
    r.line(&row("ours (`examples/worker`, release)", ours));
    for (name, sdk) in [
        (
            "official Go SDK (`tests/interop/go bench-worker`)",
            sdk_baselines::go_sdk(),
        ),
        (
            "official Python SDK (`benches/python/echo_worker.py`)",
            sdk_baselines::python_sdk(),
        ),
    ] {
        let m = match sdk {
            Some(sdk) => sdk_baselines::idle_worker(sdk.program, &sdk.worker, &engine, secs).await,
            None => None,
        };
        r.line(&row(name, m));
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Ok(side) = std::env::var(FANIN_SIDE) {
        fanin_child(&side).await;
        return;
    }
    let all: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it:
    // then every benchmark runs once at a tiny size (a smoke test that they still work).
    let smoke = !all.iter().any(|a| a == "--bench");
    let args: Vec<String> = all.into_iter().filter(|a| !a.starts_with('-')).collect();
    let want = |n: &str| args.is_empty() || args.iter().any(|a| a == n);
    let _ = std::fs::create_dir_all("target/bench-report");
    let mut r = Report { md: String::new() };
    r.line("# hatchet-runtime benchmarks (side by side, one process, loopback)\n");
    r.line(&format!(
        "Machine: {} cores, {}. Reproduce: `cargo bench --bench side_by_side`.",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::env::consts::ARCH
    ));
    if want("unary") {
        unary(&mut r, smoke).await;
    }
    if want("fanin") {
        fanin(&mut r, smoke).await;
    }
    if want("reconnect") {
        reconnect(&mut r, smoke).await;
    }
    if want("outage") {
        outage(&mut r, smoke).await;
    }
    if want("memory") {
        memory(&mut r, smoke).await;
    }
    if want("latency") {
        latency::latency(&mut r, smoke).await;
    }
    if want("coldstart") {
        latency::cold_start(&mut r, smoke).await;
    }
    if smoke {
        println!(
            "\nsmoke run done (every benchmark at a tiny size); `cargo bench --bench side_by_side` measures"
        );
        return;
    }
    // Benchmark 7 on the real engine (`BENCH_ENGINE=real`, the only one that honours it) goes
    // beside the real engine's throughput table, not over the development engine's report.
    let path = if std::env::var("BENCH_ENGINE").as_deref() == Ok("real") {
        "target/bench-report/real-engine-latency.md"
    } else {
        "target/bench-report/report.md"
    };
    let _ = std::fs::write(path, &r.md);
    println!("\nwrote {path}");
}
