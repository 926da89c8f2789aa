"""Topic clusters: units across channels and sources on one topic over days (seed "Linked
Context V2" §2.1, ``topic_cluster``), such as the van's brakes in the staff chat, the SMS to
the garage and the e-mail approving its quote.

What is clustered are threads, not single messages (a "yes pumpkin please" says little on its
own): each conversation, and each unit in none (an e-mail, an incident report, a shift note),
as the sum of its units' TF-IDF vectors (:class:`~corpus_index.linked.similarity.Similarity`).
Threads are taken in time order; each joins the open cluster whose centroid it is most like,
when at least ``JOIN`` alike, else starts one. A cluster is open while its newest thread is
under ``SPAN_S`` old, and a thread is compared with the ``MAX_OPEN`` most recent open clusters
at most: the work per thread is bounded, whatever the size of the collection, and the result
depends only on the units (in any order).

Only what the data supports becomes a group: at least ``MIN_THREADS`` threads and
``MIN_UNITS`` units, from at least two channels or sources, over at least two days, with a
coherence (mean pairwise cosine of its threads) of at least ``MIN_COHERENCE`` and at least
``MIN_SHARED`` words each in half its threads or more (one word in common is a coincidence,
not a topic); a cluster of
more than ``MAX_UNITS`` units is too broad to be a topic and is dropped. Its title is its topic
tags (:func:`topic_title`).

With a memo (:mod:`corpus_index.linked.memo`), the clustering resumes from a checkpoint: the
clusters after every ``CHECKPOINT`` threads (the open ones whole, a closed one as where its
threads are: no later thread can join it) are kept under a key chained over the threads
before them (their units' fingerprints and TF-IDF weighing), so a run clusters again only from
the last checkpoint its changes leave standing (an edit or a deletion before a checkpoint
changes its key). The last ``KEPT_CHECKPOINTS`` checkpoints are kept, the one resumed from, and
every ``SPARSE_CHECKPOINTS``-th further back: an edit anywhere resumes at most
``CHECKPOINT * SPARSE_CHECKPOINTS`` threads before the first thread it changes, not from the
start. A thread's vector is computed only for the threads it reads: those after the
checkpoint, and those of a cluster that passes the checks that need no vector. A checkpoint
names the newest time of the units it read, so deleting a newer unit keeps it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import combinations

from corpus_index.linked.describe import date_span
from corpus_index.linked.memo import Memo, UnitParts
from corpus_index.linked.messages import Message, day_of, time_key
from corpus_index.linked.records import Group, Member
from corpus_index.linked.similarity import Similarity, Vector, added, cosine

JOIN = 0.2  # a thread joins a cluster whose centroid it is at least this alike
SPAN_S = 21 * 24 * 3600.0  # a cluster takes no thread this long after its newest
MAX_OPEN = 64  # open clusters a thread is compared with, most recent first
MIN_THREADS = 3
MIN_UNITS = 4
MIN_COHERENCE = 0.2
MAX_UNITS = 40
MIN_SHARED = 2
CHECKPOINT = 256  # threads between two checkpoints of the clustering
KEPT_CHECKPOINTS = 4  # checkpoints kept for the next run: the last ones, and the one resumed
SPARSE_CHECKPOINTS = 8  # ... and every eighth, so an edit far back resumes near it


class _Cluster:
    __slots__ = ("_centroid", "_vector_of", "latest", "positions", "threads")

    def __init__(self, thread: list[Message], position: int, vector: Vector) -> None:
        self.threads = [thread]
        self.positions = [position]  # of its threads, in the time order of all threads
        self._centroid: Vector | None = vector
        self._vector_of: Callable[[list[Message]], Vector] | None = None
        self.latest = thread[-1].timestamp

    @property
    def centroid(self) -> Vector:
        """The sum of its threads' vectors. A cluster resumed closed (a checkpoint keeps no
        centroid for it: no later thread can join it) has it summed again when asked, in
        the order its threads joined, as the clustering summed it."""
        if self._centroid is None:
            assert self._vector_of is not None
            total = self._vector_of(self.threads[0])
            for thread in self.threads[1:]:
                total = added(total, self._vector_of(thread))
            self._centroid, self._vector_of = total, None
        return self._centroid

    @centroid.setter
    def centroid(self, value: Vector) -> None:
        self._centroid = value

    def closed(self, begin: float) -> bool:
        """Whether no thread beginning at ``begin`` or later can join it."""
        return begin - self.latest > SPAN_S


def _threads(
    units: Sequence[Message], conversations: Sequence[Sequence[str]]
) -> list[list[Message]]:
    """Each conversation's units, and each other unit alone, in order of their first unit."""
    by_id = {m.unit_id: m for m in units}
    taken: set[str] = set()
    out: list[list[Message]] = []
    for ids in conversations:
        thread = sorted((by_id[i] for i in ids if i in by_id), key=time_key)
        if thread:
            out.append(thread)
            taken.update(m.unit_id for m in thread)
    out.extend([m] for m in units if m.unit_id not in taken and not m.system)
    return sorted(out, key=lambda t: (t[0].timestamp, t[0].unit_id))


def _unit_vector(similarity: Similarity, thread: Sequence[Message]) -> Vector:
    total = similarity.centroid([m.unit_id for m in thread])
    norm = sum(w * w for w in total.values()) ** 0.5 or 1.0
    return {t: w / norm for t, w in total.items()}


def _plausible(threads: Sequence[Sequence[Message]]) -> bool:
    """The checks of :func:`_supported` that need no vector."""
    units = [m for t in threads for m in t]
    if len(threads) < MIN_THREADS or not MIN_UNITS <= len(units) <= MAX_UNITS:
        return False
    return len({(m.source, m.channel) for m in units}) >= 2 and len({day_of(m) for m in units}) >= 2


def _supported(threads: Sequence[Sequence[Message]], vectors: Sequence[Vector]) -> bool:
    if not _plausible(threads):
        return False
    pairs = list(combinations(vectors, 2))
    if sum(cosine(a, b) for a, b in pairs) / len(pairs) < MIN_COHERENCE:
        return False
    held = Counter(t for v in vectors for t in v)
    return sum(1 for n in held.values() if 2 * n >= len(vectors)) >= MIN_SHARED


def topic_clusters(
    units: Sequence[Message],
    *,
    conversations: Sequence[Sequence[str]],
    similarity: Similarity,
    memo: Memo | None = None,
    checkpoint: int = CHECKPOINT,
    parts: UnitParts | None = None,
) -> list[Group]:
    """The ``topic_cluster`` groups of one collection's ``units``, members in time order (all
    ``context``, each with its thread's likeness to the cluster as relevance).

    Args:
        conversations: the member ids of each conversation (a thread of its own).
        similarity: TF-IDF over the collection's units.
        memo: an earlier run's checkpoints (see the module's docstring); the groups are the
            same as without it.
        checkpoint: threads between two checkpoints.
        parts: with ``memo``, each unit's digest of its fingerprint and weighing (and its
            scope: the settled groups' parts, made or kept once a run), which the checkpoints'
            keys then chain over instead of hashing the fingerprints and weighings again.
    """
    threads = _threads(units, conversations)
    vectors: dict[int, Vector] = {}

    def vector_of(thread: list[Message]) -> Vector:
        found = vectors.get(id(thread))
        if found is None:
            found = vectors[id(thread)] = _unit_vector(similarity, thread)
        return found

    clusters = _clustered(threads, vector_of, similarity, memo, checkpoint, parts)
    out = []
    for c in clusters:
        if not _plausible(c.threads):
            continue
        mine = [vector_of(t) for t in c.threads]
        if not _supported(c.threads, mine):
            continue
        relevance = {
            m.unit_id: round(cosine(v, c.centroid), 4)
            for t, v in zip(c.threads, mine, strict=True)
            for m in t
        }
        ordered = sorted((m for t in c.threads for m in t), key=time_key)
        members = tuple(
            Member(m.unit_id, k + 1, "context", relevance=relevance[m.unit_id])
            for k, m in enumerate(ordered)
        )
        out.append(
            Group(
                group_type="topic_cluster",
                processing_profile="mixed",
                members=members,
                resolution_status="resolved",
            )
        )
    return out


def _clustered(
    threads: list[list[Message]],
    vector_of: Callable[[list[Message]], Vector],
    similarity: Similarity,
    memo: Memo | None,
    checkpoint: int,
    parts: UnitParts | None = None,
) -> list[_Cluster]:
    """The clusters of ``threads`` (in time order), from the last checkpoint of ``memo``
    whose threads are unchanged; the checkpoints of this run are kept in it."""
    keys = _checkpoint_keys(threads, similarity, memo, checkpoint, parts)
    start, clusters = _resumed(threads, keys, memo, vector_of)
    kept = set(sorted(keys)[-KEPT_CHECKPOINTS:])
    sparse = {k for k in keys if k % (checkpoint * SPARSE_CHECKPOINTS) == 0}
    kept |= sparse
    if memo is not None:
        for k in kept:
            # as it was (its key chains over every thread before it): kept, the last ones
            # before the one resumed from too, so a change that reaches the thread before the
            # last checkpoint resumes from the one before it, not from a sparse one
            if k < start:
                memo.has(keys[k])
    for k in range(start, len(threads) + 1):
        if memo is not None and k > start and k in kept:
            # the clusters' centroids hold words of any thread before: a deletion of a unit no
            # newer than the newest of them drops it
            newest = max((m.timestamp for t in threads[:k] for m in t), default=None)
            # a cluster closed to the last thread read is closed to every later one (they
            # begin no earlier): its centroid is not kept, only where its threads are
            begin = threads[k - 1][0].timestamp
            state = [
                [c.positions, None if c.closed(begin) else c.centroid, c.latest] for c in clusters
            ]
            memo.put(keys[k], state, units=None, until=newest)
        if k == len(threads):
            break
        thread = threads[k]
        vector = vector_of(thread)
        if not vector:
            continue
        begin = thread[0].timestamp
        best: tuple[float, int] | None = None
        open_ones = [j for j in range(len(clusters)) if not clusters[j].closed(begin)]
        for j in open_ones[-MAX_OPEN:]:
            sim = cosine(vector, clusters[j].centroid)
            if sim >= JOIN and (best is None or sim > best[0]):
                best = (sim, j)
        if best is None:
            clusters.append(_Cluster(thread, k, vector))
            continue
        chosen = clusters[best[1]]
        chosen.threads.append(thread)
        chosen.positions.append(k)
        chosen.centroid = added(chosen.centroid, vector)
        chosen.latest = max(chosen.latest, thread[-1].timestamp)
    return clusters


def _checkpoint_keys(
    threads: Sequence[Sequence[Message]],
    similarity: Similarity,
    memo: Memo | None,
    every: int,
    parts: UnitParts | None = None,
) -> dict[int, str]:
    """Thread count -> the key of the clusters after that many threads, every ``every``
    threads: each chained over the key before it and the threads between, as what a
    thread's vector and clustering read (its units, whole, and what their TF-IDF vectors are
    weighed by; with ``parts``, one digest a unit of these)."""
    if memo is None:
        return {}
    keys: dict[int, str] = {}
    key = memo.key("topics")
    if parts is not None:
        for k in range(every, len(threads) + 1, every):
            chain = hashlib.sha256(key.encode())
            for t in threads[k - every : k]:
                digests = parts(t)
                chain.update(len(digests).to_bytes(4, "big"))
                chain.update(b"".join(digests))
            key = keys[k] = memo.key("topics", "parts", chain.hexdigest())
        return keys
    for k in range(every, len(threads) + 1, every):
        part = [
            (
                [memo.fingerprint(m) for m in t],
                similarity.digests([m.unit_id for m in t]),
            )
            for t in threads[k - every : k]
        ]
        key = keys[k] = memo.key("topics", key, part)
    return keys


def _resumed(
    threads: list[list[Message]],
    keys: dict[int, str],
    memo: Memo | None,
    vector_of: Callable[[list[Message]], Vector],
) -> tuple[int, list[_Cluster]]:
    """The last checkpoint of ``keys`` that ``memo`` holds: its thread count and its
    clusters (none: from the start); a closed cluster's centroid, not kept, is summed from
    its threads' vectors (``vector_of``) if it is asked for."""
    for k in sorted(keys, reverse=True):
        kept = None if memo is None else memo.get(keys[k])
        if kept is None:
            continue
        clusters = []
        for positions, centroid, latest in kept:
            c = _Cluster(threads[positions[0]], positions[0], {})
            c.threads = [threads[p] for p in positions]
            c.positions = list(positions)
            c.latest = latest
            c._centroid = centroid  # None: closed, summed again when asked
            if centroid is None:
                c._vector_of = vector_of
            clusters.append(c)
        return k, clusters
    return 0, []


def topic_title(group: Group) -> Group:
    """``group`` (described) titled by its topic tags, then its domain tags, and its dates."""
    tags = [t.replace("_", " ") for t in (*group.topic_tags, *group.domain_tags)]
    what = ", ".join(dict.fromkeys(tags[:3])) or "Related messages"
    places = " and ".join(group.location_anchors[:2])
    where = f" at {places}" if places else ""
    span = date_span(group.event_date, group.event_date_end)
    return replace(group, title=f"Topic: {what}{where}, {span}")
