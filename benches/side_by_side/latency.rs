//! Benchmark 7: trigger -> result of a trivial task, one caller, one run at a time, against one
//! in-process engine: (a) the protocol's floor, a client and a worker written directly on the
//! generated stubs with the fewest round trips (TriggerWorkflow; the assignment pushed on
//! ListenV2; SendStepActionEvent COMPLETED; the result pushed on SubscribeToWorkflowRuns);
//! (b) our runtime (`run`, our worker); (c) the official Go SDK and (d) the official Python SDK
//! (each its own client and worker).
//! With `BENCH_ENGINE=real` benchmark 7 runs on the real engine the `HATCHET_CLIENT_*` variables
//! name instead (`scripts/bench_real.sh` starts it): the same four rows, where the engine's
//! PostgreSQL round trips are most of every number.
//! Benchmark 8: cold start, `Runtime::spawn` to the first task executed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hatchet_dev_engine::clients::RawClients;
use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::config::ClientConfig;
use hatchet_runtime::protocol::{self as proto, v1};
use hatchet_runtime::{Context, Runtime, TaskError, WorkerOptions, Workflow};
use serde_json::Value;

use super::{Report, env_num, pct, sdk_baselines};

fn trivial(name: &str) -> Workflow {
    Workflow::new(name).task("t", |_i: Value, _c: Context| async move {
        Ok::<_, TaskError>(Value::Null)
    })
}

/// Where benchmark 7 runs.
pub enum Target {
    /// An in-process development engine (the default).
    Dev(DevEngine),
    /// The real engine the `HATCHET_CLIENT_*` variables name (`BENCH_ENGINE=real`).
    Real {
        config: ClientConfig,
        raw: RawClients,
    },
}

impl Target {
    /// The real engine when `BENCH_ENGINE=real`, else a fresh development engine.
    async fn start() -> Self {
        if std::env::var("BENCH_ENGINE").as_deref() != Ok("real") {
            let engine = DevEngine::start(DevEngineOptions::default())
                .await
                .expect("engine");
            // The runtime's latency, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
            // run ends go out at once. `BENCH_ENGINE=real` measures the real one's.
            engine.status_lag(None);
            return Target::Dev(engine);
        }
        let config = ClientConfig::from_env().unwrap_or_else(|e| {
            panic!("BENCH_ENGINE=real needs the real engine's HATCHET_CLIENT_* variables: {e}")
        });
        let token = std::env::var("HATCHET_CLIENT_TOKEN").unwrap_or_default();
        let raw = RawClients::new(&config.grpc_uri(), &token).expect("raw clients");
        Target::Real { config, raw }
    }

    pub fn config(&self) -> ClientConfig {
        match self {
            Target::Dev(e) => e.client_config(),
            Target::Real { config, .. } => config.clone(),
        }
    }

    fn raw(&self) -> RawClients {
        match self {
            Target::Dev(e) => e.raw_clients().expect("clients"),
            Target::Real { raw, .. } => raw.clone(),
        }
    }

    /// The development engine, whose counters say when a worker listens.
    pub fn dev(&self) -> Option<&DevEngine> {
        match self {
            Target::Dev(e) => Some(e),
            Target::Real { .. } => None,
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Target::Dev(_) => "the development engine, in process",
            Target::Real { .. } => {
                "the real engine (hatchet-engine on PostgreSQL, scripts/real-engine.sh), over loopback"
            }
        }
    }
}

/// A stream being opened in its own task: the first [`Opening::next`] waits for it to open.
enum Opening<S> {
    Pending(tokio::task::JoinHandle<S>),
    Open(S),
}

impl<S: futures::Stream + Unpin + Send + 'static> Opening<S> {
    fn new(open: impl std::future::Future<Output = S> + Send + 'static) -> Self {
        Opening::Pending(tokio::spawn(open))
    }

    async fn next(&mut self) -> Option<S::Item> {
        if let Opening::Pending(h) = self {
            *self = Opening::Open(h.await.expect("the stream's opening task"));
        }
        match self {
            Opening::Open(s) => s.next().await,
            Opening::Pending(_) => None,
        }
    }
}

/// (a): the floor, on the generated stubs. With `started`, (a'): the worker also reports
/// STARTED (as every official SDK's worker does, and as the real engine's task events and
/// `startedAt` need), sent beside the COMPLETED path in a task of its own as ours does.
async fn floor(engine: &Target, runs: usize, started: bool) -> Vec<Duration> {
    let raw = engine.raw();
    raw.admin()
        .put_workflow(v1::CreateWorkflowVersionRequest {
            name: "floor".into(),
            tasks: vec![v1::CreateTaskOpts {
                readable_id: "t".into(),
                action: "floor:t".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .expect("put");
    let worker_id = raw
        .dispatcher()
        .register(proto::WorkerRegisterRequest {
            worker_name: "floor".into(),
            actions: vec!["floor:t".into()],
            slot_config: [("default".to_string(), 4)].into(),
            ..Default::default()
        })
        .await
        .expect("register")
        .into_inner()
        .worker_id;
    // The real engine (grpc-go) sends a stream's response headers with its first message, so
    // opening either stream answers only once the first run is under way: open both aside.
    let mut actions = Opening::new({
        let mut d = raw.dispatcher();
        let req = proto::WorkerListenRequest {
            worker_id: worker_id.clone(),
        };
        async move { d.listen_v2(req).await.expect("listen").into_inner() }
    });
    let mut dispatcher = raw.dispatcher();
    dispatcher
        .heartbeat(proto::HeartbeatRequest {
            worker_id: worker_id.clone(),
            heartbeat_at: None,
        })
        .await
        .expect("heartbeat");
    // The real engine counts a worker without a heartbeat for 5 s as gone.
    let beat = {
        let (mut d, id) = (raw.dispatcher(), worker_id.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                let _ = d
                    .heartbeat(proto::HeartbeatRequest {
                        worker_id: id.clone(),
                        heartbeat_at: None,
                    })
                    .await;
            }
        })
    };
    let (sub_tx, sub_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut results = Opening::new({
        let mut d = raw.dispatcher();
        let req = tokio_stream::wrappers::UnboundedReceiverStream::new(sub_rx);
        async move {
            d.subscribe_to_workflow_runs(req)
                .await
                .expect("subscribe")
                .into_inner()
        }
    });
    let mut workflows = raw.workflows();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let run = workflows
            .trigger_workflow(v1::TriggerWorkflowRequest {
                name: "floor".into(),
                input: "{}".into(),
                ..Default::default()
            })
            .await
            .expect("trigger")
            .into_inner()
            .workflow_run_id;
        let _ = sub_tx.send(proto::SubscribeToWorkflowRunsRequest {
            workflow_run_id: run.clone(),
        });
        let a = tokio::time::timeout(Duration::from_secs(60), actions.next())
            .await
            .expect("the floor's worker got no assignment in 60 s")
            .expect("assignment")
            .expect("assignment ok");
        if started {
            let mut d = raw.dispatcher();
            let ev = proto::StepActionEvent {
                worker_id: worker_id.clone(),
                task_run_external_id: a.task_run_external_id.clone(),
                action_id: a.action_id.clone(),
                event_type: proto::StepActionEventType::StepEventTypeStarted as i32,
                retry_count: Some(a.retry_count),
                ..Default::default()
            };
            tokio::spawn(async move { d.send_step_action_event(ev).await });
        }
        dispatcher
            .send_step_action_event(proto::StepActionEvent {
                worker_id: worker_id.clone(),
                task_run_external_id: a.task_run_external_id.clone(),
                action_id: a.action_id.clone(),
                event_type: proto::StepActionEventType::StepEventTypeCompleted as i32,
                event_payload: "null".into(),
                retry_count: Some(a.retry_count),
                ..Default::default()
            })
            .await
            .expect("completed");
        let wait = async {
            loop {
                let ev = results.next().await.expect("result").expect("result ok");
                if ev.workflow_run_id == run {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("the floor's client got no result in 60 s");
        samples.push(t0.elapsed());
    }
    beat.abort();
    samples
}

/// (b): our runtime, client and worker in one process.
async fn ours(engine: &Target, runs: usize) -> Vec<Duration> {
    let rt = Runtime::spawn(engine.config()).await.expect("runtime");
    rt.register(trivial("ours")).await.expect("register");
    rt.start_worker(WorkerOptions::new("ours", 4))
        .await
        .expect("start");
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        let _: Value = rt.run("ours", &Value::Null).await.expect("run");
        samples.push(t0.elapsed());
    }
    rt.shutdown(Duration::from_secs(1)).await;
    samples
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

pub async fn latency(r: &mut Report, smoke: bool) {
    let engine = Target::start().await;
    let real = engine.dev().is_none();
    let default_runs = match (smoke, real) {
        (true, _) => 5,
        (false, true) => 300,
        (false, false) => 1000,
    };
    let runs = env_num("BENCH_LATENCY_RUNS", default_runs) as usize;
    r.line(&format!(
        "\n## 7. Latency against the protocol floor: trigger -> result of a trivial task, one caller, sequential ({runs} runs each, warm), on {}\n",
        engine.label()
    ));
    // One side alone, for profiling it (`perf stat`/`perf record` on this process):
    // `BENCH_LATENCY_SIDE=floor|floor-started|ours`; prints its p50 and stops.
    if let Ok(side) = std::env::var("BENCH_LATENCY_SIDE") {
        let t0 = Instant::now();
        let s = match side.as_str() {
            "floor" => floor(&engine, runs, false).await,
            "floor-started" => floor(&engine, runs, true).await,
            "ours" => ours(&engine, runs).await,
            other => panic!("BENCH_LATENCY_SIDE is floor, floor-started or ours, not {other:?}"),
        };
        r.line(&format!(
            "{side} alone: {runs} runs in {:.2} s, p50 {}",
            t0.elapsed().as_secs_f64(),
            ms(pct(s, 0.5))
        ));
        return;
    }
    // Warm both paths, then measure them alternately (drift spreads over both).
    let _ = floor(&engine, 20.min(runs), false).await;
    let (mut f, mut fs, mut o) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..2 {
        f.extend(floor(&engine, runs / 2, false).await);
        fs.extend(floor(&engine, runs / 2, true).await);
        o.extend(ours(&engine, runs / 2).await);
    }
    let (f50, f99) = (pct(f.clone(), 0.5), pct(f, 0.99));
    let (o50, o99) = (pct(o.clone(), 0.5), pct(o, 0.99));
    r.line("| path | p50 | p99 | p50 / floor p50 |");
    r.line("|---|---|---|---|");
    r.line(&format!(
        "| (a) floor: generated stubs, fewest round trips | {} | {} | 1.00 |",
        ms(f50),
        ms(f99)
    ));
    let (s50, s99) = (pct(fs.clone(), 0.5), pct(fs, 0.99));
    r.line(&format!(
        "| (a') floor with STARTED: the worker also reports STARTED, beside the handler, as every SDK does | {} | {} | {:.2} |",
        ms(s50),
        ms(s99),
        s50.as_secs_f64() / f50.as_secs_f64().max(1e-9)
    ));
    r.line(&format!(
        "| (b) ours: `run()`, our worker | {} | {} | **{:.2}** (/ (a'): **{:.2}**) |",
        ms(o50),
        ms(o99),
        o50.as_secs_f64() / f50.as_secs_f64().max(1e-9),
        o50.as_secs_f64() / s50.as_secs_f64().max(1e-9)
    ));
    for (name, sdk) in [
        (
            "(c) official Go SDK: `Run()`, its worker",
            sdk_baselines::go_sdk(),
        ),
        (
            "(d) official Python SDK: `aio_run()`, its worker",
            sdk_baselines::python_sdk(),
        ),
    ] {
        let m = match sdk {
            Some(sdk) if !smoke => sdk_baselines::latency(&engine, &sdk, runs.min(300)).await,
            _ => None,
        };
        match m {
            Some((p50, p99)) => r.line(&format!(
                "| {name} | {} | {} | {:.2} (ours / it: **{:.2}**) |",
                ms(p50),
                ms(p99),
                p50.as_secs_f64() / f50.as_secs_f64().max(1e-9),
                o50.as_secs_f64() / p50.as_secs_f64().max(1e-9)
            )),
            None => r.line(&format!(
                "| {name} | not measured: run `scripts/bench.sh` (it sets the Python and the Go binary) | | |"
            )),
        }
    }
    r.line(&format!(
        "\nTargets: ours p50 <= 1.05x the floor and <= 0.7x the Go SDK's; p99 <= 2x our p50 (here {:.2}x).",
        o99.as_secs_f64() / o50.as_secs_f64().max(1e-9)
    ));
}

/// Benchmark 8: `Runtime::spawn` to the first task executed, a fresh runtime each time.
pub async fn cold_start(r: &mut Report, smoke: bool) {
    let tries = env_num("BENCH_COLD_STARTS", if smoke { 2 } else { 20 }) as usize;
    let engine = DevEngine::start(DevEngineOptions::default())
        .await
        .expect("engine");
    // The runtime's cost, not the engine's status lag (1 to 2 s for a new run, as the real engine's):
    // run ends go out at once.
    engine.status_lag(None);
    let mut samples = Vec::with_capacity(tries);
    for i in 0..tries {
        let name = format!("cold-{i}");
        let first = Arc::new(tokio::sync::Notify::new());
        let f2 = first.clone();
        let wf = Workflow::new(&name).task("t", move |_i: Value, _c: Context| {
            f2.notify_one();
            async { Ok::<_, TaskError>(Value::Null) }
        });
        let t0 = Instant::now();
        let rt = Runtime::spawn(engine.client_config())
            .await
            .expect("runtime");
        rt.register(wf).await.expect("register");
        rt.start_worker(WorkerOptions::new(&name, 4))
            .await
            .expect("start");
        let _h = rt.run_no_wait(&name, &Value::Null).await.expect("trigger");
        first.notified().await;
        samples.push(t0.elapsed());
        rt.shutdown(Duration::from_secs(1)).await;
    }
    let (p50, max) = (pct(samples.clone(), 0.5), pct(samples, 1.0));
    r.line(&format!(
        "\n## 8. Cold start: `Runtime::spawn` -> register -> `start_worker` -> trigger -> first task executed (local engine, {tries} fresh runtimes)\n"
    ));
    r.line("| p50 | max | target |");
    r.line("|---|---|---|");
    r.line(&format!("| **{}** | {} | <= 50 ms |", ms(p50), ms(max)));
}
