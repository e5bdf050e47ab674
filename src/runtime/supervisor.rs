//! The supervision tree: the root supervisor (retry service, stream supervisor, worker) and the
//! stream supervisor (the four listeners).
//!
//! # Invariants
//!
//! 1. Every supervisor overrides `handle_supervisor_evt` (ractor's default stops the supervisor
//!    when a child fails).
//! 2. Children keep their state outside the actor: each listener in its [`Home`] (registry,
//!    generation, reconnect rules, restart history), held by [`Listeners`], which outlives the
//!    stream supervisor; the worker in its `WorkerCore`. So a restart loses no waiter, no pending
//!    ack and no workflow definition.
//! 3. A restarted stream supervisor brings back every listener, the worker-actions listener
//!    included once the worker has started (its home is in [`Listeners`], not in the
//!    supervisor's state).
//! 4. Restarts are limited ([`stream::MAX_RESTARTS`] within [`stream::RESTART_WINDOW`]), per
//!    listener and for every child of the root (the stream supervisor, the worker actor, the
//!    retry service): past the limit the listener is stopped for good, `health()` says why and
//!    each of its waiters fails with that reason, never a silent, deaf listener; a child of the
//!    root past it stays stopped, and what asks it answers [`Outcome::Stopped`](crate::error::Outcome::Stopped)
//!    with the reason, which says to restart the process.
//! 5. After the lifecycle token is cancelled nothing is restarted.

use std::collections::VecDeque;
use std::sync::Arc;

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
    pub(crate) stream_sup_restarts: Arc<Mutex<VecDeque<Instant>>>,
    pub(crate) worker_ref: Arc<Mutex<Option<ActorRef<crate::worker::WorkerMsg>>>>,
    pub(crate) retry_ref: Arc<Mutex<Option<ActorRef<RetryMsg>>>>,
    /// Restart histories of the worker actor and the retry service (invariant 4).
    pub(crate) child_restarts: Arc<Mutex<[VecDeque<Instant>; 2]>>,
    /// Why a child of the root was stopped for good, by name (invariant 4).
    pub(crate) stopped: Arc<Mutex<Option<String>>>,
}

/// The worker actor's and the retry service's places in [`Tree::child_restarts`].
const WORKER: usize = 0;
const RETRY: usize = 1;

impl Tree {
    /// Whether the child at `which` may restart once more (invariant 4); past the limit it is
    /// recorded as stopped for good, with `err`.
    fn child_may_restart(&self, which: usize, name: &str, err: &dyn std::fmt::Display) -> bool {
        let allowed = stream::restart_allowed(
            &mut self.child_restarts.lock()[which],
            Instant::now(),
            stream::MAX_RESTARTS,
            stream::RESTART_WINDOW,
        );
        if !allowed {
            let why = format!(
                "the {name} failed more than {} times in {:?} (last failure: {err}); it is stopped: restart the process",
                stream::MAX_RESTARTS,
                stream::RESTART_WINDOW
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
    kind: ListenerKind,
    err: &str,
) -> Result<(), ActorProcessingErr> {
    if home.restart_allowed() {
        tracing::error!(
            listener = kind.as_str(),
            error = err,
            "a listener failed; restarting it with its registry"
        );
        spawn_listener(conn, home, me).await
    } else {
        let why = format!(
            "the {} listener failed more than {} times in {:?} and was stopped (last failure: {err})",
            kind.as_str(),
            stream::MAX_RESTARTS,
            stream::RESTART_WINDOW
        );
        tracing::error!(listener = kind.as_str(), "{why}");
        home.stop_for_good(&why);
        Ok(())
    }
}

impl Actor for StreamSupervisor {
    type Msg = StreamSupMsg;
    type State = Tree;
    type Arguments = Tree;

    async fn pre_start(
        &self,
        myself: ActorRef<StreamSupMsg>,
        tree: Tree,
    ) -> Result<Tree, ActorProcessingErr> {
        let l = &tree.listeners;
        spawn_listener(&tree.conn, &l.runs, &myself).await?;
        spawn_listener(&tree.conn, &l.durable, &myself).await?;
        spawn_listener(&tree.conn, &l.events, &myself).await?;
        // Invariant 3: a restarted supervisor brings the worker's listener back too.
        if let Some(actions) = l.actions() {
            spawn_listener(&tree.conn, &actions, &myself).await?;
        }
        Ok(tree)
    }

    async fn handle(
        &self,
        myself: ActorRef<StreamSupMsg>,
        msg: StreamSupMsg,
        tree: &mut Tree,
    ) -> Result<(), ActorProcessingErr> {
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
        tree: &mut Tree,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisionEvent::ActorFailed(cell, err) = evt else {
            return Ok(());
        };
        if tree.conn.lifecycle().is_cancelled() {
            return Ok(());
        }
        let err = err.to_string();
        let (conn, l) = (&tree.conn, &tree.listeners);
        if is(&l.runs, &cell) {
            restart(conn, &l.runs, &myself, ListenerKind::WorkflowRuns, &err).await?;
        } else if is(&l.durable, &cell) {
            restart(conn, &l.durable, &myself, ListenerKind::DurableTask, &err).await?;
        } else if is(&l.events, &cell) {
            restart(conn, &l.events, &myself, ListenerKind::DurableEvents, &err).await?;
        } else if let Some(actions) = l.actions()
            && is(&actions, &cell)
        {
            restart(conn, &actions, &myself, ListenerKind::WorkerActions, &err).await?;
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

impl Actor for Root {
    type Msg = RootMsg;
    type State = Tree;
    type Arguments = Tree;

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        tree: Tree,
    ) -> Result<Tree, ActorProcessingErr> {
        spawn_retry_service(&tree, &myself.get_cell()).await?;
        spawn_stream_supervisor(&tree, &myself).await?;
        spawn_worker(&tree, &myself).await?;
        Ok(tree)
    }

    async fn handle(
        &self,
        _: ActorRef<RootMsg>,
        msg: RootMsg,
        _: &mut Tree,
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        evt: SupervisionEvent,
        tree: &mut Tree,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisionEvent::ActorFailed(cell, err) = evt else {
            return Ok(());
        };
        if tree.conn.lifecycle().is_cancelled() {
            return Ok(());
        }
        let same = |r: &Option<ActorCell>| r.as_ref().is_some_and(|c| c.get_id() == cell.get_id());
        if same(&tree.worker_ref.lock().as_ref().map(|w| w.get_cell())) {
            if tree.child_may_restart(WORKER, "worker actor", &err) {
                tracing::error!(error = %err, "the worker actor failed; restarting it");
                spawn_worker(tree, &myself).await?;
            } else {
                *tree.worker_ref.lock() = None;
            }
        } else if same(&tree.stream_sup.lock().as_ref().map(|s| s.get_cell())) {
            let allowed = stream::restart_allowed(
                &mut tree.stream_sup_restarts.lock(),
                Instant::now(),
                stream::MAX_RESTARTS,
                stream::RESTART_WINDOW,
            );
            if allowed {
                tracing::error!(error = %err, "the stream supervisor failed; restarting it and every listener");
                spawn_stream_supervisor(tree, &myself).await?;
            } else {
                let why = format!(
                    "the stream supervisor failed more than {} times in {:?} (last failure: {err})",
                    stream::MAX_RESTARTS,
                    stream::RESTART_WINDOW
                );
                tracing::error!("{why}");
                tree.listeners.stop_all_for_good(&why);
            }
        } else if tree.child_may_restart(RETRY, "retry service", &err) {
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
