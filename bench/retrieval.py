"""Retrieval quality: the pipeline's dense, lexical and hybrid search vs raw baselines, same data.

For each BEIR dataset (``/work/shared/evaldata/<name>``):

* pipeline side: ``corpus_index.beir_eval.run_eval`` ingests the dataset through the real asset
  graph (``DagsterRunner.sync`` (``definitions.dagster_runner()``)) into ``<home>/evals/<name>/`` with one profile
  ``st:all-MiniLM-L6-v2``, promotes it, and scores every query of each mode through
  ``Searcher.search`` (k=100, so 500 candidates per retriever; no per-document cap; dedupe by
  content_hash on, as ``run_eval`` runs it).
* raw side, computed in the same run on the same documents and queries:
  - raw dense: ``SentenceTransformer.encode`` of ``title + " " + text`` (the ``passage_v1`` rule)
    and of the query text, normalized, exact cosine top-100 with numpy;
  - raw FTS: a plain LanceDB table of the same passage text, ``create_index("text",
    config=FTS())`` (LanceDB defaults), ``search(q, query_type="fts")`` top-100;
  - naive RRF (k=60) of those two top-100 rankings.

Pipeline modes: ``dense``, ``lexical``, ``hybrid-rrf`` (the previous hybrid: RRF k=60, no
feedback), ``hybrid-zscore`` (z-score fusion, no feedback) and ``hybrid`` (the namespace's
default retrieval settings: z-score fusion plus one Rocchio round; marked "default").

All are scored with ``corpus_index.metrics.evaluate``. Targets: pipeline dense and lexical
within 0.005 nDCG@10 of their raw anchor; pipeline hybrid-rrf >= naive RRF; the default hybrid
>= naive RRF + 0.02 (issue 22).

Usage (from the repository root)::

    .venv/bin/python bench/retrieval.py                          # both datasets (~10 min here)
    .venv/bin/python bench/retrieval.py --datasets cranfield     # ~2 min
    .venv/bin/python bench/retrieval.py --limit 400              # first 400 docs of each (dev)
    .venv/bin/python bench/retrieval.py --home /tmp/rhome        # keep the home: reruns embed nothing
    .venv/bin/python bench/retrieval.py --modes hybrid-rrf,hybrid-zscore,hybrid   # hybrids only
    .venv/bin/python bench/retrieval.py --json

Options: ``--datasets a,b`` (default scifact,cranfield), ``--data-root`` (default
/work/shared/evaldata), ``--limit N`` first N documents of each corpus (queries and qrels cut
to them; for development), ``--home DIR`` corpus home to (re)use (default: a temp folder,
removed afterwards; the pipeline's embedding cache and the raw side's vectors,
``<home>/bench-raw/*.npz``, are kept there), ``--threads`` (torch threads while embedding the
corpora, default 2), ``--query-threads`` (torch threads while answering queries, both sides,
default 1), ``--json``.

Threads: BLAS/OpenMP threads are 1 throughout (``_common.configure(threads=1)``) so numpy's
spinning BLAS workers never fight torch for the 2 cores; torch uses ``--threads`` for the bulk
corpus encodes (pipeline and raw alike) and ``--query-threads`` for every query of every
system. Latencies are per query and include query embedding where a system embeds; the
machine is shared, so compare latencies within one run only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

MODEL = "all-MiniLM-L6-v2"
PROFILE = "minilm"
DEFAULT_ROOT = Path("/work/shared/evaldata")
DEPTH = 100
RRF_K = 60
TOLERANCE = 0.005
KS = (1, 5, 10, 100)
# anchors from the issue, measured earlier on this machine (printed for reference only)
ISSUE_ANCHORS = {
    "scifact": {"raw dense": 0.645, "raw FTS": 0.684, "naive RRF": 0.716},
    "cranfield": {"raw dense": 0.513, "raw FTS": 0.526, "naive RRF": 0.564},
}
STAGE_QUERIES = 30
MODES = ("dense", "lexical", "hybrid", "hybrid-rrf", "hybrid-zscore")
DEFAULT_ROW = "pipeline hybrid"  # the namespace default: z-score fusion + one Rocchio round
GAIN = 0.02  # the default's target over naive RRF (issue 22)
ROWS = (
    "raw dense",
    "raw FTS",
    "naive RRF",
    "pipeline dense",
    "pipeline lexical",
    "pipeline hybrid-rrf",
    "pipeline hybrid-zscore",
    "pipeline hybrid",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="scifact,cranfield")
    ap.add_argument("--data-root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--limit", type=int, default=None, help="first N documents of each corpus")
    ap.add_argument("--home", type=Path, default=None, help="corpus home (default: temp dir)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for bulk encoding")
    ap.add_argument("--query-threads", type=int, default=1, help="torch threads for queries")
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help="pipeline modes to score (default all; the hybrid ones alone skip dense/lexical)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args(argv)


# -- data ------------------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def subset_dataset(src: Path, dst: Path, limit: int) -> Path:
    """The first ``limit`` documents of ``src`` with the queries and qrels that still have a
    relevant document among them (the folder keeps the dataset's name plus ``-N``)."""
    dst.mkdir(parents=True, exist_ok=True)
    kept: set[str] = set()
    with (src / "corpus.jsonl").open("rb") as fin, (dst / "corpus.jsonl").open("wb") as fout:
        for n, line in enumerate(fin):
            if n >= limit:
                break
            kept.add(str(json.loads(line)["_id"]))
            fout.write(line)
    lines = (src / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    body = [ln for ln in lines[1:] if ln.split("\t")[1] in kept and int(ln.split("\t")[2]) > 0]
    (dst / "qrels.tsv").write_text("\n".join([lines[0], *body]) + "\n", encoding="utf-8")
    judged = {ln.split("\t")[0] for ln in body}
    queries = [q for q in read_jsonl(src / "queries.jsonl") if str(q["_id"]) in judged]
    (dst / "queries.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8"
    )
    return dst


def write_user_config(home: Path) -> Path:
    """The user's corpus.yaml: ``run_eval`` re-aims its one profile at each dataset."""
    import yaml

    config = {
        "collections": {
            "placeholder": {
                "kind": "beir",
                "path": str(home / "placeholder"),
                "tenant": "bench",
                "acl_groups": ["bench"],
                "namespace": "bench",
            }
        },
        "profiles": {PROFILE: {"embedder": f"st:{MODEL}", "namespace": "bench"}},
        "namespaces": {"bench": {"eval_gate": "off"}},  # no golden set: the qrels score it
    }
    path = home / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


# -- raw baselines ---------------------------------------------------------------------------


def encode_corpus(model: Any, ids: list[str], texts: list[str], cache: Path) -> Any:
    """Normalized MiniLM vectors of ``texts``, cached in ``cache`` keyed by the texts."""
    import numpy as np

    key = hashlib.sha256(
        "\x1e".join(f"{i}\x1f{t}" for i, t in zip(ids, texts, strict=False)).encode()
    ).hexdigest()
    if cache.is_file():
        data = np.load(cache)
        if str(data["key"]) == key:
            return data["vectors"]
    vectors = model.encode(
        texts,
        batch_size=64,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    ).astype(np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, key=np.asarray(key), vectors=vectors)
    return vectors


def rrf(rankings: list[list[str]], k: int = RRF_K) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))


def raw_baselines(
    model: Any,
    data_dir: Path,
    queries: list[tuple[str, str]],
    cache_dir: Path,
    name: str,
    threads: int,
    query_threads: int,
    say: Any,
) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[float]], dict[str, Any]]:
    """Runs and per-query latencies (ms) of raw dense, raw FTS and naive RRF."""
    import lancedb
    import numpy as np
    import pyarrow as pa
    import torch
    from lancedb.index import FTS

    docs = read_jsonl(data_dir / "corpus.jsonl")
    ids = [str(d["_id"]) for d in docs]
    texts = [f"{d.get('title') or ''} {d.get('text') or ''}" for d in docs]
    info: dict[str, Any] = {"documents": len(docs)}

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    matrix = encode_corpus(model, ids, texts, cache_dir / f"{name}.npz")
    info["raw_encode_s"] = round(time.perf_counter() - t0, 1)
    say(f"  raw dense: {len(docs)} passages encoded in {info['raw_encode_s']} s (cached if ~0)")

    db = lancedb.connect(str(cache_dir / f"{name}.lance"))
    t0 = time.perf_counter()
    table = db.create_table("passages", data=pa.table({"id": ids, "text": texts}), mode="overwrite")
    table.create_index("text", config=FTS())
    info["raw_fts_build_s"] = round(time.perf_counter() - t0, 2)

    torch.set_num_threads(query_threads)
    model.encode(["warm up"], normalize_embeddings=True, show_progress_bar=False)
    runs: dict[str, dict[str, list[str]]] = {"raw dense": {}, "raw FTS": {}, "naive RRF": {}}
    lat: dict[str, list[float]] = {k: [] for k in runs}
    for qid, text in queries:
        t0 = time.perf_counter()
        q = model.encode(
            [text], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )[0].astype(np.float32)
        sims = matrix @ q
        top = np.argpartition(-sims, min(DEPTH, len(sims) - 1))[:DEPTH]
        top = top[np.lexsort((top, -sims[top]))]
        dense = [ids[i] for i in top]
        t1 = time.perf_counter()
        rows = table.search(text, query_type="fts").select(["id", "_score"]).limit(DEPTH).to_list()
        fts = [r["id"] for r in rows]
        t2 = time.perf_counter()
        fused = rrf([dense, fts])[:DEPTH]
        t3 = time.perf_counter()
        runs["raw dense"][qid] = dense
        runs["raw FTS"][qid] = fts
        runs["naive RRF"][qid] = fused
        lat["raw dense"].append((t1 - t0) * 1000)
        lat["raw FTS"].append((t2 - t1) * 1000)
        lat["naive RRF"].append((t3 - t0) * 1000)
    return runs, lat, info


# -- the run ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=1)  # BLAS/OpenMP: 1 thread, both sides; torch set explicitly
    with _common.bench_home(args.home, "bench-retrieval-") as home:
        config_path = write_user_config(home)
        _common.point_project_at(config_path, home)
        return run(args, home, config_path)


def run(args: argparse.Namespace, home: Path, config_path: Path) -> int:
    import torch

    _common.set_torch_threads(args.threads)
    from corpus_index.beir_eval import load_dataset, run_eval
    from corpus_index.config import Settings
    from corpus_index.embedders import local
    from corpus_index.metrics import evaluate, percentile
    from corpus_index.search import Searcher
    from definitions import dagster_runner

    say = (
        (lambda m: print(m, file=sys.stderr, flush=True))
        if args.json
        else (lambda m: print(m, flush=True))
    )
    settings = Settings(config_path=config_path, home=home)
    model = local._load(local.model_path(MODEL))  # the same model object the pipeline uses
    out: dict[str, Any] = {
        "threads": args.threads,
        "query_threads": args.query_threads,
        "limit": args.limit,
        "datasets": {},
    }
    all_pass = True
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        src = args.data_root / name
        data_dir = src
        if args.limit:
            data_dir = subset_dataset(src, home / "data" / f"{name}-{args.limit}", args.limit)
        dataset = load_dataset(data_dir)
        queries = list(dataset.queries.items())
        qrels = {q: dataset.qrels.get(q, {}) for q, _ in queries}
        say(f"== {name}: {len(queries)} queries ({data_dir})")

        # pipeline: sync (embeds the corpus at --threads), then queries at --query-threads
        torch.set_num_threads(args.threads)
        t0 = time.perf_counter()
        stage = {"synced": 0.0}

        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        current = {"mode": modes[0]}

        def progress(msg: str, t0: float = t0) -> None:
            head = msg.split(":", 1)[0]
            if head in MODES:
                current["mode"] = head
            if head in modes and not stage["synced"]:  # the first mode starts: sync is over
                stage["synced"] = time.perf_counter() - t0
                torch.set_num_threads(args.query_threads)
            say(f"  pipeline: {msg}")

        # run_eval syncs, then runs the modes: ``progress`` switches torch threads in between.
        # Searcher.search is wrapped (in this process only, nothing edited) to keep each
        # query's ranking for the per-query comparison with the raw systems.
        captured: dict[str, list[list[str]]] = {m: [] for m in modes}
        original = Searcher.search

        def recording(self: Any, query: str, **kw: Any) -> Any:
            result = original(self, query, **kw)
            captured[current["mode"]].append([h.source_id.split("/", 1)[1] for h in result.hits])
            return result

        Searcher.search = recording  # type: ignore[method-assign]
        try:
            results = run_eval(
                settings,
                data_dir,
                profile=PROFILE,
                modes=modes,
                ks=KS,
                progress=progress,
                runner=dagster_runner(),
            )
        finally:
            Searcher.search = original  # type: ignore[method-assign]
        pipe_runs = {
            m: {qid: ranking for (qid, _), ranking in zip(queries, captured[m], strict=True)}
            for m in modes
        }
        pipe_s = time.perf_counter() - t0
        say(f"  pipeline: sync+promote {stage['synced']:.1f} s, all modes {pipe_s:.1f} s")

        stages = stage_profile(settings, dataset, queries[:STAGE_QUERIES])
        runs, lat, info = raw_baselines(
            model,
            data_dir,
            queries,
            home / "bench-raw",
            dataset.name,
            args.threads,
            args.query_threads,
            say,
        )
        table: dict[str, dict[str, float]] = {}
        for system in ("raw dense", "raw FTS", "naive RRF"):
            m = evaluate(runs[system], qrels, recall_ks=KS)
            table[system] = {
                "ndcg@10": m["ndcg@10"],
                "mrr@10": m["mrr@10"],
                "recall@10": m["recall@10"],
                "recall@100": m["recall@100"],
                "p50_ms": round(percentile(lat[system], 50), 2),
                "p95_ms": round(percentile(lat[system], 95), 2),
            }
        for r in results:
            table[f"pipeline {r['mode']}"] = {
                "ndcg@10": r["ndcg@10"],
                "mrr@10": r["mrr@10"],
                "recall@10": r["recall@10"],
                "recall@100": r["recall@100"],
                "p50_ms": r["latency_p50_ms"],
                "p95_ms": r["latency_p95_ms"],
            }
        targets = [
            t
            for t in [
                _target(
                    "pipeline dense within 0.005 nDCG@10 of raw dense",
                    table.get("pipeline dense", {}).get("ndcg@10"),
                    table["raw dense"]["ndcg@10"],
                    "abs",
                ),
                _target(
                    "pipeline lexical within 0.005 nDCG@10 of raw FTS",
                    table.get("pipeline lexical", {}).get("ndcg@10"),
                    table["raw FTS"]["ndcg@10"],
                    "abs",
                ),
                _target(
                    "pipeline hybrid-rrf >= naive RRF (nDCG@10)",
                    table.get("pipeline hybrid-rrf", {}).get("ndcg@10"),
                    table["naive RRF"]["ndcg@10"],
                    "ge",
                ),
                _target(
                    f"default hybrid >= naive RRF + {GAIN} (nDCG@10)",
                    table.get(DEFAULT_ROW, {}).get("ndcg@10"),
                    table["naive RRF"]["ndcg@10"] + GAIN,
                    "ge",
                ),
            ]
            if t is not None
        ]
        all_pass &= all(t["pass"] for t in targets)
        agreement = compare_rankings(runs, pipe_runs, qrels) if set(MODES) <= set(modes) else None
        out["datasets"][name] = {
            "queries": len(queries),
            "generation": results[0]["generation"],
            "embedded_by_pipeline": results[0]["embedded"],
            "pipeline_s": round(pipe_s, 1),
            **info,
            "table": table,
            "targets": targets,
            "pipeline_stages_p50_ms": stages,
            "per_query": agreement,
            "issue_anchors": ISSUE_ANCHORS.get(name) if not args.limit else None,
        }
        if not args.json:
            print_dataset(name, out["datasets"][name])
    out["pass"] = all_pass
    if args.json:
        print(json.dumps(out, indent=2))
    return 0 if all_pass else 1


def compare_rankings(
    raw: dict[str, dict[str, list[str]]], pipe: dict[str, dict[str, list[str]]], qrels: Any
) -> dict[str, Any]:
    """Per query: is the pipeline's top-10 the raw system's? For hybrid, do the two top-10s
    differ only in the order of documents whose naive RRF scores are exactly equal (a tie,
    broken by doc id in the naive run; in the pipeline by the weighted-fusion score, then by
    vector_id)?"""
    from corpus_index.metrics import evaluate

    out: dict[str, Any] = {}
    for mode, ref in (("dense", "raw dense"), ("lexical", "raw FTS"), ("hybrid-rrf", "naive RRF")):
        same = sum(1 for q, r in raw[ref].items() if pipe[mode].get(q, [])[:10] == r[:10])
        out[mode] = {"baseline": ref, "top10_identical": same, "queries": len(raw[ref])}
    tie_only, other = 0, 0
    adjusted: dict[str, list[str]] = {}
    for q, naive in raw["naive RRF"].items():
        score: dict[str, float] = {}
        for ranking in (raw["raw dense"][q], raw["raw FTS"][q]):
            for rank, doc in enumerate(ranking, start=1):
                score[doc] = score.get(doc, 0.0) + 1.0 / (RRF_K + rank)
        p10, n10 = pipe["hybrid-rrf"].get(q, [])[:10], naive[:10]
        adjusted[q] = naive
        if p10 == n10:
            continue
        seq_p = [round(score.get(d, 0.0), 12) for d in p10]
        seq_n = [round(score.get(d, 0.0), 12) for d in n10]
        if seq_p == seq_n:
            tie_only += 1
            adjusted[q] = p10 + [d for d in naive if d not in p10]
        else:
            other += 1
    m = evaluate(adjusted, qrels, recall_ks=KS)
    out["hybrid-rrf"].update(
        {
            "differ_only_by_rrf_ties": tie_only,
            "differ_otherwise": other,
            "naive_rrf_ndcg10_ties_broken_as_pipeline": m["ndcg@10"],
        }
    )
    return out


def stage_profile(settings: Any, dataset: Any, queries: list[tuple[str, str]]) -> dict[str, Any]:
    """Per-stage p50 (ms) of ``Searcher.search`` as ``run_eval`` calls it, from its trace."""
    from corpus_index.beir_eval import EVAL_GROUP, eval_settings
    from corpus_index.home import Home
    from corpus_index.metrics import percentile
    from corpus_index.search import Principal, Searcher

    es = eval_settings(settings, dataset, PROFILE)
    namespace = f"eval-{dataset.name}"
    searcher = Searcher(Home(es))
    principal = Principal(namespace, (EVAL_GROUP,))
    out: dict[str, Any] = {}
    for mode in ("dense", "lexical", "hybrid"):
        acc: dict[str, list[float]] = {}
        for _qid, text in queries:
            r = searcher.search(
                text, principal=principal, k=DEPTH, namespace=namespace, mode=mode, per_doc_cap=None
            )
            for key, v in r.trace.items():
                if key.endswith("_ms"):
                    acc.setdefault(key[:-3], []).append(float(v))
        out[mode] = {
            key: round(percentile(v, 50), 2) for key, v in acc.items() if percentile(v, 50) >= 0.05
        }
    return out


def _target(label: str, got: float | None, ref: float, kind: str) -> dict[str, Any] | None:
    if got is None:  # the mode was not scored in this run
        return None
    delta = got - ref
    ok = abs(delta) <= TOLERANCE + 1e-9 if kind == "abs" else got >= ref
    return {"target": label, "pipeline": got, "baseline": ref, "delta": round(delta, 6), "pass": ok}


def print_dataset(name: str, d: dict[str, Any]) -> None:
    print()
    print(
        f"{name}: {d['documents']} documents, {d['queries']} queries, generation "
        f"{d['generation']} (pipeline embedded {d['embedded_by_pipeline']})"
    )
    print(
        f"  {'system':<22} {'nDCG@10':>8} {'MRR@10':>8} {'R@10':>7} {'R@100':>7} "
        f"{'p50 ms':>8} {'p95 ms':>8}"
    )
    for row in ROWS:
        if row not in d["table"]:
            continue
        t = d["table"][row]
        mark = " (default)" if row == DEFAULT_ROW else ""
        print(
            f"  {row + mark:<22} {t['ndcg@10']:8.4f} {t['mrr@10']:8.4f} {t['recall@10']:7.4f} "
            f"{t['recall@100']:7.4f} {t['p50_ms']:8.2f} {t['p95_ms']:8.2f}"
        )
    if d.get("issue_anchors"):
        a = d["issue_anchors"]
        print(
            "  issue anchors (nDCG@10, earlier run): "
            + ", ".join(f"{k} {v:.3f}" for k, v in a.items())
        )
    print(
        f"  pipeline stages, p50 ms over {STAGE_QUERIES} queries (Searcher trace; resolve = "
        "ACTIVE-pointer lookup in registry.duckdb + table open):"
    )
    for mode, st in d["pipeline_stages_p50_ms"].items():
        print(f"    {mode:<8} " + "  ".join(f"{k} {v:.1f}" for k, v in st.items()))
    pq = d.get("per_query")
    if pq:
        print(
            "  per query, pipeline top-10 identical to its raw counterpart: "
            + ", ".join(f"{m} {v['top10_identical']}/{v['queries']}" for m, v in pq.items())
        )
        h = pq["hybrid-rrf"]
        print(
            f"  hybrid-rrf vs naive RRF: {h['differ_only_by_rrf_ties']} queries differ only in the "
            f"order of exactly tied RRF scores, {h['differ_otherwise']} otherwise; naive RRF "
            f"with those ties broken as the pipeline breaks them: "
            f"{h['naive_rrf_ndcg10_ties_broken_as_pipeline']:.4f} nDCG@10"
        )
    for t in d["targets"]:
        print(
            f"  {'PASS' if t['pass'] else 'FAIL'}  {t['target']}: {t['pipeline']:.4f} vs "
            f"{t['baseline']:.4f} (delta {t['delta']:+.4f})"
        )


if __name__ == "__main__":
    sys.exit(main())
