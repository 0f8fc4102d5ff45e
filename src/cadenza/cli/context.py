"""What every CLI command shares: the services of the home, built lazily, and the way
their errors become messages on stderr and exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cadenza.cli.output import err, fail, shown, use_redactor
from cadenza.clock import clock_from_env
from cadenza.domain.errors import CadenzaError, ConfigError, WriteFailed, write_failure_kind
from cadenza.services import Actor, InvalidRequest, Services
from cadenza.services.terminal import printable

if TYPE_CHECKING:
    from cadenza.services.terminal import Redactor

EXIT_USAGE = 2
EXIT_NOT_WRITTEN = 3
"""A write to the store or to a file failed (a full disk, a read-only file system...)."""


class CliState:
    """The ``--home`` choice and the services opened on it (closed when the command
    ends)."""

    def __init__(self, home: Path | None) -> None:
        self._explicit = home
        self._services: Services | None = None
        use_redactor(self._redactor)

    def _redactor(self) -> Redactor | None:
        """The home's redactor once the services are open (what the output redacts with)."""
        return None if self._services is None else self._services.home.redactor

    @property
    def services(self) -> Services:
        """The services on the home, as the OS user (``cli:<user>``), on the clock of
        ``$CADENZA_FAKE_NOW`` or the system."""
        if self._services is None:
            try:
                clock = clock_from_env()
            except ValueError as exc:
                fail(str(exc), EXIT_USAGE)
            self._services = Services.at(self._explicit, actor=Actor.cli(), clock=clock)
        return self._services

    def configured(self) -> Services:
        """The services with the whole configuration loaded, or exit 1 with every located
        problem (what runs, serves or edits needs both files valid)."""
        services = self.services
        with handled():
            services.config()
        return services

    def for_history(self) -> Services:
        """The services with ``cadenza.toml`` loaded: a bad ``jobs.toml`` gives a warning
        line on stderr, not a failure (reading history needs only the settings and the
        store)."""
        services = self.services
        with handled():
            loaded = services.settings()
        if loaded.jobs_errors:
            err.print(f"warning: jobs.toml has {loaded.jobs_errors} problem(s); showing "
                      "history only (cadenza validate for details)", markup=False)
        return services

    def close(self) -> None:
        # The redactor stays in use: an unexpected error is printed after this (cli.main).
        if self._services is not None:
            self._services.close()


def state(ctx: typer.Context) -> CliState:
    obj = ctx.find_root().obj
    assert isinstance(obj, CliState)
    return obj


@contextmanager
def handled(usage: tuple[type[Exception], ...] = (InvalidRequest,),
            code: int = 1) -> Iterator[None]:
    """Errors of the services as exits: a ConfigError prints its located problems (exit
    1); a write that failed (WriteFailed: a full disk, a read-only store...) exits 3; a
    ``usage`` error exits 2; any other Cadenza error exits ``code``; all with the message
    on stderr, never a traceback. An OSError of a full or read-only disk that a service
    let through is told the same way (exit 3)."""
    try:
        yield
    except ConfigError as exc:
        print_problems(exc.problems)
        raise typer.Exit(1) from None
    except WriteFailed as exc:
        fail(str(exc), EXIT_NOT_WRITTEN)
    except usage as exc:
        fail(str(exc), EXIT_USAGE)
    except CadenzaError as exc:
        fail(str(exc), code)
    except OSError as exc:
        kind = write_failure_kind(exc)
        if kind is None:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        fail(f"{kind}: {exc.strerror or exc}{where}; the operation stopped at that write; "
             "make room (or make it writable) and try again", EXIT_NOT_WRITTEN)


def print_problems(problems: list[object]) -> None:
    """Located problems on stderr, one per line (file:line:col: severity: message)."""
    for problem in problems:
        err.print(_problem_line(problem), markup=False)


def _problem_line(problem: object) -> str:
    """A located problem as a line: its place and field path are ours and shown as they
    are (without control characters); its message is redacted. Redacting the whole line
    would take a field path ending in a secret-looking key (``headers.Authorization: ...``)
    for a key and value, and mask the message that says what is wrong."""
    message = getattr(problem, "message", None)
    path = getattr(problem, "path", None)
    if not isinstance(message, str) or not isinstance(path, str) or not path:
        return shown(problem)
    where = str(problem)[: -len(message)] if str(problem).endswith(message) else None
    if where is None:
        return shown(problem)
    return printable(where) + shown(message)
