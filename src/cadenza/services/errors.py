"""The errors the service layer adds to :mod:`cadenza.domain.errors`.

::

    CadenzaError
     └── ServiceError
          ├── NotAHome          the directory has no cadenza.toml
          ├── NotFound          no such run, job, preset or user
          ├── InvalidRequest    the input is malformed or does not fit (a usage error)
          ├── Refused           the operation does not apply now (a run in another state,
          │                     a server running on the home)
          └── Interrupted       the person interrupted an operation that waited

A shell maps them to its own codes (the CLI: InvalidRequest exits 2, the rest 1 or 3; the
API: 404, 422, 409). Every message names what is at fault.
"""

from __future__ import annotations

from cadenza.domain.errors import CadenzaError


class ServiceError(CadenzaError):
    """The operation failed."""


class NotAHome(ServiceError):
    """This directory is not a Cadenza home (no cadenza.toml)."""


class NotFound(ServiceError):
    """No such object."""


class InvalidRequest(ServiceError):
    """The request is malformed or does not fit what it names."""


class Refused(ServiceError):
    """The operation does not apply now."""


class Interrupted(ServiceError):
    """Interrupted."""
