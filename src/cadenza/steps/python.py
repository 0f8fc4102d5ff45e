"""``python``: call ``module:function`` from ``plugins/`` with the merged parameters."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator

from cadenza.config.types import fail
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType

_CALLABLE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _callable(value: str) -> str:
    if not _CALLABLE.fullmatch(value):
        fail(f"expected 'module:function' (like 'sales.checks:verify'), got {value!r}")
    return value


class PythonConfig(StepConfig):
    """``callable`` is ``"module:function"``; ``isolation = "process"`` runs it in a child
    process that a timeout or cancel can kill, ``"thread"`` in the worker."""

    callable: Annotated[str, AfterValidator(_callable)]
    isolation: Literal["process", "thread"] = "process"


class PythonStep(StepType):
    """Call a Python function (SPEC §4)."""

    name = "python"
    Config = PythonConfig
