"""The ``default-v1`` input format (DESIGN §4, RFC 0013): normative vector, rules, invariants."""

from __future__ import annotations

import copy
import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_index.inputs import default_v1, input_units

FIXTURE = Path(__file__).parent / "fixtures" / "corpus-fixtures" / "03-default-input-format"


def test_fixture_03_matches_expected_input_exactly() -> None:
    block = json.loads((FIXTURE / "block.json").read_text(encoding="utf-8"))
    # newline="" keeps the file's bytes as they are: no newline translation, no trailing newline
    with open(FIXTURE / "expected-input.txt", encoding="utf-8", newline="") as fh:
        expected = fh.read()
    assert not expected.endswith("\n"), "expected-input.txt has no trailing newline by definition"
    assert default_v1(block["section"], block["content"]) == expected


def test_fixture_03_is_what_the_pipeline_embeds() -> None:
    block = json.loads((FIXTURE / "block.json").read_text(encoding="utf-8"))
    expected = (FIXTURE / "expected-input.txt").read_bytes().decode("utf-8")
    (unit,) = input_units(
        "default-v1", section=block["section"], content=block["content"], source_type="uw_block"
    )
    assert unit.text == expected


RULES: list[tuple[str, dict[str, Any], str]] = [
    ("section line alone when nothing is a string", {"n": 1, "b": True, "z": None}, "s"),
    ("empty block", {}, "s"),
    (
        "numbers, booleans and nulls skipped",
        {"a": 1, "b": 2.5, "c": False, "d": None, "e": "x"},
        "s\ne: x",
    ),
    (
        "strings that look like numbers are strings",
        {"rate": "5.75%", "units": "30"},
        "s\nrate: 5.75%\nunits: 30",
    ),
    ("empty string skipped", {"a": "", "b": "x"}, "s\nb: x"),
    ("whitespace-only string skipped", {"a": " \t\n ", "b": "x"}, "s\nb: x"),
    ("whitespace collapsed and trimmed", {"a": "  x \t y\n\nz\r\n "}, "s\na: x y z"),
    ("nested mapping path", {"a": {"b": {"c": "v"}}}, "s\na.b.c: v"),
    ("list of mappings path", {"f": [{"d": "x"}, {"d": "y"}]}, "s\nf[0].d: x\nf[1].d: y"),
    ("list index is the source position", {"x": ["a", 3, "", "b"]}, "s\nx[0]: a\nx[3]: b"),
    ("list inside list", {"m": [["a"], [], ["b", "c"]]}, "s\nm[0][0]: a\nm[2][0]: b\nm[2][1]: c"),
    ("empty containers emit nothing", {"a": [], "b": {}, "c": "x"}, "s\nc: x"),
    (
        "source order, not alphabetical",
        {"z": "1", "a": "2", "m": {"y": "3", "b": "4"}},
        "s\nz: 1\na: 2\nm.y: 3\nm.b: 4",
    ),
    (
        "_meta skipped except notes, which come last",
        {"_meta": {"author": "x", "notes": ["n1", "n2"]}, "a": "v"},
        "s\na: v\nnotes: n1\nnotes: n2",
    ),
    (
        "notes normalized, empty notes skipped",
        {"_meta": {"notes": [" n \n1 ", "", "  "]}},
        "s\nnotes: n 1",
    ),
    ("non-string notes skipped", {"_meta": {"notes": ["ok", 3, None, True]}}, "s\nnotes: ok"),
    ("a single string note", {"_meta": {"notes": "only one"}}, "s\nnotes: only one"),
    ("_meta that is not a mapping is skipped", {"_meta": "text", "a": "v"}, "s\na: v"),
    (
        "only the block-level _meta is special",
        {"x": {"_meta": {"notes": ["n"]}}},
        "s\nx._meta.notes[0]: n",
    ),
    ("other underscore keys are ordinary", {"_source": "om"}, "s\n_source: om"),
    ("non-ASCII kept as is", {"a": "Álvarez — São Paulo"}, "s\na: Álvarez — São Paulo"),
]


@pytest.mark.parametrize(("content", "expected"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_default_v1_rules(content: dict[str, Any], expected: str) -> None:
    assert default_v1("s", content) == expected


# -- invariants -----------------------------------------------------------------------------

# Keys and strings carry no decimal digits, so any digit in the output outside a list index
# can only have come from a numeric field. Keys exclude whitespace: keys are not normalized.
_keys = st.text(alphabet=string.ascii_letters + "_-", min_size=1, max_size=6)
_strings = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=("Nd", "Cs")),
        st.sampled_from(" \t\n\r\x0b\x0c\u00a0\u2028"),
    ),
    max_size=20,
)
_numbers = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
_leaves = st.one_of(st.none(), st.booleans(), _numbers, _strings)
_values = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_keys, children, max_size=4)
    ),
    max_leaves=20,
)
_meta = st.fixed_dictionaries(
    {}, optional={"notes": st.lists(st.one_of(_strings, _numbers), max_size=3), "author": _strings}
)
_content = st.builds(
    lambda body, meta: {**body, "_meta": meta} if meta is not None else body,
    st.dictionaries(_keys.filter(lambda k: k != "_meta"), _values, max_size=6),
    st.one_of(st.none(), _meta),
)
_sections = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12)
_INDEX = re.compile(r"\[\d+\]")


def _visible_strings(value: Any) -> int:
    if isinstance(value, str):
        return 1 if value.split() else 0
    if isinstance(value, dict):
        return sum(_visible_strings(v) for v in value.values())
    if isinstance(value, list):
        return sum(_visible_strings(v) for v in value)
    return 0


@settings(max_examples=300, deadline=None)
@given(section=_sections, content=_content)
def test_default_v1_is_deterministic_and_leaks_no_numbers(
    section: str, content: dict[str, Any]
) -> None:
    text = default_v1(section, content)

    assert default_v1(section, copy.deepcopy(content)) == text
    assert default_v1(section, json.loads(json.dumps(content))) == text

    assert "\n\n" not in text
    assert not re.search(r"\d", _INDEX.sub("", text)), "a number from a numeric field leaked"

    lines = text.split("\n")
    assert lines[0] == section
    for line in lines[1:]:
        assert ": " in line
        assert line == line.strip()
        assert not re.search(r"\s\s", line) and "\t" not in line and "\r" not in line

    body = {k: v for k, v in content.items() if k != "_meta"}
    notes = content.get("_meta", {}).get("notes", [])
    expected_lines = 1 + _visible_strings(body) + _visible_strings(notes)
    assert len(lines) == expected_lines, "a boolean, null or empty value produced a line"


DOCUMENT = {
    "deal_id": "DEAL-2024-0093",
    "title": "Lakeview Courtyard Apartments",
    "asset_class": "multifamily",
    "metro": "Chicago",
    "state": "IL",
    "units": 58,
    "deal_date": "2024-05-16",
}


def test_default_v2_puts_the_document_context_first() -> None:
    content = {"summary": "Rents   grew.", "_meta": {"notes": "watch supply"}}
    (v1,) = input_units(
        "default-v1", section="market_analysis", content=content, source_type="uw_block"
    )
    (v2,) = input_units(
        "default-v2",
        section="market_analysis",
        content=content,
        source_type="uw_block",
        document=DOCUMENT,
    )
    assert v2.text == (
        "Lakeview Courtyard Apartments | multifamily in Chicago, IL | 58 units | 2024-05-16\n"
        + v1.text
    )
    # a new format is a new name: the same text under another format has another hash
    assert v1.input_hash != v2.input_hash


def test_default_v2_degrades_to_v1_without_context_and_leaves_passages_alone() -> None:
    content = {"summary": "x"}
    (v1,) = input_units("default-v1", section="s", content=content, source_type="uw_block")
    (bare,) = input_units("default-v2", section="s", content=content, source_type="uw_block")
    assert bare.text == v1.text
    passage = {"title": "T", "text": "body"}
    (p1,) = input_units("default-v1", section="passage", content=passage, source_type="passage")
    (p2,) = input_units(
        "default-v2", section="passage", content=passage, source_type="passage", document=DOCUMENT
    )
    assert p1.text == p2.text == "T body"
