"""The records a grouping produces (seed "Linked Context V2" §3.1, §3.2): a linked group and
its members, and the group's content-derived id.

A group is a set of units that read as one context: a conversation, a question with its answer,
an incident with the shift notes of the staff who were there, a day at a place, a proposal
discussed up to its decision, threads on one topic across channels. Its id comes
from its content (tenant, collection, type and member ids), never from a position, so the same
members always make the same group and a changed membership makes a new one.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from corpus_index.hashing import canonical_json, sha256_hex

GROUP_TYPES = (
    "conversation",
    "qa_pair",
    "incident_context",
    "daily_context",
    "decision_thread",
    "topic_cluster",
)
MEMBER_ROLES = ("initiator", "response", "resolution", "decision", "context")
COMPLETENESS = ("complete", "partial", "evolving")
# open: still looked for (a question, an incident missing notes); pending_context: an incident
# with no notes at all; timeout: a question nobody answered within a week (seed §2.4, §5.3)
RESOLUTION = ("open", "resolved", "superseded", "pending_context", "timeout")


@dataclass(frozen=True, slots=True)
class Member:
    """A unit's place in a group (seed §3.2): ``order`` from 1 in the group's reading order,
    ``role`` one of MEMBER_ROLES, ``primary`` (the incident itself) or supporting (its shift
    notes), and how relevant it is to the group (0 to 1)."""

    unit_id: str
    order: int
    role: str = "response"
    primary: bool = False
    relevance: float = 1.0


@dataclass(frozen=True, slots=True)
class Group:
    """One linked group (seed §3.1). Times are seconds since the epoch (UTC); dates ISO
    ``YYYY-MM-DD``; ``identity_anchors`` are identity ids of the tenant's registry (names it
    does not resolve, such as shared mailboxes, left out), or the names as written where no
    registry is given. ``resolved_by_unit_id`` is a question's answer (qa_pair) or the unit that
    decides a decision thread, whose ``primary_identity`` is then who decided."""

    group_type: str
    processing_profile: str
    members: tuple[Member, ...]
    title: str = ""
    summary: str = ""
    identity_anchors: tuple[str, ...] = ()
    primary_identity: str | None = None
    location_anchors: tuple[str, ...] = ()
    event_date: str | None = None
    event_date_end: str | None = None
    earliest_content_at: float | None = None
    latest_content_at: float | None = None
    domain_tags: tuple[str, ...] = ()
    topic_tags: tuple[str, ...] = ()
    coherence: float = 0.0
    completeness: str = "complete"
    resolution_status: str = "open"
    reprocess_priority: int = 0
    resolved_by_unit_id: str | None = None

    @property
    def member_ids(self) -> tuple[str, ...]:
        """Its members' unit ids, in their order."""
        return tuple(map(_UNIT_ID, self.members))


# every group id starts with it; a unit's id never does (kinds.messages.id_problem), since the
# two share a collection's source ids
GROUP_ID_PREFIX = "grp-"


def group_id(tenant: str, collection: str, group_type: str, member_ids: Sequence[str]) -> str:
    """The group's id, from what it is: the same members make the same id in any order."""
    what = canonical_json([tenant, collection, group_type, sorted(member_ids)])
    return GROUP_ID_PREFIX + sha256_hex(what)[:32]


_UNIT_ID = operator.attrgetter("unit_id")


class Carried(NamedTuple):
    """A group a grouping did not make: the last run's, carried whole by its id (see
    :meth:`corpus_index.linked.settled.Settled.token`), with its members' ids in order, and
    its re-processing priority and anchor (what its queue item reads beside its members)."""

    group_type: str
    gid: str
    member_ids: tuple[str, ...]
    priority: int = 0
    anchor: str = ""


# what a grouping asks before it makes a group: (its type, its members' ids in order, its
# newest unit's time, what the group holds beside its members' units) -> the group carried
# whole, or None (then made)
Carry = Callable[[str, Sequence[str], float, str], Carried | None]


def anchor_of(group: Group) -> str:
    """The unit a group is known by across runs: its primary member, else its first."""
    primary = [m.unit_id for m in group.members if m.primary]
    return primary[0] if primary else min(group.members, key=lambda m: m.order).unit_id
