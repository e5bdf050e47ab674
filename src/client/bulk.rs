//! Bulk work: many runs through `WorkflowService/BulkTriggerWorkflow`, many events through
//! `EventsService/BulkPush`, in chunks the engine takes.
//!
//! # Invariants
//!
//! 1. One answer per item, in input order: a run handle (or event id), or that item's own
//!    error. An item refused locally (input that does not serialize, a priority out of range)
//!    fails alone and is never sent.
//! 2. The engine validates a bulk call all or nothing, so an item's remote error is its chunk's
//!    error; other chunks are unaffected.
//! 3. Bulk calls are writes: retried only when provably not sent (docs/contract.md §2), so a chunk
//!    whose answer was lost fails with `MaybeExecuted` rather than creating its runs twice.
//! 4. A bulk trigger some of whose items collide on the workflow's idempotency key creates the
//!    others all the same (the engine answers ALREADY_EXISTS with the runs it created and the
//!    collisions): each item gets the run that was created for it or the run it collided with.
//!    Nothing the engine created is reported as refused. The engine names created runs and
//!    collisions each in item order but not which items collided, so when both kinds are
//!    present the created runs are matched to their items by input and metadata (read back
//!    once, waiting for runs the engine creates after answering). When that cannot be done the
//!    chunk fails as `MaybeExecuted`: every item has a run, only which is unknown.
//! 5. A chunk is at most [`BULK_CHUNK`] items and at most the message limit in bytes
//!    (`HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH`): the engine refuses a larger message
//!    unread, so a chunk is never sent to be refused whole. An item that alone is over the limit
//!    fails alone, unsent.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::{ClientCore, RunHandle, TriggerOptions, encode_input};
use crate::error::Error;
use crate::protocol as proto;

/// Items per BulkTriggerWorkflow or BulkPush call (the official SDKs' chunk; the engine
/// refuses more than 1,000 events per BulkPush).
pub(crate) const BULK_CHUNK: usize = 1_000;

/// One run of a bulk trigger: its input, and what a bulk trigger carries per run (metadata,
/// priority). Built with [`BulkRun::new`]; a bulk trigger resolves every idempotency collision to
/// the existing run and is bounded as a whole, so a run has no options of its own for those.
#[derive(Debug, Clone)]
pub struct BulkRun<I> {
    pub(crate) input: I,
    pub(crate) options: TriggerOptions,
}

impl<I> BulkRun<I> {
    /// A run of `input`, without metadata, at the workflow's priority.
    pub fn new(input: I) -> Self {
        BulkRun {
            input,
            options: TriggerOptions::new(),
        }
    }

    /// With a priority (1–3).
    pub fn priority(mut self, p: i32) -> Self {
        self.options.priority = Some(p);
        self
    }

    /// With additional metadata (replacing any set before).
    pub fn metadata(mut self, m: serde_json::Map<String, Value>) -> Self {
        self.options.metadata = Some(m);
        self
    }

    /// With one more additional-metadata pair.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options = self.options.meta(key, value);
        self
    }
}

/// One event of a bulk push, built with [`BulkEvent::new`].
#[derive(Debug, Clone)]
pub struct BulkEvent<P> {
    pub(crate) key: String,
    pub(crate) payload: P,
    pub(crate) options: super::PushOptions,
}

impl<P> BulkEvent<P> {
    /// An event with `key` (namespaced by the runtime) and `payload`.
    pub fn new(key: impl Into<String>, payload: P) -> Self {
        BulkEvent {
            key: key.into(),
            payload,
            options: super::PushOptions::new(),
        }
    }

    /// With additional metadata, copied onto the runs it triggers (replacing any set before).
    pub fn metadata(mut self, m: serde_json::Map<String, Value>) -> Self {
        self.options.metadata = Some(m);
        self
    }

    /// With one more additional-metadata pair.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options = self.options.meta(key, value);
        self
    }

    /// With a priority (1–3) for the runs it triggers.
    pub fn priority(mut self, p: i32) -> Self {
        self.options.priority = Some(p);
        self
    }

    /// With a scope: workflows with event filters start only through the filters of this
    /// scope, and durable waits scoped to it (with a lookback) can take it.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.options = self.options.scope(scope);
        self
    }
}

/// A chunk's error, once per item of the chunk (invariant 2): same outcome, the same words,
/// the same gRPC status.
fn shared(e: &Error, op: &'static str) -> Error {
    let copy = Error::new(e.outcome(), op).with_detail(e.to_string());
    match e.grpc_status() {
        Some(s) => copy.with_cause(crate::error::Cause::status(s.clone())),
        None => copy,
    }
}

/// What the engine's idempotency key can see of an item, compared to tell items apart: its
/// input and its additional metadata (`{}` when it has none).
pub(crate) type ItemKey = (Value, Value);

/// The key of a trigger request, as sent.
fn item_key(req: &proto::v1::TriggerWorkflowRequest) -> ItemKey {
    let input = serde_json::from_str(&req.input).unwrap_or(Value::Null);
    (
        input,
        metadata_value(req.additional_metadata.as_deref().map(str::as_bytes)),
    )
}

/// Additional metadata as JSON: absent or empty is `{}`.
fn metadata_value(raw: Option<&[u8]>) -> Value {
    raw.filter(|m| !m.is_empty())
        .and_then(|m| serde_json::from_slice(m).ok())
        .unwrap_or_else(|| Value::Object(Default::default()))
}

/// Which run each item of a partly colliding chunk got (invariant 4), decided from what the
/// engine said: the runs it `created` (in item order, with their inputs and metadata read back
/// when both kinds are present) and the `existing` runs the others collided with (in item
/// order).
///
/// Items are told apart by input and metadata, everything the key expression can read: two
/// items equal in both have the same key, so the first of them is the one created and the
/// later ones collide, which is the order the match takes.
fn per_item(
    items: &[ItemKey],
    created: &[String],
    created_keys: &[Option<ItemKey>],
    existing: &[String],
) -> Result<Vec<String>, String> {
    let n = items.len();
    if created.len() + existing.len() != n {
        return Err(format!(
            "the engine named {} created and {} collided runs for {n} items",
            created.len(),
            existing.len()
        ));
    }
    if created.is_empty() {
        return Ok(existing.to_vec());
    }
    if existing.is_empty() {
        return Ok(created.to_vec());
    }
    // The engine adds metadata of its own (a `traceparent`): a run's metadata is compared on
    // the keys the items use.
    let item_keys: std::collections::BTreeSet<&String> = items
        .iter()
        .filter_map(|(_, m)| m.as_object())
        .flat_map(|m| m.keys())
        .collect();
    let on_item_keys = |m: &Value| -> Value {
        Value::Object(
            m.as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| item_keys.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    // Created runs, in item order: each takes the first item after the previous one with its
    // key. Items left over collided, in order.
    let mut got: Vec<Option<String>> = vec![None; n];
    let mut from = 0;
    for (id, key) in created.iter().zip(created_keys) {
        let Some((input, metadata)) = key else {
            return Err(format!("run {id} has no readable input"));
        };
        let metadata = on_item_keys(metadata);
        // The engine reads a one-task run's input back as its task's stored input (the run's
        // input under `input`, beside `parents` and `triggers`).
        let stored = input
            .get("input")
            .filter(|_| input.get("parents").is_some());
        let Some(at) = (from..n).find(|&i| {
            let (want, want_meta) = &items[i];
            *want_meta == metadata && (want == input || Some(want) == stored)
        }) else {
            return Err(format!("no item has the input and metadata of run {id}"));
        };
        got[at] = Some(id.clone());
        from = at + 1;
    }
    let mut existing = existing.iter();
    got.into_iter()
        .map(|g| match g {
            Some(id) => Ok(id),
            None => existing
                .next()
                .cloned()
                .ok_or_else(|| "fewer collisions than items left".to_string()),
        })
        .collect()
}

/// How long a created run may read as missing before the match gives up: the engine may
/// create a run's rows after it answered (its message-queue path under load).
const CREATED_READABLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(15);

/// A priority outside 1–3, refused locally.
pub(crate) fn check_priority(op: &'static str, p: Option<i32>) -> Result<(), Error> {
    match p {
        Some(p) if !(1..=3).contains(&p) => Err(Error::invalid(
            op,
            format!("priority must be between 1 (lowest) and 3 (highest), got {p}"),
        )),
        _ => Ok(()),
    }
}

/// Room a bulk message keeps beside its items (field tags, lengths).
const CHUNK_HEADROOM: usize = 16 * 1024;

/// The limits a chunk keeps (invariant 5).
#[derive(Debug, Clone, Copy)]
struct ChunkLimits {
    items: usize,
    bytes: usize,
}

/// The chunks of `sizes` (each item's encoded bytes), in order: the item indexes each chunk
/// carries, and the items over the byte limit alone (never sent).
fn chunk_plan(sizes: &[usize], limits: ChunkLimits) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut chunks = Vec::new();
    let mut oversized = Vec::new();
    let (mut current, mut bytes) = (Vec::new(), 0usize);
    for (i, &size) in sizes.iter().enumerate() {
        let size = crate::protocol::framed_len(size);
        if size > limits.bytes {
            oversized.push(i);
            continue;
        }
        if !current.is_empty() && (current.len() == limits.items || bytes + size > limits.bytes) {
            chunks.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(i);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    (chunks, oversized)
}

/// Sends the prepared items in chunks (invariant 5) and answers one result per item, in
/// order (invariants 1 and 2): an item refused while preparing keeps its own error; a chunk's
/// error, or an answer of the wrong length, is given to every item of that chunk.
async fn in_chunks<R, A, F, Fut>(
    op: &'static str,
    prepared: Vec<Result<R, Error>>,
    (limits, size_of): (ChunkLimits, fn(&R) -> usize),
    send: F,
) -> Vec<Result<A, Error>>
where
    F: Fn(Vec<R>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<A>, Error>>,
{
    let mut answers: Vec<Option<Result<A, Error>>> = Vec::with_capacity(prepared.len());
    let mut ready: Vec<(usize, R)> = Vec::new();
    for (i, p) in prepared.into_iter().enumerate() {
        match p {
            Ok(r) => {
                ready.push((i, r));
                answers.push(None);
            }
            Err(e) => answers.push(Some(Err(e))),
        }
    }
    let sizes: Vec<usize> = ready.iter().map(|(_, r)| size_of(r)).collect();
    let (plan, oversized) = chunk_plan(&sizes, limits);
    for at in oversized {
        let (i, _) = &ready[at];
        answers[*i] = Some(Err(Error::over_message_limit(
            op,
            "this item",
            sizes[at],
            limits.bytes + CHUNK_HEADROOM,
        )));
    }
    let mut items: Vec<Option<(usize, R)>> = ready.into_iter().map(Some).collect();
    for chunk_at in plan {
        let (slots, chunk): (Vec<usize>, Vec<R>) =
            chunk_at.iter().filter_map(|&at| items[at].take()).unzip();
        let sent = chunk.len();
        match send(chunk).await {
            Ok(got) if got.len() == sent => {
                for (i, a) in slots.into_iter().zip(got) {
                    answers[i] = Some(Ok(a));
                }
            }
            Ok(got) => {
                let e = Error::new(crate::error::Outcome::MaybeExecuted, op).with_detail(format!(
                    "the engine answered {} items for {sent}; list what exists before sending again",
                    got.len()
                ));
                for i in slots {
                    answers[i] = Some(Err(shared(&e, op)));
                }
            }
            Err(e) => {
                for i in slots {
                    answers[i] = Some(Err(shared(&e, op)));
                }
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(Error::invalid(op, "item was not sent"))))
        .collect()
}

impl ClientCore {
    /// The chunk limits of this connection (invariant 5).
    fn chunk_limits(&self) -> ChunkLimits {
        ChunkLimits {
            items: BULK_CHUNK,
            bytes: self
                .conn
                .config()
                .max_send_message_bytes
                .saturating_sub(CHUNK_HEADROOM),
        }
    }

    /// Triggers one run per item (invariants 1–5).
    pub(crate) async fn run_many<I: Serialize>(
        self: &Arc<Self>,
        workflow: &str,
        items: &[(&I, &TriggerOptions)],
    ) -> Vec<Result<RunHandle, Error>> {
        const PATH: &str = "/WorkflowService/BulkTriggerWorkflow";
        if !items.is_empty()
            && let Err(e) = self.ensure_workflow_known(PATH, workflow).await
        {
            return items.iter().map(|_| Err(shared(&e, PATH))).collect();
        }
        let prepared = items
            .iter()
            .map(|(input, opts)| {
                check_priority(PATH, opts.priority)
                    .and_then(|()| encode_input(PATH, input))
                    .map(|input| self.trigger_request(workflow, input, opts, opts.metadata.clone()))
            })
            .collect();
        let ids = in_chunks(
            PATH,
            prepared,
            (self.chunk_limits(), prost::Message::encoded_len),
            |workflows| async move {
                let req = proto::BulkTriggerWorkflowRequest { workflows };
                let client = self.conn.workflows();
                let answer = self
                    .conn
                    .call(PATH, &client, &req, |mut c, r| async move {
                        c.bulk_trigger_workflow(r).await
                    })
                    .await
                    .map(|r| r.workflow_run_ids);
                match answer {
                    Err(e) => match e.grpc_status().and_then(proto::bulk_idempotency_collision) {
                        Some(c) => self.collided(PATH, &req.workflows, c).await,
                        None => Err(e),
                    },
                    ok => ok,
                }
            },
        )
        .await;
        ids.into_iter()
            .map(|r| r.map(|id| RunHandle::new(id, self.clone())))
            .collect()
    }

    /// The run of each item of a chunk some of whose items collided (invariant 4).
    async fn collided(
        &self,
        op: &'static str,
        items: &[proto::v1::TriggerWorkflowRequest],
        c: proto::v1::BulkTriggerIdempotencyCollisionError,
    ) -> Result<Vec<String>, Error> {
        let created = c.successful_workflow_run_external_ids;
        let existing: Vec<String> = c
            .collisions
            .into_iter()
            .map(|c| c.existing_run_external_id)
            .collect();
        let mut created_keys = Vec::with_capacity(created.len());
        if !created.is_empty() && !existing.is_empty() {
            for id in &created {
                let details = self.created_run_details(id).await.map_err(|e| {
                    // Every item has a run (its own or the one it collided with): only which is
                    // which is unknown, so triggering again would collide, not run twice.
                    Error::new(crate::error::Outcome::MaybeExecuted, op).with_detail(format!(
                        "some items collided on the workflow's idempotency key and the others were created ({} runs: {}), but which is which could not be read back ({e}); every item has a run: list the workflow's runs before triggering again",
                        created.len(),
                        created.join(", ")
                    ))
                })?;
                created_keys.push(
                    serde_json::from_slice::<Value>(&details.input)
                        .ok()
                        .map(|input| (input, metadata_value(Some(&details.additional_metadata)))),
                );
            }
        }
        let keys: Vec<ItemKey> = items.iter().map(item_key).collect();
        per_item(&keys, &created, &created_keys, &existing).map_err(|why| {
            Error::new(crate::error::Outcome::MaybeExecuted, op).with_detail(format!(
                "some items collided on the workflow's idempotency key and the others were created (runs {}; collided with {}), but {why}; every item has a run: list the workflow's runs before triggering again",
                created.join(", "),
                existing.join(", ")
            ))
        })
    }

    /// A run the engine just said it created: read until its rows exist (it may write them
    /// after answering), for at most [`CREATED_READABLE_WITHIN`].
    async fn created_run_details(
        &self,
        id: &str,
    ) -> Result<proto::v1::GetRunDetailsResponse, Error> {
        let give_up = tokio::time::Instant::now() + CREATED_READABLE_WITHIN;
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            match self.conn.run_details(id, None).await {
                Err(e)
                    if e.status()
                        .is_some_and(|s| s.code() == crate::error::GrpcCode::NotFound)
                        && tokio::time::Instant::now() + pause < give_up =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(2));
                }
                r => return r,
            }
        }
    }

    /// Pushes one event per item (invariants 1–3, 5); returns event ids.
    pub(crate) async fn push_many<P: Serialize>(
        &self,
        events: &[BulkEvent<P>],
    ) -> Vec<Result<String, Error>> {
        const PATH: &str = "/EventsService/BulkPush";
        let prepared = events
            .iter()
            .map(|ev| self.push_request(PATH, &ev.key, &ev.payload, &ev.options))
            .collect();
        in_chunks(
            PATH,
            prepared,
            (self.chunk_limits(), prost::Message::encoded_len),
            |events| async move {
                let req = proto::BulkPushEventRequest { events };
                let client = self.conn.events();
                self.conn
                    .call(PATH, &client, &req, |mut c, r| async move {
                        c.bulk_push(r).await
                    })
                    .await
                    .map(|r| r.events.into_iter().map(|e| e.event_id).collect())
            },
        )
        .await
    }
}

#[cfg(test)]
mod collision_tests {
    use super::{ItemKey, per_item};
    use serde_json::{Value, json};

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn plain(input: Value) -> ItemKey {
        (input, json!({}))
    }

    #[test]
    fn each_item_gets_the_run_made_for_it_or_the_one_it_collided_with() {
        let items: Vec<ItemKey> = [
            json!({"k": 1}),
            json!({"k": 2}),
            json!({"k": 1}),
            json!({"k": 3}),
        ]
        .into_iter()
        .map(plain)
        .collect();
        let read = |v: &[Value]| -> Vec<Option<ItemKey>> {
            v.iter().cloned().map(|v| Some(plain(v))).collect()
        };
        // Items 0, 1 and 3 were created; item 2 collided with item 0's run.
        let got = per_item(
            &items,
            &ids(&["r0", "r1", "r3"]),
            &read(&[json!({"k": 1}), json!({"k": 2}), json!({"k": 3})]),
            &ids(&["r0"]),
        )
        .expect("mapped");
        assert_eq!(got, ids(&["r0", "r1", "r0", "r3"]));
        // Every item collided: in order, no read needed.
        assert_eq!(
            per_item(&items[..2], &[], &[], &ids(&["a", "b"])).expect("mapped"),
            ids(&["a", "b"])
        );
        // A run's input read back as its task's stored input.
        let stored = |k: i64| json!({"input": {"k": k}, "parents": {}, "triggers": {}});
        assert_eq!(
            per_item(
                &items,
                &ids(&["r0", "r1", "r3"]),
                &read(&[stored(1), stored(2), stored(3)]),
                &ids(&["r0"])
            )
            .expect("mapped"),
            ids(&["r0", "r1", "r0", "r3"])
        );
        // What cannot be matched is said, never guessed.
        assert!(
            per_item(
                &items,
                &ids(&["r9"]),
                &read(&[json!({"k": 9})]),
                &ids(&["a", "b", "c"])
            )
            .is_err()
        );
        assert!(
            per_item(
                &items,
                &ids(&["r0"]),
                &read(&[json!({"k": 1})]),
                &ids(&["a"])
            )
            .is_err()
        );
    }

    /// Two items with the same input told apart by their metadata (a key expression that reads the
    /// metadata): the first collided, the second was created. Matched by input alone, the created
    /// run went to the first item and the collision to the second.
    #[test]
    fn items_with_the_same_input_are_told_apart_by_their_metadata() {
        let items = vec![
            (json!({"k": 1}), json!({"order": "a"})),
            (json!({"k": 1}), json!({"order": "b"})),
        ];
        let got = per_item(
            &items,
            &ids(&["created-b"]),
            // The engine adds a key of its own.
            &[Some((
                json!({"k": 1}),
                json!({"order": "b", "traceparent": "00-1"}),
            ))],
            &ids(&["existing-a"]),
        )
        .expect("mapped");
        assert_eq!(got, ids(&["existing-a", "created-b"]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BY_COUNT: ChunkLimits = ChunkLimits {
        items: BULK_CHUNK,
        bytes: usize::MAX / 2,
    };

    /// Chunks are cut by bytes as well as by count, an item over the limit alone fails alone and
    /// unsent, and every other item is answered in order.
    #[tokio::test]
    async fn chunks_are_cut_by_bytes_and_an_oversized_item_fails_alone_unsent() {
        let limits = ChunkLimits {
            items: 1_000,
            bytes: 10_000,
        };
        // 30 items of 3,000 bytes (3 per chunk), item 4 of 20,000 bytes.
        let prepared: Vec<Result<usize, Error>> = (0..30)
            .map(|i| Ok(if i == 4 { 20_000 } else { 3_000 }))
            .collect();
        let sent = std::sync::Mutex::new(Vec::new());
        let answers = in_chunks(
            "x",
            prepared,
            (limits, |r: &usize| *r),
            |chunk: Vec<usize>| {
                sent.lock().unwrap().push(chunk.iter().sum::<usize>());
                async move { Ok(chunk) }
            },
        )
        .await;
        let sent = sent.lock().unwrap().clone();
        assert!(sent.iter().all(|b| *b <= 10_000), "{sent:?}");
        assert_eq!(
            sent.iter().sum::<usize>(),
            29 * 3_000,
            "every other item sent once"
        );
        let e = answers[4].as_ref().expect_err("oversized");
        assert_eq!(e.outcome(), crate::error::Outcome::Invalid);
        assert!(e.to_string().contains("nothing was sent"), "{e}");
        assert!(answers.iter().enumerate().all(|(i, a)| i == 4 || a.is_ok()));
        let (plan, over) = chunk_plan(&[3_000; 7], limits);
        assert_eq!((plan.len(), over.len()), (3, 0), "{plan:?}");
    }

    #[tokio::test]
    async fn chunks_answer_per_item_in_order_and_local_refusals_stay_local() {
        let sent = std::sync::Mutex::new(Vec::new());
        let prepared: Vec<Result<usize, Error>> = (0..2_500)
            .map(|i| {
                if i == 7 {
                    Err(Error::invalid("x", "bad item"))
                } else {
                    Ok(i)
                }
            })
            .collect();
        let answers = in_chunks("x", prepared, (BY_COUNT, |_| 1), |chunk: Vec<usize>| {
            sent.lock().unwrap().push(chunk.len());
            async move {
                if chunk.contains(&2_400) {
                    Err(Error::new(crate::error::Outcome::Rejected, "x").with_detail("refused"))
                } else {
                    Ok(chunk.iter().map(|i| i * 10).collect())
                }
            }
        })
        .await;
        assert_eq!(*sent.lock().unwrap(), [1_000, 1_000, 499]);
        assert_eq!(answers.len(), 2_500);
        assert_eq!(answers[3].as_ref().ok(), Some(&30));
        assert_eq!(
            answers[7].as_ref().unwrap_err().outcome(),
            crate::error::Outcome::Invalid
        );
        // The third chunk was refused: each of its items says so, the others are unaffected.
        assert_eq!(
            answers[2_499].as_ref().unwrap_err().outcome(),
            crate::error::Outcome::Rejected
        );
        assert_eq!(answers[1_999].as_ref().ok(), Some(&19_990));
    }

    #[tokio::test]
    async fn a_short_answer_fails_its_chunk_as_maybe_executed() {
        let answers = in_chunks(
            "x",
            vec![Ok(1), Ok(2)],
            (BY_COUNT, |_| 1),
            |_c: Vec<i32>| async { Ok::<Vec<i32>, Error>(vec![1]) },
        )
        .await;
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().unwrap_err().outcome() == crate::error::Outcome::MaybeExecuted)
        );
    }

    #[test]
    fn priorities_outside_one_to_three_are_refused_with_the_range() {
        assert!(check_priority("x", None).is_ok());
        assert!(check_priority("x", Some(3)).is_ok());
        let e = check_priority("x", Some(4)).unwrap_err();
        assert_eq!(e.outcome(), crate::error::Outcome::Invalid);
        assert!(e.to_string().contains("between 1 (lowest) and 3 (highest)"));
    }
}
