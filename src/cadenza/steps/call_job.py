"""``call_job``: start another job as a child run, and by default wait for it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from cadenza.config.types import Identifier, JsonMap, Ref
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType


class CallJobConfig(StepConfig):
    """``job`` to run, with ``params`` (declared params of that job) and/or its ``preset``;
    ``wait = false`` records the child and moves on. Cycles are refused."""

    job: Annotated[Identifier, Ref("job")]
    params: JsonMap = Field(default_factory=dict)
    preset: Identifier | None = None
    wait: bool = True


class CallJobStep(StepType):
    """Run another job (SPEC §4)."""

    name = "call_job"
    Config = CallJobConfig
