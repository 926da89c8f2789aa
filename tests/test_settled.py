"""A quiet group as it was is carried before its grouping makes it (``Settled.token``): what
the last run settled comes back by its members' ids, and every input its settled key reads
must be as it was, or the group is made."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from corpus_index.linked.memo import Memo, memo_table, read_memo
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Carried, Group, Member
from corpus_index.linked.settled import Settled, quiet_index, quiet_mark
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
QUIET = (False, False)
DESCRIBED = "a-description-key"


def _settled(memo: Memo, known: set[str], context: tuple[str, ...] = CONTEXT) -> Settled:
    settled = Settled(memo, TENANT, "chat", context, lambda _: ("internal",), known)
    settled.start(BY_ID, Similarity(MESSAGES), known={u: b"\0" * 32 for u in IDS})
    return settled


def _last_run(group: Group = GROUP) -> tuple[str, Any]:
    """A run that makes ``group`` and keeps its settled entry: the group's id, and the table
    the next run reads its memo from."""
    memo = Memo(tenant_id=TENANT)
    settled = _settled(memo, set())
    assert not settled.carry(group, None, None, "", QUIET)  # nothing kept: made
    gid = settled.gid(group)
    memo.put(DESCRIBED, {"title": "Roast pumpkin"}, units=IDS)  # its description
    settled.described(gid, DESCRIBED)
    settled.settle(gid, group)
    return gid, memo_table([memo])


def _next_run(table: Any, known: set[str], context: tuple[str, ...] = CONTEXT) -> Settled:
    memo = Memo(read_memo(table), tenant_id=TENANT, quiet=quiet_index(table, TENANT))
    return _settled(memo, known, context)


def test_a_quiet_group_as_it_was_is_carried_by_its_members_ids() -> None:
    """Carried by the id kept beside it, its entries kept for the next run as they were."""
    gid, table = _last_run()
    settled = _next_run(table, {gid})
    assert settled.token("conversation", IDS, "", QUIET) == Carried("conversation", gid, (*IDS,))
    assert settled.carried == {gid} and settled.tokens == [Carried("conversation", gid, (*IDS,))]
    # both its entries are kept for the next run: the settled one and its description's
    assert memo_table([settled.memo], table).to_pylist() == table.to_pylist()


def test_a_group_with_a_check_to_come_is_not_kept_quiet() -> None:
    """Only a group with no priority, of a type whose grouping asks, is kept quiet."""
    busy = _with(GROUP, reprocess_priority=1)
    gid, table = _last_run(busy)
    assert quiet_index(table, TENANT) == {}
    assert _next_run(table, {gid}).token("conversation", IDS, "", QUIET) is None
    # nor a group of a type whose grouping never asks (an incident's row reads its window)
    _, table = _last_run(_with(GROUP, group_type="incident_context"))
    assert quiet_index(table, TENANT) == {}
    assert quiet_index(_last_run()[1], TENANT) != {}


def test_each_input_that_moved_has_the_group_made() -> None:
    """Refused when it has a check to come now, when its type, first member, mark or
    registry differ, when it is not in the last tables, or a member moved."""
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
    assert quiet_mark(qa) == "resolved|0.5"
    alone = _with(qa, members=qa.members[:1], resolution_status="timeout")
    assert quiet_mark(alone) == "timeout|None"
    assert quiet_mark(GROUP) == ""


def _with(group: Group, **fields: Any) -> Group:
    return replace(group, **fields)
