"""What the tray icon says and offers (docs/desktop.md "The tray icon"), without a display:
:func:`read_status` reads the store, :func:`menu` and :func:`tooltip` put it in the user's
language; the app's tray (Qt or pystray) only draws them and calls back with an entry's key.

The icon has four looks: **failed** (a run FAILED, NEEDS_REVIEW or MISSED since the window was
last looked at) wins over **running** (runs in progress), then **paused** (scheduling
paused), then **idle**. Opening the window is looking: it clears "failed".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cadenza.domain.states import RunState
from cadenza.store.desktop import SchedulingPauses
from cadenza.web.ui.render import state_words, translations

Look = Literal["failed", "running", "paused", "idle"]
ALARMING = (RunState.FAILED, RunState.NEEDS_REVIEW, RunState.MISSED)
RECENT = 5


@dataclass(frozen=True)
class RecentRun:
    id: str
    job_id: str
    state: str
    at: datetime


@dataclass(frozen=True)
class TrayStatus:
    """``running`` runs in progress, ``alarming`` runs ended badly since ``since``, whether
    scheduling is ``paused``, the ``recent`` runs (newest first)."""

    running: int
    alarming: int
    paused: bool
    recent: tuple[RecentRun, ...]

    @property
    def look(self) -> Look:
        if self.alarming:
            return "failed"
        if self.running:
            return "running"
        return "paused" if self.paused else "idle"


@dataclass(frozen=True)
class Entry:
    """A menu entry: the app calls back with ``key`` (``open``, ``pause``, ``resume``,
    ``run:ID``, ``quit``); a disabled entry is a line of text."""

    key: str
    label: str
    enabled: bool = True
    default: bool = False


def read_status(store: Any, since: datetime) -> TrayStatus:
    """The tray's figures now; ``since``: when the window was last looked at."""
    running = len(store.list_runs(state=RunState.RUNNING, limit=1000))
    alarming = sum(1 for run in store.list_runs(state=ALARMING, limit=200)
                   if (run.finished_at or run.created_at) > since)
    recent = tuple(RecentRun(run.id, run.job_id, run.state.value,
                             run.finished_at or run.started_at or run.created_at)
                   for run in store.list_runs(limit=RECENT))
    paused = SchedulingPauses(store).current() is not None
    return TrayStatus(running, alarming, paused, recent)


def tooltip(status: TrayStatus, lang: str) -> str:
    """One line: what runs, what failed, whether scheduling is paused."""
    _ = translations(lang).gettext
    parts = []
    if status.running:
        parts.append(_("{n} running").format(n=status.running))
    if status.alarming:
        parts.append(_("{n} failed since you last looked").format(n=status.alarming))
    if status.paused:
        parts.append(_("scheduling paused"))
    return "Cadenza — " + (", ".join(parts) if parts else _("idle"))


def menu(status: TrayStatus, lang: str) -> list[Entry | None]:
    """The tray's menu (None: a separator)."""
    _ = translations(lang).gettext
    words = state_words(lang)
    entries: list[Entry | None] = [
        Entry("open", _("Open Cadenza"), default=True),
        Entry("status", tooltip(status, lang).removeprefix("Cadenza — "), enabled=False),
        None,
        Entry("resume", _("Resume scheduling")) if status.paused
        else Entry("pause", _("Pause scheduling")),
        None,
    ]
    if status.recent:
        entries.append(Entry("recent", _("Last runs"), enabled=False))
        for run in status.recent:
            when = run.at.astimezone().strftime("%H:%M")
            entries.append(Entry(f"run:{run.id}",
                                 f"{when}  {run.job_id} — {words.get(run.state, run.state)}"))
        entries.append(None)
    entries.append(Entry("quit", _("Quit Cadenza")))
    return entries

