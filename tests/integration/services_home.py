"""A real home for the service tests: the demo, on a FakeClock."""

from __future__ import annotations

from pathlib import Path

from cadenza.clock import FakeClock
from cadenza.services import Actor, Services
from cadenza.services.config import init_home

START = "2027-03-10T09:00:00+00:00"


def demo_services(root: Path, actor: Actor | None = None,
                  clock: FakeClock | None = None) -> Services:
    clock = clock or FakeClock(START)
    created = init_home(root / "home", example=True, actor=Actor("cli", "init"), clock=clock)
    return Services.at(created.path, actor=actor or Actor.user("bob"), clock=clock)
