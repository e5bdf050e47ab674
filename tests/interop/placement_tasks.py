"""Task declarations for the SDK-parity (2) scenario (placement.py), written against the public
API of hatchet-sdk 1.43.1: worker labels and affinity, sticky workflows, task conditions
(wait_for / skip_if / cancel_if, or_ groups), durable OR waits and event filters.

The client is built from the HATCHET_CLIENT_* environment (import this module only after it
points at the dev engine). Every task reports where it ran (the worker's id and the name the
scenario gave the worker process in INTEROP_WORKER_NAME); tasks that must NOT run write a
marker file in $INTEROP_MARKER_DIR, so the client sees what really ran.
"""

import asyncio
import json
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from hatchet_sdk import (Context, DesiredWorkerLabel, DurableContext, Hatchet, ParentCondition,
                         SleepCondition, StickyStrategy, UserEventCondition,
                         WorkerLabelComparator, or_)

hatchet = Hatchet()

COND_EVENT = "placement:cond-go"  # awaited (with an expression) by the conditions DAG
NEVER_EVENT = "placement:never-pushed"  # one side of an or_ group; nobody pushes it
DURABLE_EVENT = "placement:durable-wake"  # one side of the durable or_ wait
FILTER_EVENT = "placement:filtered"  # triggers placement-filtered / placement-unfiltered

# Worker labels, by worker process (placement_worker.py a|b).
WORKER_LABELS: dict[str, dict[str, str | int]] = {
    "a": {"model": "fast", "memory": 1024},
    "b": {"model": "slow", "memory": 256},
}


class Msg(BaseModel):
    nonce: str


class Num(BaseModel):
    nonce: str
    n: int


class DurableIn(BaseModel):
    nonce: str
    sleep_s: int


class FilterIn(BaseModel):
    mark: str
    amount: int


def marker(name: str, text: str) -> None:
    d = Path(os.environ["INTEROP_MARKER_DIR"])
    (d / (name + ".tmp")).write_text(text)
    (d / (name + ".tmp")).rename(d / name)  # atomic for the poller


def where(ctx: Context) -> dict[str, str]:
    return {"worker_id": ctx.worker_id, "worker": os.environ.get("INTEROP_WORKER_NAME", "?")}


def want(key: str, value: str | int, required: bool = False, weight: int | None = None,
         comparator: WorkerLabelComparator | None = None) -> DesiredWorkerLabel:
    return DesiredWorkerLabel(key=key, value=value, required=required, weight=weight,
                              comparator=comparator)


# ----- q1: worker labels and affinity -----

@hatchet.task(name="placement-fast-only", input_validator=Msg,
              desired_worker_labels=[want("model", "fast", required=True)])
async def fast_only(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce, **where(ctx)}


@hatchet.task(name="placement-slow-only", input_validator=Msg,
              desired_worker_labels=[want("model", "slow", required=True)])
async def slow_only(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce, **where(ctx)}


@hatchet.task(name="placement-needs-zone", input_validator=Msg,
              desired_worker_labels=[want("zone", "east", required=True)])
async def needs_zone(input: Msg, ctx: Context) -> dict[str, str]:
    """No worker has `zone` until placement-relabel upserts it."""
    return {"nonce": input.nonce, **where(ctx)}


# Optional labels only: worker a (model=fast, memory=1024) scores 100 here, worker b 10.
@hatchet.task(name="placement-prefer-memory", input_validator=Msg, desired_worker_labels=[
    want("model", "slow", weight=10),
    want("memory", 512, weight=100, comparator=WorkerLabelComparator.GREATER_THAN_OR_EQUAL)])
async def prefer_memory(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce, **where(ctx)}


# The same labels with the weights swapped: worker b scores 100, worker a 10.
@hatchet.task(name="placement-prefer-model", input_validator=Msg, desired_worker_labels=[
    want("model", "slow", weight=100),
    want("memory", 512, weight=10, comparator=WorkerLabelComparator.GREATER_THAN_OR_EQUAL)])
async def prefer_model(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce, **where(ctx)}


@hatchet.task(name="placement-relabel", input_validator=Msg,
              desired_worker_labels=[want("model", "slow", required=True)])
async def relabel(input: Msg, ctx: Context) -> dict[str, object]:
    """Gives the worker it runs on the label `zone=east` (Dispatcher/UpsertWorkerLabels)."""
    await ctx.aio_upsert_worker_labels({"zone": "east"})
    return {"nonce": input.nonce, **where(ctx), "labels_now": ctx.worker_labels}


# ----- q2: sticky workflows (DAG + a child spawned with sticky=True) -----

def sticky_workflows(strategy: StickyStrategy, tag: str):
    """A 4-task DAG (first -> second, third -> fourth) whose first task spawns a sticky child;
    all of it should run on the worker that ran `first`."""
    child = hatchet.task(name=f"placement-sticky-{tag}-child", input_validator=Msg,
                         sticky=strategy)(_child_where)
    wf = hatchet.workflow(name=f"placement-sticky-{tag}", input_validator=Msg, sticky=strategy)

    @wf.task()
    async def first(input: Msg, ctx: Context) -> dict[str, object]:
        got = await child.aio_run(input, sticky=True)
        return {**where(ctx), "child": got}

    @wf.task(parents=[first])
    async def second(input: Msg, ctx: Context) -> dict[str, str]:
        await asyncio.sleep(0.2)  # overlap with `third`: both slots of one worker in use
        return where(ctx)

    @wf.task(parents=[first])
    async def third(input: Msg, ctx: Context) -> dict[str, str]:
        await asyncio.sleep(0.2)
        return where(ctx)

    @wf.task(parents=[second, third])
    async def fourth(input: Msg, ctx: Context) -> dict[str, str]:
        return where(ctx)

    return wf, child


async def _child_where(input: Msg, ctx: Context) -> dict[str, str]:
    return where(ctx)


sticky_soft, sticky_soft_child = sticky_workflows(StickyStrategy.SOFT, "soft")
sticky_hard, sticky_hard_child = sticky_workflows(StickyStrategy.HARD, "hard")


# ----- q3: task conditions in a DAG -----

cond_wf = hatchet.workflow(name="placement-conditions", input_validator=Num)


@cond_wf.task()
def c_start(input: Num, ctx: Context) -> dict[str, object]:
    marker(f"cond-start-{input.nonce}", ctx.task_run_id)
    return {"n": input.n, "t": time.time()}


@cond_wf.task(parents=[c_start], wait_for=[SleepCondition(timedelta(seconds=2))])
def c_sleep(input: Num, ctx: Context) -> dict[str, object]:
    return {"t": time.time(), "triggers": dict(ctx.trigger_data or {})}


@cond_wf.task(parents=[c_start],
              wait_for=[UserEventCondition(event_key=COND_EVENT, expression="input.go == true")])
def c_event(input: Num, ctx: Context) -> dict[str, object]:
    marker(f"cond-event-ran-{input.nonce}", ctx.task_run_id)
    return {"t": time.time(), "triggers": dict(ctx.trigger_data or {})}


@cond_wf.task(parents=[c_start],
              wait_for=[ParentCondition(parent=c_start, expression="output.n > 5")])
def c_parent(input: Num, ctx: Context) -> dict[str, object]:
    return {"t": time.time(), "start_n": ctx.task_output(c_start)["n"]}


# An OR group: the event is never pushed, so the sleep releases the task (AND would hang).
@cond_wf.task(parents=[c_start], wait_for=[
    or_(UserEventCondition(event_key=NEVER_EVENT), SleepCondition(timedelta(seconds=2)))])
def c_either(input: Num, ctx: Context) -> dict[str, object]:
    return {"t": time.time(), "triggers": dict(ctx.trigger_data or {})}


@cond_wf.task(parents=[c_start],
              skip_if=[ParentCondition(parent=c_start, expression="output.n > 5")])
def c_skipped(input: Num, ctx: Context) -> dict[str, object]:
    marker(f"cond-skipped-ran-{input.nonce}", ctx.task_run_id)
    return {"ran": True}


@cond_wf.task(parents=[c_skipped])
def c_after_skip(input: Num, ctx: Context) -> dict[str, object]:
    """Its only parent was skipped, so the engine skips it too."""
    marker(f"cond-after-skip-ran-{input.nonce}", ctx.task_run_id)
    return {"ran": True}


@cond_wf.task(parents=[c_skipped, c_sleep, c_event, c_parent, c_either])
def c_join(input: Num, ctx: Context) -> dict[str, object]:
    """One skipped parent among completed ones: it runs, and sees the skip."""
    return {"was_skipped": {t.name: ctx.was_skipped(t)
                            for t in (c_skipped, c_sleep, c_event, c_parent, c_either)}}


cancel_wf = hatchet.workflow(name="placement-cancel-if", input_validator=Num)


@cancel_wf.task()
def k_start(input: Num, ctx: Context) -> dict[str, int]:
    return {"n": input.n}


@cancel_wf.task(parents=[k_start],
                cancel_if=[ParentCondition(parent=k_start, expression="output.n > 5")])
def k_target(input: Num, ctx: Context) -> dict[str, bool]:
    marker(f"cancel-target-ran-{input.nonce}", ctx.task_run_id)
    return {"ran": True}


@cancel_wf.task(parents=[k_target])
def k_down(input: Num, ctx: Context) -> dict[str, bool]:
    marker(f"cancel-down-ran-{input.nonce}", ctx.task_run_id)
    return {"ran": True}


# ----- q4: a durable wait on or_(sleep, event) -----

@hatchet.durable_task(name="placement-durable-or", input_validator=DurableIn,
                      execution_timeout=timedelta(seconds=90))
async def durable_or(input: DurableIn, ctx: DurableContext) -> dict[str, object]:
    marker(f"durable-waiting-{input.nonce}", ctx.task_run_id)
    t0 = time.monotonic()
    res = await ctx.aio_wait_for(
        f"or-{input.nonce}",
        or_(SleepCondition(timedelta(seconds=input.sleep_s)),
            UserEventCondition(event_key=DURABLE_EVENT,
                               expression=f"input.nonce == '{input.nonce}'")),
    )
    return {"nonce": input.nonce, "waited_s": round(time.monotonic() - t0, 3),
            "result": res, "fired": sorted((res.get("CREATE") or {}).keys())}


# ----- q5: event filters (placement-filtered gets filters; placement-unfiltered none) -----

def _record(kind: str, input: FilterIn, ctx: Context) -> dict[str, object]:
    seen = {"filter_payload": dict(ctx.filter_payload or {}), "input": input.model_dump(),
            "key": ctx.triggering_event_key}
    marker(f"{kind}-{input.mark}-{uuid.uuid4().hex[:8]}", json.dumps(seen))
    return seen


@hatchet.task(name="placement-filtered", on_events=[FILTER_EVENT], input_validator=FilterIn)
def filtered(input: FilterIn, ctx: Context) -> dict[str, object]:
    return _record("filtered", input, ctx)


@hatchet.task(name="placement-unfiltered", on_events=[FILTER_EVENT], input_validator=FilterIn)
def unfiltered(input: FilterIn, ctx: Context) -> dict[str, object]:
    return _record("unfiltered", input, ctx)


ALL_WORKFLOWS = [fast_only, slow_only, needs_zone, prefer_memory, prefer_model, relabel,
                 sticky_soft, sticky_soft_child, sticky_hard, sticky_hard_child,
                 cond_wf, cancel_wf, durable_or, filtered, unfiltered]
