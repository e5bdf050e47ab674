"""Reconnect baseline of the side-by-side benchmark (benchmark 3): the official Python SDK awaits
the results of the run ids in the file named by argv[1] (run refs: one pooled
SubscribeToWorkflowRuns stream), while the benchmark restarts the engine and then completes the
runs. Prints `waiting` once every ref is awaited, then `done <results> <errors>` when every
result arrived. Env: HATCHET_CLIENT_* (the engine).
"""

import asyncio
import sys

from hatchet_sdk import Hatchet


async def main() -> None:
    with open(sys.argv[1]) as f:
        ids = [line.strip() for line in f if line.strip()]
    hatchet = Hatchet()
    refs = [hatchet.runs.get_run_ref(i) for i in ids]
    waits = asyncio.gather(*[r.aio_result() for r in refs], return_exceptions=True)
    print("waiting", flush=True)
    results = await waits
    errors = sum(1 for r in results if isinstance(r, BaseException))
    print(f"done {len(results) - errors} {errors}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
