//! The retry core at the engine: what an outage costs, counted where the attempts land (the
//! contract's rules one by one, on a paused clock with a seeded RNG, are unit tests in
//! `src/retry/tests.rs`).

use std::time::Duration;

use hatchet_runtime::Outcome;
use tonic::Code;

const SEED: u64 = 42;

/// Our engine and a runtime on it with the retry RNG seeded.
async fn seeded() -> (
    hatchet_dev_engine::DevEngine,
    hatchet_runtime::RuntimeHandle,
) {
    let engine = crate::support::engine().await;
    let rt =
        crate::support::runtime_with(&engine, hatchet_runtime::RuntimeOptions::new().seed(SEED))
            .await;
    (engine, rt)
}

#[tokio::test]
async fn a_sustained_outage_costs_at_most_1_2_attempts_per_operation_counted_at_the_engine() {
    let engine = crate::support::engine().await;
    let rt = crate::support::runtime(&engine).await;
    engine.faults().inject(
        "/Dispatcher/GetVersion",
        u32::MAX,
        crate::support::fail(Code::Unavailable, "outage"),
    );
    let calls: Vec<_> = (0..1000)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move { rt.engine_version().await })
        })
        .collect();
    let mut budget = 0;
    for c in calls {
        if c.await.expect("task").expect_err("outage").outcome() == Outcome::BudgetExhausted {
            budget += 1;
        }
    }
    let attempts = engine.faults().attempts("/Dispatcher/GetVersion");
    assert!(
        attempts <= 1200,
        "{attempts} network attempts for 1000 operations"
    );
    assert!(budget >= 800, "{budget} operations ended on the budget");
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn twenty_reads_at_an_outage_s_start_retry_at_the_reserve_rate_counted_at_the_engine() {
    const PATH: &str = "/Dispatcher/GetVersion";
    let (engine, rt) = seeded().await;
    // The outage outlasts every read (each ends within its 5 attempts' backoff, about 4 s).
    engine.faults().inject(
        PATH,
        u32::MAX,
        crate::support::fail(Code::Unavailable, "outage"),
    );
    engine.faults().record_times(PATH);
    let reads: Vec<_> = (0..20)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move { rt.engine_version().await })
        })
        .collect();
    let mut per_read = Vec::new();
    for r in reads {
        let err = r.await.expect("task").expect_err("outage");
        per_read.push(err.attempts());
    }
    let times = engine.faults().attempt_times(PATH);
    assert_eq!(times.len() as u32, per_read.iter().sum::<u32>());
    // The 20 first attempts arrive together; retries may add 10 + 10% of 20 = 12 in any second.
    // Before the reserve became a rate, the first second saw 79 attempts: every read made 5.
    for (i, t) in times.iter().enumerate() {
        let in_second = times[i..]
            .iter()
            .take_while(|u| u.duration_since(*t) < Duration::from_secs(1))
            .count();
        assert!(
            in_second <= 20 + 12,
            "{in_second} attempts in the second after attempt {i}"
        );
    }
    let total = times.len();
    eprintln!("20 reads in an outage: {total} attempts at the engine, per read {per_read:?}");
    assert!(
        total <= 20 + 12 * 5,
        "{total} attempts for 20 reads ({per_read:?})"
    );
    assert!(
        per_read.iter().filter(|n| **n < 5).count() >= 10,
        "most reads stop early on the budget: {per_read:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

/// The retry service answers for its switch and budgets, and the switch acts on the next call:
/// off, a read at a failing engine makes one attempt (counted there); on again, it is retried.
/// The environment's switch stays off whatever the runtime switch says.
#[tokio::test]
async fn the_retry_service_switches_retries_off_and_on_and_reports_it_counted_at_the_engine() {
    const PATH: &str = "/Dispatcher/GetVersion";
    let (engine, rt) = seeded().await;
    let fail_once = || {
        engine
            .faults()
            .inject(PATH, 1, crate::support::fail(Code::Unavailable, "blip"))
    };
    let report = rt.retries().await.expect("report");
    assert!(report.grpc.retrying && report.rest.retrying, "{report:?}");
    assert!(!report.grpc.off_by_environment, "{report:?}");

    fail_once();
    rt.engine_version().await.expect("retried past the blip");
    assert_eq!(engine.faults().attempts(PATH), 2, "one failure, one retry");

    let off = rt.set_retries(false).await.expect("switch");
    assert!(!off.grpc.retrying && !off.rest.retrying, "{off:?}");
    fail_once();
    let err = rt.engine_version().await.expect_err("no retry");
    assert_eq!(err.outcome(), Outcome::Exhausted, "{err}");
    assert_eq!(err.attempts(), 1, "{err}");
    assert_eq!(
        engine.faults().attempts(PATH),
        3,
        "switched off: one attempt"
    );

    let on = rt.set_retries(true).await.expect("switch");
    assert!(on.grpc.retrying, "{on:?}");
    fail_once();
    rt.engine_version().await.expect("retried again");
    assert_eq!(engine.faults().attempts(PATH), 5);
    // Cancel safety: a switch dropped after its first poll still happens.
    assert!(
        futures::FutureExt::now_or_never(rt.set_retries(false)).is_none(),
        "the answer comes from the actor, after the first poll"
    );
    assert!(
        !rt.retries().await.expect("report").grpc.retrying,
        "the dropped switch was carried out"
    );
    rt.set_retries(true).await.expect("switch");
    let report = rt.retries().await.expect("report");
    assert!(
        report.grpc.first_attempts >= 3 && report.grpc.retries == 2,
        "the budget saw three operations and two retries: {report:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
    assert!(
        rt.retries().await.is_err(),
        "after shutdown the service is gone and says so"
    );

    let mut cfg = engine.client_config();
    cfg.no_retry = true; // as HATCHET_CLIENT_NO_RETRY=true
    let rt = crate::support::runtime_from(cfg, hatchet_runtime::RuntimeOptions::new()).await;
    let on = rt.set_retries(true).await.expect("switch");
    assert!(
        on.grpc.off_by_environment && !on.grpc.retrying && !on.rest.retrying,
        "the environment's switch wins: {on:?}"
    );
    rt.shutdown(Duration::from_secs(1)).await;
}
