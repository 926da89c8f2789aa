"""Deletion that reaches every store, with a tombstone and a receipt (DESIGN §8).

When a source disappears (its file is removed, or its whole collection leaves the config), its
rows become ineligible at once in every generation that has a table (ACTIVE, READY, BUILDING,
FAILED, and a RETIRED one whose table a crash left): they are deleted from each generation table
first, then from the sidecars and the warehouse. A tombstone
in the registry keeps the fact (so a generation built later never receives the source again) and
a receipt file lists every artifact removed, with counts and times. Embedding-cache entries
derived only from the source, the LanceDB fragments whose data files still hold its masked rows
(the receipt names them), and old versions go at the next compaction.

The receipt also keeps fingerprints of the deleted texts and vectors (never the content: see
``byte_audit``), so ``audit_deletion`` proves absence from the bytes of every file of the home,
not only from what a query can see.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_index import (
    byte_audit,
    flat_exports,
    identity_store,
    index_store,
    predicates,
    purge,
)
from corpus_index.config import Settings
from corpus_index.hashing import sha256_hex
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.kinds.messages import seconds_of
from corpus_index.linked.memo import without_units
from corpus_index.records import MANIFEST_SCHEMA
from corpus_index.refusals import REFUSALS
from corpus_index.reprocess_queue import QUEUE, read_queue, write_queue
from corpus_index.shards import split_key
from corpus_index.sidecar_places import sidecar_folder
from corpus_index.sidecars import SIDECAR_SUFFIX
from corpus_index.sources import live_documents
from corpus_index.storage import Location
from corpus_index.store_copy import receipt_location
from corpus_index.traces import TraceStore
from corpus_index.warehouse import damage

# the tombstone reason of a source removed from the index while its file stays
# (``CorpusIndex.remove``): the scan treats it as absent until it is added again
WITHDRAWN = "removed from the index; source file kept"
# ... and of a source whose file went
FILE_REMOVED = "source file removed"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


@dataclass(slots=True)
class Receipt:
    """What one deletion removed, where, and when."""

    receipt_id: str
    reason: str
    collection: str
    namespace: str
    source_ids: list[str]
    started_at: str
    finished_at: str = ""
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    path: str = ""
    fragments: dict[str, list[int]] = field(default_factory=dict)
    fingerprints: dict[str, Any] = field(default_factory=dict)
    units: dict[str, list[str]] = field(default_factory=dict)

    def removed(self, store: str, location: str, count: int, unit: str, **detail: Any) -> None:
        self.artifacts.append(
            {"store": store, "location": location, unit: count, "removed_at": _now(), **detail}
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "receipt_id": self.receipt_id,
            "reason": self.reason,
            "collection": self.collection,
            "namespace": self.namespace,
            "source_ids": self.source_ids,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "artifacts": self.artifacts,
            "pending_until_compaction": self.pending,
            "fragments_to_rewrite": self.fragments,
            "fingerprints": self.fingerprints,
            # each source's unit ids (ids, as ``source_ids`` are; never their content): rows
            # keyed by unit, not by source (a group's member, a queue item), name them
            "units": self.units,
        }

    def held(self, table: str, fragments: set[int]) -> None:
        """Record that ``fragments`` of ``table`` held deleted rows (compaction rewrites them)."""
        if fragments:
            self.fragments[table] = sorted(set(self.fragments.get(table, [])) | fragments)


def _hashes_of(table: pa.Table | None, ids: set[str], column: str) -> set[str]:
    if table is None or table.num_rows == 0 or column not in table.column_names:
        return set()
    mask = pc.is_in(table["source_id"], pa.array(sorted(ids), pa.string()))
    return {h for h in table.filter(mask)[column].to_pylist() if h}


def _by_source(table: pa.Table | None, ids: set[str], column: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    if table is None or table.num_rows == 0 or column not in table.column_names:
        return out
    for source, value in zip(
        table["source_id"].to_pylist(), table[column].to_pylist(), strict=True
    ):
        if source in ids and value:
            out.setdefault(source, set()).add(value)
    return out


def _without(table: pa.Table, ids: set[str]) -> tuple[pa.Table, int]:
    mask = pc.invert(pc.is_in(table["source_id"], pa.array(sorted(ids), pa.string())))
    kept = table.filter(mask)
    return kept, table.num_rows - kept.num_rows


def propagate_deletion(
    corpus: Home,
    collection: str,
    source_ids: Iterable[str],
    *,
    namespace: str,
    reason: str,
    partition: str | None = None,
) -> Receipt | None:
    """Remove ``source_ids`` of ``collection`` from every generation, sidecar and warehouse
    partition; record tombstones and write a receipt. Returns None when there is nothing to do.

    The linked groups holding a removed unit go with it (their rows in every generation, their
    inputs and their warehouse rows: a group's input text holds its members' words); the next
    ``linked_groups`` run links the units left into groups with new ids, which are embedded
    anew. Only the removed sources are tombstoned: the same members make the same group again
    if the unit comes back.

    ``partition`` is the warehouse partition that holds the sources (a shard's partition key,
    ``<collection>~<nn>``); by default the collection's own."""
    part = partition or collection
    ids = set(source_ids)
    if not ids:
        return None
    tombstoned = set(ids)
    by_source = _units_of(corpus, part, ids)
    times = {u: t for of_source in by_source.values() for u, t in of_source.items()}
    units = set(times)
    groups = _groups_holding(corpus, part, units)
    ids |= {f"{collection}/{g}" for g in groups}
    receipt = Receipt(
        receipt_id=uuid.uuid4().hex[:12],
        reason=reason,
        collection=collection,
        namespace=namespace,
        source_ids=sorted(tombstoned),
        started_at=_now(),
        units={s: sorted(by_source[s]) for s in sorted(by_source)},
    )
    wh = corpus.warehouse
    blocks = wh.read("parsed_blocks", (part,))
    inputs = wh.read("embedding_inputs", (part,))
    input_hashes = _hashes_of(inputs, ids, "input_hash")
    where = predicates.all_of(
        [predicates.eq("collection", collection), predicates.is_in("source_id", sorted(ids))]
    )
    receipt.fingerprints = _fingerprints(
        corpus,
        blocks,
        inputs,
        ids,
        where,
        identity_store.unit_texts(corpus, collection, units),
        text_ids=tombstoned,
    )
    # the addresses and numbers only these units showed: taken out of the registry below, and
    # kept here for the audit as HMACs under a key of the home the receipt does not hold (an
    # address or a number is few enough guesses that a plain hash would give it back)
    only = identity_store.details_only_of(corpus, collection, units)
    key = corpus.registry.home_key(DETAILS_KEY)
    receipt.fingerprints["identity_details"] = sorted(
        _detail_hash(receipt.receipt_id, d, key) for d in only
    )
    receipt.fingerprints["identity_details_key"] = DETAILS_KEY
    receipt.fingerprints["identity_details_key_id"] = _key_id(key)

    # 1. ineligible at once: every generation with a table, a RETIRED one whose table a crash
    # left undropped included (compaction drops it)
    for gen in corpus.registry.generations():
        if not corpus.store.exists(gen):
            continue
        receipt.held(gen.table_name, purge.fragments_where(corpus.store.table(gen), where))
        n = corpus.store.delete_where(gen, where)
        receipt.removed("lance", f"{gen.table_name} ({gen.id}, {gen.status})", n, "rows")
        if n:  # the count its health is judged by
            corpus.registry.record_rows(gen.id, corpus.store.count(gen))

    # 2. sidecars of every profile, under the home and (``sidecars: beside``) beside the sources
    doc_ids = {s.split("/", 1)[1] for s in ids if "/" in s}
    for profile, folder in _sidecar_folders(corpus, collection):
        for doc_id in sorted(doc_ids):
            path = folder / f"{doc_id}{SIDECAR_SUFFIX}"
            if path.is_file():
                path.unlink()
                receipt.removed("exports", str(path), 1, "files")
        pins = wh.read("sidecar_pins", (profile, part))
        if pins is not None:
            kept, n = _without(pins, ids)
            if n:
                wh.write("sidecar_pins", (profile, part), kept)
                receipt.removed("warehouse", str(wh.path("sidecar_pins", profile, part)), n, "rows")

    # 3. warehouse rows
    members = wh.read("group_members", (part,))
    if members is not None and groups:
        kept = members.filter(pc.invert(pc.is_in(members["group_id"], pa.array(sorted(groups)))))
        wh.write("group_members", (part,), kept)
        n = members.num_rows - kept.num_rows
        receipt.removed("warehouse", str(wh.path("group_members", part)), n, "rows")
    # identity mentions and sightings of the deleted units (their snippets hold its words)
    for location, n in identity_store.remove_units(corpus, collection, units, details=only):
        receipt.removed("warehouse", location, n, "rows")
    # the groupings' kept results that read a removed unit (their titles and summaries quote
    # it); the next ``linked_groups`` run computes them again
    memo = wh.read("group_memo", (collection,))
    if memo is not None and memo.num_rows and units:
        kept = without_units(memo, units, times)
        if kept.num_rows < memo.num_rows:
            wh.write("group_memo", (collection,), kept)
            n = memo.num_rows - kept.num_rows
            receipt.removed("warehouse", str(wh.path("group_memo", collection)), n, "rows")
    # the re-processing queue's items anchored at a removed unit (a question, an incident):
    # the next ``linked_groups`` run makes the queue anew, but until it does (a sync cut
    # short, grouping checks that fail) the queue would name the unit
    queue = read_queue(wh, part)
    left = [q for q in queue.items if q.item.anchor not in units]
    if len(left) < len(queue.items):
        write_queue(wh, part, left, queue.linking, queue.arrived)
        n = len(queue.items) - len(left)
        receipt.removed("warehouse", str(wh.path(QUEUE, part)), n, "rows")
    for asset in (
        "parsed_blocks",
        "embedding_inputs",
        "quarantine",
        "linked_groups",
        "conversation_links",
        "unit_prints",
    ):
        table = wh.read(asset, (part,))
        if table is None or "source_id" not in table.column_names:
            continue
        kept, n = _without(table, ids)
        if n:
            if asset == "conversation_links":  # the channels' tails name the removed authors
                kept = kept.replace_schema_metadata(None)
            wh.write(asset, (part,), kept)
            receipt.removed("warehouse", str(wh.path(asset, part)), n, "rows")
    remaining_inputs = wh.read("embedding_inputs", (part,))
    still_used = (
        set(remaining_inputs["input_hash"].to_pylist()) if remaining_inputs is not None else set()
    )
    only_theirs = sorted(input_hashes - still_used)
    embeddings_root = corpus.settings.warehouse / "embeddings"
    if only_theirs:
        for profile_dir in sorted(p for p in embeddings_root.iterdir() if p.is_dir()):
            table = wh.read("embeddings", (profile_dir.name, part))
            if table is None:
                continue
            mask = pc.invert(pc.is_in(table["input_hash"], pa.array(only_theirs, pa.string())))
            kept = table.filter(mask)
            if kept.num_rows != table.num_rows:
                wh.write("embeddings", (profile_dir.name, part), kept)
                receipt.removed(
                    "warehouse",
                    str(wh.path("embeddings", profile_dir.name, part)),
                    table.num_rows - kept.num_rows,
                    "rows",
                )
    # the record of the refused inputs of each profile names the document's file and block
    refusals_root = corpus.settings.warehouse / REFUSALS
    for profile_dir in sorted(p for p in refusals_root.iterdir() if p.is_dir()):
        table = wh.read(REFUSALS, (profile_dir.name, part))
        if table is None:
            continue
        kept, n = _without(table, ids)
        if n:
            wh.write(REFUSALS, (profile_dir.name, part), kept)
            receipt.removed("warehouse", str(wh.path(REFUSALS, profile_dir.name, part)), n, "rows")
    # 4. flat-blob exports (profiles collections): rebuilt from what remains, or removed where
    # no build would take the deletion out of them
    for location, how in flat_exports.rebuild(corpus, collection):
        receipt.removed("exports", location, 1, f"{how} export trees")
    corpus.registry.clear_stale(sorted(ids))
    # 5. query traces quoting the deleted texts (a query pasted from the document)
    n = _forget_traces(corpus, receipt.fingerprints)
    if n:
        # in PostgreSQL the table is rewritten, or the receipt says why not
        pages = TraceStore(corpus.registry).clear_pages()
        receipt.removed("registry", "query_traces", n, "rows", **pages)
    receipt.pending = [
        f"embedding-cache entries of {len(only_theirs)} input hashes used by no other source",
        "LanceDB fragments that held the rows (rewritten) and older versions (removed)",
    ]
    receipt.finished_at = _now()
    path = (
        corpus.settings.receipts
        / f"{receipt.started_at[:19].replace(':', '')}-{collection}-{receipt.receipt_id}.json"
    )
    path.write_text(json.dumps(receipt.to_json(), indent=2) + "\n", encoding="utf-8")
    receipt.path = str(path)
    content_by_source = _by_source(blocks, ids, "content_hash")
    inputs_by_source = _by_source(inputs, ids, "input_hash")
    corpus.registry.add_tombstones(
        [
            {
                "source_id": s,
                "collection": collection,
                "namespace": namespace,
                "content_hashes": sorted(content_by_source.get(s, ())),
                "input_hashes": sorted(inputs_by_source.get(s, ())),
                "reason": reason,
                "receipt": str(path),
            }
            for s in sorted(tombstoned)
        ]
    )
    return receipt


def _researcher_leftovers(corpus: Home, collection: str, doc: str) -> list[tuple[str, str]]:
    """For a deleted source of a collection with flat exports whose researcher (the first
    folder of its path) has no live source left: where that researcher still shows in the
    exports (:func:`~corpus_index.flat_exports.researcher_leftovers`); nothing otherwise."""
    cfg = corpus.config.collections.get(collection)
    if cfg is None or not kind_of(cfg).flat_exports or "/" not in doc:
        return []
    slug = doc.split("/", 1)[0]
    manifest = corpus.read("source_manifest", (collection,), MANIFEST_SCHEMA)
    if any(d.startswith(f"{slug}/") for d in live_documents(manifest)):
        return []  # the researcher stays, with their other sources
    return flat_exports.researcher_leftovers(corpus, collection, slug)


def _sidecar_folders(corpus: Home, collection: str) -> list[tuple[str, Location]]:
    """``(profile, folder)`` of every place sidecars of ``collection`` may sit: each profile
    folder under the exports, and the configured placement of each covering profile
    (beside the source files for ``sidecars: beside``)."""
    places: dict[str, set[Location]] = {}
    root = corpus.settings.exports / "sidecars"
    for p in root.iterdir():
        if p.is_dir():
            places.setdefault(p.name, set()).add(p / collection)
    config = corpus.config.collections.get(collection)
    if config is not None:
        for profile in corpus.config.profiles_in(config.namespace):
            folder = sidecar_folder(corpus.settings, corpus.config, profile.name, config)
            places.setdefault(profile.name, set()).add(folder)
    return [(p, f) for p in sorted(places) for f in sorted(places[p])]


def _units_of(
    corpus: Home, collection: str, source_ids: set[str]
) -> dict[str, dict[str, float | None]]:
    """The unit ids of the blocks of each of ``source_ids`` (a message record's ``unit_id``),
    each with its time (seconds since the epoch; None where its block has none); a source
    with no block is not listed."""
    blocks = corpus.warehouse.read(
        "parsed_blocks", (collection,), columns=["source_id", "metadata"]
    )
    if blocks is None:
        return {}
    gone = blocks.filter(pc.is_in(blocks["source_id"], pa.array(sorted(source_ids), pa.string())))
    out: dict[str, dict[str, float | None]] = {}
    for s, m in zip(gone["source_id"].to_pylist(), gone["metadata"].to_pylist(), strict=True):
        meta = json.loads(m) if m else {}
        out.setdefault(s, {})[_unit_of(s, meta)] = _time_of(meta.get("timestamp"))
    return out


def _unit_of(source_id: str, meta: dict[str, Any]) -> str:
    """The unit id of a block of ``source_id`` with metadata ``meta``: its ``unit_id``, or
    the document its source id names (a block with none is its document's one unit)."""
    return str(meta.get("unit_id", source_id.split("/", 1)[-1]))


def _units_held(corpus: Home, collection: str, source_id: str, units: Set[str]) -> set[str]:
    """Which of ``units`` a live source of ``collection`` other than ``source_id`` holds: a
    block of it in the collection's current ``parsed_blocks`` (two irc logs of one file name
    in two folders have the same unit ids, and the second is read once the first goes)."""
    config = corpus.config.collections.get(collection)
    partitions = config.partitions if config is not None else (collection,)
    held: set[str] = set()
    for part in partitions if units else ():
        blocks = corpus.warehouse.read(
            "parsed_blocks",
            (part,),
            where=pc.field("source_id") != source_id,
            columns=["source_id", "metadata"],
        )
        if blocks is None:
            continue
        for s, m in zip(
            blocks["source_id"].to_pylist(), blocks["metadata"].to_pylist(), strict=True
        ):
            unit = _unit_of(s, json.loads(m) if m else {})
            if unit in units:
                held.add(unit)
    return held


def _time_of(value: object) -> float | None:
    """A unit's time as the groupings read it (None: not a time)."""
    try:
        return seconds_of(value) if value else None
    except ValueError:
        return None


def _groups_holding(corpus: Home, collection: str, units: set[str]) -> set[str]:
    """The ids of the linked groups with a member among ``units``."""
    members = corpus.warehouse.read("group_members", (collection,), columns=["group_id", "unit_id"])
    if members is None or not members.num_rows or not units:
        return set()
    held = members.filter(pc.is_in(members["unit_id"], pa.array(sorted(units), pa.string())))
    return set(held["group_id"].to_pylist())


def _texts_only_of(table: pa.Table | None, ids: set[str], column: str, key: str) -> list[str]:
    """``column`` of the rows of ``ids`` whose ``key`` (a content or input hash) no other row of
    the table has: identical text in a live source is not the deleted source's to purge."""
    if table is None or table.num_rows == 0 or column not in table.column_names:
        return []
    mask = pc.is_in(table["source_id"], pa.array(sorted(ids), pa.string()))
    kept_keys = set(table.filter(pc.invert(mask))[key].to_pylist())
    gone = table.filter(mask)
    return [
        t
        for t, k in zip(gone[column].to_pylist(), gone[key].to_pylist(), strict=True)
        if t and k not in kept_keys
    ]


def _fingerprints(
    corpus: Home,
    blocks: pa.Table | None,
    inputs: pa.Table | None,
    ids: set[str],
    where: str,
    snippets: tuple[list[str], list[str]],
    *,
    text_ids: set[str],
) -> dict[str, Any]:
    """Fingerprints of what is deleted: block contents and input texts of the removed sources
    (``text_ids``) no other source of the collection shares, the windows of the context
    snippets of its identity mentions that no other unit's snippets hold (``snippets``: theirs
    and the others', :func:`~corpus_index.identity_store.unit_texts`), and the vectors the
    generation tables hold for the inputs of ``ids``
    (by input hash, so the audit can drop one that a live source uses again).

    The texts of the groups that go with a unit are not fingerprinted: they hold the words of
    the members that stay, which the groups those members form next may repeat. The removed
    unit's own words in them are found all the same, by its own texts' fingerprints (windows
    are chosen by content, so they are the same wherever the words were copied)."""
    texts = _texts_only_of(blocks, text_ids, "content", "content_hash") + _texts_only_of(
        inputs, text_ids, "text", "input_hash"
    )
    theirs, others = snippets
    key = corpus.registry.home_key(FINGERPRINTS_KEY)

    def of(blob: bytes, *, vector: bool = False) -> list[str]:
        if vector:
            return byte_audit.fingerprints(
                blob, min_distinct=byte_audit.VECTOR_MIN_DISTINCT_BYTES, key=key
            )
        return byte_audit.fingerprints(blob, key=key)

    shared = {f for text in others for f in of(text.encode("utf-8"))}
    snippet_fps = {f for text in theirs for f in of(text.encode("utf-8"))}
    exclusive_inputs = {h for h in _hashes_of(inputs, ids, "input_hash") if h} - _hashes_of(
        inputs, _others(inputs, ids), "input_hash"
    )
    text_fps: set[str] = snippet_fps - shared
    unfingerprinted = 0
    for text in texts:
        fps = of(text.encode("utf-8"))
        text_fps.update(fps)
        unfingerprinted += not fps
    vector_fps: dict[str, set[str]] = {}
    for gen in corpus.registry.generations():
        if gen.status == "RETIRED" or not corpus.store.exists(gen) or not exclusive_inputs:
            continue
        table = corpus.store.table(gen)
        n = int(table.count_rows(where))
        if n == 0:
            continue
        rows = table.search().where(where).select(["input_hash", "vector"]).limit(n + 1).to_arrow()
        flat = rows["vector"].combine_chunks()
        values = np.ascontiguousarray(flat.flatten().to_numpy(zero_copy_only=False), dtype="<f4")
        dim = flat.type.list_size
        for i, h in enumerate(rows["input_hash"].to_pylist()):
            if h in exclusive_inputs:
                blob = values[i * dim : (i + 1) * dim].tobytes()
                fps = of(blob, vector=True)
                vector_fps.setdefault(h, set()).update(fps)
    return {
        "scheme": byte_audit.KEYED_SCHEME,
        "key": FINGERPRINTS_KEY,
        "key_id": _key_id(key),
        "texts": sorted(text_fps),
        "vectors": {h: sorted(f) for h, f in sorted(vector_fps.items())},
        "texts_too_short": unfingerprinted,
        # a sparse vector (a hashing embedder's) has no window that proves anything
        "vectors_too_sparse": sum(1 for f in vector_fps.values() if not f),
    }


def _forget_traces(corpus: Home, fingerprints: dict[str, Any]) -> int:
    """Delete the query traces holding a window of the deleted texts (``fingerprints``, as
    :func:`_fingerprints` made them); how many went."""
    texts = fingerprints.get("texts") or []
    if not texts:
        return 0
    key = corpus.registry.home_key(str(fingerprints["key"]))
    needles = byte_audit.Needles(dict.fromkeys(texts, "text"), key=key)
    return TraceStore(corpus.registry).forget(lambda s: bool(needles.find(s.encode("utf-8"))))


DETAILS_KEY = "deletion-details"  # the registry's key of the receipts' identity details
FINGERPRINTS_KEY = "deletion-fingerprints"  # ... and of their texts' and vectors' fingerprints


def _key_id(key: bytes) -> str:
    """Which key hashed a receipt's identity details, as the receipt names it: a digest that
    gives nothing of the key, so an audit can tell the home's key is another (a registry
    rebuilt from its journal makes a new one) instead of finding none of the hashes."""
    return hmac.new(key, b"key id", hashlib.sha256).hexdigest()[:16]


def _detail_hash(receipt_id: str, detail: str, key: bytes | None) -> str:
    """An address or number a deletion took out of the registry, as its receipt keeps it: an
    HMAC under the home's key; a plain hash with the receipt's id in a receipt written before
    receipts were keyed (``key`` None)."""
    message = f"{receipt_id}:{detail}"
    if key is None:
        return sha256_hex(message)
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def _others(table: pa.Table | None, ids: set[str]) -> set[str]:
    if table is None or table.num_rows == 0:
        return set()
    return set(table["source_id"].to_pylist()) - ids


def namespace_of(corpus: Home, collection: str) -> str:
    """The namespace a collection's rows were indexed under (for one no longer configured)."""
    if collection in corpus.config.collections:
        return corpus.config.collections[collection].namespace
    for gen in corpus.registry.generations():
        if (
            gen.status != "RETIRED"
            and corpus.store.exists(gen)
            and corpus.store.count(gen, predicates.eq("collection", collection))
        ):
            return gen.spec.namespace
    return ""


def purge_collection(corpus: Home, collection: str, namespace: str) -> Receipt | None:
    """A collection removed from the config: every one of its sources is deleted as above, and
    its warehouse partitions and sidecar folders go entirely. ``collection`` may be one of its
    partition keys (a shard, ``<collection>~<nn>``): that partition's sources and files go, and
    every row of the collection in the generations."""
    partition, collection = collection, split_key(collection).collection
    manifest = corpus.warehouse.read("source_manifest", (partition,))
    ids: set[str] = set()
    if manifest is not None:
        ids = {r for r in manifest["source_id"].to_pylist() if r}
    receipt = propagate_deletion(
        corpus,
        collection,
        ids,
        namespace=namespace,
        reason="collection removed from config",
        partition=partition,
    )
    # rows of sources the manifest never listed (none expected) go with the collection
    where = predicates.eq("collection", collection)
    for gen in corpus.registry.generations():
        if gen.status != "RETIRED" and corpus.store.exists(gen):
            if receipt is not None:
                receipt.held(gen.table_name, purge.fragments_where(corpus.store.table(gen), where))
            corpus.store.delete_where(gen, where)
    corpus.registry.set_stale(partition, [])
    for path in corpus.warehouse.delete_collection(partition):
        if receipt is not None:
            receipt.removed("warehouse", path, 1, "files")
    for folder in (corpus.settings.exports / "sidecars").glob(f"*/{collection}"):
        folder.rmtree()
        if receipt is not None:
            receipt.removed("exports", str(folder), 1, "folders")
    for tree in flat_exports.remove_collection(corpus, collection):
        if receipt is not None:
            receipt.removed("exports", tree, 1, "folders")
    if receipt is not None and receipt.path:
        Location.of(receipt.path).write_text(
            json.dumps(receipt.to_json(), indent=2) + "\n", encoding="utf-8"
        )
    return receipt


def drop_partition(corpus: Home, partition: str) -> list[str]:
    """Remove the warehouse files of a partition that a re-shard replaced (``deals`` after
    ``shards: 4``, or ``deals~03`` after ``shards: 1``); returns what was removed.

    Its sources are not deleted: they live on in the new partitions, which were built first,
    and their rows in the generations are the new partitions' (same ids, same vectors).
    """
    corpus.registry.set_stale(partition, [])
    return corpus.warehouse.delete_collection(partition)


def delete_removed(
    corpus: Home,
    collection: str,
    source_ids: Iterable[str],
    *,
    namespace: str,
    partition: str,
    withdrawn: Set[str],
) -> Receipt | None:
    """Delete the sources a scan no longer finds (:func:`propagate_deletion`): those of
    ``withdrawn`` (``CorpusIndex.remove``) under that reason, which their tombstone keeps,
    the others as removed files. Returns the last receipt written (None: nothing went)."""
    ids = sorted(set(source_ids))
    receipt = None
    for reason, some in (
        (FILE_REMOVED, [s for s in ids if s not in withdrawn]),
        (WITHDRAWN, [s for s in ids if s in withdrawn]),
    ):
        receipt = (
            propagate_deletion(
                corpus, collection, some, namespace=namespace, reason=reason, partition=partition
            )
            or receipt
        )
    return receipt


def delete_unlisted(corpus: Home, collection: str, replaced: Iterable[str]) -> list[Receipt]:
    """Carry out the deletions of a re-shard that drops partitions (``deals`` after
    ``shards: 4``, ``deals~03`` after ``shards: 3``): the sources a replaced partition lists
    as present and that no partition of the collection lists now (their file went while the
    shard count changed). No scan finds them removed, since a new partition has no earlier
    scan of them; each is deleted as a removed file is (:func:`delete_removed`, from the
    replaced partition, which holds its blocks and inputs) and marked removed in that
    partition's manifest, so a sync that fails later does not delete it again.

    Deletes nothing unless every partition of the collection has a manifest (each was
    scanned). Returns the receipts written."""
    config = corpus.config.collections[collection]
    listed: set[str] = set()  # present or removed: a scan of the new count saw it
    for key in config.partitions:
        manifest = corpus.warehouse.read("source_manifest", (key,), columns=["doc_id"])
        if manifest is None:
            return []
        listed.update(manifest["doc_id"].to_pylist())
    withdrawn = corpus.registry.tombstoned(config.name, WITHDRAWN)
    receipts = []
    for key in replaced:
        manifest = corpus.warehouse.read("source_manifest", (key,))
        if manifest is None:
            continue
        gone = {d for d in live_documents(manifest) if d not in listed}
        if not gone:
            continue
        receipt = delete_removed(
            corpus,
            config.name,
            [f"{config.name}/{d}" for d in gone],
            namespace=config.namespace,
            partition=key,
            withdrawn=withdrawn,
        )
        if receipt is not None:
            receipts.append(receipt)
        mask = pc.is_in(manifest["doc_id"], pa.array(sorted(gone), pa.string()))
        change = pc.if_else(mask, "removed", manifest["change"])
        marked = manifest.set_column(manifest.schema.get_field_index("change"), "change", change)
        corpus.warehouse.write(
            "source_manifest", (key,), marked.replace_schema_metadata(manifest.schema.metadata)
        )
    return receipts


# -- audit -----------------------------------------------------------------------------------


def partitions(corpus: Home) -> list[str]:
    """The partition key of every configured collection (each shard's, for a sharded one)."""
    return [key for c in corpus.config.collections.values() for key in c.partitions]


def live_input_hashes(corpus: Home) -> set[str]:
    """Every input hash some configured collection's current inputs use."""
    live: set[str] = set()
    for name in partitions(corpus):
        table = corpus.warehouse.read("embedding_inputs", (name,))
        if table is not None:
            live.update(table["input_hash"].to_pylist())
    return live


def _table_versions(db: Any, name: str) -> list[int]:
    return sorted(int(v["version"]) for v in db.open_table(name).list_versions())


def _count_at(db: Any, name: str, version: int | None, where: str) -> int:
    table = db.open_table(name)
    if version is not None:
        table.checkout(version)
    return int(table.count_rows(where))


def audit_deletion(corpus: Home, source_id: str) -> dict[str, Any]:
    """Search every store for ``source_id`` and its content and input hashes.

    Returns ``{"source_id", "byte_scan", "tombstone", "remaining": [...], "shared": [...],
    "clean"}``: ``remaining`` lists what still holds the deleted source (current or old table
    versions, cache entries no live source uses, sidecars, warehouse rows, and every file of the
    home whose bytes hold a fingerprint of its deleted texts or vectors); ``shared`` lists hashes
    that a live source also has (identical text elsewhere), and unit ids a live source of the
    collection also holds (rows naming them are its), which are not the deleted source's to
    purge. ``byte_scan`` says what the byte scan looked for and what it cost.

    Raises:
        StoreUnreachableError: the home's object store cannot be listed (a missing bucket, its
            endpoint down) or failed a request: what it holds is unknown.
    """
    tomb = corpus.registry.tombstone(source_id)
    receipt = _receipt(corpus.settings, tomb)
    content_hashes = sorted(tomb["content_hashes"]) if tomb else []
    input_hashes = sorted(tomb["input_hashes"]) if tomb else []
    live_inputs = live_input_hashes(corpus)
    exclusive_inputs = [h for h in input_hashes if h not in live_inputs]
    remaining: list[dict[str, Any]] = []
    shared: list[dict[str, Any]] = []
    # the home's store names an object store it cannot reach (StoreUnreachableError)
    names = set(corpus.store.names())
    db = corpus.store.db
    by_source = predicates.eq("source_id", source_id)
    for name in sorted(names):
        if name.startswith("gen_"):
            store, where, match = "lance", by_source, "source_id"
        elif name.startswith("cache__") and exclusive_inputs:
            store, match = "cache", "input_hash"
            where = predicates.is_in("input_hash", exclusive_inputs)
        else:
            continue
        versions = _table_versions(db, name)
        for v in versions:
            n = _count_at(db, name, v, where)
            if n:
                remaining.append(
                    {
                        "store": store,
                        "table": name,
                        "version": v,
                        "current": v == versions[-1],
                        "rows": n,
                        "match": match,
                    }
                )
    if tomb:
        remaining.extend(_indexes_built_before(db, names, receipt, tomb))
    shared_inputs = [h for h in input_hashes if h in live_inputs]
    if shared_inputs:
        shared.append(
            {
                "store": "cache",
                "input_hashes": len(shared_inputs),
                "why": "identical input text in a live source; kept for it",
            }
        )
    needles = [source_id, *content_hashes]
    collection_name, _, doc = source_id.partition("/")
    if collection_name in corpus.config.collections:
        for _profile, folder in _sidecar_folders(corpus, collection_name):
            beside = folder / f"{doc}{SIDECAR_SUFFIX}"
            if not beside.is_relative_to(corpus.settings.exports) and beside.is_file():
                remaining.append({"store": "sidecar", "path": str(beside), "match": "file name"})
    exports = corpus.settings.exports
    doc_id = source_id.split("/", 1)[-1]
    for path in exports.walk():
        if path.name == f"{doc_id}.embeddings.json" and source_id.split("/", 1)[0] in str(path):
            remaining.append({"store": "exports", "path": str(path), "match": "file name"})
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="ignore")
        except OSError:
            continue
        hits = [n for n in needles if n in text]
        if hits and source_id in hits:
            remaining.append({"store": "exports", "path": str(path), "match": "source_id"})
    for leftover, match in _researcher_leftovers(corpus, collection_name, doc):
        remaining.append({"store": "exports", "path": leftover, "match": match})
    units = _deleted_units(receipt, source_id)
    # a unit a live source holds too is its: the rows naming it are not the deleted source's
    held = _units_held(corpus, collection_name, source_id, set(units))
    if held:
        shared.append(
            {
                "store": "warehouse",
                "units": len(held),
                "why": "unit ids a live source of the collection holds too; kept for it",
            }
        )
    wanted = pa.array([u for u in units if u not in held], pa.string())
    warehouse = corpus.settings.warehouse
    for path in warehouse.rglob("*.parquet"):
        if path.is_file():
            asset = path.relative_to(warehouse).parts[0]
            # a file it cannot read is named, with what to do: the audit cannot say what it holds
            with damage(asset, path):
                table = pq.read_table(path.path, filesystem=path.fs)
            cols = table.column_names
            # unit ids are the collection's own: another collection's partition may reuse one
            named = _rows_naming(table, asset, wanted) if _holds(path, collection_name) else None
            if named is not None:
                if "source_id" in cols:  # the rows the source's id names are counted below
                    by_id = pc.equal(table["source_id"].combine_chunks(), source_id)
                    named = pc.and_(named, pc.invert(by_id.fill_null(False)))
                n = int(pc.sum(named).as_py() or 0)
                if n:
                    remaining.append(
                        {"store": "warehouse", "path": str(path), "rows": n, "match": "unit"}
                    )
            if "source_id" in cols:
                n = int(pc.sum(pc.equal(table["source_id"], source_id)).as_py() or 0)
                if n and "change" in cols:
                    # the manifest keeps one 'removed' row until the next scan: that row is the
                    # record of the deletion, not the source's content
                    removed = pc.and_(
                        pc.equal(table["source_id"], source_id),
                        pc.equal(table["change"], "removed"),
                    )
                    n -= int(pc.sum(removed).as_py() or 0)
                if n:
                    remaining.append(
                        {"store": "warehouse", "path": str(path), "rows": n, "match": "source_id"}
                    )
            elif "input_hash" in cols and exclusive_inputs:
                mask = pc.is_in(table["input_hash"], pa.array(exclusive_inputs, pa.string()))
                n = int(pc.sum(mask).as_py() or 0)
                if n:
                    remaining.append(
                        {"store": "warehouse", "path": str(path), "rows": n, "match": "input_hash"}
                    )
    learned, details_status = _details_left(corpus, collection_name, receipt)
    if learned:
        where_known = str(corpus.warehouse.path(identity_store.IDENTITIES, collection_name))
        remaining.append(
            {"store": "warehouse", "path": where_known, "rows": learned, "match": "address"}
        )
    for artifact in (receipt or {}).get("artifacts", []):
        if artifact.get("pages") == "left" and TraceStore(corpus.registry).pages_left(artifact):
            remaining.append(
                {
                    "store": "registry",
                    "location": "query_traces",
                    "rows": artifact.get("rows", 0),
                    "match": f"the deleted traces' bytes in the table's pages: {artifact['why']}",
                }
            )
    byte_scan = _scan_bytes(corpus, source_id, tomb, receipt, live_inputs)
    remaining.extend(byte_scan.pop("findings"))
    return {
        "source_id": source_id,
        "byte_scan": byte_scan,
        "identity_details": details_status,
        "tombstone": {
            k: (v.isoformat() if isinstance(v, dt.datetime) else v)
            for k, v in (tomb or {}).items()
            if k not in ("content_hashes", "input_hashes")
        }
        or None,
        "content_hashes": len(content_hashes),
        "input_hashes": len(input_hashes),
        "units": len(units),
        "remaining": remaining,
        "shared": shared,
        "clean": not remaining,
    }


# the column naming a unit in a partition that does not call it ``unit_id``: a sighting names
# its unit as its source, a queue item as its anchor
_UNIT_COLUMN_OF = {identity_store.SIGHTINGS: "source_id", QUEUE: "anchor"}
_UNIT_LISTS = ("units",)  # list columns of unit ids: the units a grouping's kept result read


def _deleted_units(receipt: dict[str, Any] | None, source_id: str) -> list[str]:
    """The unit ids of ``source_id`` its deletion took out, as its receipt keeps them; for a
    receipt that keeps none (written before receipts did, or none at all), the unit its id
    names (a message record's id is its unit's)."""
    kept = (receipt or {}).get("units")
    if isinstance(kept, dict):
        return sorted(u for u in kept.get(source_id, []) if u)
    unit = source_id.partition("/")[2]
    return [unit] if unit else []


def _holds(path: Location, collection: str) -> bool:
    """Whether the warehouse file ``path`` is a partition of ``collection`` (one of its
    shards' included)."""
    try:
        return split_key(path.stem).collection == collection
    except ValueError:  # not a partition key: no collection's
        return False


def _rows_naming(table: pa.Table, asset: str, units: pa.Array) -> pa.Array | None:
    """Which rows of ``table`` (a partition of ``asset``) name one of ``units`` in a unit
    column: a ``unit_id`` string column or one whose name ends in ``_unit_id`` (a group's
    ``resolved_by_unit_id``), the partition's own (:data:`_UNIT_COLUMN_OF`), or a list
    column of unit ids (:data:`_UNIT_LISTS`). None where it has no such column."""
    named: pa.Array | None = None
    for f in table.schema:
        if pa.types.is_string(f.type) and (
            f.name == "unit_id"
            or f.name.endswith("_unit_id")
            or f.name == _UNIT_COLUMN_OF.get(asset)
        ):
            hit = pc.is_in(table[f.name].combine_chunks(), value_set=units)
        elif f.name in _UNIT_LISTS and pa.types.is_list(f.type):
            column = table[f.name].combine_chunks()
            rows = pc.list_parent_indices(column).filter(
                pc.is_in(pc.list_flatten(column), value_set=units)
            )
            every = pa.array(range(table.num_rows), pa.int64())
            hit = pc.is_in(every, value_set=rows.cast(pa.int64()))
        else:
            continue
        named = hit if named is None else pc.or_(named, hit)
    return named


def _details_left(corpus: Home, collection: str, receipt: dict[str, Any] | None) -> tuple[int, str]:
    """How many identities of ``collection``'s registry still hold an address or number that
    only the deleted units showed (the receipt's ``identity_details``), and that neither a
    live unit shows now nor the people file gives (then it is theirs); with what was done
    ("not done: ..." when the receipt's hashes were keyed with a key the home no longer
    holds: none of them could be found, whatever the registry holds)."""
    if receipt is None:
        return 0, "not done: no receipt"
    fingerprints = receipt.get("fingerprints", {})
    kept = set(fingerprints.get("identity_details", []))
    if not kept:
        return 0, "done: the deletion took no address or number out"
    named = fingerprints.get("identity_details_key")
    key = corpus.registry.home_key(str(named)) if named else None
    wanted = fingerprints.get("identity_details_key_id")
    if key is not None and wanted is not None and _key_id(key) != wanted:
        return 0, (
            f"not done: the {len(kept)} address(es) and number(s) were hashed with a key "
            "this registry does not hold (rebuilt from its journal, or another home's)"
        )
    live = identity_store.live_details(corpus, collection)
    held = {
        person
        for person, detail in identity_store.identity_details(corpus, collection)
        if detail not in live and _detail_hash(receipt["receipt_id"], detail, key) in kept
    }
    return len(held), f"done: {len(kept)} address(es) and number(s) looked for"


def _receipt(settings: Settings, tomb: dict[str, Any] | None) -> dict[str, Any] | None:
    """The deletion receipt a tombstone names (None: none, or unreadable)."""
    if not tomb or not tomb.get("receipt"):
        return None
    try:
        where = receipt_location(settings, tomb["receipt"])
        receipt = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return receipt if isinstance(receipt, dict) else None


def _indexes_built_before(
    db: Any, names: set[str], receipt: dict[str, Any] | None, tomb: dict[str, Any]
) -> list[dict[str, Any]]:
    """The ``doc_id``, full-text and ANN indexes of the generation tables that held the deleted
    rows (the receipt names them; every generation table when it cannot) built before the
    deletion: such an index keeps the deleted rows' ids, words or PQ codes until it is built
    again (compaction does), and its pages may be compressed, so the bytes cannot show it; its
    build time can."""
    removed = tomb["removed_at"]
    if isinstance(removed, str):
        removed = dt.datetime.fromisoformat(removed)
    if removed.tzinfo is None:
        removed = removed.replace(tzinfo=dt.UTC)
    held = (receipt or {}).get("fragments_to_rewrite")
    tables = (
        sorted(names & set(held))
        if isinstance(held, dict)
        else sorted(n for n in names if n.startswith("gen_"))
    )
    holding = set(index_store.indexes_holding_rows())
    out = []
    for name in tables:
        for idx in db.open_table(name).list_indices():
            built = getattr(idx, "created_at", None)
            if idx.name in holding and (built is None or built < removed):
                out.append(
                    {
                        "store": "lance index",
                        "table": name,
                        "index": idx.name,
                        "match": "built before the deletion (may hold its ids or words; compact "
                        "rebuilds it)",
                    }
                )
    return out


def _receipt_fingerprints(receipt: dict[str, Any] | None) -> dict[str, Any] | None:
    if receipt is None:
        return None
    fps = receipt.get("fingerprints")
    return fps if isinstance(fps, dict) and "texts" in fps else None


def _live_texts(corpus: Home, source_id: str) -> Iterator[bytes]:
    """Block contents and input texts of every configured collection, but the audited source's."""
    for name in partitions(corpus):
        for asset, column in (("parsed_blocks", "content"), ("embedding_inputs", "text")):
            table = corpus.warehouse.read(asset, (name,))
            if table is None or column not in table.column_names:
                continue
            live = table.filter(pc.not_equal(table["source_id"], source_id))[column]
            for chunk in live.chunks:
                yield b"\x00".join(t.encode("utf-8") for t in chunk.to_pylist() if t)


def _scan_bytes(
    corpus: Home,
    source_id: str,
    tomb: dict[str, Any] | None,
    receipt: dict[str, Any] | None,
    live_inputs: set[str],
) -> dict[str, Any]:
    """Every file of the home scanned for the fingerprints the receipt keeps; fingerprints of
    vectors whose input a live source uses, and of text windows live texts also hold, are
    dropped first (they are not the deleted source's content)."""
    fps = _receipt_fingerprints(receipt)
    if fps is None:
        why = "no tombstone" if not tomb else "its receipt keeps no fingerprints (older receipt)"
        return {"status": f"not done: {why}", "findings": []}
    key = None
    if fps.get("key"):  # a receipt written before fingerprints were keyed has none
        key = corpus.registry.home_key(str(fps["key"]))
        if _key_id(key) != fps.get("key_id"):
            why = "its fingerprints were keyed with a key this registry does not hold"
            return {"status": f"not done: {why} (rebuilt from its journal?)", "findings": []}
    labelled = {fp: "text" for fp in fps["texts"]}
    shared_vectors = 0
    for input_hash, vector_fps in fps.get("vectors", {}).items():
        if input_hash in live_inputs:
            shared_vectors += 1
            continue
        labelled.update({fp: "vector" for fp in vector_fps})
    needles = byte_audit.Needles(labelled, key=key)
    shared_windows: set[str] = set()
    for blob in _live_texts(corpus, source_id):
        shared_windows |= needles.find(blob)
    needles = needles.without(shared_windows)
    findings, cost = byte_audit.scan_tree(corpus.settings.roots, needles)
    return {
        "status": "done",
        "roots": [str(root) for root in corpus.settings.roots],
        "fingerprints": len(needles),
        "dropped_as_shared": {"text_windows": len(shared_windows), "vectors": shared_vectors},
        "texts_too_short": fps.get("texts_too_short", 0),
        "vectors_too_sparse": fps.get("vectors_too_sparse", 0),
        "cost": cost.to_json(),
        "lance_data_files": "read as raw bytes: vectors are stored plain, text may be compressed "
        "(FSST), so there a row's absence rests on its vector's fingerprints",
        "findings": [
            {
                "store": "bytes",
                **f.to_json(),
                "match": (
                    ", ".join(f"{n} {label} fingerprints" for label, n in sorted(f.matches.items()))
                    + f" in {f.layer}"
                    if f.matches
                    else f.detail
                ),
            }
            for f in findings
        ],
    }
