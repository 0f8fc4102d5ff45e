"""``call_job``: start another job as a child run, and by default wait for it."""

from __future__ import annotations

from typing import Annotated, Protocol

from pydantic import Field

from cadenza.config.types import Identifier, JsonMap, Ref
from cadenza.domain.errors import Fatal
from cadenza.steps.base import RUN_TUNABLE, StepConfig
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult


class CallJobConfig(StepConfig):
    """``job`` to run, with ``params`` (declared params of that job) and/or its ``preset``;
    ``wait = false`` records the child and moves on. Cycles are refused."""

    job: Annotated[Identifier, Ref("job")] = Field(title="Job to run", description=(
        "The ID of the job this step runs, e.g. refresh-cache."))
    params: JsonMap = Field(default_factory=dict, title="Parameters", description=(
        "Values for that job's parameters, one per line, e.g. period = \"2027-01\"."))
    preset: Identifier | None = Field(None, description=(
        "One of that job's presets to run with, e.g. month-end."))
    wait: bool = Field(True, title="Wait for it", description=(
        "Wait for the called run to end (false: start it and move on)."),
            json_schema_extra=RUN_TUNABLE)


class ChildCalls(Protocol):
    """What runs a ``call_job`` step: the executor's
    :class:`~cadenza.executor.calls.ChildCalls`, given to the step as ``ctx.calls`` (steps
    never import the executor)."""

    def call(self, ctx: StepContext, config: CallJobConfig) -> StepResult:
        """One attempt: start the child once, then succeed, fail, cancel or wait."""
        ...


class CallJobStep(StepType):
    """Run another job as a child run and, with ``wait``, wait for it (see
    docs/call_job.md). Output: ``child_run_id``, ``job``, ``state`` and ``rows`` of the
    child; the step's rows are the child's."""

    name = "call_job"
    Config = CallJobConfig

    def run(self, ctx: StepContext, config: CallJobConfig) -> StepResult:
        calls: ChildCalls | None = getattr(ctx, "calls", None)
        if calls is None:
            raise Fatal(f"step {ctx.step.name!r}: call_job needs a run executed by a "
                        "Cadenza executor with a store (`cadenza serve`, `cadenza run`)")
        return calls.call(ctx, config)
