"""Topic similarity of any two units of a collection: TF-IDF cosine, with document frequencies
counted per block of units (in the collection's time order, about
:data:`~corpus_index.linked.topic.TOPIC_BLOCK` each): a unit is weighed by the frequencies of
the block before its own, so words a group's members share weigh by how rare they are around
them (not in the group, where every shared word would weigh nothing).

Counting over the block before, not the whole collection nor the unit's own block, keeps a
unit's vector fixed while that block and its own text are: a message added after the first
block changes no vector but its own, so what was computed from the others (a group's
coherence, a question's scored answers) can be kept from an earlier run
(:meth:`Similarity.block_digest` names what a unit's vector is weighed by). A collection of
one block (any under half a block) is weighed by its own frequencies, as a whole, and a unit
added to it changes every vector. A block's frequencies are counted when a unit weighed by them
is first asked about, and a unit's vector is made then, one unit at a time.

Where a block ends is read from the units, not counted: a block ends at a unit whose id
hashes to a marker once it holds half a block, and at twice a block at most
(:func:`block_starts`). A unit removed, edited or arriving late in the middle of a long
collection then changes its own block and the one weighed by it, not every block after it,
as blocks of a fixed count would (every later unit would move into another block).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from corpus_index.linked.messages import Message
from corpus_index.linked.topic import TOPIC_BLOCK, document_frequencies, tfidf_weights, words

Vector = dict[str, float]  # a unit's L2-normalised TF-IDF weights by word


def _frequencies(texts: Sequence[str]) -> tuple[Counter[str], int]:
    """The document frequencies of ``texts``' :func:`~corpus_index.linked.topic.words`, and
    how many texts they were counted over (at least 1), as
    :func:`~corpus_index.linked.topic.tfidf_weights` reads them."""
    return document_frequencies([words(text) for text in texts]), max(len(texts), 1)


def _dense(vectors: Sequence[Vector]) -> np.ndarray:
    """``vectors`` as rows of one dense matrix over the words they hold."""
    words: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    weights: list[float] = []
    for r, v in enumerate(vectors):
        for t, w in v.items():
            rows.append(r)
            cols.append(words.setdefault(t, len(words)))
            weights.append(w)
    out = np.zeros((len(vectors), max(len(words), 1)), dtype=np.float64)
    out[rows, cols] = weights  # one write: each (row, word) is in one vector once
    return out


def block_starts(ids: Sequence[str], block: int = TOPIC_BLOCK) -> list[int]:
    """The rows (of ``ids``, in time order) where each block begins, the first at 0: a block
    ends after a unit whose id's CRC-32 is a multiple of ``block - block // 2`` once it holds
    ``block // 2`` units, or at ``2 * block`` units; about ``block`` units each. The ends
    depend on the units' ids alone, so a change inside one block leaves the others' ends
    where they were (unless it crosses the half-block mark before its marker)."""
    least = max(block // 2, 1)
    every = max(block - least, 1)
    most = max(2 * block, least)
    starts = [0]
    size = 0
    for row, unit in enumerate(ids):
        size += 1
        marked = zlib.crc32(unit.encode("utf-8")) % every == 0
        if (size >= least and marked) or size >= most:
            starts.append(row + 1)
            size = 0
    if len(starts) > 1 and starts[-1] == len(ids):
        starts.pop()  # the last unit closed a block: no empty block after it
    return starts


class Similarity:
    """Cosines between the units of one collection (by unit id), ``messages`` in time order;
    document frequencies counted per block of about ``block`` units (:func:`block_starts`)."""

    def __init__(self, messages: Sequence[Message], *, block: int = TOPIC_BLOCK) -> None:
        self._row = {m.unit_id: i for i, m in enumerate(messages)}
        self._texts = [f"{m.title}\n{m.text}" for m in messages]
        self._ids = [m.unit_id for m in messages]
        self._starts = block_starts(self._ids, block)
        self._ends = [*self._starts[1:], len(self._ids)]
        # each block's document frequencies (those its units are weighed by), and each
        # unit's vector (by row): made when first asked, a unit at a time
        self._counted: dict[int, tuple[Counter[str], int]] = {}
        self._vectors: dict[int, Vector] = {}
        self._digests: dict[int, str] = {}

    def _block(self, row: int) -> int:
        return bisect.bisect_right(self._starts, row) - 1

    def block_of(self, unit: str) -> int | None:
        """The block ``unit`` is weighed in (None: not in the collection)."""
        row = self._row.get(unit)
        return None if row is None else self._block(row)

    def digest(self, block: int) -> str:
        """sha256 of what the vectors of ``block`` are computed from (its units' ids and
        texts, in order)."""
        if block not in self._digests:
            h = hashlib.sha256()
            lo, hi = self._starts[block], self._ends[block]
            for unit, text in zip(self._ids[lo:hi], self._texts[lo:hi], strict=True):
                for part in (unit, text):
                    raw = part.encode("utf-8")
                    h.update(len(raw).to_bytes(8, "big") + raw)
            self._digests[block] = h.hexdigest()
        return self._digests[block]

    def block_digest(self, unit: str) -> str | None:
        """A digest of what ``unit``'s vector is weighed by, besides its own text (None: not
        in the collection): its block's units, its place among them included, in the first
        block; the block before its own in any other."""
        row = self._row.get(unit)
        return None if row is None else self._weighed_by(self._block(row))

    def _weighed_by(self, block: int) -> str:
        return f"own:{self.digest(0)}" if block == 0 else f"before:{self.digest(block - 1)}"

    def know(self, digests: Mapping[int, str]) -> None:
        """Take ``digests`` (block -> its :meth:`digest`, known to be what hashing it would
        give: the block is one an earlier run hashed, with the same units) instead of
        hashing those blocks."""
        self._digests.update(digests)

    def blocks(self) -> list[list[str]]:
        """Each block's unit ids, in block order."""
        return [self._ids[lo:hi] for lo, hi in zip(self._starts, self._ends, strict=True)]

    def digested(self) -> list[tuple[str, int]]:
        """Each block's :meth:`digest` and how many units it holds, in block order."""
        return [
            (self.digest(b), hi - lo)
            for b, (lo, hi) in enumerate(zip(self._starts, self._ends, strict=True))
        ]

    def weighing(self) -> list[tuple[str, list[str]]]:
        """Each block's :meth:`block_digest` (what its units are weighed by) and its units'
        ids, in block order."""
        return [
            (self._weighed_by(b), self._ids[lo:hi])
            for b, (lo, hi) in enumerate(zip(self._starts, self._ends, strict=True))
        ]

    def digests(self, ids: Sequence[str]) -> list[str]:
        """The :meth:`block_digest` of the blocks ``ids`` are in, in block order."""
        rows = self._row
        blocks = sorted({self._block(r) for r in (rows.get(i) for i in ids) if r is not None})
        return [self._weighed_by(b) for b in blocks]

    def _vector(self, row: int) -> Vector:
        found = self._vectors.get(row)
        if found is None:
            block = self._block(row)
            if block not in self._counted:
                counted = 0 if block == 0 else block - 1  # the first block: by itself
                texts = self._texts[self._starts[counted] : self._ends[counted]]
                self._counted[block] = _frequencies(texts)
            df, n = self._counted[block]
            found = self._vectors[row] = tfidf_weights(words(self._texts[row]), df, n)
        return found

    def vector(self, unit: str) -> Vector:
        """The TF-IDF vector of ``unit`` (empty for a unit not in the collection)."""
        row = self._row.get(unit)
        return {} if row is None else self._vector(row)

    def pair(self, a: str, b: str) -> float:
        """The cosine of units ``a`` and ``b`` (0 for a unit not in the collection)."""
        va, vb = self.vector(a), self.vector(b)
        if len(vb) < len(va):
            va, vb = vb, va
        return float(sum(w * vb[t] for t, w in va.items() if t in vb))

    def against(self, a: str, ids: Sequence[str]) -> list[float]:
        """The cosines of unit ``a`` with each of ``ids`` (0 for units not in the collection)."""
        va = self.vector(a)
        if not va or not ids:
            return [0.0] * len(ids)
        return [self.pair(a, i) for i in ids]

    def centroid(self, ids: Sequence[str]) -> Vector:
        """The sum of the TF-IDF vectors of ``ids`` (units not in the collection add nothing):
        compare two with :func:`cosine`, join two with :func:`added`."""
        out: Vector = {}
        for unit in ids:
            for t, w in self.vector(unit).items():
                out[t] = out.get(t, 0.0) + w
        return out

    def matrix(self, ids: Sequence[str]) -> np.ndarray:
        """Pairwise cosines of ``ids`` (units not in the collection have rows of 0)."""
        dense = _dense([self.vector(i) for i in ids])
        out: np.ndarray = dense @ dense.T
        return out

    def coherence(self, ids: Sequence[str]) -> float:
        """Mean pairwise cosine of ``ids`` (1.0 for a single unit: it agrees with itself)."""
        return self.central_and_coherence(ids)[1]

    def central(self, ids: Sequence[str]) -> str:
        """The unit most like the others (the first of ``ids`` on a tie, or alone)."""
        return self.central_and_coherence(ids)[0]

    def central_and_coherence(self, ids: Sequence[str]) -> tuple[str, float]:
        """:meth:`central` and :meth:`coherence` of ``ids`` (not empty) from one matrix of
        their cosines."""
        if len(ids) < 2:
            return ids[0], 1.0
        sims = self.matrix(ids)
        n = len(ids)
        coherence = float((sims.sum() - np.trace(sims)) / (n * (n - 1)))
        if n < 3:
            return ids[0], coherence
        scores = sims.sum(axis=1) - np.diag(sims)
        return ids[int(np.argmax(scores))], coherence


def added(a: Vector, b: Vector) -> Vector:
    """The word-by-word sum of two vectors."""
    out = dict(a)
    for t, w in b.items():
        out[t] = out.get(t, 0.0) + w
    return out


def cosine(a: Vector, b: Vector) -> float:
    """The cosine of two vectors (0 when either is empty)."""
    if len(b) < len(a):
        a, b = b, a
    norm = math.sqrt(sum(w * w for w in a.values()) * sum(w * w for w in b.values()))
    return sum(w * b[t] for t, w in a.items() if t in b) / norm if norm else 0.0
