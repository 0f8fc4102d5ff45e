"""Code only from ``plugins/``: which ``module:function`` a ``python`` step may call
(docs/security.md, "Code a job may run").

A callable must live in a module of the home's ``plugins/`` folder, or match a pattern an
admin listed in ``[security].allowed_callables`` of ``cadenza.toml`` (``"mypkg.tasks:*"``).
The rule is checked twice:

* when the configuration is validated (:func:`callable_problem`, without importing
  anything): a module found outside ``plugins/`` (``os``, ``subprocess``, ``builtins``, an
  installed package) is refused, and so is a plugin named like a standard library module
  (``plugins/os.py``), which the interpreter would never import from ``plugins/``;
* when the step runs (:func:`check_loaded`, after the import): the module actually
  imported must have its file inside ``plugins/`` (a name already imported from the
  standard library, cached in ``sys.modules``, does not count as a plugin), the attribute
  path may not go through another module (``tasks:os.system``), and the function found
  may not be one defined outside ``plugins/`` (``from os import system`` in a plugin).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import types
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

RULE = "code runs only from the home's plugins/ folder or [security].allowed_callables"
"""The rule's words in every refusal."""
PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:(\*|[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\.\*)?)")
"""An ``allowed_callables`` entry: a literal module, then ``:*`` or a function name."""


def allowed(spec: str, patterns: Iterable[str]) -> bool:
    """True when ``spec`` matches one of the admin's ``allowed_callables`` patterns."""
    return any(fnmatchcase(spec, pattern) for pattern in patterns)


def _standard(top: str) -> bool:
    return top in sys.stdlib_module_names or top in sys.builtin_module_names


def callable_problem(spec: str, home: Path, patterns: Iterable[str] = ()) -> str | None:
    """Why the ``python`` step's ``callable`` ``spec`` is refused, or None (see the module
    docstring). A module found nowhere is not refused here: it may be written later, and
    the step fails when it runs."""
    if allowed(spec, patterns):
        return None
    module = spec.split(":", 1)[0]
    top = module.split(".", 1)[0]
    plugins = home / "plugins"
    if (plugins / top).is_dir() or (plugins / f"{top}.py").is_file():
        if _standard(top):
            return (f"plugins/{top} has the name of the standard library module {top!r}, "
                    f"which is imported instead of it; rename the plugin ({RULE})")
        return None
    if _standard(top):
        return f"module {module!r} is not in plugins/: {RULE}"
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return f"module {module!r} is installed, not in plugins/: {RULE}"
    return None


@functools.lru_cache(maxsize=64)
def plugins_of(home: Path) -> Path:
    """The home's ``plugins/`` folder (cached: the check runs for every ``python`` step)."""
    return home / "plugins"


def _inside(file: str | None, plugins: Path) -> bool:
    if not file:
        return False
    return _real_inside(file, str(plugins))


@functools.lru_cache(maxsize=4096)
def _real_inside(file: str, plugins: str) -> bool:
    """Whether ``file``, symbolic links resolved, lies in the folder ``plugins``. Cached: a
    module imported from a file stays that file's code, and resolving the two paths cost
    more than the rest of a one-step run (the check runs for every ``python`` step)."""
    real = os.path.normcase(os.path.realpath(file))
    base = os.path.normcase(os.path.realpath(plugins))
    return real.startswith(base.rstrip(os.sep) + os.sep)


def module_problem(module: types.ModuleType, plugins: Path) -> str | None:
    """Why ``module`` (imported) is not a plugin, or None."""
    if _inside(getattr(module, "__file__", None), plugins):
        return None
    return f"module {module.__name__!r} was not imported from plugins/"


def check_loaded(spec: str, module: types.ModuleType, path: list[object], home: Path,
                 patterns: Iterable[str] = ()) -> str | None:
    """Why the callable ``spec``, imported as ``module`` then each object of ``path`` (the
    attributes followed, the function last), is refused at run time, or None."""
    if allowed(spec, patterns):
        return None
    plugins = plugins_of(home)
    problem = module_problem(module, plugins)
    if problem is not None:
        return f"{problem}: {RULE}"
    for obj in path:
        if isinstance(obj, types.ModuleType) and module_problem(obj, plugins) is not None:
            return f"{spec!r} reaches the module {obj.__name__!r} through a plugin: {RULE}"
    last = path[-1] if path else None
    if isinstance(last, types.FunctionType | types.BuiltinFunctionType):
        name = getattr(last, "__module__", None) or ""
        owner = module if name == module.__name__ else sys.modules.get(name)
        if owner is None or module_problem(owner, plugins) is not None:
            return (f"{spec!r} is a function of {getattr(last, '__module__', None)!r}, not "
                    f"of a plugin: {RULE}")
    return None
