"""The re-processing queue of a home (seed "Linked Context" §2.3, §2.4, §7): one warehouse
partition per collection, ``reprocess_queue/<collection>.parquet``, holding the items of
:mod:`corpus_index.linked.reprocess` with their tenant, attempts and ``last_reprocessed_at``.

Its schema metadata records how the collection's units are linked (:class:`Linking`): the
windows (the first pass's, or the wider ones of re-processing) and the time priorities and
timeouts were last judged at. A re-processing run does not write groups itself: it takes the
due items, records the wider windows and its ``now`` here, and the ``linked_groups`` step then
links the collection with them, so the changed groups are embedded and indexed by the normal
steps. Once widened, a collection stays widened: a narrower pass later would drop what the
second pass found. The step refreshes the queue from the groups it wrote (:func:`refresh`),
and only then, its checks passed, counts each item taken one attempt more
(``last_reprocessed_at``): a run whose checks fail uses up no attempt. Time is always passed
in.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.hashing import sha256_hex
from corpus_index.linked.groups import Group, Windows, link_units
from corpus_index.linked.incidents import SHIFT_NOTE
from corpus_index.linked.messages import Message, place_of
from corpus_index.linked.records import Carried
from corpus_index.linked.reprocess import (
    BATCH,
    REPROCESS_WINDOWS,
    QueueItem,
    counted,
    due,
    next_due,
    order,
    queue_of,
)
from corpus_index.warehouse import Warehouse

QUEUE = "reprocess_queue"
LINKING_KEY = b"corpus_index.linking"

QUEUE_SCHEMA = pa.schema(
    [
        ("collection", pa.string()),
        ("tenant_id", pa.string()),
        ("key", pa.string()),
        ("group_type", pa.string()),
        ("anchor", pa.string()),
        ("priority", pa.int64()),
        ("since", pa.float64()),
        ("location", pa.string()),
        ("last_reprocessed_at", pa.float64()),
        ("attempts", pa.int64()),
        ("next_due", pa.float64()),  # for readers of the table; recomputed on read
    ]
)


@dataclass(frozen=True, slots=True)
class Linking:
    """How a collection's units are linked: the windows, and the time (seconds since the
    epoch) priorities and timeouts are judged at (None: the newest unit's time)."""

    windows: Windows = Windows()
    judged_at: float | None = None

    @property
    def widened(self) -> bool:
        return self.windows == REPROCESS_WINDOWS

    def now_for(self, messages: Sequence[Message]) -> float | None:
        """The time to judge ``messages`` at: the newest of them, or later if judged later."""
        newest = max((m.timestamp for m in messages), default=None)
        return max((t for t in (newest, self.judged_at) if t is not None), default=None)


class Queued(NamedTuple):
    """A queue item of one collection and tenant."""

    collection: str
    tenant_id: str
    item: QueueItem


class Stored(NamedTuple):
    """A collection's queue and linking, as stored; ``arrived``: the digest of the source
    versions whose arrival the last ``linked_groups`` run woke incidents for (see
    :func:`arrivals`)."""

    items: list[Queued]
    linking: Linking
    arrived: str = ""


def read_queue(warehouse: Warehouse, collection: str) -> Stored:
    """The stored queue of ``collection`` (empty, first-pass linking, if never written)."""
    table = warehouse.read(QUEUE, (collection,), QUEUE_SCHEMA)
    if table is None:
        return Stored([], Linking())
    raw = (warehouse.metadata(QUEUE, (collection,)) or {}).get(LINKING_KEY)
    linking = Linking()
    arrived = ""
    if raw:
        data = json.loads(raw)
        linking = Linking(Windows(data["answer_s"], data["notes_s"]), data["judged_at"])
        arrived = str(data.get("arrived", ""))
    items = [
        Queued(
            collection,
            r["tenant_id"],
            QueueItem(
                r["key"],
                r["group_type"],
                r["anchor"],
                r["priority"],
                r["since"],
                r["location"],
                r["last_reprocessed_at"],
                r["attempts"],
            ),
        )
        for r in table.to_pylist()
    ]
    return Stored(items, linking, arrived)


def arrivals(manifest: pa.Table) -> tuple[set[str], str]:
    """The documents of an ingest's manifest (its ``source_manifest`` table) that are new or
    changed, and a digest of their versions: a run of ``linked_groups`` that finds the digest
    its queue keeps has seen them arrive already (a second run on one ingest, a re-processing
    run), so they wake no incident again. Only those rows are read into Python."""
    rows = manifest.select(["doc_id", "source_version", "change"])
    rows = rows.filter(pc.is_in(rows["change"], pa.array(["added", "changed"])))
    ids, versions = rows["doc_id"].to_pylist(), rows["source_version"].to_pylist()
    changed = sorted(zip(map(str, ids), map(str, versions), strict=True))
    return {d for d, _ in changed}, sha256_hex(json.dumps(changed))


def write_queue(
    warehouse: Warehouse,
    collection: str,
    items: Iterable[Queued],
    linking: Linking,
    arrived: str = "",
) -> None:
    """Replace ``collection``'s queue and linking (atomically: one Parquet file), and the
    digest of the arrivals seen (:func:`arrivals`)."""
    warehouse.write(QUEUE, (collection,), queue_table(collection, items, linking, arrived))


def queue_table(
    collection: str, items: Iterable[Queued], linking: Linking, arrived: str = ""
) -> pa.Table:
    """The partition :func:`write_queue` writes: the queue's rows, and in its metadata the
    linking and the digest of the arrivals seen."""
    rows = [
        {
            "collection": collection,
            "tenant_id": q.tenant_id,
            **{f.name: getattr(q.item, f.name) for f in dataclasses.fields(QueueItem)},
            "next_due": next_due(q.item),
        }
        for q in sorted(items, key=lambda q: q.item.key)
    ]
    meta = {
        LINKING_KEY: json.dumps(
            {
                "answer_s": linking.windows.answer_s,
                "notes_s": linking.windows.notes_s,
                "judged_at": linking.judged_at,
                "arrived": arrived,
            },
            sort_keys=True,
        ).encode()
    }
    return pa.Table.from_pylist(rows, schema=QUEUE_SCHEMA.with_metadata(meta))


class Linker:
    """The ``link`` of :func:`corpus_index.group_records.group_tables` under a collection's
    :class:`Linking`, keeping the groups and units it linked (for :func:`refresh`): the groups
    made, and those with a priority carried before they were made (by the ``settled`` it is
    given, see :meth:`corpus_index.linked.settled.Settled.token`)."""

    def __init__(self, linking: Linking) -> None:
        self.linking = linking
        self.groups: list[Group] = []
        # the groups with a priority carried whole before they were made (Settled.token)
        self.carried: list[Carried] = []
        self.messages: dict[str, Message] = {}

    def __call__(self, messages: Sequence[Message], **options: Any) -> list[Group]:
        groups = link_units(
            messages, now=self.linking.now_for(messages), windows=self.linking.windows, **options
        )
        self.groups.extend(groups)
        settled = options.get("settled")
        if settled is not None:
            self.carried.extend(t for t in settled.tokens if t.priority > 0)
        self.messages.update((m.unit_id, m) for m in messages)
        return groups


def woken(stored: Stored, arrived: Sequence[Message], now: float) -> list[QueueItem]:
    """The incidents a shift note in ``arrived`` wakes at ``now`` (at its place, within a week
    of their report), due by time or not: re-evaluated at once, with the wider window
    (seed §2.4)."""
    places = {place_of(m) for m in arrived if m.source == SHIFT_NOTE}
    queue = [q.item for q in stored.items]
    return [
        i
        for i in due(queue, now, arrived=arrived, limit=len(queue))
        if i.group_type == "incident_context" and i.location in places
    ]


def refresh(
    collection: str,
    stored: Stored,
    linker: Linker,
    tenants: Mapping[str, str],
    *,
    processed: Mapping[str, float] | None = None,
) -> list[Queued]:
    """The queue after a ``linked_groups`` run: an item per group still with a priority and a
    check to come, keeping the attempts of those whose priority is unchanged; the items of
    ``processed`` (key -> when) are re-processed then (:func:`counted`: one attempt more when
    their reason is unchanged).

    Args:
        tenants: unit id -> tenant (an item's tenant is its anchor's).
    """
    previous = [q.item for q in stored.items]
    prior = {i.key: i.priority for i in previous}
    done = processed or {}
    fresh = queue_of([*linker.groups, *linker.carried], linker.messages, previous=previous)
    out = []
    for item in fresh:
        if item.key in done and item.key in prior:
            item = counted(item, prior[item.key], done[item.key])
        if next_due(item) is not None:
            out.append(Queued(collection, tenants[item.anchor], item))
    return out


class Taken(NamedTuple):
    """What :func:`take_due` took at ``now``: the items, by collection."""

    items: list[Queued]
    now: float

    def keys(self, collection: str) -> dict[str, float]:
        """Queue key -> when taken, of ``collection``'s items (``linked_groups.run``'s
        ``reprocessed``)."""
        return {q.item.key: self.now for q in self.items if q.collection == collection}

    @property
    def collections(self) -> list[str]:
        return sorted({q.collection for q in self.items})


def take_due(
    warehouse: Warehouse, collections: Sequence[str], now: float, *, limit: int = BATCH
) -> Taken:
    """Take the items due at ``now`` in ``collections``: by priority, then the longest since
    last re-processed (never first), then the longest due (:func:`order`), at most ``limit``
    in all. Each collection with an item
    taken is recorded as widened and judged at ``now`` (never earlier than it was), so the
    next ``linked_groups`` run re-detects with the wider windows.

    The items themselves are left as they were: the ``linked_groups`` run given them
    (``reprocessed=``) counts each one attempt more at ``now`` in the queue it writes, and
    only if its checks pass. A run that fails, or never comes, leaves them due."""
    stored = {c: read_queue(warehouse, c) for c in collections}
    ready = _ready(stored.values(), now)
    ready.sort(key=lambda q: (*order(q.item), q.collection, q.item.key))
    taken = ready[:limit]
    for c in sorted({q.collection for q in taken}):
        judged = stored[c].linking.judged_at
        linking = Linking(REPROCESS_WINDOWS, now if judged is None else max(judged, now))
        write_queue(warehouse, c, stored[c].items, linking, stored[c].arrived)
    return Taken(taken, now)


def count_due(warehouse: Warehouse, collections: Sequence[str], now: float) -> int:
    """How many items of ``collections`` are due at ``now`` (:func:`take_due` takes at most
    ``BATCH`` of them), read only: what tells a schedule whether a run has anything to do."""
    return len(_ready((read_queue(warehouse, c) for c in collections), now))


def _ready(stored: Iterable[Stored], now: float) -> list[Queued]:
    return [q for s in stored for q in s.items if q.item in due([q.item], now, limit=1)]
