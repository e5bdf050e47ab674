"""Worker of virtual_time.py: serves virtual_time_tasks.vt_sleep. Plain SDK worker API only."""

from virtual_time_tasks import hatchet, vt_sleep


def main() -> None:
    hatchet.worker("vt-worker", slots=2, workflows=[vt_sleep]).start()


if __name__ == "__main__":  # the SDK spawns a listener process that re-imports this module
    main()
