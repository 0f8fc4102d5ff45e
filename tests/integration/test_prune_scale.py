"""A prune of many old runs on SQLite holds the writer in short batches (docs/backup.md).

20,000 runs by default (the property does not depend on the count); the figure in
docs/backup.md is for ``CADENZA_PRUNE_N=100000``."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.store import Store
from cadenza.store.tables import event_log, run_logs, runs, step_runs

N = int(os.environ.get("CADENZA_PRUNE_N", "20000"))


def test_a_large_prune_never_blocks_a_writer_for_long(sqlite_url: str) -> None:
    old = datetime(2027, 1, 1, tzinfo=UTC)
    clock = FakeClock(old + timedelta(days=400))
    with Store.open(sqlite_url, clock=clock) as store:
        with store.write() as conn:  # bulk rows, as 100,000 finished runs leave them
            conn.execute(runs.insert(), [
                {"id": f"R{i:025d}", "job_id": f"job-{i % 20}", "state": "SUCCEEDED",
                 "trigger": "manual", "created_at": old, "finished_at": old,
                 "updated_at": old} for i in range(N)])
            conn.execute(step_runs.insert(), [
                {"run_id": f"R{i:025d}", "step": "s", "step_type": "python", "attempt": 1,
                 "state": "SUCCEEDED", "created_at": old, "updated_at": old}
                for i in range(N)])
            conn.execute(run_logs.insert(), [
                {"run_id": f"R{i:025d}", "ts": old, "level": "INFO", "message": "done"}
                for i in range(N)])
            conn.execute(event_log.insert(), [
                {"run_id": f"R{i:025d}", "event_type": "RUN_FINISHED", "level": "INFO",
                 "message": "finished", "created_at": old, "actor": "system"}
                for i in range(N)])
        waits: list[float] = []
        stop = threading.Event()

        def writer() -> None:  # another writer of the same process, as a worker would be
            while not stop.is_set():
                began = time.perf_counter()
                store.append_event("CONFIG_CHANGED", "a concurrent write")
                waits.append(time.perf_counter() - began)
                time.sleep(0.01)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            report = store.prune(days=90, keep_last=100)
        finally:
            stop.set()
            thread.join(10)
        print(f"\nprune of {N} runs: {report.seconds:.1f}s in {report.batches} batches, "
              f"longest batch {report.longest_batch_seconds * 1000:.0f} ms, "
              f"longest concurrent write {max(waits) * 1000:.0f} ms")
        assert report.runs == N - 20 * 100
        assert report.step_runs == report.logs == N - 2000
        assert report.events == N - 2000
        assert report.longest_batch_seconds < 2.0
        assert max(waits) < 2.0
        with store.read() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar() == 2000
