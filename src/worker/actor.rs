//! The worker actor: its messages, registering workflows, and starting the worker (Register,
//! the heartbeat, the actions listener).

use super::execute::{Slots, dispatch};
use super::*;

/// Messages of the worker actor.
pub(crate) enum WorkerMsg {
    /// Register a workflow.
    Register(Box<Workflow>, oneshot::Sender<Result<(), Error>>),
    /// Register the worker and start taking work; answers with the worker id.
    Start(WorkerOptions, oneshot::Sender<Result<String, Error>>),
    /// Set labels on the started worker (only the keys given change).
    UpsertLabels(
        HashMap<String, crate::placement::LabelValue>,
        oneshot::Sender<Result<(), Error>>,
    ),
    /// Drain: pause, wait up to the duration for running tasks, then stop.
    Drain(Duration, oneshot::Sender<()>),
    /// From the actor's own start task: the start ended (`true`: the worker is started).
    StartEnded(bool),
    /// From the actor's own drain task: the drain ended.
    DrainEnded,
    /// Test and chaos hook: panic inside the worker actor.
    #[cfg(feature = "test-hooks")]
    Crash,
}

impl WorkerMsg {
    /// What a message asks, for [`verdict`].
    fn ask(&self) -> Option<Ask> {
        match self {
            WorkerMsg::Register(..) => Some(Ask::Register),
            WorkerMsg::Start(..) => Some(Ask::Start),
            WorkerMsg::UpsertLabels(..) => Some(Ask::UpsertLabels),
            WorkerMsg::Drain(..) => Some(Ask::Drain),
            WorkerMsg::StartEnded(_) | WorkerMsg::DrainEnded => None,
            #[cfg(feature = "test-hooks")]
            WorkerMsg::Crash => None,
        }
    }
}

impl std::fmt::Debug for WorkerMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerMsg::Register(..) => "Register",
            WorkerMsg::Start(..) => "Start",
            WorkerMsg::UpsertLabels(..) => "UpsertLabels",
            WorkerMsg::Drain(..) => "Drain",
            WorkerMsg::StartEnded(_) => "StartEnded",
            WorkerMsg::DrainEnded => "DrainEnded",
            #[cfg(feature = "test-hooks")]
            WorkerMsg::Crash => "Crash",
        })
    }
}

/// Where the worker is in its life. The actor decides each message by it, in the order the
/// messages came; the network work a decision starts runs in its own task and reports back
/// with a message, so the actor never waits on the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Taking registrations; not started.
    Open,
    /// Registering the worker with the engine.
    Starting,
    /// Taking work.
    Started,
    /// Pausing, finishing what runs, stopping.
    Draining,
    /// Stopped for good.
    Drained,
}

/// What a message asks of the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    Register,
    Start,
    UpsertLabels,
    Drain,
}

/// What the actor does with a message in a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Do it now.
    Go,
    /// Keep it until the phase changes, then decide again (a drain or an upsert sent while the
    /// worker starts applies to the started worker).
    Hold,
    /// Refuse it, saying why.
    Refuse(&'static str),
    /// Nothing to do: answer at once.
    Done,
}

const ALREADY_STARTED: &str = "the worker is already started, and the engine assigns it only the actions it started with; register every workflow before start_worker (or register it from a runtime with no worker)";
const STOPPING: &str =
    "the worker is draining or stopped; start a new runtime to run a worker again";
const NOT_STARTED: &str =
    "the worker has not started: call start_worker first, or give the labels in WorkerOptions";

/// The worker's decisions (a pure function of the phase and the message, in the order the
/// messages came).
pub(crate) fn verdict(phase: Phase, ask: Ask) -> Verdict {
    use Ask as A;
    use Phase as P;
    match (ask, phase) {
        (A::Register, P::Open) => Verdict::Go,
        (A::Register, P::Starting | P::Started) => Verdict::Refuse(ALREADY_STARTED),
        (A::Start, P::Open) => Verdict::Go,
        (A::Start, P::Starting | P::Started) => Verdict::Refuse("the worker is already started"),
        (A::UpsertLabels, P::Open) => Verdict::Refuse(NOT_STARTED),
        (A::UpsertLabels, P::Starting) => Verdict::Hold,
        (A::UpsertLabels, P::Started) => Verdict::Go,
        (A::Drain, P::Open | P::Started) => Verdict::Go,
        (A::Drain, P::Starting | P::Draining) => Verdict::Hold,
        (A::Drain, P::Drained) => Verdict::Done,
        (A::Register | A::Start | A::UpsertLabels, P::Draining | P::Drained) => {
            Verdict::Refuse(STOPPING)
        }
    }
}

/// The worker actor: a mailbox in front of [`WorkerCore`], deciding each message by the
/// worker's [`Phase`] in order (see [`verdict`]); network work runs in its own tasks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerActor;

/// The worker actor's state: the core (which outlives a restart of the actor), the phase, the
/// messages held until the phase changes, and the last effect started.
pub(crate) struct WorkerRoom {
    core: Arc<WorkerCore>,
    phase: Phase,
    held: std::collections::VecDeque<WorkerMsg>,
    /// The effect (start, upsert, drain) started last: the next one waits for it, so effects
    /// reach the engine in the order their messages were decided (two upserts of one key end
    /// with the second's value), while the actor itself never waits.
    last_effect: Option<tokio::task::JoinHandle<()>>,
}

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = WorkerRoom;
    type Arguments = Arc<WorkerCore>;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        core: Arc<WorkerCore>,
    ) -> Result<WorkerRoom, ActorProcessingErr> {
        // A restarted actor finds the worker where its core left it.
        let phase = if core.stop.is_cancelled() {
            Phase::Drained
        } else if core.started.load(Ordering::SeqCst) {
            Phase::Started
        } else {
            Phase::Open
        };
        Ok(WorkerRoom {
            core,
            phase,
            held: std::collections::VecDeque::new(),
            last_effect: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        room: &mut WorkerRoom,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::StartEnded(started) => {
                room.phase = if started { Phase::Started } else { Phase::Open };
                room.release_held(&myself);
            }
            WorkerMsg::DrainEnded => {
                room.phase = Phase::Drained;
                room.release_held(&myself);
            }
            #[cfg(feature = "test-hooks")]
            WorkerMsg::Crash => panic!("worker actor crash requested by a test"),
            msg => room.decide(&myself, msg),
        }
        Ok(())
    }
}

impl WorkerRoom {
    /// Decides `msg` in the current phase, and starts what it asks.
    fn decide(&mut self, myself: &ActorRef<WorkerMsg>, msg: WorkerMsg) {
        let Some(ask) = msg.ask() else { return };
        match verdict(self.phase, ask) {
            Verdict::Hold => self.held.push_back(msg),
            Verdict::Refuse(why) => refuse(msg, why),
            Verdict::Done => {
                if let WorkerMsg::Drain(_, reply) = msg {
                    let _ = reply.send(());
                }
            }
            Verdict::Go => self.go(myself, msg),
        }
    }

    /// Decides the held messages again, in the order they came.
    fn release_held(&mut self, myself: &ActorRef<WorkerMsg>) {
        for msg in std::mem::take(&mut self.held) {
            self.decide(myself, msg);
        }
    }

    /// Starts what `msg` asks (its verdict was [`Verdict::Go`]), after the effect started
    /// before it has finished.
    fn go(&mut self, myself: &ActorRef<WorkerMsg>, msg: WorkerMsg) {
        let core = self.core.clone();
        let me = myself.clone();
        let effect: futures::future::BoxFuture<'static, ()> = match msg {
            WorkerMsg::Register(wf, reply) => {
                // Registrations of different workflows commute, so they run side by side (a
                // worker with fifty workflows starts in one round trip, not fifty); the start
                // waits for all of them (`registering`).
                core.registering.send_modify(|n| *n += 1);
                tokio::spawn(async move {
                    let r = register_workflow(&core, *wf).await;
                    core.registering.send_modify(|n| *n -= 1);
                    let _ = reply.send(r);
                });
                return;
            }
            WorkerMsg::Start(opts, reply) => {
                self.phase = Phase::Starting;
                Box::pin(async move {
                    let r = start(&core, opts).await;
                    let _ = me.cast(WorkerMsg::StartEnded(r.is_ok()));
                    let _ = reply.send(r);
                })
            }
            WorkerMsg::UpsertLabels(labels, reply) => Box::pin(async move {
                let _ = reply.send(core.upsert_labels(labels).await);
            }),
            WorkerMsg::Drain(d, reply) => {
                self.phase = Phase::Draining;
                Box::pin(async move {
                    drain::drain(&core, d).await;
                    let _ = me.cast(WorkerMsg::DrainEnded);
                    let _ = reply.send(());
                })
            }
            other => {
                tracing::debug!(message = ?other, "the worker actor has nothing to start");
                return;
            }
        };
        let before = self.last_effect.take();
        self.last_effect = Some(tokio::spawn(async move {
            if let Some(before) = before {
                // Its outcome went to its own caller; a panic in it is not this effect's.
                let _ = before.await;
            }
            effect.await;
        }));
    }
}

/// Answers `msg` with a refusal saying `why`.
fn refuse(msg: WorkerMsg, why: &'static str) {
    let err = |op: &'static str| Error::invalid(op, why);
    match msg {
        WorkerMsg::Register(wf, reply) => {
            let _ = reply.send(Err(Error::invalid(
                "register",
                format!("workflow {} was not registered: {why}", wf.name),
            )));
        }
        WorkerMsg::Start(_, reply) => {
            let _ = reply.send(Err(err("start worker")));
        }
        WorkerMsg::UpsertLabels(_, reply) => {
            let _ = reply.send(Err(err("/Dispatcher/UpsertWorkerLabels")));
        }
        WorkerMsg::Drain(_, reply) => {
            let _ = reply.send(());
        }
        other => tracing::debug!(message = ?other, "the worker actor refused nothing to answer"),
    }
}

async fn register_workflow(core: &WorkerCore, wf: Workflow) -> Result<(), Error> {
    const PATH: &str = "/v1.AdminService/PutWorkflow";
    // A workflow registered after the start is refused by the actor (`verdict`): the engine
    // assigns a worker only the actions it registered with.
    if wf.tasks.is_empty() {
        return Err(Error::invalid(
            PATH,
            format!("workflow {} has no tasks", wf.name),
        ));
    }
    if let Some(why) = crate::worker::task::dag_problem(&wf.tasks) {
        return Err(Error::invalid(
            PATH,
            format!(
                "workflow {}: {why}; fix its tasks and register it again",
                wf.name
            ),
        ));
    }
    if let Some(t) = wf.tasks.iter().find(|t| {
        t.options
            .conditions
            .iter()
            .any(|(_, g)| g.0.iter().any(|c| c.has_lookback()))
    }) {
        return Err(Error::invalid(
            PATH,
            format!(
                "workflow {}: task {} has an event condition with a lookback; a lookback applies to a durable wait (Context::wait_for, wait_for_event_with), measured from the moment it is registered: drop it from the task's wait_for",
                wf.name, t.name
            ),
        ));
    }
    if let Some((expression, ttl, _)) = &wf.idempotency
        && (expression.trim().is_empty() || *ttl < std::time::Duration::from_millis(1))
    {
        return Err(Error::invalid(
            PATH,
            format!(
                "workflow {}: an idempotency key needs an expression and a TTL of at least 1 ms (got {expression:?} for {ttl:?}); the engine refuses the workflow otherwise",
                wf.name
            ),
        ));
    }
    let name = core.conn.config().namespaced(&wf.name);
    // The name is taken before PutWorkflow is awaited: registrations run side by side, and two
    // of one name must not both pass (the second would replace the first one's handlers).
    if !core.workflow_names.lock().insert(name.clone()) {
        return Err(Error::invalid(
            PATH,
            format!(
                "workflow {} is already registered in this runtime: a second registration under the same name would silently replace the first one's handlers; give it another name, or register it once",
                wf.name
            ),
        ));
    }
    let req = wf.to_proto_in(&name, &core.conn.config().namespace);
    let client = core.conn.admin();
    if let Err(e) = core
        .conn
        .call(PATH, &client, &req, |mut c, r| async move {
            c.put_workflow(r).await
        })
        .await
    {
        core.workflow_names.lock().remove(&name);
        return Err(e);
    }
    let mut h = core.handlers.lock();
    let on_success = wf.on_success_task();
    for t in wf.tasks.into_iter().chain(on_success).chain(wf.on_failure) {
        h.insert(Workflow::action_id(&name, &t.name), Arc::new(t));
    }
    Ok(())
}

/// Whether the engine predates the DurableTask stream (v0.80.0): durable waits then take the
/// legacy path.
async fn engine_is_legacy(conn: &Connection) -> bool {
    let client = conn.dispatcher();
    let r = conn
        .call(
            "/Dispatcher/GetVersion",
            &client,
            &proto::GetVersionRequest {},
            |mut c, r| async move { c.get_version(r).await },
        )
        .await;
    match r {
        Ok(v) => version_below(&v.version, (0, 80, 0)),
        Err(e) => e
            .grpc_status()
            .is_some_and(|s| s.code() == tonic::Code::Unimplemented),
    }
}

/// Registers the worker and starts taking work: the id once the engine accepted Register.
async fn start(core: &Arc<WorkerCore>, opts: WorkerOptions) -> Result<String, Error> {
    const OP: &str = "start worker";
    if core.started.swap(true, Ordering::SeqCst) {
        return Err(Error::invalid(OP, "the worker is already started"));
    }
    // Registrations sent before the start are part of it, answered or not.
    let _ = core.registering.subscribe().wait_for(|n| *n == 0).await;
    let actions: Vec<String> = core.handlers.lock().keys().cloned().collect();
    if actions.is_empty() {
        core.started.store(false, Ordering::SeqCst);
        return Err(Error::invalid(
            OP,
            "register at least one workflow before starting the worker",
        ));
    }
    let legacy = engine_is_legacy(&core.conn).await;
    if legacy {
        tracing::info!(
            "the engine predates the DurableTask stream (v0.80.0): durable waits use RegisterDurableEvent"
        );
    }
    core.legacy_durable.store(legacy, Ordering::Relaxed);
    let (needs_default, needs_durable) = {
        let handlers = core.handlers.lock();
        (
            handlers.values().any(|t| !t.durable),
            handlers
                .values()
                .any(|t| t.durable || t.options.slot_requests.contains_key("durable")),
        )
    };
    let slot_config = slot_config(
        opts.slots,
        opts.durable_slots,
        (needs_default, needs_durable),
    );
    let slots = slot_config.get("default").copied().unwrap_or(1) as usize;
    let durable_slots = slot_config.get("durable").copied().unwrap_or(0) as usize;
    let registration = Arc::new(Registration {
        name: opts.name.clone(),
        actions,
        slot_config,
        labels: parking_lot::Mutex::new(opts.labels.clone()),
    });
    // Registered before this returns (docs/contract.md §3: a synchronous path, bounded; permanent
    // refusals such as a bad token fail at once).
    *core.registration.lock() = Some(registration.clone());
    let worker_id = match actions::register(&core.conn, &registration, &core.identity, None).await {
        Ok(id) => id,
        Err(e) => {
            core.started.store(false, Ordering::SeqCst);
            return Err(registration_error(e));
        }
    };
    let registry = &core.listeners.durable.kind.registry;
    // An evicted invocation stops at once, like a cancelled one (nothing is reported: the engine
    // resumes the task as a new invocation).
    registry.set_evict_hook(durable_hook(core, |core, task, invocation| {
        core.cancel_running(task, |inv| inv <= invocation);
    }));
    // An invocation in doubt (its request on the wire of a stream that ended) is restarted from
    // the engine's log instead of failing its attempt (`restart`).
    registry.set_doubt_hook(durable_hook(core, |core, task, invocation| {
        let restart = super::restart::restart_from_log(core.clone(), task.to_string(), invocation);
        core.tracker.spawn(restart);
    }));
    // The dispatch loop waits only past `waiting_bound` (execute.rs), so this channel only
    // hands actions over; a flood past the bound waits in the stream (backpressure).
    let (tx, rx) = mpsc::channel(slots + durable_slots);
    core.reclaim.set_sink(tx.clone());
    let slots_held = Slots {
        ordinary: Arc::new(Semaphore::new(slots)),
        durable: Arc::new(Semaphore::new(durable_slots)),
        waiting: Arc::new(Semaphore::new(super::execute::waiting_bound(
            slots + durable_slots,
        ))),
    };
    let health = core.listeners.health[&ListenerKind::WorkerActions].clone();
    let home = Arc::new(Home::new(
        ActionsKind::new(registration, tx, core.identity.clone()),
        Some(health),
        core.conn.lifecycle(),
        core.conn.rng("actions"),
    ));
    *core.listeners.actions.lock() = Some(home);
    (core.spawn_actions)();
    heartbeat::spawn(core.clone());
    super::reclaim::spawn(core.clone(), core.conn.reclaim_timing());
    core.counters
        .slots
        .store((slots + durable_slots) as u64, Ordering::Relaxed);
    core.tracker.spawn(dispatch(core.clone(), rx, slots_held));
    Ok(worker_id)
}

/// A durable registry hook `(task, invocation)` that runs `f` with the worker's state while the
/// worker lives (the registry outlives it, so it holds the state weakly).
fn durable_hook(
    core: &Arc<WorkerCore>,
    f: impl Fn(&Arc<WorkerCore>, &str, i32) + Send + Sync + 'static,
) -> crate::listener::durable_task::InvocationHook {
    let weak = Arc::downgrade(core);
    Arc::new(move |task: &str, invocation: i32| {
        if let Some(core) = weak.upgrade() {
            f(&core, task, invocation);
        }
    })
}

/// A registration failure, with what to do about it.
fn registration_error(e: Error) -> Error {
    match e.grpc_status().map(tonic::Status::code) {
        Some(tonic::Code::Unauthenticated) => e.with_detail(
            "the engine refused the API token (HATCHET_CLIENT_TOKEN): check that it is valid and belongs to this tenant",
        ),
        Some(tonic::Code::PermissionDenied) => e.with_detail(
            "the API token (HATCHET_CLIENT_TOKEN) may not register workers on this tenant",
        ),
        _ => e,
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::{Ask, Phase, Verdict, verdict};

    /// The worker's decisions, phase by phase: a start goes once; registrations end at the
    /// start; labels wait for a start in flight; a drain waits for a start in flight (so it
    /// drains the worker that start makes) and for a drain in flight; nothing starts again
    /// after a drain.
    #[test]
    fn each_message_is_decided_by_the_phase_it_meets() {
        use Ask as A;
        use Phase as P;
        let go = Verdict::Go;
        let hold = Verdict::Hold;
        let table = [
            (P::Open, [go, go, Verdict::Refuse(""), go]),
            (
                P::Starting,
                [Verdict::Refuse(""), Verdict::Refuse(""), hold, hold],
            ),
            (
                P::Started,
                [Verdict::Refuse(""), Verdict::Refuse(""), go, go],
            ),
            (
                P::Draining,
                [
                    Verdict::Refuse(""),
                    Verdict::Refuse(""),
                    Verdict::Refuse(""),
                    hold,
                ],
            ),
            (
                P::Drained,
                [
                    Verdict::Refuse(""),
                    Verdict::Refuse(""),
                    Verdict::Refuse(""),
                    Verdict::Done,
                ],
            ),
        ];
        let same = |a: Verdict, b: Verdict| match (a, b) {
            (Verdict::Refuse(_), Verdict::Refuse(_)) => true,
            (a, b) => a == b,
        };
        for (phase, want) in table {
            for (ask, want) in [A::Register, A::Start, A::UpsertLabels, A::Drain]
                .into_iter()
                .zip(want)
            {
                let got = verdict(phase, ask);
                assert!(
                    same(got, want),
                    "{ask:?} in {phase:?}: {got:?}, want {want:?}"
                );
            }
        }
    }
}
