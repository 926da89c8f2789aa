"""The memo's keys (:mod:`corpus_index.linked.memo`): every part of a computation's inputs is in
its key, equal inputs give equal keys whichever objects hold them, and values of different
types or shapes never give the same bytes."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from corpus_index.linked.groups import link_units
from corpus_index.linked.memo import (
    Memo,
    UnitParts,
    code_digest,
    digest,
    encoded,
    memo_table,
    plain,
    read_memo,
    without_units,
)
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Group, Member
from tests.streamgen import stream

MESSAGE = Message("u1", "chat", "Sarah", "van booked for thursday", 1.75e9, mentions=("Tom",))
GROUP = Group("conversation", "chat", (Member("u1", 1, "initiator"), Member("u2", 2)))


def test_records_and_lists_are_laid_out_as_tuples_of_atoms() -> None:
    assert plain(Member("u1", 1)) == ("Member", "u1", 1, "response", False, 1.0)
    assert plain([1, [2, (3,)], "x"]) == (1, (2, (3,)), "x")
    laid = plain(GROUP)
    assert laid[:3] == ("Group", "conversation", "chat")
    assert laid[3] == (
        ("Member", "u1", 1, "initiator", False, 1.0),
        ("Member", "u2", 2, "response", False, 1.0),
    )
    assert plain({"a": 1}) == ("<builtins.dict>", "{'a': 1}")
    assert plain(np.float64(0.5))[0] == "<numpy.float64>"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (1, True),
        (0, False),
        (1, "1"),
        ("x", b"x"),
        (0.0, -0.0),
        (None, "None"),
        ((1, 2), ((1, 2),)),
        (("a", "b"), ("ab",)),
        (np.float64(0.5), 0.5),  # a NumPy scalar is not its float, nor its buffer's bytes
        (np.float64(0.5), np.float64(0.5).tobytes()),
        (np.zeros(2), np.zeros((2, 1))),
    ],
)
def test_different_values_give_different_bytes(a: object, b: object) -> None:
    assert encoded(plain(a)) != encoded(plain(b))


def test_equal_values_give_equal_bytes_whichever_objects_hold_them() -> None:
    word = "abc" * 3
    same = "".join(["abc"] * 3)
    assert word is not same
    assert encoded(plain((word, word))) == encoded(plain((word, same)))
    copy = replace(MESSAGE, text="".join(MESSAGE.text))
    assert encoded(plain(copy)) == encoded(plain(MESSAGE))


def test_a_change_to_any_part_changes_the_key() -> None:
    memo = Memo()
    parts = ("describe", GROUP, [memo.fingerprint(MESSAGE)], ["d0"], [("p1",)], None, "hint")
    key = memo.key(*parts)
    assert Memo().key(*parts) == key  # another run, the same key
    changed = [
        ("row", *parts[1:]),
        (parts[0], replace(GROUP, members=GROUP.members[:1]), *parts[2:]),
        (parts[0], replace(GROUP, coherence=0.5), *parts[2:]),
        (*parts[:2], [Memo().fingerprint(replace(MESSAGE, text="van booked"))], *parts[3:]),
        (*parts[:3], ["d1"], *parts[4:]),
        (*parts[:4], [("p2",)], *parts[5:]),
        (*parts[:5], "p1", parts[6]),
        (*parts[:6], None),
    ]
    keys = {memo.key(*c) for c in changed}
    assert key not in keys and len(keys) == len(changed)


def test_a_fingerprint_reads_every_field_of_a_message() -> None:
    memo = Memo()
    print_ = Memo().fingerprint(MESSAGE)
    assert memo.fingerprint(MESSAGE) == print_
    for change in [
        {"author": "Sarah J"},
        {"timestamp": 1.75e9 + 1},
        {"mentions": ()},
        {"reply_to": "u0"},
        {"system": True},
        {"location": "Site 0"},
        {"event_date": "2025-06-15"},
    ]:
        assert Memo().fingerprint(replace(MESSAGE, **change)) != print_, change


def _plainly(value: object) -> str:
    return hashlib.sha256(encoded(plain(value))).hexdigest()


def test_keys_are_the_digests_of_the_plain_layout_the_quick_way_too() -> None:
    messages = stream(400, channels=3, seed=2)
    groups = link_units(messages)
    assert {g.group_type for g in groups} >= {"conversation", "qa_pair", "daily_context"}
    odd = [
        replace(GROUP, members=(Member("u1", 1, relevance=np.float64(0.5)),)),  # type: ignore[arg-type]
        replace(GROUP, identity_anchors=["p1", "p2"]),  # type: ignore[arg-type]
        replace(GROUP, coherence=np.float64(0.5)),  # type: ignore[arg-type]
        replace(GROUP, members=[Member("u1", 1)]),  # type: ignore[arg-type]
        replace(GROUP, topic_tags=("van", np.str_("keys"))),
    ]
    for value in [*groups, *odd, *[m for g in groups for m in g.members], *messages]:
        assert digest(value) == _plainly(value)
    memo = Memo()
    parts: tuple[Any, ...] = ("describe", groups[0], [b"d1", b"d2"], ["p1"], None, 0.5)
    assert memo.key(*parts) == _plainly((code_digest(), *parts))
    assert memo.key(*parts[:2], [b"d1", np.bytes_(b"d2")]) != memo.key(*parts[:3])
    for a, b in zip(odd, odd[1:], strict=False):
        assert memo.key("describe", a) != memo.key("describe", b)


def test_a_unit_s_parts_are_made_once_and_read_in_the_order_asked() -> None:
    made: list[str] = []

    def read(unit: str) -> tuple[Any, ...]:
        made.append(unit)
        return ("print-" + unit, ["anchor", unit[-1]])

    parts = UnitParts(read)
    first = parts([Member("u1", 1), Member("u2", 2)])
    again = parts([MESSAGE, Member("u3", 1), Member("u2", 2), Member("u3", 2)])
    assert made == ["u1", "u2", "u3"]  # each unit once, whoever asks for it
    assert again[0] == first[0] and again[2] == first[1] and again[1] == again[3]
    assert len(set(first + again)) == 3
    assert first[0] == hashlib.sha256(encoded(plain(read("u1")))).digest()
    flat = UnitParts(lambda unit: ("print-" + unit, "anchor", unit[-1]))
    assert flat([MESSAGE]) == [hashlib.sha256(encoded(plain(("print-u1", "anchor", "1")))).digest()]


def test_an_entry_found_by_has_is_kept_for_the_next_run_as_by_get() -> None:
    earlier = Memo([{"key": "k1", "value": '"g1"', "tenant_id": "t"}], tenant_id="t")
    assert earlier.has("k1") and not earlier.has("k2")
    assert earlier.kept == {"k1": '"g1"'} and earlier.reused == 1
    by_get = Memo([{"key": "k1", "value": '"g1"', "tenant_id": "t"}], tenant_id="t")
    assert by_get.get("k1") == "g1" and by_get.kept == earlier.kept
    other = Memo([{"key": "k1", "value": '"g1"', "tenant_id": "t"}], tenant_id="u")
    assert not other.has("k1") and other.kept == {}  # another tenant's entry is never read


def test_a_memo_reads_its_tenants_entries_from_the_table_as_from_its_rows() -> None:
    first = Memo(tenant_id="t")
    first.put("k1", {"title": "van"}, units=["u1"])
    other = Memo(tenant_id="u")
    other.put("k2", [1], units=["u9"])
    table = memo_table([first, other])
    for tenant, key, value in (("t", "k1", {"title": "van"}), ("u", "k2", [1])):
        rows, whole = Memo(read_memo(table), tenant_id=tenant), Memo(table, tenant_id=tenant)
        assert whole.get(key) == rows.get(key) == value
        assert not whole.has({"k1", "k2"}.difference({key}).pop())  # the other tenant's


def test_a_run_keeps_the_units_of_what_it_computed_and_of_what_it_reused() -> None:
    first = Memo(tenant_id="t")
    first.put("describe", {"title": "van"}, units=["u2", "u1", "u2"])
    # no units named: read from any unit before it, the newest at 5.0
    first.put("checkpoint", [[0], {}, 1.0], until=5.0)
    table = memo_table([first])
    assert table.column_names == ["key", "value", "tenant_id", "units", "until"]
    assert table["until"].to_pylist() == [5.0, None]  # carried with the entry when reused
    assert dict(zip(table["key"].to_pylist(), table["units"].to_pylist(), strict=True)) == {
        "checkpoint": None,
        "describe": ["u1", "u2"],
    }
    later = Memo(read_memo(table), tenant_id="t")
    assert later.get("describe") == {"title": "van"} and later.has("checkpoint")
    later.put("qa", [], units=["u3"])
    again = memo_table([later], table)
    assert again.to_pylist() == [
        *table.to_pylist(),
        {"key": "qa", "value": "[]", "tenant_id": "t", "units": ["u3"], "until": None},
    ]
    # without the earlier table the reused entries' units are not known: read from any unit
    assert memo_table([later])["units"].to_pylist() == [None, None, ["u3"]]
    # ... nor from a table written before entries kept their units
    older = table.drop_columns(["units"])
    assert memo_table([later], older)["units"].to_pylist() == [None, None, ["u3"]]


def test_a_deletion_drops_the_entries_that_read_a_removed_unit_and_only_those() -> None:
    memo = Memo(tenant_id="t")
    memo.put("a", "x", units=["u1", "u2"])
    memo.put("b", "y", units=["u3"])
    memo.put("c", "z", units=[])
    memo.put("d", "w")  # any unit
    table = memo_table([memo])
    assert without_units(table, ["u2"])["key"].to_pylist() == ["b", "c"]
    assert without_units(table, ["u9"])["key"].to_pylist() == ["a", "b", "c"]
    assert without_units(table, []).equals(table)  # nothing removed, nothing dropped
    # a table written before entries kept their units: every entry may have read the unit
    old = table.drop_columns(["units"])
    assert without_units(old, ["u9"]).num_rows == 0
    assert without_units(old.slice(0, 0), ["u1"]).num_rows == 0


def test_a_checkpoint_stays_when_every_removed_unit_is_newer_than_it() -> None:
    """An entry of null units read any unit up to its ``until`` time: a deletion keeps it
    only when every removed unit's time is known and later."""
    memo = Memo(tenant_id="t")
    memo.put("a", "x", units=["u1"])
    memo.put("early", "c1", until=100.0)
    memo.put("late", "c2", until=200.0)
    memo.put("any", "c3")  # no time: any unit
    memo.put("b", "y", units=["u2"], until=50.0)  # a time beside units means nothing
    table = memo_table([memo])
    assert table["until"].to_pylist() == [None, None, None, 100.0, 200.0]  # a, any, b, ...

    def left(units: list[str], times: dict[str, float] | None) -> list[str]:
        return without_units(table, units, times)["key"].to_pylist()

    assert left(["u9"], {"u9": 150.0}) == ["a", "b", "early"]
    assert left(["u9"], {"u9": 250.0}) == ["a", "b", "early", "late"]
    assert left(["u9"], {"u9": 100.0}) == ["a", "b"]  # at its time: it may have read it
    assert left(["u1", "u9"], {"u1": 300.0, "u9": 150.0}) == ["b", "early"]
    assert left(["u9"], None) == ["a", "b"]  # the time unknown: any checkpoint may hold it
    assert left(["u9", "u8"], {"u9": 300.0}) == ["a", "b"]
    # a table written before checkpoints kept their time: each read every unit
    assert without_units(table.drop_columns(["until"]), ["u9"], {"u9": 300.0})[
        "key"
    ].to_pylist() == ["a", "b"]
