"""A separate process that races on a store (driven by test_store_races.py over stdin/stdout).

Usage: ``python store_race_worker.py URL``. Prints ``ready`` once the store is open, then
answers one line per command:

* ``claim RUN_ID`` -> ``1`` if this process claimed the run (QUEUED -> RUNNING), else ``0``;
* ``fire JOB ISO_TIME`` -> the new run id, or ``-`` if that fire was already recorded;
* ``quit`` -> exits.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

from cadenza.store import Store


def main(url: str) -> None:
    store = Store.open(url, migrate=True)
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            command, *args = line.split()
            if command == "claim":
                until = datetime.now(UTC) + timedelta(minutes=5)
                won = store.claim_runs(f"pid-{id(store)}", until, run_ids=[args[0]])
                print("1" if won else "0", flush=True)
            elif command == "fire":
                at = datetime.fromisoformat(args[1])
                run_id = store.create_run(args[0], "scheduled", schedule="main", scheduled_for=at)
                print(run_id or "-", flush=True)
            elif command == "quit":
                break
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1])
