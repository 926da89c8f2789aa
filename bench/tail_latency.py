"""What an unindexed tail costs a search, and what leaving it saves a sync.

A generation's indexes may leave its newest rows uncovered, up to ``index_store.tail_bound``
(the larger of 2,000 rows and 1% of the table; ``refresh_indexes`` runs ``optimize`` only past
it), and LanceDB searches those rows exactly beside the indexed ones. This builds a generation of
``--rows`` synthetic rows (``bench/latency.py``'s clustered 384-d vectors, topical text, five
tenants and four ACL groups) through the project's code, fully indexed, copies its table, and
adds the same ``tail_bound(rows)`` new rows to both:

* ``tail``: the generation's own table, brought up to date by ``refresh_indexes``, which leaves
  the new rows outside the indexes (they are within the bound);
* ``indexed``: the copy, brought up to date by ``optimize`` (what every sync did before).

Then the same queries go to both, interleaved query by query (their order alternating), as the
pipeline sends them (``bench/latency.py``'s raw side: the tenant/ACL prefilter, candidate
depth, ANN query parameters; hybrid's two queries at the same time): dense, lexical and hybrid
p50/p95 of each table and their ratio. It also times the two ways of bringing the table up to
date, and checks that each of ``--probes`` tail rows is the top dense hit of a query with its
own vector on the tail table (the tail is searched, not skipped).

Usage (from the repository root)::

    .venv/bin/python bench/tail_latency.py                    # 400,000 rows (100,000 deals)
    .venv/bin/python bench/tail_latency.py --rows 100000 --queries 100
    .venv/bin/python bench/tail_latency.py --json

Options: ``--rows`` (400000), ``--queries`` (200), ``--warmup`` (20), ``--probes`` (20),
``--home DIR`` (kept), ``--threads`` (1), ``--json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)
import latency  # noqa: E402  (the synthetic rows and the raw queries)

MODES = ("dense", "lexical", "hybrid")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


def tail_rows(args: argparse.Namespace, gen: Any, spec: Any, n: int) -> Any:
    """``n`` new rows from the same clusters, ids of their own (``t...``)."""
    import pyarrow as pa

    from corpus_index.index_store import vector_entry_schema

    schema = vector_entry_schema(gen)
    synth = latency.Synth(n, args.clusters, args.seed + 2)
    table = pa.Table.from_batches(list(latency.row_batches(synth, gen, spec, schema)))
    for name in ("vector_id", "doc_id", "source_id", "chunk_ref"):
        i = schema.get_field_index(name)
        table = table.set_column(i, name, pa.array(["t" + v for v in table[name].to_pylist()]))
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=args.threads)
    import numpy as np

    latency.np = np
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else print
    with _common.bench_home(args.home, "bench-tail-") as home:
        config_path = latency.write_config(home)
        _common.point_project_at(config_path, home)
        result = run(args, home, config_path, say)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_text(result)
    return 0


def run(args: argparse.Namespace, home: Path, config_path: Path, say: Any) -> dict[str, Any]:
    import lancedb
    import numpy as np

    from corpus_index import retrieval
    from corpus_index.config import Settings
    from corpus_index.home import Home
    from corpus_index.index_store import tail_bound
    from corpus_index.metrics import percentile
    from corpus_index.search import Principal, candidate_depth, eligibility

    settings = Settings(config_path=config_path, home=home)
    corpus = Home(settings)
    if corpus.registry.active(latency.NAMESPACE) is not None:
        sys.exit(f"error: {home} already holds a benchmark generation; use an empty --home")
    say(f"building {args.rows:,} rows in {home}")
    gen, build = latency.build_generation(corpus, args, say)
    spec = corpus.spec(latency.PROFILE)
    lance_dir = Path(settings.lance_uri)
    shutil.copytree(lance_dir / f"{gen.table_name}.lance", lance_dir / "indexed_copy.lance")
    bound = tail_bound(args.rows)
    tail = tail_rows(args, gen, spec, bound)
    say(f"adding a tail of {bound:,} rows to both tables")

    corpus.store.table(gen).add(tail)
    t0 = time.perf_counter()
    coverage = corpus.store.refresh_indexes(gen)
    refresh_s = time.perf_counter() - t0
    copy = lancedb.connect(str(lance_dir)).open_table("indexed_copy")
    copy.add(tail)
    t0 = time.perf_counter()
    copy.optimize()
    optimize_s = time.perf_counter() - t0
    tables = {"tail": corpus.store.table(gen), "indexed": copy}
    unindexed = {
        name: int(t.index_stats("text_idx").num_unindexed_rows) for name, t in tables.items()
    }

    # the same queries to both tables, interleaved
    synth = latency.Synth(args.rows, args.clusters, args.seed)
    qrng = np.random.default_rng(args.seed + 1)
    synth.rng = qrng
    total = args.warmup + args.queries
    qclusters = qrng.integers(0, args.clusters, size=total)
    qvecs = synth.vectors(qclusters)
    qtexts = [synth.text(int(c), int(qrng.integers(2, 5)), 1) for c in qclusters]
    qtenants, qgroups = synth.scopes(total)
    principals = [Principal(t, tuple(g)) for t, g in zip(qtenants, qgroups, strict=True)]
    depth = candidate_depth(10)
    columns = list(retrieval.RESULT_COLUMNS)
    nprobes, refine = latency.ann_params(args.rows + bound)
    pool = ThreadPoolExecutor(1)

    def query(table: Any, mode: str, q: Any, text: str, where: str) -> None:
        if mode == "dense":
            latency.raw_dense(table, q, where, depth, columns, nprobes, refine)
        elif mode == "lexical":
            latency.raw_lexical(table, text, where, depth, columns)
        else:
            other = pool.submit(latency.raw_lexical, table, text, where, depth, columns)
            latency.raw_dense(table, q, where, depth, columns, nprobes, refine)
            other.result()

    lat: dict[str, list[float]] = {f"{t} {m}": [] for t in tables for m in MODES}
    say(f"running {args.warmup} warm-up + {args.queries} queries x {len(MODES)} modes x 2 tables")
    for i in range(total):
        where = eligibility(principals[i], [latency.COLLECTION])
        for mode in MODES:
            order = list(tables.items())
            if i % 2:
                order.reverse()
            for name, table in order:
                t0 = time.perf_counter()
                query(table, mode, qvecs[i], qtexts[i], where)
                if i >= args.warmup:
                    lat[f"{name} {mode}"].append((time.perf_counter() - t0) * 1000)
    pool.shutdown()

    # each probed tail row is the top dense hit of its own vector, with its tenant's scope
    probes = tail.slice(0, args.probes).to_pylist()
    found = 0
    for row in probes:
        where = eligibility(Principal(row["tenant_id"], tuple(row["acl_groups"])), ["synth"])
        hits = latency.raw_dense(
            tables["tail"], np.asarray(row["vector"]), where, 10, ["vector_id"], nprobes, refine
        )
        found += bool(hits) and hits[0]["vector_id"] == row["vector_id"]

    figures = {
        key: {"p50_ms": percentile(v, 50), "p95_ms": percentile(v, 95)} for key, v in lat.items()
    }
    ratios = {
        mode: {
            p: figures[f"tail {mode}"][f"{p}_ms"] / figures[f"indexed {mode}"][f"{p}_ms"]
            for p in ("p50", "p95")
        }
        for mode in MODES
    }
    return {
        "rows": args.rows,
        "tail_rows": bound,
        "build": build,
        "coverage_after_refresh": {
            "fts_unindexed": coverage.fts_unindexed,
            "ann_unindexed": coverage.ann_unindexed,
            "tail_bound": coverage.tail_bound,
        },
        "unindexed": unindexed,
        "refresh_indexes_s": round(refresh_s, 3),
        "optimize_s": round(optimize_s, 3),
        "queries": args.queries,
        "latency": figures,
        "ratio_tail_over_indexed": ratios,
        "tail_probes_found": f"{found}/{len(probes)}",
    }


def print_text(r: dict[str, Any]) -> None:
    print(
        f"unindexed tail: {r['rows']:,} indexed rows + {r['tail_rows']:,} new rows "
        f"({r['queries']} queries per mode, interleaved)"
    )
    print(
        f"  bringing the table up to date: refresh_indexes {r['refresh_indexes_s']:.2f} s "
        f"(tail left: {r['unindexed']['tail']:,} rows outside the indexes) vs optimize "
        f"{r['optimize_s']:.2f} s (left: {r['unindexed']['indexed']:,})"
    )
    print(f"  {'mode':<8} {'tail p50':>9} {'indexed p50':>12} {'x':>6} "
          f"{'tail p95':>9} {'indexed p95':>12} {'x':>6}")  # fmt: skip
    for mode in MODES:
        t, x = r["latency"][f"tail {mode}"], r["latency"][f"indexed {mode}"]
        ratio = r["ratio_tail_over_indexed"][mode]
        print(
            f"  {mode:<8} {t['p50_ms']:9.1f} {x['p50_ms']:12.1f} {ratio['p50']:6.2f} "
            f"{t['p95_ms']:9.1f} {x['p95_ms']:12.1f} {ratio['p95']:6.2f}"
        )
    print(f"  tail rows found as their own vector's top dense hit: {r['tail_probes_found']}")


if __name__ == "__main__":
    sys.exit(main())
