"""What every CLI command shares: the home, opened lazily, with errors turned into exits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cadenza.cli.output import err, fail
from cadenza.domain.errors import CadenzaError, ConfigError
from cadenza.home import Home, resolve_home

if TYPE_CHECKING:
    from cadenza.config import LoadedConfig
    from cadenza.store import Store


class CliState:
    """The ``--home`` choice and the parts opened from it."""

    def __init__(self, home: Path | None) -> None:
        self._explicit = home
        self._home: Home | None = None

    @property
    def home(self) -> Home:
        if self._home is None:
            self._home = Home(resolve_home(self._explicit))
        return self._home

    def config(self) -> LoadedConfig:
        """The validated configuration, or exit 1 with every located problem."""
        if not self.home.config_file.exists():
            fail(
                f"{self.home.path} is not a Cadenza home (no cadenza.toml); "
                "run `cadenza init DIR` or pass --home DIR"
            )
        try:
            return self.home.load_config()
        except ConfigError as exc:
            print_problems(exc.problems)
            raise typer.Exit(1) from None

    @contextmanager
    def store(self) -> Iterator[Store]:
        """The home's store, closed afterwards; store errors exit 1 with their message."""
        config = self.config()
        try:
            store = self.home.open_store(config)
        except CadenzaError as exc:
            fail(str(exc))
        try:
            yield store
        finally:
            store.close()


def state(ctx: typer.Context) -> CliState:
    obj = ctx.find_root().obj
    assert isinstance(obj, CliState)
    return obj


def print_problems(problems: list[object]) -> None:
    """Located problems on stderr, one per line (file:line:col: severity: message)."""
    for problem in problems:
        err.print(str(problem), markup=False)
