"""``corpus eval DATASET_DIR``: retrieval evaluation on a BEIR-format collection, through the
real pipeline and the real search path.

The dataset is ingested as a ``beir`` collection into a home of its own
(``<home>/evals/<dataset>/``: its own namespace, tenant, generations and Dagster runs), so it is
never mixed with the user's collections, and its embedding cache makes a second eval embed
nothing. Every query runs through ``Searcher.search`` as the dataset's tenant; the metrics are
the IR community's (``corpus_index.metrics``) and are stored in the user's registry per
generation and mode.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from corpus_index.config import Settings, home_of_its_own
from corpus_index.errors import ConfigError
from corpus_index.home import Home
from corpus_index.kinds.beir import BEIR
from corpus_index.lifecycle import promote
from corpus_index.metrics import evaluate, percentile
from corpus_index.registry import open_registry
from corpus_index.runner import PipelineRunner, load_runner
from corpus_index.search import Principal, Searcher

MODES = ("dense", "lexical", "hybrid")
# hybrid variants an eval can score beside the namespace's default hybrid: name -> search options
HYBRID_VARIANTS: dict[str, dict[str, Any]] = {
    "hybrid-rrf": {"fusion_method": "rrf", "feedback": False},
    "hybrid-zscore": {"fusion_method": "zscore", "feedback": False},
    "hybrid-rrf-feedback": {"fusion_method": "rrf", "feedback": True},
}
DEFAULT_KS = (1, 5, 10, 100)
EVAL_GROUP = "eval"


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    path: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_dataset(path: Path) -> Dataset:
    """Read ``queries.jsonl`` and ``qrels.tsv`` (or ``qrels/test.tsv``); corpus.jsonl is read by
    the pipeline. Errors name the file and line."""
    path = Path(path).resolve()
    if not (path / "corpus.jsonl").is_file():
        raise ConfigError(f"{path}: not a BEIR folder (no corpus.jsonl)")
    queries: dict[str, str] = {}
    qfile = path / "queries.jsonl"
    try:
        lines = qfile.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{qfile}: missing") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            queries[str(q["_id"])] = str(q["text"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{qfile}:{n}: not a query object with _id and text ({exc})"
            ) from None
    rfile = path / "qrels.tsv"
    if not rfile.is_file():
        rfile = path / "qrels" / "test.tsv"
    qrels: dict[str, dict[str, int]] = {}
    try:
        with open(rfile, encoding="utf-8", newline="") as fh:
            for n, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
                if n == 1 and row and row[0] == "query-id":
                    continue
                if len(row) < 3:
                    raise ConfigError(f"{rfile}:{n}: expected query-id, corpus-id, score")
                try:
                    grade = int(row[2])
                except ValueError:
                    raise ConfigError(f"{rfile}:{n}: score {row[2]!r} is not an integer") from None
                qrels.setdefault(row[0], {})[row[1]] = grade
    except FileNotFoundError:
        raise ConfigError(f"{path}: no qrels.tsv or qrels/test.tsv") from None
    judged = {q: t for q, t in queries.items() if any(g > 0 for g in qrels.get(q, {}).values())}
    if not judged:
        raise ConfigError(f"{path}: no query has a relevant document in {rfile.name}")
    return Dataset(name=_slug(path.name), path=path, queries=judged, qrels=qrels)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-") or "dataset"


def eval_settings(settings: Settings, dataset: Dataset, profile: str) -> Settings:
    """The dataset's own home and config: one beir collection, the user's profile re-aimed at
    the dataset's namespace."""
    user = settings.load()
    if profile not in user.profiles:
        raise ConfigError(
            f"{user.path}: no profile {profile!r} (profiles: {', '.join(user.profiles)})"
        )
    raw = yaml.safe_load(user.path.read_text(encoding="utf-8")) or {}
    prof = dict(raw.get("profiles", {}).get(profile, {}))
    namespace = f"eval-{dataset.name}"
    prof["namespace"] = namespace
    home = settings.home / "evals" / dataset.name
    config = {
        "collections": {
            dataset.name: {
                "kind": BEIR.name,
                "path": str(dataset.path),
                "tenant": namespace,
                "acl_groups": [EVAL_GROUP],
                "tier": "public",
                "namespace": namespace,
                # the folder was named on the command line: its corpus.jsonl may be a link
                # to where the dataset was downloaded
                "follow_symlinks_outside_root": True,
            }
        },
        "profiles": {profile: prof},
        # the dataset's own qrels are the evaluation here: no golden set, no eval gate
        "namespaces": {namespace: {"eval_gate": "off"}},
    }
    for key in ("sections",):
        if key in raw:
            config[key] = raw[key]
    return home_of_its_own(home, config)


def run_eval(
    settings: Settings,
    dataset_dir: Path,
    *,
    profile: str | None = None,
    modes: Sequence[str] = ("hybrid",),
    ks: Sequence[int] = DEFAULT_KS,
    limit: int | None = None,
    progress: Callable[[str], None] | None = None,
    runner: PipelineRunner | None = None,
) -> list[dict[str, Any]]:
    """Ingest, index and promote the dataset in its own home, then score every mode.

    ``modes`` are search modes (``hybrid`` with the namespace's retrieval settings) or names of
    ``HYBRID_VARIANTS`` (``hybrid-rrf``: the reciprocal rank fusion hybrid without feedback).

    ``runner`` runs the pipeline (default: the installed one, ``corpus_index.runner``).
    """

    say = progress or (lambda _m: None)
    dataset = load_dataset(dataset_dir)
    user = settings.load()
    profile = profile or next(iter(user.profiles))
    es = eval_settings(settings, dataset, profile)
    say(f"syncing {dataset.name} ({dataset.path}) under profile {profile} in {es.home}")
    report = (runner or load_runner()).sync(es)
    if not report.ok:
        raise ConfigError(f"{dataset.path}: the pipeline failed: {report.failed_runs}")
    corpus = Home(es)
    namespace = f"eval-{dataset.name}"
    generation = promote(corpus, namespace)
    searcher = Searcher(corpus)
    principal = Principal(namespace, (EVAL_GROUP,))
    queries = list(dataset.queries.items())[: limit or None]
    depth = max(ks)
    results = []
    for mode in modes:
        say(f"{mode}: {len(queries)} queries")
        run: dict[str, list[str]] = {}
        latencies: list[float] = []
        for qid, text in queries:
            t0 = time.perf_counter()
            result = searcher.search(
                text,
                principal=principal,
                k=depth,
                namespace=namespace,
                mode="hybrid" if mode in HYBRID_VARIANTS else mode,
                per_doc_cap=None,
                **HYBRID_VARIANTS.get(mode, {}),
            )
            latencies.append((time.perf_counter() - t0) * 1000)
            run[qid] = [h.source_id.split("/", 1)[1] for h in result.hits]
        qrels = {q: dataset.qrels.get(q, {}) for q, _ in queries}
        metrics = evaluate(run, qrels, recall_ks=ks)
        results.append(
            {
                "dataset": dataset.name,
                "mode": mode,
                "generation": generation.id,
                "profile": profile,
                "backend_spec": generation.spec.backend_spec,
                "queries": int(metrics.get("queries", 0)),
                "ndcg@10": metrics["ndcg@10"],
                "mrr@10": metrics["mrr@10"],
                **{f"recall@{k}": metrics[f"recall@{k}"] for k in ks},
                "p@10": metrics["p@10"],
                "latency_p50_ms": round(percentile(latencies, 50), 2),
                "latency_p95_ms": round(percentile(latencies, 95), 2),
                "embedded": report.embedded,
                "eval_home": str(es.home),
                "evaluated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
        )
    open_registry(settings).record_dataset_evals(results)
    return results
