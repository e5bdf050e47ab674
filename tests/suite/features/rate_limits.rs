//! Rate limits on the development engine, driven through the runtime: a declared limit holds
//! tasks back until units are free, and a dynamic key limits each of its values on its own.

use std::time::Duration;

use hatchet_runtime::task::RateLimitWindow;
use hatchet_runtime::{Context, TaskError, TaskOptions, Workflow};
use serde_json::{Value, json};

use crate::support::engine_and_runtime as setup;

/// An engine and a worker running an echo task `name` with `options`, the per-minute `limits`
/// declared first, and one run per input.
async fn running(
    name: &str,
    options: TaskOptions,
    limits: &[(&str, i32)],
    inputs: Vec<Value>,
) -> (
    hatchet_dev_engine::DevEngine,
    hatchet_runtime::RuntimeHandle,
    Vec<hatchet_runtime::RunHandle>,
) {
    let (e, rt) = setup().await;
    for (key, limit) in limits {
        rt.put_rate_limit(key, *limit, RateLimitWindow::Minute)
            .await
            .expect("limit");
    }
    rt.register(echo(name, options)).await.expect("register");
    crate::support::start_worker(&rt, 10).await;
    let mut handles = Vec::new();
    for i in inputs {
        handles.push(rt.run_no_wait(name, &i).await.expect("trigger"));
    }
    (e, rt, handles)
}

fn echo(name: &str, options: TaskOptions) -> Workflow {
    Workflow::new(name).task_with("t", options, |i: Value, _c: Context| async move {
        Ok::<_, TaskError>(i)
    })
}

/// Waits for each run's result (10 s at most each).
async fn all_finish(handles: &[hatchet_runtime::RunHandle]) {
    for h in handles {
        let _: Value = tokio::time::timeout(Duration::from_secs(10), h.result())
            .await
            .expect("in time")
            .expect("result");
    }
}

#[tokio::test]
async fn a_declared_limit_holds_tasks_until_units_are_free() {
    let (e, rt) = setup().await;
    rt.put_rate_limit("api", 2, RateLimitWindow::Minute)
        .await
        .expect("limit");
    rt.register(echo("limited", TaskOptions::new().rate_limit("api", 1)))
        .await
        .expect("register");
    rt.register(echo("free", TaskOptions::new()))
        .await
        .expect("register");
    crate::support::start_worker(&rt, 10).await;
    let mut handles = Vec::new();
    for i in 0..5 {
        handles.push(
            rt.run_no_wait("limited", &json!({ "i": i }))
                .await
                .expect("trigger"),
        );
    }
    all_finish(&handles[..2]).await;
    assert_eq!(
        e.stats().queued,
        3,
        "two units per minute: the other three stay queued although slots are free"
    );
    let read = |rt: hatchet_runtime::RuntimeHandle| async move {
        let limits = rt.api().rate_limits().await.expect("rate limits");
        let api = limits.iter().find(|l| l.key == "api").expect("listed");
        (api.limit_value, api.value)
    };
    assert_eq!(
        read(rt.clone()).await,
        (2, 0),
        "nothing left in this window"
    );
    // Raising the limit adds nothing to this window, as on the real engine (its upsert keeps
    // what is left): the three stay queued through a scheduler pass that ran another run.
    rt.put_rate_limit("api", 5, RateLimitWindow::Minute)
        .await
        .expect("raise");
    assert_eq!(read(rt.clone()).await, (5, 0), "raised, nothing added");
    let free = rt.run_no_wait("free", &json!({})).await.expect("trigger");
    all_finish(&[free]).await;
    assert_eq!(e.stats().queued, 3, "held until the window ends");
    // The next window has the raised limit: all three run in it.
    e.advance(Duration::from_secs(60));
    all_finish(&handles[2..]).await;
    assert_eq!(
        read(rt.clone()).await,
        (5, 2),
        "three of five taken in the new window"
    );
}

#[tokio::test]
async fn a_dynamic_key_limits_each_value_on_its_own() {
    let (e, _rt, handles) = running(
        "per-user",
        TaskOptions::new().rate_limit_by("input.user", 1, 1, RateLimitWindow::Hour),
        &[],
        ["ada", "bob", "ada"].map(|u| json!({ "user": u })).to_vec(),
    )
    .await;
    all_finish(&handles[..2]).await;
    assert_eq!(
        e.stats().queued,
        1,
        "ada's second run waits for her next window; bob's own limit let his run"
    );
}

#[tokio::test]
async fn a_task_taking_more_units_than_the_whole_limit_fails_at_once_and_says_why() {
    let (_e, _rt, handles) = running(
        "greedy",
        TaskOptions::new().rate_limit("small", 5),
        &[("small", 2)],
        vec![json!({})],
    )
    .await;
    let err = tokio::time::timeout(Duration::from_secs(10), handles[0].result::<Value>())
        .await
        .expect("it does not wait forever")
        .expect_err("it can never run");
    assert!(err.to_string().contains("can never run"), "{err}");
}
