//! The worker-actions listener: `ListenV2` (falling back once and for good to `Listen` on
//! UNIMPLEMENTED), and registration whenever the worker has no id (the first time, or again when
//! the worker row is gone). The heartbeat belongs to the worker (`worker::heartbeat`), not to
//! this stream.
//!
//! # Invariants
//!
//! 1. A stream opens with the worker's current id; without one it registers first, and a failed
//!    registration is an end like any other: its gRPC status goes through the reconnect decision
//!    (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT stop the listener at once; transient
//!    codes back off and try again). Decisions read codes, never text.
//! 2. NOT_FOUND, or [`EMPTY_ENDS_BEFORE_REREGISTER`] OK ends without a message in a row, mean the
//!    worker row is gone: the id is cleared, so the next stream registers again.
//! 3. Actions go to the worker through a bounded channel: a flood slows the stream (backpressure).
//! 4. Engine errors never panic or exit the process; only the lifecycle token stops the listener.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::reconnect::StreamEnd;
use super::stream::{EndReport, Flow, Judged, StreamKind};
use crate::connection::CallOpts;
use crate::connection::Connection;
use crate::error::{Error, Outcome};
use crate::protocol as proto;

/// OK ends without a message, in a row, that mean the worker row is gone.
pub(crate) const EMPTY_ENDS_BEFORE_REREGISTER: u32 = 2;

const REGISTER: &str = "/Dispatcher/Register";

/// What the worker registers with.
#[derive(Debug)]
pub(crate) struct Registration {
    /// Worker name.
    pub name: String,
    /// Action ids (`workflow:task`, lower case).
    pub actions: Vec<String>,
    /// Slots per slot type (`default`, `durable`).
    pub slot_config: std::collections::HashMap<String, i32>,
    /// Labels; upserts at run time are kept here too, so a re-registration carries them.
    pub labels: parking_lot::Mutex<std::collections::HashMap<String, crate::placement::LabelValue>>,
}

/// How long an actions stream's open must go without an error before an accepted heartbeat
/// makes it count as served (`ActionsKind::serving`).
pub(crate) const QUIET_OPEN: std::time::Duration = std::time::Duration::from_secs(1);

/// The worker's identity as the engine knows it: its id, and heartbeat liveness.
#[derive(Debug, Default)]
pub(crate) struct WorkerIdentity {
    id: Mutex<Option<String>>,
    /// When the last heartbeat the engine accepted was sent.
    pub heartbeat_ok: tokio::sync::watch::Sender<Option<Instant>>,
    /// Registrations made.
    pub registrations: AtomicU64,
}

impl WorkerIdentity {
    /// The current worker id.
    pub(crate) fn get(&self) -> Option<String> {
        self.id.lock().clone()
    }

    /// Records a new registration.
    pub(crate) fn set(&self, id: String) {
        self.registrations.fetch_add(1, Ordering::Relaxed);
        *self.id.lock() = Some(id);
    }

    /// Forgets the id (the worker row is gone): the next stream registers again.
    pub(crate) fn clear(&self) {
        *self.id.lock() = None;
    }
}

/// Registers the worker (Register, a write under the retry core: retried only when it provably
/// never reached the engine) and records its id.
///
/// # Cancel safety
///
/// Not cancel safe: a dropped registration may have created a worker row whose id is lost (the
/// engine expires it after its heartbeat window).
pub(crate) async fn register(
    conn: &Connection,
    registration: &Registration,
    identity: &WorkerIdentity,
    cancel: Option<CancellationToken>,
) -> Result<String, Error> {
    let r = registration;
    let req = proto::WorkerRegisterRequest {
        worker_name: r.name.clone(),
        actions: r.actions.clone(),
        services: vec![],
        slots: None,
        labels: crate::placement::labels_to_proto(&r.labels.lock()),
        webhook_id: None,
        runtime_info: Some(proto::RuntimeInfo {
            sdk_version: Some(env!("CARGO_PKG_VERSION").into()),
            language: None,
            language_version: Some("rust".into()),
            os: Some(std::env::consts::OS.into()),
            extra: None,
        }),
        slot_config: r.slot_config.clone(),
    };
    let client = conn.dispatcher();
    let resp = conn
        .unary(
            REGISTER,
            CallOpts::new().cancel(cancel),
            &client,
            &req,
            |mut c, r| async move { c.register(r).await },
        )
        .await?;
    tracing::info!(worker_id = %resp.worker_id, "worker registered");
    identity.set(resp.worker_id.clone());
    Ok(resp.worker_id)
}

/// The gRPC status a failed call ends a stream with, for the reconnect decision: the engine's
/// own status when it answered, otherwise the code that means the same outcome.
pub(crate) fn status_of(e: &Error) -> tonic::Status {
    if let Some(s) = e.grpc_status() {
        return tonic::Status::new(s.code(), e.to_string());
    }
    let code = match e.outcome() {
        Outcome::Rejected | Outcome::Invalid => Code::InvalidArgument,
        Outcome::Cancelled | Outcome::Closed => Code::Cancelled,
        Outcome::DeadlineExceeded => Code::DeadlineExceeded,
        Outcome::BudgetExhausted => Code::ResourceExhausted,
        _ => Code::Unavailable,
    };
    tonic::Status::new(code, e.to_string())
}

/// The worker-actions listener's kind.
pub(crate) struct ActionsKind {
    /// What to register.
    pub registration: Arc<Registration>,
    /// Where actions go (bounded: backpressure).
    pub sink: mpsc::Sender<proto::AssignedAction>,
    /// The worker's id.
    pub identity: Arc<WorkerIdentity>,
    /// Set once ListenV2 answered UNIMPLEMENTED: use Listen for good.
    legacy: AtomicBool,
    /// OK ends without a message in a row (invariant 2).
    empty_ends: AtomicU32,
}

impl ActionsKind {
    /// The kind for a worker registered (or to register) as `registration`.
    pub(crate) fn new(
        registration: Arc<Registration>,
        sink: mpsc::Sender<proto::AssignedAction>,
        identity: Arc<WorkerIdentity>,
    ) -> Self {
        ActionsKind {
            registration,
            sink,
            identity,
            legacy: AtomicBool::new(false),
            empty_ends: AtomicU32::new(0),
        }
    }
}

impl StreamKind for ActionsKind {
    // Assignments that come on two streams during the overlap run once (the worker ignores a
    // repeated one), and the engine keeps a newer session active when an older one closes.
    const ROTATES: bool = true;
    type Item = proto::AssignedAction;
    const NAME: &'static str = "/Dispatcher/ListenV2";

    async fn open(
        &self,
        conn: &Connection,
        _generation: u64,
    ) -> Result<tonic::Streaming<proto::AssignedAction>, tonic::Status> {
        let worker_id = match self.identity.get() {
            Some(id) => id,
            None => register(conn, &self.registration, &self.identity, None)
                .await
                .map_err(|e| status_of(&e))?,
        };
        let mut client = conn.dispatcher();
        let req = proto::WorkerListenRequest { worker_id };
        let mut opened = if self.legacy.load(Ordering::Relaxed) {
            client.listen(req.clone()).await
        } else {
            client.listen_v2(req.clone()).await
        };
        if matches!(&opened, Err(s) if s.code() == Code::Unimplemented)
            && !self.legacy.swap(true, Ordering::Relaxed)
        {
            tracing::info!("engine has no ListenV2; falling back to Listen for good");
            opened = client.listen(req).await;
        }
        opened.map(tonic::Response::into_inner)
    }

    /// The real engine answers a ListenV2 only with its first assignment (a Go gRPC server sends
    /// the response headers with the first message), so an idle worker's open stream looks like
    /// one still opening, and its readiness would wait for work that may never come. The engine
    /// refuses a heartbeat for a worker whose stream it does not hold as active; so once the open
    /// has gone [`QUIET_OPEN`] without an error and a heartbeat sent after it was accepted, the
    /// stream counts as served. (What this cannot see: an engine that holds a stream without
    /// ever running its handler while it still holds the worker active from before; the runs
    /// listener's probe, and the heartbeat's refusals, cover what can be seen.)
    fn serving(&self, since: Instant) -> impl Future<Output = ()> + Send {
        let mut beats = self.identity.heartbeat_ok.subscribe();
        async move {
            tokio::time::sleep(QUIET_OPEN).await;
            let _ = beats.wait_for(|t| t.is_some_and(|t| t > since)).await;
        }
    }

    async fn on_message(&self, action: proto::AssignedAction) -> Flow {
        match self.sink.send(action).await {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Finish, // the worker is gone: shutting down
        }
    }

    async fn on_end(&self, _conn: &Connection, _generation: u64, report: &EndReport) -> Judged {
        let empty = if report.end == StreamEnd::Eof && report.messages == 0 {
            self.empty_ends.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.empty_ends.store(0, Ordering::Relaxed);
            0
        };
        let gone =
            report.end == StreamEnd::Code(Code::NotFound) || empty >= EMPTY_ENDS_BEFORE_REREGISTER;
        if gone {
            tracing::warn!(error = %report.error, "worker row looks gone; registering again");
            self.empty_ends.store(0, Ordering::Relaxed);
            self.identity.clear();
            // A lost row is not the stream's failure: reconnect (and register) as after an EOF.
            return Judged::Decide(StreamEnd::Eof);
        }
        Judged::Decide(report.end)
    }

    fn wanted(&self) -> bool {
        !self.sink.is_closed()
    }

    fn backoff(&self, conn: &Connection) -> crate::retry::Backoff {
        conn.backoff().stream
    }

    fn on_stop(&self, why: &str, _end: Option<StreamEnd>, _permanent: bool) {
        tracing::error!(
            reason = why,
            "the worker-actions listener stopped: this worker takes no more work"
        );
    }
}
