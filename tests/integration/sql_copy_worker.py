"""A worker process that runs one sql_copy step and is killed (kill -9) by the test
mid-copy: its checkpoint goes to a JSON file, as the executor's goes to the store.

Usage: python sql_copy_worker.py HOME CHECKPOINT SRC_URL DST_URL SOURCE_TABLE TARGET_TABLE
MODE BATCH_SIZE
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import SqlTestContext, run_step

from cadenza.steps.builtin.sql_copy import SqlCopyStep


class FileCheckpointContext(SqlTestContext):
    """ctx.checkpoint / ctx.last_checkpoint kept in a file (written then renamed, so that a
    kill leaves the old or the new state)."""

    def __init__(self, home: Path, connections: dict[str, str], path: Path) -> None:
        super().__init__(home, connections, step_type="sql_copy", timeout=600)
        self.path = path

    def checkpoint(self, state: Any) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)

    @property
    def last_checkpoint(self) -> Any:
        return json.loads(self.path.read_text()) if self.path.exists() else None


def main(argv: list[str]) -> None:
    home, saved, src, dst, s, t, mode, batch = argv
    ctx = FileCheckpointContext(Path(home), {"src": src, "dst": dst}, Path(saved))
    try:
        result = run_step(SqlCopyStep, ctx, source={"connection": "src", "table": s},
                          target={"connection": "dst", "table": t}, mode=mode,
                          batch_size=int(batch))
        print(json.dumps(dict(result.output)))
    finally:
        ctx.close()


if __name__ == "__main__":
    main(sys.argv[1:])
