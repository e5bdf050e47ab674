"""Worker for the SDK-parity (2) scenario (placement.py): `placement_worker.py a` registers as
`placement-a` with labels model=fast, memory=1024; `placement_worker.py b` as `placement-b` with
model=slow, memory=256. Both serve every workflow in placement_tasks.ALL_WORKFLOWS (identical
actions, so only labels and stickiness decide placement). Plain SDK worker API only."""

import sys

from placement_tasks import ALL_WORKFLOWS, WORKER_LABELS, hatchet


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "a"
    worker = hatchet.worker(
        f"placement-{which}",
        slots=10,
        durable_slots=5,
        labels=WORKER_LABELS[which],
        workflows=ALL_WORKFLOWS,
    )
    worker.start()


if __name__ == "__main__":  # the SDK spawns a listener process that re-imports this module
    main()
