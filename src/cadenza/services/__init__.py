"""The service layer: the operations a person performs, once, for every shell.

The CLI (:mod:`cadenza.cli`) and the web app are thin shells: they parse input, call these
operations and render the results. Each operation takes typed input, returns a frozen
result, records the actor (:class:`Actor`: ``cli:<os user>``, ``user:<name>``), reads time
from the services' clock, and raises :mod:`cadenza.domain.errors` or
:mod:`cadenza.services.errors` with located messages. Nothing here prints.

One module per noun: :mod:`~cadenza.services.runs` (run now, follow, cancel, resume,
abandon, replay), :mod:`~cadenza.services.history` (runs, logs, events: ``cadenza.toml``
and the store suffice), :mod:`~cadenza.services.jobs` (catalogue, next fires, edits of
jobs.toml, presets), :mod:`~cadenza.services.config` (init, validate, reload),
:mod:`~cadenza.services.users`, :mod:`~cadenza.services.secrets`,
:mod:`~cadenza.services.backup`, :mod:`~cadenza.services.simulate`,
:mod:`~cadenza.services.health`. See docs/services.md. Serving (a node and the HTTP server
over one home) is composed outside this layer, by :mod:`cadenza.server`.
"""

from __future__ import annotations

from cadenza.services.context import Actor, Services, os_user
from cadenza.services.errors import (
    Interrupted,
    InvalidRequest,
    NotAHome,
    NotFound,
    Refused,
    ServiceError,
)

__all__ = [
    "Actor",
    "Interrupted",
    "InvalidRequest",
    "NotAHome",
    "NotFound",
    "Refused",
    "ServiceError",
    "Services",
    "os_user",
]
