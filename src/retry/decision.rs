//! The retry decision: a pure function from what happened to what to do next.
//!
//! It knows nothing about networks or actors: the mechanism ([`super::executor`]) feeds it the
//! failure of an attempt and carries out the answer. Tests drive it with a seeded RNG and a paused
//! clock.
//!
//! # Rules (docs/contract.md §2)
//!
//! 1. A request that provably never left ([`Failure::NotSent`]) may be retried whatever its class,
//!    and does not spend the retry budget.
//! 2. A `Write` that may have reached the engine is never retried: the outcome is *maybe executed*.
//! 3. Transient codes ([`TRANSIENT_CODES`]) are retried for reads and idempotent writes;
//!    DEADLINE_EXCEEDED only when the per-attempt backstop fired with time left on the operation.
//! 4. gRPC pushback replaces the backoff; a negative or malformed one stops. HTTP `Retry-After`
//!    (429, 503) replaces the backoff up to [`super::pushback::RETRY_AFTER_CAP`]; beyond it, stop.
//! 5. At most [`Policy::max_attempts`] attempts; a sleep is only started if an attempt can follow
//!    it before the deadline.

use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;

use super::backoff::{Backoff, UNARY_BACKOFF};
use super::class::RequestClass;
use super::deadline::Deadline;
use super::pushback::{Pushback, RETRY_AFTER_CAP};
use crate::error::Outcome;

/// gRPC codes retried for reads and idempotent writes. DEADLINE_EXCEEDED is handled separately.
pub(crate) const TRANSIENT_CODES: [Code; 3] =
    [Code::Unavailable, Code::ResourceExhausted, Code::Internal];

/// HTTP statuses retried for GET/HEAD.
pub(crate) const TRANSIENT_HTTP: [u16; 4] = [429, 502, 503, 504];

/// HTTP statuses whose `Retry-After` is honoured.
pub(crate) const RETRY_AFTER_HTTP: [u16; 2] = [429, 503];

/// The unary retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Attempts per operation, the first included.
    pub max_attempts: u32,
    /// Backoff between attempts.
    pub backoff: Backoff,
    /// `false` turns retries off (`HATCHET_CLIENT_NO_RETRY`): one attempt per operation.
    pub enabled: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: 5,
            backoff: UNARY_BACKOFF,
            enabled: true,
        }
    }
}

impl Policy {
    /// The policy with retries switched off.
    pub(crate) fn disabled() -> Self {
        Policy {
            enabled: false,
            ..Policy::default()
        }
    }

    /// The most network attempts one operation of `class` can make.
    pub(crate) fn max_attempts_for(&self, _class: RequestClass) -> u32 {
        // Writes too: they are retried when the request never left (rule 1).
        if self.enabled { self.max_attempts } else { 1 }
    }
}

/// The gRPC and REST policies for the two kill switches (docs/contract.md §2 "Switches"):
/// `HATCHET_CLIENT_NO_RETRY` turns off unary gRPC and REST retries, `HATCHET_CLIENT_NO_GRPC_RETRY`
/// unary gRPC retries only. Streams are not affected by either.
pub(crate) fn policies_for(no_retry: bool, no_grpc_retry: bool) -> (Policy, Policy) {
    let grpc = if no_retry || no_grpc_retry {
        Policy::disabled()
    } else {
        Policy::default()
    };
    let rest = if no_retry {
        Policy::disabled()
    } else {
        Policy::default()
    };
    (grpc, rest)
}

#[cfg(test)]
mod switch_tests {
    use super::*;

    #[test]
    fn each_switch_turns_off_what_it_names() {
        assert_eq!(
            policies_for(false, false),
            (Policy::default(), Policy::default())
        );
        assert_eq!(
            policies_for(true, false),
            (Policy::disabled(), Policy::disabled())
        );
        assert_eq!(
            policies_for(false, true),
            (Policy::disabled(), Policy::default())
        );
        assert_eq!(
            policies_for(true, true),
            (Policy::disabled(), Policy::disabled())
        );
    }
}

/// How one attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The request provably never reached the server (connect refused, refused stream).
    NotSent,
    /// The connection broke after the request may have been sent.
    Lost,
    /// The server's transport refused the request unread (a message over its size limit):
    /// nothing ran, and the same request is refused again.
    RefusedUnread,
    /// The connection could not be made as configured (the server does not speak TLS where
    /// TLS was asked for): nothing ran, and trying again never helps.
    Misconfigured,
    /// The server (or tonic) answered with a gRPC status.
    Status {
        /// The code.
        code: Code,
        /// `grpc-retry-pushback-ms`, when present.
        pushback: Option<Pushback>,
        /// Whether our own per-attempt backstop timer produced this (DEADLINE_EXCEEDED).
        attempt_timed_out: bool,
    },
    /// A REST response with a non-success status.
    Http {
        /// The status code.
        status: u16,
        /// Parsed `Retry-After`, when present and parseable.
        retry_after: Option<Duration>,
    },
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Sleep `delay`, then attempt again.
    Retry {
        /// The sleep.
        delay: Duration,
        /// Whether the retry must be withdrawn from the budget (false for unsent requests).
        spends_budget: bool,
        /// Why (for the attempt event).
        reason: &'static str,
    },
    /// Give up with this outcome.
    Stop {
        /// The outcome class.
        outcome: Outcome,
        /// Why (for the attempt event).
        reason: &'static str,
    },
}

/// The failure's own verdict: retryable or not, and the outcome if we stop here.
fn classify(
    class: RequestClass,
    failure: &Failure,
    deadline: &Deadline,
    now: Instant,
) -> (bool, Outcome) {
    let sent_outcome = if class == RequestClass::Write {
        Outcome::MaybeExecuted
    } else {
        Outcome::Exhausted
    };
    match *failure {
        Failure::NotSent => (true, Outcome::NotSent),
        Failure::Lost => (class.retries_after_send(), sent_outcome),
        Failure::RefusedUnread => (false, Outcome::Rejected),
        Failure::Misconfigured => (false, Outcome::Invalid),
        Failure::Status {
            code,
            attempt_timed_out,
            ..
        } => match code {
            c if TRANSIENT_CODES.contains(&c) => (class.retries_after_send(), sent_outcome),
            Code::DeadlineExceeded => {
                let retry =
                    attempt_timed_out && class.retries_after_send() && deadline.can_attempt(now);
                (retry, Outcome::DeadlineExceeded)
            }
            Code::Cancelled if class == RequestClass::Write => (false, Outcome::MaybeExecuted),
            _ => (false, Outcome::Rejected),
        },
        Failure::Http { status, .. } => {
            if TRANSIENT_HTTP.contains(&status) {
                (class == RequestClass::Read, sent_outcome)
            } else {
                (false, Outcome::Rejected)
            }
        }
    }
}

/// Decides what follows attempt number `attempt` (1-based) that failed with `failure`.
pub(crate) fn decide<R: rand::Rng + ?Sized>(
    policy: &Policy,
    class: RequestClass,
    failure: &Failure,
    attempt: u32,
    now: Instant,
    deadline: &Deadline,
    rng: &mut R,
) -> Decision {
    let (retryable, outcome) = classify(class, failure, deadline, now);
    if !retryable {
        return Decision::Stop {
            outcome,
            reason: "not retryable",
        };
    }
    if !policy.enabled {
        return Decision::Stop {
            outcome,
            reason: "retries disabled",
        };
    }
    if attempt >= policy.max_attempts {
        return Decision::Stop {
            outcome,
            reason: "attempts exhausted",
        };
    }
    let delay = match *failure {
        Failure::Status {
            pushback: Some(Pushback::DoNotRetry),
            ..
        } => {
            return Decision::Stop {
                outcome,
                reason: "server pushback: do not retry",
            };
        }
        Failure::Status {
            pushback: Some(Pushback::After(d)),
            ..
        } => d,
        Failure::Http {
            status,
            retry_after: Some(d),
        } if RETRY_AFTER_HTTP.contains(&status) => {
            if d > RETRY_AFTER_CAP {
                return Decision::Stop {
                    outcome,
                    reason: "Retry-After beyond the 60 s cap",
                };
            }
            d
        }
        _ => policy.backoff.delay(attempt - 1, rng),
    };
    if !deadline.fits_sleep(now, delay) {
        let outcome = if outcome == Outcome::NotSent || !deadline.caller_set {
            outcome
        } else {
            Outcome::DeadlineExceeded
        };
        return Decision::Stop {
            outcome,
            reason: "no time left for another attempt",
        };
    }
    Decision::Retry {
        delay,
        spends_budget: *failure != Failure::NotSent,
        reason: "transient",
    }
}
