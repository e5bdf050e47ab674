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
    /// Drain: pause, wait up to the duration for running tasks, then stop.
    Drain(Duration, oneshot::Sender<()>),
    /// Test and chaos hook: panic inside the worker actor.
    #[cfg(feature = "test-hooks")]
    Crash,
}

impl std::fmt::Debug for WorkerMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerMsg::Register(..) => "Register",
            WorkerMsg::Start(..) => "Start",
            WorkerMsg::Drain(..) => "Drain",
            #[cfg(feature = "test-hooks")]
            WorkerMsg::Crash => "Crash",
        })
    }
}

/// The worker actor: a mailbox in front of [`WorkerCore`]; network work runs in its own tasks,
/// so the actor never waits on the engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerActor;

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = Arc<WorkerCore>;
    type Arguments = Arc<WorkerCore>;

    async fn pre_start(
        &self,
        _: ActorRef<WorkerMsg>,
        core: Arc<WorkerCore>,
    ) -> Result<Arc<WorkerCore>, ActorProcessingErr> {
        Ok(core)
    }

    async fn handle(
        &self,
        _: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        core: &mut Arc<WorkerCore>,
    ) -> Result<(), ActorProcessingErr> {
        let core = core.clone();
        match msg {
            WorkerMsg::Register(wf, reply) => {
                core.registering.send_modify(|n| *n += 1);
                tokio::spawn(async move {
                    let r = register_workflow(&core, *wf).await;
                    core.registering.send_modify(|n| *n -= 1);
                    let _ = reply.send(r);
                });
            }
            WorkerMsg::Start(opts, reply) => {
                tokio::spawn(async move {
                    let _ = reply.send(start(&core, opts).await);
                });
            }
            WorkerMsg::Drain(d, reply) => {
                tokio::spawn(async move {
                    drain::drain(&core, d).await;
                    let _ = reply.send(());
                });
            }
            #[cfg(feature = "test-hooks")]
            WorkerMsg::Crash => panic!("worker actor crash requested by a test"),
        }
        Ok(())
    }
}

async fn register_workflow(core: &WorkerCore, wf: Workflow) -> Result<(), Error> {
    const PATH: &str = "/v1.AdminService/PutWorkflow";
    // The engine assigns a worker only the actions it registered with: a workflow added after
    // the start would be stored and never run here. Refused before anything is sent.
    if core.started.load(Ordering::SeqCst) {
        return Err(Error::invalid(
            "register",
            format!(
                "workflow {} was not registered: the worker is already started, and the engine assigns it only the actions it started with; register every workflow before start_worker (or register it from a runtime with no worker)",
                wf.name
            ),
        ));
    }
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
    let prefix = Workflow::action_id(&name, "");
    if core.handlers.lock().keys().any(|k| k.starts_with(&prefix)) {
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
    core.conn
        .call(PATH, &client, &req, |mut c, r| async move {
            c.put_workflow(r).await
        })
        .await?;
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
    // An evicted invocation stops at once, like a cancelled one (nothing is reported: the engine
    // resumes the task as a new invocation).
    let evicting = Arc::downgrade(core);
    core.listeners
        .durable
        .kind
        .registry
        .set_evict_hook(Arc::new(move |task: &str, invocation: i32| {
            if let Some(core) = evicting.upgrade() {
                core.cancel_running(task, |inv| inv <= invocation);
            }
        }));
    // The dispatch loop waits only past `waiting_bound` (execute.rs), so this channel only
    // hands actions over; a flood past the bound waits in the stream (backpressure).
    let (tx, rx) = mpsc::channel(slots + durable_slots);
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
    core.counters
        .slots
        .store((slots + durable_slots) as u64, Ordering::Relaxed);
    core.tracker.spawn(dispatch(core.clone(), rx, slots_held));
    Ok(worker_id)
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
