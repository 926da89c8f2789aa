"""Groups settled since the last run: a group whose every input is as it was is carried whole,
its row and member rows taken from the last run's tables, without being described or its
members' people resolved again.

A group's row is a function of: the group as its grouping made it (members, roles,
relevance, and what the grouping judged at ``now``: a question's timeout, an incident's
completeness), the person it is about and its title hint, what its type adds after the
description (a decision's summary, a topic's title), whether it is still active or has its
validation pass to come at ``now`` (:func:`~corpus_index.linked.groups._timed`), and of each
member: the unit (its fingerprint), what its TF-IDF vector is weighed by
(:meth:`~corpus_index.linked.similarity.Similarity.block_digest`) and its access scope; of the
tenant: what its identity registry resolves (a digest of the registry and of the code that
reads it, which stands for every member's identity anchors and the names the group's text
gives its authors); and the code of the groupings and of the rows. The settled key
(:meth:`Settled.carry`) hashes all of these, one short digest a member, and is the row's key:
a group not settled has its row made anew (the same row makes the same ``chunk_ref``, so
nothing is embedded again). A key the last run kept names the description's key, which is
kept too: a later run that cannot settle, after a registry change say, still finds the
description.

A conversation, a question or a day is carried before its grouping even makes it
(:meth:`Settled.token`): its row reads nothing but its members' units, who its members are,
what it holds beside them (:func:`row_mark`: a question's resolution and answer's relevance)
and its timing at the run's time (whether it is active, and has its validation pass to come).
Its settled entry, kept under its members' ids (the memo's ``units``), holds beside its
description's key the group's id, type and first member, its mark, a digest of the context
and the code, its timing, and its re-processing priority and anchor (what its queue item
reads beside its members). A run whose grouping finds the same members, the same mark and
timing, every member as it was and weighed as it was (the digests
:mod:`corpus_index.linked.lastrun` takes) and the same digest, takes the kept id: its settled
key would be the kept one, since the group's record is made of these alone. Neither the group
nor its key is made (a one-message run at 50,000 messages spent about a fifth of its time
making and hashing groups that were then carried); one with a priority keeps its queue item
(:func:`~corpus_index.linked.reprocess.queue_of` reads it from what was kept).

A key is kept only for a group whose row the run wrote or carried, so a settled group's row is
in the last run's tables: the ``linked_groups`` step writes the tables and the memo together,
and deleting a unit drops the entries that read it (each names its members) with its groups.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.linked.memo import Memo, UnitParts, code_digest, digest
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Carried, Group, anchor_of, group_id
from corpus_index.linked.similarity import Similarity

# the first item of the settled entry of a group carried before it is made (Settled.token)
UNMADE = "unmade"
# the groups a grouping may carry whole before making them: those a row reads of nothing but
# their members' units, the group's members, :func:`row_mark` and the group's timing
UNMADE_TYPES = frozenset({"conversation", "qa_pair", "daily_context"})


class _Unmade(NamedTuple):
    """The settled entry of a group a grouping may carry before making it, as the memo keeps
    it (a JSON list, in this order)."""

    marker: str  # UNMADE
    described: str  # its description's key
    gid: str
    group_type: str
    first: str  # its first member
    mark: str  # :func:`row_mark`
    signature: str  # the context's and the code's digest
    timing: list[bool]  # whether it was active, and had its validation pass to come
    priority: int
    anchor: str


@dataclass(slots=True)
class Settled:
    """What a tenant's run needs to carry settled groups, and what it carried.

    Args:
        memo: the tenant's memo (the last run's entries, and this run's).
        tenant_id, collection: whose groups (their ids are made from these).
        context: what every row of the tenant reads besides its members: the registry's and
            its code's digest, the row code's, the key of the fit its text is cut by.
        scope: a unit's access scope as its group's row reads it (tier, ACL groups).
        known: the ids of the groups in the last run's tables (only these can be carried).
    """

    memo: Memo
    tenant_id: str
    collection: str
    context: tuple[Any, ...]
    scope: Callable[[str], tuple[Any, ...]]
    known: Collection[str]
    carried: set[str] = field(default_factory=set)
    # group id -> (its settled key, its description's key, its timing), for the rows made
    pending: dict[str, tuple[str, str, tuple[bool, ...]]] = field(default_factory=dict)
    _gids: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict)
    # what a settled key reads of each member (after :meth:`start`)
    parts: UnitParts | None = None
    # the groups carried whole by :meth:`token`, in the order asked
    tokens: list[Carried] = field(default_factory=list)
    # the digests of the units as they were and weighed as they were (after :meth:`start`)
    _unchanged: Mapping[str, bytes] = field(default_factory=dict)
    _signature: str = ""

    def start(
        self,
        by_id: Mapping[str, Message],
        similarity: Similarity,
        known: Mapping[str, bytes] | None = None,
    ) -> None:
        """Bind the run's units and their weighing (by :func:`link_units`); ``known``: the
        digests of what a key reads of the units that are as they were and weighed as they
        were (unit id -> the last run's), taken instead of made again."""
        memo, scope = self.memo, self.scope  # not ``self``: no cycle through ``parts``

        def read(unit: str) -> tuple[Any, ...]:
            m = by_id[unit]
            return (memo.fingerprint(m), similarity.block_digest(unit), *scope(unit))

        self.parts = UnitParts(read, known)
        self._unchanged = known or {}
        self._signature = digest((code_digest(), UNMADE, self.context))

    def gid(self, group: Group) -> str:
        """The group's id (made once a run)."""
        what = (group.group_type, group.member_ids)
        found = self._gids.get(what)
        if found is None:
            found = group_id(self.tenant_id, self.collection, group.group_type, what[1])
            self._gids[what] = found
        return found

    def carry(
        self, group: Group, primary: str | None, hint: str | None, post: str, timed: Sequence[bool]
    ) -> bool:
        """Whether ``group`` (as its grouping made it) is carried: the last run kept its
        settled key and wrote its row. Otherwise its key waits for :meth:`settle`, once its
        row is made. ``timed``: whether it is active, and has its validation pass to come,
        at ``now``."""
        assert self.parts is not None, "Settled.start first"
        gid = self.gid(group)
        memo = self.memo
        key = memo.key(
            "settled",
            self.context,
            gid,
            group,
            self.parts(group.members),
            primary,
            hint,
            post,
            tuple(timed),
        )
        kept = memo.get(key) if gid in self.known else None
        if kept is None:
            self.pending[gid] = (key, "", tuple(timed))
            return False
        # its description's, for a run that cannot settle it
        memo.has(_Unmade(*kept).described if isinstance(kept, list) else str(kept))
        self.carried.add(gid)
        return True

    def described(self, gid: str, describe_key: str) -> None:
        """Record the description key the run used for ``gid`` (kept beside its settled key)."""
        pending = self.pending.get(gid)
        if pending is not None:
            self.pending[gid] = (pending[0], describe_key, pending[2])

    def token(
        self, group_type: str, ids: Sequence[str], mark: str, timed: Sequence[bool]
    ) -> Carried | None:
        """The group a grouping is about to make (of ``group_type``, of the units ``ids`` in
        order, holding ``mark`` beside them, see :func:`row_mark`), carried whole when it
        is as the last run kept it: of the same type, first member and mark, and of the same
        timing (``timed``: whether it is active, and has its validation pass to come, at
        ``now``), and every unit of it is as it was and weighed as it was, under the same
        registry and code. Its settled key would then be the one kept: the group is carried
        by the id kept beside it, with the priority and anchor kept there, without being
        made, and its entries are kept for the next run. None otherwise (it is made)."""
        found = self.memo.unmade.get(members_key(ids))
        if found is None:
            return None
        key, value = found
        kept = _Unmade(*value)
        if (
            kept.gid not in self.known
            or (kept.group_type, kept.first, kept.mark) != (group_type, ids[0], mark)
            or kept.signature != self._signature
            or kept.timing != list(timed)
            or not all(map(self._unchanged.__contains__, ids))
        ):
            return None
        self.memo.has(key)
        self.memo.has(kept.described)  # for a run that cannot settle it
        self.carried.add(kept.gid)
        made = Carried(group_type, kept.gid, tuple(ids), kept.priority, kept.anchor)
        self.tokens.append(made)
        return made

    def settle(self, gid: str, group: Group) -> None:
        """Keep the settled key of ``gid``, whose row this run made from ``group`` (as the
        run returned it): the next run carries it while its inputs stay, a conversation, a
        question or a day without making it (:meth:`token`)."""
        pending = self.pending.pop(gid, None)
        if pending is None or not pending[1]:
            return
        key, described, timing = pending
        value: Any = described
        if group.group_type in UNMADE_TYPES:
            value = list(
                _Unmade(
                    UNMADE,
                    described,
                    gid,
                    group.group_type,
                    group.members[0].unit_id,
                    row_mark(group),
                    self._signature,
                    list(timing),
                    group.reprocess_priority,
                    anchor_of(group),
                )
            )
        self.memo.put(key, value, units=group.member_ids, computed=False)


def row_mark(group: Group) -> str:
    """What the row of a group carried before it is made reads beside its members' units,
    its members (who they are, in order) and its timing: a question's resolution and its
    answer's relevance; nothing for a conversation or a day."""
    if group.group_type != "qa_pair":
        return ""
    answer = group.members[1].relevance if len(group.members) > 1 else None
    return question_mark(group.resolution_status, answer)


def question_mark(resolution: str, relevance: float | None) -> str:
    """:func:`row_mark` of a question's group, from its resolution and its answer's
    relevance (None: no answer), as its grouping asks before making it."""
    return f"{resolution}|{relevance!r}"


def members_key(ids: Iterable[str]) -> str:
    """A group's members' ids as :func:`unmade_index` finds its entry by: sorted, joined
    (an id holding the separator matches no entry: see there)."""
    return _SEPARATOR.join(sorted(ids))


_SEPARATOR = "\x1f"  # in no unit id (the unit separator, a control character)


def unmade_index(table: pa.Table | None, tenant: str) -> dict[str, tuple[str, list[Any]]]:
    """The settled entries of ``tenant``'s groups in ``table`` (the last run's
    ``group_memo``) that a grouping may carry before making them: their members' ids
    (:func:`members_key`: the memo keeps an entry's units sorted) -> the entry's key and
    value (decoded: its fields in :class:`_Unmade`'s order), for :meth:`Settled.token`. An
    entry of another layout is left out (its group is made)."""
    if table is None or not table.num_rows or "units" not in table.column_names:
        return {}
    mine = pc.and_(
        pc.equal(table["tenant_id"], tenant),
        pc.starts_with(table["value"], f'["{UNMADE}",'),
    )
    chosen = table.filter(mine)
    # joined in Arrow (no list of ids made an entry); an entry with the separator inside an
    # id would be found by other members' ids: left out
    joined = pc.binary_join(chosen["units"], _SEPARATOR)
    separators = pc.subtract(pc.list_value_length(chosen["units"]), 1)
    clean = pc.fill_null(pc.equal(pc.count_substring(joined, _SEPARATOR), separators), False)
    chosen, joined = chosen.filter(clean), joined.filter(clean)
    rows = {
        "key": chosen["key"].to_pylist(),
        "value": chosen["value"].to_pylist(),
        "units": joined.to_pylist(),
    }
    try:  # one decoding of every entry: each is a JSON list the memo wrote
        values = json.loads("[" + ",".join(rows["value"]) + "]")
    except ValueError:  # one damaged: the others decoded one by one
        values = list(map(_decoded, rows["value"]))
    return {
        units: (key, value)
        for key, value, units in zip(rows["key"], values, rows["units"], strict=True)
        if units and isinstance(value, list) and len(value) == len(_Unmade._fields)
    }


def _decoded(raw: str) -> Any:
    """``raw`` decoded as JSON; None when it is not JSON."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


def dated(group: Group, by_id: Mapping[str, Message]) -> Group:
    """``group`` with its earliest and latest content times from its members (as
    :func:`~corpus_index.linked.describe.describe` sets them); itself when its grouping set
    them so (a conversation does)."""
    times = [by_id[u].timestamp for u in group.member_ids]
    first, last = min(times), max(times)
    if group.earliest_content_at == first and group.latest_content_at == last:
        return group
    return replace(group, earliest_content_at=first, latest_content_at=last)
