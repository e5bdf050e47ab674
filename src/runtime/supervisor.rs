//! The supervision tree: the root supervisor (retry service, stream supervisor, worker) and the
//! stream supervisor (the listeners), each restarting a crashed child with its state intact.
//!
//! # Invariants
//!
//! 1. Every supervisor overrides `handle_supervisor_evt` (ractor's default stops the supervisor
//!    when a child fails).
//! 2. Children keep their state outside the actor (registries in [`Shared`]), so a restart loses
//!    no waiter, no pending ack and no workflow definition.
//! 3. After the lifecycle token is cancelled nothing is restarted.

use std::sync::Arc;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};

use super::Shared;
use crate::error::Error;
use crate::listener::actions::{ActionsArgs, ActionsListener, ActionsMsg};
use crate::listener::durable_events::{DurableEventsArgs, DurableEventsListener, DurableEventsMsg};
use crate::listener::durable_task::{DurableArgs, DurableListener};
use crate::listener::health::ListenerKind;
use crate::listener::runs::{RunsArgs, RunsListener};
use crate::worker::WorkerActor;

// ======== retry service ========

/// Messages of the retry service.
#[derive(Debug)]
pub enum RetryMsg {
    /// Logs the per-method ceiling table.
    LogCeilings,
}

/// The retry service: owns the policy, budget and ledger (the shared [`crate::retry::RetryCore`]).
/// Calls run in their callers' tasks against that core, so the actor never serialises them.
#[derive(Debug, Clone, Copy)]
pub struct RetryService;

impl Actor for RetryService {
    type Msg = RetryMsg;
    type State = Arc<Shared>;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        _: ActorRef<RetryMsg>,
        shared: Arc<Shared>,
    ) -> Result<Arc<Shared>, ActorProcessingErr> {
        Ok(shared)
    }

    async fn handle(
        &self,
        _: ActorRef<RetryMsg>,
        msg: RetryMsg,
        shared: &mut Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RetryMsg::LogCeilings => crate::retry::log_ceiling_table(shared.core().policy()),
        }
        Ok(())
    }
}

// ======== stream supervisor ========

/// Messages of the stream supervisor.
pub enum StreamMsg {
    /// Start the worker's listeners.
    StartWorker(Box<ActionsArgs>),
    /// Stop the worker-actions listener (drain: take no more work).
    StopActions,
    /// Test hook: crash the actions listener.
    CrashActions,
}

impl std::fmt::Debug for StreamMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StreamMsg::StartWorker(_) => "StartWorker",
            StreamMsg::StopActions => "StopActions",
            StreamMsg::CrashActions => "CrashActions",
        })
    }
}

/// State of the stream supervisor.
pub struct StreamState {
    shared: Arc<Shared>,
    runs: Option<ActorRef<crate::listener::runs::RunsMsg>>,
    actions: Option<(ActorRef<ActionsMsg>, ActionsArgs)>,
    durable: Option<ActorRef<crate::listener::durable_task::DurableMsg>>,
    events: Option<ActorRef<DurableEventsMsg>>,
}

/// The stream supervisor.
#[derive(Debug, Clone, Copy)]
pub struct StreamSupervisor;

impl StreamSupervisor {
    fn runs_args(shared: &Arc<Shared>) -> RunsArgs {
        RunsArgs {
            ctx: shared.ctx.clone(),
            registry: shared.runs.clone(),
            health: shared.health[&ListenerKind::WorkflowRuns].clone(),
        }
    }

    fn events_args(shared: &Arc<Shared>) -> DurableEventsArgs {
        DurableEventsArgs {
            ctx: shared.ctx.clone(),
            registry: shared.events.clone(),
            health: shared.health[&ListenerKind::DurableEvents].clone(),
        }
    }

    async fn spawn_events(
        myself: &ActorRef<StreamMsg>,
        st: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            DurableEventsListener::default(),
            Self::events_args(&st.shared),
            myself.get_cell(),
        )
        .await?;
        *st.shared.events_ref.lock() = Some(r.clone());
        st.events = Some(r);
        Ok(())
    }

    fn durable_args(shared: &Arc<Shared>) -> DurableArgs {
        DurableArgs {
            ctx: shared.ctx.clone(),
            registry: shared.durable.clone(),
            health: shared.health[&ListenerKind::DurableTask].clone(),
            identity: shared.worker.identity.clone(),
        }
    }

    async fn spawn_runs(
        myself: &ActorRef<StreamMsg>,
        st: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            RunsListener::default(),
            Self::runs_args(&st.shared),
            myself.get_cell(),
        )
        .await?;
        *st.shared.runs_ref.lock() = Some(r.clone());
        st.runs = Some(r);
        Ok(())
    }

    async fn spawn_durable(
        myself: &ActorRef<StreamMsg>,
        st: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            DurableListener,
            Self::durable_args(&st.shared),
            myself.get_cell(),
        )
        .await?;
        *st.shared.durable_ref.lock() = Some(r.clone());
        st.durable = Some(r);
        Ok(())
    }

    async fn spawn_actions(
        myself: &ActorRef<StreamMsg>,
        st: &mut StreamState,
        args: ActionsArgs,
    ) -> Result<(), ActorProcessingErr> {
        let (r, _) =
            Actor::spawn_linked(None, ActionsListener, args.clone(), myself.get_cell()).await?;
        st.actions = Some((r, args));
        Ok(())
    }
}

fn same(cell: &ActorCell, other: Option<ActorCell>) -> bool {
    other.is_some_and(|o| o.get_id() == cell.get_id())
}

impl Actor for StreamSupervisor {
    type Msg = StreamMsg;
    type State = StreamState;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        myself: ActorRef<StreamMsg>,
        shared: Arc<Shared>,
    ) -> Result<StreamState, ActorProcessingErr> {
        let mut st = StreamState {
            shared,
            runs: None,
            actions: None,
            durable: None,
            events: None,
        };
        Self::spawn_runs(&myself, &mut st).await?;
        Self::spawn_durable(&myself, &mut st).await?;
        Self::spawn_events(&myself, &mut st).await?;
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<StreamMsg>,
        msg: StreamMsg,
        st: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            StreamMsg::StartWorker(args) => {
                if st.actions.is_none() {
                    Self::spawn_actions(&myself, st, *args).await?;
                }
            }
            StreamMsg::StopActions => {
                if let Some((r, _)) = st.actions.take() {
                    r.stop(None);
                }
            }
            StreamMsg::CrashActions => {
                if let Some((r, _)) = &st.actions {
                    let _ = r.cast(ActionsMsg::Crash);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<StreamMsg>,
        evt: SupervisionEvent,
        st: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisionEvent::ActorFailed(cell, err) = evt else {
            return Ok(());
        };
        if st.shared.ctx.lifecycle.is_cancelled() {
            return Ok(());
        }
        tracing::error!(error = %err, "a listener failed; restarting it with its registry");
        if same(&cell, st.runs.as_ref().map(|r| r.get_cell())) {
            Self::spawn_runs(&myself, st).await?;
        } else if same(&cell, st.durable.as_ref().map(|r| r.get_cell())) {
            Self::spawn_durable(&myself, st).await?;
        } else if same(&cell, st.events.as_ref().map(|r| r.get_cell())) {
            Self::spawn_events(&myself, st).await?;
        } else if let Some((r, args)) = st.actions.take() {
            if r.get_id() == cell.get_id() {
                Self::spawn_actions(&myself, st, args).await?;
            } else {
                st.actions = Some((r, args));
            }
        }
        Ok(())
    }
}

// ======== root ========

/// Messages of the root supervisor.
#[derive(Debug)]
pub enum RootMsg {}

/// The root supervisor.
#[derive(Debug, Clone, Copy)]
pub struct Root;

impl Root {
    async fn spawn_children(
        myself: &ActorRef<RootMsg>,
        shared: &Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        let (retry, _) =
            Actor::spawn_linked(None, RetryService, shared.clone(), myself.get_cell()).await?;
        let _ = retry;
        let (streams, _) =
            Actor::spawn_linked(None, StreamSupervisor, shared.clone(), myself.get_cell()).await?;
        *shared.stream_sup.lock() = Some(streams);
        let (worker, _) =
            Actor::spawn_linked(None, WorkerActor, shared.clone(), myself.get_cell()).await?;
        *shared.worker_ref.lock() = Some(worker);
        Ok(())
    }
}

impl Actor for Root {
    type Msg = RootMsg;
    type State = Arc<Shared>;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        shared: Arc<Shared>,
    ) -> Result<Arc<Shared>, ActorProcessingErr> {
        Self::spawn_children(&myself, &shared).await?;
        Ok(shared)
    }

    async fn handle(
        &self,
        _: ActorRef<RootMsg>,
        msg: RootMsg,
        _: &mut Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        evt: SupervisionEvent,
        shared: &mut Arc<Shared>,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            if shared.ctx.lifecycle.is_cancelled() {
                return Ok(());
            }
            tracing::error!(error = %err, "a runtime actor failed; restarting it");
            let is_worker = shared
                .worker_ref
                .lock()
                .as_ref()
                .is_some_and(|w| w.get_id() == cell.get_id());
            if is_worker {
                let (worker, _) =
                    Actor::spawn_linked(None, WorkerActor, shared.clone(), myself.get_cell())
                        .await?;
                *shared.worker_ref.lock() = Some(worker);
            } else if shared
                .stream_sup
                .lock()
                .as_ref()
                .is_some_and(|s| s.get_id() == cell.get_id())
            {
                let (s, _) =
                    Actor::spawn_linked(None, StreamSupervisor, shared.clone(), myself.get_cell())
                        .await?;
                *shared.stream_sup.lock() = Some(s);
            } else {
                let _ = Actor::spawn_linked(None, RetryService, shared.clone(), myself.get_cell())
                    .await?;
            }
        }
        Ok(())
    }
}

/// Starts the tree and records the root in `shared`.
///
/// # Cancel safety
///
/// Not cancel safe: dropping it mid-way may leave part of the tree running.
pub async fn start(shared: Arc<Shared>) -> Result<(), Error> {
    let (root, done) = Actor::spawn(None, Root, shared.clone())
        .await
        .map_err(|e| {
            Error::new(crate::Outcome::Closed, "spawn runtime").with_detail(e.to_string())
        })?;
    *shared.root.lock() = Some(root);
    *shared.root_done.lock() = Some(done);
    Ok(())
}

/// Asks the stream supervisor to start the worker's listeners.
pub(crate) fn start_worker_listeners(shared: &Shared, args: ActionsArgs) {
    if let Some(s) = shared.stream_sup.lock().as_ref() {
        let _ = s.cast(StreamMsg::StartWorker(Box::new(args)));
    }
}

/// Asks the stream supervisor to stop the actions listener.
pub(crate) fn stop_actions(shared: &Shared) {
    if let Some(s) = shared.stream_sup.lock().as_ref() {
        let _ = s.cast(StreamMsg::StopActions);
    }
}

/// Test hook.
pub(crate) fn crash_actions(shared: &Shared) {
    if let Some(s) = shared.stream_sup.lock().as_ref() {
        let _ = s.cast(StreamMsg::CrashActions);
    }
}
