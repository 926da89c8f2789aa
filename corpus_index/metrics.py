"""Retrieval metrics the way IR evaluation computes them (trec_eval / BEIR conventions).

A run is a ranked list of document ids per query; qrels map each query to graded relevance
(``{doc_id: grade}``, grade > 0 is relevant). Duplicate ids in a ranking count once, at their
first rank, so a system cannot earn credit twice for the same document.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]


def dedupe(ranking: Iterable[str]) -> list[str]:
    """``ranking`` with later repeats of an id removed, order kept."""
    seen: set[str] = set()
    out = []
    for doc in ranking:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


def recall_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top ``k``."""
    rel = {d for d, g in relevant.items() if g > 0}
    if not rel:
        return 0.0
    return len(rel.intersection(dedupe(ranking)[:k])) / len(rel)


def precision_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Relevant documents in the top ``k``, divided by ``k`` (trec_eval's P@k)."""
    top = dedupe(ranking)[:k]
    return sum(1 for d in top if relevant.get(d, 0) > 0) / k


def mrr_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the top ``k``, else 0."""
    for rank, doc in enumerate(dedupe(ranking)[:k], start=1):
        if relevant.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k with graded gains (gain = grade, discount = log2(rank + 1)), as BEIR computes it."""
    dcg = sum(
        relevant.get(doc, 0) / math.log2(rank + 1)
        for rank, doc in enumerate(dedupe(ranking)[:k], start=1)
        if relevant.get(doc, 0) > 0
    )
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def evaluate(
    run: Run,
    qrels: Qrels,
    *,
    recall_ks: Sequence[int] = (1, 5, 10, 100),
    ndcg_k: int = 10,
    mrr_k: int = 10,
    precision_k: int = 10,
) -> dict[str, float]:
    """Mean metrics over every query of ``qrels`` that has a relevant document.

    A query missing from ``run`` scores 0 (it was asked and found nothing).
    """
    queries = [q for q, rel in qrels.items() if any(g > 0 for g in rel.values())]
    if not queries:
        return {}
    out: dict[str, float] = {}

    def mean(values: Iterable[float]) -> float:
        return round(statistics.fmean(values), 6)

    out[f"ndcg@{ndcg_k}"] = mean(ndcg_at(run.get(q, ()), qrels[q], ndcg_k) for q in queries)
    out[f"mrr@{mrr_k}"] = mean(mrr_at(run.get(q, ()), qrels[q], mrr_k) for q in queries)
    for k in recall_ks:
        out[f"recall@{k}"] = mean(recall_at(run.get(q, ()), qrels[q], k) for q in queries)
    out[f"p@{precision_k}"] = mean(
        precision_at(run.get(q, ()), qrels[q], precision_k) for q in queries
    )
    out["queries"] = len(queries)
    return out


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) by linear interpolation, as numpy's default computes it."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * pct / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
