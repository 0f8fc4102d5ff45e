"""Each built-in step type's config: required keys, defaults, and its own rules."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from cadenza.steps.base import StepConfig
from cadenza.steps.registry import registry

COMMON = {"name", "type", "enabled", "timeout", "retry", "op_kwargs", "requires"}

#: SPEC §4's table: (required keys, optional keys) of each type
FIELDS = {
    "sql_query": ({"connection"}, {"query", "file", "params", "fetch", "max_rows"}),
    "sql_copy": ({"source", "target"}, {"mode", "key", "batch_size", "create",
                                        "type_coercion", "decimal_mode", "trim_strings"}),
    "file_load": ({"path", "connection", "table"},
                  {"format", "mode", "key", "constants", "columns", "csv", "on_missing",
                   "skip_if_loaded"}),
    "file_export": ({"connection", "query", "path"},
                    {"format", "overwrite", "csv", "sheet"}),  # sheet: added (xlsx)
    "python": ({"callable"}, {"isolation"}),
    "http": (set(), {"url", "connection", "path", "method", "headers", "query", "json", "body",
                     "expect", "via", "idempotency_key"}),
    "ldap_sync": ({"connection", "base", "target"},
                  {"scope", "filter", "attributes", "mapping", "delete", "max_delete_ratio",
                   "multi_valued", "page_size", "batch_size"}),  # docs/ldap_sync.md
    "call_job": ({"job"}, {"params", "preset", "wait"}),
    "report": ({"sections", "path"},
               {"format", "title", "template", "overwrite"}),  # overwrite: added
    "notify": ({"to", "subject"}, {"channel", "body", "attach"}),
}

MINIMAL: dict[str, dict[str, Any]] = {
    "sql_query": {"connection": "w", "query": "select 1"},
    "sql_copy": {"source": {"connection": "a", "table": "t"},
                 "target": {"connection": "b", "table": "t"}},
    "file_load": {"path": "in/*.csv", "connection": "w", "table": "staging"},
    "file_export": {"connection": "w", "query": "select 1", "path": "out/x.xlsx"},
    "python": {"callable": "checks:verify"},
    "http": {"url": "https://example.org/hook"},
    "ldap_sync": {"connection": "dir", "base": "dc=example,dc=org",
                  "target": {"connection": "w", "table": "people", "key": "uid"}},
    "call_job": {"job": "other"},
    "report": {"sections": [{"title": "T", "connection": "w", "query": "select 1"}],
               "path": "reports/r.html"},
    "notify": {"to": ["role:ops"], "subject": "done"},
}


def _config(type_name: str, **values: Any) -> Any:
    data = {"name": "s", "type": type_name, **MINIMAL[type_name], **values}
    return registry()[type_name].Config.model_validate(data)


def _errors(type_name: str, **values: Any) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        _config(type_name, **values)
    return [str(e["msg"]) for e in caught.value.errors()]


@pytest.mark.parametrize("type_name", sorted(FIELDS))
def test_fields_are_exactly_the_spec_table(type_name: str) -> None:
    config = registry()[type_name].Config
    keys = {info.alias or name for name, info in config.model_fields.items()}
    required, optional = FIELDS[type_name]
    assert keys == COMMON | required | optional
    assert {info.alias or name for name, info in config.model_fields.items()
            if info.is_required()} == {"name", "type"} | required


@pytest.mark.parametrize("type_name", sorted(FIELDS))
def test_minimal_configs_take_the_defaults(type_name: str) -> None:
    config = _config(type_name)
    assert isinstance(config, StepConfig)
    assert config.enabled is True
    assert config.timeout == timedelta(hours=1)
    assert config.retry is None
    with pytest.raises(ValidationError, match="Extra inputs"):
        _config(type_name, colour="blue")


def test_defaults_of_the_spec_table() -> None:
    assert (_config("sql_query").fetch, _config("sql_query").max_rows) == ("count", 1000)
    copy = _config("sql_copy")
    assert (copy.mode, copy.batch_size, copy.create) == ("overwrite", 10_000, True)
    load = _config("file_load")
    assert (load.mode, load.on_missing, load.skip_if_loaded) == ("append", "fail", True)
    assert _config("file_export").overwrite is False
    assert _config("python").isolation == "process"
    http = _config("http")
    assert (http.method, http.expect) == ("GET", ["2xx"])
    ldap = _config("ldap_sync")
    assert (ldap.scope, ldap.filter, ldap.delete, ldap.max_delete_ratio) == (
        "subtree", "(objectClass=*)", "none", 0.2)
    assert _config("call_job").wait is True
    from cadenza.steps.builtin.report import report_format

    assert report_format(_config("report")) == "html"  # unset: from the extension
    assert _config("notify").channel is None


@pytest.mark.parametrize(
    ("type_name", "values", "fragment"),
    [
        ("sql_query", {"file": "q.sql"}, "exactly one of 'query' or 'file'"),
        ("sql_query", {"fetch": "some"}, "Input should be 'count', 'first' or 'all'"),
        ("sql_query", {"max_rows": True}, "valid integer"),
        ("sql_copy", {"mode": "upsert"}, "expects 'key'"),
        ("sql_copy", {"target": {"connection": "b", "table": "t; drop table x"}}, "table name"),
        ("sql_copy", {"type_coercion": "oracle"}, "Input should be 'none' or 'jde'"),
        ("sql_copy", {"type_coercion": "jde", "decimal_mode": "round"},
         "Input should be 'truncate' or 'preserve'"),
        ("sql_copy", {"decimal_mode": "preserve"}, "only with type_coercion = 'jde'"),
        ("file_load", {"path": "in/data.txt"}, "cannot tell the format"),
        ("file_load", {"path": "../etc/passwd.csv"}, "without '..'"),
        ("file_load", {"csv": {"delimiter": ";;"}}, "at most 1 character"),
        ("file_load", {"csv": {"encoding": "klingon"}}, "text encoding"),
        ("python", {"callable": "os.system"}, "'module:function'"),
        ("http", {"connection": "api"}, "exactly one of 'url' or 'connection'"),
        ("http", {"url": None, "connection": "api", "path": "https://evil.example/x"},
         "starting with '/'"),
        ("http", {"json": {"a": 1}, "body": "x"}, "not both"),
        ("http", {"expect": ["2xx", 99]}, "status codes"),
        ("http", {"method": "get"}, "'GET'"),
        ("http", {"headers": {"X-A": "a\nb"}}, "without line breaks"),
        ("ldap_sync", {"filter": "objectClass=*"}, "balanced parentheses"),
        ("ldap_sync", {"max_delete_ratio": 1.5}, "less than or equal to 1"),
        ("report", {"sections": []}, "at least 1 item"),
        ("report", {"sections": [{"title": "T", "connection": "w", "query": "q",
                                  "chart": "bar"}]}, "expects 'x'"),
        ("notify", {"to": ["somebody"]}, "e-mail address, role:NAME, user:NAME or channel:NAME"),
        ("notify", {"to": []}, "at least 1 item"),
        ("call_job", {"job": "has space"}, "1 to 64 characters"),
    ],
)
@pytest.mark.reliability_case(17)
def test_step_rules(type_name: str, values: dict[str, Any], fragment: str) -> None:
    assert any(fragment in message for message in _errors(type_name, **values))


def test_lenient_forms() -> None:
    assert _config("sql_copy", mode="upsert", key="id").key == ["id"]
    assert _config("notify", to="lead@example.org").to == ["lead@example.org"]
    assert _config("notify", to=["${params.owner}"]).to == ["${params.owner}"]
    assert _config("http", expect=204).expect == ["204"]
    assert _config("http", url=None, connection="api", path="/v1/x").path == "/v1/x"
    assert _config("file_load", path="in/${params.period}.csv").path.endswith(".csv")
    assert _config("file_load", path="in/data", format="csv").format == "csv"
