"""Property: every key of any TOML document is located on a line that writes that key."""

from __future__ import annotations

import tomllib
from typing import Any

import tomlkit
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.config.locate import PositionIndex
from cadenza.config.problems import KeyPath

KEYS = st.sampled_from(["a", "b", "name", "x-y", "sales load", "q.d", "é"])
TEXT = st.text(alphabet=st.sampled_from(list("ab #[]{}=,'\"\\\n\té")), max_size=12)
SCALARS = st.one_of(st.integers(-5, 5), st.booleans(), TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=12,
)
DOCS = st.dictionaries(KEYS, st.one_of(VALUES, st.lists(st.dictionaries(KEYS, VALUES,
                                                                        min_size=1,
                                                                        max_size=3),
                                                        min_size=1, max_size=3)),
                       max_size=4)


def _paths(value: Any, path: KeyPath = ()) -> list[KeyPath]:
    out: list[KeyPath] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*path, key))
            out.extend(_paths(item, (*path, key)))
    elif isinstance(value, list):
        for k, item in enumerate(value):
            out.extend(_paths(item, (*path, k)))
    return out


@settings(max_examples=200, deadline=None)
@given(DOCS)
def test_every_key_is_found_where_it_is_written(doc: dict[str, Any]) -> None:
    text = tomlkit.dumps(doc)
    data = tomllib.loads(text)
    index = PositionIndex(text)
    lines = text.split("\n")
    for path in _paths(data):
        key = path[-1]
        if not isinstance(key, str):
            continue
        position = index.exact(path)
        assert position is not None, (path, text)
        line = lines[position[0] - 1]
        written = [key, tomlkit.key(key).as_string().strip()]
        assert any(w in line for w in written), (path, position, text)
