"""Linked groups: the records a grouping produces (seed "Linked Context V2" §3.1, §3.2).

A group is a set of units that read as one context: a conversation, a question with its answer,
an incident with the shift notes of the staff who were there, a day at a place. Its id comes
from its content (tenant, collection, type and member ids), never from a position, so the same
members always make the same group and a changed membership makes a new one.

Tenancy and access are not decided here: the ``linked_groups`` step gives a group its members'
tenant and the intersection of their ACL groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.linked.conversations import group_conversations
from corpus_index.linked.messages import Message

GROUP_TYPES = (
    "conversation",
    "qa_pair",
    "incident_context",
    "daily_context",
    "decision_thread",
    "topic_cluster",
)
MEMBER_ROLES = ("initiator", "response", "resolution", "context")
COMPLETENESS = ("complete", "partial", "evolving")
RESOLUTION = ("open", "resolved", "superseded")


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
    ``YYYY-MM-DD``; ``identity_anchors`` are identity ids of the tenant's registry (or the
    names as written where no registry resolves them)."""

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
        return tuple(m.unit_id for m in self.members)


def group_id(tenant: str, collection: str, group_type: str, member_ids: Sequence[str]) -> str:
    """The group's id, from what it is: the same members make the same id in any order."""
    what = canonical_json([tenant, collection, group_type, sorted(member_ids)])
    return "grp-" + sha256_hex(what)[:32]


def conversation_groups(messages: Sequence[Message]) -> list[Group]:
    """Every conversation of two or more messages, members in time order (the first the
    initiator), with its people, place and time span."""
    by_id = {m.unit_id: m for m in messages}
    out: list[Group] = []
    for ids in group_conversations([m for m in messages if not m.system]):
        if len(ids) < 2:
            continue
        units = sorted((by_id[i] for i in ids), key=lambda m: (m.timestamp, m.unit_id))
        members = tuple(
            Member(m.unit_id, k + 1, "initiator" if k == 0 else "response")
            for k, m in enumerate(units)
        )
        out.append(
            Group(
                group_type="conversation",
                processing_profile=units[0].source or "chat",
                members=members,
                identity_anchors=tuple(dict.fromkeys(m.author for m in units if m.author)),
                location_anchors=tuple(dict.fromkeys(m.location for m in units if m.location)),
                earliest_content_at=units[0].timestamp,
                latest_content_at=units[-1].timestamp,
            )
        )
    return out


def link_units(messages: Sequence[Message]) -> list[Group]:
    """All the groups of one collection's units (the ``linked_groups`` step calls this)."""
    return conversation_groups(messages)
