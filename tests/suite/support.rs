//! What every suite shares: our engine and a runtime on it, waits that poll what they wait for,
//! and counters. One place, so a wait reads the same everywhere and its bound is set once (long
//! enough for the real engine). The suites that run on both engines reach the real one through
//! `conformance.rs`'s `Target`; the faults our engine can inject are its own switches
//! (`DevEngine`'s methods), the network's are `chaos.rs`'s proxy.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use hatchet_dev_engine::{DevEngine, DevEngineOptions};
use hatchet_runtime::config::ClientConfig;
use hatchet_runtime::health::{ListenerKind, ListenerState};
use hatchet_runtime::retries::{Backoff, StreamBackoff};
use hatchet_runtime::{
    Context, Runtime, RuntimeHandle, RuntimeOptions, TaskError, TaskOptions, Workflow,
};
use serde_json::Value;

/// How long a wait polls before it fails the test (the real engine's slowest writes fit).
const WAIT: Duration = Duration::from_secs(90);

/// The echo workflow every suite shares: one task, `t`, that answers its input.
pub(crate) fn echo() -> Workflow {
    echo_with(TaskOptions::new())
}

/// The echo workflow with its task's options.
pub(crate) fn echo_with(opts: TaskOptions) -> Workflow {
    Workflow::new("echo").task_with("t", opts, |i: Value, _c: Context| async move {
        Ok::<_, TaskError>(i)
    })
}

/// Our engine, with the real engine's behaviour (the default options).
pub(crate) async fn engine() -> DevEngine {
    engine_with(DevEngineOptions::default()).await
}

/// Our engine with `opts`.
pub(crate) async fn engine_with(opts: DevEngineOptions) -> DevEngine {
    DevEngine::start(opts)
        .await
        .expect("the development engine starts")
}

/// A runtime on `engine`, with the default options.
pub(crate) async fn runtime(engine: &DevEngine) -> RuntimeHandle {
    runtime_with(engine, RuntimeOptions::new()).await
}

/// A runtime on `engine` with `opts`.
pub(crate) async fn runtime_with(engine: &DevEngine, opts: RuntimeOptions) -> RuntimeHandle {
    runtime_from(engine.client_config(), opts).await
}

/// A runtime from `config` (a proxy's address, a changed limit, the real engine's) with `opts`.
pub(crate) async fn runtime_from(config: ClientConfig, opts: RuntimeOptions) -> RuntimeHandle {
    Runtime::spawn_with(config, opts)
        .await
        .expect("the runtime spawns")
}

/// Our engine and a runtime on it, both with the default options.
pub(crate) async fn engine_and_runtime() -> (DevEngine, RuntimeHandle) {
    let engine = engine().await;
    let rt = runtime(&engine).await;
    (engine, rt)
}

/// Polls `cond` every 10 ms until it holds; fails the test after 90 s naming `what`.
pub(crate) async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let polls = WAIT.as_millis() / 10;
    for _ in 0..polls {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Polls an async read every 100 ms until `cond` holds on what it read, and returns that; fails
/// the test after 90 s naming `what` and the last read.
pub(crate) async fn until_read<T: std::fmt::Debug, F, Fut>(
    what: &str,
    mut read: F,
    cond: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut last = None;
    for _ in 0..WAIT.as_millis() / 100 {
        let v = read().await;
        if cond(&v) {
            return v;
        }
        last = Some(v);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}; last read: {last:?}");
}

/// Waits (at most 10 s: a listener's state changes on ours only) until `kind`'s health satisfies
/// `pred`, woken by each change rather than polling.
pub(crate) async fn until_listener(
    rt: &RuntimeHandle,
    kind: ListenerKind,
    pred: impl Fn(&ListenerState) -> bool,
) {
    let mut rx = rt.health()[&kind].clone();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !pred(&rx.borrow_and_update()) {
            let _ = rx.changed().await;
        }
    })
    .await
    .expect("the state arrives in time");
}

/// A counter to count where something happens (executions in a handler, say).
pub(crate) fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

/// Reconnect backoff scaled down 100x, so attempt-counting tests run in well under a second.
pub(crate) fn fast() -> StreamBackoff {
    let ms = Duration::from_millis;
    StreamBackoff::new()
        .stream(Backoff {
            base: ms(10),
            factor: 2,
            cap: ms(300),
        })
        .waiters(Backoff {
            base: ms(10),
            factor: 2,
            cap: ms(50),
        })
        .poll_after(ms(300))
        .poll_every(ms(100))
}

/// Whether a listener stopped for good, with an error.
pub(crate) fn stopped(s: &ListenerState) -> bool {
    matches!(s, ListenerState::Stopped { error: Some(_) })
}

/// A fault that ends a stream at once with `code` (an engine hanging up a listener).
/// A unary call or a stream's open failing with `code` and `message` (no pushback).
pub(crate) fn fail(code: tonic::Code, message: &str) -> hatchet_dev_engine::Fault {
    hatchet_dev_engine::Fault::Fail {
        code: code as i32,
        message: message.into(),
        pushback_ms: None,
    }
}

/// Starts `rt`'s worker as the suites usually do: named `w`, with `slots` slots.
pub(crate) async fn start_worker(rt: &RuntimeHandle, slots: usize) {
    rt.start_worker(hatchet_runtime::WorkerOptions::new("w", slots))
        .await
        .expect("start");
}

pub(crate) fn end(code: tonic::Code) -> hatchet_dev_engine::Fault {
    hatchet_dev_engine::Fault::EndStream {
        after: 0,
        code: Some(code as i32),
    }
}
