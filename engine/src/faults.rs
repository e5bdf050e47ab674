//! Fault injection and attempt counters, programmable from tests and from the control endpoint.
//!
//! Rules target a gRPC path (`/Dispatcher/ListenV2`) or a REST path prefix (`/api/v1/...`), and
//! apply to the next `times` calls. Counters record every request seen at the network boundary
//! (before auth), so tests count real attempts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// Rewrites the next `remaining` assignments.
#[derive(Clone)]
pub(crate) struct ActionMutator {
    pub remaining: u32,
    pub f: Arc<dyn Fn(&mut hatchet_runtime::protocol::AssignedAction) + Send + Sync>,
}

impl std::fmt::Debug for ActionMutator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ActionMutator({} left)", self.remaining)
    }
}

/// The engine-state fault switches (the rules above act at the network boundary; these act
/// inside the engine's rules). As they start, the engine does what the real one does: its
/// timing on (the polled timers, the status lag and the end hop; `DevEngineOptions::timing`
/// turns all three off at start), every other switch off. `DevEngine`'s fault methods turn
/// them.
#[derive(Debug)]
pub(crate) struct Switches {
    /// Rewrite the next assignments (bad payloads, unknown enums).
    pub mutate_actions: Option<ActionMutator>,
    /// Assign beyond the workers' slots (a flood).
    pub over_assign: bool,
    /// A kindness the real engine lacks: `ReleaseSlot` gives the task's slot back to its
    /// worker at once (what the call is for). The real engine v0.104.9 keeps counting the slot
    /// until the attempt ends: its release statement clears the task's worker but deletes none
    /// of its slot rows (the DELETE reads a `FOR UPDATE` CTE whose rows the statement's own
    /// UPDATE has already changed, so it finds none).
    pub release_slot_frees: bool,
    /// The real engine's single-task race: it stamps a task's QUEUED event in the background,
    /// so the stamp can land after the worker's STARTED, and its single-task read (which says
    /// the latest event unless one is final) then says QUEUED for the whole run. Under this
    /// switch `GET /api/v1/stable/tasks/{task}` says QUEUED for every running task.
    pub stamp_queued_late: bool,
    /// Timers read on a poll, as the real engine reads them (see [`TimerPoll`]).
    pub poll_timers: Option<TimerPoll>,
    /// What REST reads of a task's or a run's status, published late, as the real engine
    /// publishes it: a new run `lag` to `2 * lag` after its creation, later changes at once
    /// behind it (`store/readable.rs`). `None` is a kindness for tests: at once.
    pub status_lag: Option<std::time::Duration>,
    /// How long a task's end takes to reach what `GetRunDetails` reads, as the real engine's
    /// task controller takes to record the end a worker reported (its message queue and a
    /// transaction): until then the task reads RUNNING there, its run not done, and the run
    /// streams have no end. `None` is a kindness for tests: at once.
    pub end_hop: Option<std::time::Duration>,
    /// A kindness the real engine lacks: assignments a worker never answered are offered
    /// again when their stream closes, instead of running out their timeout.
    pub reoffer_unanswered: bool,
    /// Send the next this many assignments twice (the same attempt).
    pub duplicate_assignments: u32,
    /// Record the next this many assignments and never send them, as the real engine loses
    /// an assignment whose message was on its way to a dispatcher that was killed: the task is
    /// the worker's (its slot taken, RUNNING, the worker's id on it) until its timeout.
    pub lose_sends: u32,
    /// Lose the next this many task ends in the read model, as a killed replica can leave the
    /// real engine's: REST reads each such task RUNNING, without its output, for good, while the
    /// core has it COMPLETED (a cluster chaos run left a DAG parent so).
    pub lose_read_model_ends: u32,
    /// The tasks whose end the read model lost ([`Switches::lose_read_model_ends`]).
    pub read_model_lost: std::collections::HashSet<String>,
    /// Send the next this many assignments again 300 ms later.
    pub late_duplicates: u32,
    /// How long a replay takes to be applied after it is answered, as the real engine's task
    /// controller lags when busy: `ReplayTasks` only queues the replay and answers 200 ms
    /// later (`internal/services/admin/v1/server.go`), and until the controller applies it
    /// every read shows the run's old end. `None`: applied before the answer.
    pub replay_lag: Option<std::time::Duration>,
    /// Task completions answered and never recorded, as the real engine loses one whose message
    /// its controller had read when it was killed (the chaos suite saw it): the worker is told
    /// OK, the attempt stays running until its timeout fails it.
    pub lose_answered_completions: std::sync::atomic::AtomicU32,
    /// Task completions whose follow-up is lost, as the real engine loses it when it is
    /// killed right after recording a completion (seen in the chaos suite: the task's
    /// COMPLETED event is written and its runtime row gone, but the DAG match that creates the
    /// next task stays unsatisfied): the task reads COMPLETED, its dependents are never created
    /// and its run never finishes, until a replay.
    pub lose_completion_followups: std::sync::atomic::AtomicU32,
    /// Durable completions to lose before they reach a stream (as a cluster can);
    /// `worker_status` recovers them.
    pub lose_durable_completions: std::sync::atomic::AtomicU32,
    /// Durable requests whose acks are lost with their stream: the request is recorded (its
    /// node kept) and the stream ends before its answer goes out, as a connection cut between
    /// the engine's write and the worker's read does.
    pub lose_durable_acks: std::sync::atomic::AtomicU32,
    /// Collect a DurableTask stream's requests this many milliseconds, then handle them newest
    /// first (the real engine handles a stream's requests concurrently: they may be numbered
    /// and answered in any order). 0: what is already buffered is handled newest first, the
    /// default.
    pub collect_durable_requests_ms: std::sync::atomic::AtomicU64,
    /// The next this many evictions (`EvictInvocation`) find the task's open waits satisfied
    /// just before they are handled: each wait's completion goes out, then the eviction is
    /// acknowledged (a wait that ends while the eviction is on its way).
    pub complete_waits_on_evict: u32,
    /// Single triggers (`TriggerWorkflow`, `TriggerWorkflowRun`) of workflows without an
    /// idempotency key are answered with the run's id at once and written this much later, as
    /// the real engine does when its optimistic write slots are busy (a load spike, a restart):
    /// it answers, and its task controller creates the run from a queued message. Until then
    /// the run reads NotFound.
    pub defer_trigger_writes: Option<std::time::Duration>,
}

/// The real engine's lag for a new run: it reaches REST 1 to 2 s after its creation (measured: `docs/guide/real-engine.md`; the pipeline is `store/readable.rs`).
pub(crate) const STATUS_LAG: std::time::Duration = std::time::Duration::from_secs(1);

/// The real engine's hop from a worker's end of a task to `GetRunDetails` reading it: measured
/// 16 to 26 ms for a plain task and 27 to 48 ms for a durable one on v0.104.9
/// (`docs/guide/real-engine.md`).
pub(crate) const END_HOP: std::time::Duration = std::time::Duration::from_millis(30);

impl Default for Switches {
    fn default() -> Self {
        Switches {
            mutate_actions: None,
            over_assign: false,
            release_slot_frees: false,
            stamp_queued_late: false,
            poll_timers: Some(TimerPoll::every(TimerPoll::REAL)),
            status_lag: Some(STATUS_LAG),
            end_hop: Some(END_HOP),
            reoffer_unanswered: false,
            duplicate_assignments: 0,
            lose_sends: 0,
            lose_read_model_ends: 0,
            read_model_lost: Default::default(),
            late_duplicates: 0,
            replay_lag: None,
            lose_answered_completions: Default::default(),
            lose_completion_followups: Default::default(),
            lose_durable_completions: Default::default(),
            lose_durable_acks: Default::default(),
            collect_durable_requests_ms: Default::default(),
            complete_waits_on_evict: 0,
            defer_trigger_writes: None,
        }
    }
}

/// Timers read on a poll, as the real engine reads them: its task controller looks for due
/// timeouts, sleeps, retries after a backoff and reassignments once a second (v0.104.9: a
/// tenant operation pool per kind, `internal/operation/interval.go`, 1 s with no jitter by
/// default; its back-off to 30 s needs a tenant whose queues saw no activity in the whole
/// retention period). A retry without a backoff is no timer: the statement that records the
/// failure queues it (`v1_task_update_function`), so it is queued at once. A timer due
/// between two polls waits for the next, so a durable sleep ends up to a second late, and a
/// sleep registered just after the poll that ended the one before ends a whole second late:
/// three chained 2 s sleeps take about 8 s there, not 6. Polls fall at fixed instants, every
/// `every` from the first pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerPoll {
    /// The time between two polls.
    pub every: std::time::Duration,
    /// The first poll (the phase of every later one).
    origin: Option<tokio::time::Instant>,
}

impl TimerPoll {
    /// The real engine's period.
    pub(crate) const REAL: std::time::Duration = std::time::Duration::from_secs(1);

    /// Polls every `every`, the first at the next pass.
    pub(crate) fn every(every: std::time::Duration) -> Self {
        TimerPoll {
            every: every.max(std::time::Duration::from_millis(1)),
            origin: None,
        }
    }

    /// The instant timers are read at by a pass at `now`: the last poll at or before it (the
    /// first pass sets the phase).
    pub(crate) fn read(&mut self, now: tokio::time::Instant) -> tokio::time::Instant {
        let origin = *self.origin.get_or_insert(now);
        self.last(now).unwrap_or(origin)
    }

    /// The last poll at or before `now`, if any.
    pub(crate) fn last(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let origin = self.origin?;
        let since = now.checked_duration_since(origin)?;
        Some(origin + self.polls(since, false))
    }

    /// When a timer due `at` is read: at the first poll at or after it (when due, before the
    /// first poll).
    pub(crate) fn reads(&self, at: tokio::time::Instant) -> tokio::time::Instant {
        match self.origin {
            Some(origin) if at > origin => origin + self.polls(at - origin, true),
            Some(origin) => origin,
            None => at,
        }
    }

    /// Whole periods in `d`, rounded down or up, as a duration.
    fn polls(&self, d: std::time::Duration, up: bool) -> std::time::Duration {
        let (d, every) = (d.as_nanos(), self.every.as_nanos());
        let n = if up { d.div_ceil(every) } else { d / every };
        std::time::Duration::from_nanos(u64::try_from(n * every).unwrap_or(u64::MAX))
    }
}

/// What to do to a matching call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Answer with a gRPC status (and optional `grpc-retry-pushback-ms`), without running it.
    Fail {
        /// The gRPC code number.
        code: i32,
        /// The message.
        #[serde(default)]
        message: String,
        /// Pushback value, sent verbatim (may be negative or malformed on purpose).
        #[serde(default)]
        pushback_ms: Option<String>,
    },
    /// Answer a REST call with this HTTP status (and optional `Retry-After`, sent verbatim).
    HttpFail {
        /// The status.
        status: u16,
        /// `Retry-After` value (delta-seconds or HTTP-date).
        #[serde(default)]
        retry_after: Option<String>,
    },
    /// Delay the call, then run it.
    Delay {
        /// Milliseconds.
        ms: u64,
    },
    /// Run the call, then hold its answer back this long: the effect happens even when the
    /// client gives up meanwhile (a write whose answer is lost).
    DelayAnswer {
        /// Milliseconds.
        ms: u64,
    },
    /// Never answer (until the client cancels or the connection drops).
    Hang,
    /// Let a stream send `after` messages, then end it with `code` (or OK when absent).
    EndStream {
        /// Messages before the end.
        after: usize,
        /// gRPC code number; `None` ends with OK (EOF).
        #[serde(default)]
        code: Option<i32>,
    },
}

/// A fault for the next `times` calls to `target`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct FaultRule {
    /// gRPC path, or REST path prefix.
    pub target: String,
    /// How many calls it applies to.
    pub times: u32,
    /// The fault.
    pub fault: Fault,
}

/// The engine's fault switchboard. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    rules: Mutex<Vec<FaultRule>>,
    counters: Mutex<BTreeMap<String, u64>>,
    /// Calls that carried a deadline (`grpc-timeout`), per path.
    deadlines: Mutex<BTreeMap<String, u64>>,
    /// When each call arrived, for the paths asked for ([`Faults::record_times`]).
    times: Mutex<BTreeMap<String, Vec<tokio::time::Instant>>>,
    kill: Mutex<CancellationToken>,
    frozen: AtomicBool,
}

fn matches(target: &str, path: &str) -> bool {
    target == path || (target.starts_with("/api/") && path.starts_with(target))
}

impl Faults {
    /// Adds a rule.
    pub fn inject(&self, target: impl Into<String>, times: u32, fault: Fault) {
        self.inner.rules.lock().push(FaultRule {
            target: target.into(),
            times,
            fault,
        });
    }

    /// Removes every rule and unfreezes.
    pub fn clear(&self) {
        self.inner.rules.lock().clear();
        if self.inner.frozen.swap(false, Ordering::SeqCst) {
            self.drop_connections();
        }
    }

    fn take_where(&self, path: &str, stream_rule: bool) -> Option<Fault> {
        let mut rules = self.inner.rules.lock();
        let i = rules.iter().position(|r| {
            matches(&r.target, path)
                && r.times > 0
                && matches!(r.fault, Fault::EndStream { .. }) == stream_rule
        })?;
        let r = &mut rules[i];
        r.times -= 1;
        let f = r.fault.clone();
        if r.times == 0 {
            rules.remove(i);
        }
        Some(f)
    }

    /// The request-level fault for this call of `path`, if any (consumes one use).
    pub fn take(&self, path: &str) -> Option<Fault> {
        self.take_where(path, false)
    }

    /// The stream-level plan for a stream of `path` opened now: `(messages, end code)`.
    pub fn stream_plan(&self, path: &str) -> Option<(usize, Option<i32>)> {
        match self.take_where(path, true)? {
            Fault::EndStream { after, code } => Some((after, code)),
            _ => None,
        }
    }

    /// Counts a call of `path` (and records its time, when asked for).
    pub fn count(&self, path: &str) {
        *self
            .inner
            .counters
            .lock()
            .entry(path.to_string())
            .or_default() += 1;
        if let Some(times) = self.inner.times.lock().get_mut(path) {
            times.push(tokio::time::Instant::now());
        }
    }

    /// Records when each later call of `path` arrives (for per-second counts in tests).
    pub fn record_times(&self, path: &str) {
        self.inner.times.lock().entry(path.to_string()).or_default();
    }

    /// When each call of `path` arrived since [`Faults::record_times`].
    pub fn attempt_times(&self, path: &str) -> Vec<tokio::time::Instant> {
        self.inner
            .times
            .lock()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// Records that a call of `path` carried a deadline (`grpc-timeout`).
    pub fn count_deadline(&self, path: &str) {
        *self
            .inner
            .deadlines
            .lock()
            .entry(path.to_string())
            .or_default() += 1;
    }

    /// Calls of `path` (exact) that carried a deadline (`grpc-timeout`): a client sends one
    /// when its caller bounded the call.
    pub fn calls_with_deadline(&self, path: &str) -> u64 {
        self.inner.deadlines.lock().get(path).copied().unwrap_or(0)
    }

    /// Calls seen for `path` (exact).
    pub fn attempts(&self, path: &str) -> u64 {
        self.inner.counters.lock().get(path).copied().unwrap_or(0)
    }

    /// Every counter.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.inner.counters.lock().clone()
    }

    /// Resets every counter.
    pub fn reset_counters(&self) {
        self.inner.counters.lock().clear();
        self.inner.deadlines.lock().clear();
    }

    /// Drops every open connection (clients see a reset).
    pub fn drop_connections(&self) {
        let mut k = self.inner.kill.lock();
        k.cancel();
        *k = CancellationToken::new();
    }

    /// Stops answering entirely: open and new connections swallow bytes and never reply
    /// (half-open). `clear()` ends it and drops the frozen connections.
    pub fn freeze(&self) {
        self.inner.frozen.store(true, Ordering::SeqCst);
    }

    /// Whether the engine is frozen.
    pub fn is_frozen(&self) -> bool {
        self.inner.frozen.load(Ordering::SeqCst)
    }

    /// The token that dies when connections are dropped.
    pub(crate) fn kill_token(&self) -> CancellationToken {
        self.inner.kill.lock().clone()
    }

    pub(crate) fn frozen_flag(&self) -> bool {
        self.is_frozen()
    }
}

/// Takes one from a fault's counter; whether there was one to take.
pub(crate) fn take_one(n: &std::sync::atomic::AtomicU32) -> bool {
    n.fetch_update(
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
        |n| n.checked_sub(1),
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::TimerPoll;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn a_timer_poll_reads_at_fixed_instants_and_says_when_a_due_timer_is_read() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut p = TimerPoll::every(10 * s);
        assert_eq!(p.reads(t0 + 3 * s), t0 + 3 * s, "never read: read when due");
        assert_eq!(p.read(t0), t0, "the first pass reads");
        assert_eq!(p.read(t0 + 9 * s), t0, "within the period: the last poll");
        assert_eq!(
            p.reads(t0 + 3 * s),
            t0 + 10 * s,
            "due between polls: the next poll"
        );
        assert_eq!(
            p.reads(t0 + 14 * s),
            t0 + 20 * s,
            "polls keep their phase: due after one, read at the one after"
        );
        assert_eq!(
            p.reads(t0 + 20 * s),
            t0 + 20 * s,
            "due at a poll: read then"
        );
        assert_eq!(p.reads(t0), t0, "already read");
        assert_eq!(
            p.read(t0 + 13 * s),
            t0 + 10 * s,
            "a pass between polls reads at the last one, however late it runs"
        );
        assert_eq!(p.last(t0 + 25 * s), Some(t0 + 20 * s));
    }

    #[test]
    fn a_sleep_registered_just_after_the_poll_that_ended_the_last_one_ends_a_period_late() {
        // The real engine's chained durable sleeps: each is registered a few milliseconds after
        // the poll that ended the one before, so each waits its length and one more period.
        let t0 = Instant::now();
        let mut p = TimerPoll::every(TimerPoll::REAL);
        p.read(t0);
        let mut ended = t0;
        for _ in 0..3 {
            let registered = ended + Duration::from_millis(20);
            ended = p.reads(registered + Duration::from_secs(2));
        }
        assert_eq!(ended - t0, Duration::from_secs(9), "three 2 s sleeps");
    }
}
