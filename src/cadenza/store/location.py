"""Refuse a SQLite data directory on a network file system (docs/store.md "SQLite").

SQLite's WAL mode keeps its index in shared memory next to the database file, and its locks
rely on the local kernel; on NFS, SMB, 9p (WSL's Windows drives) or sshfs both silently fail,
and two hosts can corrupt the file. Detection is a pure function over a path and a mount
table, so it is tested without mounting anything:

* Linux: the mount whose mount point is the longest prefix of the resolved path
  (``/proc/self/mounts``) and its file system type;
* macOS / BSD: the same over the output of ``mount``;
* Windows: UNC paths (``\\\\server\\share``, ``\\\\?\\UNC\\...``) and mapped drives for
  which ``GetDriveTypeW`` answers ``DRIVE_REMOTE``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from cadenza.domain.errors import UnsafeStoreLocation

NETWORK_FS_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "9p",
        "afs",
        "ncpfs",
        "ncp",
        "coda",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "ocfs2",
        "gfs2",
        "davfs",
        "webdav",
        "sshfs",
        "afpfs",
        "vboxsf",
        "prl_fs",
        "vmhgfs",
        "drvfs",
    }
)
"""File system types SQLite must not live on (network or shared-from-another-host)."""

_FUSE_NETWORK = frozenset(
    {"sshfs", "glusterfs", "davfs2", "davfs", "rclone", "s3fs", "gcsfuse", "cephfs", "vmhgfs-fuse"}
)
DRIVE_REMOTE = 4
"""``GetDriveTypeW`` answer for a network drive."""


@dataclass(frozen=True, slots=True)
class MountEntry:
    """One mounted file system."""

    device: str
    mount_point: str
    fstype: str


def is_network_fstype(fstype: str) -> bool:
    """Whether a file system type (as in ``/proc/self/mounts``) is a network file system."""
    kind = fstype.lower()
    if kind in NETWORK_FS_TYPES:
        return True
    if kind.startswith("fuse."):
        return kind.removeprefix("fuse.") in _FUSE_NETWORK
    return kind.startswith(("nfs", "smb", "cifs"))


def _unescape_mount_field(field: str) -> str:
    # /proc/self/mounts escapes space, tab, newline and backslash as octal (\040 ...).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_proc_mounts(text: str) -> list[MountEntry]:
    """Entries of a Linux ``/proc/self/mounts`` (or ``/etc/mtab``) text."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            device, mount_point, fstype = (_unescape_mount_field(f) for f in fields[:3])
            entries.append(MountEntry(device, mount_point, fstype))
    return entries


_BSD_MOUNT_LINE = re.compile(r"^(?P<device>.+?) on (?P<point>.+) \((?P<fstype>[^,)]+)")


def parse_bsd_mount_output(text: str) -> list[MountEntry]:
    """Entries of macOS / BSD ``mount`` output (``dev on /point (type, options)``)."""
    entries = []
    for line in text.splitlines():
        match = _BSD_MOUNT_LINE.match(line.strip())
        if match:
            entries.append(MountEntry(match["device"], match["point"], match["fstype"].strip()))
    return entries


def mount_of(path: PurePosixPath, mounts: Iterable[MountEntry]) -> MountEntry | None:
    """The mount holding absolute ``path``: the last-mounted one with the longest mount point."""
    best: MountEntry | None = None
    for entry in mounts:
        point = PurePosixPath(entry.mount_point)
        if path == point or point in path.parents:
            if best is None or len(point.parts) >= len(PurePosixPath(best.mount_point).parts):
                best = entry
    return best


def posix_network_mount(path: PurePosixPath, mounts: Sequence[MountEntry]) -> MountEntry | None:
    """The network mount that holds ``path``, or ``None`` when it is local."""
    entry = mount_of(path, mounts)
    if entry is not None and is_network_fstype(entry.fstype):
        return entry
    return None


def windows_network_reason(
    path: PureWindowsPath, drive_type: Callable[[str], int] | None = None
) -> str | None:
    """Why a Windows path is on the network (UNC share or remote drive), or ``None``."""
    text = str(path)
    lowered = text.lower()
    if lowered.startswith(("\\\\?\\unc\\", "//?/unc/")):
        return "a UNC network path"
    if lowered.startswith(("\\\\?\\", "\\\\.\\", "//?/", "//./")):
        # Extended-length or device path: judge the drive after the prefix.
        return windows_network_reason(PureWindowsPath(text[4:]), drive_type)
    if text.startswith(("\\\\", "//")):
        return "a UNC network path"
    drive = path.drive
    if drive_type is not None and len(drive) == 2 and drive[1] == ":":
        if drive_type(drive + "\\") == DRIVE_REMOTE:
            return f"the network drive {drive}"
    return None


def _windows_drive_type(root: str) -> int:
    if sys.platform == "win32":
        import ctypes

        return int(ctypes.windll.kernel32.GetDriveTypeW(root))
    return 0


def _read_mount_table() -> list[MountEntry]:
    for source in ("/proc/self/mounts", "/etc/mtab"):
        try:
            return parse_proc_mounts(Path(source).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    try:
        out = subprocess.run(
            ["mount"], capture_output=True, text=True, check=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_bsd_mount_output(out)


def _resolve_existing_part(path: Path) -> Path:
    """``path`` with symlinks of its existing part resolved (the rest need not exist yet)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.resolve() / path.relative_to(candidate)
    return path


def ensure_local_directory(
    directory: Path,
    *,
    mounts: Sequence[MountEntry] | None = None,
    windows: bool | None = None,
    drive_type: Callable[[str], int] | None = None,
) -> None:
    """Raise :class:`UnsafeStoreLocation` if ``directory`` is on a network file system.

    ``directory`` need not exist yet; symlinks in its existing part are resolved first, so a
    link from a local directory to a share is caught. ``mounts``, ``windows`` and
    ``drive_type`` default to this machine's.
    """
    absolute = Path(os.path.abspath(directory))
    target = _resolve_existing_part(absolute)
    is_windows = (os.name == "nt") if windows is None else windows
    if is_windows:
        probe = drive_type or _windows_drive_type
        # The path as given (a UNC path) and as resolved (a link or junction to a share).
        reason = windows_network_reason(
            PureWindowsPath(str(directory)), probe
        ) or windows_network_reason(PureWindowsPath(str(target)), probe)
        if reason:
            raise UnsafeStoreLocation(
                f"refusing to keep the SQLite store in {directory}: it is on {reason}. "
                "SQLite's WAL needs a local disk; use a local data directory or PostgreSQL."
            )
        return
    table = _read_mount_table() if mounts is None else mounts
    entry = posix_network_mount(PurePosixPath(target.as_posix()), table)
    if entry is not None:
        raise UnsafeStoreLocation(
            f"refusing to keep the SQLite store in {directory}: it is on a network file system "
            f"({entry.fstype} {entry.device} mounted on {entry.mount_point}). "
            "SQLite's WAL needs a local disk; use a local data directory or PostgreSQL."
        )
