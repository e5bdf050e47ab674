"""Task declarations for the SDK-parity scenario (parity.py), written against the public API of
hatchet-sdk 1.43.1.

The client is built from the HATCHET_CLIENT_* environment (import this module only after it
points at the dev engine). Markers are files in $INTEROP_MARKER_DIR written by the worker
process, so the client sees what really ran there (and in which order).
"""

import asyncio
import json
import os
import time
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from hatchet_sdk import (Context, DurableContext, EvictionPolicy, Hatchet,
                         NonRetryableException, Priority)

hatchet = Hatchet()

FAIL_MESSAGE = "parity: this task always fails"
BULK_EVENT_KEY = "parity:bulk"


class Msg(BaseModel):
    nonce: str


class Num(BaseModel):
    nonce: str
    n: int


class Label(BaseModel):
    nonce: str
    label: str


def marker_dir() -> Path:
    return Path(os.environ["INTEROP_MARKER_DIR"])


def marker(name: str, text: str) -> None:
    d = marker_dir()
    (d / (name + ".tmp")).write_text(text)
    (d / (name + ".tmp")).rename(d / name)  # atomic for the poller


# ----- p1: a workflow whose only task always fails, with an on_failure task -----

on_failure_wf = hatchet.workflow(name="parity-on-failure", input_validator=Msg)


@on_failure_wf.task(retries=0)
def always_fails(input: Msg, ctx: Context) -> dict[str, str]:
    raise NonRetryableException(f"{FAIL_MESSAGE} ({input.nonce})")


@on_failure_wf.on_failure_task()
def report_failure(input: Msg, ctx: Context) -> dict[str, object]:
    errors = dict(ctx.task_run_errors)
    one = ctx.fetch_task_run_error(always_fails)
    marker(f"onfail-{input.nonce}", json.dumps({"errors": errors, "one": one}))
    return {"handled": True}


# ----- p2/p3/p8: a slow task that notices its cancellation -----

@hatchet.task(name="parity-slow", input_validator=Msg, execution_timeout=timedelta(seconds=90))
async def slow(input: Msg, ctx: Context) -> dict[str, object]:
    marker(f"slow-started-{input.nonce}", ctx.task_run_id)
    try:
        for _ in range(600):  # 60 s at most
            if ctx.is_cancelled:
                marker(f"slow-cancelled-{input.nonce}", "is_cancelled")
                return {"nonce": input.nonce, "cancelled": True}
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        marker(f"slow-cancelled-{input.nonce}", "CancelledError")
        raise
    return {"nonce": input.nonce, "cancelled": False}


# ----- p4: fails on its first execution (per nonce), succeeds on every later one -----

@hatchet.task(name="parity-flaky", input_validator=Msg, retries=0)
def flaky(input: Msg, ctx: Context) -> dict[str, object]:
    first = marker_dir() / f"flaky-first-{input.nonce}"
    if not first.exists():
        marker(first.name, ctx.task_run_id)
        raise NonRetryableException(f"parity: first execution of {input.nonce} fails")
    return {"nonce": input.nonce, "replayed": True, "retry_count": ctx.retry_count}


# ----- p5: run_many and bulk_push -----

@hatchet.task(name="parity-double", input_validator=Num)
def double(input: Num, ctx: Context) -> dict[str, object]:
    return {"nonce": input.nonce, "n": input.n, "double": 2 * input.n}


@hatchet.task(name="parity-on-bulk", on_events=[BULK_EVENT_KEY], input_validator=Msg)
def on_bulk(input: Msg, ctx: Context) -> dict[str, str]:
    marker(f"bulk-event-{input.nonce}", json.dumps({
        "key": ctx.triggering_event_key, "meta": dict(ctx.additional_metadata or {})}))
    return {"nonce": input.nonce}


# ----- p6 (and p9's release_slot): served by a separate 1-slot worker started later -----

prio_wf = hatchet.workflow(name="parity-prio", input_validator=Label,
                           default_priority=Priority.MEDIUM)


@prio_wf.task()
def record_order(input: Label, ctx: Context) -> dict[str, object]:
    with open(marker_dir() / f"order-{input.nonce}", "a") as f:
        f.write(f"{input.label}\n")
    time.sleep(0.3)
    return {"label": input.label, "priority": ctx.priority}


@hatchet.task(name="parity-release", input_validator=Msg,
              execution_timeout=timedelta(seconds=40))
async def release(input: Msg, ctx: Context) -> dict[str, object]:
    # async (not a thread) on purpose: the SDK's thread pool has `slots` threads, so a sync
    # task would keep the only thread of the 1-slot worker busy whatever the engine assigns.
    await ctx.aio_release_slot()
    marker(f"released-{input.nonce}", ctx.task_run_id)
    quick_mark = marker_dir() / f"quick-{input.nonce}"
    # 3 s: a freed slot would be given out within 1.5 s on the real engine (its slot refresh)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not quick_mark.exists():
        await asyncio.sleep(0.1)
    return {"nonce": input.nonce, "saw_quick": quick_mark.exists()}


@hatchet.task(name="parity-hold", input_validator=Msg,
              execution_timeout=timedelta(seconds=40))
async def hold(input: Msg, ctx: Context) -> dict[str, object]:
    """release's control: keeps its slot, so parity-quick cannot start during its 3 s."""
    marker(f"holding-{input.nonce}", ctx.task_run_id)
    quick_mark = marker_dir() / f"quick-{input.nonce}"
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not quick_mark.exists():
        await asyncio.sleep(0.1)
    return {"nonce": input.nonce, "saw_quick": quick_mark.exists()}


@hatchet.task(name="parity-quick", input_validator=Msg)
async def quick(input: Msg, ctx: Context) -> dict[str, str]:
    marker(f"quick-{input.nonce}", ctx.task_run_id)
    return {"nonce": input.nonce}


# ----- p7: logs -----

@hatchet.task(name="parity-logs", input_validator=Msg)
def logs(input: Msg, ctx: Context) -> dict[str, str]:
    for i in range(3):
        ctx.log(f"parity line {i} {input.nonce}")
    return {"task_run_id": ctx.task_run_id}


# ----- p9: refresh_timeout, additional metadata -----

@hatchet.task(name="parity-refresh", input_validator=Msg,
              execution_timeout=timedelta(seconds=2))
def refresh(input: Msg, ctx: Context) -> dict[str, object]:
    ctx.refresh_timeout(timedelta(seconds=5))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4 and not ctx.is_cancelled:
        time.sleep(0.1)
    return {"nonce": input.nonce, "ran_s": round(time.monotonic() - t0, 2),
            "cancelled": ctx.is_cancelled, "meta": dict(ctx.additional_metadata or {})}


@hatchet.task(name="parity-no-refresh", input_validator=Msg,
              execution_timeout=timedelta(seconds=2))
def no_refresh(input: Msg, ctx: Context) -> dict[str, object]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < 4 and not ctx.is_cancelled:
        time.sleep(0.1)
    marker(f"no-refresh-{input.nonce}", "cancelled" if ctx.is_cancelled else "ran 4s")
    return {"nonce": input.nonce, "cancelled": ctx.is_cancelled}


# ----- p8: a workflow no worker ever serves (registered by the client), so runs stay QUEUED -----

@hatchet.task(name="parity-orphan", input_validator=Msg)
def orphan(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce}


# ----- p10: a workflow registered by the client to be deleted -----

@hatchet.task(name="parity-doomed", input_validator=Msg)
def doomed(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce}


# ----- p12: batch tasks -----

class BatchIn(BaseModel):
    nonce: str
    group: str | int
    n: int = 0


@hatchet.batch_task(name="parity-batch", input_validator=BatchIn, batch_max_size=3,
                    batch_max_interval=timedelta(seconds=2), batch_group_key="input.group")
def batch(inputs: dict[str, BatchIn], ctx: Context) -> dict[str, dict[str, object]]:
    groups = sorted({str(i.group) for i in inputs.values()})
    return {member: {"nonce": i.nonce, "size": len(inputs), "groups": groups,
                     "members": sorted(inputs)} for member, i in inputs.items()}


@hatchet.batch_task(name="parity-batch-sum", input_validator=BatchIn, batch_max_size=2,
                    batch_max_interval=timedelta(seconds=30), broadcast_output=True)
def batch_sum(inputs: dict[str, BatchIn], ctx: Context) -> dict[str, object]:
    return {"sum": sum(i.n for i in inputs.values()), "size": len(inputs)}


# ----- p13: durable reset (a branch of the durable log) -----

@hatchet.durable_task(name="parity-reset", input_validator=Msg,
                      execution_timeout=timedelta(minutes=5))
async def reset_me(input: Msg, ctx: DurableContext) -> dict[str, object]:
    took = []
    for _ in range(3):
        t0 = time.monotonic()
        await ctx.aio_sleep_for(timedelta(seconds=1))
        took.append(round(time.monotonic() - t0, 3))
    return {"nonce": input.nonce, "took": took, "at": time.time()}


# ----- p15: durable eviction and restore -----

@hatchet.durable_task(name="parity-evictable", input_validator=Msg,
                      execution_timeout=timedelta(minutes=2),
                      eviction_policy=EvictionPolicy(ttl=timedelta(seconds=1),
                                                     allow_capacity_eviction=False))
async def evictable(input: Msg, ctx: DurableContext) -> dict[str, object]:
    """Waits for `parity:wake:<nonce>`; evicted after 1 s of waiting by its policy. Counts its
    invocations in a marker file (a restore starts a new one)."""
    with open(marker_dir() / f"evictable-{input.nonce}", "a") as f:
        f.write("invoked\n")
    woke = await ctx.aio_wait_for_event(f"parity:wake:{input.nonce}")
    return {"nonce": input.nonce, "woke": woke}


# ----- p16: durable children (spawned over the durable stream, keyed by child index) -----

class Kid(BaseModel):
    nonce: str
    i: int
    sleep: float = 0.0


@hatchet.task(name="parity-durable-kid", input_validator=Kid)
async def durable_kid(input: Kid, ctx: Context) -> dict[str, object]:
    """Counts its executions in a marker file per (nonce, i), so a re-spawn would show."""
    with open(marker_dir() / f"kid-{input.nonce}-{input.i}", "a") as f:
        f.write("ran\n")
    await asyncio.sleep(input.sleep)
    return {"nonce": input.nonce, "i": input.i}


@hatchet.durable_task(name="parity-durable-parent", input_validator=Msg,
                      execution_timeout=timedelta(minutes=2),
                      eviction_policy=EvictionPolicy(ttl=timedelta(seconds=1),
                                                     allow_capacity_eviction=False))
async def durable_parent(input: Msg, ctx: DurableContext) -> dict[str, object]:
    """Spawns one child that runs 4 s (the parent is evicted while it waits: ttl 1 s), then
    three at once with `aio_run_many`. Both go over the durable stream (DurableContext supports
    eviction), so the invocation a restore starts finds the same children in the durable log."""
    with open(marker_dir() / f"dparent-{input.nonce}", "a") as f:
        f.write("invoked\n")
    first = await durable_kid.aio_run(Kid(nonce=input.nonce, i=0, sleep=4.0))
    rest = await durable_kid.aio_run_many(
        [durable_kid.create_bulk_run_item(input=Kid(nonce=input.nonce, i=i)) for i in (1, 2, 3)])
    return {"nonce": input.nonce, "first": first, "rest": rest}


# ----- p14: traces (served by the instrumented worker, `parity_worker.py otel`) -----

class Traced(BaseModel):
    nonce: str
    note: str = ""


@hatchet.task(name="parity-traced", input_validator=Traced, on_events=["parity:traced"])
def traced(input: Traced, ctx: Context) -> dict[str, str]:
    from opentelemetry.trace import get_tracer
    with get_tracer("parity").start_as_current_span("parity.work") as span:
        span.set_attribute("parity.note", input.note)
        span.set_attribute("parity.count", 3)
    return {"nonce": input.nonce}


@hatchet.task(name="parity-traced-parent", input_validator=Traced)
async def traced_parent(input: Traced, ctx: Context) -> dict[str, object]:
    from opentelemetry.trace import get_tracer
    with get_tracer("parity").start_as_current_span("parity.spawn"):
        out = await traced.aio_run(input=Traced(nonce=input.nonce, note="from the parent"))
    return {"child": out}


# ----- p17: on_success runs once after every task completed, and is skipped when one fails -----

on_success_wf = hatchet.workflow(name="parity-on-success", input_validator=Num)


@on_success_wf.task(retries=0)
def first_step(input: Num, ctx: Context) -> dict[str, int]:
    if input.n < 0:
        raise NonRetryableException(f"a negative n fails ({input.nonce})")
    return {"n": input.n + 1}


@on_success_wf.task(parents=[first_step])
def second_step(input: Num, ctx: Context) -> dict[str, int]:
    return {"n": ctx.task_output(first_step)["n"] * 10}


@on_success_wf.on_success_task()
def celebrate(input: Num, ctx: Context) -> dict[str, bool]:
    with open(marker_dir() / f"onsuccess-{input.nonce}", "a") as f:
        f.write(ctx.workflow_run_id + "\n")
    return {"celebrated": True}


MAIN_WORKFLOWS = [on_failure_wf, on_success_wf, slow, flaky, double, on_bulk, logs, refresh, no_refresh, batch,
                  evictable, durable_kid, durable_parent,
                  batch_sum, reset_me]
OTEL_WORKFLOWS = [traced, traced_parent]
PRIO_WORKFLOWS = [prio_wf, release, hold, quick]
