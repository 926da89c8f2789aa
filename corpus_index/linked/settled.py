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

A key is kept only for a group whose row the run wrote or carried, so a settled group's row is
in the last run's tables: the ``linked_groups`` step writes the tables and the memo together,
and deleting a unit drops the entries that read it (each names its members) with its groups.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from corpus_index.linked.memo import Memo, UnitParts
from corpus_index.linked.messages import Message
from corpus_index.linked.records import Group, group_id
from corpus_index.linked.similarity import Similarity


@dataclass(slots=True)
class Settled:
    """What a tenant's run needs to carry settled groups, and what it carried.

    Args:
        memo: the tenant's memo (the last run's entries, and this run's).
        tenant_id, collection: whose groups (their ids are made from these).
        context: what every row of the tenant reads besides its members: the registry's and
            its code's digest, the row code's.
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
    # group id -> (its settled key, its description's key), for the rows made this run
    pending: dict[str, tuple[str, str]] = field(default_factory=dict)
    _gids: dict[tuple[str, tuple[str, ...]], str] = field(default_factory=dict)
    # what a settled key reads of each member (after :meth:`start`)
    parts: UnitParts | None = None

    def start(
        self,
        by_id: Mapping[str, Message],
        similarity: Similarity,
        known: Mapping[str, bytes] | None = None,
    ) -> None:
        """Bind the run's units and their weighing (by :func:`link_units`); ``known``: the
        digests of what a key reads of the units that are as they were and weighed as they
        were (unit id -> the last run's), taken instead of made again."""
        memo = self.memo

        def read(unit: str) -> tuple[Any, ...]:
            m = by_id[unit]
            return (memo.fingerprint(m), similarity.block_digest(unit), *self.scope(unit))

        self.parts = UnitParts(read, known)

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
            self.pending[gid] = (key, "")
            return False
        memo.has(str(kept))  # its description's, for a run that cannot settle it
        self.carried.add(gid)
        return True

    def described(self, gid: str, describe_key: str) -> None:
        """Record the description key the run used for ``gid`` (kept beside its settled key)."""
        pending = self.pending.get(gid)
        if pending is not None:
            self.pending[gid] = (pending[0], describe_key)

    def settle(self, gid: str, units: Sequence[str]) -> None:
        """Keep the settled key of ``gid``, whose row this run made (read from ``units``):
        the next run carries it while its inputs stay."""
        pending = self.pending.pop(gid, None)
        if pending is None or not pending[1]:
            return
        self.memo.put(pending[0], pending[1], units=units, computed=False)


def dated(group: Group, by_id: Mapping[str, Message]) -> Group:
    """``group`` with its earliest and latest content times from its members (as
    :func:`~corpus_index.linked.describe.describe` sets them); itself when its grouping set
    them so (a conversation does)."""
    times = [by_id[u].timestamp for u in group.member_ids]
    first, last = min(times), max(times)
    if group.earliest_content_at == first and group.latest_content_at == last:
        return group
    return replace(group, earliest_content_at=first, latest_content_at=last)
