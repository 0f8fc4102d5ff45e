"""Pause and resume scheduling for the whole home (docs/scheduling.md "Pausing scheduling"),
from the CLI, the API, the dashboard or the desktop's tray: while paused, every due fire is
recorded MISSED with who paused it, and runs started by hand still run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadenza.store.desktop import Pause, SchedulingPauses

__all__ = ["Pause", "SchedulingService"]

if TYPE_CHECKING:
    from cadenza.services.context import Services


class SchedulingService:
    """The scheduling pause of a home's store."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def _pauses(self) -> SchedulingPauses:
        return SchedulingPauses(self.services.store())

    def status(self) -> Pause | None:
        """The pause in force, or None when scheduling runs."""
        return self._pauses().current()

    def pause(self) -> Pause:
        """Pause scheduling (already paused: the pause in force, unchanged)."""
        return self._pauses().pause(str(self.services.actor))

    def resume(self) -> bool:
        """Resume scheduling; False when it was not paused."""
        return self._pauses().resume(str(self.services.actor))
