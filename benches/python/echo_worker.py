"""Bench worker for the Python side: one hatchet-sdk worker process serving `py-echo`, a trivial
echo task equivalent to the Rust example worker's `rust-echo` (one ctx.log line, then return
the input with a marker). Async, like the Rust task. Env: HATCHET_CLIENT_* (the engine),
BENCH_SLOTS (default 50).
"""

import os

from hatchet_sdk import Context, EmptyModel, Hatchet

hatchet = Hatchet()


@hatchet.task(name="py-echo")
async def echo(input: EmptyModel, ctx: Context) -> dict[str, object]:
    ctx.log("echoing from Python")
    return {"echo": input.model_dump(), "worker": "python"}


def main() -> None:
    slots = int(os.environ.get("BENCH_SLOTS", "50"))
    hatchet.worker("py-bench-worker", slots=slots, workflows=[echo]).start()


if __name__ == "__main__":  # the SDK's listener process re-imports this module
    main()
