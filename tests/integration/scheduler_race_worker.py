"""A scheduler in its own process, driven line by line by test_scheduler_races.py.

Usage: ``python scheduler_race_worker.py STORE_URL JOBS_JSON``. ``JOBS_JSON`` is a file
holding a list of job tables (as in jobs.toml, with ``id``). Prints ``ready``, then answers
each ``tick ISO_TIME`` with ``CREATED ALREADY_RECORDED``; ``quit`` exits.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from cadenza.clock import FakeClock
from cadenza.config.schema_jobs import JobConfig
from cadenza.scheduler.service import Scheduler
from cadenza.store import Store


def main(url: str, jobs_file: str) -> None:
    raw = json.loads(Path(jobs_file).read_text(encoding="utf-8"))
    jobs = {item["id"]: JobConfig.model_validate(item) for item in raw}
    clock = FakeClock()
    store = Store.open(url, clock=clock)
    scheduler = Scheduler(store, jobs, clock=clock, rng=random.Random(),
                          default_zone=ZoneInfo("UTC"))
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            command, *args = line.split()
            if command == "tick":
                clock.set(datetime.fromisoformat(args[0]))
                result = scheduler.tick(clock.now())
                print(f"{len(result.created)} {result.already_recorded}", flush=True)
            elif command == "quit":
                break
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
