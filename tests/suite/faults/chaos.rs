//! Chaos: a TCP fault proxy (written here) between the runtime and the development engine cuts,
//! stalls (half-open), delays and resets connections while a worker and a client work through a
//! fixed number of operations. After each scenario: every awaited result arrived exactly once,
//! no trigger ran twice (engine-side counts), no caller waited past its deadline, and nothing is
//! left running after shutdown.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hatchet_dev_engine::DevEngine;
use hatchet_runtime::config::{ClientConfig, TlsStrategy};
use hatchet_runtime::{
    Context, RuntimeOptions, TaskError, TriggerOptions, WorkerOptions, Workflow,
};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Pass,
    /// Hold every byte of the connections open now (half-open); new connections pass.
    Stall(u64),
    /// Delay each chunk.
    Delay(Duration),
}

/// Open proxied connections, by accept order.
type Conns = Arc<Mutex<Vec<(u64, JoinHandle<()>)>>>;

struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<(Mode, u64)>,
    conns: Conns,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (mode, _) = watch::channel((Mode::Pass, 0u64));
        let conns: Conns = Arc::default();
        let (m, c) = (mode.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            let mut id = 0u64;
            while let Ok((down, _)) = listener.accept().await {
                id += 1;
                let Ok(up) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let rx = m.subscribe();
                let task = tokio::spawn(pipe(down, up, rx, id));
                c.lock().push((id, task));
            }
        });
        Proxy {
            addr,
            mode,
            conns,
            accept,
        }
    }

    fn set(&self, mode: Mode) {
        let generation = self
            .conns
            .lock()
            .iter()
            .map(|(id, _)| *id)
            .max()
            .unwrap_or(0);
        let mode = match mode {
            Mode::Stall(_) => Mode::Stall(generation),
            m => m,
        };
        self.mode.send_replace((mode, generation));
    }

    /// Resets every connection (RST: linger 0), mid-message or not.
    fn cut(&self) {
        for (_, t) in self.conns.lock().drain(..) {
            t.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn pipe(down: TcpStream, up: TcpStream, rx: watch::Receiver<(Mode, u64)>, id: u64) {
    // Linger 0: dropping the sockets sends RST (a reset, not a clean close). A zero linger never
    // blocks, which is what tokio's deprecation warns about.
    #[allow(deprecated)]
    {
        let _ = down.set_linger(Some(Duration::ZERO));
        let _ = up.set_linger(Some(Duration::ZERO));
    }
    let (dr, dw) = down.into_split();
    let (ur, uw) = up.into_split();
    let a = pump(dr, uw, rx.clone(), id);
    let b = pump(ur, dw, rx, id);
    tokio::select! {
        _ = a => {}
        _ = b => {}
    }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<(Mode, u64)>,
    id: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        loop {
            let (mode, _) = *rx.borrow_and_update();
            match mode {
                Mode::Stall(upto) if id <= upto => {
                    // Half-open: hold the bytes, send nothing, close nothing.
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
                Mode::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                _ => break,
            }
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn config_via(engine: &DevEngine, proxy: &Proxy) -> ClientConfig {
    ClientConfig::builder()
        .token(engine.client_config().env_lines()[0].1.clone())
        .host_port(proxy.addr.to_string())
        .tls_strategy(TlsStrategy::None)
        .build()
        .expect("config")
}

/// Executions per input key, counted in the handler (where a duplicate would happen).
type Executions = Arc<Mutex<HashMap<String, u32>>>;

fn workflow(executions: Executions) -> Workflow {
    Workflow::new("chaos")
        .task("t", move |i: Value, _c: Context| {
            let executions = executions.clone();
            async move {
                let key = i["key"].as_str().unwrap_or("?").to_string();
                *executions.lock().entry(key).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, TaskError>(i)
            }
        })
        .idempotency("input.key", Duration::from_secs(3600))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cuts_delays_stalls_and_resets_lose_nothing_and_run_nothing_twice() {
    const OPS: usize = 150;
    const DEADLINE: Duration = Duration::from_secs(60);
    let engine = crate::support::engine().await;
    // A START lost in a cut: the real engine leaves that attempt to run out its timeout (60 s,
    // then a retry), which this test's deadline would have to absorb. The fault has the engine
    // offer it again at once, so the test checks what it is about: the runtime loses nothing
    // and runs nothing twice (a worker that did get the START ignores the copy).
    engine.reoffer_unanswered_assignments(true);
    let proxy = Proxy::start(engine.grpc_addr()).await;
    let rt = crate::support::runtime_from(config_via(&engine, &proxy), RuntimeOptions::new()).await;
    let executions: Executions = Arc::default();
    rt.register(workflow(executions.clone()))
        .await
        .expect("register");
    rt.start_worker(WorkerOptions::new("chaos", 32))
        .await
        .expect("start");

    let results: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let late: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut ops = Vec::new();
    for k in 0..OPS {
        let (rt, results, late) = (rt.clone(), results.clone(), late.clone());
        ops.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(k as u64 * 30)).await;
            let started = Instant::now();
            let opts = TriggerOptions::new()
                .idempotent()
                .timeout(Duration::from_secs(30));
            // The trigger is idempotent (the workflow's key), so the caller may repeat it
            // itself when the runtime gives up on it: the engine answers with the same run.
            // The runtime stops early when the retry budget is spent (a burst of cuts makes
            // more retries than 10/s + 10%), which is the budget doing its job.
            let mut tries = 0;
            let h = loop {
                tries += 1;
                match rt
                    .run_no_wait_with("chaos", &json!({"key": format!("op-{k}")}), opts.clone())
                    .await
                {
                    Ok(h) => break h,
                    Err(e)
                        if tries < 20
                            && matches!(
                                e.outcome(),
                                hatchet_runtime::Outcome::BudgetExhausted
                                    | hatchet_runtime::Outcome::Exhausted
                                    | hatchet_runtime::Outcome::DeadlineExceeded
                            ) =>
                    {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => panic!("idempotent trigger fails after {tries} tries: {e}"),
                }
            };
            // Every fifth run has a second waiter: a double delivery would show in the count.
            let waiters = if k % 5 == 0 { 2 } else { 1 };
            let outs =
                futures::future::join_all((0..waiters).map(|_| h.result_within::<Value>(DEADLINE)))
                    .await;
            if started.elapsed() > DEADLINE + Duration::from_secs(31) {
                late.lock().push(started.elapsed());
            }
            for r in outs {
                let out = r.expect("every result arrives");
                // Counted from the payload: a wrong waiter's payload counts for its own run.
                let key = out["key"].as_str().unwrap_or_default().to_string();
                *results.lock().entry(key).or_default() += 1;
            }
        }));
    }
    // Faults, chosen by a seeded RNG.
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..400))).await;
        match rng.random_range(0..4) {
            0 => proxy.cut(),
            1 => {
                proxy.set(Mode::Delay(Duration::from_millis(rng.random_range(5..40))));
                tokio::time::sleep(Duration::from_millis(300)).await;
                proxy.set(Mode::Pass);
            }
            2 => {
                proxy.set(Mode::Stall(0));
                tokio::time::sleep(Duration::from_millis(300)).await;
                proxy.cut(); // a stall that ends in a reset
                proxy.set(Mode::Pass);
            }
            _ => {
                proxy.set(Mode::Pass);
                proxy.cut();
            }
        }
    }
    proxy.set(Mode::Pass);
    for op in ops {
        op.await.expect("operation task");
    }
    {
        let results = results.lock();
        assert_eq!(results.len(), OPS, "every result arrived");
        let expected: std::collections::HashMap<String, u32> = (0..OPS)
            .map(|k| (format!("op-{k}"), if k % 5 == 0 { 2 } else { 1 }))
            .collect();
        assert_eq!(
            *results, expected,
            "each waiter got its own result once, counted from the payloads"
        );
        let executions = executions.lock();
        assert_eq!(executions.len(), OPS, "every operation executed");
        let twice: Vec<_> = executions.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "executed more than once: {twice:?}");
    }
    assert_eq!(
        engine.runs_by_workflow("chaos"),
        OPS,
        "no trigger ran twice"
    );
    assert!(
        late.lock().is_empty(),
        "no caller waited past its deadline: {:?}",
        late.lock()
    );
    let metrics = tokio::runtime::Handle::current().metrics();
    rt.shutdown(Duration::from_secs(2)).await;
    drop(rt);
    drop(proxy);
    let before_engine_drop = metrics.num_alive_tasks();
    drop(engine);
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = metrics.num_alive_tasks();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        left, 0,
        "nothing left running after shutdown ({before_engine_drop} before the engine was dropped)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_is_detected_by_keepalive_and_work_completes() {
    let engine = crate::support::engine().await;
    // A START lost in a cut: the real engine leaves that attempt to run out its timeout (60 s,
    // then a retry), which this test's deadline would have to absorb. The fault has the engine
    // offer it again at once, so the test checks what it is about: the runtime loses nothing
    // and runs nothing twice (a worker that did get the START ignores the copy).
    engine.reoffer_unanswered_assignments(true);
    let proxy = Proxy::start(engine.grpc_addr()).await;
    let rt = crate::support::runtime_from(config_via(&engine, &proxy), RuntimeOptions::new()).await;
    rt.register(workflow(Arc::default()))
        .await
        .expect("register");
    rt.start_worker(WorkerOptions::new("half-open", 8))
        .await
        .expect("start");
    let _: Value = rt
        .run("chaos", &json!({"key": "warm-up"}))
        .await
        .expect("works before");
    // Freeze the live connection without closing it.
    let frozen_at = Instant::now();
    proxy.set(Mode::Stall(0));
    let opts = TriggerOptions::new().idempotent();
    let h = rt
        .run_no_wait_with("chaos", &json!({"key": "after-freeze"}), opts)
        .await
        .expect("the trigger goes through a new connection");
    let out: Value = h
        .result_within(Duration::from_secs(60))
        .await
        .expect("completes");
    assert_eq!(out["key"], "after-freeze");
    let took = frozen_at.elapsed();
    assert!(
        took <= Duration::from_secs(45),
        "work assigned after the freeze completed in {took:?} (target 45 s)"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}
