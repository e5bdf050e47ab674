//! Baselines measured with the official SDKs in the same run: the Python SDK (PyPI
//! `hatchet-sdk`) when the benchmark is given a Python with it (`HATCHET_BENCH_PYTHON`, set by
//! `scripts/bench.sh` from the interop virtualenv), the Go SDK when it is given the Go suite's
//! binary (`HATCHET_GO_BENCH_BIN`, `tests/interop/go`: `bench-worker`, `bench-latency`), and
//! process-level baselines of our example worker (`HATCHET_RUST_WORKER_BIN`). Without them the
//! rows say so instead of showing a number.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use hatchet_dev_engine::DevEngine;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// The Python that has the SDK, if the benchmark was given one.
pub fn python() -> Option<PathBuf> {
    std::env::var_os("HATCHET_BENCH_PYTHON").map(PathBuf::from)
}

/// An official SDK's bench programs: `program worker...` serves `py-echo` / `go-bench-echo`
/// (`BENCH_SLOTS` slots); `program latency...` is its client's row of benchmark 7.
pub struct Sdk {
    pub program: PathBuf,
    pub worker: Vec<OsString>,
    pub latency: Vec<OsString>,
}

/// The Python SDK's bench worker (`benches/python/echo_worker.py`) and latency client
/// (`latency.py`), if the benchmark was given a Python with the SDK.
pub fn python_sdk() -> Option<Sdk> {
    Some(Sdk {
        program: python()?,
        worker: vec![bench_dir().join("echo_worker.py").into()],
        latency: vec![bench_dir().join("latency.py").into()],
    })
}

/// The Go SDK's bench worker and latency client (the Go suite's binary), if given.
pub fn go_sdk() -> Option<Sdk> {
    Some(Sdk {
        program: std::env::var_os("HATCHET_GO_BENCH_BIN").map(PathBuf::from)?,
        worker: vec!["bench-worker".into()],
        latency: vec!["bench-latency".into()],
    })
}

/// Our example worker binary, if the benchmark was given one.
pub fn rust_worker() -> Option<PathBuf> {
    std::env::var_os("HATCHET_RUST_WORKER_BIN").map(PathBuf::from)
}

fn bench_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/python")
}

fn command(program: &PathBuf, engine: &DevEngine) -> Command {
    command_for(program, &engine.client_config())
}

/// A process of `program` pointed at the engine `config` names.
fn command_for(program: &PathBuf, config: &hatchet_runtime::config::ClientConfig) -> Command {
    let mut c = Command::new(program);
    for (k, v) in config.env_lines() {
        c.env(k, v);
    }
    // Its error output goes to a log file, named in the report when a baseline fails.
    let stderr = std::fs::File::create(log_path())
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    c.kill_on_drop(true).stdin(Stdio::null()).stderr(stderr);
    c
}

/// Where the baselines' processes write their error output.
pub fn log_path() -> PathBuf {
    std::env::temp_dir().join("hatchet-bench-baseline.log")
}

/// Stops a process a [`command`] started: SIGTERM first (the SDK's worker stops its children
/// on it), then SIGKILL after 10 s.
async fn stop_process(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

/// Benchmark 3 for the Python SDK (`reconnect_waiter.py` awaits the run ids it is given):
/// engine back -> every subscription replayed at the engine, and runs completed -> every result
/// delivered; `(replay, delivery, delivered, errors)`.
pub async fn reconnect(
    engine: &DevEngine,
    ids: &[String],
) -> Option<(Duration, Duration, u64, u64)> {
    let python = python()?;
    let file = std::env::temp_dir().join(format!("hatchet-bench-ids-{}", std::process::id()));
    why(
        std::fs::write(&file, ids.join("\n")).ok(),
        "writing the run ids",
    )?;
    let mut waiter = command(&python, engine);
    waiter
        .arg(bench_dir().join("reconnect_waiter.py"))
        .arg(&file);
    let out = reconnect_with(engine, waiter, ids.len()).await;
    let _ = std::fs::remove_file(&file);
    out
}

/// Benchmark 3 for the Go SDK (`bench-reconnect`: it triggers `n` runs of `workflow` itself,
/// since the SDK awaits only runs it triggered); the same measures as [`reconnect`].
pub async fn go_reconnect(
    engine: &DevEngine,
    workflow: &str,
    n: usize,
) -> Option<(Duration, Duration, u64, u64)> {
    let sdk = go_sdk()?;
    let mut waiter = command(&sdk.program, engine);
    waiter
        .arg("bench-reconnect")
        .env("BENCH_WORKFLOW", workflow)
        .env("BENCH_RECONNECT_RUNS", n.to_string());
    reconnect_with(engine, waiter, n).await
}

/// A waiter process awaiting `n` runs: it prints `waiting`, then `done <results> <errors>`.
async fn reconnect_with(
    engine: &DevEngine,
    mut waiter: Command,
    n: usize,
) -> Option<(Duration, Duration, u64, u64)> {
    let mut child: Child = waiter.stdout(Stdio::piped()).spawn().ok()?;
    let mut lines = BufReader::new(child.stdout.take()?).lines();
    let ready = tokio::time::timeout(Duration::from_secs(120), async {
        while lines.next_line().await.ok()?? != "waiting" {}
        while engine.pending_run_subscriptions() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Some(())
    })
    .await;
    if why(
        matches!(ready, Ok(Some(()))).then_some(()),
        "the SDK's subscriptions",
    )
    .is_none()
    {
        stop_process(&mut child).await;
        return None;
    }
    engine.shutdown().await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the SDK sees its stream end
    why(engine.start_again().await.ok(), "restarting the engine")?;
    let back = Instant::now();
    let replayed = tokio::time::timeout(Duration::from_secs(120), async {
        while engine.pending_run_subscriptions() < n {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .map(|_| back.elapsed())
    .unwrap_or(Duration::MAX);
    engine.complete_queued("noop");
    let completed = Instant::now();
    // The SDK logs to stdout too: the answer is the line that starts with `done `.
    let done = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            match lines.next_line().await {
                Ok(Some(l)) if l.starts_with("done ") => return Ok(Some(l)),
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await;
    let delivery = completed.elapsed();
    stop_process(&mut child).await;
    let line = why(
        done.ok().and_then(|l| l.ok().flatten()),
        "the SDK's `done` line",
    )?;
    let mut words = line.split_whitespace().skip(1);
    let delivered = why(words.next().and_then(|w| w.parse().ok()), &line)?;
    let errors = why(words.next().and_then(|w| w.parse().ok()), &line)?;
    Some((replayed, delivery, delivered, errors))
}

/// `o`, saying on stderr what was missing when it is `None`.
fn why<T>(o: Option<T>, what: &str) -> Option<T> {
    if o.is_none() {
        eprintln!("SDK baseline: {what} failed (see {})", log_path().display());
    }
    o
}

/// Resident memory (KiB) and threads of process `pid` and every descendant.
fn tree_usage(pid: u32) -> (u64, u64) {
    let mut pids = vec![pid];
    let mut i = 0;
    while i < pids.len() {
        let parent = pids[i];
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                // The parent pid is the second field after the parenthesised command name.
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|s| s.parse::<u32>().ok());
                if ppid == Some(parent) && !pids.contains(&p) {
                    pids.push(p);
                }
            }
        }
        i += 1;
    }
    let field = |p: u32, name: &str| {
        std::fs::read_to_string(format!("/proc/{p}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    pids.iter().fold((0, 0), |(rss, threads), p| {
        (rss + field(*p, "VmRSS:"), threads + field(*p, "Threads:"))
    })
}

/// An idle worker process: started against `engine`, registered and listening, then left idle
/// `secs`; its resident memory (KiB) and threads, with its children.
pub async fn idle_worker(
    program: PathBuf,
    args: &[OsString],
    engine: &DevEngine,
    secs: u64,
) -> Option<(u64, u64)> {
    let sessions = engine.stats().listener_sessions;
    let mut child = command(&program, engine)
        .args(args)
        .env("WORKER_SLOTS", "8")
        .env("BENCH_SLOTS", "8")
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let listening = listening_after(engine, sessions).await;
    if !listening {
        stop_process(&mut child).await;
        return None;
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let usage = child.id().map(tree_usage);
    stop_process(&mut child).await;
    usage
}

/// Whether a worker opened a listener session beyond the engine's first `sessions` within
/// 120 s (a Python worker takes seconds to import its SDK).
async fn listening_after(engine: &DevEngine, sessions: usize) -> bool {
    tokio::time::timeout(Duration::from_secs(120), async {
        while engine.stats().listener_sessions <= sessions {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok()
}

/// Benchmark 7 for an official SDK: its worker serving, its client triggering one run at a
/// time and waiting for the result; `(p50, p99)`.
/// On the real engine, which has no listener counter to watch, the worker gets a fixed 10 s to
/// register and listen.
pub async fn latency(
    engine: &super::latency::Target,
    sdk: &Sdk,
    runs: usize,
) -> Option<(Duration, Duration)> {
    let config = engine.config();
    let sessions = engine.dev().map(|e| e.stats().listener_sessions);
    let mut worker = command_for(&sdk.program, &config)
        .args(&sdk.worker)
        .env("BENCH_SLOTS", "4")
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let listening = match (engine.dev(), sessions) {
        (Some(e), Some(n)) => listening_after(e, n).await,
        _ => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            true
        }
    };
    let result = async {
        listening.then_some(())?;
        let out = command_for(&sdk.program, &config)
            .args(&sdk.latency)
            .env("BENCH_LATENCY_RUNS", runs.to_string())
            .stdout(Stdio::piped())
            .output();
        let out = tokio::time::timeout(Duration::from_secs(600), out)
            .await
            .ok()?
            .ok()?;
        let line = String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))?
            .to_string();
        let v: serde_json::Value = serde_json::from_str(&line).ok()?;
        let ms = |k: &str| v[k].as_f64().map(|m| Duration::from_secs_f64(m / 1000.0));
        Some((ms("p50_ms")?, ms("p99_ms")?))
    }
    .await;
    stop_process(&mut worker).await;
    result
}

/// Benchmark 4 for the Go SDK: its client in its own process (`bench-outage`: `callers`
/// readers, one GetEngineVersion a second each, through the SDK's gRPC retry interceptor)
/// during a `secs` s full outage of GetVersion at `engine`; `(attempts, operations, attempts
/// per second)`, or None when the Go binary was not given or did not answer.
pub async fn go_outage(
    engine: &DevEngine,
    callers: usize,
    secs: u64,
) -> Option<(u64, u64, Vec<u64>)> {
    use tokio::io::AsyncWriteExt as _;
    let sdk = go_sdk()?;
    let mut child = command(&sdk.program, engine)
        .arg("bench-outage")
        .env("BENCH_OUTAGE_READERS", callers.to_string())
        .env("BENCH_OUTAGE_SECS", secs.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut lines = BufReader::new(child.stdout.take()?).lines();
    let mut stdin = child.stdin.take()?;
    let result = async {
        let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        ready.ok()?.ok()??.contains("ready").then_some(())?;
        super::begin_outage(engine);
        stdin.write_all(b"go\n").await.ok()?;
        stdin.flush().await.ok()?;
        let (per_sec, attempts) = super::outage_attempts(engine, secs).await;
        let done = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
        let line = done.ok()?.ok()??;
        let v: serde_json::Value = serde_json::from_str(&line).ok()?;
        Some((attempts, v["operations"].as_u64()?, per_sec))
    }
    .await;
    engine.faults().clear();
    let _ = child.kill().await;
    result
}
