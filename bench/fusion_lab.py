"""Fusion lab: hybrid-retrieval variants scored offline in seconds on the dev collections.

Loads, once per dataset, the raw side of ``bench/retrieval.py`` (its cached MiniLM passage
vectors ``<home>/bench-raw/<name>.npz``, the same ``title text`` passages in a LanceDB table
with the pipeline's FTS settings, MiniLM query vectors) and then evaluates fusion variants in
memory: RRF with other constants, normalized score fusion (min-max, z-score, 3-sigma,
theoretical-min) with weights, and one round of pseudo-relevance feedback (Rocchio on the dense
side, RM3 on the lexical side). Every variant is scored at two candidate depths (50: a top-10
search; 500: the eval's top-100), since score normalization depends on how deep the lists go.

Only the dev collections (scifact, cranfield) are used: the rule is "wins on both, never loses
on either", one configuration for every collection.

Usage::

    .venv/bin/python bench/fusion_lab.py --home /work/rhome-22          # after bench/retrieval.py
    .venv/bin/python bench/fusion_lab.py --home /work/rhome-22 --only rrf,tm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DATASETS = ("scifact", "cranfield")
ROOT = Path("/work/shared/evaldata")
FTS_DEPTH = 1000
DEPTHS = (50, 100, 500)


def load(name: str, home: Path) -> dict[str, Any]:
    """Docs, vectors, queries, qrels, query vectors and FTS top-1000 of one dataset (cached)."""
    import lancedb
    import numpy as np
    import pyarrow as pa
    from lancedb.index import FTS

    from corpus_index.beir_eval import load_dataset
    from corpus_index.embedders import local

    ds = load_dataset(ROOT / name)
    docs = [json.loads(x) for x in (ROOT / name / "corpus.jsonl").read_text().splitlines() if x]
    ids = [str(d["_id"]) for d in docs]
    texts = [f"{d.get('title') or ''} {d.get('text') or ''}" for d in docs]
    matrix = np.load(home / "bench-raw" / f"{name}.npz")["vectors"]
    queries = list(ds.queries.items())
    lab = home / "lab"
    lab.mkdir(exist_ok=True)
    qcache = lab / f"{name}-queries.npz"
    if qcache.is_file():
        qv = np.load(qcache)["vectors"]
    else:
        model = local._load(local.model_path("all-MiniLM-L6-v2"))
        qv = model.encode([t for _, t in queries], normalize_embeddings=True).astype(np.float32)
        np.savez(qcache, vectors=qv)
    db = lancedb.connect(str(lab / f"{name}.lance"))
    if "passages" in db.list_tables().tables:
        table = db.open_table("passages")
    else:
        table = db.create_table(
            "passages", data=pa.table({"vector_id": ids, "text": texts}), mode="overwrite"
        )
        table.create_index("text", config=FTS(with_position=False))
    fcache = lab / f"{name}-fts.json"
    if fcache.is_file():
        fts = json.loads(fcache.read_text())
    else:
        fts = {}
        for qid, text in queries:
            rows = _lex(table, text)
            fts[qid] = [[r["vector_id"], float(r["_score"])] for r in rows]
        fcache.write_text(json.dumps(fts))
    return {
        "name": name,
        "ids": ids,
        "texts": texts,
        "matrix": matrix,
        "queries": queries,
        "qvecs": qv,
        "qrels": {q: ds.qrels.get(q, {}) for q, _ in queries},
        "fts": fts,
        "table": table,
        "index": {d: i for i, d in enumerate(ids)},
    }


def _lex(table: Any, text: str, depth: int = FTS_DEPTH) -> list[dict[str, Any]]:
    """BM25 top-``depth`` with the pipeline's match query (``retrieval.lexical``'s options)."""
    from lancedb.query import FullTextOperator, MatchQuery

    match = MatchQuery(text, "text", fuzziness=0, operator=FullTextOperator.OR)
    rows: list[dict[str, Any]] = (
        table.search(match, query_type="fts").select(["vector_id", "_score"]).limit(depth).to_list()
    )
    return rows


def dense_top(d: dict[str, Any], qv: Any, depth: int) -> dict[str, float]:
    import numpy as np

    sims = d["matrix"] @ qv
    top = np.argpartition(-sims, depth)[:depth]
    return {d["ids"][i]: float(sims[i]) for i in top}


def score(d: dict[str, Any], run: dict[str, list[str]]) -> tuple[float, float]:
    from corpus_index.metrics import evaluate

    m = evaluate(run, d["qrels"], recall_ks=(10, 100))
    return m["ndcg@10"], m["recall@100"]


def variants() -> dict[str, Any]:
    """name -> fuse(dense: {id: cos}, lex: {id: bm25}) -> {id: score}."""
    from corpus_index import fusion

    out: dict[str, Any] = {}
    out["dense"] = lambda de, lx: dict(de)
    out["fts"] = lambda de, lx: dict(lx)
    for k in (5, 10, 20, 40, 60, 100):
        out[f"rrf k={k}"] = lambda de, lx, k=k: fusion.reciprocal_rank_fusion(
            {"d": _order(de), "l": _order(lx)}, k=k
        )
    for a in (0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"minmax a={a}"] = lambda de, lx, a=a: _convex(de, lx, a, _minmax)
        out[f"z a={a}"] = lambda de, lx, a=a: _convex(de, lx, a, _z)
        out[f"3sig a={a}"] = lambda de, lx, a=a: _convex(de, lx, a, _sig3)
        out[f"tm a={a}"] = lambda de, lx, a=a: _convex(de, lx, a, _tm)
    return out


def _order(s: dict[str, float]) -> list[str]:
    return sorted(s, key=lambda x: (-s[x], x))


def _convex(de: dict[str, float], lx: dict[str, float], a: float, norm: Any) -> dict[str, float]:
    nd, nl = norm(de, "dense"), norm(lx, "lex")
    fd, fl = _floor(nd), _floor(nl)
    return {x: a * nd.get(x, fd) + (1 - a) * nl.get(x, fl) for x in set(nd) | set(nl)}


def _floor(n: dict[str, float]) -> float:
    return min(n.values()) if n else 0.0


def _minmax(s: dict[str, float], kind: str) -> dict[str, float]:
    lo, hi = min(s.values()), max(s.values())
    return {x: (v - lo) / (hi - lo or 1) for x, v in s.items()}


def _z(s: dict[str, float], kind: str) -> dict[str, float]:
    import statistics

    mu = statistics.fmean(s.values())
    sd = statistics.pstdev(s.values()) or 1.0
    return {x: (v - mu) / sd for x, v in s.items()}


def _sig3(s: dict[str, float], kind: str) -> dict[str, float]:
    import statistics

    mu = statistics.fmean(s.values())
    sd = statistics.pstdev(s.values()) or 1.0
    return {x: (v - (mu - 3 * sd)) / (6 * sd) for x, v in s.items()}


def _tm(s: dict[str, float], kind: str) -> dict[str, float]:
    lo = -1.0 if kind == "dense" else 0.0
    hi = max(s.values())
    return {x: (v - lo) / (hi - lo or 1) for x, v in s.items()}


def run_variants(data: list[dict[str, Any]], only: list[str] | None) -> list[tuple[str, Any]]:
    table = []
    for name, fn in variants().items():
        if only and not any(name.startswith(o) for o in only):
            continue
        row = [name]
        for d in data:
            for depth in DEPTHS:
                run = {}
                for (qid, _), qv in zip(d["queries"], d["qvecs"], strict=True):
                    de = dense_top(d, qv, depth)
                    lx = dict((i, s) for i, s in d["fts"][qid][:depth])
                    fused = fn(de, lx)
                    run[qid] = _order(fused)[:100]
                row.append(score(d, run))
        table.append(row)
    return table


def zfuse(
    de: dict[str, float],
    lx: dict[str, float],
    a: float = 0.5,
    lfloor: bool = False,
    complete: bool = False,
) -> dict[str, float]:
    from corpus_index import fusion

    if not lfloor:
        return fusion.z_fusion(
            {"d": de, "l": lx}, weights={"d": a, "l": 1 - a}, complete=("l",) if complete else ()
        )
    zd, zl = fusion.z_scores(de), fusion.z_scores(lx)
    mu = sum(lx.values()) / len(lx)
    sd = (sum((v - mu) ** 2 for v in lx.values()) / len(lx)) ** 0.5 or 1.0
    fd, fl = min(zd.values()), (0 - mu) / sd
    return {x: a * zd.get(x, fd) + (1 - a) * zl.get(x, fl) for x in set(zd) | set(zl)}


def fill_dense(
    d: dict[str, Any], qv: Any, de: dict[str, float], lx: dict[str, float]
) -> dict[str, float]:
    """Dense scores also for the lexical candidates the dense top-N missed (their true cosine)."""
    missing = [x for x in lx if x not in de]
    if not missing:
        return de
    sims = d["matrix"][[d["index"][x] for x in missing]] @ qv
    return {**de, **{x: float(s) for x, s in zip(missing, sims, strict=True)}}


def rm3_lex(
    d: dict[str, Any], text: str, terms: list[Any], lam: float, depth: int
) -> dict[str, float]:
    from lancedb.query import BooleanQuery, MatchQuery, Occur

    clauses = [(Occur.SHOULD, MatchQuery(text, "text", boost=lam))]
    clauses += [
        (Occur.SHOULD, MatchQuery(t.term, "text", boost=(1 - lam) * t.weight)) for t in terms
    ]
    rows = (
        d["table"]
        .search(BooleanQuery(clauses), query_type="fts")
        .select(["vector_id", "_score"])
        .limit(depth)
        .to_list()
    )
    return {r["vector_id"]: float(r["_score"]) for r in rows}


def prf_grid(data: list[dict[str, Any]], spec: str, depth: int) -> None:
    """Rows: m (feedback docs), beta (Rocchio), lam/terms (RM3; lam=1: no lexical feedback),
    complete (1, the pipeline's rule: a BM25 list shorter than the depth holds every match, so
    the rest score 0; 0: they get the list's lowest score, as before that rule)."""

    from corpus_index import feedback

    for combo in spec.split(";"):
        kv = dict(x.split("=") for x in combo.split(","))
        m, beta = int(kv.get("m", 5)), float(kv.get("beta", 0))
        lam, nterms = float(kv.get("lam", 1)), int(kv.get("terms", 10))
        a = float(kv.get("a", 0.5))
        full, lfl = kv.get("full") == "1", kv.get("lfloor") == "1"
        out = [combo]
        short = 0
        for d in data:
            run = {}
            for (qid, text), qv in zip(d["queries"], d["qvecs"], strict=True):
                de = dense_top(d, qv, depth)
                lx = dict((i, s) for i, s in d["fts"][qid][:depth])
                complete = kv.get("complete", "1") == "1" and len(d["fts"][qid]) < depth
                short += len(d["fts"][qid]) < depth
                if full:
                    de = fill_dense(d, qv, de, lx)
                first = _order(zfuse(de, lx, a, lfl, complete))[:m]
                if beta > 0:
                    fb = d["matrix"][[d["index"][x] for x in first]]
                    de = dense_top(d, feedback.rocchio(qv, fb, beta=beta), depth)
                if lam < 1:
                    terms = feedback.expansion_terms(
                        text, [d["texts"][d["index"][x]] for x in first], terms=nterms
                    )
                    lx = rm3_lex(d, text, terms, lam, depth)
                complete = kv.get("complete", "1") == "1" and len(lx) < depth
                if full and (beta > 0 or lam < 1):
                    de = fill_dense(
                        d, feedback.rocchio(qv, fb, beta=beta) if beta > 0 else qv, de, lx
                    )
                run[qid] = _order(zfuse(de, lx, a, lfl, complete))[:100]
            out.append(score(d, run))
            out.append(short)
            short = 0
        print(
            f"{out[0]:<36}"
            + "".join(
                f"  {x[0]:.4f} {x[1]:.4f}" if isinstance(x, tuple) else f" (short BM25 lists: {x})"
                for x in out[1:]
            ),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--prf", default="", help="m=5,beta=0.5,lam=0.6,terms=10;...")
    ap.add_argument("--depth", type=int, default=500)
    args = ap.parse_args(argv)
    _common.configure(threads=1)
    t0 = time.perf_counter()
    data = [load(n, args.home) for n in DATASETS]
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.prf:
        prf_grid(data, args.prf, args.depth)
        return 0
    only = [o for o in args.only.split(",") if o] or None
    print(
        f"{'variant':<16}"
        + "".join(f"{n[:7]}@{dp:<4} ndcg  R@100 " for n in DATASETS for dp in DEPTHS)
    )
    for row in run_variants(data, only):
        print(f"{row[0]:<16}" + "".join(f"  {a:.4f} {b:.4f}      " for a, b in row[1:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
