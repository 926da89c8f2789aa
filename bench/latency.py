"""Search latency: ``Searcher.search`` vs the same query sent straight to LanceDB, ANN recall,
and the memory of the searching process.

Builds (once per ``--home``) a generation of ``--rows`` synthetic rows through the real code,
in a child process (so the searching process never held the rows): ``Registry.open_generation``
for a ``hash:v1-384`` profile, ``GenerationStore.append`` of a stream of record batches of
``vector_entry_schema`` (generated ``BATCH_ROWS`` at a time: memory stays flat in ``--rows``),
``refresh_indexes`` (FTS + IVF_PQ with ``ann_parameters``, as the asset graph builds them),
``record_build`` + ``promote`` so the namespace's ACTIVE pointer names it. Rows:
unit-normalized 384-d vectors around ``--clusters`` gaussian centres; text drawn from a small
vocabulary, each cluster with its own topic words, so BM25 has something to rank; 5 tenants of
unequal size and 4 ACL groups (each row 1-2 groups).

Each query (a fresh point of a random cluster, 2-4 of its topic words plus one common word,
and a random principal: a tenant and 1-2 groups) runs, for dense, lexical and hybrid:

* pipeline: ``Searcher.search(text, vector=q, principal=..., k=10, namespace=..., mode=...)``
  (no model: the vector is passed in), the real path including the ACTIVE-pointer lookup;
  hybrid issues its dense and lexical queries at the same time;
* raw: the same query sent directly to LanceDB on an already-open table, with the same
  eligibility predicate as a prefilter, the same columns, candidate depth (``max(5k, 50)``) and
  the same ANN query parameters; hybrid is the two raw queries issued at the same time (the
  lexical one on a second thread) plus a plain RRF (k=60) in Python;
* raw-seq (hybrids only): the same two raw queries issued one after the other.

Two hybrids run on the pipeline side: ``hybrid-rrf`` (the previous hybrid: RRF k=60, no
feedback; its raw twin is the naive RRF above, target <= 1.3x) and ``hybrid`` (the namespace's
default: z-score fusion plus one Rocchio round, i.e. a second dense query after the first
fusion; target: p50 at most 2x ``hybrid-rrf``'s in the same run).

The sides are interleaved query by query (their order alternates) so they share the machine's
noise. Reported: p50/p95 of each, the overhead ratios (pipeline / raw; target <= 1.3 at p50,
and at p95 for dense and hybrid-rrf), the pipeline's own per-stage times (its trace), a
pinned-generation variant (``generation=<id>``, which skips the registry read) to show what the
ACTIVE lookup costs, the ANN recall@10 of the pipeline's dense hits against the exact cosine
top-10 over the eligible rows (numpy, the table read ``SCAN_ROWS`` rows at a time after the
timed queries; target >= 0.95), plus recall at LanceDB's default query parameters, and memory:
the searching process's RSS before the first query and its peak (getrusage) by the last,
beside the table's data and indexes on disk (target: it grows by at most the indexes plus
``WORKING_SET_MIB``, never by the table).

Usage (from the repository root)::

    .venv/bin/python bench/latency.py                          # 100,000 rows, 200 queries
    .venv/bin/python bench/latency.py --rows 20000 --queries 50
    .venv/bin/python bench/latency.py --home /tmp/lat-home     # keep the built generation
    .venv/bin/python bench/latency.py --rows 1000000 --home /tmp/lat-1m --queries 100
    .venv/bin/python bench/latency.py --json

Options: ``--rows`` (100000), ``--queries`` (200), ``--warmup`` (20 queries, not counted),
``--k`` (10), ``--clusters`` (200), ``--seed`` (7), ``--home DIR`` (kept; reused when it already
holds a generation built with the same rows/clusters/seed), ``--threads`` (BLAS/OpenMP
threads, 1), ``--json``.

The machine is shared with other jobs: compare the sides within one run (they are
interleaved), not milliseconds across runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

DIM = 384
NAMESPACE = "bench"
COLLECTION = "synth"
PROFILE = "main"
TENANTS = ("t0", "t1", "t2", "t3", "t4")
TENANT_WEIGHTS = (0.35, 0.25, 0.2, 0.1, 0.1)
GROUPS = ("analysts", "credit", "legal", "ops")
RRF_K = 60
TARGET_RATIO = 1.3
TARGET_RECALL = 0.95
MODES = ("dense", "lexical", "hybrid-rrf", "hybrid")
# hybrid-rrf: the previous hybrid (RRF k=60, no feedback), selected per search; hybrid: the
# namespace's default retrieval settings (z-score fusion + one Rocchio round)
SEARCH_OPTIONS: dict[str, dict[str, Any]] = {
    "hybrid-rrf": {"mode": "hybrid", "fusion_method": "rrf", "feedback": False},
    "hybrid": {"mode": "hybrid"},
}
# the searching process may grow by what LanceDB caches of the indexes plus this much of its
# own (result lists, caches of table metadata; 52 MiB measured at 20,000 rows), never by the
# table: a search that read the table's vectors into memory would grow by all of its data
WORKING_SET_MIB = 64
DEFAULT_VS_OLD = 2.0  # issue 22: the default hybrid at most 2x the old hybrid's p50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# -- synthetic data --------------------------------------------------------------------------


def vocabulary(rng: Any, size: int = 4000) -> list[str]:
    """Distinct pronounceable nonsense words (the stemmer leaves most of them alone)."""
    cons, vows = "bdfgklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 4))
        words.add("".join(rng.choice(list(cons)) + rng.choice(list(vows)) for _ in range(n)) + "x")
    return sorted(words)


class Synth:
    """Clustered unit vectors, topical text and tenant/ACL scopes, reproducible from a seed."""

    def __init__(self, rows: int, clusters: int, seed: int) -> None:
        import numpy as np

        self.np = np
        self.rng = np.random.default_rng(seed)
        rng = self.rng
        self.rows = rows
        self.clusters = clusters
        self.centres = self._unit(rng.standard_normal((clusters, DIM)).astype(np.float32))
        self.words = vocabulary(rng)
        nw = len(self.words)
        self.common = np.arange(0, 300)  # shared by every topic (Zipf-ish background)
        self.topics = [
            rng.choice(np.arange(300, nw), size=40, replace=False) for _ in range(clusters)
        ]
        self.spread = 0.9  # noise norm relative to the centre: cos(point, centre) ~ 0.74

    def _unit(self, m: Any) -> Any:
        return m / self.np.linalg.norm(m, axis=1, keepdims=True)

    def vectors(self, cluster: Any) -> Any:
        np = self.np
        noise = self.rng.standard_normal((len(cluster), DIM)).astype(np.float32)
        noise *= self.spread / np.sqrt(DIM)
        return self._unit(self.centres[cluster] + noise).astype(np.float32)

    def text(self, cluster: int, n_topic: int, n_common: int) -> str:
        rng = self.rng
        ranks = np.minimum(rng.zipf(1.3, size=n_common) - 1, 299) if n_common else []
        picked = list(rng.choice(self.topics[cluster], size=n_topic)) + [
            self.common[r] for r in ranks
        ]
        rng.shuffle(picked)
        return " ".join(self.words[i] for i in picked)

    def scopes(self, n: int) -> tuple[list[str], list[list[str]]]:
        rng = self.rng
        tenants = rng.choice(len(TENANTS), size=n, p=TENANT_WEIGHTS)
        acl = []
        for _ in range(n):
            k = int(rng.integers(1, 3))
            acl.append([GROUPS[g] for g in sorted(rng.choice(len(GROUPS), size=k, replace=False))])
        return [TENANTS[t] for t in tenants], acl


np: Any = None  # numpy, bound in main() after the thread settings


BATCH_ROWS = 50_000  # rows generated and written at a time: memory stays flat in --rows
MARKER = "bench-latency.json"
SCAN_ROWS = 65_536  # rows read at a time for the exact ground truth
DATA_VERSION = 2  # bumped when the generated rows change (2: generated in batches)


def row_batches(synth: Synth, gen: Any, spec: Any, schema: Any) -> Any:
    """The synthetic rows as a stream of record batches in the generation's schema."""
    import pyarrow as pa

    for first in range(0, synth.rows, BATCH_ROWS):
        n = min(BATCH_ROWS, synth.rows - first)
        cluster = synth.rng.integers(0, synth.clusters, size=n)
        vectors = synth.vectors(cluster)
        texts = [
            synth.text(int(c), int(synth.rng.integers(8, 16)), int(synth.rng.integers(10, 30)))
            for c in cluster
        ]
        tenants, acl = synth.scopes(n)
        ids = [f"{i:07d}" for i in range(first, first + n)]
        cols: dict[str, Any] = {
            "vector_id": [f"v{i}" for i in ids],
            "chunk_ref": [f"chunk://{COLLECTION}/d{i}/v1/passage/0" for i in ids],
            "source_id": [f"{COLLECTION}/d{i}" for i in ids],
            "collection": [COLLECTION] * n,
            "doc_id": [f"d{i}" for i in ids],
            "source_version": ["v1"] * n,
            "kind": ["beir"] * n,
            "source_type": ["passage"] * n,
            "section": ["passage"] * n,
            "block_key": ["passage/0"] * n,
            "content_hash": [f"sha256:c{i}" for i in ids],
            "input_format": [spec.input_format] * n,
            "input_hash": [f"sha256:i{i}" for i in ids],
            "text": texts,
            "tenant_id": tenants,
            "acl_groups": acl,
            "tier": ["restricted"] * n,
            "language": ["en"] * n,
            "event_date": [None] * n,
            "metadata": ["{}"] * n,
            "backend_spec": [spec.backend_spec] * n,
            "dim": [DIM] * n,
            "normalized": [True] * n,
            "generation": [gen.id] * n,
            "namespace": [NAMESPACE] * n,
            "run_id": ["bench-latency"] * n,
        }
        arrays = []
        for field in schema:
            if field.name == "vector":
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM))
            elif field.name in cols:
                arrays.append(pa.array(cols[field.name], field.type))
            else:  # promoted deal columns: none for passages
                arrays.append(pa.nulls(n, field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def build_generation(corpus: Any, args: argparse.Namespace, say: Any) -> Any:
    """Write, index, record and promote the synthetic generation through the project's code,
    the rows streamed to LanceDB ``BATCH_ROWS`` at a time (one commit)."""
    import pyarrow as pa

    from corpus_index.index_store import ann_parameters, vector_entry_schema

    synth = Synth(args.rows, args.clusters, args.seed)
    spec = corpus.spec(PROFILE)
    gen = corpus.registry.open_generation(spec, run_id="bench-latency")
    schema = vector_entry_schema(gen)
    t0 = time.perf_counter()
    stream = pa.RecordBatchReader.from_batches(schema, row_batches(synth, gen, spec, schema))
    corpus.store.append(gen, COLLECTION, stream)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    coverage = corpus.store.refresh_indexes(gen)
    index_s = time.perf_counter() - t0
    corpus.registry.record_build(gen.id, row_count=coverage.rows, checks={}, ready=True)
    gen = corpus.registry.promote(gen.id, required=set())
    params = ann_parameters(coverage.rows, DIM)
    say(
        f"built {gen.id}: {coverage.rows} rows (generate + write {write_s:.1f} s, "
        f"FTS+{coverage.ann} indexes {index_s:.1f} s)"
    )
    return gen, {
        "write_s": round(write_s, 1),
        "index_s": round(index_s, 1),
        "ann": coverage.ann,
        "ann_config": f"IVF_PQ {params.partitions} partitions, {params.sub_vectors} sub-vectors",
        "peak_rss_mib": round(_common.maxrss_mib(), 1),
    }


def write_config(home: Path) -> Path:
    import yaml

    src = home / "synth-src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "corpus.jsonl").touch()
    config = {
        "collections": {
            COLLECTION: {
                "kind": "beir",
                "path": str(src),
                "tenant": TENANTS[0],
                "acl_groups": list(GROUPS),
                "namespace": NAMESPACE,
            }
        },
        "profiles": {PROFILE: {"embedder": f"hash:v1-{DIM}", "namespace": NAMESPACE}},
        "namespaces": {NAMESPACE: {}},
    }
    path = home / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


# -- the raw side ----------------------------------------------------------------------------


def ann_params(rows: int) -> tuple[int | None, int | None]:
    """The ANN query parameters ``Searcher`` sends for a table of ``rows``, so the raw side
    asks LanceDB exactly what the pipeline asks."""
    from corpus_index import retrieval

    return retrieval.ann_nprobes(rows, DIM), retrieval.ANN_REFINE_FACTOR


def raw_dense(
    table: Any,
    q: Any,
    where: str,
    depth: int,
    columns: list[str],
    nprobes: int | None,
    refine: int | None,
) -> list[dict[str, Any]]:
    query = (
        table.search(q, vector_column_name="vector")
        .distance_type("cosine")
        .where(where, prefilter=True)
        .select([*columns, "_distance"])
        .limit(depth)
    )
    if nprobes is not None:
        query = query.nprobes(nprobes)
    if refine is not None:
        query = query.refine_factor(refine)
    return query.to_list()


def raw_lexical(
    table: Any, text: str, where: str, depth: int, columns: list[str]
) -> list[dict[str, Any]]:
    return (
        table.search(text, query_type="fts")
        .where(where, prefilter=True)
        .select([*columns, "_score"])
        .limit(depth)
        .to_list()
    )


def exact_top_k(
    table: Any, queries: Any, tenants: list[str], groups: list[list[str]], k: int
) -> tuple[list[set[str]], list[float]]:
    """Each query's exact cosine top-``k`` vector ids among the rows its principal may see,
    and the fraction of rows it may see, reading the table ``SCAN_ROWS`` rows at a time."""
    n_q = len(queries)
    best = np.full((n_q, k), -np.inf, dtype=np.float32)
    best_ids = np.full((n_q, k), "", dtype=object)
    q_tenant = np.asarray([TENANTS.index(t) for t in tenants])
    q_groups = np.zeros((n_q, len(GROUPS)), dtype=np.float32)
    for qi, gs in enumerate(groups):
        for g in gs:
            q_groups[qi, GROUPS.index(g)] = 1.0
    seen = np.zeros(n_q)
    rows = 0
    columns = ["vector_id", "tenant_id", "acl_groups", "vector"]
    for batch in table.search().select(columns).limit(None).to_batches(SCAN_ROWS):
        n = batch.num_rows
        vids = np.asarray(batch.column("vector_id").to_pylist(), dtype=object)
        tenant = np.asarray([TENANTS.index(t) for t in batch.column("tenant_id").to_pylist()])
        member = np.zeros((n, len(GROUPS)), dtype=np.float32)
        for r, gs in enumerate(batch.column("acl_groups").to_pylist()):
            for g in gs:
                member[r, GROUPS.index(g)] = 1.0
        vectors = batch.column("vector").values.to_numpy(zero_copy_only=False).reshape(n, DIM)
        allowed = (tenant[:, None] == q_tenant[None, :]) & ((member @ q_groups.T) > 0)
        sims = vectors @ queries.T
        sims[~allowed] = -np.inf
        seen += allowed.sum(axis=0)
        rows += n
        merged = np.concatenate([best, sims.T], axis=1)
        merged_ids = np.concatenate([best_ids, np.broadcast_to(vids, (n_q, n))], axis=1)
        top = np.argsort(-merged, axis=1, kind="stable")[:, :k]
        best = np.take_along_axis(merged, top, axis=1)
        best_ids = np.take_along_axis(merged_ids, top, axis=1)
    return [set(ids) for ids in best_ids], list(seen / max(rows, 1))


def table_on_disk(folder: Path) -> dict[str, float]:
    """MiB on disk of a LanceDB table folder: its data files, its indexes (FTS and ANN)."""
    data = _common.dir_mib(folder / "data")
    indices = _common.dir_mib(folder / "_indices")
    return {
        "data_mib": round(data, 1),
        "indices_mib": round(indices, 1),
        "total_mib": round(_common.dir_mib(folder), 1),
    }


def same_ties(mode: str, raw: tuple[Any, Any, Any], k: int) -> list[str]:
    """The raw side's top-k with exact ties broken by vector_id, as ``Searcher`` breaks them
    (LanceDB returns tied rows in no fixed order), so the two top-k lists are comparable."""
    dense, lexical, _fused = raw
    d = [r["vector_id"] for r in sorted(dense, key=lambda r: (r["_distance"], r["vector_id"]))]
    lx = [r["vector_id"] for r in sorted(lexical, key=lambda r: (-r["_score"], r["vector_id"]))]
    if mode == "dense":
        return d[:k]
    if mode == "lexical":
        return lx[:k]
    return rrf([d, lx])[:k]


def rrf(rankings: list[list[str]], k: int = RRF_K) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=args.threads)
    global np
    import numpy

    np = numpy
    with _common.bench_home(args.home, "bench-latency-") as home:
        config_path = write_config(home)
        _common.point_project_at(config_path, home)
        if args.build_only:
            return build_in_this_process(args, home, config_path)
        return run(args, home, config_path)


def wanted_data(args: argparse.Namespace) -> dict[str, Any]:
    return {"rows": args.rows, "clusters": args.clusters, "seed": args.seed, "v": DATA_VERSION}


def build_in_this_process(args: argparse.Namespace, home: Path, config_path: Path) -> int:
    """The child process that builds the generation (so the searching process never held it)."""
    from corpus_index.config import Settings
    from corpus_index.home import Home

    corpus = Home(Settings(config_path=config_path, home=home))
    if corpus.registry.active(NAMESPACE) is not None:
        sys.exit(f"error: {home} holds another benchmark generation; use an empty --home")
    gen, build = build_generation(corpus, args, lambda m: print(m, file=sys.stderr, flush=True))
    (home / MARKER).write_text(
        json.dumps({"data": wanted_data(args), "generation": gen.id, "build": build})
    )
    return 0


def build_in_a_child(args: argparse.Namespace, home: Path) -> None:
    import subprocess

    cmd = [sys.executable, str(Path(__file__).resolve()), "--build-only", "--home", str(home)]
    cmd += ["--rows", str(args.rows), "--clusters", str(args.clusters), "--seed", str(args.seed)]
    cmd += ["--threads", str(args.threads)]
    subprocess.run(cmd, check=True)


def run(args: argparse.Namespace, home: Path, config_path: Path) -> int:
    from corpus_index import retrieval
    from corpus_index.config import Settings
    from corpus_index.home import Home
    from corpus_index.metrics import percentile
    from corpus_index.search import Principal, Searcher, candidate_depth, eligibility

    say = (
        (lambda m: print(m, file=sys.stderr, flush=True))
        if args.json
        else (lambda m: print(m, flush=True))
    )
    settings = Settings(config_path=config_path, home=home)
    corpus = Home(settings)
    marker = home / MARKER
    gen = corpus.registry.active(NAMESPACE)
    if not marker.is_file() or json.loads(marker.read_text())["data"] != wanted_data(args):
        if gen is not None:
            sys.exit(f"error: {home} holds another benchmark generation; use an empty --home")
        say(f"building {args.rows} rows in {home} (a child process)")
        build_in_a_child(args, home)
        corpus = Home(settings)
        gen = corpus.registry.active(NAMESPACE)
        if gen is None:
            sys.exit(f"error: the build in {home} promoted no generation")
    else:
        say(f"reusing {gen.id if gen else '?'} in {home}")
    build: dict[str, Any] = json.loads(marker.read_text())["build"]
    if gen is None:
        sys.exit(f"error: {home} has a marker but no ACTIVE generation; use an empty --home")
    table = corpus.store.table(gen)
    indices = {i.name: str(i.index_type) for i in table.list_indices()}
    nprobes, refine = ann_params(int(table.count_rows()))
    if "vector_idx" in indices:
        stats = table.index_stats("vector_idx")
        ann_desc = (
            f"{indices['vector_idx']} {stats.num_indexed_rows} rows, {stats.num_indices} "
            f"index; build {build.get('ann_config', '?')}; query nprobes="
            f"{nprobes or 'default'}, refine_factor={refine or 'none'}"
        )
    else:
        ann_desc = "no ANN index (exact)"
    disk = table_on_disk(Path(settings.lance_uri) / f"{gen.table_name}.lance")

    # queries
    synth = Synth(args.rows, args.clusters, args.seed)  # same centres, topics and vocabulary
    qrng = np.random.default_rng(args.seed + 1)
    synth.rng = qrng
    total = args.warmup + args.queries
    qclusters = qrng.integers(0, args.clusters, size=total)
    qvecs = synth.vectors(qclusters)
    qtexts = [synth.text(int(c), int(qrng.integers(2, 5)), 1) for c in qclusters]
    qtenants, qgroups = synth.scopes(total)
    principals = [Principal(t, tuple(g)) for t, g in zip(qtenants, qgroups, strict=False)]

    searcher = Searcher(corpus)
    k = args.k
    depth = candidate_depth(k)
    columns = list(retrieval.RESULT_COLUMNS)
    sides = ("pipeline", "raw", "raw-seq", "pinned")
    lat: dict[str, list[float]] = {f"{s} {m}": [] for m in MODES for s in sides}
    stages: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    dense_ids: dict[int, tuple[list[str], list[str], list[str]]] = {}  # pipeline, raw, defaults
    mismatched_top = {m: 0 for m in MODES}
    second_thread = ThreadPoolExecutor(1)  # the raw side's own thread for its concurrent hybrid

    def timed(fn: Any) -> tuple[float, Any]:
        t = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t) * 1000, out

    say(
        f"running {args.warmup} warm-up + {args.queries} queries x {len(MODES)} modes, "
        f"interleaved ({ann_desc})"
    )
    rss_before = _common.rss_mib()
    started = time.perf_counter()
    for i in range(total):
        if i and i % 10 == 0:
            say(f"  {i} of {total} queries, {time.perf_counter() - started:.0f} s")
        p, q, text = principals[i], qvecs[i], qtexts[i]
        where = eligibility(p, [COLLECTION])
        record = i >= args.warmup
        for m in MODES:
            opts = SEARCH_OPTIONS.get(m, {"mode": m})

            def pipe(opts: dict[str, Any] = opts) -> Any:
                return searcher.search(
                    text, principal=p, k=k, namespace=NAMESPACE, vector=q, **opts
                )

            def pinned(opts: dict[str, Any] = opts) -> Any:
                return searcher.search(
                    text, principal=p, k=k, namespace=NAMESPACE, vector=q, generation=gen.id, **opts
                )

            def raw(m: str = m, together: bool = True) -> Any:
                if m == "dense":
                    return raw_dense(table, q, where, depth, columns, nprobes, refine), [], []
                if m == "lexical":
                    return [], raw_lexical(table, text, where, depth, columns), []
                if together:  # the lexical query on the second thread while this one runs dense
                    other = second_thread.submit(raw_lexical, table, text, where, depth, columns)
                    d = raw_dense(table, q, where, depth, columns, nprobes, refine)
                    lx = other.result()
                else:
                    d = raw_dense(table, q, where, depth, columns, nprobes, refine)
                    lx = raw_lexical(table, text, where, depth, columns)
                return d, lx, rrf([[r["vector_id"] for r in d], [r["vector_id"] for r in lx]])[:k]

            def raw_seq(m: str = m) -> Any:
                return raw(m, together=False)

            order = [("pipeline", pipe), ("raw", raw), ("pinned", pinned)]
            if m.startswith("hybrid"):
                order.insert(2, ("raw-seq", raw_seq))
            if i % 2:
                order.reverse()
            got: dict[str, Any] = {}
            for name, fn in order:
                ms, got[name] = timed(fn)
                if record:
                    lat[f"{name} {m}"].append(ms)
            if not record:
                continue
            for key, v in got["pipeline"].trace.items():
                if key.endswith("_ms"):
                    stages[m].setdefault(key, []).append(float(v))
            pipe_ids = ["v" + h.source_id.rsplit("/d", 1)[1] for h in got["pipeline"].hits]
            raw_ids = same_ties(m, got["raw"], k)
            if pipe_ids != raw_ids:
                mismatched_top[m] += 1
            if m == "dense":
                dflt = raw_dense(table, q, where, depth, columns, None, None)
                dense_ids[i] = (pipe_ids, raw_ids, [r["vector_id"] for r in dflt[:k]])
    peak_rss = _common.maxrss_mib()  # this process built nothing: its peak is the searching
    rss_after = _common.rss_mib()
    second_thread.shutdown()

    # ground truth: exact cosine top-k over each principal's eligible rows, streamed
    t0 = time.perf_counter()
    measured = sorted(dense_ids)
    exact, eligible_frac = exact_top_k(
        table,
        qvecs[measured],
        [qtenants[i] for i in measured],
        [qgroups[i] for i in measured],
        k,
    )
    say(f"exact top-{k} of {len(measured)} queries in {time.perf_counter() - t0:.1f} s")
    recall_pipe, recall_raw_same, recall_raw_default = [], [], []
    for i, truth in zip(measured, exact, strict=True):
        pipe_ids, raw_ids, dflt_ids = dense_ids[i]
        recall_pipe.append(len(truth & set(pipe_ids)) / k)
        recall_raw_same.append(len(truth & set(raw_ids)) / k)
        recall_raw_default.append(len(truth & set(dflt_ids)) / k)

    def pct(xs: list[float], p: float) -> float:
        return round(percentile(xs, p), 2)

    # where the pipeline's extra time goes: the per-search calls the raw side does not make
    from corpus_index.retrieval import has_fts as _has_fts

    micro_calls = {
        "registry.active(namespace), uncached [1 DuckDB connection]": (
            lambda: corpus.registry.active(NAMESPACE)
        ),
        "registry.active(namespace, cached=True) [stat only]": (
            lambda: corpus.registry.active(NAMESPACE, cached=True)
        ),
        "store.exists + store.table (list + open the table)": (
            lambda: corpus.store.exists(gen) and corpus.store.table(gen)
        ),
        "_has_fts (table.list_indices)": lambda: _has_fts(table),
    }
    micro: dict[str, float] = {}
    for label, fn in micro_calls.items():
        micro[label] = pct([timed(fn)[0] for _ in range(30)], 50)

    result: dict[str, Any] = {
        "rows": args.rows,
        "queries": args.queries,
        "warmup": args.warmup,
        "k": k,
        "candidates": depth,
        "generation": gen.id,
        "build": build,
        "ann": ann_desc,
        "threads_blas": args.threads,
        "eligible_fraction_mean": round(float(np.mean(eligible_frac)), 4),
        "modes": {},
        "targets": [],
        "per_search_calls_p50_ms": micro,
        "memory": {
            "rss_before_first_query_mib": round(rss_before, 1),
            "peak_rss_searching_mib": round(peak_rss, 1),
            "rss_after_last_query_mib": round(rss_after, 1),
            "growth_while_searching_mib": round(peak_rss - rss_before, 1),
            "table_on_disk_mib": disk,
        },
    }
    ok = True

    def target(label: str, value: float, passed: bool) -> None:
        nonlocal ok
        ok &= passed
        result["targets"].append({"target": label, "value": round(value, 3), "pass": passed})

    for m in MODES:
        pl, rw, pn = lat[f"pipeline {m}"], lat[f"raw {m}"], lat[f"pinned {m}"]
        ratio = percentile(pl, 50) / percentile(rw, 50)
        ratio95 = percentile(pl, 95) / percentile(rw, 95)
        result["modes"][m] = {
            "pipeline_p50_ms": pct(pl, 50),
            "pipeline_p95_ms": pct(pl, 95),
            "raw_p50_ms": pct(rw, 50),
            "raw_p95_ms": pct(rw, 95),
            "pinned_p50_ms": pct(pn, 50),
            "pinned_p95_ms": pct(pn, 95),
            "ratio_p50": round(ratio, 3),
            "ratio_p95": round(ratio95, 3),
            "pinned_ratio_p50": round(percentile(pn, 50) / percentile(rw, 50), 3),
            "top_k_differs_from_raw": mismatched_top[m],
            "stages_p50_ms": {s: pct(v, 50) for s, v in stages[m].items()},
        }
        seq = lat[f"raw-seq {m}"]
        if seq:  # hybrids: the raw side also issued its two queries one after the other
            result["modes"][m]["raw_seq_p50_ms"] = pct(seq, 50)
            result["modes"][m]["raw_seq_p95_ms"] = pct(seq, 95)
            result["modes"][m]["ratio_to_raw_seq_p50"] = round(
                percentile(pl, 50) / percentile(seq, 50), 3
            )
        if m == "hybrid":  # the default's raw twin is naive RRF: compare with the old hybrid
            vs_old = percentile(pl, 50) / percentile(lat["pipeline hybrid-rrf"], 50)
            result["modes"][m]["vs_hybrid_rrf_p50"] = round(vs_old, 3)
            target(
                f"hybrid (default) p50 / hybrid-rrf p50 <= {DEFAULT_VS_OLD}",
                vs_old,
                vs_old <= DEFAULT_VS_OLD,
            )
            continue
        target(f"{m}: pipeline p50 / raw p50 <= {TARGET_RATIO}", ratio, ratio <= TARGET_RATIO)
        if m != "lexical":
            target(
                f"{m}: pipeline p95 / raw p95 <= {TARGET_RATIO}", ratio95, ratio95 <= TARGET_RATIO
            )
    growth = peak_rss - rss_before
    bound = disk.get("indices_mib", 0) + WORKING_SET_MIB
    target(
        f"memory: peak RSS growth while searching (MiB) <= the indexes on disk + "
        f"{WORKING_SET_MIB} MiB = {bound:.0f} MiB (the table's data: "
        f"{disk.get('data_mib', 0):.0f} MiB)",
        growth,
        growth <= bound,
    )
    rec = float(np.mean(recall_pipe))
    result["recall@10"] = {
        "pipeline": round(rec, 4),
        "raw_same_params": round(float(np.mean(recall_raw_same)), 4),
        "raw_lancedb_defaults": round(float(np.mean(recall_raw_default)), 4),
    }
    target(f"dense ANN recall@10 vs exact >= {TARGET_RECALL}", rec, rec >= TARGET_RECALL)
    result["pass"] = ok
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_text(result)
    return 0 if ok else 1


def print_text(r: dict[str, Any]) -> None:
    print()
    print(
        f"latency: {r['rows']} rows, {r['queries']} queries (+{r['warmup']} warm-up), k={r['k']}, "
        f"{r['candidates']} candidates per retriever, generation {r['generation']}"
    )
    print(
        f"  ANN: {r['ann']}; mean eligible fraction per principal "
        f"{r['eligible_fraction_mean']:.1%}; BLAS threads {r['threads_blas']}"
    )
    print(
        f"  {'mode':<10} {'pipeline p50':>12} {'p95':>8} {'raw p50':>8} {'p95':>8} "
        f"{'ratio p50':>9} {'p95':>6}  {'pinned p50':>10} {'ratio':>6}"
    )
    for m, d in r["modes"].items():
        print(
            f"  {m:<10} {d['pipeline_p50_ms']:12.2f} {d['pipeline_p95_ms']:8.2f} "
            f"{d['raw_p50_ms']:8.2f} {d['raw_p95_ms']:8.2f} {d['ratio_p50']:9.2f} "
            f"{d['ratio_p95']:6.2f}  {d['pinned_p50_ms']:10.2f} {d['pinned_ratio_p50']:6.2f}"
        )
    print("  hybrids: raw is the two queries issued at once; issued one after the other:")
    for m, d in r["modes"].items():
        if "raw_seq_p50_ms" in d:
            print(
                f"  {m:<10} raw one after the other p50 {d['raw_seq_p50_ms']:.2f} p95 "
                f"{d['raw_seq_p95_ms']:.2f}; pipeline p50 / that {d['ratio_to_raw_seq_p50']:.2f}"
            )
    mem = r["memory"]
    disk = mem["table_on_disk_mib"]
    print(
        f"  memory: RSS {mem['rss_before_first_query_mib']:.0f} MiB before the first query, "
        f"peak {mem['peak_rss_searching_mib']:.0f} MiB while searching (+"
        f"{mem['growth_while_searching_mib']:.0f}); table on disk {disk.get('total_mib', 0):.0f} "
        f"MiB (data {disk.get('data_mib', 0):.0f}, indexes {disk.get('indices_mib', 0):.0f})"
    )
    print("  pipeline stages, p50 ms (Searcher trace):")
    for m, d in r["modes"].items():
        s = d["stages_p50_ms"]
        print(
            f"    {m:<10} "
            + "  ".join(f"{k[:-3]} {v:.2f}" for k, v in s.items() if v)
            + f"   (top-{r['k']} differs from raw in {d['top_k_differs_from_raw']} queries; ties "
            "broken by vector_id on both)"
        )
    print("  per-search calls the raw side does not make, p50 ms (30 calls each):")
    for label, v in r["per_search_calls_p50_ms"].items():
        print(f"    {label:<52} {v:8.2f}")
    rc = r["recall@10"]
    print(
        f"  dense recall@10 vs exact: pipeline {rc['pipeline']:.4f}, raw same params "
        f"{rc['raw_same_params']:.4f}, raw at LanceDB defaults {rc['raw_lancedb_defaults']:.4f}"
    )
    for t in r["targets"]:
        print(f"  {'PASS' if t['pass'] else 'FAIL'}  {t['target']}: {t['value']}")


if __name__ == "__main__":
    sys.exit(main())
