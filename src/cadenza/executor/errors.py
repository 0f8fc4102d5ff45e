"""What a step's exception means for its run (docs/retries.md), in one place.

Every exception that leaves a step is classified once, here:

=============  ===========================================================================
class          raised as
=============  ===========================================================================
``fatal``      :class:`cadenza.Fatal`, ``ValueError``, ``TypeError``, ``KeyError``,
               ``PermissionError``, ``FileNotFoundError`` (and their subclasses), and
               ``SystemExit`` (plugin code calling ``sys.exit``)
``deferred``   :class:`cadenza.Deferred`
``resource``   :class:`cadenza.ResourceFault`
``retryable``  :class:`cadenza.Retryable`, a step timeout, and every other exception
=============  ===========================================================================

The class is recorded on the step run (``error_class``) and decides what becomes of the run
(:mod:`cadenza.domain.retry`: fail it, retry it, defer it, or leave it for review).

Exceptions raised in a child process (``isolation = "process"``) travel to the parent as an
:class:`ErrorInfo` and are re-raised there by :func:`rebuild`: Cadenza's own classes and the
built-in exception classes keep their class, others become a :class:`RemoteError` that keeps
the original class name, message and classification.
"""

from __future__ import annotations

import builtins
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from cadenza.domain.errors import Deferred, Fatal, ResourceFault, Retryable, StepError

ErrorClass = Literal["fatal", "retryable", "deferred", "resource"]

FATAL_BUILTINS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    PermissionError,
    FileNotFoundError,
)
_OURS: dict[str, type[StepError]] = {
    cls.__name__: cls for cls in (Retryable, Deferred, Fatal, ResourceFault, StepError)
}


class StepTimeout(Retryable):
    """The step ran past its timeout and was stopped."""


class RemoteError(Exception):
    """An exception of a class that could not be rebuilt in this process (it lives in the
    child's plugin code); keeps the child's class name, message and classification."""

    def __init__(self, class_name: str, message: str, error_class: ErrorClass) -> None:
        super().__init__(message)
        self.class_name = class_name
        self.error_class = error_class


def classify(exc: BaseException) -> ErrorClass:
    """The error class of ``exc`` (see the module table)."""
    if isinstance(exc, RemoteError):
        return exc.error_class
    if isinstance(exc, Fatal):
        return "fatal"
    if isinstance(exc, Deferred):
        return "deferred"
    if isinstance(exc, ResourceFault):
        return "resource"
    if isinstance(exc, StepError):
        return "fatal" if type(exc) is StepError else "retryable"
    if isinstance(exc, FATAL_BUILTINS) or not isinstance(exc, Exception):
        return "fatal"  # SystemExit and the like: the code asked to stop, not to be retried
    return "retryable"


def class_name(exc: BaseException) -> str:
    """The name shown for ``exc``: its class's, or the child's for a :class:`RemoteError`."""
    return exc.class_name if isinstance(exc, RemoteError) else type(exc).__name__


def describe(exc: BaseException) -> str:
    """``"ClassName: message"`` (a ``KeyError``'s key is shown as given)."""
    message = str(exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        message = str(exc.args[0])
    return f"{class_name(exc)}: {message}" if message else class_name(exc)


def is_expected(exc: BaseException) -> bool:
    """True for Cadenza's step errors, whose message says everything; a traceback is logged
    for the others (bugs in plugin code, driver errors nobody translated)."""
    if isinstance(exc, RemoteError):
        return exc.class_name in _OURS or exc.class_name == StepTimeout.__name__
    return isinstance(exc, StepError)


@dataclass(frozen=True)
class ErrorInfo:
    """An exception as plain data, to cross a process boundary (picklable, no plugin class)."""

    class_name: str
    module: str
    message: str
    error_class: ErrorClass
    traceback: str
    until: datetime | None = None
    resource_id: str | None = None
    """The member a :class:`cadenza.ResourceFault` named."""

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        """Capture ``exc`` (with its formatted traceback)."""
        until = exc.until if isinstance(exc, Deferred) else None
        message = str(exc.args[0]) if isinstance(exc, KeyError) and len(exc.args) == 1 \
            else str(exc)
        return cls(
            class_name=type(exc).__name__,
            module=type(exc).__module__,
            message=message,
            error_class=classify(exc),
            traceback="".join(traceback.format_exception(exc)),
            until=until,
            resource_id=getattr(exc, "resource_id", None)
            if isinstance(exc, ResourceFault) else None,
        )


def rebuild(info: ErrorInfo) -> BaseException:
    """An exception equivalent to the one described by ``info``, raisable in this process."""
    if info.module in ("cadenza.domain.errors", "cadenza") and info.class_name in _OURS:
        ours = _OURS[info.class_name]
        if ours is Deferred:
            return Deferred(info.until, info.message or None)
        if ours is ResourceFault:
            return ResourceFault(info.message or None, resource_id=info.resource_id)
        return ours(info.message or None)
    if info.module == __name__ and info.class_name == StepTimeout.__name__:
        return StepTimeout(info.message or None)
    if info.module == "builtins":
        candidate = getattr(builtins, info.class_name, None)
        if isinstance(candidate, type) and issubclass(candidate, Exception):
            try:
                return candidate(info.message)
            except Exception:  # a builtin whose constructor wants other arguments
                pass
    return RemoteError(info.class_name, info.message, info.error_class)


def traceback_text(exc: BaseException) -> str:
    """The formatted traceback of ``exc`` (the child's, for an exception from a child)."""
    remote = getattr(exc, "__cadenza_traceback__", None)
    if isinstance(remote, str):
        return remote
    return "".join(traceback.format_exception(exc))
