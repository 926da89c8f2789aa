"""A conversation, question or day as it was is carried before its grouping makes it
(``Settled.token``): what the last run settled comes back by its members' ids, with its
priority and anchor, and every input its settled key reads must be as it was, its timing
included, or the group is made."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from corpus_index.linked.memo import Memo, memo_table, read_memo
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Carried, Group, Member
from corpus_index.linked.settled import Settled, members_key, row_mark, unmade_index
from corpus_index.linked.similarity import Similarity

TENANT = "wattle"
CONTEXT = ("registry-1", "rows-1")
IDS = ["m1", "m2", "m3"]
MESSAGES = [
    Message(u, "staff", "Sarah", f"roast pumpkin for christmas {k}", 1000.0 + 60 * k)
    for k, u in enumerate(IDS)
]
BY_ID = {m.unit_id: m for m in MESSAGES}
GROUP = Group(
    group_type="conversation",
    processing_profile="chat",
    members=tuple(Member(u, k + 1) for k, u in enumerate(IDS)),
    resolution_status="resolved",
)
QUIET = (False, False)  # not active, no validation pass to come
DESCRIBED = "a-description-key"


def _settled(memo: Memo, known: set[str], context: tuple[str, ...] = CONTEXT) -> Settled:
    settled = Settled(memo, TENANT, "chat", context, lambda _: ("internal",), known)
    settled.start(BY_ID, Similarity(MESSAGES), known={u: b"\0" * 32 for u in IDS})
    return settled


def _last_run(group: Group = GROUP, timed: tuple[bool, bool] = QUIET) -> tuple[str, Any]:
    """A run that makes ``group`` (of timing ``timed``) and keeps its settled entry: the
    group's id, and the table the next run reads its memo from."""
    memo = Memo(tenant_id=TENANT)
    settled = _settled(memo, set())
    assert not settled.carry(group, None, None, "", timed)  # nothing kept: made
    gid = settled.gid(group)
    memo.put(DESCRIBED, {"title": "Roast pumpkin"}, units=IDS)  # its description
    settled.described(gid, DESCRIBED)
    settled.settle(gid, group)
    return gid, memo_table([memo])


def _next_run(table: Any, known: set[str], context: tuple[str, ...] = CONTEXT) -> Settled:
    memo = Memo(read_memo(table), tenant_id=TENANT, unmade=unmade_index(table, TENANT))
    return _settled(memo, known, context)


def test_a_group_as_it_was_is_carried_by_its_members_ids() -> None:
    """Carried by the id kept beside it, its entries kept for the next run as they were."""
    gid, table = _last_run()
    settled = _next_run(table, {gid})
    carried = Carried("conversation", gid, (*IDS,), 0, "m1")
    assert settled.token("conversation", IDS, "", QUIET) == carried
    assert settled.carried == {gid} and settled.tokens == [carried]
    # both its entries are kept for the next run: the settled one and its description's
    assert memo_table([settled.memo], table).to_pylist() == table.to_pylist()


def test_a_group_with_a_check_to_come_is_carried_with_its_priority_at_its_timing() -> None:
    """A group made with a priority comes back with it and its anchor (what its queue item
    reads), at the timing it was made at only; a type whose grouping never asks is not kept
    (an incident's row reads its window)."""
    validating = (False, True)
    m1, m2, m3 = GROUP.members
    busy = _with(GROUP, reprocess_priority=3, members=(m1, replace(m2, primary=True), m3))
    gid, table = _last_run(busy, validating)
    assert _next_run(table, {gid}).token("conversation", IDS, "", validating) == Carried(
        "conversation", gid, (*IDS,), 3, "m2"
    )
    assert _next_run(table, {gid}).token("conversation", IDS, "", QUIET) is None
    assert _next_run(table, {gid}).token("conversation", IDS, "", (True, True)) is None
    _, table = _last_run(_with(GROUP, group_type="incident_context"))
    assert unmade_index(table, TENANT) == {}
    assert unmade_index(_last_run()[1], TENANT) != {}


def test_each_input_that_moved_has_the_group_made() -> None:
    """Refused when its timing, type, first member, mark or registry differ, when it is not
    in the last tables, or a member moved."""
    gid, table = _last_run()
    refused = {
        "active now": _next_run(table, {gid}).token("conversation", IDS, "", (True, False)),
        "validation to come": _next_run(table, {gid}).token("conversation", IDS, "", (False, True)),
        "another type": _next_run(table, {gid}).token("daily_context", IDS, "", QUIET),
        "another first member": _next_run(table, {gid}).token(
            "conversation", [IDS[1], IDS[0], IDS[2]], "", QUIET
        ),
        "another mark": _next_run(table, {gid}).token("conversation", IDS, "timeout|None", QUIET),
        "another registry": _next_run(table, {gid}, ("registry-2", "rows-1")).token(
            "conversation", IDS, "", QUIET
        ),
        "not in the last tables": _next_run(table, set()).token("conversation", IDS, "", QUIET),
        "other members": _next_run(table, {gid}).token("conversation", IDS[:2], "", QUIET),
    }
    assert refused == dict.fromkeys(refused)
    moved = _next_run(table, {gid})
    moved._unchanged = {u: b"\0" * 32 for u in IDS[:2]}  # m3 changed or weighed anew
    assert moved.token("conversation", IDS, "", QUIET) is None
    assert _next_run(table, {gid}).token("conversation", IDS, "", QUIET) is not None


def test_a_questions_mark_is_its_resolution_and_its_answers_relevance() -> None:
    qa = Group(
        group_type="qa_pair",
        processing_profile="chat",
        members=(
            Member("m1", 1, "initiator", primary=True),
            Member("m2", 2, "resolution", relevance=0.5),
        ),
        resolution_status="resolved",
    )
    assert row_mark(qa) == "resolved|0.5"
    alone = _with(qa, members=qa.members[:1], resolution_status="timeout")
    assert row_mark(alone) == "timeout|None"
    assert row_mark(GROUP) == ""


def _with(group: Group, **fields: Any) -> Group:
    return replace(group, **fields)


def test_an_entry_that_is_not_json_leaves_the_others_carried() -> None:
    """The entries are decoded together; one damaged (or of another layout, or with the
    members' separator inside an id) is left out, and its group is made, while the others
    are still carried."""
    gid, table = _last_run()
    rows = table.to_pylist()
    entry = next(r for r in rows if r["value"].startswith('["unmade",'))
    damaged = {**entry, "key": "damaged", "value": '["unmade", "cut', "units": ["x1", "x2"]}
    short = {**entry, "key": "short", "value": '["unmade", "a"]', "units": ["y1"]}
    # an id holding the separator would join to the same members' key: left out
    tricky = {**entry, "key": "tricky", "units": ["m1\x1fm2", "m3"]}
    table = type(table).from_pylist([*rows, damaged, short, tricky], table.schema)
    index = unmade_index(table, TENANT)
    assert set(index) == {members_key(IDS)}
    assert index[members_key(IDS)][0] == entry["key"]
    assert _next_run(table, {gid}).token("conversation", IDS, "", QUIET) is not None
