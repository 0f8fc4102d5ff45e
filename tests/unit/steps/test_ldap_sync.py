"""ldap_sync without a server: its config rules, the columns it writes, and how ``${...}``
tokens reach the base DN (one escaped RDN value). The runs against slapd are in
tests/integration/test_steps_ldap_sync.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from cadenza.domain.errors import Fatal
from cadenza.domain.params import Scope
from cadenza.steps.builtin.ldap_sync import LdapSyncConfig, column_plan, render_base

MINIMAL = {"name": "s", "type": "ldap_sync", "connection": "dir", "base": "dc=example,dc=org",
           "target": {"connection": "w", "table": "people", "key": "uid"}}


def config(**values: Any) -> LdapSyncConfig:
    return LdapSyncConfig.model_validate({**MINIMAL, **values})


def errors(**values: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        config(**values)
    return " | ".join(str(e["msg"]) for e in caught.value.errors())


def test_defaults_beyond_the_spec_table() -> None:
    c = config()
    assert (c.multi_valued, c.page_size, c.batch_size) == ("join", 500, 1000)
    assert column_plan(c) == []  # the table's own columns choose the attributes


def test_the_columns_are_the_attributes_renamed_by_the_mapping() -> None:
    c = config(attributes=["uid", "mail", "telephoneNumber"],
               mapping={"TelephoneNumber": "phones", "dn": "dn", "cn": "name"})
    assert column_plan(c) == [("uid", "uid"), ("mail", "mail"), ("telephoneNumber", "phones"),
                              ("dn", "dn"), ("cn", "name")]


@pytest.mark.parametrize(("values", "fragment"), [
    ({"attributes": ["mail"]}, "target.key 'uid' is not among the columns written (mail)"),
    ({"mapping": {"cn": "name", "sn": "name", "uid": "uid"}},
     "column 'name' is written by more than one attribute"),
    ({"mapping": {"uid": "uid", "description": "deleted_at"}}, "the step's own"),
    ({"multi_valued": "csv"}, "'join' or 'json'"),
    ({"page_size": 0}, "greater than or equal to 1"),
    ({"filter": "(uid=a"}, "balanced parentheses"),
])
def test_bad_configs_are_refused_with_the_reason(values: dict[str, Any], fragment: str) -> None:
    assert fragment in errors(**values)


def scope(**params: Any) -> Scope:
    return Scope(params=params)


@pytest.mark.reliability_case(53)
def test_a_token_inside_the_base_is_one_escaped_rdn_value() -> None:
    template = "ou=${params.unit},dc=example,dc=org"
    assert render_base(template, scope(unit="sales")) == "ou=sales,dc=example,dc=org"
    hostile = render_base(template, scope(unit="x,dc=evil+cn=a\\b"))
    assert hostile == "ou=x\\,dc\\=evil\\+cn\\=a\\\\b,dc=example,dc=org"
    assert render_base(template, scope(unit="#1 ")).startswith("ou=\\#1\\ ,")


def test_a_token_that_is_the_whole_base_is_a_dn() -> None:
    assert render_base("${params.base}", scope(base="ou=a,dc=b")) == "ou=a,dc=b"


def test_an_unknown_parameter_in_the_base_is_fatal() -> None:
    with pytest.raises(Fatal, match=r"base: \$\{params.nope\}: no parameter 'nope'"):
        render_base("ou=${params.nope},dc=x", scope())
