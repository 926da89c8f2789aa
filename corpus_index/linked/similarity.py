"""Topic similarity of any two units of a collection: TF-IDF cosine with document frequencies
counted over the whole collection, so words a group's members share weigh by how rare they are
in the collection (not in the group, where every shared word would weigh nothing)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

from corpus_index.linked.messages import Message
from corpus_index.linked.topic import tfidf_matrix


class Similarity:
    """Cosines between the units of one collection (by unit id)."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._row = {m.unit_id: i for i, m in enumerate(messages)}
        self._matrix = tfidf_matrix([f"{m.title}\n{m.text}" for m in messages])

    def pair(self, a: str, b: str) -> float:
        """The cosine of units ``a`` and ``b`` (0 for a unit not in the collection)."""
        ia, ib = self._row.get(a), self._row.get(b)
        if ia is None or ib is None:
            return 0.0
        return float(self._matrix[ia].multiply(self._matrix[ib]).sum())

    def against(self, a: str, ids: Sequence[str]) -> list[float]:
        """The cosines of unit ``a`` with each of ``ids`` (0 for units not in the collection)."""
        ia = self._row.get(a)
        rows = [self._row.get(i, -1) for i in ids]
        out = [0.0] * len(ids)
        known = [k for k, r in enumerate(rows) if r >= 0]
        if ia is None or not known:
            return out
        # one contiguous slice of rows (cheap in CSR) rather than picking rows one by one:
        # a question's candidates are close to it in time, so close in the collection's order
        lo = min(rows[k] for k in known)
        hi = max(rows[k] for k in known)
        sims = (self._matrix[lo : hi + 1] @ self._matrix[ia].T).toarray().ravel()
        for k in known:
            out[k] = float(sims[rows[k] - lo])
        return out

    def centroid(self, ids: Sequence[str]) -> sparse.csr_matrix:
        """The sum of the TF-IDF rows of ``ids`` (a ``1 x vocabulary`` row; units not in the
        collection add nothing): compare two with :func:`cosine`."""
        rows = [r for r in (self._row.get(i) for i in ids) if r is not None]
        ones = sparse.csr_matrix(np.ones((1, len(rows))))
        return sparse.csr_matrix(ones @ self._matrix[rows])

    def matrix(self, ids: Sequence[str]) -> np.ndarray:
        """Pairwise cosines of ``ids`` (units not in the collection have rows of 0)."""
        rows = [self._row.get(i, -1) for i in ids]
        known = [r for r in rows if r >= 0]
        out = np.zeros((len(ids), len(ids)), dtype=np.float64)
        if not known:
            return out
        sub = self._matrix[known]
        dense = (sub @ sub.T).toarray()
        where = [k for k, r in enumerate(rows) if r >= 0]
        out[np.ix_(where, where)] = dense
        return out

    def coherence(self, ids: Sequence[str]) -> float:
        """Mean pairwise cosine of ``ids`` (1.0 for a single unit: it agrees with itself)."""
        if len(ids) < 2:
            return 1.0
        sims = self.matrix(ids)
        n = len(ids)
        return float((sims.sum() - np.trace(sims)) / (n * (n - 1)))

    def central(self, ids: Sequence[str]) -> str:
        """The unit most like the others (the first of ``ids`` on a tie, or alone)."""
        if len(ids) < 3:
            return ids[0]
        sims = self.matrix(ids)
        scores = sims.sum(axis=1) - np.diag(sims)
        return ids[int(np.argmax(scores))]


def cosine(a: sparse.csr_matrix, b: sparse.csr_matrix) -> float:
    """The cosine of two sparse rows (0 when either is all zeros)."""
    norm = float(np.sqrt(a.multiply(a).sum() * b.multiply(b).sum()))
    return float(a.multiply(b).sum()) / norm if norm else 0.0
