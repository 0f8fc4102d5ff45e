"""kept_spacing: the lines tomlkit rewrites on its own come back as the file had them."""

from __future__ import annotations

import tomlkit
from hypothesis import given
from hypothesis import strategies as st

from cadenza.config.tomlbody import kept_spacing
from cadenza.config.tomledit import set_job

ORIGINAL = """\
# dates in inline tables and arrays
[jobs.a]
params = { since = 2027-03-01 }   # a comment
days = [ 2027-03-01 , 2027-03-02 ]

[jobs.b]
params = { n = 1 }
"""


def test_tomlkit_rewrites_the_line_and_kept_spacing_gives_it_back() -> None:
    doc = tomlkit.parse(ORIGINAL)
    set_job(doc, "b", {"params": {"n": 2}})
    edited = doc.as_string()
    fixed = kept_spacing(ORIGINAL, edited)
    assert fixed == ORIGINAL.replace("{ n = 1 }", "{ n = 2 }")
    assert tomlkit.parse(fixed).unwrap() == tomlkit.parse(edited).unwrap()


def test_a_document_tomlkit_renders_as_read_is_left_alone() -> None:
    text = '[jobs.a]\nparams = { n = 1 }\n'
    assert kept_spacing(text, text.replace("1", "2")) == text.replace("1", "2")


def test_an_unparsable_original_changes_nothing() -> None:
    assert kept_spacing("[jobs.a\n", "x = 1\n") == "x = 1\n"


@given(st.lists(st.sampled_from([" ", "  ", ""]), min_size=4, max_size=4))
def test_only_blanks_ever_change(pads: list[str]) -> None:
    a, b, c, d = pads
    original = f"[jobs.a]\np = {{{a}x = 2027-03-01{b}}}\nq = [{c}10:00:00{d}]\n"
    rendered = tomlkit.parse(original).as_string()
    fixed = kept_spacing(original, rendered)
    assert fixed == original
    assert tomlkit.parse(fixed).unwrap() == tomlkit.parse(original).unwrap()
