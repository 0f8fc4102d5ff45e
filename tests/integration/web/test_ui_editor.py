"""The job editor's pages (web/ui/editor.py) through TestClient: the generated form, live
validation under the field, saves through the job edit services (comments kept, stale and
bad saves refused with the file unchanged), Delete, roles and escaping."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, TestClient, api_env

from cadenza.services import job_drafts
from cadenza.web.ui.editor_form import slot_id

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


class FormReader(HTMLParser):
    """The fields of one <form id=...> as a browser would send them."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside, self.fields = form_id, False, []  # type: ignore[var-annotated]
        self._select: str | None = None
        self._textarea: str | None = None
        self._text = ""
        self._first_option: str | None = None
        self._chosen = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        if tag == "input" and a.get("name"):
            self.fields.append((a["name"], a.get("value", "")))
        elif tag == "select" and a.get("name"):
            self._select, self._first_option, self._chosen = a["name"], None, False
        elif tag == "option" and self._select is not None:
            if self._first_option is None:
                self._first_option = a.get("value", "")
            if "selected" in a and not self._chosen:
                self._chosen = True
                self.fields.append((self._select, a.get("value", "")))
        elif tag == "textarea" and a.get("name"):
            self._textarea, self._text = a["name"], ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select" and self._select is not None:
            if not self._chosen:
                self.fields.append((self._select, self._first_option or ""))
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            text = self._text[1:] if self._text.startswith("\n") else self._text
            self.fields.append((self._textarea, text))
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text += data


def form_of(html: str, form_id: str = "job-form") -> list[tuple[str, str]]:
    import html as htmllib

    reader = FormReader(form_id)
    reader.feed(html)
    return [(k, htmllib.unescape(v)) for k, v in reader.fields]


def set_field(fields: list[tuple[str, str]], name: str, value: str) -> list[tuple[str, str]]:
    found = [k for k, _ in fields if k == name]
    assert found, name
    return [(k, value if k == name else v) for k, v in fields]


def multi(fields: list[tuple[str, str]] | dict[str, str]) -> dict[str, list[str]]:
    """Form fields as httpx sends them (a name may repeat: step_uid)."""
    out: dict[str, list[str]] = {}
    for name, value in (fields.items() if isinstance(fields, dict) else fields):
        out.setdefault(name, []).append(value)
    return out


def editor(env: ApiEnv) -> TestClient:
    client = env.session("editor")
    client.headers["HX-Request"] = "true"
    return client


def jobs_file(env: ApiEnv) -> Path:
    return Path(env.services.home.jobs_file)


def slot_text(html: str, name: str) -> str:
    match = re.search(rf'id="{re.escape(slot_id(name))}"[^>]*>(.*?)</div>', html, re.S)
    assert match, name
    return match.group(1)


def test_form_fields_are_generated_for_every_registered_step_type(env: ApiEnv) -> None:
    client = editor(env)
    types = job_drafts.step_schemas()
    assert len(types) >= 10
    for kind, schema in types.items():
        answer = client.get(f"/editor/step?type={kind}")
        assert answer.status_code == 200, kind
        uid = re.search(r'name="step_uid" value="(\w+)"', answer.text).group(1)  # type: ignore[union-attr]
        names = set(re.findall(r'name="([^"]+)"', answer.text))
        for key in schema["properties"]:  # an input, or a fieldset of inputs (retry, csv)
            assert f"step.{uid}.{key}" in names \
                or any(n.startswith(f"step.{uid}.{key}.") for n in names), (kind, key)
        assert f'value="{kind}" selected' in answer.text
    # and the job's own keys, on the Create page
    page = client.get("/jobs/new").text
    for key in job_drafts.job_schema()["properties"]:
        if key not in ("id", "steps", "retry", "alerts"):
            assert f'name="job.{key}"' in page, key
    assert 'name="job.retry.attempts"' in page and 'name="job.alerts.long_run"' in page
    assert '<option value="run_latest">' in page  # an enum is a select


def test_a_bad_cron_shows_under_the_schedule_field(env: ApiEnv) -> None:
    client = editor(env)
    fields = form_of(client.get("/jobs/new").text)
    fields = set_field(set_field(fields, "id", "nightly"), "job.schedule", "61 * * * *")
    answer = client.post("/editor/check", data=dict(fields))
    assert answer.status_code == 200
    under = slot_text(answer.text, "job.schedule")
    assert "minute: 61 is out of range 0-59" in under and "field-error" in under
    assert 'hx-swap-oob="true"' in answer.text
    assert slot_text(answer.text, "job.description") == ""  # the other slots are cleared
    # the same words as `cadenza validate`, located, in the title
    assert "jobs.toml:" in under and "error: jobs.nightly.schedule:" in under


@pytest.mark.parametrize(("language", "cron", "timeout", "toml"), [
    ("fr", "minute : 61 est hors de la plage 0-59",
     "attendu une durée comme &#34;30s&#34;, &#34;90m&#34;, &#34;2h&#34;, &#34;1d&#34; ou "
     "&#34;1h30m&#34;, reçu &#39;ten minutes&#39;",
     "erreur: jobs.hello.schedule: planification invalide &#39;x&#39; : attendu 5 champs "
     "(minute hour day-of-month month day-of-week), reçu 1"),
    ("zh-CN", "minute：61 超出范围 0-59",
     "应为 &#34;30s&#34;、&#34;90m&#34;、&#34;2h&#34;、&#34;1d&#34; 或 &#34;1h30m&#34; "
     "这样的时长，实际为 &#39;ten minutes&#39;",
     "错误: jobs.hello.schedule: 无效的计划 &#39;x&#39;：应为 5 个字段（minute hour "
     "day-of-month month day-of-week），实际为 1 个"),
])
def test_problems_under_the_fields_are_in_the_page_language(
        env: ApiEnv, language: str, cron: str, timeout: str, toml: str) -> None:
    client = editor(env)
    client.headers["Accept-Language"] = language
    fields = form_of(client.get("/jobs/new").text)
    fields = set_field(set_field(fields, "id", "nightly"), "job.schedule", "61 * * * *")
    fields = set_field(fields, "job.timeout", "ten minutes")
    answer = client.post("/editor/check", data=dict(fields))
    assert cron in slot_text(answer.text, "job.schedule")
    assert timeout in slot_text(answer.text, "job.timeout")
    # the title keeps the words of `cadenza validate`, in English, for a search or a ticket
    assert "minute: 61 is out of range 0-59" in slot_text(answer.text, "job.schedule")
    page = client.get("/jobs/hello/edit").text
    fields_toml = dict(form_of(page, "toml-form"))
    fields_toml["toml"] = fields_toml["toml"].replace('tags = ["demo"]',
                                                      'tags = ["demo"]\nschedule = "x"')
    listed = client.post("/editor/check-toml", data=multi(fields_toml)).text
    assert toml in listed, listed


def test_a_problem_of_a_step_shows_under_the_steps_field(env: ApiEnv) -> None:
    client = editor(env)
    page = client.get("/jobs/hello/edit").text
    uid = re.search(r'name="step_uid" value="(\w+)"', page).group(1)  # type: ignore[union-attr]
    fields = set_field(form_of(page), f"step.{uid}.callable", "")
    answer = client.post("/editor/check", data=dict(fields))
    assert "missing required key &#39;callable&#39;" in slot_text(answer.text,
                                                                f"step.{uid}.callable")


def test_saving_the_form_unchanged_keeps_the_file_byte_for_byte(env: ApiEnv) -> None:
    client = editor(env)
    before = jobs_file(env).read_bytes()
    for job in ("sales-load", "hello"):
        fields = form_of(client.get(f"/jobs/{job}/edit").text)
        answer = client.post(f"/jobs/{job}/edit", data=multi(fields))
        assert answer.status_code == 200, answer.text
        assert answer.headers["HX-Redirect"] == f"/jobs/{job}"
    assert jobs_file(env).read_bytes() == before


@pytest.mark.reliability_case(8)
def test_an_edit_in_the_form_keeps_the_comments_and_reloads(env: ApiEnv) -> None:
    client = editor(env)
    before = jobs_file(env).read_text()
    comments = [line for line in before.splitlines() if "#" in line]
    fields = form_of(client.get("/jobs/sales-load/edit").text)
    fields = set_field(fields, "job.schedule", "30 3 * * *")
    answer = client.post("/jobs/sales-load/edit", data=multi(fields))
    assert answer.status_code == 200, answer.text
    after = jobs_file(env).read_text()
    assert 'schedule = "30 3 * * *"            # every night at 02:00, Paris time' in after
    assert [line for line in after.splitlines() if "#" in line and "schedule" not in line] \
        == [line for line in comments if "schedule" not in line]
    assert env.reloads  # the node's reload ran


def test_steps_reordered_in_the_form_are_saved_in_that_order(env: ApiEnv) -> None:
    client = editor(env)
    fields = form_of(client.get("/jobs/sales-load/edit").text)
    uids = [v for k, v in fields if k == "step_uid"]
    order = [uids[1], uids[0], uids[2]]
    it = iter(order)
    moved = [(k, next(it) if k == "step_uid" else v) for k, v in fields]
    assert client.post("/jobs/sales-load/edit", data=multi(moved)).status_code == 200
    text = jobs_file(env).read_text()
    assert text.index('name = "refresh-aggregates"') < text.index('name = "load-file"')


def test_the_toml_tab_saves_and_keeps_the_files_comments(env: ApiEnv) -> None:
    client = editor(env)
    page = client.get("/jobs/sales-load/edit").text
    fields = dict(form_of(page, "toml-form"))
    assert fields["toml"].startswith("[jobs.sales-load]")
    assert "# Run on the 1st of each month" in fields["toml"]  # the job's own comments
    fields["toml"] = fields["toml"].replace('timeout = "2h"', 'timeout = "3h"')
    answer = client.post("/jobs/sales-load/edit", data=multi(fields))
    assert answer.status_code == 200, answer.text
    text = jobs_file(env).read_text()
    assert 'timeout = "3h"' in text and text.startswith("# The job catalogue.")
    assert "# every night at 02:00, Paris time" in text
    assert "# Run on the 1st of each month at 06:00" in text


def test_the_toml_tab_shows_problems_by_line_and_column(env: ApiEnv) -> None:
    client = editor(env)
    fields = dict(form_of(client.get("/jobs/hello/edit").text, "toml-form"))
    fields["toml"] = fields["toml"].replace('tags = ["demo"]', 'tags = ["demo"]\nschedule = "x"')
    answer = client.post("/editor/check-toml", data=multi(fields))
    assert answer.status_code == 200
    assert 'data-line="4" data-col="12"' in answer.text
    assert "<code>4:12</code>" in answer.text and "expected 5 fields" in answer.text
    fields["toml"] = "[jobs.hello\n"
    assert "data-line=\"1\"" in client.post("/editor/check-toml", data=multi(fields)).text


@pytest.mark.reliability_case(6)
def test_a_stale_save_is_409_with_the_diff_and_the_file_unchanged(env: ApiEnv) -> None:
    client = editor(env)
    fields = form_of(client.get("/jobs/hello/edit").text)
    fields = set_field(fields, "job.description", "mine")
    changed = jobs_file(env).read_text().replace("counts to three", "counts to four")
    jobs_file(env).write_text(changed)  # someone else saved meanwhile
    answer = client.post("/jobs/hello/edit", data=multi(fields))
    assert answer.status_code == 409
    assert answer.headers["HX-Retarget"] == "#flash"
    assert "-description = &#34;A python step from plugins/: counts to four&#34;" \
        in answer.text or '-description = "A python step' in answer.text
    assert "+description = &#34;mine&#34;" in answer.text or '+description = "mine"' \
        in answer.text
    assert jobs_file(env).read_text() == changed
    # "save my version over it" carries the current hash
    current = re.search(r'override_hash&#34;: &#34;(\w+)|override_hash": "(\w+)',
                        answer.text)
    assert current is not None
    again = client.post("/jobs/hello/edit", data=multi([*fields, (
        "override_hash", current.group(1) or current.group(2))]))
    assert again.status_code == 200
    assert 'description = "mine"' in jobs_file(env).read_text()


def test_a_bad_save_is_refused_and_leaves_the_file_unchanged(env: ApiEnv) -> None:
    client = editor(env)
    before = jobs_file(env).read_bytes()
    fields = set_field(form_of(client.get("/jobs/hello/edit").text), "job.schedule", "61 * * * *")
    answer = client.post("/jobs/hello/edit", data=multi(fields))
    assert answer.status_code == 422
    assert "jobs.toml is unchanged" in answer.text
    assert "out of range" in slot_text(answer.text, "job.schedule")
    toml = dict(form_of(client.get("/jobs/hello/edit").text, "toml-form"))
    toml["toml"] += "\n[jobs.other]\n"
    assert client.post("/jobs/hello/edit", data=toml).status_code == 422
    toml["toml"] = toml["toml"].replace("\n[jobs.other]\n", "").replace(
        'tags = ["demo"]', 'tags = ["demo"]\nschedule = "x"')
    refused = client.post("/jobs/hello/edit", data=toml)
    assert refused.status_code == 422 and "jobs.toml is unchanged" in refused.text
    assert 'id="toml-problems"' in refused.text and 'data-line="4"' in refused.text
    assert jobs_file(env).read_bytes() == before


@pytest.mark.reliability_case(2)
def test_create_from_the_form_and_duplicate(env: ApiEnv) -> None:
    client = editor(env)
    page = client.get("/jobs/new?from=hello").text
    fields = form_of(page)
    assert ("id", "hello-copy") in fields
    assert ("job.description", "A python step from plugins/: counts to three") in fields
    answer = client.post("/jobs/new", data=multi(fields))
    assert answer.status_code == 200, answer.text
    assert answer.headers["HX-Redirect"] == "/jobs/hello-copy"
    assert "[jobs.hello-copy]" in jobs_file(env).read_text()
    assert "hello-copy" in [j.id for j in env.services.jobs.list()]
    # the same id again is refused under the id field
    again = client.post("/jobs/new", data=multi(fields))
    assert again.status_code == 422 and "exists" in slot_text(again.text, "id")


def test_create_from_the_toml_tab(env: ApiEnv) -> None:
    client = editor(env)
    fields = dict(form_of(client.get("/jobs/new").text, "toml-form"))
    fields["toml"] = ('[jobs.from-toml]\ndescription = "typed"\n\n[[jobs.from-toml.steps]]\n'
                      'name = "count"\ntype = "python"\ncallable = "demo_tasks:count"\n')
    answer = client.post("/jobs/new", data=multi(fields))
    assert answer.status_code == 200, answer.text
    assert answer.headers["HX-Redirect"] == "/jobs/from-toml"


def test_the_type_picker_swaps_the_fields_and_keeps_common_values(env: ApiEnv) -> None:
    client = editor(env)
    answer = client.get("/editor/step-fields", params={
        "uid": "abc", "step.abc.type": "sql_query", "step.abc.timeout": "5m",
        "step.abc.callable": "x:y"})
    assert answer.status_code == 200
    assert 'name="step.abc.query"' in answer.text and "step.abc.callable" not in answer.text
    assert re.search(r'name="step.abc.timeout"[^>]* value="5m"', answer.text)


def test_delete_asks_for_the_id_and_keeps_the_history(env: ApiEnv) -> None:
    client = editor(env)
    page = client.get("/jobs/hello/edit").text
    assert 'data-confirm-input="confirm-delete" data-confirm-value="hello"' in page
    assert "run history is kept" in page
    fields = dict(form_of(page, "delete-form"))
    fields["confirm"] = "nope"
    assert client.post("/jobs/hello/delete", data=multi(fields)).status_code == 422
    assert "[jobs.hello]" in jobs_file(env).read_text()
    fields["confirm"] = "hello"
    answer = client.post("/jobs/hello/delete", data=multi(fields))
    assert answer.status_code == 200 and answer.headers["HX-Redirect"] == "/jobs"
    assert "[jobs.hello]" not in jobs_file(env).read_text()
    assert "# The job catalogue." in jobs_file(env).read_text()


@pytest.mark.parametrize("role", ["viewer", "operator"])
@pytest.mark.reliability_case(34)
def test_the_editor_needs_the_editor_role(env: ApiEnv, role: str) -> None:
    client = env.session(role)
    for path in ("/jobs/new", "/jobs/hello/edit", "/jobs/new?from=hello"):
        answer = client.get(path)
        assert answer.status_code == 403 and "needs the editor role" in answer.text
        assert "Save" not in answer.text and "Delete job" not in answer.text
    before = jobs_file(env).read_bytes()
    assert client.post("/jobs/hello/delete", data={"confirm": "hello",
                                                  "base_hash": "x"}).status_code == 403
    assert jobs_file(env).read_bytes() == before


@pytest.mark.reliability_case(36)
def test_an_xss_description_shows_as_text(env: ApiEnv) -> None:
    client = editor(env)
    fields = set_field(form_of(client.get("/jobs/hello/edit").text), "job.description", XSS)
    assert client.post("/jobs/hello/edit", data=multi(fields)).status_code == 200
    page = client.get("/jobs/hello/edit").text
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert ("job.description", XSS) in form_of(page)  # round-trips as the text it is
    step = client.get("/editor/step-fields", params={"uid": "x1", "step.x1.type": "python",
                                                     "step.x1.callable": XSS}).text
    assert "<script>alert(1)" not in step


def test_a_new_step_type_gets_its_form_and_secrets_go_by_reference(
        env: ApiEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's step type, never seen by the UI code: its fields, a select for its enum,
    the connections to pick from, and a secret-looking key asking for a reference."""
    from typing import Annotated, Literal

    from cadenza.config.types import Ref
    from cadenza.steps.base import StepConfig

    class VaultFetch(StepConfig):
        connection: Annotated[str, Ref("connection", "http")]
        password: str = "${secret.vault}"
        mode: Literal["read", "list"] = "read"
        limit: int = 10

    schemas = {**job_drafts.step_schemas(), "vault_fetch": job_drafts._marked(VaultFetch)}
    monkeypatch.setattr(job_drafts, "step_schemas", lambda: schemas)
    answer = editor(env).get("/editor/step?type=vault_fetch").text
    uid = re.search(r'name="step_uid" value="(\w+)"', answer).group(1)  # type: ignore[union-attr]
    assert f'name="step.{uid}.password"' in answer and "${secret.NAME}" in answer
    assert f'name="step.{uid}.connection"' in answer and 'list="refs-connection-http"' in answer
    assert '<option value="list">list</option>' in answer
    assert f'name="step.{uid}.limit"' in answer and 'inputmode="numeric"' in answer
    page = editor(env).get("/jobs/hello/edit").text
    assert '<datalist id="refs-connection-http"><option value="downstream">' in page


@pytest.mark.reliability_case(3)
def test_keys_the_schema_does_not_know_are_shown_and_never_dropped(env: ApiEnv) -> None:
    client = editor(env)
    path = jobs_file(env)
    path.write_text(path.read_text()
                    .replace('tags = ["demo"]', 'tags = ["demo"]\ncolour = "red"', 1)
                    .replace('callable = "demo_tasks:count"',
                             'callable = "demo_tasks:count"\nretries = 2'))
    page = client.get("/jobs/hello/edit").text
    fields = form_of(page)
    assert ("job.__other", 'colour = "red"') in fields
    uid = re.search(r'name="step_uid" value="(\w+)"', page).group(1)  # type: ignore[union-attr]
    assert (f"step.{uid}.__other", "retries = 2") in fields
    answer = client.post("/editor/check", data=multi(fields))
    assert "colour" in slot_text(answer.text, "job.__other")
    assert "retries" in slot_text(answer.text, f"step.{uid}.__other")
    before = path.read_bytes()
    assert client.post("/jobs/hello/edit", data=multi(fields)).status_code == 422
    assert path.read_bytes() == before
    fixed = [(k, "" if k.endswith("__other") else v) for k, v in fields]
    assert client.post("/jobs/hello/edit", data=multi(fixed)).status_code == 200
    assert "colour" not in path.read_text() and "retries" not in path.read_text()


def test_the_editor_speaks_french_where_the_catalogue_does(env: ApiEnv) -> None:
    page = editor(env).get("/jobs/new", headers={"Accept-Language": "fr-FR,fr;q=0.9"}).text
    assert "Créer une tâche" in page and "Ajouter une étape" in page


@pytest.mark.reliability_case(36)
def test_markup_in_a_toml_comment_shows_as_text_in_the_toml_tab(env: ApiEnv) -> None:
    """A comment of jobs.toml holding markup (one that would close the TOML tab's
    <textarea> first) is text in the editor's page, in the check of the TOML tab and in a
    stale save's diff (here of a description holding the same markup), and round-trips
    unchanged."""
    client = editor(env)
    comment = "# </textarea>" + XSS
    path = jobs_file(env)
    path.write_text(path.read_text().replace("[jobs.hello]", f"[jobs.hello]\n{comment}", 1))
    page = client.get("/jobs/hello/edit").text
    fields = dict(form_of(page, "toml-form"))
    assert comment in fields["toml"]  # the text as it is in the file
    for answer in (page, client.post("/editor/check-toml", data=multi(
            {**fields, "toml": fields["toml"] + 'schedule = "x"\n' + comment + "\n"})).text):
        assert "<script>alert(1)" not in answer and "<img src=x" not in answer
        assert "</textarea><script>" not in answer
    assert "&lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    path.write_text(path.read_text().replace("counts to three", "counts to four"))
    fields["toml"] = re.sub(r"(?m)^description = .*$", f"description = '{XSS}'",
                            fields["toml"], count=1)
    stale = client.post("/jobs/hello/edit", data=multi(fields))
    assert stale.status_code == 409
    assert "<script>alert(1)" not in stale.text and "<img src=x" not in stale.text
    # the diff, as text: the comment as a context line, the new description
    assert "\n # &lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in stale.text
    assert "+description = &#34;&lt;script&gt;alert(1)" in stale.text


@pytest.mark.reliability_case(36)
def test_xss_in_a_step_name_and_type_shows_as_text(env: ApiEnv) -> None:
    client = editor(env)
    answer = client.post("/editor/check", data={
        "mode": "create", "id": "x", "step_uid": "a1", "step.a1.name": XSS,
        "step.a1.type": XSS})
    assert answer.status_code == 200
    assert "<script>alert(1)" not in answer.text and "<img src=x" not in answer.text
    assert "&lt;script&gt;" in answer.text  # the messages quote the value, escaped
    block = client.get("/editor/step", params={"type": XSS}).text
    assert "<script>alert(1)" not in block and "<img src=x" not in block
