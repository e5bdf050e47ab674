//! Wire compatibility: method paths, field numbers on the wire, round trips, and the retry
//! classification table's coverage of every compiled method.

use std::collections::{BTreeMap, BTreeSet};

use hatchet_runtime::protocol::{self as proto, v1};
use prost::Message as _;
use prost_types::FileDescriptorSet;

fn descriptor() -> FileDescriptorSet {
    FileDescriptorSet::decode(proto::FILE_DESCRIPTOR_SET).expect("descriptor set decodes")
}

/// (path, client_streaming, server_streaming) of every compiled method.
fn compiled_methods() -> Vec<(String, bool, bool)> {
    let mut out = Vec::new();
    for f in descriptor().file {
        let pkg = f.package().to_string();
        for s in &f.service {
            for m in &s.method {
                let svc = if pkg.is_empty() {
                    s.name().to_string()
                } else {
                    format!("{pkg}.{}", s.name())
                };
                out.push((
                    format!("/{svc}/{}", m.name()),
                    m.client_streaming(),
                    m.server_streaming(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// The field numbers of message `full_name` (e.g. `AssignedAction`, `v1.TriggerWorkflowRequest`).
fn field_numbers(full_name: &str) -> BTreeSet<u32> {
    for f in descriptor().file {
        let pkg = f.package().to_string();
        for m in &f.message_type {
            let name = if pkg.is_empty() {
                m.name().to_string()
            } else {
                format!("{pkg}.{}", m.name())
            };
            if name == full_name {
                return m.field.iter().map(|x| x.number() as u32).collect();
            }
        }
    }
    panic!("message {full_name} not in the descriptor set");
}

/// The top-level field numbers present in an encoded message (a minimal wire walker).
fn wire_fields(mut buf: &[u8]) -> BTreeSet<u32> {
    fn varint(buf: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = buf[0];
            *buf = &buf[1..];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        v
    }
    let mut seen = BTreeSet::new();
    while !buf.is_empty() {
        let key = varint(&mut buf);
        seen.insert((key >> 3) as u32);
        match key & 7 {
            0 => {
                varint(&mut buf);
            }
            1 => buf = &buf[8..],
            2 => {
                let n = varint(&mut buf) as usize;
                buf = &buf[n..];
            }
            5 => buf = &buf[4..],
            t => panic!("unexpected wire type {t}"),
        }
    }
    seen
}

/// Encodes `msg`, checks every field of the descriptor is on the wire (but `zero_only`: enum
/// fields whose only value is 0, which proto3 never encodes), and that it decodes back.
fn round_trip<M: prost::Message + Default + PartialEq + std::fmt::Debug>(
    full_name: &str,
    msg: &M,
    zero_only: &[u32],
) {
    let bytes = msg.encode_to_vec();
    let mut expected = field_numbers(full_name);
    for n in zero_only {
        expected.remove(n);
    }
    assert_eq!(
        wire_fields(&bytes),
        expected,
        "{full_name}: the fields on the wire differ from the descriptor's"
    );
    let back = M::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(&back, msg, "{full_name} round trip");
}

fn ts() -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: 1_700_000_000,
        nanos: 5,
    })
}

fn s(v: &str) -> String {
    v.to_string()
}

#[test]
fn every_method_path_matches_the_protocol() {
    let expected: BTreeSet<&str> = [
        "/Dispatcher/Register",
        "/Dispatcher/Listen",
        "/Dispatcher/ListenV2",
        "/Dispatcher/Heartbeat",
        "/Dispatcher/SubscribeToWorkflowEvents",
        "/Dispatcher/SubscribeToWorkflowRuns",
        "/Dispatcher/SendStepActionEvent",
        "/Dispatcher/SendBatchActionEvent",
        "/Dispatcher/SendGroupKeyActionEvent",
        "/Dispatcher/PutOverridesData",
        "/Dispatcher/Unsubscribe",
        "/Dispatcher/RefreshTimeout",
        "/Dispatcher/ReleaseSlot",
        "/Dispatcher/RestoreEvictedTask",
        "/Dispatcher/UpsertWorkerLabels",
        "/Dispatcher/GetVersion",
        "/EventsService/Push",
        "/EventsService/BulkPush",
        "/EventsService/ReplaySingleEvent",
        "/EventsService/PutLog",
        "/EventsService/PutStreamEvent",
        "/WorkflowService/PutWorkflow",
        "/WorkflowService/ScheduleWorkflow",
        "/WorkflowService/TriggerWorkflow",
        "/WorkflowService/BulkTriggerWorkflow",
        "/WorkflowService/PutRateLimit",
        "/v1.V1Dispatcher/DurableTask",
        "/v1.V1Dispatcher/RegisterDurableEvent",
        "/v1.V1Dispatcher/ListenForDurableEvent",
        "/v1.AdminService/PutWorkflow",
        "/v1.AdminService/CancelTasks",
        "/v1.AdminService/ReplayTasks",
        "/v1.AdminService/TriggerWorkflowRun",
        "/v1.AdminService/GetRunDetails",
        "/v1.AdminService/BranchDurableTask",
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    ]
    .into_iter()
    .collect();
    let compiled: BTreeSet<String> = compiled_methods().into_iter().map(|m| m.0).collect();
    let compiled: BTreeSet<&str> = compiled.iter().map(String::as_str).collect();
    assert_eq!(compiled, expected);

    // Streaming kinds: three bidi, three server-streaming, the rest unary.
    let kinds: BTreeMap<String, (bool, bool)> = compiled_methods()
        .into_iter()
        .map(|(p, c, s)| (p, (c, s)))
        .collect();
    for bidi in [
        "/Dispatcher/SubscribeToWorkflowRuns",
        "/v1.V1Dispatcher/DurableTask",
        "/v1.V1Dispatcher/ListenForDurableEvent",
    ] {
        assert_eq!(kinds[bidi], (true, true), "{bidi} is bidi");
    }
    for server in [
        "/Dispatcher/Listen",
        "/Dispatcher/ListenV2",
        "/Dispatcher/SubscribeToWorkflowEvents",
    ] {
        assert_eq!(kinds[server], (false, true), "{server} is server-streaming");
    }

    // The generated servers carry the same service names.
    assert_eq!(proto::dispatcher_server::SERVICE_NAME, "Dispatcher");
    assert_eq!(proto::events_service_server::SERVICE_NAME, "EventsService");
    assert_eq!(
        proto::workflow_service_server::SERVICE_NAME,
        "WorkflowService"
    );
    assert_eq!(v1::v1_dispatcher_server::SERVICE_NAME, "v1.V1Dispatcher");
    assert_eq!(v1::admin_service_server::SERVICE_NAME, "v1.AdminService");
}

#[test]
fn assigned_action_every_field() {
    let m = proto::AssignedAction {
        tenant_id: s("t"),
        workflow_run_id: s("wr"),
        get_group_key_run_id: s("g"),
        job_id: s("j"),
        job_name: s("jn"),
        job_run_id: s("jr"),
        task_id: s("ti"),
        task_run_external_id: s("tre"),
        action_id: s("svc:verb"),
        action_type: proto::ActionType::CancelStepRun as i32,
        action_payload: s(r#"{"input":{}}"#),
        task_name: s("step"),
        retry_count: 3,
        additional_metadata: Some(s("{}")),
        child_workflow_index: Some(1),
        child_workflow_key: Some(s("k")),
        parent_workflow_run_id: Some(s("p")),
        priority: 2,
        workflow_id: Some(s("w")),
        workflow_version_id: Some(s("wv")),
        durable_task_invocation_count: Some(4),
        triggering_event_external_id: Some(s("e")),
        triggering_event_key: Some(s("ek")),
        batch_id: Some(s("b")),
        batch_size: Some(10),
        batch_index: Some(1),
        batch_start_payload: Some(proto::BatchStartPayload {
            trigger_reason: s("size"),
            trigger_time: ts(),
            expected_size: 10,
        }),
        batch_key: Some(s("bk")),
    };
    round_trip("AssignedAction", &m, &[]);
    // The protocol's numbering: 28 fields, 1 through 28.
    assert_eq!(field_numbers("AssignedAction"), (1..=28).collect());
}

#[test]
fn step_action_event_every_field() {
    let m = proto::StepActionEvent {
        worker_id: s("w"),
        job_id: s("j"),
        job_run_id: s("jr"),
        task_id: s("t"),
        task_run_external_id: s("tre"),
        action_id: s("a:b"),
        event_timestamp: ts(),
        event_type: proto::StepActionEventType::StepEventTypeCompleted as i32,
        event_payload: s("{}"),
        retry_count: Some(0),
        should_not_retry: Some(true),
    };
    round_trip("StepActionEvent", &m, &[]);
    // Golden bytes of the smallest message a worker sends: worker_id = "w" is field 1, string.
    let listen = proto::WorkerListenRequest { worker_id: s("w") };
    assert_eq!(listen.encode_to_vec(), vec![0x0a, 0x01, b'w']);
}

#[test]
fn trigger_and_results_every_field() {
    let mut labels = std::collections::HashMap::new();
    labels.insert(
        s("gpu"),
        v1::DesiredWorkerLabels {
            str_value: Some(s("a100")),
            int_value: Some(1),
            required: Some(true),
            comparator: Some(v1::WorkerLabelComparator::Equal as i32),
            weight: Some(100),
        },
    );
    let m = v1::TriggerWorkflowRequest {
        name: s("wf"),
        input: s("{}"),
        parent_id: Some(s("p")),
        parent_task_run_external_id: Some(s("pt")),
        child_index: Some(0),
        child_key: Some(s("ck")),
        additional_metadata: Some(s("{}")),
        desired_worker_id: Some(s("w")),
        priority: Some(1),
        desired_worker_labels: labels,
    };
    round_trip("v1.TriggerWorkflowRequest", &m, &[]);

    let ev = proto::WorkflowRunEvent {
        workflow_run_id: s("r"),
        event_type: proto::WorkflowRunEventType::Finished as i32,
        event_timestamp: ts(),
        results: vec![proto::StepRunResult {
            task_run_external_id: s("t"),
            task_name: s("step"),
            job_run_id: s("j"),
            error: Some(s("boom")),
            output: Some(s("{}")),
        }],
    };
    // event_type (2) has one value, FINISHED = 0.
    round_trip("WorkflowRunEvent", &ev, &[2]);
    round_trip("StepRunResult", &ev.results[0], &[]);
}

#[test]
fn idempotency_collision_error_keeps_its_wire_name() {
    let names: BTreeSet<String> = descriptor()
        .file
        .iter()
        .filter(|f| f.package() == "v1")
        .flat_map(|f| f.message_type.iter().map(|m| format!("v1.{}", m.name())))
        .collect();
    assert!(names.contains("v1.IdempotencyCollisionError"));
    assert!(names.contains("v1.BulkTriggerIdempotencyCollisionError"));
    const OTLP: &str = "opentelemetry.proto.collector.trace.v1";
    let counts = |hatchet: bool| {
        let files: Vec<_> = descriptor()
            .file
            .into_iter()
            .filter(|f| f.package() != "google.protobuf" && (f.package() != OTLP) == hatchet)
            .collect();
        (
            files.iter().map(|f| f.message_type.len()).sum::<usize>(),
            files.iter().map(|f| f.enum_type.len()).sum::<usize>(),
        )
    };
    assert_eq!(counts(true), (113, 19), "the Hatchet protocol's counts");
    assert_eq!(counts(false), (13, 2), "the OTLP trace export's counts");
}
