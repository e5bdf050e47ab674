//! The retry core against docs/contract.md §2, one test per rule, on a paused clock with a seeded RNG.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::error::{Cause, Outcome};
use crate::retry::backoff::UNARY_BACKOFF;
use crate::retry::decision::Failure;
use crate::retry::executor::{AttemptError, Operation};
use crate::retry::{BudgetConfig, Ledger, Policy, RequestClass, RetryCore, grpc};
use parking_lot::Mutex;
use rand::SeedableRng as _;
use rand::rngs::StdRng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Code;

const SEED: u64 = 42;

fn core(policy: Policy) -> RetryCore {
    RetryCore::new(
        policy,
        BudgetConfig::default(),
        Arc::new(Ledger::default()),
        SEED,
    )
}

fn status_err(code: Code) -> AttemptError {
    grpc::attempt_error(tonic::Status::new(code, "scripted"))
}

fn not_sent() -> AttemptError {
    AttemptError {
        failure: Failure::NotSent,
        cause: Cause::status(tonic::Status::unavailable("connect refused")),
    }
}

/// Runs an operation whose attempts all fail with `make()`, recording attempt start times.
async fn run_failing(
    core: &RetryCore,
    op: Operation<'_>,
    make: impl Fn() -> AttemptError,
) -> (crate::error::Error, Vec<Duration>) {
    let start = Instant::now();
    let times = Mutex::new(Vec::new());
    let err = core
        .run(op, |_| {
            times.lock().push(start.elapsed());
            let e = make();
            async move { Err::<(), _>(e) }
        })
        .await
        .expect_err("every attempt fails");
    (err, times.into_inner())
}

#[tokio::test(start_paused = true)]
async fn five_attempts_at_most_with_the_exact_jitter_windows() {
    let c = core(Policy::default());
    let op = Operation::new("/v1.AdminService/GetRunDetails", RequestClass::Read);
    let (err, times) = run_failing(&c, op, || status_err(Code::Unavailable)).await;
    assert_eq!(err.outcome(), Outcome::Exhausted);
    assert_eq!(err.attempts(), 5);
    assert_eq!(times.len(), 5);
    // The gaps are exactly the seeded draws, each inside its window 0-250, 0-500, 0-1000, 0-2000 ms.
    let mut rng = StdRng::seed_from_u64(SEED);
    let windows = [250, 500, 1000, 2000];
    for (n, pair) in times.windows(2).enumerate() {
        let gap = pair[1] - pair[0];
        assert_eq!(gap, UNARY_BACKOFF.delay(n as u32, &mut rng), "gap {n}");
        assert!(
            gap <= Duration::from_millis(windows[n]),
            "gap {n} = {gap:?}"
        );
    }
    let counters = c.ledger().snapshot();
    let m = &counters["/v1.AdminService/GetRunDetails"];
    assert_eq!((m.operations, m.attempts, m.retries), (1, 5, 4));
    assert_eq!(m.failures_by_code["Unavailable"], 5);
    assert_eq!(m.outcomes["exhausted"], 1);
}

#[tokio::test(start_paused = true)]
async fn failed_precondition_and_cancelled_are_not_retried() {
    for code in [
        Code::FailedPrecondition,
        Code::Cancelled,
        Code::Unauthenticated,
        Code::NotFound,
        Code::AlreadyExists,
        Code::Unimplemented,
    ] {
        let c = core(Policy::default());
        let op = Operation::new("/Dispatcher/Heartbeat", RequestClass::IdempotentWrite);
        let (err, times) = run_failing(&c, op, || status_err(code)).await;
        assert_eq!(times.len(), 1, "{code:?} must not be retried");
        assert_eq!(err.outcome(), Outcome::Rejected, "{code:?}");
        assert_eq!(
            err.grpc_status().map(|s| s.code()),
            Some(code),
            "the original status is kept"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn transient_codes_are_retried_for_reads_and_idempotent_writes() {
    for code in [Code::Unavailable, Code::ResourceExhausted, Code::Internal] {
        for class in [RequestClass::Read, RequestClass::IdempotentWrite] {
            let c = core(Policy::default());
            let (_, times) =
                run_failing(&c, Operation::new("/m", class), || status_err(code)).await;
            assert_eq!(times.len(), 5, "{code:?} {class:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn deadline_exceeded_is_retried_only_when_our_backstop_fired_with_time_left() {
    // No caller deadline: the 30 s per-attempt backstop fires, there is time left in the 60 s
    // operation backstop, so a second attempt starts; it is cut by the operation backstop.
    let c = core(Policy::default());
    let n = AtomicU32::new(0);
    let start = Instant::now();
    let err = c
        .run(
            Operation::new("/v1.AdminService/GetRunDetails", RequestClass::Read),
            |_| {
                n.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<(), AttemptError>>()
            },
        )
        .await
        .expect_err("hangs");
    assert_eq!(n.load(Ordering::SeqCst), 2);
    assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
    assert!(
        start.elapsed() <= Duration::from_secs(60),
        "never past the 60 s backstop"
    );

    // With a caller deadline, the attempt gets all of it and the call ends at the deadline.
    let n = AtomicU32::new(0);
    let start = Instant::now();
    let op = Operation::new("/v1.AdminService/GetRunDetails", RequestClass::Read)
        .timeout(Some(Duration::from_secs(10)));
    let err = c
        .run(op, |t| {
            assert_eq!(
                t,
                Duration::from_secs(10),
                "the attempt timeout is the caller's deadline"
            );
            n.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<(), AttemptError>>()
        })
        .await
        .expect_err("hangs");
    assert_eq!(n.load(Ordering::SeqCst), 1);
    assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_secs(10));

    // A DEADLINE_EXCEEDED the server sent (not our timer) is not retried.
    let (err, times) = run_failing(&c, Operation::new("/m", RequestClass::Read), || {
        status_err(Code::DeadlineExceeded)
    })
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::DeadlineExceeded));
}

#[tokio::test(start_paused = true)]
async fn a_write_that_reached_the_server_is_sent_once_and_maybe_executed() {
    let c = core(Policy::default());
    let op = Operation::new("/WorkflowService/TriggerWorkflow", RequestClass::Write);
    let (err, times) = run_failing(&c, op, || status_err(Code::Unavailable)).await;
    assert_eq!(times.len(), 1);
    assert_eq!(err.outcome(), Outcome::MaybeExecuted);
    let op = Operation::new("/WorkflowService/TriggerWorkflow", RequestClass::Write);
    let (err, times) = run_failing(&c, op, || AttemptError {
        failure: Failure::Lost,
        cause: Cause::status(tonic::Status::unknown("reset")),
    })
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::MaybeExecuted));
}

#[tokio::test(start_paused = true)]
async fn a_write_refused_at_connect_is_retried_and_succeeds() {
    let c = core(Policy::default());
    let n = AtomicU32::new(0);
    let out = c
        .run(
            Operation::new("/WorkflowService/TriggerWorkflow", RequestClass::Write),
            |_| {
                let k = n.fetch_add(1, Ordering::SeqCst);
                async move { if k < 2 { Err(not_sent()) } else { Ok("run-1") } }
            },
        )
        .await
        .expect("third attempt succeeds");
    assert_eq!(out, "run-1");
    assert_eq!(n.load(Ordering::SeqCst), 3);
    // All five refused: the outcome says nothing was sent.
    let (err, times) = run_failing(
        &c,
        Operation::new("/EventsService/Push", RequestClass::Write),
        not_sent,
    )
    .await;
    assert_eq!((times.len(), err.outcome()), (5, Outcome::NotSent));
}

#[tokio::test]
async fn a_refused_connection_is_recognised_as_not_sent() {
    // A port that was just free: connecting is refused, so the request provably never left.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("uri")
        .connect_lazy();
    let mut client = crate::protocol::dispatcher_client::DispatcherClient::new(channel);
    let status = client
        .get_version(crate::protocol::GetVersionRequest {})
        .await
        .expect_err("nobody listens");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        grpc::status_not_sent(&status),
        "connect refused must be NotSent: {status:?}"
    );
    assert_eq!(grpc::failure_of_status(&status), Failure::NotSent);
    // A server-sent UNAVAILABLE is not.
    assert!(!grpc::status_not_sent(&tonic::Status::unavailable(
        "draining"
    )));
}

#[tokio::test(start_paused = true)]
async fn budget_caps_attempts_under_a_sustained_outage() {
    let c = Arc::new(core(Policy::default()));
    let attempts = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let c = c.clone();
        let attempts = attempts.clone();
        tasks.push(tokio::spawn(async move {
            c.run(
                Operation::new("/v1.AdminService/GetRunDetails", RequestClass::Read),
                |_| {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    async { Err::<(), _>(status_err(Code::Unavailable)) }
                },
            )
            .await
            .expect_err("outage")
            .outcome()
        }));
    }
    let mut budget_refused = 0;
    for t in tasks {
        if t.await.expect("task") == Outcome::BudgetExhausted {
            budget_refused += 1;
        }
    }
    let per_op = f64::from(attempts.load(Ordering::SeqCst)) / 1000.0;
    assert!(per_op <= 1.2, "{per_op} attempts per operation");
    assert!(
        budget_refused >= 800,
        "most operations end on the budget: {budget_refused}"
    );
    let m = &c.ledger().snapshot()["/v1.AdminService/GetRunDetails"];
    assert_eq!(m.budget_refusals, budget_refused);
}

#[tokio::test(start_paused = true)]
async fn unsent_retries_do_not_spend_the_budget() {
    let budget = BudgetConfig {
        reserve_per_sec: 0,
        retry_ratio_pct: 0,
        ..BudgetConfig::default()
    };
    let c = RetryCore::new(Policy::default(), budget, Arc::new(Ledger::default()), SEED);
    // An empty budget refuses a sent retry at once...
    let (err, times) = run_failing(&c, Operation::new("/m", RequestClass::Read), || {
        status_err(Code::Unavailable)
    })
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::BudgetExhausted));
    // ...but retries of requests that never left go on.
    let (err, times) = run_failing(&c, Operation::new("/m", RequestClass::Read), not_sent).await;
    assert_eq!((times.len(), err.outcome()), (5, Outcome::NotSent));
}

fn with_pushback(v: &str) -> AttemptError {
    let mut s = tonic::Status::unavailable("slow down");
    s.metadata_mut()
        .insert("grpc-retry-pushback-ms", v.parse().expect("ascii"));
    grpc::attempt_error(s)
}

#[tokio::test(start_paused = true)]
async fn grpc_pushback_replaces_the_backoff_or_stops() {
    let c = core(Policy::default());
    let (_, times) = run_failing(&c, Operation::new("/m", RequestClass::Read), || {
        with_pushback("3000")
    })
    .await;
    assert_eq!(times.len(), 5);
    for pair in times.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            Duration::from_secs(3),
            "pushback, not jitter"
        );
    }
    for bad in ["-1", "abc"] {
        let (_, times) = run_failing(&c, Operation::new("/m", RequestClass::Read), || {
            with_pushback(bad)
        })
        .await;
        assert_eq!(times.len(), 1, "pushback {bad:?} means do not retry");
    }
    // Pushback cannot make a write retry.
    let (err, times) = run_failing(&c, Operation::new("/m", RequestClass::Write), || {
        with_pushback("10")
    })
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::MaybeExecuted));
}

fn http(status: u16, retry_after: Option<u64>) -> AttemptError {
    AttemptError {
        failure: Failure::Http {
            status,
            retry_after: retry_after.map(Duration::from_secs),
        },
        cause: Cause::HttpStatus {
            status,
            body: String::new(),
        },
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_capped() {
    let c = core(Policy::default());
    let (_, times) = run_failing(&c, Operation::new("GET /runs", RequestClass::Read), || {
        http(429, Some(20))
    })
    .await;
    assert_eq!(
        times.len(),
        3,
        "the third sleep of 20 s would pass the 60 s backstop"
    );
    assert_eq!(times[1] - times[0], Duration::from_secs(20));
    let (err, times) = run_failing(&c, Operation::new("GET /runs", RequestClass::Read), || {
        http(503, Some(61))
    })
    .await;
    assert_eq!(times.len(), 1, "beyond the 60 s cap ends the retries");
    assert_eq!(err.outcome(), Outcome::Exhausted);
    // Past the caller's deadline: stop at once.
    let op = Operation::new("GET /runs", RequestClass::Read).timeout(Some(Duration::from_secs(5)));
    let (err, times) = run_failing(&c, op, || http(503, Some(10))).await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::DeadlineExceeded));
    // 502/504 use the backoff; 500 and 4xx are not retried; writes are sent once.
    let (_, times) = run_failing(&c, Operation::new("GET /runs", RequestClass::Read), || {
        http(502, None)
    })
    .await;
    assert_eq!(times.len(), 5);
    let (err, times) = run_failing(&c, Operation::new("GET /runs", RequestClass::Read), || {
        http(404, None)
    })
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::Rejected));
    let (err, times) = run_failing(
        &c,
        Operation::new("POST /runs", RequestClass::Write),
        || http(503, Some(1)),
    )
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::MaybeExecuted));
}

#[tokio::test(start_paused = true)]
async fn a_sleep_that_cannot_finish_before_the_deadline_is_not_started() {
    let c = core(Policy::default());
    let start = Instant::now();
    let op = Operation::new("/m", RequestClass::Read).timeout(Some(Duration::from_millis(300)));
    let (err, times) = run_failing(&c, op, || with_pushback("1000")).await;
    assert_eq!(times.len(), 1);
    assert_eq!(err.outcome(), Outcome::DeadlineExceeded);
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "returned at once, without sleeping"
    );
}

#[tokio::test(start_paused = true)]
async fn cancellation_mid_backoff_starts_no_further_attempt() {
    let c = core(Policy::default());
    let token = CancellationToken::new();
    let n = Arc::new(AtomicU32::new(0));
    let t2 = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        t2.cancel();
    });
    let op = Operation::new("/m", RequestClass::Read).cancel(Some(&token));
    let err = c
        .run(op, |_| {
            n.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(with_pushback("5000")) }
        })
        .await
        .expect_err("cancelled");
    assert_eq!(err.outcome(), Outcome::Cancelled);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(n.load(Ordering::SeqCst), 1, "no attempt after the cancel");
}

#[tokio::test(start_paused = true)]
async fn the_kill_switch_makes_every_call_one_attempt() {
    let c = core(Policy::disabled());
    let (err, times) = run_failing(&c, Operation::new("/m", RequestClass::Read), || {
        status_err(Code::Unavailable)
    })
    .await;
    assert_eq!((times.len(), err.outcome()), (1, Outcome::Exhausted));
    let (_, times) = run_failing(&c, Operation::new("/m", RequestClass::Write), not_sent).await;
    assert_eq!(times.len(), 1);
    // The ceiling table reports it.
    for row in crate::retry::ceiling_table(&Policy::disabled()) {
        assert_eq!(row.max_attempts, 1, "{}", row.method);
    }
    for row in crate::retry::ceiling_table(&Policy::default()) {
        assert_eq!(row.max_attempts, 5, "{}", row.method);
        assert_eq!(row.worst_case, Duration::from_secs(60), "{}", row.method);
    }
}

#[tokio::test(start_paused = true)]
async fn an_already_cancelled_operation_makes_no_attempt() {
    let c = core(Policy::default());
    let token = CancellationToken::new();
    token.cancel();
    let n = AtomicU32::new(0);
    let err = c
        .run(
            Operation::new("/m", RequestClass::Read).cancel(Some(&token)),
            |_| {
                n.fetch_add(1, Ordering::SeqCst);
                async { Ok::<(), AttemptError>(()) }
            },
        )
        .await
        .expect_err("cancelled");
    assert_eq!((err.outcome(), err.attempts()), (Outcome::Cancelled, 0));
    assert_eq!(n.load(Ordering::SeqCst), 0, "no attempt was started");
}

/// Not a test: the retry core's fixed cost per call, an attempt that is ready at once, on a
/// real clock. `cargo test --release --lib retry::tests::cost_per_call -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, run by hand"]
fn cost_per_call() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c = core(Policy::default());
        let token = CancellationToken::new();
        let n = 1_000_000u32;
        for round in 0..3 {
            let t0 = std::time::Instant::now();
            for _ in 0..n {
                let op = Operation::new("/Dispatcher/GetVersion", RequestClass::Read)
                    .cancel(Some(&token));
                let v = c
                    .run(op, |_| async { Ok::<u32, AttemptError>(1) })
                    .await
                    .expect("ready");
                std::hint::black_box(v);
            }
            let per = t0.elapsed().as_nanos() as f64 / f64::from(n);
            println!("round {round}: {per:.0} ns per call");
        }
    });
}

/// The real engine's gRPC layer refuses a message over its receive limit before reading it
/// (RESOURCE_EXHAUSTED, `grpc: received message larger than max (N vs. M)`): nothing ran, so a
/// write is rejected after one attempt, never "maybe executed".
#[tokio::test(start_paused = true)]
async fn a_message_the_server_refused_unread_is_rejected_once() {
    let c = core(Policy::default());
    let (err, times) = run_failing(
        &c,
        Operation::new("/WorkflowService/TriggerWorkflow", RequestClass::Write),
        || {
            grpc::attempt_error(tonic::Status::resource_exhausted(
                "grpc: received message larger than max (5242905 vs. 4194304)",
            ))
        },
    )
    .await;
    assert_eq!(err.outcome(), Outcome::Rejected, "{err}");
    assert_eq!(times.len(), 1, "not retried");
    // Any other RESOURCE_EXHAUSTED stays transient: a write may have run.
    let (err, _) = run_failing(
        &c,
        Operation::new("/WorkflowService/TriggerWorkflow", RequestClass::Write),
        || status_err(Code::ResourceExhausted),
    )
    .await;
    assert_eq!(err.outcome(), Outcome::MaybeExecuted, "{err}");
}

/// UNAUTHENTICATED is a refusal until the engine has accepted the token once; afterwards it is
/// retried as a request that never ran (the real engine's token check answers it whenever its
/// database is unreachable).
#[tokio::test(start_paused = true)]
async fn unauthenticated_is_retried_only_after_the_token_was_accepted() {
    let c = core(Policy::default());
    let write = || Operation::new("/WorkflowService/TriggerWorkflow", RequestClass::Write);
    let ambiguous = || grpc::attempt_error(tonic::Status::unauthenticated("invalid auth token"));
    let (err, times) = run_failing(&c, write(), ambiguous).await;
    assert_eq!(
        (err.outcome(), times.len()),
        (Outcome::Rejected, 1),
        "{err}"
    );
    c.note_token_accepted();
    let (err, times) = run_failing(&c, write(), ambiguous).await;
    assert_eq!(err.outcome(), Outcome::NotSent, "{err}");
    assert!(times.len() > 1, "retried: {times:?}");
    assert!(err.to_string().contains("accepted before"), "{err}");
    // Any other refusal stays final.
    let (err, times) = run_failing(&c, write(), || status_err(Code::Unauthenticated)).await;
    assert_eq!(
        (err.outcome(), times.len()),
        (Outcome::Rejected, 1),
        "{err}"
    );
}
