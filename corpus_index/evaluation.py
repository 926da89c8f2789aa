"""Retrieval evaluation of a generation on its namespace's golden set, and the eval gate.

A golden set (YAML, named by ``namespaces.<ns>.golden_set``) lists queries, each asked as a
principal (tenant + groups), with graded relevant ``(source_id, section)`` pairs. Every query
goes through the real search path against the generation under test, so the figures are what a
user of that generation would get.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from corpus_index.errors import ConfigError
from corpus_index.home import Home
from corpus_index.identities import read_small_file, yaml_of
from corpus_index.limits import Limits
from corpus_index.metrics import evaluate, percentile
from corpus_index.registry import Generation
from corpus_index.search import Principal, Searcher

GATE_METRICS = ("recall@5", "mrr@10", "ndcg@10")
EVAL_K = 10


@dataclass(frozen=True, slots=True)
class GoldenQuery:
    """One judged query, asked as ``tenant`` with ``groups``."""

    id: str
    text: str
    tenant: str
    groups: tuple[str, ...]
    relevant: dict[str, int]  # judged_id(source_id, section) -> grade


@dataclass(frozen=True, slots=True)
class GoldenSet:
    path: Path
    sha256: str
    queries: list[GoldenQuery]


def judged_id(source_id: str, section: str) -> str:
    """The unit a golden set judges: one section of one document."""
    return f"{source_id}#{section}"


def load_golden(path: Path) -> GoldenSet:
    """Read and validate a golden set; errors name the file and the query.

    The file is read within the default :class:`~corpus_index.limits.Limits` (its size, YAML
    aliases, nodes and nesting depth), as ``corpus.yaml`` is.

    Raises:
        ConfigError: the file is missing, not a regular file, unreadable, over a limit, not
            UTF-8, not YAML, or a query lacks a field.
    """
    limits = Limits()
    text = read_small_file(path, limits, "golden set", follow_links=True)
    data = yaml_of(path, text, limits)
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list):
        raise ConfigError(f"{path}: a golden set needs a list under 'queries'")
    if not data["queries"]:
        raise ConfigError(f"{path}: the golden set has no queries")
    queries: list[GoldenQuery] = []
    seen: set[str] = set()
    for i, q in enumerate(data["queries"]):
        where = f"{path}: queries[{i}]"
        if not isinstance(q, dict):
            raise ConfigError(f"{where}: must be a mapping")
        for key in ("id", "text", "tenant", "relevant"):
            if not q.get(key):
                raise ConfigError(f"{where}: missing {key!r}")
        qid = str(q["id"])
        if qid in seen:
            raise ConfigError(f"{where}: duplicate query id {qid!r}")
        seen.add(qid)
        relevant: dict[str, int] = {}
        for j, r in enumerate(q["relevant"]):
            if not isinstance(r, dict) or not r.get("source_id") or not r.get("section"):
                raise ConfigError(f"{where}.relevant[{j}]: needs source_id and section")
            grade = r.get("grade", 1)
            if not isinstance(grade, int) or grade < 1:
                raise ConfigError(f"{where}.relevant[{j}]: grade must be a positive integer")
            relevant[judged_id(str(r["source_id"]), str(r["section"]))] = grade
        queries.append(
            GoldenQuery(
                id=qid,
                text=str(q["text"]),
                tenant=str(q["tenant"]),
                groups=tuple(str(g) for g in q.get("groups") or ()),
                relevant=relevant,
            )
        )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()  # of the file's bytes, as read
    return GoldenSet(path=path, sha256=digest, queries=queries)


class GoldenRuns(NamedTuple):
    """Each golden query's ranking of judged ids, best first, and its latency (ms)."""

    run: dict[str, list[str]]
    latencies: list[float]
    mode: str


def rank_golden(
    home: Home, generation: Generation, golden: GoldenSet, *, k: int = EVAL_K
) -> GoldenRuns:
    """Ask every golden query against ``generation`` (its own embedder), as the gate asks it."""
    searcher = Searcher(home)
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    mode = ""
    for q in golden.queries:
        t0 = time.perf_counter()
        result = searcher.search(
            q.text,
            principal=Principal(q.tenant, q.groups),
            k=k,
            namespace=generation.spec.namespace,
            generation=generation.id,
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        run[q.id] = [judged_id(h.source_id, h.section) for h in result.hits]
        mode = str(result.trace.get("mode", ""))
    return GoldenRuns(run, latencies, mode)


def evaluate_generation(
    home: Home, generation: Generation, golden: GoldenSet, *, k: int = EVAL_K
) -> dict[str, Any]:
    """Ask every golden query against ``generation`` (its own embedder) and score the rankings."""
    version = home.store.version(generation)  # the rows it was asked over
    run, latencies, mode = rank_golden(home, generation, golden, k=k)
    metrics = evaluate(run, {q.id: q.relevant for q in golden.queries}, recall_ks=(5, 10))
    return {
        **metrics,
        "mode": mode,
        "latency_p50_ms": round(percentile(latencies, 50), 2),
        "latency_p95_ms": round(percentile(latencies, 95), 2),
        "golden_set": str(golden.path),
        "golden_sha256": golden.sha256,
        "generation": generation.id,
        "row_count": generation.row_count,
        "table_version": version,
        "evaluated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def regressions(
    candidate: dict[str, Any], baseline: dict[str, Any], tolerance: float
) -> dict[str, float]:
    """Gate metrics where ``candidate`` is worse than ``baseline`` by more than ``tolerance``
    (absolute), with the drop for each; a figure that is no finite number (or a tolerance that
    is none) counts as worse, never as within bounds."""
    out = {}
    for name in GATE_METRICS:
        if name in baseline and name in candidate:
            drop = float(baseline[name]) - float(candidate[name])
            if not math.isfinite(drop) or not math.isfinite(tolerance):
                out[name] = math.inf
            elif drop > tolerance + 1e-9:
                out[name] = round(drop, 6)
    return out
