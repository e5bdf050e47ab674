"""Latency baseline for benchmark 7: the official Python SDK triggers `py-echo` (served by
echo_worker.py) with `aio_run` and waits for its result, one call at a time, BENCH_LATENCY_RUNS times after
BENCH_LATENCY_WARMUP warm-up calls. Prints one JSON line: {"p50_ms": .., "p99_ms": .., "n": ..}.
Env: HATCHET_CLIENT_* (the engine).
"""

import asyncio
import json
import os
import time

from hatchet_sdk import EmptyModel, Hatchet


async def measure(runs: int, warmup: int) -> list[float]:
    # `aio_run` waits on the SDK's pooled result stream; the sync `run` polls once a second.
    stub = Hatchet().stubs.workflow(name="py-echo")
    samples = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        await stub.aio_run(EmptyModel())
        if i >= warmup:
            samples.append(time.perf_counter() - t0)
    return samples


def main() -> None:
    runs = int(os.environ.get("BENCH_LATENCY_RUNS", "300"))
    warmup = int(os.environ.get("BENCH_LATENCY_WARMUP", "20"))
    samples = sorted(asyncio.run(measure(runs, warmup)))

    def pct(p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))] * 1000

    print(json.dumps({"p50_ms": pct(0.5), "p99_ms": pct(0.99), "n": len(samples)}), flush=True)


if __name__ == "__main__":
    main()
