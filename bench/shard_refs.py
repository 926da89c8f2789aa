"""What ``index_rows`` of one shard reads of the generation to decide which rows change.

A generation table of ``--rows`` rows (four per document, like the generated deals; one
collection; 384-d vectors, texts) is written once; then, for every shard of ``--shards``,
interleaved, ``--repeat`` times:

- baseline (before ``8d929b0``): the refs (``chunk_ref``, ``source_id``) of every row of the
  collection read out of LanceDB, the shard's kept in Python (``shards.shard_of`` per source);
- now: ``GenerationStore.collection_refs`` with ``predicates.in_hash_shard``, the shard's
  hash evaluated in LanceDB's scan, so only the shard's refs come out.

It prints the median seconds per shard of each and the Arrow bytes each hands to Python, and
checks that both give the same refs. It has no target: it shows what the change does, and
that what a shard reads out no longer grows with the other shards' rows.

Usage (from the repository root)::

    .venv/bin/python bench/shard_refs.py --rows 160000 --shards 8

Options: ``--rows`` (160000), ``--shards`` (8), ``--repeat`` (3), ``--threads`` (2),
``--home DIR`` (an empty folder, kept; default a temporary one), ``--json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

COLLECTION = "deals"
ROWS_PER_DOC = 4
WRITE_BATCH = 20_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=160_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--home", type=Path, default=None, help="empty folder to build in (kept)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.rows < ROWS_PER_DOC or args.shards < 2 or args.repeat < 1:
        ap.error("--rows must be at least 4, --shards at least 2, --repeat at least 1")
    return args


def write_generation(store: Any, generation: Any, rows: int) -> None:
    """``rows`` generation rows of one collection, written in batches (random vectors)."""
    import numpy as np
    import pyarrow as pa

    from corpus_index.index_store import vector_entry_schema

    schema = vector_entry_schema(generation)
    rng = np.random.default_rng(21)
    dim = generation.spec.dim
    for start in range(0, rows, WRITE_BATCH):
        n = min(WRITE_BATCH, rows - start)
        idx = range(start, start + n)
        docs = [f"deal-{i // ROWS_PER_DOC:06d}.uw.md" for i in idx]
        cols: dict[str, Any] = {f.name: pa.nulls(n, f.type) for f in schema}
        cols["vector_id"] = pa.array([f"v{i:08d}" for i in idx])
        cols["chunk_ref"] = pa.array(
            [f"{d}#{i % ROWS_PER_DOC}@1" for d, i in zip(docs, idx, strict=True)]
        )
        cols["source_id"] = pa.array([f"{COLLECTION}/{d}" for d in docs])
        cols["collection"] = pa.array([COLLECTION] * n)
        cols["doc_id"] = pa.array(docs)
        cols["text"] = pa.array([f"deal {i} section text " * 8 for i in idx])
        vectors = rng.standard_normal((n, dim), dtype=np.float32).ravel()
        cols["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(vectors), dim)
        store.ensure(generation).add(pa.table(cols, schema=schema))


def baseline_refs(store: Any, generation: Any, shard: int, shards: int) -> Any:
    """Before 8d929b0: every row's refs out of LanceDB, the shard's kept in Python."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from corpus_index.shards import shard_of

    refs = store.collection_refs(generation, COLLECTION)
    sources = pc.unique(refs["source_id"]).to_pylist()
    mine = pa.array([s for s in sources if shard_of(s, shards) == shard], pa.string())
    return refs.filter(pc.is_in(refs["source_id"], mine)), refs.nbytes


def pushed_refs(store: Any, generation: Any, shard: int, shards: int) -> Any:
    from corpus_index import predicates

    where = predicates.in_hash_shard("source_id", shard, shards)
    refs = store.collection_refs(generation, COLLECTION, where=where)
    return refs, refs.nbytes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=args.threads)
    from corpus_index.index_store import GenerationStore
    from corpus_index.registry import Generation, GenerationSpec

    spec = GenerationSpec("bench", "main", "hash:v1-384", "v1", 384, True, "v1", "bench")
    now = dt.datetime.now(dt.UTC)  # a generation as the registry would hand it out, unregistered
    generation = Generation("g0001", spec, "gen_g0001", "building", now, now, None, None, None, 0)
    ways = {"baseline": baseline_refs, "pushed": pushed_refs}
    with _common.bench_home(args.home, "bench-shard-refs-", must_be_empty=True) as root:
        store = GenerationStore(str(root / "lance"))
        t0 = time.perf_counter()
        write_generation(store, generation, args.rows)
        write_s = time.perf_counter() - t0
        seconds: dict[str, list[float]] = {w: [] for w in ways}
        read_out: dict[str, list[int]] = {w: [] for w in ways}
        kept = [0] * args.shards
        for _ in range(args.repeat):
            for shard in range(args.shards):
                got = {}
                for way, fn in ways.items():
                    t0 = time.perf_counter()
                    refs, nbytes = fn(store, generation, shard, args.shards)
                    seconds[way].append(time.perf_counter() - t0)
                    read_out[way].append(nbytes)
                    got[way] = sorted(refs["chunk_ref"].to_pylist())
                if got["baseline"] != got["pushed"]:
                    sys.exit(f"error: shard {shard}: the two ways read different refs")
                kept[shard] = len(got["pushed"])
        lance_mib = _common.dir_mib(root / "lance")
    result = {
        "rows": args.rows,
        "shards": args.shards,
        "repeat": args.repeat,
        "threads": args.threads,
        "write_s": round(write_s, 1),
        "lance_mib": round(lance_mib, 1),
        "shard_rows": kept,
        "median_s": {w: round(statistics.median(s), 4) for w, s in seconds.items()},
        "median_read_out_mib": {
            w: round(statistics.median(b) / 2**20, 2) for w, b in read_out.items()
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"shard refs: {args.rows} rows, {args.shards} shards ({min(kept)}..{max(kept)} rows "
        f"each), {args.repeat} rounds, {args.threads} threads; table {result['lance_mib']} MiB"
    )
    print(f"  {'':<10} {'median s per shard':>19} {'refs read out (MiB)':>20}")
    for way in ways:
        print(
            f"  {way:<10} {result['median_s'][way]:19.4f} "
            f"{result['median_read_out_mib'][way]:20.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
