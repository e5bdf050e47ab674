//! The engine's fixed rules: liveness and reassignment windows, timeouts, the limits of one
//! request or one task's logs, and the version it reports. A leaf: it imports no other engine
//! file.

use std::time::Duration;

/// A worker is assignable while its last heartbeat is younger than this (engine rule).
pub(crate) const LIVE_HEARTBEAT: Duration = Duration::from_secs(5);

/// Running tasks of a worker silent for this long are requeued elsewhere.
pub(crate) const REASSIGN_AFTER: Duration = Duration::from_secs(30);

/// Execution timeout when a task declares none.
pub(crate) const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(60);

/// Internal requeues (send failures, reassignment) allowed per task.
pub(crate) const MAX_INTERNAL_RETRIES: i32 = 10;

/// Assignment queue depth of one listener session.
pub(crate) const SESSION_BUFFER: usize = 1024;

/// The version GetVersion reports (recent enough for slot_config and the DurableTask stream).
pub const ENGINE_VERSION: &str = "v0.94.16";

/// The longest log message the engine accepts (characters).
pub(crate) const MAX_LOG_MESSAGE_CHARS: usize = 10_000;

/// Log levels the engine accepts.
pub(crate) const LOG_LEVELS: [&str; 4] = ["INFO", "ERROR", "WARN", "DEBUG"];

/// Lines kept per task; later lines are accepted and dropped (the development engine's bound on
/// memory; the real engine keeps everything).
pub(crate) const MAX_LOG_LINES_PER_TASK: usize = 10_000;

/// Events per BulkPush call.
pub(crate) const MAX_BULK_EVENTS: usize = 1_000;
