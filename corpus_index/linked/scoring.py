"""How a grouping is scored against gold conversations (Kummerfeld et al. 2019, as the
evaluation data's SOURCE.md defines it): 1 - scaled VI, one-to-one overlap, and precision,
recall and F of whole conversations without singletons.

Only the messages the gold clusters cover are scored (N, pooled over logs); an auto
conversation is cut down to them, and a gold message no auto conversation holds counts as a
conversation of its own. Conversations are matched one-to-one within each log.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import linear_sum_assignment

from corpus_index.linked.clusters import split_id


class GroupingScores(NamedTuple):
    """The three figures, each on 0-100, and the counts they come from."""

    vi: float  # 100 x (1 - VI / log2 N)
    one_to_one: float
    precision: float
    recall: float
    f: float
    messages: int  # N
    gold_conversations: int
    auto_conversations: int


def score(gold: Sequence[Sequence[str]], auto: Sequence[Sequence[str]]) -> GroupingScores:
    """Score ``auto`` conversations against ``gold`` ones (lists of unit ids ``<stem>:<i>``).

    Raises:
        ValueError: gold is empty, or a message is in two gold (or two auto) conversations.
    """
    gold_of = _labels(gold, "gold")
    if not gold_of:
        raise ValueError("no gold conversations to score against")
    auto_all = _labels(auto, "auto")
    auto_of = {u: auto_all.get(u, -1 - i) for i, u in enumerate(sorted(gold_of))}
    n = len(gold_of)
    pairs = Counter((auto_of[u], gold_of[u]) for u in gold_of)
    vi = _vi(pairs, n)
    one = _one_to_one(pairs, gold_of)
    p, r, f, n_gold, n_auto = _exact(gold_of, auto_of)
    return GroupingScores(
        vi=100.0 * (1.0 - vi / math.log2(n)) if n > 1 else 100.0,
        one_to_one=100.0 * one / n,
        precision=p,
        recall=r,
        f=f,
        messages=n,
        gold_conversations=n_gold,
        auto_conversations=n_auto,
    )


def _labels(clusters: Sequence[Sequence[str]], what: str) -> dict[str, int]:
    label: dict[str, int] = {}
    for c, cluster in enumerate(clusters):
        for unit in cluster:
            if label.setdefault(unit, c) != c:
                raise ValueError(f"{unit} is in two {what} conversations")
    return label


def _vi(pairs: Counter[tuple[int, int]], n: int) -> float:
    """H(A|G) + H(G|A) in bits, from the joint counts."""
    a_count: Counter[int] = Counter()
    g_count: Counter[int] = Counter()
    for (a, g), c in pairs.items():
        a_count[a] += c
        g_count[g] += c
    total = 0.0
    for (a, g), c in pairs.items():
        # -p(a,g) [log p(a,g)/p(g) + log p(a,g)/p(a)]
        total -= c / n * (math.log2(c / g_count[g]) + math.log2(c / a_count[a]))
    return total


def _one_to_one(pairs: Counter[tuple[int, int]], gold_of: dict[str, int]) -> int:
    """Messages in the best one-to-one matching of auto and gold conversations, per log."""
    log_of_gold = {g: split_id(u)[0] for u, g in gold_of.items()}
    by_log: dict[str, dict[tuple[int, int], int]] = defaultdict(dict)
    for (a, g), c in pairs.items():
        by_log[log_of_gold[g]][(a, g)] = c
    matched = 0
    for cells in by_log.values():
        autos = sorted({a for a, _ in cells})
        golds = sorted({g for _, g in cells})
        ai = {a: i for i, a in enumerate(autos)}
        gi = {g: i for i, g in enumerate(golds)}
        table = np.zeros((len(autos), len(golds)))
        for (a, g), c in cells.items():
            table[ai[a], gi[g]] = c
        rows, cols = linear_sum_assignment(table, maximize=True)
        matched += int(table[rows, cols].sum())
    return matched


def _exact(
    gold_of: dict[str, int], auto_of: dict[str, int]
) -> tuple[float, float, float, int, int]:
    """Precision, recall, F (0-100) of conversations of two or more messages matched exactly,
    and how many such conversations each side has."""

    def sets(label: dict[str, int]) -> set[frozenset[str]]:
        members: dict[int, set[str]] = defaultdict(set)
        for unit, c in label.items():
            members[c].add(unit)
        return {frozenset(m) for m in members.values() if len(m) > 1}

    g, a = sets(gold_of), sets(auto_of)
    hit = len(g & a)
    p = 100.0 * hit / len(a) if a else 0.0
    r = 100.0 * hit / len(g) if g else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f, len(g), len(a)
