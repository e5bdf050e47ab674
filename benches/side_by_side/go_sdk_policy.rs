//! The Go SDK's unary retry policy, rebuilt from its documented constants (shared reference
//! `hatchet-go-sdk-behavior.md` §1.2) as a baseline: not our retry core with its budget turned off.
//!
//! - 5 attempts in all (1 + 4 retries), full jitter, base 5 s, factor 2, cap 80 s: retry windows
//!   0-5 s, 0-10 s, 0-20 s, 0-40 s.
//! - Retried codes: RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE (and CANCELLED
//!   with a live caller, which the library treats as a context error it retries).
//! - A 30 s per-attempt timeout; no retry budget, no pushback.

use std::time::Duration;

use rand::RngExt as _;
use tonic::Code;

/// Attempts in all.
pub const MAX_ATTEMPTS: u32 = 5;
const BASE: Duration = Duration::from_secs(5);
const CAP: Duration = Duration::from_secs(80);
/// Per-attempt timeout.
pub const PER_ATTEMPT: Duration = Duration::from_secs(30);

fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::ResourceExhausted
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Unavailable
            | Code::Cancelled
    )
}

/// Runs `attempt` (given the per-attempt timeout) under the Go SDK's policy; the attempts made.
pub async fn call<F, Fut, T>(rng: &mut rand::rngs::StdRng, mut attempt: F) -> u32
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    for n in 0..MAX_ATTEMPTS {
        match attempt(PER_ATTEMPT).await {
            Ok(_) => return n + 1,
            Err(s) if retryable(s.code()) && n + 1 < MAX_ATTEMPTS => {
                let window = BASE.saturating_mul(2u32.saturating_pow(n)).min(CAP);
                let sleep = window.mul_f64(rng.random_range(0.0..1.0));
                tokio::time::sleep(sleep).await;
            }
            Err(_) => return n + 1,
        }
    }
    MAX_ATTEMPTS
}
