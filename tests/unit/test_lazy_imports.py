"""The server does not load the big libraries of steps it has not run: pyarrow, openpyxl and
matplotlib are imported at a step's first use, not when the step types load (they were
~90 MiB of every server's memory, half of a node serving 1,000 jobs)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyarrow", "openpyxl", "matplotlib", "weasyprint")


def test_loading_the_step_types_imports_no_heavy_library() -> None:
    code = ("import sys\n"
            "import cadenza.cli.main, cadenza.server\n"
            "from cadenza.steps.registry import registry\n"
            "types = registry()\n"
            "assert {'file_load', 'file_export', 'report'} <= set(types), sorted(types)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
