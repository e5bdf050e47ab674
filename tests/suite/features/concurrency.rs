//! Workflow concurrency limits on the development engine, driven through the runtime: groups by
//! a key expression, and each strategy for the runs over the limit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hatchet_runtime::task::ConcurrencyStrategy as Strategy;
use hatchet_runtime::{Context, RuntimeHandle, TaskError, Workflow};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::support::engine_and_runtime as setup;

/// How many runs of each group are inside the task now, and the most ever seen at once.
#[derive(Default)]
struct Occupancy {
    now: HashMap<String, usize>,
    peak: HashMap<String, usize>,
    peak_total: usize,
}

/// A workflow limited to `max` runs per `input.group`, whose task holds until `gate` opens
/// and records occupancy; it returns its input.
fn limited(
    name: &str,
    max: i32,
    strategy: Strategy,
    occ: Arc<Mutex<Occupancy>>,
    gate: watch::Receiver<bool>,
) -> Workflow {
    Workflow::new(name)
        .task("t", move |i: Value, c: Context| {
            let (occ, mut gate) = (occ.clone(), gate.clone());
            async move {
                let group = i["group"].as_str().unwrap_or_default().to_string();
                {
                    let mut o = occ.lock();
                    let n = {
                        let n = o.now.entry(group.clone()).or_default();
                        *n += 1;
                        *n
                    };
                    let peak = o.peak.entry(group.clone()).or_default();
                    *peak = (*peak).max(n);
                    let total: usize = o.now.values().sum();
                    o.peak_total = o.peak_total.max(total);
                }
                tokio::select! {
                    _ = gate.wait_for(|open| *open) => {}
                    _ = c.cancellation().cancelled() => {}
                }
                *occ.lock().now.entry(group).or_default() -= 1;
                Ok::<_, TaskError>(i)
            }
        })
        .concurrency("input.group", max, strategy)
}

/// An engine and a worker running [`limited`] as `name` with one run per group.
async fn running(
    name: &str,
    strategy: Strategy,
) -> (
    hatchet_dev_engine::DevEngine,
    RuntimeHandle,
    Arc<Mutex<Occupancy>>,
    watch::Sender<bool>,
) {
    let (e, rt) = setup().await;
    let occ: Arc<Mutex<Occupancy>> = Arc::default();
    let (open, gate) = watch::channel(false);
    rt.register(limited(name, 1, strategy, occ.clone(), gate))
        .await
        .expect("register");
    crate::support::start_worker(&rt, 10).await;
    (e, rt, occ, open)
}

async fn started(
    rt: &RuntimeHandle,
    name: &str,
    inputs: &[Value],
) -> Vec<hatchet_runtime::RunHandle> {
    let mut handles = Vec::new();
    for i in inputs {
        handles.push(rt.run_no_wait(name, i).await.expect("trigger"));
    }
    handles
}

async fn until_occupied(occ: &Arc<Mutex<Occupancy>>, total: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while occ.lock().now.values().sum::<usize>() < total {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("runs start in time");
}

#[tokio::test]
async fn round_robin_runs_one_per_group_at_a_time_and_groups_do_not_wait_on_each_other() {
    let (_e, rt, occ, open) = running("rr", Strategy::GroupRoundRobin).await;
    let inputs: Vec<Value> = (0..6)
        .map(|i| json!({"group": if i % 2 == 0 { "a" } else { "b" }, "i": i}))
        .collect();
    let handles = started(&rt, "rr", &inputs).await;
    until_occupied(&occ, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        occ.lock().now.values().sum::<usize>(),
        2,
        "one run of each group runs; the other four are held although slots are free"
    );
    open.send(true).expect("open");
    for (h, i) in handles.into_iter().zip(&inputs) {
        let out: Value = tokio::time::timeout(Duration::from_secs(10), h.result())
            .await
            .expect("in time")
            .expect("every held run runs in turn");
        assert_eq!(&out, i);
    }
    let o = occ.lock();
    assert_eq!(o.peak.get("a"), Some(&1), "never two of group a at once");
    assert_eq!(o.peak.get("b"), Some(&1));
    assert_eq!(o.peak_total, 2, "the groups ran side by side");
}

#[tokio::test]
async fn cancel_newest_refuses_the_run_over_the_limit() {
    let (_e, rt, occ, open) = running("cn", Strategy::CancelNewest).await;
    let first = started(&rt, "cn", &[json!({"group": "a", "i": 1})]).await;
    until_occupied(&occ, 1).await;
    let second = started(
        &rt,
        "cn",
        &[json!({"group": "a", "i": 2}), json!({"group": "b", "i": 3})],
    )
    .await;
    let err = tokio::time::timeout(Duration::from_secs(10), second[0].result::<Value>())
        .await
        .expect("in time")
        .expect_err("the newest run of a full group is cancelled");
    assert!(err.to_string().to_lowercase().contains("cancel"), "{err}");
    open.send(true).expect("open");
    for h in [&first[0], &second[1]] {
        let _: Value = tokio::time::timeout(Duration::from_secs(10), h.result())
            .await
            .expect("in time")
            .expect("the run in progress and another group's run complete");
    }
}

#[tokio::test]
async fn cancel_in_progress_makes_room_for_the_newest_run() {
    let (_e, rt, occ, open) = running("cip", Strategy::CancelInProgress).await;
    let first = started(&rt, "cip", &[json!({"group": "a", "i": 1})]).await;
    until_occupied(&occ, 1).await;
    let second = started(&rt, "cip", &[json!({"group": "a", "i": 2})]).await;
    let err = tokio::time::timeout(Duration::from_secs(10), first[0].result::<Value>())
        .await
        .expect("in time")
        .expect_err("the run in progress is cancelled");
    assert!(err.to_string().to_lowercase().contains("cancel"), "{err}");
    open.send(true).expect("open");
    let out: Value = tokio::time::timeout(Duration::from_secs(10), second[0].result())
        .await
        .expect("in time")
        .expect("the newest run completes");
    assert_eq!(out["i"], 2);
}
