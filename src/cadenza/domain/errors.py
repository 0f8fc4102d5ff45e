"""Cadenza's exceptions, as one tree.

::

    CadenzaError
     ├── ConfigError            a config file is unreadable or invalid (has every problem)
     ├── StaleConfigError       a config write was based on a version that changed on disk
     ├── InvalidTransition      a state change the transition tables do not allow
     ├── StoreError             the store cannot be opened or used
     │    ├── UnsafeStoreLocation  SQLite data dir on a network file system
     │    └── StaleEpoch        a write refused: the lease epoch moved on (fencing)
     ├── SecretError            a secret is missing, or the key file is unusable
     └── StepError              raised by steps; the class decides what happens next (SPEC §7)
          ├── Retryable         try again after the retry policy's backoff
          ├── Deferred          wait until ``until``, then retry without spending an attempt
          ├── Fatal             the run fails at once
          └── ResourceFault     the leased resource is faulty; retry on another one

Every class's docstring is its default message.
"""

from __future__ import annotations

from datetime import datetime


class CadenzaError(Exception):
    """Cadenza failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip().splitlines()[0])


class ConfigError(CadenzaError):
    """The configuration is invalid."""

    def __init__(self, problems: list[object], message: str | None = None) -> None:
        self.problems = problems
        super().__init__(message or "\n".join(str(p) for p in problems) or None)


class StaleConfigError(CadenzaError):
    """The file changed on disk since it was read; reload it and apply the change again."""


class InvalidTransition(CadenzaError):
    """This state change is not allowed."""

    def __init__(self, machine: str, frm: str | None, to: str) -> None:
        self.machine, self.frm, self.to = machine, frm, to
        super().__init__(f"{machine}: transition {frm or '(new)'} -> {to} is not allowed")


class StoreError(CadenzaError):
    """The store cannot be used."""


class UnsafeStoreLocation(StoreError):
    """SQLite needs a local file system; this data directory is on a network file system."""


class StaleEpoch(StoreError):
    """The change was refused: the lease epoch moved on (another holder took over)."""


class SecretError(CadenzaError):
    """A secret is missing or cannot be decrypted."""


class StepError(CadenzaError):
    """A step failed."""


class Retryable(StepError):
    """A transient failure: the step is tried again after the retry policy's backoff."""


class Deferred(StepError):
    """Not now: the step is tried again later without spending an attempt."""

    def __init__(self, until: datetime | None = None, message: str | None = None) -> None:
        self.until = until
        super().__init__(message)


class Fatal(StepError):
    """A permanent failure: the run fails at once."""


class ResourceFault(StepError):
    """The leased resource is at fault: it is marked FAULT and the run tries another one."""
