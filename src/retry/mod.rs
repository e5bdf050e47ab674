//! Retry core: engine-agnostic backoff, budget, deadlines, the pure decision, and the mechanism
//! that carries it out for unary gRPC and REST calls (docs/contract.md §1–2).
//!
//! # How many attempts can a method make, and why?
//!
//! Look its path up in [`class::UNARY_METHODS`]; then:
//!
//! | class | retried when | attempts at most | worst-case time |
//! |---|---|---|---|
//! | `Read`, `IdempotentWrite` | not sent; UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL; DEADLINE_EXCEEDED from the 30 s per-attempt backstop | 5 | the caller's deadline, else 60 s |
//! | `Write` | only when the request provably never left (connect refused, refused stream) | 5 | the caller's deadline, else 60 s |
//!
//! Every retry after a sent request also needs the endpoint's [`budget`]; a spent budget ends the
//! operation at once. Between attempts: full jitter over 0–250 ms, 0–500 ms, 0–1 s, 0–2 s, or the
//! server's pushback. [`ceiling_table`] computes this for every method; the runtime logs it at start.
//! `HATCHET_CLIENT_NO_RETRY` / `HATCHET_CLIENT_NO_GRPC_RETRY` make every method one attempt, and so
//! does `RuntimeHandle::set_retries(false)` while the runtime runs (the retry service's switch).
//! Streams are never here: the stream supervisor owns them.

pub(crate) mod backoff;
pub(crate) mod budget;
pub(crate) mod class;
pub(crate) mod deadline;
pub(crate) mod decision;
pub(crate) mod executor;
pub(crate) mod grpc;
pub(crate) mod ledger;
pub(crate) mod pushback;
pub(crate) mod report;
pub(crate) mod rest;

pub(crate) use backoff::Backoff;
pub(crate) use budget::BudgetConfig;
pub(crate) use class::RequestClass;
pub(crate) use decision::Policy;
pub(crate) use executor::RetryCore;
pub(crate) use ledger::{Ledger, MethodCounters};
pub(crate) use report::RetryReport;

use std::time::Duration;

/// The computed ceiling of one method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ceiling {
    /// Method path.
    pub method: &'static str,
    /// Its class.
    pub class: RequestClass,
    /// Most network attempts one operation can make.
    pub max_attempts: u32,
    /// Longest one operation can take without a caller deadline.
    pub worst_case: Duration,
}

/// The ceiling of every unary method under `policy`, computed from the policy itself.
pub(crate) fn ceiling_table(policy: &Policy) -> Vec<Ceiling> {
    class::UNARY_METHODS
        .iter()
        .map(|&(method, class, _)| {
            let max_attempts = policy.max_attempts_for(class);
            let sleeps: Duration = (0..max_attempts.saturating_sub(1))
                .map(|n| policy.backoff.window(n))
                .sum();
            let attempts_time = deadline::ATTEMPT_BACKSTOP * max_attempts;
            let worst_case = (sleeps + attempts_time).min(deadline::OPERATION_BACKSTOP);
            Ceiling {
                method,
                class,
                max_attempts,
                worst_case,
            }
        })
        .collect()
}

/// Logs the ceiling table once (the runtime calls this at start).
pub(crate) fn log_ceiling_table(policy: &Policy) {
    for c in ceiling_table(policy) {
        tracing::info!(
            method = c.method,
            class = c.class.as_str(),
            max_attempts = c.max_attempts,
            worst_case_ms = c.worst_case.as_millis() as u64,
            "retry ceiling"
        );
    }
}

#[cfg(test)]
mod tests;
