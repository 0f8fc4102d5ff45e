"""Ending the processes of a step: its child process's tree, and what escaped the tree.

A python step (``isolation = "process"``) may start processes of its own: in its process
group, in a new session (``start_new_session=True``), double-forked daemons whose parent is
gone. None of them may outlive the step attempt. At the end of every attempt, success
included, :func:`end_leftovers` finds them by three marks, any one of which is enough:

* **descent**: the descendants of the step's child process (psutil). On Linux the child is
  a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, :func:`become_subreaper`): a
  daemon that double-forks is re-parented to the child, not to init, and stays a
  descendant;
* **session** (POSIX): the child leads its own session (``os.setsid``); a process still in
  that session is the step's, whatever its process group;
* **environment marker**: the child sets ``CADENZA_STEP_MARKER`` (:data:`MARKER_ENV`) to a
  value unique to the attempt, which every process it starts inherits; a process started
  after the child whose environment holds that value is the step's (this is what finds a
  new-session daemon on macOS and Windows, where there is no subreaper). A process that
  clears its environment *and* leaves the session *and* escapes the descent (double fork)
  is not found on macOS; on Linux the subreaper still holds it.

On Windows the child is also put in a Job object (:class:`StepJob`) by the parent; ending the
job ends every process of it, however started (unless it was created with breakaway).

Each process found is killed (SIGKILL / TerminateProcess) and described (pid, command line)
so that the run log can say what was killed.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import psutil  # type: ignore[import-untyped]

from cadenza.clock import SystemClock
from cadenza.domain.texts import cut_before_redaction

MARKER_ENV = "CADENZA_STEP_MARKER"
"""The environment variable that marks the processes of one step attempt."""
GONE_SECONDS = 5.0
"""How long to wait for killed processes to be gone (or zombies)."""
_REAL = SystemClock()
"""Waits for the operating system (a killed process to be gone) are in real time."""


def become_subreaper() -> bool:
    """Linux: make this process the reaper of its orphaned descendants (a double-forked
    daemon stays its descendant). Returns whether it worked; elsewhere False."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        return False


def describe(proc: psutil.Process) -> str:
    """``pid 123 (sleep 600)``: a process as the run log names it."""
    try:
        command = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        command = "?"
    # The line is redacted by the store after this cut: never cut inside an argument.
    command = cut_before_redaction(command, 117, "...")
    return f"pid {proc.pid} ({command})"


def find_leftovers(root: int | None, marker: str, since: float,
                   session: int | None = None) -> list[psutil.Process]:
    """The processes of a step whose child is ``root`` (see the module docstring): its
    descendants (None: the child is gone and its pid may be reused: not looked at), the
    members of ``session`` (the session the child leads; None: not checked) and the
    processes created at or after ``since`` (a ``create_time``) whose environment holds
    ``marker``. ``root`` itself and this process are never included."""
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    if root is not None:
        try:
            for proc in psutil.Process(root).children(recursive=True):
                found[proc.pid] = proc
        except psutil.Error:
            pass
    getsid = getattr(os, "getsid", None)
    if not marker and (session is None or getsid is None):
        return [p for p in found.values() if p.pid not in (root, me)]
    for proc in psutil.process_iter(["create_time"]):
        pid = proc.pid
        if pid in found or pid in (root, me, 0):
            continue
        try:
            if session is not None and getsid is not None and getsid(pid) == session:
                found[pid] = proc
                continue
        except OSError:
            pass
        created = proc.info.get("create_time")
        if not marker or created is None or created < since - 1.0:
            continue  # older than the step: not its (create_time has a coarse resolution)
        try:
            if proc.environ().get(MARKER_ENV) == marker:
                found[pid] = proc
        except psutil.Error:  # another user's process, or gone
            pass
    return list(found.values())


def kill_all(procs: list[psutil.Process], *, wait: bool = True) -> list[str]:
    """SIGKILL each process (descendants first is not needed: SIGKILL cannot be caught);
    ``wait``: wait briefly until they are gone or zombies; return the descriptions of those
    that were alive."""
    killed: list[str] = []
    for proc in procs:
        text = describe(proc)
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            proc.kill()
            killed.append(text)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    if wait:
        wait_gone(procs, GONE_SECONDS)
    return killed


def end_leftovers(root: int | None, marker: str, since: float,
                  session: int | None = None) -> list[str]:
    """Find (:func:`find_leftovers`) and kill (:func:`kill_all`) the processes of a step;
    a second pass catches what was being started during the first. Returns what was
    killed."""
    killed = kill_all(find_leftovers(root, marker, since, session))
    if killed:
        killed += kill_all(find_leftovers(root, marker, since, session))
    return killed


def kill_tree(pid: int | None) -> None:
    """Kill process ``pid`` and all its descendants: the descendants first (found while the
    tree is intact), then (POSIX) the process group it leads, then the process itself.

    Waits (briefly) until the descendants are gone or zombies; ``pid`` itself, a child of
    this process, is left for its owner to reap (``Process.join``)."""
    if pid is None:
        return
    try:
        root = psutil.Process(pid)
        family = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    group = own_group(pid)
    for proc in reversed(family):
        _kill(proc)
    if group is not None:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    _kill(root)
    wait_gone(family, GONE_SECONDS)


def wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    """Wait until every process has exited (a zombie has: only its reaping is left)."""
    end = _REAL.monotonic() + timeout
    alive = list(procs)
    while alive and _REAL.monotonic() < end:
        still = []
        for proc in alive:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    still.append(proc)
            except psutil.NoSuchProcess:
                pass
        alive = still
        if alive:
            _REAL.sleep(0.01)


def own_group(pid: int) -> int | None:
    """The process group ``pid`` leads (POSIX), never this process's own group."""
    if not hasattr(os, "killpg"):
        return None
    try:
        group = os.getpgid(pid)
        return group if group == pid and group != os.getpgid(0) else None
    except OSError:
        return None


def _kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


class StepJob:
    """Windows: a Job object holding a step's child process and everything it starts
    (processes inherit their creator's job). :meth:`terminate` ends them all. Elsewhere
    every method does nothing. Not tried on Windows yet (docs/windows.md)."""

    def __init__(self) -> None:
        self._job: Any = None
        if sys.platform == "win32":
            import ctypes
            from ctypes import wintypes

            kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
            # Handles are pointer-sized: without these declarations ctypes would cut them
            # to a C int on 64-bit Windows.
            kernel32.CreateJobObjectW.restype = wintypes.HANDLE
            kernel32.CreateJobObjectW.argtypes = [ctypes.c_void_p, wintypes.LPCWSTR]
            kernel32.OpenProcess.restype = wintypes.HANDLE
            kernel32.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
            kernel32.AssignProcessToJobObject.restype = wintypes.BOOL
            kernel32.AssignProcessToJobObject.argtypes = [wintypes.HANDLE, wintypes.HANDLE]
            kernel32.TerminateJobObject.restype = wintypes.BOOL
            kernel32.TerminateJobObject.argtypes = [wintypes.HANDLE, wintypes.UINT]
            kernel32.CloseHandle.restype = wintypes.BOOL
            kernel32.CloseHandle.argtypes = [wintypes.HANDLE]
            self._kernel32 = kernel32
            self._job = kernel32.CreateJobObjectW(None, None) or None

    def add(self, pid: int) -> bool:
        """Put process ``pid`` in the job; returns whether it worked."""
        if self._job is None or sys.platform != "win32":
            return False
        set_quota_and_terminate = 0x0100 | 0x0001  # PROCESS_SET_QUOTA | PROCESS_TERMINATE
        handle = self._kernel32.OpenProcess(set_quota_and_terminate, False, pid)
        if not handle:
            return False
        try:
            return bool(self._kernel32.AssignProcessToJobObject(self._job, handle))
        finally:
            self._kernel32.CloseHandle(handle)

    def terminate(self) -> None:
        """End every process of the job, then close it."""
        if self._job is None or sys.platform != "win32":
            return
        try:
            self._kernel32.TerminateJobObject(self._job, 1)
        finally:
            self._kernel32.CloseHandle(self._job)
            self._job = None
