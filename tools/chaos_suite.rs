//! The chaos suite's three processes, against any engine the `HATCHET_CLIENT_*` variables name
//! (`scripts/chaos-real.sh` runs them on the real engine and injects the faults):
//!
//! - `chaos_suite proxy --listen ADDR --upstream ADDR [--freeze-secs N]`: a TCP proxy of our own
//!   in front of the engine's gRPC port. `SIGUSR1` freezes every open connection (bytes stop both
//!   ways, the sockets stay open: a half-open link) for N seconds and then drops them; `SIGUSR2`
//!   drops them at once. New connections pass.
//! - `chaos_suite worker --dir D [--slots N]`: a worker with a DAG (`a` then `b`), a single-task
//!   and a durable workflow. Every execution is appended to `D/exec.log` before it runs, so a
//!   worker killed and started again still counts what it ran.
//! - `chaos_suite client --dir D --runs N [--rate R] [--wait SECS] [--tag T]`: triggers N runs
//!   (R a second, in bulk chunks; each workflow has an idempotency key on its input, and a trigger
//!   in doubt is sent again with it), awaits each result within SECS, reads back from the engine
//!   the runs it holds per key, counts the executions in `exec.log`, writes every run that did not
//!   come back right to `D/problems.tsv`, and prints one summary line. A run whose wait ran out
//!   while the engine showed it stalled (a task finished, none queued or running: the engine lost
//!   the step that creates the next task, and v0.104.9 discards a replay of it) is counted apart,
//!   with the engine's tables as evidence. It exits 1 when a result is wrong,
//!   lost without such an explanation (no answer by the bound), or a key has more than one run
//!   at the engine.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hatchet_runtime::api::RunQuery;
use hatchet_runtime::run::{BulkRun, RunFilter};
use hatchet_runtime::{
    Context, Error, Outcome, Runtime, RuntimeHandle, TaskError, TaskOptions, TriggerOptions,
    WorkerOptions, Workflow,
};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// The workflows, and the share of runs each gets (out of 10).
const DAG: &str = "chaos-dag";
const SINGLE: &str = "chaos-single";
const DURABLE: &str = "chaos-durable";

fn workflow_of(i: usize) -> &'static str {
    match i % 10 {
        0..=5 => DAG,
        6..=8 => SINGLE,
        _ => DURABLE,
    }
}

/// How long a result may take before the run is checked for a stall (its tasks take under a
/// second, so this is far past any queue the faults make).
const STALL_CHECK: Duration = Duration::from_secs(90);

/// Whether a wait's deadline error says the engine stalled the run (the runtime's words for a run
/// with a finished task and none queued or running).
fn stalled(e: &Error) -> bool {
    e.to_string().contains("no task is queued or running")
}

/// What a right result is, per workflow and key.
fn expected(workflow: &str, k: &str) -> Value {
    match workflow {
        DAG => json!({"a": {"k": k, "a": 1}, "b": {"k": k, "b": 2}}),
        SINGLE => json!({"k": k, "single": true}),
        _ => json!({"k": k, "durable": true}),
    }
}

type AnyError = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "hatchet_runtime=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let num = |name: &str, default: u64| -> Result<u64, AnyError> {
        match flag(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name} takes a whole number, got {v:?}").into()),
        }
    };
    let dir = || -> Result<PathBuf, AnyError> {
        let d = PathBuf::from(flag("--dir").ok_or("--dir D is needed (where exec.log lives)")?);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    };
    match args.first().map(String::as_str) {
        Some("proxy") => {
            let listen = flag("--listen").ok_or("--listen ADDR is needed")?;
            let upstream = flag("--upstream").ok_or("--upstream ADDR is needed")?;
            proxy(
                &listen,
                &upstream,
                Duration::from_secs(num("--freeze-secs", 40)?),
            )
            .await
        }
        Some("worker") => worker(&dir()?, num("--slots", 16)? as usize).await,
        Some("client") => {
            let opts = ClientRun {
                dir: dir()?,
                runs: num("--runs", 200)? as usize,
                rate: num("--rate", 10)?.max(1),
                wait: Duration::from_secs(num("--wait", 420)?),
                tag: flag("--tag").unwrap_or_else(|| format!("c{}", std::process::id())),
            };
            client(opts).await
        }
        _ => Err("usage: chaos_suite proxy|worker|client ... (see the file's doc)".into()),
    }
}

// ---- the worker ----------------------------------------------------------------------------

/// Milliseconds since the Unix epoch (the recovery times compare them with the faults' times).
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Appends one execution to `exec.log`: task, key, retry count, pid, when (epoch ms) (one
/// `write` per line, so lines of concurrent executions do not interleave).
fn record(log: &Path, task: &str, ctx: &Context) -> Result<String, TaskError> {
    let k = ctx.input()["k"]
        .as_str()
        .ok_or_else(|| TaskError::non_retryable("the input has no string k"))?
        .to_string();
    let line = format!(
        "{task}\t{k}\t{}\t{}\t{}\n",
        ctx.retry_count(),
        std::process::id(),
        now_ms()
    );
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| TaskError::new(format!("cannot open {}: {e}", log.display())))?;
    f.write_all(line.as_bytes())
        .map_err(|e| TaskError::new(format!("cannot append to {}: {e}", log.display())))?;
    Ok(k)
}

/// A short, varied amount of work.
async fn work(k: &str) {
    let ms = 20 + (k.bytes().map(u64::from).sum::<u64>() % 180);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn workflows(log: &Path) -> Vec<Workflow> {
    // Retries: a worker killed mid-task gets its task back on another attempt. The timeout is
    // short so a task whose completion the engine lost is retried within the suite's bound.
    // With CHAOS_TASK_DEFAULTS=1, a new user's options instead: no retries, the engine's default
    // timeout (five minutes): what the engine loses must be taken back by the worker.
    let defaults = std::env::var("CHAOS_TASK_DEFAULTS").is_ok_and(|v| v == "1");
    let opts = move || {
        if defaults {
            TaskOptions::new()
        } else {
            TaskOptions::new()
                .retries(3)
                .timeout(Duration::from_secs(30))
        }
    };
    let (l1, l2, l3, l4) = (
        log.to_path_buf(),
        log.to_path_buf(),
        log.to_path_buf(),
        log.to_path_buf(),
    );
    let ttl = Duration::from_secs(3600);
    vec![
        Workflow::new(DAG)
            .task_with("a", opts(), move |_i: Value, c: Context| {
                let log = l1.clone();
                async move {
                    let k = record(&log, "a", &c)?;
                    work(&k).await;
                    Ok::<_, TaskError>(json!({"k": k, "a": 1}))
                }
            })
            .task_with("b", opts().parents(["a"]), move |_i: Value, c: Context| {
                let log = l2.clone();
                async move {
                    let k = record(&log, "b", &c)?;
                    let a: Value = c.parent_output("a")?;
                    work(&k).await;
                    Ok::<_, TaskError>(json!({"k": k, "b": a["a"].as_i64().unwrap_or(0) + 1}))
                }
            })
            .idempotency("input.k", ttl),
        Workflow::new(SINGLE)
            .task_with("t", opts(), move |_i: Value, c: Context| {
                let log = l3.clone();
                async move {
                    let k = record(&log, "t", &c)?;
                    work(&k).await;
                    Ok::<_, TaskError>(json!({"k": k, "single": true}))
                }
            })
            .idempotency("input.k", ttl),
        Workflow::new(DURABLE)
            .durable_task("d", opts(), move |_i: Value, c: Context| {
                let log = l4.clone();
                async move {
                    let k = record(&log, "d", &c)?;
                    c.sleep_for(Duration::from_secs(2)).await?;
                    Ok::<_, TaskError>(json!({"k": k, "durable": true}))
                }
            })
            .idempotency("input.k", ttl),
    ]
}

async fn worker(dir: &Path, slots: usize) -> Result<(), AnyError> {
    let rt = Runtime::spawn(hatchet_runtime::config::ClientConfig::from_env()?).await?;
    for w in workflows(&dir.join("exec.log")) {
        rt.register(w).await?;
    }
    let id = rt
        .start_worker(WorkerOptions::new("chaos-worker", slots))
        .await?;
    eprintln!("chaos worker {id} (pid {}) serving", std::process::id());
    // What the worker took back from the engine's losses, as it happens.
    let watch = rt.clone();
    tokio::spawn(async move {
        let mut last = (0, 0, 0, 0);
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let c = watch.task_counts();
            let now = (
                c.taken_back,
                c.finals_resent,
                c.failed_as_lost,
                c.restarted_from_log,
            );
            if now != last {
                eprintln!(
                    "chaos worker takes back: {} unsent attempts run, {} lost finals sent again, {} failed as lost, {} durable invocations in doubt restarted from the log",
                    now.0, now.1, now.2, now.3
                );
                last = now;
            }
        }
    });
    rt.run_until_signal(Duration::from_secs(5)).await?;
    Ok(())
}

// ---- the client ----------------------------------------------------------------------------

struct ClientRun {
    dir: PathBuf,
    runs: usize,
    rate: u64,
    wait: Duration,
    tag: String,
}

/// One run's key, run id (empty when no trigger was answered), end, and when it was triggered
/// and answered (epoch ms).
type Ended = (String, String, End, (u128, u128));

/// How one run ended, as the client saw it.
#[derive(Debug, Clone, PartialEq)]
enum End {
    Right,
    Wrong(String),
    Lost(String),
    /// No result by the bound, and the engine shows the run stalled: a task finished and none
    /// is queued or running (the engine lost the step that creates the next task).
    Stalled(String),
    Failed(String),
    Refused(String),
    Other(String),
}

impl End {
    fn name(&self) -> &'static str {
        match self {
            End::Right => "right",
            End::Wrong(_) => "wrong",
            End::Lost(_) => "lost",
            End::Stalled(_) => "stalled",
            End::Failed(_) => "failed",
            End::Refused(_) => "refused",
            End::Other(_) => "error",
        }
    }
}

/// Triggers one key until the engine answers with a run (sent again with the same idempotency
/// key while the answer is in doubt or the engine is away), up to `give_up`.
async fn trigger_again(
    rt: &RuntimeHandle,
    workflow: &str,
    input: &Value,
    opts: &TriggerOptions,
    give_up: Instant,
    sends: &Mutex<u64>,
) -> Result<hatchet_runtime::RunHandle, Error> {
    loop {
        *sends.lock() += 1;
        match rt.run_no_wait_with(workflow, input, opts.clone()).await {
            Ok(h) => return Ok(h),
            Err(e) if matches!(e.outcome(), Outcome::Rejected | Outcome::Invalid) => {
                return Err(e);
            }
            Err(e) if Instant::now() >= give_up => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

async fn client(o: ClientRun) -> Result<(), AnyError> {
    let started = Instant::now();
    let since = SystemTime::now() - Duration::from_secs(5);
    let rt = Runtime::spawn(hatchet_runtime::config::ClientConfig::from_env()?).await?;
    let sends = Arc::new(Mutex::new(0u64));
    let retriggers = Arc::new(Mutex::new(0u64));
    let ends: Arc<Mutex<BTreeMap<usize, Ended>>> = Arc::default();
    let mut waits = Vec::new();
    let chunk = 25usize;
    let key_of = |i: usize| format!("{}-{i}", o.tag);
    let mut next = 0usize;
    while next < o.runs {
        let upto = (next + chunk).min(o.runs);
        // One bulk call per workflow for this chunk's runs.
        let mut by_wf: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
        for i in next..upto {
            by_wf.entry(workflow_of(i)).or_default().push(i);
        }
        for (wf, idx) in by_wf {
            // A trigger sent again alone is declared idempotent (retried as a read, a collision
            // resolving to the run); a bulk trigger resolves collisions to the runs itself.
            let opts = |i: usize| {
                TriggerOptions::new()
                    .idempotent()
                    .meta("chaos", o.tag.clone())
                    .meta("k", key_of(i))
            };
            let items: Vec<BulkRun<Value>> = idx
                .iter()
                .map(|&i| {
                    BulkRun::new(json!({"k": key_of(i)}))
                        .meta("chaos", o.tag.clone())
                        .meta("k", key_of(i))
                })
                .collect();
            *sends.lock() += 1;
            let answers = rt.run_many_with(wf, &items).await;
            for (&i, answer) in idx.iter().zip(answers) {
                let (rt, ends, sends, retriggers) =
                    (rt.clone(), ends.clone(), sends.clone(), retriggers.clone());
                let (k, wait) = (key_of(i), o.wait);
                let opts = opts(i);
                waits.push(tokio::spawn(async move {
                    let asked = now_ms();
                    let give_up = Instant::now() + wait;
                    let input = json!({"k": k});
                    let handle = match answer {
                        Ok(h) => Ok(h),
                        Err(e) if matches!(e.outcome(), Outcome::Rejected | Outcome::Invalid) => {
                            Err(e)
                        }
                        Err(_) => {
                            *retriggers.lock() += 1;
                            trigger_again(&rt, wf, &input, &opts, give_up, &sends).await
                        }
                    };
                    let mut run = String::new();
                    let end = match handle {
                        Err(e) if e.outcome() == Outcome::Rejected => End::Refused(e.to_string()),
                        Err(e) => End::Other(format!("trigger: {e}")),
                        Ok(h) => {
                            run = h.run_id().to_string();
                            // Waited in rounds: a run the engine stalled (it lost the step that
                            // starts the next task, which the deadline's error says) is
                            // replayed, as the error advises, and waited on again.
                            loop {
                                let left = give_up.saturating_duration_since(Instant::now());
                                match h.result_within::<Value>(left.min(STALL_CHECK)).await {
                                    Ok(v) if v == expected(wf, &k) => break End::Right,
                                    Ok(v) => break End::Wrong(format!("{run}\t{v}")),
                                    Err(e)
                                        if e.outcome() == Outcome::DeadlineExceeded
                                            && Instant::now() < give_up => {}
                                    Err(e)
                                        if e.outcome() == Outcome::DeadlineExceeded
                                            && stalled(&e) =>
                                    {
                                        break End::Stalled(format!("{run}\t{e}"));
                                    }
                                    Err(e) if e.outcome() == Outcome::DeadlineExceeded => {
                                        break End::Lost(format!("{run}\t{e}"));
                                    }
                                    Err(e) if e.outcome() == Outcome::RunFailed => {
                                        break End::Failed(format!("{run}\t{e}"));
                                    }
                                    Err(e) => break End::Other(format!("{run}\t{e}")),
                                }
                            }
                        }
                    };
                    ends.lock().insert(i, (k, run, end, (asked, now_ms())));
                }));
            }
        }
        next = upto;
        // Paced: the faults land while runs are being triggered and worked.
        let due = Duration::from_secs_f64(next as f64 / o.rate as f64);
        if let Some(d) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(d).await;
        }
    }
    for w in waits {
        w.await?;
    }
    let awaited = started.elapsed();

    // Runs at the engine per key (read back over REST, by the run's metadata).
    let engine_runs = runs_at_engine(&rt, &o.tag, since).await;
    // Executions per (task, key), counted in the handlers.
    let execs = executions(&o.dir.join("exec.log"), &o.tag)?;

    let ends = ends.lock().clone();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut problems = std::fs::File::create(o.dir.join("problems.tsv"))?;
    let mut runs = std::fs::File::create(o.dir.join("runs.tsv"))?;
    for (i, (k, run, end, (asked, answered))) in &ends {
        *counts.entry(end.name()).or_default() += 1;
        writeln!(
            runs,
            "{k}\t{}\t{run}\t{}\t{asked}\t{answered}",
            workflow_of(*i),
            end.name()
        )?;
        if *end != End::Right {
            let detail = match end {
                End::Wrong(d)
                | End::Lost(d)
                | End::Stalled(d)
                | End::Failed(d)
                | End::Refused(d)
                | End::Other(d) => d.as_str(),
                End::Right => "",
            };
            writeln!(
                problems,
                "{}\t{}\t{k}\t{}",
                end.name(),
                workflow_of(*i),
                detail.replace('\n', " ")
            )?;
        }
    }
    // Runs per key: the engine's run list (its read model, which can miss a run written just
    // before a crash) with each run this client holds and got a result from.
    let (mut dup_runs, mut missing_runs, mut unlisted, mut engine_total) = (0, 0, 0, 0usize);
    let engine_read = match &engine_runs {
        Ok(per_key) => {
            for (k, _, end, _) in ends.values() {
                let listed = per_key.get(k).copied().unwrap_or(0);
                let n = if listed == 0 && *end == End::Right {
                    unlisted += 1;
                    1
                } else {
                    listed
                };
                engine_total += n;
                match n {
                    0 => missing_runs += 1,
                    1 => {}
                    _ => dup_runs += 1,
                }
            }
            "read".to_string()
        }
        Err(e) => format!("unread ({e})"),
    };
    let tasks_expected: usize = (0..o.runs)
        .map(|i| if workflow_of(i) == DAG { 2 } else { 1 })
        .sum();
    let executed: usize = execs.values().sum();
    let extra: usize = execs.values().map(|n| n.saturating_sub(1)).sum();
    let c = |n: &str| counts.get(n).copied().unwrap_or(0);
    println!(
        "chaos summary: runs {} right {} wrong {} lost {} stalled by the engine {} failed {} refused {} errors {} | engine runs {} ({engine_read}; {} not in its run list) duplicate keys {} keys without a run {} | executions {} for {} tasks, beyond one {} | trigger sends {} re-sent {} | reconnects {:?} | {:.1}s",
        o.runs,
        c("right"),
        c("wrong"),
        c("lost"),
        c("stalled"),
        c("failed"),
        c("refused"),
        c("error"),
        engine_total,
        unlisted,
        dup_runs,
        missing_runs,
        executed,
        tasks_expected,
        extra,
        *sends.lock(),
        *retriggers.lock(),
        rt.reconnects()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{}={n}", k.as_str()))
            .collect::<Vec<_>>(),
        awaited.as_secs_f64(),
    );
    if extra > 0 {
        let mut f = std::fs::File::create(o.dir.join("extra-executions.tsv"))?;
        for ((task, k), n) in execs.iter().filter(|(_, n)| **n > 1) {
            writeln!(f, "{task}\t{k}\t{n}")?;
        }
    }
    rt.shutdown(Duration::from_secs(2)).await;
    if c("wrong") > 0 || c("lost") > 0 || dup_runs > 0 {
        return Err(format!(
            "the targets are not met: wrong {}, lost {}, duplicate runs {} (see {})",
            c("wrong"),
            c("lost"),
            dup_runs,
            o.dir.join("problems.tsv").display()
        )
        .into());
    }
    Ok(())
}

/// Runs per key at the engine, from the run list filtered by this client's tag.
async fn runs_at_engine(
    rt: &RuntimeHandle,
    tag: &str,
    since: SystemTime,
) -> Result<HashMap<String, usize>, Error> {
    let filter = RunFilter::since(since).metadata("chaos", tag);
    let mut q = RunQuery::new(filter).limit(500);
    let mut per_key: HashMap<String, usize> = HashMap::new();
    loop {
        let page = rt.api().list_runs(&q).await?;
        for row in &page.rows {
            let k = row
                .additional_metadata
                .as_ref()
                .and_then(|m| m["k"].as_str())
                .unwrap_or("?");
            *per_key.entry(k.to_string()).or_default() += 1;
        }
        if !page.has_more() || page.rows.is_empty() {
            return Ok(per_key);
        }
        q = q.next_page();
    }
}

/// Executions per (task, key) of this tag, from `exec.log`.
fn executions(log: &Path, tag: &str) -> Result<BTreeMap<(String, String), usize>, AnyError> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let prefix = format!("{tag}-");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split('\t');
        let (Some(task), Some(k)) = (f.next(), f.next()) else {
            continue;
        };
        if k.starts_with(&prefix) {
            *out.entry((task.to_string(), k.to_string())).or_default() += 1;
        }
    }
    Ok(out)
}

// ---- the proxy -----------------------------------------------------------------------------

/// What the proxy's open connections are told: freeze (stop moving bytes) or drop.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Order {
    Pass,
    Freeze(u64),
    Drop(u64),
}

async fn proxy(listen: &str, upstream: &str, freeze_for: Duration) -> Result<(), AnyError> {
    use tokio::signal::unix::{SignalKind, signal};
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!(
        "chaos proxy {} -> {upstream} (pid {})",
        listener.local_addr()?,
        std::process::id()
    );
    let (tx, rx) = tokio::sync::watch::channel(Order::Pass);
    // Connection ids grow: an order names the newest id it covers, so connections made after it
    // pass.
    let newest = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (mut usr1, mut usr2) = (
        signal(SignalKind::user_defined1())?,
        signal(SignalKind::user_defined2())?,
    );
    let (tx2, newest2) = (tx.clone(), newest.clone());
    tokio::spawn(async move {
        loop {
            let upto = newest2.load(std::sync::atomic::Ordering::SeqCst);
            tokio::select! {
                Some(()) = usr1.recv() => {
                    eprintln!("chaos proxy: freezing connections up to #{upto} for {freeze_for:?}");
                    let _ = tx2.send(Order::Freeze(upto));
                    tokio::time::sleep(freeze_for).await;
                    eprintln!("chaos proxy: dropping the frozen connections");
                    let _ = tx2.send(Order::Drop(upto));
                }
                Some(()) = usr2.recv() => {
                    eprintln!("chaos proxy: dropping connections up to #{upto}");
                    let _ = tx2.send(Order::Drop(upto));
                }
                else => return,
            }
        }
    });
    loop {
        let (down, _) = listener.accept().await?;
        let id = newest.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let upstream = upstream.to_string();
        let rx = rx.clone();
        tokio::spawn(async move {
            let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                return;
            };
            let _ = down.set_nodelay(true);
            let _ = up.set_nodelay(true);
            pipe(down, up, rx, id).await;
        });
    }
}

/// Moves bytes both ways until either side closes or an order covering `id` drops it; a freeze
/// covering `id` stops reading on both sides (the peers see a silent, open link).
async fn pipe(
    down: tokio::net::TcpStream,
    up: tokio::net::TcpStream,
    mut orders: tokio::sync::watch::Receiver<Order>,
    id: u64,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (mut dr, mut dw) = down.into_split();
    let (mut ur, mut uw) = up.into_split();
    let (mut b1, mut b2) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let covers = |o: Order| match o {
        Order::Pass => (false, false),
        Order::Freeze(upto) => (id <= upto, false),
        Order::Drop(upto) => (false, id <= upto),
    };
    loop {
        let (frozen, dropped) = covers(*orders.borrow_and_update());
        if dropped {
            return;
        }
        if frozen {
            if orders.changed().await.is_err() {
                return;
            }
            continue;
        }
        tokio::select! {
            r = dr.read(&mut b1) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => if uw.write_all(&b1[..n]).await.is_err() { return },
            },
            r = ur.read(&mut b2) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => if dw.write_all(&b2[..n]).await.is_err() { return },
            },
            c = orders.changed() => if c.is_err() { return },
        }
    }
}
