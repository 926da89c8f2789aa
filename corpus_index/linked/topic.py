"""Topic similarity between messages: TF-IDF cosine by default (cheap, no model), or the
cosine of vectors from an embedding function, the optional hook for semantic distance."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import sparse

# embeds texts as rows of unit-norm (or any) float vectors; see :func:`band_similarity`
Embed = Callable[[list[str]], np.ndarray]

_TOKEN = re.compile(r"[a-z0-9][a-z0-9_.+\-']*")
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
    "have", "how", "i", "if", "in", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or",
    "so", "that", "the", "then", "there", "this", "to", "was", "what", "when", "where", "which",
    "who", "will", "with", "you", "your", "yes", "ok", "im", "it's", "i'm", "just",
})
# fmt: on


def tokens(text: str) -> list[str]:
    """Lower-case word tokens of ``text`` (trailing dots and dashes dropped)."""
    return [t.rstrip(".-'") for t in _TOKEN.findall(text.lower())]


def tfidf_matrix(texts: Sequence[str]) -> sparse.csr_matrix:
    """Rows of L2-normalised TF-IDF weights (sublinear term frequency, stop words left out),
    with document frequencies counted over ``texts`` themselves."""
    docs = [[t for t in tokens(text) if t not in STOPWORDS and len(t) > 1] for text in texts]
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(doc))
    vocab = {t: i for i, t in enumerate(sorted(df))}
    n = max(len(docs), 1)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for r, doc in enumerate(docs):
        counts = Counter(doc)
        weights = {
            t: (1 + math.log(c)) * math.log((1 + n) / (1 + df[t])) for t, c in counts.items()
        }
        norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
        for t, w in weights.items():
            rows.append(r)
            cols.append(vocab[t])
            vals.append(w / norm)
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(docs), max(len(vocab), 1)))


TOPIC_BLOCK = 2048  # messages whose TF-IDF document frequencies are counted together


def band_similarity(
    texts: Sequence[str], window: int, *, embed: Embed | None = None, start: int = 0
) -> np.ndarray:
    """``sim[i, k - 1]``: the cosine of message ``i`` and message ``i - k`` for k in
    1..window (0 where ``i - k < 0``), by TF-IDF, or by ``embed`` vectors when given.

    TF-IDF document frequencies are counted per block of ``TOPIC_BLOCK`` messages (with the
    ``window`` before it), never over the whole channel: a message added at the end changes
    the similarities of its own block only, so a channel can be linked again from that block
    on (:mod:`corpus_index.linked.relink`). Rows before the block holding ``start`` are left 0
    (not computed).
    """
    n = len(texts)
    band = np.zeros((n, window), dtype=np.float32)
    if n < 2:
        return band
    first = start - start % TOPIC_BLOCK
    if embed is not None:
        lo = max(first - window, 0)
        raw = np.asarray(embed(list(texts[lo:])), dtype=np.float32)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        vectors = (raw / np.where(norms == 0, 1, norms)).astype(np.float32)
        _fill(band, vectors, lo, first, n, window, dense=True)
        return band
    for b0 in range(first, n, TOPIC_BLOCK):
        lo, hi = max(b0 - window, 0), min(b0 + TOPIC_BLOCK, n)
        _fill(band, tfidf_matrix(texts[lo:hi]), lo, b0, hi, window, dense=False)
    return band


def _fill(band: np.ndarray, m: Any, lo: int, b0: int, hi: int, window: int, *, dense: bool) -> None:
    """Rows ``b0`` to ``hi`` of ``band`` from the vectors ``m`` of messages ``lo`` to ``hi``."""
    for k in range(1, window + 1):
        rows = np.arange(max(b0, lo + k), hi)
        if not len(rows):
            break
        a, b = m[rows - lo], m[rows - lo - k]
        if dense:
            band[rows, k - 1] = np.einsum("ij,ij->i", a, b)
        else:
            band[rows, k - 1] = np.asarray(a.multiply(b).sum(axis=1)).ravel()
