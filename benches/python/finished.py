"""Awaiting runs that have already finished, one by one, with the official Python SDK: the run
ids come one per line on stdin; each is awaited with `hatchet.runs.get_run_ref(id).result()`
(GetRunDetails, polled) and then `aio_result()` (the run listener). Prints one JSON line:
{"result_ms": [...], "aio_result_ms": [...]}. Env: HATCHET_CLIENT_* (the engine).
Driven by tools/finished_runs.rs.
"""

import asyncio
import json
import sys
import time

from hatchet_sdk import Hatchet


def main() -> None:
    ids = [line.strip() for line in sys.stdin if line.strip()]
    hatchet = Hatchet()
    sync_ms = []
    for run_id in ids:
        t0 = time.perf_counter()
        hatchet.runs.get_run_ref(run_id).result()
        sync_ms.append((time.perf_counter() - t0) * 1000)

    async def aio() -> list[float]:
        out = []
        for run_id in ids:
            t0 = time.perf_counter()
            await hatchet.runs.get_run_ref(run_id).aio_result()
            out.append((time.perf_counter() - t0) * 1000)
        return out

    aio_ms = asyncio.run(aio())
    print(json.dumps({"result_ms": sync_ms, "aio_result_ms": aio_ms}), flush=True)


if __name__ == "__main__":
    main()
