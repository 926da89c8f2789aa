"""Topic similarity between messages: TF-IDF cosine by default (cheap, no model), or the
cosine of vectors from an embedding function, the optional hook for semantic distance."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
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


def words(text: str) -> list[str]:
    """The tokens of ``text`` that TF-IDF weighs: stop words and single letters left out."""
    return [t for t in tokens(text) if t not in STOPWORDS and len(t) > 1]


def document_frequencies(docs: Sequence[Sequence[str]]) -> Counter[str]:
    """How many of ``docs`` (each a text's :func:`words`) hold each word."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(doc))
    return df


def tfidf_weights(doc: Sequence[str], df: Mapping[str, int], n: int) -> dict[str, float]:
    """One text's L2-normalised TF-IDF weights by word (sublinear term frequency), from its
    :func:`words` and the document frequencies ``df`` counted over ``n`` texts."""
    counts = Counter(doc)
    weights = {
        t: (1 + math.log(c)) * math.log((1 + n) / (1 + df.get(t, 0))) for t, c in counts.items()
    }
    norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
    return {t: w / norm for t, w in weights.items()}


def tfidf_matrix(texts: Sequence[str]) -> sparse.csr_matrix:
    """Rows of :func:`tfidf_weights`, with document frequencies counted over ``texts``
    themselves."""
    docs = [words(text) for text in texts]
    df = document_frequencies(docs)
    vocab = {t: i for i, t in enumerate(sorted(df))}
    n = max(len(docs), 1)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for r, doc in enumerate(docs):
        for t, w in tfidf_weights(doc, df, n).items():
            rows.append(r)
            cols.append(vocab[t])
            vals.append(w)
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(docs), max(len(vocab), 1)))


TOPIC_BLOCK = 2048  # messages whose TF-IDF document frequencies are counted together
# a channel's first messages, weighed together (see :func:`trailing_tfidf`)
FIRST_WEIGHED = 256


def trailing_tfidf(
    texts: Sequence[str], lo: int, *, span: int = TOPIC_BLOCK, first: int = FIRST_WEIGHED
) -> sparse.csr_matrix:
    """Rows of :func:`tfidf_weights` of ``texts[lo:]``, each
    text's document frequencies counted over the ``span`` texts that end with it, or, for the
    ``first`` texts, over the first ``first`` together (too few texts come before them to
    weigh words by): past the first ``first``, a text is weighed by what was written up to
    it, never after, so adding a text changes no row before it."""
    base = 0 if lo < first else max(lo - span + 1, 0)
    docs = [words(text) for text in texts[base:]]
    opening = document_frequencies(docs[: first - base]) if base < first else Counter()
    df: Counter[str] = Counter()
    vocab: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for r, doc in enumerate(docs):
        i = base + r
        df.update(set(doc))
        if r >= span:
            df.subtract(set(docs[r - span]))
        if i < lo:
            continue
        counted, n = (opening, min(len(texts), first)) if i < first else (df, min(i + 1, span))
        for t, w in tfidf_weights(doc, counted, n).items():
            rows.append(i - lo)
            cols.append(vocab.setdefault(t, len(vocab)))
            vals.append(w)
    shape = (len(texts) - lo, max(len(vocab), 1))
    return sparse.csr_matrix((vals, (rows, cols)), shape=shape)


def band_similarity(
    texts: Sequence[str], window: int, *, embed: Embed | None = None, start: int = 0
) -> np.ndarray:
    """``sim[i, k - 1]``: the cosine of message ``i`` and message ``i - k`` for k in
    1..window (0 where ``i - k < 0``), by TF-IDF, or by ``embed`` vectors when given.

    Each message's TF-IDF document frequencies are those of the ``TOPIC_BLOCK`` messages that
    end with it (:func:`trailing_tfidf`), never of the whole channel nor of messages after it,
    but for the channel's first ``FIRST_WEIGHED``, which are weighed together: a message added
    past them changes no similarity before it, so a channel can be linked again from its
    first changed message on (:mod:`corpus_index.linked.relink`). Rows before ``start`` are
    left 0 (not computed).
    """
    n = len(texts)
    band = np.zeros((n, window), dtype=np.float32)
    if n < 2:
        return band
    lo = max(start - window, 0)
    if embed is not None:
        raw = np.asarray(embed(list(texts[lo:])), dtype=np.float32)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        vectors = (raw / np.where(norms == 0, 1, norms)).astype(np.float32)
        _fill(band, vectors, lo, start, n, window, dense=True)
        return band
    _fill(band, trailing_tfidf(texts, lo), lo, start, n, window, dense=False)
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
