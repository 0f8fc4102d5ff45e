"""``python``: call ``module:function`` from ``plugins/`` with the merged parameters.

The function is imported from the home's ``plugins/`` directory (put first on ``sys.path``)
and must be code of that directory, or match ``[security].allowed_callables``
(:mod:`cadenza.plugin_code`, checked by :func:`load_callable` after the import), and is
called with keyword arguments (docs/running.md "``python`` steps"):

* the step's own arguments (``op_kwargs``, then the run's ``--arg STEP.k=v``) are always
  passed: a name the function does not accept is a fatal error naming it;
* the run's shared parameters (job params, preset, ``-p``) are passed when the function
  accepts them: by name, or all of them if it takes ``**kwargs``, so that a job's params do
  not force every function of the job to declare them;
* ``ctx`` (the :class:`~cadenza.steps.runtime.StepContext`) if the function names a ``ctx``
  parameter.

The return value is the step's record: ``None`` (nothing), an ``int`` (the rows) or a
``dict`` (the output, whose keys later steps read as ``${steps.NAME.KEY}``; an int value
under ``"rows"`` also sets the rows). It must be JSON-able; anything else is a fatal error.

``isolation = "process"`` (the default) makes the executor run the step in a child process
that a timeout kills; ``"thread"`` runs it in the worker (cheaper, but a timeout can only
abandon it). With thread isolation a plugin module is imported once per process: edits to
it are seen after a restart.

Processes the function starts (``subprocess``, daemons) do not outlive the attempt with
process isolation: at its end, success included, every process it started that is still
alive is killed and named in the run log (docs/leases.md "The processes a step starts"); the
child also stops by itself when its run's lease is not extended in time. With thread
isolation they are the worker's own children and are not tracked: use process isolation
for a function that starts processes.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from cadenza import plugin_code
from cadenza.config.labels import ADVANCED
from cadenza.config.types import fail
from cadenza.domain.errors import Fatal
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult

_CALLABLE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_PATH_LOCK = threading.Lock()
_IMPORT_LOCK = threading.Lock()


def _callable(value: str) -> str:
    if not _CALLABLE.fullmatch(value):
        fail(f"expected 'module:function' (like 'sales.checks:verify'), got {value!r}")
    return value


class PythonConfig(StepConfig):
    """``callable`` is ``"module:function"``; ``isolation = "process"`` runs it in a child
    process that a timeout or cancel can kill, ``"thread"`` in the worker."""

    callable: Annotated[str, AfterValidator(_callable)] = Field(description=(
        "The function to call, as module:function, from the plugins folder, e.g. "
        "sales:load_month."))
    isolation: Literal["process", "thread"] = Field("process", json_schema_extra=ADVANCED,
                                                    description=(
        "process runs it in a child process that a timeout or cancel can stop; thread runs "
        "it in the worker (faster, cannot be stopped)."))


@functools.lru_cache(maxsize=64)
def _plugins_dir(home: Path) -> str:
    return str(home / "plugins")


def plugins_first(home: Path) -> None:
    """Put ``home/plugins`` first on ``sys.path`` (once)."""
    plugins = _plugins_dir(home)
    if sys.path and sys.path[0] == plugins:
        return  # already first (the common case: no lock)
    with _PATH_LOCK:
        if not sys.path or sys.path[0] != plugins:
            if plugins in sys.path:
                sys.path.remove(plugins)
            sys.path.insert(0, plugins)


def load_callable(spec: str, home: Path | None = None,
                  patterns: Iterable[str] = ()) -> Callable[..., Any]:
    """The object named by ``"module:attr.attr"``; :class:`Fatal` when it cannot be found,
    or (given the ``home``) when it is not code of the home's ``plugins/`` nor matched by
    ``patterns`` (``[security].allowed_callables``; :mod:`cadenza.plugin_code`)."""
    module_name, _, attrs = spec.partition(":")
    obj: Any = sys.modules.get(module_name)  # imported already: no import machinery
    try:
        if obj is not None and home is not None and _of_another_home(obj, home):
            with _IMPORT_LOCK:  # one thread forgets it and imports ours; the others wait
                obj = sys.modules.get(module_name)
                if obj is not None and _of_another_home(obj, home):
                    _forget(module_name)  # the same name in another home's plugins/
                    obj = importlib.import_module(module_name)
        if obj is None or getattr(getattr(obj, "__spec__", None), "_initializing", False):
            obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise Fatal(f"callable {spec!r}: cannot import {module_name!r} from plugins/: "
                    f"{exc}") from exc
    module = obj
    path: list[object] = []
    for part in attrs.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise Fatal(f"callable {spec!r}: {module_name!r} has no {attrs!r}") from None
        path.append(obj)
    if home is not None:
        problem = plugin_code.check_loaded(spec, module, path, home, patterns)
        if problem is not None:
            raise Fatal(f"callable {spec!r} refused: {problem}")
    if not callable(obj):
        raise Fatal(f"callable {spec!r} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def _of_another_home(module: Any, home: Path) -> bool:
    """Whether ``module`` was imported from the ``plugins/`` folder of another Cadenza home
    (one process serving several homes, as the tests do). A module of the standard
    library or of an installed package is never forgotten: it is refused instead."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    return _of_another_plugins(file, str(plugin_code.plugins_of(home)))


@functools.lru_cache(maxsize=4096)
def _of_another_plugins(file: str, plugins: str) -> bool:
    """Whether ``file`` lies in the ``plugins/`` folder of a home other than the one of
    ``plugins``. Cached: an imported module's file does not move, and resolving paths cost
    more than the rest of a one-step run."""
    real = Path(file).resolve()
    ours = Path(plugins).resolve()
    for parent in real.parents:
        if parent.name == "plugins" and (parent.parent / "cadenza.toml").is_file():
            return parent != ours
    return False


def _forget(module_name: str) -> None:
    top = module_name.split(".", 1)[0]
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        sys.modules.pop(name, None)


@functools.lru_cache(maxsize=1024)
def _accepts(fn: Callable[..., Any]) -> tuple[frozenset[str], bool] | None:
    """The keyword names ``fn`` accepts and whether it takes ``**kwargs`` (None: unknown)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    named = frozenset(name for name, p in parameters.items()
                      if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    inspect.Parameter.KEYWORD_ONLY))
    return named, takes_all


def arguments(fn: Callable[..., Any], shared: Mapping[str, Any], own: Mapping[str, Any],
              ctx: object) -> dict[str, Any]:
    """The keyword arguments of ``fn`` (see the module docstring)."""
    try:
        accepts = _accepts(fn)
    except TypeError:  # an unhashable callable object
        accepts = _accepts.__wrapped__(fn)
    if accepts is None:
        return {**shared, **own}
    named, takes_all = accepts
    unknown = [name for name in own if name not in named and not takes_all]
    if unknown:
        raise Fatal(f"the function does not accept {', '.join(map(repr, unknown))} (given in "
                    f"op_kwargs or --arg; it accepts: {', '.join(sorted(named)) or 'nothing'})")
    kwargs = {k: v for k, v in shared.items() if takes_all or k in named}
    kwargs.update(own)
    if "ctx" in named:
        kwargs["ctx"] = ctx
    return kwargs


def to_result(value: object, spec: str) -> StepResult:
    """The function's return value as a :class:`StepResult` (see the module docstring)."""
    if value is None:
        return StepResult()
    if isinstance(value, int) and not isinstance(value, bool):
        return StepResult(rows=value)
    if isinstance(value, dict):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise Fatal(f"{spec} returned a dict that is not JSON-able ({exc}); return "
                        "numbers, strings, booleans, None, lists and dicts only") from None
        if not all(isinstance(key, str) for key in value):
            raise Fatal(f"{spec} returned a dict with non-string keys; output keys must be "
                        "strings (later steps read them as ${steps.NAME.KEY})")
        rows = value.get("rows")
        rows = rows if isinstance(rows, int) and not isinstance(rows, bool) else None
        return StepResult(rows=rows, output=value)
    raise Fatal(f"{spec} returned {type(value).__name__}; expected None, an int (rows) or a "
                "JSON-able dict (output)")


class PythonStep(StepType):
    """Call a Python function (docs/running.md)."""

    name = "python"
    Config = PythonConfig

    def run(self, ctx: StepContext, config: PythonConfig) -> StepResult:
        """Import ``config.callable`` and call it (see the module docstring)."""
        plugins_first(ctx.home)
        fn = load_callable(config.callable, ctx.home,
                           ctx.settings.security.allowed_callables)
        own = dict(config.op_kwargs)
        shared = {k: v for k, v in ctx.params.items() if k not in own}
        value = fn(**arguments(fn, shared, own, ctx))
        return to_result(value, config.callable)
