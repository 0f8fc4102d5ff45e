"""The job editor as a person reads it (web/ui/editor_form.py, the config models' titles
and descriptions): human labels, the TOML key only beside a label that is not its words,
required fields first, rare ones folded, help without references to documents the reader
does not have; and the TOML tab's text saved as typed, comments included."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env
from tests.integration.web.test_ui_editor import editor, form_of, jobs_file, multi

from cadenza.services import job_drafts


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


def _labels(html: str) -> list[tuple[str, str]]:
    """(label text, key shown beside it or "") of every label and legend."""
    out = []
    for inner in re.findall(r"<(?:label|legend)[^>]*>(.*?)</(?:label|legend)>", html, re.S):
        key = re.search(r'<code class="ed-key">([^<]*)</code>', inner)
        text = re.split(r"<code|<span", inner)[0]
        out.append((" ".join(text.split()), key.group(1) if key else ""))
    return out


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_every_step_type_reads_like_a_person_wrote_it(env: ApiEnv) -> None:
    client = editor(env)
    for kind in job_drafts.step_schemas():
        html = client.get(f"/editor/step?type={kind}").text
        text = _text(html)
        assert "Op Kwargs" not in text and "op_kwargs op_kwargs" not in text, kind
        assert "SPEC" not in text and "§" not in text and "DESIGN" not in text, kind
        assert not re.search(r"\bissue \d", text), kind
        for label, key in _labels(html):
            assert label, (kind, key)
            # never the key twice ("Timeout timeout"), never a class name (RetryPolicy)
            assert label.lower() != key.replace("_", " "), (kind, label)
            assert "Policy" not in label and "Options" not in label, (kind, label)
            if "_" in key:  # what pydantic would say: "Max Rows", "Op Kwargs"
                assert label != key.replace("_", " ").title(), (kind, label)
    python = client.get("/editor/step?type=python").text
    assert re.search(r"Keyword arguments <code class=\"ed-key\">op_kwargs</code>", python)
    assert "module:function" in python and "e.g. sales:load_month" in python
    http = client.get("/editor/step?type=http").text
    assert re.search(r">\s*URL\s*</label>", http)  # the label is the key's words: no key
    assert "JSON body <code class=\"ed-key\">json</code>" in http


def test_required_first_and_rare_fields_folded_under_more_options(env: ApiEnv) -> None:
    html = editor(env).get("/editor/step?type=sql_copy").text
    main, _, more = html.partition('<details class="ed-common ed-more">')
    assert "More options" in more
    names = re.findall(r'name="step\.\w+\.([a-z_.]+)"', main)
    assert names.index("source.connection") < names.index("mode")  # required first
    assert "batch_size" not in names and "trim_strings" not in names
    assert re.search(r'name="step\.\w+\.trim_strings"', more)
    assert re.search(r'name="step\.\w+\.timeout"', more)  # the options every step has


def test_the_job_fields_have_help_with_an_example(env: ApiEnv) -> None:
    html = editor(env).get("/jobs/hello/edit").text
    text = _text(html)
    assert "0 2 * * * for every day at 02:00" in text
    assert "Max concurrent runs" in text and "Max Concurrency" not in text
    assert "SPEC" not in text and "RetryPolicy" not in text
    assert "Retry <code class=\"ed-key\">" not in html  # "Retry" is the key's word


def test_a_comment_typed_in_the_toml_tab_is_saved(env: ApiEnv) -> None:
    client = editor(env)
    fields = dict(form_of(client.get("/jobs/hello/edit").text, "toml-form"))
    fields["toml"] = fields["toml"].replace(
        'tags = ["demo"]', '# typed in the TOML tab\ntags = ["demo"]  # and after a value')
    answer = client.post("/jobs/hello/edit", data=multi(fields))
    assert answer.status_code == 200, answer.text
    text = jobs_file(env).read_text()
    assert "# typed in the TOML tab\n" in text and "# and after a value" in text
    again = dict(form_of(client.get("/jobs/hello/edit").text, "toml-form"))
    assert "# typed in the TOML tab" in again["toml"]


def test_a_new_job_from_the_toml_tab_keeps_its_comments(env: ApiEnv) -> None:
    client = editor(env)
    fields = dict(form_of(client.get("/jobs/new").text, "toml-form"))
    fields["toml"] = ('# what this job is for\n[jobs.commented]\ndescription = "x"\n\n'
                      '[[jobs.commented.steps]]  # the only step\nname = "a"\n'
                      'type = "python"\ncallable = "demo_tasks:count"\n')
    answer = client.post("/jobs/new", data=multi(fields))
    assert answer.status_code == 200, answer.text
    text = jobs_file(env).read_text()
    assert "# what this job is for\n[jobs.commented]" in text
    assert "# the only step" in text
