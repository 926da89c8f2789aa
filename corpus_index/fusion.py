"""Rank fusion and result shaping, as pure functions over ids, ranks and scores.

Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): ``score(d) = Σ_i w_i / (k + r_i(d))``
with ranks starting at 1 and a list that lacks ``d`` contributing nothing. Weighted fusion
min-max normalizes each list's scores to [0, 1] first (cosine similarities and BM25 scores live
on different scales) and sums ``w_i * norm_i(d)``.

RRF ties are common (rank 3 in one list and absent from the other ties with the reverse), and
which one comes first moves nDCG by a few thousandths. The pipeline breaks them by the weighted
fusion score, so among equal ranks the candidate the retrievers scored more confidently comes
first, and only then by id.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")
RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]],
    *,
    k: int = RRF_K,
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Fused RRF score of every id that appears in any ranking.

    Args:
        rankings: list name -> ids best first. An id repeated within one list counts at its
            first (best) rank only.
        k: the RRF constant; larger values flatten the difference between ranks.
        weights: list name -> weight (default 1.0 each).

    Raises:
        ValueError: ``k`` is negative or a weight is negative.
    """
    if k < 0:
        raise ValueError(f"RRF k must be >= 0 (got {k})")
    fused: dict[str, float] = {}
    for name, ids in rankings.items():
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        if w < 0:
            raise ValueError(f"fusion weight of {name!r} must be >= 0 (got {w})")
        seen: set[str] = set()
        for rank, doc in enumerate(ids, start=1):
            if doc in seen:
                continue
            seen.add(doc)
            fused[doc] = fused.get(doc, 0.0) + w / (k + rank)
    return fused


def min_max(scores: Mapping[str, float]) -> dict[str, float]:
    """Scores scaled to [0, 1]; when every score is equal, each becomes 1.0."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return {d: 1.0 for d in scores}
    return {d: (s - lo) / (hi - lo) for d, s in scores.items()}


def z_scores(scores: Mapping[str, float]) -> dict[str, float]:
    """Scores as standard scores ``(s - mean) / stdev`` (population stdev); all equal -> 0.0."""
    if not scores:
        return {}
    n = len(scores)
    mean = sum(scores.values()) / n
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores.values()) / n)
    if sd == 0:
        return {d: 0.0 for d in scores}
    return {d: (s - mean) / sd for d, s in scores.items()}


def z_fusion(
    scores: Mapping[str, Mapping[str, float]],
    *,
    weights: Mapping[str, float] | None = None,
    complete: Collection[str] = (),
) -> dict[str, float]:
    """``Σ_i w_i * z_i(d)``: each list's scores standardized, then summed with weights.

    An id missing from a list gets that list's lowest standard score (it ranked below all it
    returned), unless the list is ``complete``: it holds every id that scores above 0 (a BM25
    list shorter than the depth asked for holds every row that matched a query term), so a
    missing id's score is known, 0. A complete list is standardized over every id of every
    list, the missing ones at 0: standardized over its matches alone, a short list of weak,
    similar matches would spread them over the whole scale as if they were strong evidence.

    Raises:
        ValueError: a weight is negative.
    """
    every = {d for by_id in scores.values() for d in by_id}
    fused = dict.fromkeys(every, 0.0)
    for name, by_id in scores.items():
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        if w < 0:
            raise ValueError(f"fusion weight of {name!r} must be >= 0 (got {w})")
        if not by_id:
            continue
        known = {d: by_id.get(d, 0.0) for d in every} if name in complete else by_id
        normed = z_scores(known)
        floor = min(normed.values())
        for d in every:
            fused[d] += w * normed.get(d, floor)
    return fused


def weighted_fusion(
    scores: Mapping[str, Mapping[str, float]], *, weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """``Σ_i w_i * minmax_i(d)`` over the lists (an id missing from a list gets 0 from it).

    Raises:
        ValueError: a weight is negative.
    """
    fused: dict[str, float] = {}
    for name, by_id in scores.items():
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        if w < 0:
            raise ValueError(f"fusion weight of {name!r} must be >= 0 (got {w})")
        for doc, s in min_max(by_id).items():
            fused[doc] = fused.get(doc, 0.0) + w * s
    return fused


def ranked(scores: Mapping[str, float], tiebreak: Mapping[str, float] | None = None) -> list[str]:
    """Ids by descending score, then descending ``tiebreak`` (when given), then id.

    Scores are compared at 12 decimals, so sums that are equal but were added in another order
    (``1/61 + 1/65`` and ``1/65 + 1/61``) tie instead of being split by a rounding error.
    """
    tb = tiebreak or {}
    return sorted(scores, key=lambda d: (-round(scores[d], 12), -tb.get(d, 0.0), d))


def dedupe(items: Sequence[T], key: Callable[[T], Hashable]) -> list[T]:
    """``items`` without later items whose key was already seen (order kept)."""
    seen: set[Hashable] = set()
    out: list[T] = []
    for item in items:
        kv = key(item)
        if kv not in seen:
            seen.add(kv)
            out.append(item)
    return out


def cap_per_group(items: Sequence[T], key: Callable[[T], Hashable], cap: int | None) -> list[T]:
    """``items`` keeping at most ``cap`` per group, best (earliest) first; ``None`` keeps all."""
    if cap is None:
        return list(items)
    if cap < 1:
        raise ValueError(f"per-document cap must be >= 1 (got {cap})")
    counts: dict[Hashable, int] = {}
    out: list[T] = []
    for item in items:
        g = key(item)
        if counts.get(g, 0) < cap:
            counts[g] = counts.get(g, 0) + 1
            out.append(item)
    return out
