"""The CLI is a thin shell: its modules import the service layer, never the core.

Every import of every module under ``src/cadenza/cli/`` counts, at module level, inside
functions and under ``TYPE_CHECKING``. Allowed: ``cadenza.cli``, ``cadenza.services``, the
domain's value types (states, errors, events) and ``cadenza.clock`` (the CLI builds the clock
from the environment), and ``cadenza.server``, the composition root of ``cadenza serve`` (a
node and the HTTP server built from the services); everything else of ``cadenza`` (store,
executor, node, scheduler, config, home, security, steps ...) is a layering error.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cadenza.cli

ALLOWED = (
    "cadenza.cli",
    "cadenza.services",
    "cadenza.domain.states",
    "cadenza.domain.errors",
    "cadenza.domain.events",
    "cadenza.clock",
    "cadenza.server",
)


def _allowed(module: str) -> bool:
    return not (module == "cadenza" or module.startswith("cadenza.")) or any(
        module == ok or module.startswith(ok + ".") for ok in ALLOWED)


def forbidden_imports(source: str, name: str) -> list[str]:
    """``name:line: module`` for each import of ``source`` that the CLI may not make."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "cadenza":  # `from cadenza import store`
                modules = [f"cadenza.{alias.name}" for alias in node.names]
        found += [f"{name}:{node.lineno}: {m}" for m in modules if not _allowed(m)]
    return found


def test_cli_modules_import_only_the_service_layer() -> None:
    root = Path(cadenza.cli.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 5
    found = [hit for path in files
             for hit in forbidden_imports(path.read_text(encoding="utf-8"),
                                          str(path.relative_to(root)))]
    assert found == []


def test_the_check_sees_every_kind_of_import() -> None:
    source = '''
from typing import TYPE_CHECKING
import cadenza.store
from cadenza.executor.runner import Executor
from cadenza import node
from cadenza.services.runs import RunService
from cadenza.domain.states import RunState
if TYPE_CHECKING:
    from cadenza.config import LoadedConfig

def command() -> None:
    from cadenza.scheduler.leader import leadership_for
    import cadenza.home
'''
    assert [hit.split(": ")[1] for hit in forbidden_imports(source, "x.py")] == [
        "cadenza.store", "cadenza.executor.runner", "cadenza.node", "cadenza.config",
        "cadenza.scheduler.leader", "cadenza.home"]
