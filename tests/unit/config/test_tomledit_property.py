"""Property: any edit of one job of a commented jobs.toml reads back as that edit, and the
other jobs' lines (their comments with them) stay byte for byte."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import tomlkit
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.config.tomledit import delete_job, set_job

SCALARS = st.one_of(st.integers(-5, 5), st.booleans(),
                    st.text(alphabet=st.sampled_from(list("ab #='\"")), max_size=5))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                   st.dictionaries(st.sampled_from(["k", "m", "n"]), SCALARS, max_size=2))
PLAIN = st.dictionaries(st.sampled_from(["schedule", "description", "tags", "params", "x"]),
                        VALUES, max_size=4)
STEPS = st.lists(st.dictionaries(st.sampled_from(["type", "query", "q"]), VALUES,
                                 min_size=1, max_size=3), min_size=1, max_size=3)
IDS = ["first", "second", "third"]


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for job_id in IDS:
        steps = [{"name": f"{job_id}-{n}", **step} for n, step in enumerate(draw(STEPS))]
        out[job_id] = {**draw(PLAIN), "steps": steps}
    return out


def _commented(catalogue: dict[str, dict[str, Any]]) -> tuple[str, dict[str, str]]:
    """The catalogue as text, each job under a comment line and each key with a trailing
    comment; and each job's block of lines."""
    blocks: dict[str, str] = {}
    for job_id, job in catalogue.items():
        lines = tomlkit.dumps({"jobs": {job_id: job}}).splitlines(keepends=True)
        noted = [line.replace("\n", f"  # on {job_id}\n") if " = " in line and
                 not line.startswith(("[", " ")) else line for line in lines]
        blocks[job_id] = f"# about {job_id}\n" + "".join(noted).strip("\n") + "\n"
    return "# the catalogue\n\n" + "\n".join(blocks.values()), blocks


@st.composite
def edits(draw: st.DrawFn, job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with keys changed, added and removed, and its steps reordered, dropped or
    added to."""
    edited = {k: v for k, v in job.items()
              if k == "steps" or not draw(st.booleans(), label=f"drop {k}")}
    edited.update(draw(PLAIN, label="changes"))
    steps = list(draw(st.permutations(job["steps"]), label="order"))
    if len(steps) > 1 and draw(st.booleans(), label="drop a step"):
        steps.pop(draw(st.integers(0, len(steps) - 1)))
    for step in draw(STEPS, label="new steps")[:draw(st.integers(0, 1))]:
        steps.append({"name": "added", **step})
    edited["steps"] = steps
    return edited


@settings(max_examples=60, deadline=None)
@given(catalogue=jobs(), job_id=st.sampled_from(IDS), data=st.data())
def test_an_edit_reads_back_and_leaves_the_other_jobs_as_written(
        catalogue: dict[str, dict[str, Any]], job_id: str, data: st.DataObject) -> None:
    text, blocks = _commented(catalogue)
    edited = data.draw(edits(catalogue[job_id]), label="edit")
    doc = tomlkit.parse(text)
    set_job(doc, job_id, edited)
    result = doc.as_string()
    assert tomllib.loads(result)["jobs"] == {
        **tomllib.loads(tomlkit.dumps({"jobs": catalogue}))["jobs"],
        job_id: tomllib.loads(tomlkit.dumps({"job": edited}))["job"]}
    assert result.startswith("# the catalogue\n\n")
    for other, block in blocks.items():
        if other != job_id:
            assert block in result
    assert re.search(rf"# about {job_id}\n\[\[?jobs\.{job_id}[.\]]", result)


@settings(max_examples=30, deadline=None)
@given(catalogue=jobs(), job_id=st.sampled_from(IDS))
def test_a_delete_leaves_the_other_jobs_as_written(
        catalogue: dict[str, dict[str, Any]], job_id: str) -> None:
    text, blocks = _commented(catalogue)
    doc = tomlkit.parse(text)
    delete_job(doc, job_id)
    result = doc.as_string()
    assert f"about {job_id}" not in result and f"on {job_id}" not in result
    assert result == "# the catalogue\n\n" + "\n".join(
        block for other, block in blocks.items() if other != job_id)
