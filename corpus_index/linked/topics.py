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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations

from corpus_index.linked.describe import date_span
from corpus_index.linked.messages import Message, day_of
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


class _Cluster:
    __slots__ = ("centroid", "latest", "threads")

    def __init__(self, thread: list[Message], vector: Vector) -> None:
        self.threads = [thread]
        self.centroid = vector
        self.latest = thread[-1].timestamp


def _threads(
    units: Sequence[Message], conversations: Sequence[Sequence[str]]
) -> list[list[Message]]:
    """Each conversation's units, and each other unit alone, in order of their first unit."""
    by_id = {m.unit_id: m for m in units}
    taken: set[str] = set()
    out: list[list[Message]] = []
    for ids in conversations:
        thread = sorted(
            (by_id[i] for i in ids if i in by_id), key=lambda m: (m.timestamp, m.unit_id)
        )
        if thread:
            out.append(thread)
            taken.update(m.unit_id for m in thread)
    out.extend([m] for m in units if m.unit_id not in taken and not m.system)
    return sorted(out, key=lambda t: (t[0].timestamp, t[0].unit_id))


def _unit_vector(similarity: Similarity, thread: Sequence[Message]) -> Vector:
    total = similarity.centroid([m.unit_id for m in thread])
    norm = sum(w * w for w in total.values()) ** 0.5 or 1.0
    return {t: w / norm for t, w in total.items()}


def _supported(threads: Sequence[Sequence[Message]], vectors: Sequence[Vector]) -> bool:
    units = [m for t in threads for m in t]
    if len(threads) < MIN_THREADS or not MIN_UNITS <= len(units) <= MAX_UNITS:
        return False
    if len({(m.source, m.channel) for m in units}) < 2 or len({day_of(m) for m in units}) < 2:
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
) -> list[Group]:
    """The ``topic_cluster`` groups of one collection's ``units``, members in time order (all
    ``context``, each with its thread's likeness to the cluster as relevance).

    Args:
        conversations: the member ids of each conversation (a thread of its own).
        similarity: TF-IDF over the collection's units.
    """
    clusters: list[_Cluster] = []
    vectors: dict[int, Vector] = {}
    for thread in _threads(units, conversations):
        vector = _unit_vector(similarity, thread)
        if not vector:
            continue
        vectors[id(thread)] = vector
        start = thread[0].timestamp
        best: tuple[float, int] | None = None
        open_ones = [k for k in range(len(clusters)) if start - clusters[k].latest <= SPAN_S]
        for k in open_ones[-MAX_OPEN:]:
            sim = cosine(vector, clusters[k].centroid)
            if sim >= JOIN and (best is None or sim > best[0]):
                best = (sim, k)
        if best is None:
            clusters.append(_Cluster(thread, vector))
            continue
        chosen = clusters[best[1]]
        chosen.threads.append(thread)
        chosen.centroid = added(chosen.centroid, vector)
        chosen.latest = max(chosen.latest, thread[-1].timestamp)
    out = []
    for c in clusters:
        mine = [vectors[id(t)] for t in c.threads]
        if not _supported(c.threads, mine):
            continue
        relevance = {
            m.unit_id: round(cosine(v, c.centroid), 4)
            for t, v in zip(c.threads, mine, strict=True)
            for m in t
        }
        ordered = sorted((m for t in c.threads for m in t), key=lambda m: (m.timestamp, m.unit_id))
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


def topic_title(group: Group) -> Group:
    """``group`` (described) titled by its topic tags, then its domain tags, and its dates."""
    tags = [t.replace("_", " ") for t in (*group.topic_tags, *group.domain_tags)]
    what = ", ".join(dict.fromkeys(tags[:3])) or "Related messages"
    places = " and ".join(group.location_anchors[:2])
    where = f" at {places}" if places else ""
    span = date_span(group.event_date, group.event_date_end)
    return replace(group, title=f"Topic: {what}{where}, {span}")
