//! The retry mechanism: runs attempts, sleeps, and carries out [`decide`]'s answers.
//!
//! # Invariants
//!
//! 1. One `tracing` span per logical operation (`op`, `method`, `class`, `attempts`, `outcome`),
//!    one event per failed attempt (`attempt`, `code`, `delay_ms`, `reason`).
//! 2. Every attempt runs under a timeout ([`Deadline::attempt_timeout`]); every sleep is raced
//!    against the caller's cancellation, so a cancelled operation starts no further attempt.
//! 3. The first attempt deposits into the budget; each retry that [`Decision::Retry::spends_budget`]
//!    withdraws from it, and a refused withdrawal ends the operation with *budget exhausted*.
//! 4. The RNG lock is taken only on the retry path, never on a first attempt.
//!
//! # Cancel safety
//!
//! Dropping the future of [`RetryCore::run`] drops the attempt in flight (tonic cancels the HTTP/2
//! stream); no further attempt is started.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::budget::{BudgetConfig, RetryBudget};
use super::class::RequestClass;
use super::deadline::Deadline;
use super::decision::{Decision, Failure, Policy, decide};
use super::ledger::{Ledger, MethodLedger};
use super::report::EndpointRetries;
use crate::error::{Cause, Error, Outcome};

/// Resolves when `token` is cancelled; never without a token.
async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(t) => t.cancelled().await,
        None => std::future::pending().await,
    }
}

/// One failed attempt: the decision's input and the error to hand back if we stop.
#[derive(Debug)]
pub(crate) struct AttemptError {
    /// How it failed.
    pub failure: Failure,
    /// The underlying error.
    pub cause: Cause,
}

impl AttemptError {
    /// The code name the ledger counts the failure under.
    pub(crate) fn code_name(&self) -> String {
        match self.failure {
            Failure::NotSent => "not_sent".into(),
            Failure::Lost => "lost".into(),
            Failure::RefusedUnread => "refused_unread".into(),
            Failure::Misconfigured => "misconfigured".into(),
            Failure::Status { code, .. } => format!("{code:?}"),
            Failure::Http { status, .. } => format!("http_{status}"),
        }
    }
}

/// Whether a failure is the real engine's ambiguous UNAUTHENTICATED ([`AMBIGUOUS_REFUSAL`]) to a
/// token it has accepted before (a pure decision): it is then retried as a request that never ran (the engine's auth check
/// answers before any handler). The real engine answers `invalid auth token` for any error of
/// its token check, a database it cannot reach included (`grpc/middleware/auth.go`): the chaos
/// suite saw every trigger of a PostgreSQL restart refused so. A token refused from the start
/// stays a refusal.
pub(crate) fn refusal_after_acceptance(
    failure: &Failure,
    message: &str,
    token_accepted: bool,
) -> bool {
    token_accepted
        && message == AMBIGUOUS_REFUSAL
        && matches!(
            failure,
            Failure::Status {
                code: tonic::Code::Unauthenticated,
                ..
            }
        )
}

/// The real engine's words for every failure of its token check, a database it cannot reach
/// included: the one UNAUTHENTICATED answer that is not taken as final once the token has been
/// accepted (any other refusal is).
pub(crate) const AMBIGUOUS_REFUSAL: &str = "invalid auth token";

/// What an error says when the engine kept refusing a token it had accepted before.
pub(crate) const REFUSED_AFTER_ACCEPTANCE: &str = "the engine refused the token it had accepted before, on every attempt: it does so while it cannot read its database (a restart of its PostgreSQL), or the token was revoked; nothing ran, so trying again is safe";

/// A logical operation to run.
#[derive(Debug, Clone)]
pub(crate) struct Operation<'a> {
    /// Method path or REST route, for spans, counters and errors.
    pub method: &'a str,
    /// The request's class.
    pub class: RequestClass,
    /// The caller's timeout for the whole operation, if any.
    pub timeout: Option<Duration>,
    /// The caller's cancellation, if any. Borrowed: cloning a token, and dropping the clone,
    /// each lock the token's shared node, which every concurrent call would contend on.
    pub cancel: Option<&'a CancellationToken>,
}

impl<'a> Operation<'a> {
    /// An operation with no caller deadline and no cancellation.
    pub(crate) fn new(method: &'a str, class: RequestClass) -> Self {
        Operation {
            method,
            class,
            timeout: None,
            cancel: None,
        }
    }

    /// Sets the caller's deadline.
    pub(crate) fn timeout(mut self, t: Option<Duration>) -> Self {
        self.timeout = t;
        self
    }

    /// Sets the caller's cancellation.
    pub(crate) fn cancel(mut self, c: Option<&'a CancellationToken>) -> Self {
        self.cancel = c;
        self
    }
}

/// Policy, budget, ledger and RNG of one endpoint. Shared behind an `Arc`.
#[derive(Debug)]
pub(crate) struct RetryCore {
    policy: Policy,
    /// The retry service's switch (`RuntimeHandle::set_retries`): while set, every call makes
    /// one attempt whatever `policy` says. One atomic load per decision, no lock.
    switched_off: AtomicBool,
    /// What a switched-off core decides with.
    off: Policy,
    budget: RetryBudget,
    ledger: Arc<Ledger>,
    rng: Mutex<StdRng>,
    /// Set once the engine has accepted the token (a call answered, a stream opened): from then
    /// on an UNAUTHENTICATED answer is taken for what the real engine also means by it, a
    /// token check that could not read its database ([`refusal_after_acceptance`]).
    token_accepted: AtomicBool,
}

impl RetryCore {
    /// A core with `policy`, a fresh budget and an RNG seeded from `seed`.
    pub(crate) fn new(
        policy: Policy,
        budget: BudgetConfig,
        ledger: Arc<Ledger>,
        seed: u64,
    ) -> Self {
        RetryCore {
            policy,
            switched_off: AtomicBool::new(false),
            off: Policy {
                enabled: false,
                ..policy
            },
            budget: RetryBudget::new(budget),
            ledger,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            token_accepted: AtomicBool::new(false),
        }
    }

    /// Records that the engine accepted the token (a stream opened with it).
    pub(crate) fn note_token_accepted(&self) {
        if !self.token_accepted.load(Ordering::Relaxed) {
            self.token_accepted.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the engine has accepted the token before.
    pub(crate) fn token_accepted(&self) -> bool {
        self.token_accepted.load(Ordering::Relaxed)
    }

    /// The ledger.
    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Turns retries off (every call one attempt) or back to the policy.
    pub(crate) fn switch_off(&self, off: bool) {
        self.switched_off.store(off, Ordering::Relaxed);
    }

    /// The policy decisions use now.
    fn current_policy(&self) -> &Policy {
        if self.switched_off.load(Ordering::Relaxed) {
            &self.off
        } else {
            &self.policy
        }
    }

    /// Whether it retries, and its budget now.
    pub(crate) fn report(&self) -> EndpointRetries {
        let (first_attempts, retries, retry_limit) = self.budget.snapshot();
        let off_by_environment = !self.policy.enabled;
        EndpointRetries {
            retrying: !off_by_environment && !self.switched_off.load(Ordering::Relaxed),
            off_by_environment,
            first_attempts,
            retries,
            retry_limit,
        }
    }

    /// Runs `attempt` under the policy. `attempt` receives the attempt's timeout (to send as
    /// `grpc-timeout`) and returns the value or an [`AttemptError`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the attempt in flight and starts no other.
    pub(crate) async fn run<T, F, Fut>(&self, op: Operation<'_>, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let span = tracing::debug_span!(
            "hatchet.op",
            method = op.method,
            class = op.class.as_str(),
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let counters = self.ledger.method(op.method);
        let result = self
            .run_inner(&op, &counters, &mut attempt)
            .instrument(span.clone())
            .await;
        let (attempts, outcome) = match &result {
            Ok((_, n)) => (*n, "ok"),
            Err(e) => (e.attempts(), e.outcome().as_str()),
        };
        if !span.is_disabled() {
            span.record("attempts", attempts);
            span.record("outcome", outcome);
        }
        counters.finished(outcome);
        result.map(|(v, _)| v)
    }

    async fn run_inner<T, F, Fut>(
        &self,
        op: &Operation<'_>,
        counters: &MethodLedger,
        attempt_fn: &mut F,
    ) -> Result<(T, u32), Error>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let start = Instant::now();
        let deadline = Deadline::new(start, op.timeout);
        let cancel = op.cancel;
        counters.operation();
        self.budget.deposit();
        let mut n: u32 = 0;
        loop {
            n += 1;
            if cancel.is_some_and(CancellationToken::is_cancelled) {
                // Cancelled before this attempt: start nothing (invariant 2).
                return Err(
                    Error::new(Outcome::Cancelled, op.method.to_string()).with_attempts(n - 1)
                );
            }
            let now = Instant::now();
            let timeout = deadline.attempt_timeout(now);
            counters.attempt(n > 1);
            let res = tokio::select! {
                biased;
                _ = cancelled(cancel) => {
                    return Err(Error::new(Outcome::Cancelled, op.method.to_string()).with_attempts(n));
                }
                r = tokio::time::timeout(timeout, attempt_fn(timeout)) => r,
            };
            let mut err = match res {
                Ok(Ok(v)) => {
                    self.note_token_accepted();
                    return Ok((v, n));
                }
                Ok(Err(e)) => e,
                Err(_) => AttemptError {
                    failure: Failure::Status {
                        code: tonic::Code::DeadlineExceeded,
                        pushback: None,
                        attempt_timed_out: true,
                    },
                    cause: Cause::status(tonic::Status::deadline_exceeded(format!(
                        "attempt {n} timed out after {} ms",
                        timeout.as_millis()
                    ))),
                },
            };
            let code = err.code_name();
            counters.failure(&code);
            let message = match &err.cause {
                Cause::Status(st) => st.message(),
                _ => "",
            };
            let refused_after_acceptance =
                refusal_after_acceptance(&err.failure, message, self.token_accepted());
            if refused_after_acceptance {
                err.failure = Failure::NotSent;
            }
            let now = Instant::now();
            let decision = {
                let mut rng = self.rng.lock();
                decide(
                    self.current_policy(),
                    op.class,
                    &err.failure,
                    n,
                    now,
                    &deadline,
                    &mut *rng,
                )
            };
            match decision {
                Decision::Stop { outcome, reason } => {
                    tracing::debug!(attempt = n, code = %code, reason, "attempt failed; stopping");
                    let e = Error::new(outcome, op.method.to_string())
                        .with_attempts(n)
                        .with_cause(err.cause);
                    return Err(if refused_after_acceptance {
                        e.with_detail(REFUSED_AFTER_ACCEPTANCE)
                    } else {
                        e
                    });
                }
                Decision::Retry {
                    delay,
                    spends_budget,
                    reason,
                } => {
                    if spends_budget && !self.budget.try_withdraw() {
                        counters.budget_refusal();
                        tracing::debug!(attempt = n, code = %code, "retry budget spent; stopping");
                        return Err(Error::new(Outcome::BudgetExhausted, op.method.to_string())
                            .with_attempts(n)
                            .with_cause(err.cause));
                    }
                    tracing::debug!(
                        attempt = n,
                        code = %code,
                        delay_ms = delay.as_millis() as u64,
                        reason,
                        "attempt failed; retrying"
                    );
                    tokio::select! {
                        biased;
                        _ = cancelled(cancel) => {
                            return Err(Error::new(Outcome::Cancelled, op.method.to_string())
                                .with_attempts(n)
                                .with_cause(err.cause));
                        }
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}
