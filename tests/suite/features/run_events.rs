//! Streams of a run's events: chunks and the final event; a gap marker after a reconnect; the
//! end read from GetRunDetails when the run finished during the gap.

use std::time::Duration;

use futures::StreamExt as _;
use hatchet_dev_engine::Fault;
use hatchet_runtime::run::{FinalStatus, RunEvent, TaskEventKind};
use hatchet_runtime::{Context, TaskError, TriggerOptions, Workflow};
use serde_json::{Value, json};
use tonic::Code;

use crate::support::engine_and_runtime as setup;

fn streamer() -> Workflow {
    Workflow::new("streamer").task("t", |_i: Value, c: Context| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for i in 0..3 {
            c.put_stream(format!("chunk-{i}")).await?;
        }
        Ok::<_, TaskError>(json!({"done": true}))
    })
}

async fn collect(s: impl futures::Stream<Item = RunEvent>) -> Vec<RunEvent> {
    tokio::time::timeout(Duration::from_secs(20), s.collect::<Vec<_>>())
        .await
        .expect("the stream ends")
}

/// An engine and a runtime whose worker runs the `streamer` workflow.
async fn streaming() -> (
    hatchet_dev_engine::DevEngine,
    hatchet_runtime::RuntimeHandle,
) {
    let (e, rt) = setup().await;
    rt.register(streamer()).await.expect("register");
    crate::support::start_worker(&rt, 2).await;
    (e, rt)
}

#[tokio::test]
async fn a_runs_events_end_with_its_final_state_and_carry_the_chunks() {
    let (_e, rt) = streaming().await;
    let h = rt
        .run_no_wait("streamer", &json!({}))
        .await
        .expect("trigger");
    let events = collect(rt.run_events(h.run_id())).await;
    let chunks: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Chunk { data, .. } => Some(data.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(chunks, ["chunk-0", "chunk-1", "chunk-2"]);
    assert!(events.iter().any(|e| matches!(
        e,
        RunEvent::Task {
            kind: TaskEventKind::Completed,
            ..
        }
    )));
    assert_eq!(
        events.last(),
        Some(&RunEvent::Finished {
            run_id: h.run_id().to_string(),
            status: FinalStatus::Completed
        })
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_transient_error_marks_a_gap_and_the_end_is_never_missed() {
    let (e, rt) = streaming().await;
    // The first subscription dies at once with UNAVAILABLE.
    e.faults().inject(
        "/Dispatcher/SubscribeToWorkflowEvents",
        1,
        Fault::EndStream {
            after: 0,
            code: Some(Code::Unavailable as i32),
        },
    );
    let h = rt
        .run_no_wait("streamer", &json!({}))
        .await
        .expect("trigger");
    let events = collect(rt.run_events(h.run_id())).await;
    assert!(
        matches!(events.first(), Some(RunEvent::Gap { .. })),
        "{events:?}"
    );
    assert!(
        matches!(
            events.last(),
            Some(RunEvent::Finished {
                status: FinalStatus::Completed,
                ..
            })
        ),
        "{events:?}"
    );

    // A run that finishes while nobody listens: the end still arrives (the engine EOFs at once).
    let h2 = rt
        .run_no_wait("streamer", &json!({}))
        .await
        .expect("trigger");
    let _: Value = h2.result().await.expect("done");
    let events = collect(rt.run_events(h2.run_id())).await;
    assert_eq!(
        events.last(),
        Some(&RunEvent::Finished {
            run_id: h2.run_id().to_string(),
            status: FinalStatus::Completed
        })
    );
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn events_by_metadata_follow_matching_runs() {
    let (_e, rt) = streaming().await;
    let stream = rt.events_by_metadata("batch", "b7");
    let mut meta = serde_json::Map::new();
    meta.insert("batch".into(), json!("b7"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let opts = TriggerOptions::new().metadata(meta);
    let h = rt
        .run_no_wait_with("streamer", &json!({}), opts)
        .await
        .expect("trigger");
    let events = collect(stream).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, RunEvent::Chunk { run_id, .. } if run_id == h.run_id()))
    );
    assert!(matches!(
        events.last(),
        Some(RunEvent::Finished {
            status: FinalStatus::Completed,
            ..
        })
    ));
    rt.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn events_by_metadata_reconnect_after_unavailable_or_an_early_eof_with_a_gap_marker() {
    for code in [Some(Code::Unavailable as i32), None] {
        let (e, rt) = streaming().await;
        e.faults().inject(
            "/Dispatcher/SubscribeToWorkflowEvents",
            1,
            Fault::EndStream { after: 0, code },
        );
        let stream = rt.events_by_metadata("batch", "b9");
        // The first reconnect comes within the first backoff window (at most 1 s); a run created
        // inside the gap would not be followed (by design: the Gap item says so).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut meta = serde_json::Map::new();
        meta.insert("batch".into(), json!("b9"));
        let opts = TriggerOptions::new().metadata(meta);
        rt.run_no_wait_with("streamer", &json!({}), opts)
            .await
            .expect("trigger");
        let events = collect(stream).await;
        assert!(
            matches!(events.first(), Some(RunEvent::Gap { .. })),
            "{code:?}: {events:?}"
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, RunEvent::Gap { .. }))
                .count(),
            1,
            "{code:?}: one gap, then the run's events once: {events:?}"
        );
        assert!(
            matches!(
                events.last(),
                Some(RunEvent::Finished {
                    status: FinalStatus::Completed,
                    ..
                })
            ),
            "{code:?}: {events:?}"
        );
        rt.shutdown(Duration::from_secs(1)).await;
    }
}
