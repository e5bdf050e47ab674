"""The Python SDK's side of the chaos suite (scripts/chaos-real.sh with CHAOS_PEER=python): a
worker written with the official hatchet-sdk as its documentation shows, with the chaos suite's
three workflows (tools/chaos_suite.rs: chaos-dag `a` then `b`, chaos-single `t`,
chaos-durable `d` sleeping 2 s durably), each idempotent on input.k, so our chaos client drives
it and counts its results exactly as it does ours.

    python chaos_peer_worker.py --dir D [--slots N]

Every execution is appended to D/exec.log before it runs (task, key, retry count, pid, epoch
ms: the suite's format). With CHAOS_TASK_DEFAULTS=1 the tasks keep the SDK's defaults (a new
user's options); otherwise they get the suite's 3 retries and 30 s timeout.
"""

import argparse
import asyncio
import os
import sys
import threading
import time
from datetime import timedelta

from pydantic import BaseModel

from hatchet_sdk import (
    Context,
    DurableContext,
    Hatchet,
    TTLBasedIdempotencyConfig,
)


class ChaosIn(BaseModel):
    k: str


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True, help="where exec.log lives")
    p.add_argument("--slots", type=int, default=16)
    return p.parse_known_args()[0]


ARGS = parse()
LOG = os.path.join(ARGS.dir, "exec.log")
DEFAULTS = os.environ.get("CHAOS_TASK_DEFAULTS") == "1"
OPTS: dict[str, object] = (
    {} if DEFAULTS else {"retries": 3, "execution_timeout": timedelta(seconds=30)}
)
IDEM = TTLBasedIdempotencyConfig(key_expression="input.k", ttl=timedelta(hours=1))

hatchet = Hatchet()


def record(task: str, inp: ChaosIn, ctx: Context) -> None:
    line = f"{task}\t{inp.k}\t{ctx.retry_count}\t{os.getpid()}\t{int(time.time() * 1000)}\n"
    fd = os.open(LOG, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o644)
    try:
        os.write(fd, line.encode())  # one write per line: concurrent lines do not interleave
    finally:
        os.close(fd)


async def work(k: str) -> None:
    await asyncio.sleep((20 + sum(k.encode()) % 180) / 1000)


dag = hatchet.workflow(name="chaos-dag", input_validator=ChaosIn, idempotency=IDEM)


@dag.task(**OPTS)  # type: ignore[arg-type]
async def a(inp: ChaosIn, ctx: Context) -> dict[str, object]:
    record("a", inp, ctx)
    await work(inp.k)
    return {"k": inp.k, "a": 1}


@dag.task(parents=[a], **OPTS)  # type: ignore[arg-type]
async def b(inp: ChaosIn, ctx: Context) -> dict[str, object]:
    record("b", inp, ctx)
    first = ctx.task_output(a)
    await work(inp.k)
    return {"k": inp.k, "b": int(first["a"]) + 1}


single = hatchet.workflow(name="chaos-single", input_validator=ChaosIn, idempotency=IDEM)


@single.task(name="t", **OPTS)  # type: ignore[arg-type]
async def t(inp: ChaosIn, ctx: Context) -> dict[str, object]:
    record("t", inp, ctx)
    await work(inp.k)
    return {"k": inp.k, "single": True}


durable = hatchet.workflow(name="chaos-durable", input_validator=ChaosIn, idempotency=IDEM)


@durable.durable_task(name="d", **OPTS)  # type: ignore[arg-type]
async def d(inp: ChaosIn, ctx: DurableContext) -> dict[str, object]:
    record("d", inp, ctx)
    await ctx.aio_sleep_for(timedelta(seconds=2))
    return {"k": inp.k, "durable": True}


def announce() -> None:
    time.sleep(3)
    print(f"python chaos worker (pid {os.getpid()}) serving", file=sys.stderr, flush=True)


def main() -> None:
    threading.Thread(target=announce, daemon=True).start()
    hatchet.worker(
        "chaos-worker",
        slots=ARGS.slots,
        durable_slots=ARGS.slots,
        workflows=[dag, single, durable],
    ).start()


if __name__ == "__main__":  # the SDK's listener process re-imports this module
    main()
