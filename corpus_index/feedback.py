"""Pseudo-relevance feedback: one extra round over the top documents of a first search.

* Dense side, Rocchio (1971): the query vector moved towards the centroid of the feedback
  documents' vectors, ``q' = normalize(q + beta * mean(d_1..d_m))``.
* Lexical side, RM3 (Abdul-Jaleel et al., TREC 2004): a relevance model ``P(w|R) =
  Σ_d P(w|d) P(d|q)`` over the feedback documents (``P(w|d)`` = term frequency / length,
  ``P(d|q)`` from the first search's fused scores), its top terms not already in the query
  added to the query with weights ``(1 - lambda) * P(w|R)`` (renormalized over the kept terms)
  beside the original query at weight ``lambda``.

Both are pure functions; the searcher runs the second round.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
# short English function words: never expansion terms (the FTS index drops them as well)
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers him his how i if in into is it its
    itself just me more most my no nor not now of off on once only or other our ours out over
    own same she should so some such than that the their theirs them then there these they this
    those through to too under until up very was we were what when where which while who whom
    why will with would you your yours may might must shall upon within without however thus
    therefore whether either neither using used use via per et al""".split()  # noqa: SIM905
)


class Term(NamedTuple):
    """An expansion term and its weight."""

    term: str
    weight: float


def words(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (letters first; numbers and punctuation dropped)."""
    return [w.strip("'-") for w in _WORD.findall(text.lower()) if w.strip("'-")]


def rocchio(
    query: npt.NDArray[np.float32],
    feedback: npt.NDArray[np.float32],
    *,
    beta: float,
) -> npt.NDArray[np.float32]:
    """The query vector moved towards the feedback centroid, unit length.

    Args:
        query: the query's vector (``dim``).
        feedback: the feedback documents' vectors (``m x dim``); none leaves the query as is.
        beta: weight of the centroid (0 keeps the query's direction).

    Raises:
        ValueError: ``beta`` is negative or the dimensions differ.
    """
    if beta < 0:
        raise ValueError(f"Rocchio beta must be >= 0 (got {beta})")
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    fb = np.asarray(feedback, dtype=np.float32)
    if fb.size and (fb.ndim != 2 or fb.shape[1] != q.shape[0]):
        raise ValueError(f"feedback vectors have shape {fb.shape}; the query has {q.shape[0]} dims")
    moved = q + beta * fb.mean(axis=0) if fb.size else q
    norm = float(np.linalg.norm(moved))
    return (moved / norm).astype(np.float32) if norm > 0 else q


def unit_centroids(groups: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """One unit-length vector per group: the normalized mean of the group's vectors.

    A document's rows stand for the document this way: what its rows share (its subject)
    stays, what each row shares with rows of its kind in other documents (a section's
    template) averages out, and a one-row document is its own row.

    Args:
        groups: each a ``rows x dim`` array (at least one row each).

    Raises:
        ValueError: a group is empty or the dimensions differ.
    """
    out = []
    for i, g in enumerate(groups):
        rows = np.asarray(g, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] == 0:
            raise ValueError(f"feedback group {i} has shape {rows.shape}; it needs >= 1 row")
        mean = rows.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        out.append(mean / norm if norm > 0 else mean)
    if len({v.shape[0] for v in out}) > 1:
        raise ValueError("feedback groups have vectors of different dimensions")
    return np.asarray(out, dtype=np.float32)


def expansion_terms(
    query: str,
    feedback: Sequence[str],
    *,
    doc_weights: Sequence[float] | None = None,
    terms: int = 10,
    min_length: int = 3,
) -> list[Term]:
    """The RM3 relevance model's top ``terms`` words of the feedback texts, not in the query.

    Args:
        query: the query text (its words are never expansion terms).
        feedback: the feedback documents' texts, best first.
        doc_weights: ``P(d|q)`` up to a constant, one per feedback text (default: equal).
        terms: how many terms to keep.
        min_length: shortest word considered.

    Returns:
        Terms by descending weight (then alphabetically), weights summing to 1 (empty when the
        feedback has no usable word).

    Raises:
        ValueError: ``doc_weights`` does not match ``feedback`` or has a negative weight.
    """
    weights = [1.0] * len(feedback) if doc_weights is None else [float(w) for w in doc_weights]
    if len(weights) != len(feedback):
        raise ValueError(f"{len(weights)} document weights for {len(feedback)} feedback texts")
    if any(w < 0 for w in weights):
        raise ValueError("feedback document weights must be >= 0")
    total_w = sum(weights)
    if total_w <= 0:
        return []
    asked = set(words(query))
    model: dict[str, float] = {}
    for text, w in zip(feedback, weights, strict=True):
        toks = [t for t in words(text) if len(t) >= min_length and t not in STOPWORDS]
        if not toks:
            continue
        for term, tf in Counter(toks).items():
            model[term] = model.get(term, 0.0) + (tf / len(toks)) * (w / total_w)
    kept = sorted(
        ((t, p) for t, p in model.items() if t not in asked), key=lambda tp: (-tp[1], tp[0])
    )[:terms]
    mass = sum(p for _, p in kept)
    return [Term(t, p / mass) for t, p in kept] if mass > 0 else []
