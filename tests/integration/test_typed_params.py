"""Typed parameters end to end: a value given with ``-p``, ``--arg``, the API's ``params``,
the "Run with parameters" form or a preset arrives at the step in the type of the
parameter's declared default (``params = { n = 1 }``: ``-p n=7`` is the integer 7); a value
that does not convert is a usage error naming the parameter and the type (CLI exit 2, API
422, the form shows it under its field), and no run is recorded."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.web.api_env import ORIGIN, PASSWORD, TestClient
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.security import hash_password
from cadenza.services import Actor, Services
from cadenza.services.config import init_home
from cadenza.web.app import create_app

runner = CliRunner()

PLUGIN = '''
"""Records the Python type of every value a step receives."""


def types(**kwargs):
    return {"types": {k: type(v).__name__ for k, v in kwargs.items()},
            "values": {k: v for k, v in kwargs.items()}}
'''

JOBS = """

[jobs.typed.params]
n = 1
ratio = 0.5
flag = false
day = 2027-01-31
at = 2027-01-31T08:00:00
tags = ["a"]
opts = { k = 1 }
label = "x"

[jobs.typed.presets.big]
params = { n = 1000, ratio = 2 }

[[jobs.typed.steps]]
name = "look"
type = "python"
callable = "cz_typed_params:types"
op_kwargs = { limit = 5 }
"""
"""The function takes every shared parameter (``**kwargs``); the step's own ``limit`` is
an argument typed by its op_kwargs default (an integer)."""


def make_home(root: Path) -> Path:
    home = init_home(root / "home", example=True, actor=Actor("cli", "init"),
                     clock=FakeClock("2027-03-10T09:00:00+00:00")).path
    (home / "plugins").mkdir(exist_ok=True)
    (home / "plugins" / "cz_typed_params.py").write_text(PLUGIN, encoding="utf-8")
    with (home / "jobs.toml").open("a", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(JOBS))
    return home


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return make_home(tmp_path)


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


def step_output(home: Path, *args: str) -> dict[str, Any]:
    code, out, err = cli(home, "run", "typed", "--local", "--json", *args)
    assert code == 0, err
    run = json.loads(out)
    assert run["state"] == "SUCCEEDED", run
    code, shown, err = cli(home, "runs", "show", run["id"], "--json")
    assert code == 0, err
    output: dict[str, Any] = json.loads(shown)["steps"][0]["output"]
    return output


def runs_recorded(home: Path) -> int:
    code, out, _ = cli(home, "runs", "list", "--json")
    assert code == 0
    return len(json.loads(out))


def test_p_values_arrive_in_the_type_of_their_declared_default(home: Path) -> None:
    output = step_output(home, "-p", "n=7", "-p", "ratio=3", "-p", "flag=true",
                         "-p", "day=2027-02-28", "-p", "at=2027-02-28T06:30:00",
                         "-p", 'tags=["x", "y"]', "-p", 'opts={"k": 2}', "-p", "label=42",
                         "--arg", "look.limit=9")
    assert output["types"] == {"n": "int", "ratio": "float", "flag": "bool", "day": "str",
                               "at": "str", "tags": "list", "opts": "dict", "label": "str",
                               "limit": "int"}
    assert output["values"] == {"n": 7, "ratio": 3.0, "flag": True, "day": "2027-02-28",
                                "at": "2027-02-28T06:30:00", "tags": ["x", "y"],
                                "opts": {"k": 2}, "label": "42", "limit": 9}


def test_declared_defaults_and_a_presets_values_keep_their_types(home: Path) -> None:
    plain = step_output(home)
    assert plain["values"]["n"] == 1 and plain["types"]["n"] == "int"
    assert plain["values"]["day"] == "2027-01-31"  # a TOML date: its ISO text
    assert plain["values"]["at"] == "2027-01-31T08:00:00"
    preset = step_output(home, "--preset", "big")
    assert preset["values"]["n"] == 1000
    assert preset["values"]["ratio"] == 2.0 and preset["types"]["ratio"] == "float"


@pytest.mark.parametrize(("given", "expected"), [
    ("n=x", "parameter n: expected an integer, got 'x'"),
    ("n=7.5", "parameter n: expected an integer, got '7.5'"),
    ("flag=yes", "parameter flag: expected true or false, got 'yes'"),
    ("day=31/01/2027", "parameter day: expected a date (YYYY-MM-DD), got '31/01/2027'"),
    ("tags={}", "parameter tags: expected a list"),
])
def test_a_value_that_does_not_convert_exits_2_and_records_nothing(
        home: Path, given: str, expected: str) -> None:
    code, _, err = cli(home, "run", "typed", "--local", "-p", given)
    assert code == 2, err
    assert expected in " ".join(err.split()), err
    code, _, err = cli(home, "run", "typed", "--local", "--arg", "look.limit=many")
    assert code == 2 and "--arg look.limit: expected an integer, got 'many'" in err, err
    assert runs_recorded(home) == 0


def test_a_preset_value_of_the_wrong_type_is_a_configuration_error(home: Path) -> None:
    jobs = home / "jobs.toml"
    jobs.write_text(jobs.read_text(encoding="utf-8").replace(
        "params = { n = 1000, ratio = 2 }", 'params = { n = "lots", ratio = 2 }'),
        encoding="utf-8")
    code, out, err = cli(home, "validate")
    assert code == 1
    assert "jobs.typed.presets.big.params.n: parameter n: expected an integer, got 'lots'" \
        in " ".join((out + err).split())


@pytest.fixture
def served(home: Path) -> Iterator[tuple[Services, TestClient]]:
    clock = FakeClock("2027-03-10T09:00:00+00:00")
    services = Services.at(home, actor=Actor("cli", "test"), clock=clock)
    services.store().add_user("operator", hash_password(PASSWORD), ["operator"])
    application = create_app(services.store(), home=services.home, reload=lambda: True)
    try:
        with TestClient(application, base_url=ORIGIN) as client:
            answer = client.post("/api/login",
                                 json={"username": "operator", "password": PASSWORD})
            assert answer.status_code == 200, answer.text
            client.headers.update({"X-CSRF-Token": answer.json()["csrf_token"],
                                   "Origin": ORIGIN})
            yield services, client
    finally:
        services.close()


def test_the_api_converts_params_and_answers_422_naming_the_parameter(
        served: tuple[Services, TestClient]) -> None:
    services, client = served
    made = client.post("/api/jobs/typed/runs", json={"params": {"n": "7", "ratio": 1,
                                                                 "day": "2027-05-01"}})
    assert made.status_code == 201, made.text
    run = services.store().get_run(made.json()["run_id"])
    assert run is not None and run.params == {"n": 7, "ratio": 1.0, "day": "2027-05-01"}
    for params, expected in (({"n": "x"}, "parameter n: expected an integer, got 'x'"),
                             ({"n": True}, "parameter n: expected an integer, got True"),
                             ({"flag": 1}, "parameter flag: expected true or false, got 1"),
                             ({"label": 5}, "parameter label: expected a string, got 5")):
        refused = client.post("/api/jobs/typed/runs", json={"params": params})
        assert refused.status_code == 422, refused.text
        assert expected in refused.json()["error"]
    assert len(services.store().list_runs(job="typed")) == 1


def test_the_form_shows_each_type_and_a_refused_value_under_its_field(
        served: tuple[Services, TestClient]) -> None:
    services, client = served
    page = client.get("/jobs/typed/run").text
    for name, kind, shown in (("n", "integer", "integer"), ("ratio", "float", "number"),
                              ("flag", "boolean", "true or false"), ("day", "date", "date"),
                              ("at", "datetime", "date and time"), ("tags", "list", "list"),
                              ("opts", "table", "table"), ("label", "string", "text")):
        label = page.split(f'name="param:{name}"')[0].rsplit("<label", 1)[1]
        assert f'data-type="{kind}"' in label and f">{shown}</span>" in label, (name, label)
    assert 'value="2027-01-31"' in page  # a date shown as its ISO text
    bad = client.post("/jobs/typed/run", data={"param:n": "x", "param:day": "2027-02-30"},
                      headers={"HX-Request": "true"})
    assert bad.status_code == 422
    assert bad.headers["HX-Retarget"] == "#run-form"
    html = bad.text
    field = html.split('name="param:n"', 1)[1].split("</div>", 1)[0]
    assert 'value="x"' in field and 'aria-invalid="true"' in field
    assert "parameter n: expected an integer, got &#39;x&#39;" in field
    day = html.split('name="param:day"', 1)[1].split("</div>", 1)[0]
    assert "parameter day: expected a date (YYYY-MM-DD), got &#39;2027-02-30&#39;" in day
    assert services.store().list_runs(job="typed") == []
    good = client.post("/jobs/typed/run", data={"param:n": "12"},
                       headers={"HX-Request": "true"})
    assert good.status_code == 200 and good.headers["HX-Redirect"].startswith("/runs/")
    run = services.store().get_run(good.headers["HX-Redirect"].rsplit("/", 1)[1])
    assert run is not None and run.params == {"n": 12}
