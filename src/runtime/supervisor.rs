//! The supervision tree: the root supervisor (retry service, stream supervisor, worker) and the
//! stream supervisor (the four listeners).
//!
//! # Invariants
//!
//! 1. Every supervisor overrides `handle_supervisor_evt` (ractor's default stops the supervisor
//!    when a child fails).
//! 2. Children keep their state outside the actor: each listener in its [`Home`] (registry,
//!    generation, reconnect rules), held by [`Listeners`], which outlives the stream supervisor;
//!    the worker in its `WorkerCore`. So a restart loses no waiter, no pending ack and no
//!    workflow definition. Each supervisor owns its children's restart histories in its own
//!    state ([`Intensity`], a table by [`Child`]); a restarted stream supervisor starts a new
//!    table, and the root's limit on the stream supervisor bounds that.
//! 3. A restarted stream supervisor brings back every listener, the worker-actions listener
//!    included once the worker has started (its home is in [`Listeners`], not in the
//!    supervisor's state).
//! 4. Restarts are limited ([`MAX_RESTARTS`] within [`RESTART_WINDOW`], [`restart_allowed`]), per
//!    listener and for every child of the root (the stream supervisor, the worker actor, the
//!    retry service): past the limit the listener is stopped for good, `health()` says why and
//!    each of its waiters fails with that reason, never a silent, deaf listener; a child of the
//!    root past it stays stopped, and what asks it answers [`Outcome::Stopped`](crate::error::Outcome::Stopped)
//!    with the reason, which says to restart the process.
//! 5. After the lifecycle token is cancelled nothing is restarted.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::Error;
use crate::listener::Listeners;
use crate::listener::health::ListenerKind;
use crate::listener::stream::{self, Home, StreamKind};
use crate::retry::RetryReport;
use crate::worker::{WorkerActor, WorkerCore};

/// What the supervisors share: the connection, the listeners' homes, the worker's core, and
/// where the current stream supervisor and worker actor are.
#[derive(Clone)]
pub(crate) struct Tree {
    pub(crate) conn: Connection,
    pub(crate) listeners: Arc<Listeners>,
    pub(crate) worker: Arc<WorkerCore>,
    pub(crate) stream_sup: Arc<Mutex<Option<ActorRef<StreamSupMsg>>>>,
    pub(crate) worker_ref: Arc<Mutex<Option<ActorRef<crate::worker::WorkerMsg>>>>,
    pub(crate) retry_ref: Arc<Mutex<Option<ActorRef<RetryMsg>>>>,
    /// Why a child of the root was stopped for good, by name (invariant 4): read by the handles
    /// that ask it.
    pub(crate) stopped: Arc<Mutex<Option<String>>>,
}

/// Restarts allowed within [`RESTART_WINDOW`] before a child is stopped for good.
pub(crate) const MAX_RESTARTS: usize = 10;
/// The window of the restart intensity limit.
pub(crate) const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// The restart intensity rule, as a pure function: records a restart at `now` and says whether it
/// is allowed (at most `max` within `window`, counting this one).
pub(crate) fn restart_allowed(
    history: &mut VecDeque<Instant>,
    now: Instant,
    max: usize,
    window: Duration,
) -> bool {
    while history
        .front()
        .is_some_and(|t| now.saturating_duration_since(*t) >= window)
    {
        history.pop_front();
    }
    history.push_back(now);
    history.len() <= max
}

/// A supervisor's child, as its restart table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Child {
    RetryService,
    StreamSupervisor,
    Worker,
    Listener(ListenerKind),
}

/// A supervisor's restart table (invariant 4): each child's restarts inside the window, owned by
/// the supervisor's state.
#[derive(Debug, Default)]
pub(crate) struct Intensity(HashMap<Child, VecDeque<Instant>>);

impl Intensity {
    /// Records a restart of `child` now: whether the limit allows it.
    fn allow(&mut self, child: Child) -> bool {
        restart_allowed(
            self.0.entry(child).or_default(),
            Instant::now(),
            MAX_RESTARTS,
            RESTART_WINDOW,
        )
    }
}

impl Tree {
    /// Whether the root's child `child` (`name` in messages) may restart once more
    /// (invariant 4); past the limit it is recorded as stopped for good, with `err`.
    fn child_may_restart(
        &self,
        intensity: &mut Intensity,
        child: Child,
        name: &str,
        err: &dyn std::fmt::Display,
    ) -> bool {
        let allowed = intensity.allow(child);
        if !allowed {
            let why = format!(
                "the {name} failed more than {MAX_RESTARTS} times in {RESTART_WINDOW:?} (last failure: {err}); it is stopped: restart the process",
            );
            tracing::error!("{why}");
            *self.stopped.lock() = Some(why);
        }
        allowed
    }

    /// The error of a call to a child of the root that is gone: stopped for good (with why), or
    /// the runtime closed.
    pub(crate) fn gone(&self, op: &'static str) -> Error {
        match self.stopped.lock().clone() {
            Some(why) => Error::new(crate::error::Outcome::Stopped, op).with_detail(why),
            None => Error::closed(op),
        }
    }
}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree").finish_non_exhaustive()
    }
}

// ======== retry service ========

/// Messages of the retry service.
#[derive(Debug)]
pub(crate) enum RetryMsg {
    /// Whether each endpoint retries, and its budget now.
    Report(RpcReplyPort<RetryReport>),
    /// Turns unary retries (gRPC and REST) off (`false`) or back to the policy; answers the
    /// report after the switch.
    Switch(bool, RpcReplyPort<RetryReport>),
    /// Test and chaos hook: panic inside the retry service.
    #[cfg(feature = "test-hooks")]
    Crash,
}

/// The retry service: owns the policy, budgets, ledger and switch of both endpoints (the
/// connection's retry cores) and answers for them. Calls run in their callers' tasks against
/// those cores (one atomic load for the switch), so the actor never serialises a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryService;

impl Actor for RetryService {
    type Msg = RetryMsg;
    type State = Connection;
    type Arguments = Connection;

    async fn pre_start(
        &self,
        _: ActorRef<RetryMsg>,
        conn: Connection,
    ) -> Result<Connection, ActorProcessingErr> {
        Ok(conn)
    }

    async fn handle(
        &self,
        _: ActorRef<RetryMsg>,
        msg: RetryMsg,
        conn: &mut Connection,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RetryMsg::Report(reply) => {
                let _ = reply.send(conn.retry_report());
            }
            RetryMsg::Switch(on, reply) => {
                conn.grpc_core().switch_off(!on);
                conn.rest_core().switch_off(!on);
                tracing::warn!(
                    retries = on,
                    "unary retries switched {} (RuntimeHandle::set_retries)",
                    if on { "back on" } else { "off" }
                );
                let _ = reply.send(conn.retry_report());
            }
            #[cfg(feature = "test-hooks")]
            RetryMsg::Crash => panic!("retry service crash requested by a test"),
        }
        Ok(())
    }
}

/// Spawns the retry service under `root` and records where it is.
async fn spawn_retry_service(tree: &Tree, root: &ActorCell) -> Result<(), ActorProcessingErr> {
    let (r, _) = Actor::spawn_linked(None, RetryService, tree.conn.clone(), root.clone()).await?;
    *tree.retry_ref.lock() = Some(r);
    Ok(())
}

// ======== stream supervisor ========

/// Messages of the stream supervisor.
#[derive(Debug)]
pub(crate) enum StreamSupMsg {
    /// The worker has started: spawn its actions listener (its home is in [`Listeners`]).
    StartActions,
    /// Test and chaos hook: panic inside the stream supervisor.
    #[cfg(feature = "test-hooks")]
    Crash,
}

/// The stream supervisor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSupervisor;

async fn spawn_listener<K: StreamKind>(
    conn: &Connection,
    home: &Arc<Home<K>>,
    me: &ActorRef<StreamSupMsg>,
) -> Result<(), ActorProcessingErr> {
    if home.token.is_cancelled() {
        return Ok(()); // stopped for good, or shut down: not brought back
    }
    stream::spawn(conn.clone(), home.clone(), Some(me.get_cell())).await?;
    Ok(())
}

fn is<K: StreamKind>(home: &Home<K>, cell: &ActorCell) -> bool {
    home.actor().is_some_and(|a| a.get_id() == cell.get_id())
}

/// Restarts the failed listener `home` within its intensity limit, or stops it for good.
async fn restart<K: StreamKind>(
    conn: &Connection,
    home: &Arc<Home<K>>,
    me: &ActorRef<StreamSupMsg>,
    (intensity, kind): (&mut Intensity, ListenerKind),
    err: &str,
) -> Result<(), ActorProcessingErr> {
    home.count_restart();
    if intensity.allow(Child::Listener(kind)) {
        tracing::error!(
            listener = kind.as_str(),
            error = err,
            "a listener failed; restarting it with its registry"
        );
        spawn_listener(conn, home, me).await
    } else {
        let why = format!(
            "the {} listener failed more than {MAX_RESTARTS} times in {RESTART_WINDOW:?} and was stopped (last failure: {err})",
            kind.as_str(),
        );
        tracing::error!(listener = kind.as_str(), "{why}");
        home.stop_for_good(&why);
        Ok(())
    }
}

/// The stream supervisor's state: the tree it spawns listeners from, and its restart table.
#[derive(Debug)]
pub(crate) struct StreamSupState {
    tree: Tree,
    intensity: Intensity,
}

impl Actor for StreamSupervisor {
    type Msg = StreamSupMsg;
    type State = StreamSupState;
    type Arguments = Tree;

    async fn pre_start(
        &self,
        myself: ActorRef<StreamSupMsg>,
        tree: Tree,
    ) -> Result<StreamSupState, ActorProcessingErr> {
        let l = &tree.listeners;
        spawn_listener(&tree.conn, &l.runs, &myself).await?;
        spawn_listener(&tree.conn, &l.durable, &myself).await?;
        spawn_listener(&tree.conn, &l.events, &myself).await?;
        // Invariant 3: a restarted supervisor brings the worker's listener back too.
        if let Some(actions) = l.actions() {
            spawn_listener(&tree.conn, &actions, &myself).await?;
        }
        Ok(StreamSupState {
            tree,
            intensity: Intensity::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<StreamSupMsg>,
        msg: StreamSupMsg,
        state: &mut StreamSupState,
    ) -> Result<(), ActorProcessingErr> {
        let tree = &state.tree;
        match msg {
            StreamSupMsg::StartActions => {
                if let Some(actions) = tree.listeners.actions()
                    && actions.actor().is_none()
                {
                    spawn_listener(&tree.conn, &actions, &myself).await?;
                }
            }
            #[cfg(feature = "test-hooks")]
            StreamSupMsg::Crash => panic!("stream supervisor crash requested by a test"),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<StreamSupMsg>,
        evt: SupervisionEvent,
        state: &mut StreamSupState,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisionEvent::ActorFailed(cell, err) = evt else {
            return Ok(());
        };
        let StreamSupState { tree, intensity } = state;
        if tree.conn.lifecycle().is_cancelled() {
            return Ok(());
        }
        let err = err.to_string();
        let (conn, l) = (&tree.conn, &tree.listeners);
        if is(&l.runs, &cell) {
            let child = (intensity, ListenerKind::WorkflowRuns);
            restart(conn, &l.runs, &myself, child, &err).await?;
        } else if is(&l.durable, &cell) {
            let child = (intensity, ListenerKind::DurableTask);
            restart(conn, &l.durable, &myself, child, &err).await?;
        } else if is(&l.events, &cell) {
            let child = (intensity, ListenerKind::DurableEvents);
            restart(conn, &l.events, &myself, child, &err).await?;
        } else if let Some(actions) = l.actions()
            && is(&actions, &cell)
        {
            let child = (intensity, ListenerKind::WorkerActions);
            restart(conn, &actions, &myself, child, &err).await?;
        }
        Ok(())
    }
}

// ======== root ========

/// Messages of the root supervisor.
#[derive(Debug)]
pub(crate) enum RootMsg {}

/// The root supervisor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Root;

async fn spawn_stream_supervisor(
    tree: &Tree,
    root: &ActorRef<RootMsg>,
) -> Result<(), ActorProcessingErr> {
    let (s, _) = Actor::spawn_linked(None, StreamSupervisor, tree.clone(), root.get_cell()).await?;
    *tree.stream_sup.lock() = Some(s);
    Ok(())
}

async fn spawn_worker(tree: &Tree, root: &ActorRef<RootMsg>) -> Result<(), ActorProcessingErr> {
    let (w, _) =
        Actor::spawn_linked(None, WorkerActor, tree.worker.clone(), root.get_cell()).await?;
    *tree.worker_ref.lock() = Some(w);
    Ok(())
}

/// The root's state: the tree it spawns its children from, and its restart table.
#[derive(Debug)]
pub(crate) struct RootState {
    tree: Tree,
    intensity: Intensity,
}

impl Actor for Root {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = Tree;

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        tree: Tree,
    ) -> Result<RootState, ActorProcessingErr> {
        spawn_retry_service(&tree, &myself.get_cell()).await?;
        spawn_stream_supervisor(&tree, &myself).await?;
        spawn_worker(&tree, &myself).await?;
        Ok(RootState {
            tree,
            intensity: Intensity::default(),
        })
    }

    async fn handle(
        &self,
        _: ActorRef<RootMsg>,
        msg: RootMsg,
        _: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        evt: SupervisionEvent,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisionEvent::ActorFailed(cell, err) = evt else {
            return Ok(());
        };
        let RootState { tree, intensity } = state;
        if tree.conn.lifecycle().is_cancelled() {
            return Ok(());
        }
        let same = |r: &Option<ActorCell>| r.as_ref().is_some_and(|c| c.get_id() == cell.get_id());
        if same(&tree.worker_ref.lock().as_ref().map(|w| w.get_cell())) {
            if tree.child_may_restart(intensity, Child::Worker, "worker actor", &err) {
                tracing::error!(error = %err, "the worker actor failed; restarting it");
                spawn_worker(tree, &myself).await?;
            } else {
                *tree.worker_ref.lock() = None;
            }
        } else if same(&tree.stream_sup.lock().as_ref().map(|s| s.get_cell())) {
            if intensity.allow(Child::StreamSupervisor) {
                tracing::error!(error = %err, "the stream supervisor failed; restarting it and every listener");
                spawn_stream_supervisor(tree, &myself).await?;
            } else {
                let why = format!(
                    "the stream supervisor failed more than {MAX_RESTARTS} times in {RESTART_WINDOW:?} (last failure: {err})",
                );
                tracing::error!("{why}");
                tree.listeners.stop_all_for_good(&why);
            }
        } else if tree.child_may_restart(intensity, Child::RetryService, "retry service", &err) {
            tracing::error!(error = %err, "the retry service failed; restarting it");
            spawn_retry_service(tree, &myself.get_cell()).await?;
        } else {
            *tree.retry_ref.lock() = None;
        }
        Ok(())
    }
}

/// Starts the tree; returns the root and its completion handle.
///
/// # Cancel safety
///
/// Not cancel safe: dropping it mid-way may leave part of the tree running.
pub(crate) async fn start(
    tree: Tree,
) -> Result<(ActorRef<RootMsg>, tokio::task::JoinHandle<()>), Error> {
    Actor::spawn(None, Root, tree).await.map_err(|e| {
        Error::new(crate::error::Outcome::Closed, "spawn runtime").with_detail(e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_intensity_limit_counts_restarts_inside_the_window_only() {
        let mut h = VecDeque::new();
        let t0 = Instant::now();
        let w = Duration::from_secs(60);
        for i in 0..10 {
            assert!(restart_allowed(&mut h, t0 + Duration::from_secs(i), 10, w));
        }
        assert!(
            !restart_allowed(&mut h, t0 + Duration::from_secs(10), 10, w),
            "the 11th restart within 60 s is refused"
        );
        // 61 s after the first restarts, the window holds fewer than ten again.
        assert!(restart_allowed(&mut h, t0 + Duration::from_secs(62), 10, w));
    }

    #[test]
    fn each_child_of_a_supervisor_has_its_own_restart_history() {
        let mut t = Intensity::default();
        for _ in 0..MAX_RESTARTS {
            assert!(t.allow(Child::Listener(ListenerKind::WorkflowRuns)));
        }
        assert!(!t.allow(Child::Listener(ListenerKind::WorkflowRuns)));
        assert!(
            t.allow(Child::Listener(ListenerKind::DurableTask)),
            "another child's restarts do not count against it"
        );
        assert!(t.allow(Child::Worker));
    }
}
