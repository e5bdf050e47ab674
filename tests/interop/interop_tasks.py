"""Task declarations shared by the interop worker and the interop client.

Written against the public API of hatchet-sdk 1.43.1. The client is built from the
HATCHET_CLIENT_* environment (import this module only after it points at the dev engine),
or with `Hatchet.from_embedded()` when INTEROP_EMBEDDED=1. Markers are files in
$INTEROP_MARKER_DIR, written by the worker process, so the client sees what really ran there.
"""

import os
import time
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from hatchet_sdk import (ConcurrencyExpression, ConcurrencyLimitStrategy, Context, DurableContext,
                         Hatchet, RateLimit)

hatchet = Hatchet.from_embedded() if os.environ.get("INTEROP_EMBEDDED") == "1" else Hatchet()

ECHO_MARK = "echoed-by-python-worker"
EVENT_KEY = "interop:ping"  # triggers on_ping
WAKE_KEY = "interop:wake"  # awaited by durable_sleep_then_event
RATE_KEY = "interop-rate"  # one unit per run of rate_limited


class Msg(BaseModel):
    nonce: str


def marker(name: str, text: str) -> None:
    d = Path(os.environ["INTEROP_MARKER_DIR"])
    (d / (name + ".tmp")).write_text(text)
    (d / (name + ".tmp")).rename(d / name)  # atomic for the poller


@hatchet.task(name="interop-echo", input_validator=Msg)
def echo(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce, "mark": ECHO_MARK}


@hatchet.task(name="interop-on-ping", on_events=[EVENT_KEY], input_validator=Msg)
def on_ping(input: Msg, ctx: Context) -> dict[str, str]:
    # The event payload becomes the run input; record it together with the trigger key.
    marker(f"event-{input.nonce}", f"{ctx.triggering_event_key or ''}")
    return {"nonce": input.nonce}


@hatchet.durable_task(name="interop-durable", input_validator=Msg)
async def durable_sleep_then_event(input: Msg, ctx: DurableContext) -> dict[str, object]:
    t0 = time.monotonic()
    slept = await ctx.aio_sleep_for(timedelta(seconds=2))
    t1 = time.monotonic()
    marker(f"waiting-{input.nonce}", "sleep done, now waiting for " + WAKE_KEY)
    event = await ctx.aio_wait_for_event(WAKE_KEY)
    return {
        "nonce": input.nonce,
        "slept_s": round(t1 - t0, 3),
        "sleep_duration_s": slept.duration.total_seconds(),
        "waited_s": round(time.monotonic() - t1, 3),
        "event": event,
    }


@hatchet.task(name="interop-rate-limited", input_validator=Msg,
              rate_limits=[RateLimit(static_key=RATE_KEY, units=1)])
def rate_limited(input: Msg, ctx: Context) -> dict[str, str]:
    return {"nonce": input.nonce}


class Grouped(BaseModel):
    nonce: str
    group: str


@hatchet.task(name="interop-one-per-group", input_validator=Grouped,
              concurrency=ConcurrencyExpression(
                  expression="input.group", max_runs=1,
                  limit_strategy=ConcurrencyLimitStrategy.GROUP_ROUND_ROBIN))
async def one_per_group(input: Grouped, ctx: Context) -> dict[str, object]:
    import asyncio
    import time
    started = time.time()
    await asyncio.sleep(1.5)
    # When it ran, by the worker's clock: the check compares the runs' spans.
    return {"nonce": input.nonce, "started": started, "ended": time.time()}


ALL_WORKFLOWS = [echo, on_ping, durable_sleep_then_event, rate_limited, one_per_group]
