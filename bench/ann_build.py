"""What the k-means rounds of the IVF_PQ build cost and buy: build time and recall@10 of the
project's dense query (``ann_nprobes`` probes, exact re-rank of ``ANN_REFINE_FACTOR`` x the
candidates) for each number of rounds, on the same vectors, in the same run.

Vectors: ``--rows`` unit-normalised points around ``--clusters`` Gaussian centres (noise of
the same scale as the centres, as ``bench/latency.py`` makes them), or the ``vector`` column
of a LanceDB table (``--table DIR NAME``, for example a generation of a kept benchmark home).
Queries: ``--queries`` points drawn the same way (synthetic) or rows of the table with noise
added; the truth is the exact cosine top-10 over every vector (NumPy). The index is built as
``index_store`` builds it (``ann_parameters``: partitions about the square root of the rows,
8 dimensions a sub-vector) with only the rounds changed.

    .venv/bin/python bench/ann_build.py [--rows 200000] [--iterations 50,10]
    .venv/bin/python bench/ann_build.py --table HOME/lance gen_g0001 --iterations 50,10
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402


def synthetic(rows: int, queries: int, clusters: int, dim: int, seed: int) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, rows)]
    vectors += rng.normal(size=(rows, dim)).astype(np.float32)
    asked = centres[rng.integers(0, clusters, queries)]
    asked += rng.normal(size=(queries, dim)).astype(np.float32)
    return _normed(vectors), _normed(asked)


def from_table(folder: Path, name: str, queries: int, seed: int) -> tuple[Any, Any]:
    import lancedb

    table = lancedb.connect(str(folder)).open_table(name).to_arrow().select(["vector"])
    vectors = np.stack(table["vector"].to_numpy(zero_copy_only=False)).astype(np.float32)
    rng = np.random.default_rng(seed)
    asked = vectors[rng.integers(0, len(vectors), queries)]
    asked = asked + rng.normal(scale=0.05, size=asked.shape).astype(np.float32)
    return _normed(vectors), _normed(asked)


def _normed(x: Any) -> Any:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def measure(vectors: Any, asked: Any, iterations: list[int]) -> list[dict[str, Any]]:
    import lancedb
    from lancedb.index import IvfPq

    from corpus_index.index_store import ann_parameters
    from corpus_index.retrieval import ANN_REFINE_FACTOR, ann_nprobes

    rows, dim = vectors.shape
    truth = [set(np.argsort(-(vectors @ q))[:10].tolist()) for q in asked]
    params = ann_parameters(rows, dim)
    probes = ann_nprobes(rows, dim)
    data = pa.table(
        {
            "i": pa.array(np.arange(rows)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        }
    )
    out = []
    with tempfile.TemporaryDirectory(prefix="ann-build-") as tmp:
        db = lancedb.connect(tmp)
        for rounds in iterations:
            table = db.create_table("t", data, mode="overwrite")
            config = IvfPq(
                distance_type="cosine",
                num_partitions=params.partitions,
                num_sub_vectors=params.sub_vectors,
                max_iterations=rounds,
            )
            wall, cpu = time.perf_counter(), _common.cpu_s()
            table.create_index("vector", config=config, replace=True)
            wall, cpu = time.perf_counter() - wall, _common.cpu_s() - cpu
            found = []
            for q, want in zip(asked, truth, strict=True):
                hits = (
                    table.search(q)
                    .distance_type("cosine")
                    .nprobes(probes)
                    .refine_factor(ANN_REFINE_FACTOR)
                    .limit(10)
                    .select(["i"])
                    .to_arrow()["i"]
                    .to_pylist()
                )
                found.append(len(want & set(hits)) / 10)
            out.append(
                {
                    "iterations": rounds,
                    "rows": rows,
                    "partitions": params.partitions,
                    "nprobes": probes,
                    "build_wall_s": round(wall, 1),
                    "build_cpu_s": round(cpu, 1),
                    "recall_at_10": round(float(np.mean(found)), 4),
                }
            )
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--iterations", default="50,10", help="k-means rounds to compare")
    ap.add_argument("--table", nargs=2, metavar=("DIR", "NAME"), help="vectors of a table")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.table:
        vectors, asked = from_table(Path(args.table[0]), args.table[1], args.queries, args.seed)
    else:
        vectors, asked = synthetic(args.rows, args.queries, args.clusters, 384, args.seed)
    results = measure(vectors, asked, [int(x) for x in args.iterations.split(",")])
    base = results[0]
    for r in results[1:]:
        print(
            f"{r['iterations']} rounds against {base['iterations']}: build "
            f"{r['build_wall_s'] / base['build_wall_s']:.2f}x wall, "
            f"{r['build_cpu_s'] / base['build_cpu_s']:.2f}x CPU; recall@10 "
            f"{r['recall_at_10']:.4f} against {base['recall_at_10']:.4f}"
        )


if __name__ == "__main__":
    main()
