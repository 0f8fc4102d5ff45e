"""Error classification and the round trip of exceptions through a child process."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pytest

from cadenza import Deferred, Fatal, ResourceFault, Retryable
from cadenza.executor.errors import (
    ErrorInfo,
    RemoteError,
    StepTimeout,
    classify,
    describe,
    is_expected,
    rebuild,
)


class PluginError(Exception):
    """A class that only exists in a plugin."""


@pytest.mark.parametrize(("exc", "expected"), [
    (Fatal("x"), "fatal"),
    (ValueError("x"), "fatal"),
    (TypeError("x"), "fatal"),
    (KeyError("x"), "fatal"),
    (PermissionError("x"), "fatal"),
    (FileNotFoundError("x"), "fatal"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), "fatal"),  # a ValueError
    (SystemExit(2), "fatal"),
    (Retryable("x"), "retryable"),
    (StepTimeout("x"), "retryable"),
    (ConnectionResetError("x"), "retryable"),
    (TimeoutError("x"), "retryable"),
    (RuntimeError("x"), "retryable"),
    (PluginError("x"), "retryable"),
    (Deferred(None, "x"), "deferred"),
    (ResourceFault("x"), "resource"),
])
def test_classify(exc: BaseException, expected: str) -> None:
    assert classify(exc) == expected


def test_describe_shows_class_and_message() -> None:
    assert describe(ValueError("bad row 3")) == "ValueError: bad row 3"
    assert describe(KeyError("period")) == "KeyError: period"
    assert describe(RuntimeError()) == "RuntimeError"
    assert describe(RemoteError("PluginError", "nope", "retryable")) == "PluginError: nope"


@pytest.mark.parametrize("exc", [
    Fatal("stop"), Retryable("later"), ResourceFault("proxy"), ValueError("v"),
    KeyError("k"), FileNotFoundError("f"), StepTimeout("slow"),
])
def test_classes_survive_the_trip(exc: BaseException) -> None:
    info = pickle.loads(pickle.dumps(ErrorInfo.of(exc)))
    again = rebuild(info)
    assert type(again) is type(exc)
    assert describe(again) == describe(exc)
    assert classify(again) == classify(exc)


def test_deferred_keeps_its_time_and_unknown_classes_keep_their_name() -> None:
    until = datetime(2027, 1, 1, tzinfo=UTC)
    again = rebuild(ErrorInfo.of(Deferred(until, "429")))
    assert isinstance(again, Deferred) and again.until == until and str(again) == "429"
    remote = rebuild(ErrorInfo.of(PluginError("custom")))
    assert isinstance(remote, RemoteError)
    assert describe(remote) == "PluginError: custom" and classify(remote) == "retryable"
    assert "PluginError: x" in ErrorInfo.of(PluginError("x")).traceback


def test_only_step_errors_skip_the_traceback() -> None:
    assert is_expected(Fatal("x")) and is_expected(StepTimeout("x"))
    assert not is_expected(ValueError("x"))
    assert is_expected(rebuild(ErrorInfo.of(Retryable("x"))))
    assert not is_expected(RemoteError("PluginError", "x", "retryable"))
