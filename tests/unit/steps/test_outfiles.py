"""outfiles: where an output file goes inside the roots, and the temporary file that becomes
it only whole (no clobbering without overwrite, even when a file appears meanwhile)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.lib import outfiles

NOW = datetime(2027, 1, 1, tzinfo=UTC)


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    (second / "shared").mkdir(parents=True)
    return [first.resolve(), second.resolve()]


def test_relative_paths_go_to_the_root_that_has_the_directory(roots: list[Path]) -> None:
    assert outfiles.target("shared/x.csv", roots).path == roots[1] / "shared" / "x.csv"
    made = outfiles.target("new/deep/x.csv", roots)
    assert made.path == roots[0] / "new" / "deep" / "x.csv" and made.path.parent.is_dir()
    assert made.display == "new/deep/x.csv"
    assert outfiles.target("x.csv", roots).root == roots[0]
    assert outfiles.target(str(roots[1] / "y.csv"), roots).display == "y.csv"
    assert outfiles.target("sub\\win.csv", roots).display == "sub/win.csv"


@pytest.mark.parametrize(("path", "why"), [
    ("/elsewhere/x.csv", "outside every root"), ("a/../../x.csv", "'..'"),
    ("x*.csv", "glob"), ("%2e%2e/x.csv", "percent-encoded"), ("dir/", "names no file"),
    ("//server/share/x.csv", "UNC"),
])
def test_refused(roots: list[Path], path: str, why: str) -> None:
    with pytest.raises(Fatal, match=why):
        outfiles.target(path, roots)


def test_a_file_that_appears_before_the_rename_is_kept(roots: list[Path]) -> None:
    place = outfiles.target("x.csv", roots)
    outfiles.refuse_existing(place)  # nothing there yet
    with outfiles.AtomicFile(place, overwrite=False, now=NOW) as out:
        out.fh.write(b"ours")
        place.path.write_bytes(b"theirs")  # another program writes the name meanwhile
        with pytest.raises(Fatal, match="exists already"):
            out.commit()
    assert place.path.read_bytes() == b"theirs"
    assert [p.name for p in roots[0].iterdir()] == ["x.csv"]  # the temporary is gone


def test_commit_replaces_whole_and_an_unfinished_file_vanishes(roots: list[Path]) -> None:
    place = outfiles.target("x.csv", roots)
    place.path.write_bytes(b"old")
    with outfiles.AtomicFile(place, overwrite=True, now=NOW) as out:
        out.fh.write(b"new content")
        assert place.path.read_bytes() == b"old"  # readers see the old file until the rename
        assert out.commit() == len(b"new content")
    assert place.path.read_bytes() == b"new content"
    with pytest.raises(RuntimeError), outfiles.AtomicFile(place, True, NOW) as out:
        out.fh.write(b"half")
        raise RuntimeError("the step failed")
    assert place.path.read_bytes() == b"new content"
    assert [p.name for p in roots[0].iterdir()] == ["x.csv"]
