"""The re-processing step (seed "Linked Context" §7.2): take the due items of the home's
queue, then link each collection they belong to again with the wider windows and rewrite its
``embedding_inputs``, so the changed groups are embedded and indexed by the normal steps.

``reprocess_job`` runs it (hourly, ``reprocess_schedule``) and ``corpus reprocess`` through it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corpus_index.config import CorpusConfig, Settings
from corpus_index.errors import ConfigError
from corpus_index.group_records import GROUP_SCHEMA
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.linked.messages import SUPPORTED_YEARS, supported_time
from corpus_index.linked.reprocess import BATCH
from corpus_index.reprocess_queue import count_due, take_due
from corpus_index.steps import embedding_inputs, linked_groups
from corpus_index.warehouse import Warehouse

GIVEN_UP = ("timeout",)  # a question nobody answered within a week


@dataclass(slots=True)
class ReprocessReport:
    """What one re-processing run did."""

    now: float
    taken: list[dict[str, Any]] = field(default_factory=list)
    collections: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def groups_changed(self) -> int:
        return sum(int(c["groups_changed"]) for c in self.collections.values())

    @property
    def timed_out(self) -> list[str]:
        return [k for c in self.collections.values() for k in c["timed_out"]]

    @property
    def passed(self) -> bool:
        return all(c["written"] for c in self.collections.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "now": iso(self.now),
            "items_taken": len(self.taken),
            "groups_changed": self.groups_changed,
            "items_timed_out": len(self.timed_out),
            "taken": self.taken,
            "timed_out": self.timed_out,
            "collections": self.collections,
        }


def parse_now(text: str, *, wall_clock: float | None = None) -> float:
    """Seconds since the epoch of an ISO 8601 time (``Z`` or an offset; none reads as UTC), at
    most a day after ``wall_clock`` (default: the present): the queue keeps the latest time
    it was judged at, so a time ahead of the present would stay the clock of every later sync
    (a question arriving then would be judged timed out at once).

    Raises:
        ConfigError: ``text`` is not an ISO 8601 time, is outside the supported years, or is
            more than a day ahead of the present.
    """
    try:
        stamp = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"now={text!r} is not an ISO 8601 time (for example 2025-12-10T06:00:00+11:00)"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    try:
        seconds = stamp.timestamp()
    except (OverflowError, ValueError):
        seconds = float("nan")
    if not supported_time(seconds):
        raise ConfigError(f"now={text!r} is outside the supported years {SUPPORTED_YEARS}")
    present = time.time() if wall_clock is None else wall_clock
    if seconds > present + AHEAD_S:
        raise ConfigError(
            f"now={text!r} is after the present ({iso(present)}): the re-processing queue keeps "
            "the time it was judged at, and every later sync would judge from it; give a time "
            "up to now"
        )
    return seconds


# how far a given --now may run ahead of the present (clocks of two machines disagree a little)
AHEAD_S = 24 * 3600


def iso(stamp: float) -> str:
    return dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat()


def grouped_collections(home: Home, only: str = "") -> list[str]:
    """The configured collections that are grouped: of a grouped kind, without
    ``grouping: false`` (``only``: that one, which must be).

    Raises:
        ConfigError: ``only`` is not a configured collection, or not a grouped one.
    """
    if not only:
        return grouped_names(home.config)
    # home.collection names the file for an unknown ``only``; a sharded collection is never
    # grouped, and its name alone is no partition of it
    config = home.collection(only)
    if not (kind_of(config).grouped and config.grouping):
        raise ConfigError(
            f"collection {only!r} is not grouped: only messages collections without "
            "grouping: false are re-processed"
        )
    return [only]


def grouped_names(config: CorpusConfig) -> list[str]:
    """The collections of ``config`` that are grouped, by name."""
    return [n for n, c in sorted(config.collections.items()) if kind_of(c).grouped and c.grouping]


def due_count(settings: Settings, now: float) -> int:
    """How many queued items of the home's grouped collections are due at ``now``, read from
    the queue files alone (no registry opened, nothing written), for a schedule to tell
    whether a run would do anything."""
    return count_due(Warehouse(settings.warehouse), grouped_names(settings.load()), now)


def _groups(home: Home, collection: str) -> dict[str, dict[str, Any]]:
    table = home.warehouse.read(linked_groups.GROUPS, (collection,), GROUP_SCHEMA)
    rows = table.to_pylist() if table is not None else []
    return {r["group_id"]: r for r in rows}


def _keys(home: Home, collection: str) -> dict[str, str]:
    """group id -> queue key (``<type>:<anchor unit>``, the anchor as in
    :func:`corpus_index.linked.reprocess.anchor_of`) of the collection's groups."""
    table = home.warehouse.read(linked_groups.MEMBERS, (collection,))
    members: dict[str, list[dict[str, Any]]] = {}
    for r in table.to_pylist() if table is not None else []:
        members.setdefault(r["group_id"], []).append(r)
    out = {}
    for gid, rows in members.items():
        primary = [r["unit_id"] for r in rows if r["primary"]]
        out[gid] = primary[0] if primary else min(rows, key=lambda r: r["order"])["unit_id"]
    return out


def run(home: Home, now: float, *, collection: str = "", limit: int = BATCH) -> ReprocessReport:
    """Re-process what is due at ``now`` in the grouped collections (or ``collection``).

    Returns:
        The items taken, and per collection re-linked the groups changed (added, removed or
        whose content changed) and the taken items that timed out.
    """
    collections: Sequence[str] = grouped_collections(home, collection)
    taken = take_due(home.warehouse, collections, now, limit=limit)
    report = ReprocessReport(now)
    report.taken = [
        {
            "collection": q.collection,
            "tenant_id": q.tenant_id,
            "key": q.item.key,
            "priority": q.item.priority,
            "attempt": q.item.attempts + 1,
        }
        for q in taken.items
    ]
    for name in taken.collections:
        before = _groups(home, name)
        outcome = linked_groups.run(home, name, reprocessed=taken.keys(name))
        embedding_inputs.run(home, name)
        after = _groups(home, name)
        changed = {g for g in before.keys() | after.keys() if g not in before or g not in after}
        changed |= {
            g
            for g in before.keys() & after.keys()
            if before[g]["content_hash"] != after[g]["content_hash"]
            or before[g]["resolution_status"] != after[g]["resolution_status"]
        }
        keys = {q.item.key for q in taken.items if q.collection == name}
        anchors = _keys(home, name)
        timed_out = sorted(
            key
            for g in after.values()
            if g["resolution_status"] in GIVEN_UP
            and (key := f"{g['group_type']}:{anchors.get(g['group_id'], '')}") in keys
        )
        report.collections[name] = {
            "taken": len(keys),
            "groups_changed": len(changed),
            "timed_out": timed_out,
            "written": outcome.passed,
            "queued": outcome.queued,
        }
    return report
