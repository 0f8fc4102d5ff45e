"""``notify``: send a message through a notification channel."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from cadenza.config.types import FilePath, Identifier, NonEmptyStr, Recipient, Ref
from cadenza.steps.base import StepConfig, to_list
from cadenza.steps.registry import StepType


class NotifyConfig(StepConfig):
    """``to`` (addresses, ``role:X``, ``user:X``) and ``subject``; ``channel`` defaults to
    the default channel of cadenza.toml; ``body`` may hold ``${...}`` tokens; ``attach``
    lists files inside ``[files].roots``."""

    to: Annotated[list[Recipient], BeforeValidator(to_list), Field(min_length=1)]
    subject: NonEmptyStr
    channel: Annotated[Identifier | None, Ref("channel")] = None
    body: str = ""
    attach: list[FilePath] = Field(default_factory=list)


class NotifyStep(StepType):
    """Send a notification (SPEC §4)."""

    name = "notify"
    Config = NotifyConfig
