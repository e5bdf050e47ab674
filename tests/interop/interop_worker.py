"""Interop worker: a plain Python SDK worker that serves the tasks in interop_tasks.py.

Started by scenario.py as a subprocess with the HATCHET_CLIENT_* environment pointing at
the dev engine. It uses only the SDK's normal worker API (hatchet.worker(...).start()).
"""

import os

from interop_tasks import ALL_WORKFLOWS, hatchet


def main() -> None:
    worker = hatchet.worker(
        os.environ.get("INTEROP_WORKER_NAME", "interop-worker"),
        slots=4,
        durable_slots=4,
        workflows=ALL_WORKFLOWS,
    )
    worker.start()


if __name__ == "__main__":  # the SDK spawns a listener process that re-imports this module
    main()
