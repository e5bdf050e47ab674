//! Property tests (proptest, unit tests of the crate: they drive internals): backoff windows and caps, deadline arithmetic, Retry-After and
//! pushback parsing, the retry decision, token parsing, the action payload.

use std::time::{Duration, SystemTime};

use crate::config::{SecretToken, encode_dev_token, parse_claims};
use crate::error::Outcome;
use crate::retry::RequestClass;
use crate::retry::backoff::{Backoff, STREAM_BACKOFF, UNARY_BACKOFF};
use crate::retry::deadline::Deadline;
use crate::retry::decision::{Decision, Failure, Policy, decide};
use crate::retry::pushback::{Pushback, parse_grpc_pushback, parse_retry_after};
use proptest::prelude::*;
use rand::SeedableRng as _;
use rand::rngs::StdRng;
use tokio::time::Instant;
use tonic::Code;

fn code() -> impl Strategy<Value = Code> {
    (0i32..17).prop_map(Code::from_i32)
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        Just(Failure::NotSent),
        Just(Failure::Lost),
        (
            code(),
            proptest::option::of(prop_oneof![
                (0u64..100_000).prop_map(|ms| Pushback::After(Duration::from_millis(ms))),
                Just(Pushback::DoNotRetry)
            ]),
            any::<bool>()
        )
            .prop_map(|(code, pushback, attempt_timed_out)| Failure::Status {
                code,
                pushback,
                attempt_timed_out
            }),
        (400u16..600, proptest::option::of(0u64..200)).prop_map(|(status, ra)| Failure::Http {
            status,
            retry_after: ra.map(Duration::from_secs)
        }),
    ]
}

fn class() -> impl Strategy<Value = RequestClass> {
    prop_oneof![
        Just(RequestClass::Read),
        Just(RequestClass::IdempotentWrite),
        Just(RequestClass::Write)
    ]
}

proptest! {
    #[test]
    fn backoff_delays_stay_inside_their_capped_windows(retry in 0u32..200, seed in any::<u64>(), base_ms in 1u64..5_000, cap_ms in 1u64..120_000, factor in 1u32..10) {
        let b = Backoff { base: Duration::from_millis(base_ms), factor, cap: Duration::from_millis(cap_ms) };
        let mut rng = StdRng::seed_from_u64(seed);
        let d = b.delay(retry, &mut rng);
        prop_assert!(d <= b.window(retry));
        prop_assert!(b.window(retry) <= b.cap);
        prop_assert!(b.window(retry) <= b.window(retry + 1) || b.window(retry) == b.cap);
        prop_assert!(UNARY_BACKOFF.delay(retry, &mut rng) <= Duration::from_secs(5));
        prop_assert!(STREAM_BACKOFF.delay(retry, &mut rng) <= Duration::from_secs(30));
    }

    #[test]
    fn the_decision_never_retries_a_write_that_may_have_run_nor_passes_attempts_or_deadline(
        f in failure(), c in class(), attempt in 1u32..10, left_ms in 0u64..120_000, caller in any::<bool>(), seed in any::<u64>()
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("rt");
        rt.block_on(async {
            let now = Instant::now();
            let deadline = Deadline::new(now, caller.then(|| Duration::from_millis(left_ms)));
            let policy = Policy::default();
            let d = decide(&policy, c, &f, attempt, now, &deadline, &mut StdRng::seed_from_u64(seed));
            if let Decision::Retry { delay, spends_budget, .. } = d {
                prop_assert!(attempt < policy.max_attempts, "never past the attempt cap");
                prop_assert!(deadline.fits_sleep(now, delay), "never sleeps past the deadline");
                if c == RequestClass::Write {
                    prop_assert_eq!(f, Failure::NotSent, "a write is retried only when it was never sent");
                }
                prop_assert_eq!(spends_budget, f != Failure::NotSent);
                if let Failure::Status { code, .. } = f {
                    prop_assert!(code != Code::Cancelled && code != Code::FailedPrecondition && code != Code::InvalidArgument);
                }
            }
            if let Decision::Stop { outcome, .. } = d
                && c == RequestClass::Write
                && matches!(f, Failure::Lost)
            {
                prop_assert_eq!(outcome, Outcome::MaybeExecuted);
            }
            Ok(())
        })?;
    }

    #[test]
    fn retry_after_and_pushback_parsers_are_total(s in ".{0,40}", secs in 0u64..10_000_000) {
        let now = SystemTime::now();
        let _ = parse_retry_after(&s, now);
        let _ = parse_grpc_pushback(&s);
        prop_assert_eq!(parse_retry_after(&secs.to_string(), now), Some(Duration::from_secs(secs)));
        prop_assert_eq!(parse_grpc_pushback(&secs.to_string()), Pushback::After(Duration::from_millis(secs)));
        let neg = format!("-{secs}");
        prop_assert_eq!(parse_grpc_pushback(&neg), Pushback::DoNotRetry);
        // An HTTP-date in the future comes back as the (whole-second) distance to it.
        let at = now + Duration::from_secs(secs.min(86_400));
        let parsed = parse_retry_after(&httpdate::fmt_http_date(at), now).expect("date parses");
        prop_assert!(parsed <= Duration::from_secs(secs.min(86_400)) && parsed + Duration::from_secs(1) >= Duration::from_secs(secs.min(86_400)));
    }

    #[test]
    fn token_parsing_never_panics_and_dev_tokens_round_trip(s in ".{0,200}", tenant in "[a-f0-9-]{1,36}", port in 1u16..65535, exp in 0u64..5_000_000_000) {
        let _ = parse_claims("HATCHET_CLIENT_TOKEN", &SecretToken::new(s.clone()));
        let dotted = format!("{s}.{s}.{s}");
        let _ = parse_claims("HATCHET_CLIENT_TOKEN", &SecretToken::new(dotted));
        let t = encode_dev_token(&tenant, "http://127.0.0.1:8080", &format!("127.0.0.1:{port}"), exp, "id");
        let c = parse_claims("HATCHET_CLIENT_TOKEN", &t).expect("our tokens parse");
        prop_assert_eq!(c.tenant_id.as_deref(), Some(tenant.as_str()));
        let expected = format!("127.0.0.1:{port}");
        prop_assert_eq!(c.grpc_broadcast_address.as_deref(), Some(expected.as_str()));
        prop_assert_eq!(c.expires_at, Some(exp as f64));
    }
}
