"""Worker for the SDK-parity scenario (parity.py): `parity_worker.py main` serves
parity_tasks.MAIN_WORKFLOWS with 8 slots; `parity_worker.py prio` serves PRIO_WORKFLOWS with one
slot (so the order it runs queued runs in is observable); `parity_worker.py otel` serves
OTEL_WORKFLOWS with the SDK's OpenTelemetry instrumentor on (it exports its spans to the
engine's collector). Plain SDK worker API only."""

import os
import sys

from parity_tasks import MAIN_WORKFLOWS, OTEL_WORKFLOWS, PRIO_WORKFLOWS, hatchet


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "main"
    if which == "otel":
        from hatchet_sdk.opentelemetry.instrumentor import HatchetInstrumentor
        HatchetInstrumentor().instrument()
    workflows = {"prio": PRIO_WORKFLOWS, "otel": OTEL_WORKFLOWS}.get(which, MAIN_WORKFLOWS)
    worker = hatchet.worker(
        os.environ.get("INTEROP_WORKER_NAME", f"parity-{which}"),
        slots=1 if which == "prio" else 8,
        workflows=workflows,
    )
    worker.start()


if __name__ == "__main__":  # the SDK spawns a listener process that re-imports this module
    main()
