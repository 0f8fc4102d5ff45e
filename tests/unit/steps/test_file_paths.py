"""File paths of file steps: text checks, resolution inside the roots, safe opening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.lib import files


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "files"
    (r / "sales").mkdir(parents=True)
    for name in ("2026-01.csv", "2026-02.csv", "notes.txt"):
        (r / "sales" / name).write_text("a\n1\n")
    (r / "top.csv").write_text("a\n1\n")
    (tmp_path / "secret.csv").write_text("password\nhunter2\n")
    return r.resolve()


def shown(found: list[files.FoundFile]) -> list[str]:
    return [f.display for f in found]


@pytest.mark.parametrize(("path", "why"), [
    ("../secret.csv", "'..' segments"),
    ("sales/../../secret.csv", "'..' segments"),
    ("..\\secret.csv", "'..' segments"),
    ("sales\\..\\..\\secret.csv", "'..' segments"),
    ("%2e%2e/secret.csv", "percent-encoded.*'../secret.csv'"),
    ("%2E%2E%2Fsecret.csv", "percent-encoded"),
    ("%252e%252e/secret.csv", "percent-encoded.*'../secret.csv'"),
    ("sales/%00.csv", "percent-encoded"),
    ("sales/x.csv\x00.txt", "NUL byte"),
    ("sales/\n.csv", "control characters"),
    ("\uff0e\uff0e/secret.csv", "after Unicode normalisation"),  # fullwidth dots
    ("\u2025/secret.csv", "after Unicode normalisation"),  # two-dot leader
    ("sales\uff0f..\uff0fsecret.csv", "after Unicode normalisation"),
    ("/etc/passwd", "outside every root"),
    ("//server/share/x.csv", "UNC"),
    ("C:x.csv", "drive-relative"),
    ("C:/Windows/win.ini", "outside every root"),
    ("", "names no file"), ("./", "names no file"),
])
@pytest.mark.reliability_case(20)
def test_refused_paths(root: Path, path: str, why: str) -> None:
    with pytest.raises(Fatal, match=why) as caught:
        files.find(path, [root])
    assert "refused" in str(caught.value) and "[files].roots" in str(caught.value)


def test_plain_path_and_backslashes(root: Path) -> None:
    assert shown(files.find("sales/2026-01.csv", [root])) == ["sales/2026-01.csv"]
    assert shown(files.find("sales\\2026-01.csv", [root])) == ["sales/2026-01.csv"]
    assert shown(files.find("./sales//2026-01.csv", [root])) == ["sales/2026-01.csv"]


def test_missing_file_is_an_empty_match(root: Path) -> None:
    assert files.find("sales/2099-01.csv", [root]) == []
    assert files.find("nothing/*.csv", [root]) == []


def test_glob_sorted_files_only(root: Path) -> None:
    (root / "sales" / "dir.csv").mkdir()
    assert shown(files.find("sales/*.csv", [root])) == ["sales/2026-01.csv", "sales/2026-02.csv"]
    assert shown(files.find("**/*.csv", [root])) == [
        "sales/2026-01.csv", "sales/2026-02.csv", "top.csv"]


def test_absolute_path_inside_a_root(root: Path) -> None:
    found = files.find(str(root / "sales" / "2026-01.csv"), [root])
    assert shown(found) == ["sales/2026-01.csv"] and found[0].root == root


def test_first_root_with_a_match_wins(root: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "top.csv").write_text("x\n")
    (other / "only.csv").write_text("x\n")
    assert files.find("top.csv", [other, root])[0].root == other
    assert files.find("sales/2026-01.csv", [other, root])[0].root == root


@pytest.mark.reliability_case(20)
def test_symlink_out_of_the_root_refused(root: Path, tmp_path: Path) -> None:
    (root / "sales" / "leak.csv").symlink_to(tmp_path / "secret.csv")
    with pytest.raises(Fatal, match="resolves outside its root"):
        files.find("sales/leak.csv", [root])
    with pytest.raises(Fatal, match="resolves outside its root"):
        files.find("sales/*.csv", [root])  # one bad match refuses the whole glob


def test_symlinked_directory_out_of_the_root_refused(root: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.csv").write_text("a\n")
    (root / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(Fatal, match="resolves outside its root"):
        files.find("linked/x.csv", [root])


def test_symlink_inside_the_root_allowed(root: Path) -> None:
    (root / "latest.csv").symlink_to(root / "sales" / "2026-02.csv")
    found = files.find("latest.csv", [root])
    assert found[0].path == root / "sales" / "2026-02.csv"


def test_dangling_symlink_and_special_files_refused(root: Path) -> None:
    (root / "gone.csv").symlink_to(root / "nowhere.csv")
    with pytest.raises(Fatal, match="link to a missing file"):
        files.find("gone.csv", [root])
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe.csv")
        with pytest.raises(Fatal, match="not a regular file"):
            files.find("pipe.csv", [root])


def test_open_checked_reads_the_checked_file(root: Path) -> None:
    (found,) = files.find("top.csv", [root])
    with files.open_checked(found) as fh:
        assert fh.read() == b"a\n1\n"


@pytest.mark.reliability_case(20)
def test_open_refuses_a_file_swapped_for_a_symlink(root: Path, tmp_path: Path) -> None:
    (found,) = files.find("top.csv", [root])
    (root / "top.csv").unlink()
    (root / "top.csv").symlink_to(tmp_path / "secret.csv")
    with pytest.raises(Fatal, match=r"changed while it was opened|resolves outside"):
        files.open_checked(files.FoundFile(root / "top.csv", root, "top.csv"))
    with pytest.raises(Fatal, match=r"changed while it was opened|missing"):
        files.open_checked(found)


def test_a_file_rewritten_in_place_is_read_as_it_is_now(root: Path) -> None:
    (found,) = files.find("top.csv", [root])
    (root / "top.csv").unlink()
    (root / "top.csv").write_text("other\n")
    with files.open_checked(found) as fh:
        assert fh.read() == b"other\n"


def test_unreadable_file_is_fatal(root: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root reads every file")
    (root / "top.csv").chmod(0)
    (found,) = files.find("top.csv", [root])
    with pytest.raises(Fatal, match="permission denied"):
        files.open_checked(found)


def test_checksum_and_choice(root: Path) -> None:
    a = files.FoundFile(root / "a", root, "a.csv")
    b = files.FoundFile(root / "b", root, "b.csv")
    c = files.FoundFile(root / "c", root, "c.csv")
    sums = [(a, "1"), (b, "2"), (c, "1")]
    todo, skipped = files.choose(sums, {"2"}, skip=True, overwrite=False)
    assert [f.display for f, _ in todo] == ["a.csv"]
    assert [(s["path"], s["reason"]) for s in skipped] == [
        ("c.csv", "same content as a.csv"), ("b.csv", "already loaded")]
    todo, _ = files.choose(sums, {"2"}, skip=True, overwrite=True)
    assert [f.display for f, _ in todo] == ["a.csv", "b.csv"]  # all, or none
    todo, skipped = files.choose(sums, {"1", "2"}, skip=True, overwrite=True)
    assert todo == [] and len(skipped) == 3
    todo, skipped = files.choose(sums, {"1", "2"}, skip=False, overwrite=False)
    assert len(todo) == 3 and skipped == []


def test_permission_denied_is_fatal(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (found,) = files.find("top.csv", [root])

    def refuse(*args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(Fatal, match=r"permission denied reading 'top\.csv'"):
        files.open_checked(found)
