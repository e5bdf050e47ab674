//! The workflow-runs listener: one shared `SubscribeToWorkflowRuns` stream, a run-id waiter
//! registry, exactly-once delivery per waiter, and a polling fallback (CONTRACT.md §4).
//!
//! # Invariants
//!
//! 1. A waiter is delivered at most once: delivery removes it from the registry under the lock,
//!    whichever path (stream, poll, shutdown) gets there first.
//! 2. Delivery is a one-shot send: a slow or abandoned waiter cannot stall the stream.
//! 3. Registering a waiter while a stream is published sends the id on it (under the registry
//!    lock); otherwise the id is replayed when the next stream is published.
//! 4. While waiters are pending the reconnect delay is capped at 5 s; after 30 s without a stream
//!    the waiters are also polled with GetRunDetails every 2 s, until the stream returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use rand::SeedableRng as _;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::health::HealthReporter;
use super::reconnect::{self, Next, ReconnectState, StreamEnd};
use super::{ListenerCtx, end_of};
use crate::error::{Cause, Error, Outcome};
use crate::proto::{self, v1};

/// Without a stream for this long, waiters are polled (CONTRACT.md §4).
pub const POLL_AFTER: Duration = Duration::from_secs(30);
/// Poll interval of the fallback.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// What a waiter receives.
pub type RunOutcome = Result<proto::WorkflowRunEvent, Error>;

type Sink = mpsc::UnboundedSender<proto::SubscribeToWorkflowRunsRequest>;

#[derive(Default)]
struct Inner {
    waiters: HashMap<String, Vec<(u64, oneshot::Sender<RunOutcome>)>>,
    sink: Option<(u64, Sink)>,
    closed: bool,
}

/// The waiter registry. Outlives listener restarts.
#[derive(Default)]
pub struct RunRegistry {
    inner: Mutex<Inner>,
    next_waiter: AtomicU64,
    delivered: AtomicU64,
    /// Stream generations, here so a restarted listener never reuses one (an old reader's
    /// `unpublish` must not clear a newer stream).
    generations: AtomicU64,
}

impl std::fmt::Debug for RunRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRegistry")
            .field("pending_runs", &self.pending_runs())
            .finish()
    }
}

fn request(id: &str) -> proto::SubscribeToWorkflowRunsRequest {
    proto::SubscribeToWorkflowRunsRequest {
        workflow_run_id: id.to_string(),
    }
}

impl RunRegistry {
    /// Adds a waiter for `run_id`. Returns its id, the receiver, and whether a stream must be
    /// (re)armed (no stream published).
    pub fn add(&self, run_id: &str) -> Result<(u64, oneshot::Receiver<RunOutcome>, bool), Error> {
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut g = self.inner.lock();
        if g.closed {
            return Err(Error::closed("wait for run").with_run_id(run_id));
        }
        let list = g.waiters.entry(run_id.to_string()).or_default();
        let first = list.is_empty();
        list.push((id, tx));
        let mut need_stream = true;
        if let Some((_, sink)) = &g.sink {
            need_stream = false;
            if first && sink.send(request(run_id)).is_err() {
                need_stream = true;
            }
        }
        Ok((id, rx, need_stream))
    }

    /// Removes one waiter (its caller gave up).
    pub fn remove(&self, run_id: &str, waiter: u64) {
        let mut g = self.inner.lock();
        if let Some(list) = g.waiters.get_mut(run_id) {
            list.retain(|(w, _)| *w != waiter);
            if list.is_empty() {
                g.waiters.remove(run_id);
            }
        }
    }

    /// Delivers a finished run to all its waiters (once: they are removed).
    pub fn deliver(&self, ev: proto::WorkflowRunEvent) {
        let list = self.inner.lock().waiters.remove(&ev.workflow_run_id);
        if let Some(mut list) = list {
            self.delivered
                .fetch_add(list.len() as u64, Ordering::Relaxed);
            let last = list.pop();
            for (_, tx) in list {
                let _ = tx.send(Ok(ev.clone()));
            }
            if let Some((_, tx)) = last {
                let _ = tx.send(Ok(ev));
            }
        }
    }

    /// Fails every waiter with `make(run_id)` and refuses new ones when `close`.
    pub fn fail_all(&self, close: bool, make: impl Fn(&str) -> Error) {
        let all: Vec<_> = {
            let mut g = self.inner.lock();
            g.closed |= close;
            g.sink = None;
            g.waiters.drain().collect()
        };
        for (run, list) in all {
            for (_, tx) in list {
                let _ = tx.send(Err(make(&run)));
            }
        }
    }

    /// Publishes a stream's sink after queueing every pending id on it (replay before publish).
    fn publish(&self, generation: u64, sink: Sink) -> usize {
        let mut g = self.inner.lock();
        let mut n = 0;
        for id in g.waiters.keys() {
            if sink.send(request(id)).is_ok() {
                n += 1;
            }
        }
        g.sink = Some((generation, sink));
        n
    }

    fn unpublish(&self, generation: u64) {
        let mut g = self.inner.lock();
        if g.sink.as_ref().is_some_and(|(s, _)| *s == generation) {
            g.sink = None;
        }
    }

    /// A fresh stream generation.
    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Run ids with at least one waiter.
    pub fn pending_runs(&self) -> usize {
        self.inner.lock().waiters.len()
    }

    /// Waiters delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    fn pending_ids(&self) -> Vec<String> {
        self.inner.lock().waiters.keys().cloned().collect()
    }

    fn has_waiters(&self) -> bool {
        !self.inner.lock().waiters.is_empty()
    }
}

/// Messages of the runs listener.
#[derive(Debug)]
pub enum RunsMsg {
    /// Someone is waiting and no stream is published: open one if none is opening.
    Ensure,
    /// A stream of generation `generation` ended.
    Ended {
        /// Generation.
        generation: u64,
        /// How it ended.
        end: StreamEnd,
        /// Whether it made progress.
        progressed: bool,
        /// The error text.
        error: String,
    },
    /// The backoff for generation `generation` elapsed.
    Reconnect(u64),
    /// Poll the pending runs (fallback).
    Poll,
    /// Test hook: panic inside the actor.
    Crash,
}

/// The listener's arguments (kept by the supervisor across restarts).
#[derive(Clone)]
pub struct RunsArgs {
    /// Shared context.
    pub ctx: ListenerCtx,
    /// The registry.
    pub registry: Arc<RunRegistry>,
    /// Health.
    pub health: Arc<HealthReporter>,
}

/// The actor's state.
pub struct RunsState {
    args: RunsArgs,
    generation: u64,
    /// Whether a stream is open or opening.
    active: bool,
    reconnect: ReconnectState,
    down_since: Option<Instant>,
    polling: bool,
    rng: rand::rngs::StdRng,
}

/// The workflow-runs listener actor.
#[derive(Debug, Clone, Copy)]
pub struct RunsListener;

impl RunsListener {
    fn open(myself: &ActorRef<RunsMsg>, st: &mut RunsState) {
        st.generation = st.args.registry.next_generation();
        st.active = true;
        let generation = st.generation;
        let args = st.args.clone();
        let me = myself.clone();
        args.health.connecting();
        tokio::spawn(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let replayed = args.registry.publish(generation, tx);
            let started = Instant::now();
            let mut client = args.ctx.dispatcher();
            let opened = tokio::select! {
                r = client.subscribe_to_workflow_runs(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)) => r,
                _ = args.ctx.lifecycle.cancelled() => return,
            };
            let mut progressed = false;
            let result = match opened {
                Err(s) => Err(s),
                Ok(resp) => {
                    tracing::debug!(generation, replayed, "workflow-runs stream published");
                    args.health.connected();
                    let mut stream = resp.into_inner();
                    loop {
                        let msg = tokio::select! {
                            m = stream.message() => m,
                            _ = args.ctx.lifecycle.cancelled() => return,
                        };
                        match msg {
                            Ok(Some(ev)) => {
                                progressed = true;
                                args.registry.deliver(ev);
                            }
                            Ok(None) => break Ok(()),
                            Err(s) => break Err(s),
                        }
                    }
                }
            };
            args.registry.unpublish(generation);
            let progressed = progressed || started.elapsed() >= reconnect::HEALTHY_STREAM;
            let error = match &result {
                Ok(()) => "stream ended (EOF)".to_string(),
                Err(s) => format!("{:?}: {}", s.code(), s.message()),
            };
            let _ = me.cast(RunsMsg::Ended {
                generation,
                end: end_of(&result),
                progressed,
                error,
            });
        });
    }
}

impl Actor for RunsListener {
    type Msg = RunsMsg;
    type State = RunsState;
    type Arguments = RunsArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RunsMsg>,
        args: RunsArgs,
    ) -> Result<RunsState, ActorProcessingErr> {
        let mut st = RunsState {
            args,
            generation: 0,
            active: false,
            reconnect: ReconnectState::default(),
            down_since: None,
            polling: false,
            rng: rand::rngs::StdRng::from_rng(&mut rand::rng()),
        };
        // A restarted listener re-arms at once if waiters survived.
        if st.args.registry.has_waiters() {
            Self::open(&myself, &mut st);
        }
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<RunsMsg>,
        msg: RunsMsg,
        st: &mut RunsState,
    ) -> Result<(), ActorProcessingErr> {
        if st.args.ctx.lifecycle.is_cancelled() {
            return Ok(());
        }
        match msg {
            RunsMsg::Ensure => {
                if !st.active {
                    Self::open(&myself, st);
                }
            }
            RunsMsg::Ended {
                generation,
                end,
                progressed,
                error,
            } => {
                if generation != st.generation {
                    return Ok(()); // invariant 1: an older generation cannot act
                }
                st.active = false;
                let wanted = st.args.registry.has_waiters();
                let alive = !st.args.ctx.lifecycle.is_cancelled();
                match reconnect::decide(
                    &mut st.reconnect,
                    end,
                    progressed,
                    wanted,
                    alive,
                    &st.args.ctx.backoff.waiters,
                    &mut st.rng,
                ) {
                    Next::Reconnect { delay, attempt } => {
                        st.args.health.reconnecting(attempt, &error);
                        let since = *st.down_since.get_or_insert_with(Instant::now);
                        super::later(
                            &st.args.ctx.lifecycle,
                            delay,
                            &myself,
                            RunsMsg::Reconnect(generation),
                        );
                        if !st.polling {
                            st.polling = true;
                            let wait = st
                                .args
                                .ctx
                                .backoff
                                .poll_after
                                .saturating_sub(since.elapsed());
                            super::later(&st.args.ctx.lifecycle, wait, &myself, RunsMsg::Poll);
                        }
                    }
                    Next::Idle => {
                        st.down_since = None;
                        st.args.health.idle();
                    }
                    Next::Stop { reason } => {
                        st.args.health.stopped(Some(format!("{reason}: {error}")));
                        st.args.registry.fail_all(false, |run| {
                            Error::new(Outcome::Rejected, "/Dispatcher/SubscribeToWorkflowRuns")
                                .with_detail(format!("the result stream stopped ({reason}: {error}); the run was triggered"))
                                .with_run_id(run)
                        });
                    }
                }
            }
            RunsMsg::Reconnect(generation) => {
                if generation == st.generation && !st.active {
                    if st.args.registry.has_waiters() {
                        Self::open(&myself, st);
                    } else {
                        st.args.health.idle();
                    }
                }
            }
            RunsMsg::Poll => {
                let down = st.down_since.is_some_and(|_| {
                    !matches!(
                        st.args.health.get(),
                        super::health::ListenerState::Connected { .. }
                    )
                });
                if !down || !st.args.registry.has_waiters() {
                    st.polling = false;
                    st.down_since = None;
                    return Ok(());
                }
                let args = st.args.clone();
                tokio::spawn(async move { poll_once(&args).await });
                super::later(
                    &st.args.ctx.lifecycle,
                    st.args.ctx.backoff.poll_every,
                    &myself,
                    RunsMsg::Poll,
                );
            }
            RunsMsg::Crash => panic!("runs listener crash requested by a test"),
        }
        Ok(())
    }
}

/// One polling pass: GetRunDetails for every pending run; finished ones are delivered.
async fn poll_once(args: &RunsArgs) {
    for run_id in args.registry.pending_ids() {
        let mut client = args.ctx.admin();
        let mut req = tonic::Request::new(v1::GetRunDetailsRequest {
            external_id: run_id.clone(),
        });
        req.set_timeout(
            args.ctx
                .backoff
                .poll_every
                .max(std::time::Duration::from_secs(1)),
        );
        let Ok(resp) = client.get_run_details(req).await else {
            return;
        };
        let d = resp.into_inner();
        if d.done {
            args.registry.deliver(event_from_details(&run_id, d));
        }
    }
}

/// Builds the `WorkflowRunEvent` a finished run's details describe.
pub fn event_from_details(run_id: &str, d: v1::GetRunDetailsResponse) -> proto::WorkflowRunEvent {
    let mut results: Vec<proto::StepRunResult> = d
        .task_runs
        .into_iter()
        .map(|(name, t)| proto::StepRunResult {
            task_run_external_id: t.external_id.clone(),
            task_name: name,
            job_run_id: t.external_id,
            error: t.error,
            output: t.output.map(|o| String::from_utf8_lossy(&o).into_owned()),
        })
        .collect();
    results.sort_by(|a, b| a.task_name.cmp(&b.task_name));
    proto::WorkflowRunEvent {
        workflow_run_id: run_id.to_string(),
        event_type: proto::WorkflowRunEventType::Finished as i32,
        event_timestamp: None,
        results,
    }
}

/// The error a waiter gets when the runtime shuts down.
pub fn closed_error(run_id: &str) -> Error {
    Error::closed("wait for run").with_run_id(run_id)
}

/// Turns a run's result into its outputs or its error.
pub fn outputs_of(
    run_id: &str,
    ev: &proto::WorkflowRunEvent,
) -> Result<serde_json::Map<String, serde_json::Value>, Error> {
    if let Some(err) = ev.results.iter().find_map(|r| r.error.clone()) {
        return Err(Error::new(Outcome::Rejected, "run")
            .with_detail(format!("the run failed: {err}"))
            .with_run_id(run_id));
    }
    let mut out = serde_json::Map::new();
    for r in &ev.results {
        let v = match r.output.as_deref() {
            None | Some("") => serde_json::Value::Null,
            Some(o) => serde_json::from_str(o).map_err(|e| {
                Error::new(Outcome::Rejected, "run")
                    .with_detail(format!(
                        "task {} returned output that is not JSON",
                        r.task_name
                    ))
                    .with_cause(Cause::Json(e))
                    .with_run_id(run_id)
            })?,
        };
        out.insert(r.task_name.clone(), v);
    }
    Ok(out)
}
