"""The memo's keys (:mod:`corpus_index.linked.memo`): every part of a computation's inputs is in
its key, equal inputs give equal keys whichever objects hold them, and values of different
types or shapes never give the same bytes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from corpus_index.linked.memo import Memo, encoded, plain
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Group, Member

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
