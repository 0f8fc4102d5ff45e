"""Network file system detection for the SQLite data directory (RELIABILITY #45)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from cadenza.domain.errors import UnsafeStoreLocation
from cadenza.store.location import (
    DRIVE_REMOTE,
    MountEntry,
    ensure_local_directory,
    is_network_fstype,
    mount_of,
    parse_bsd_mount_output,
    parse_proc_mounts,
    posix_network_mount,
    windows_network_reason,
)

PROC_MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw,relatime 0 0
tmpfs /dev/shm tmpfs rw 0 0
nas:/export/home /home/team nfs4 rw,vers=4.2 0 0
//files/share /mnt/share cifs rw,vers=3.0 0 0
/dev/vdb /home/team/local ext4 rw 0 0
user@host:/srv /mnt/remote\\040dir fuse.sshfs rw 0 0
drvfs /mnt/c 9p rw 0 0
/dev/vdc /mnt/sharex xfs rw 0 0
"""
MOUNTS = parse_proc_mounts(PROC_MOUNTS)


@pytest.mark.parametrize(
    "fstype", ["nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "NFS4", "ceph"]
)
@pytest.mark.reliability_case(45)
def test_network_file_system_types(fstype: str) -> None:
    assert is_network_fstype(fstype)


@pytest.mark.parametrize(
    "fstype", ["ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "apfs", "fuse.portal"]
)
def test_local_file_system_types(fstype: str) -> None:
    assert not is_network_fstype(fstype)


def test_proc_mounts_are_parsed_with_escapes() -> None:
    assert MountEntry("user@host:/srv", "/mnt/remote dir", "fuse.sshfs") in MOUNTS
    assert len(MOUNTS) == 9


@pytest.mark.parametrize(
    ("path", "network"),
    [
        ("/home/team/cadenza/data", "nfs4"),
        ("/home/team", "nfs4"),
        ("/home/team/local/data", None),  # a local disk mounted inside the share
        ("/home/teammate/data", None),  # a prefix of the name is not a parent
        ("/mnt/share/cadenza", "cifs"),
        ("/mnt/sharex/cadenza", None),
        ("/mnt/remote dir/data", "fuse.sshfs"),
        ("/mnt/c/Users/me/cadenza", "9p"),
        ("/var/lib/cadenza", None),
    ],
)
def test_the_longest_mount_point_decides(path: str, network: str | None) -> None:
    found = posix_network_mount(PurePosixPath(path), MOUNTS)
    assert (found.fstype if found else None) == network


def test_a_later_mount_over_the_same_point_wins() -> None:
    stacked = [*MOUNTS, MountEntry("/dev/vdd", "/home/team", "ext4")]
    assert mount_of(PurePosixPath("/home/team/x"), stacked) == stacked[-1]
    assert posix_network_mount(PurePosixPath("/home/team/x"), stacked) is None


def test_bsd_mount_output() -> None:
    out = (
        "/dev/disk3s1s1 on / (apfs, sealed, local, read-only, journaled)\n"
        "//me@files/share on /Volumes/share (smbfs, nodev, nosuid, mounted by me)\n"
        "nas:/export on /Volumes/nas dir (nfs, asynchronous)\n"
    )
    mounts = parse_bsd_mount_output(out)
    assert [m.fstype for m in mounts] == ["apfs", "smbfs", "nfs"]
    assert posix_network_mount(PurePosixPath("/Volumes/nas dir/data"), mounts) is not None
    assert posix_network_mount(PurePosixPath("/Users/me/cadenza"), mounts) is None


@pytest.mark.parametrize(
    ("path", "remote"),
    [
        (r"\\server\share\cadenza\data", True),
        ("//server/share/cadenza", True),
        (r"\\?\UNC\server\share\data", True),
        (r"\\?\C:\cadenza\data", False),
        (r"C:\cadenza\data", False),
        (r"Z:\cadenza\data", True),  # a mapped network drive
        (r"\\?\Z:\cadenza", True),
    ],
)
def test_windows_paths(path: str, remote: bool) -> None:
    def drive_type(root: str) -> int:
        return DRIVE_REMOTE if root.upper() == "Z:\\" else 3  # 3 = DRIVE_FIXED

    reason = windows_network_reason(PureWindowsPath(path), drive_type)
    assert (reason is not None) == remote


@pytest.mark.reliability_case(45)
def test_ensure_local_directory_on_a_share(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    mounts = [MountEntry("/dev/vda", "/", "ext4"), MountEntry("nas:/x", share.as_posix(), "nfs")]
    with pytest.raises(UnsafeStoreLocation, match="network file system"):
        ensure_local_directory(share / "not" / "created" / "yet", mounts=mounts, windows=False)
    ensure_local_directory(tmp_path / "local", mounts=mounts, windows=False)


def test_a_symlink_into_a_share_is_followed(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    link = tmp_path / "data"
    link.symlink_to(share, target_is_directory=True)
    mounts = [
        MountEntry("/dev/vda", "/", "ext4"),
        MountEntry("nas:/x", share.resolve().as_posix(), "nfs"),
    ]
    with pytest.raises(UnsafeStoreLocation):
        ensure_local_directory(link, mounts=mounts, windows=False)


@pytest.mark.reliability_case(45)
def test_ensure_local_directory_on_windows_shares() -> None:
    with pytest.raises(UnsafeStoreLocation, match="UNC"):
        ensure_local_directory(Path("//server/share/data"), windows=True)


def test_this_machines_temp_dir_is_local(tmp_path: Path) -> None:
    ensure_local_directory(tmp_path)
