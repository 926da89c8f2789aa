"""The engine-side stages of a search (DESIGN §9) over one LanceDB generation table: option
checks, dense and lexical top-N inside the prefilter, fusion, and parent expansion."""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from corpus_index import fusion, predicates
from corpus_index.errors import InvalidQueryError
from corpus_index.hits import Candidate, ContextChunk
from corpus_index.index_store import FTS_COLUMN, ann_parameters
from corpus_index.retrieval_settings import FUSIONS as RETRIEVAL_FUSIONS

MODES = ("dense", "lexical", "hybrid")
# the most hits (k) and rows per retriever (candidate depth) one search may ask for: LanceDB
# takes its limit as a u32 (2**31 and up were a raw OverflowError), and a search of more rows
# than this is an export, not a search
MAX_K = 10_000
MAX_CANDIDATES = 10_000
FUSIONS = RETRIEVAL_FUSIONS
EXPANSIONS = ("section", "neighbours")
# chunks either side of a hit that expand="section" returns: a section of thousands of chunks
# (a long contract's body) is not one hit's context, and each chunk returned is read whole
SECTION_CONTEXT = 50
# exact re-ranking of depth * ANN_REFINE_FACTOR ANN candidates (bench/latency.py, 1,000,000
# rows, 1,000 partitions: recall@10 0.84 with 5, 0.94 with 10, 0.97 with 20)
ANN_REFINE_FACTOR = 20
# IVF partitions probed: a tenth of them, at least LanceDB's default 20 (1,000,000 rows, 1,000
# partitions, refine factor 20: recall@10 0.94-0.97 with 20 probes, 1.0 with 100)
ANN_MIN_NPROBES = 20
ANN_PROBE_SHARE = 10


def ann_nprobes(rows: int, dim: int) -> int:
    """IVF partitions a dense query probes in a table of ``rows`` vectors of ``dim``."""
    return max(ANN_MIN_NPROBES, ann_parameters(rows, dim).partitions // ANN_PROBE_SHARE)


RESULT_COLUMNS = [
    "vector_id",
    "source_id",
    "collection",
    "doc_id",
    "deal_id",
    "tenant_id",
    "kind",
    "section",
    "block_key",
    "text",
    "chunk_ref",
    "source_version",
    "content_hash",
    "input_format",
    "backend_spec",
    "generation",
    "run_id",
]
# threads that run one retriever of a hybrid search while the caller runs the other; LanceDB
# does the work in its Rust engine with the GIL released, so the two overlap. Enough for many
# concurrent searches (HTTP clients), each holding at most one of them at a time.
POOL_THREADS = 16
_BLOCK_ORDER = re.compile(r"/(\d+)(?:#p(\d+))?$")


def block_order(block_key: str) -> tuple[int, int, str]:
    """Document order of a chunk within its section: block number, then paragraph number."""
    m = _BLOCK_ORDER.search(block_key)
    if not m:
        return (0, 0, block_key)
    return (int(m.group(1)), int(m.group(2) or 0), block_key)


def dedupe_key(row: dict[str, Any]) -> str:
    """Identical content: the block's content_hash plus the paragraph suffix of the chunk, so
    the same block copied into two documents counts once, but two paragraphs of one block don't
    collapse into one."""
    ref = str(row.get("chunk_ref") or "")
    suffix = ref.split("#", 1)[1] if "#" in ref else ""
    return f"{row['content_hash']}#{suffix}"


def check_query_text(text: str) -> None:
    """Refuse query text that is not Unicode: a lone surrogate (what Python makes of a
    non-UTF-8 byte in a command-line argument, or of a JSON ``\\udcff`` escape) cannot be
    encoded for the embedder or the full-text engine, which would fail deep inside with a
    ``UnicodeEncodeError``.

    Raises:
        InvalidQueryError: naming the first such character and its position.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidQueryError(
            f"the query holds {text[exc.start]!r} at position {exc.start}, which is not a "
            "Unicode character (a lone surrogate, e.g. from a byte that is not UTF-8); "
            "give the query as UTF-8 text"
        ) from None


def check_options(
    mode: str,
    fusion_method: str,
    expand: str | None,
    k: int,
    candidates: int | None,
    window: int,
    weights: tuple[float, float],
    rerank_depth: int | None,
) -> None:
    if mode not in MODES:
        raise InvalidQueryError(f"unknown search mode {mode!r} (use {', '.join(MODES)})")
    if fusion_method not in FUSIONS:
        raise InvalidQueryError(f"unknown fusion {fusion_method!r} (use {', '.join(FUSIONS)})")
    if expand is not None and expand not in EXPANSIONS:
        raise InvalidQueryError(f"unknown expansion {expand!r} (use {', '.join(EXPANSIONS)})")
    if not 1 <= k <= MAX_K:
        raise InvalidQueryError(f"k must be between 1 and {MAX_K:,} (got {k})")
    if candidates is not None and candidates < k:
        raise InvalidQueryError(f"candidates ({candidates}) must be >= k ({k})")
    if candidates is not None and candidates > MAX_CANDIDATES:
        raise InvalidQueryError(
            f"candidates must be at most {MAX_CANDIDATES:,} rows per retriever (got {candidates})"
        )
    if window < 0:
        raise InvalidQueryError(f"window must be >= 0 (got {window})")
    if rerank_depth is not None and rerank_depth < 1:
        raise InvalidQueryError(f"rerank depth must be >= 1 (got {rerank_depth})")
    finite = all(math.isfinite(w) and w >= 0 for w in weights)
    if len(weights) != 2 or not finite or not any(weights):
        raise InvalidQueryError(
            f"fusion weights must be two finite, non-negative numbers, not both 0 (got {weights})"
        )


def dense(
    table: Any, qvec: npt.NDArray[np.float32] | None, where: str, depth: int
) -> list[dict[str, Any]]:
    """Top-``depth`` rows by cosine similarity to ``qvec``, inside the prefilter ``where``."""
    if table is None or qvec is None:
        return []
    rows: list[dict[str, Any]] = (
        table.search(qvec, vector_column_name="vector")
        .distance_type("cosine")
        .where(where, prefilter=True)
        .select([*RESULT_COLUMNS, "_distance"])
        .limit(depth)
        .nprobes(ann_nprobes(int(table.count_rows()), len(qvec)))
        # IVF_PQ ranks by quantized distances (recall@10 0.44 at 100k rows): re-rank
        # depth * ANN_REFINE_FACTOR PQ candidates by exact cosine. No-op without an index.
        .refine_factor(ANN_REFINE_FACTOR)
        .to_list()
    )
    return rows


class Timed(NamedTuple):
    """A retriever's rows and the milliseconds it took on its own thread."""

    rows: list[dict[str, Any]]
    ms: float


_pool_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """This process's pool (a forked child gets its own: the parent's threads are not in it)."""
    pid = os.getpid()
    with _pool_lock:
        pool = _pools.get(pid)
        if pool is None:
            pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="corpus-retrieval")
            _pools.clear()
            _pools[pid] = pool
        return pool


def timed(call: Callable[[], list[dict[str, Any]]]) -> Timed:
    start = time.perf_counter()
    rows = call()
    return Timed(rows, round((time.perf_counter() - start) * 1000, 2))


def concurrently(
    first: Callable[[], list[dict[str, Any]]], second: Callable[[], list[dict[str, Any]]]
) -> tuple[Timed, Timed]:
    """``first()`` in the calling thread while ``second()`` runs on a pool thread; both results,
    each with its own time. An exception of either is raised here; the first's only once the
    second has finished too, so no query outlives the search that issued it."""
    other = _pool().submit(timed, second)
    try:
        mine = timed(first)
    except BaseException:
        futures.wait([other])
        raise
    return mine, other.result()


def has_fts(table: Any) -> bool:
    return any(idx.name == f"{FTS_COLUMN}_idx" for idx in table.list_indices())


def lexical(table: Any, text: str, where: str, depth: int) -> list[dict[str, Any]]:
    """BM25 over the FTS index, inside the prefilter. The query is a match query: its words are
    terms, never query syntax, so quotes, colons or ``OR`` in user text mean nothing special."""
    from lancedb.query import FullTextOperator, MatchQuery

    match = MatchQuery(
        text,
        FTS_COLUMN,
        boost=1.0,
        fuzziness=0,  # exact terms (after the index's own stemming), no typo expansion
        max_expansions=50,
        operator=FullTextOperator.OR,  # BM25 over any of the words, as ranked retrieval does
        prefix_length=0,
        document_granularity=None,
    )
    rows: list[dict[str, Any]] = (
        table.search(match, query_type="fts")
        .where(where, prefilter=True)
        .select([*RESULT_COLUMNS, "_score"])
        .limit(depth)
        .to_list()
    )
    return rows


def fuse(
    dense_rows: list[dict[str, Any]],
    lexical_rows: list[dict[str, Any]],
    *,
    mode: str,
    method: str,
    rrf_k: int,
    weights: tuple[float, float],
    depth: int | None = None,
) -> list[Candidate]:
    """Candidates in final order, each carrying its per-retriever ranks and scores.

    ``depth`` is how many rows each retriever was asked for: a lexical list shorter than that
    holds every row that matched a query term, so z-score fusion knows the BM25 score of the
    rest (0) instead of guessing it (``fusion.z_fusion``'s ``complete``).
    """
    # LanceDB returns exact ties in no fixed order; break them by vector_id so a query always
    # ranks the same way (ties are common with exact search over near-duplicate chunks)
    dense_rows = sorted(dense_rows, key=lambda r: (float(r["_distance"]), r["vector_id"]))
    lexical_rows = sorted(lexical_rows, key=lambda r: (-float(r["_score"]), r["vector_id"]))
    by_id: dict[str, Candidate] = {}
    dense_ids: list[str] = []
    lexical_ids: list[str] = []
    for rank, row in enumerate(dense_rows, start=1):
        c = by_id.setdefault(row["vector_id"], Candidate(row))
        c.scores["dense"] = round(1.0 - float(row["_distance"]), 6)
        c.ranks["dense"] = rank
        dense_ids.append(row["vector_id"])
    for rank, row in enumerate(lexical_rows, start=1):
        c = by_id.setdefault(row["vector_id"], Candidate(row))
        c.scores["lexical"] = round(float(row["_score"]), 6)
        c.ranks["lexical"] = rank
        lexical_ids.append(row["vector_id"])
    tiebreak: dict[str, float] | None = None
    if mode == "dense":
        scores = {v: by_id[v].scores["dense"] for v in dense_ids}
    elif mode == "lexical":
        scores = {v: by_id[v].scores["lexical"] for v in lexical_ids}
    else:
        w = {"dense": weights[0], "lexical": weights[1]}
        weighted = fusion.weighted_fusion(
            {
                "dense": {v: by_id[v].scores["dense"] for v in dense_ids},
                "lexical": {v: by_id[v].scores["lexical"] for v in lexical_ids},
            },
            weights=w,
        )
        if method == "rrf":
            scores = fusion.reciprocal_rank_fusion(
                {"dense": dense_ids, "lexical": lexical_ids}, k=rrf_k, weights=w
            )
            tiebreak = weighted  # equal RRF scores: the more confidently scored candidate first
        elif method == "zscore":
            scores = fusion.z_fusion(
                {
                    "dense": {v: by_id[v].scores["dense"] for v in dense_ids},
                    "lexical": {v: by_id[v].scores["lexical"] for v in lexical_ids},
                },
                weights=w,
                complete=("lexical",) if depth is not None and len(lexical_ids) < depth else (),
            )
        else:
            scores = weighted
    out = []
    for rank, vid in enumerate(fusion.ranked(scores, tiebreak), start=1):
        c = by_id[vid]
        c.final = scores[vid]
        if mode == "hybrid":
            c.scores["fused"] = round(scores[vid], 6)
        c.ranks["fused"] = rank
        out.append(c)
    return out


def vectors_of(table: Any, vector_ids: list[str], where: str) -> npt.NDArray[np.float32]:
    """The stored vectors of ``vector_ids`` (inside the prefilter ``where``), in that order."""
    by_id = vectors_by_id(table, vector_ids, where)
    if not by_id:
        return np.zeros((0, 0), dtype=np.float32)
    return np.asarray([by_id[v] for v in vector_ids if v in by_id], dtype=np.float32)


def vectors_by_id(table: Any, vector_ids: list[str], where: str) -> dict[str, list[float]]:
    """The stored vector of each of ``vector_ids`` found inside the prefilter ``where``."""
    if not vector_ids:
        return {}
    rows = (
        table.search()
        .where(
            predicates.all_of([where, predicates.is_in("vector_id", vector_ids)]), prefilter=True
        )
        .select(["vector_id", "vector"])
        .limit(len(vector_ids))
        .to_list()
    )
    return {r["vector_id"]: r["vector"] for r in rows}


def expand(
    table: Any, rows: list[dict[str, Any]], where_eligible: str, how: str, window: int
) -> dict[str, tuple[ContextChunk, ...]]:
    """Each hit's context, read inside the same eligibility prefilter: the chunks of its
    section around it in document order, ``window`` either side (``neighbours``) or up to
    ``SECTION_CONTEXT`` either side (``section``).

    The chunk keys of the hits' sections are read whole (two short columns, no row limit), so
    a hit deep in a section of thousands of chunks is placed by its own position; only the
    chosen chunks' text is read after that. A hit missing from its section's keys (a write
    between the reads) has itself alone as its context.
    """
    wanted = sorted({(r["source_id"], r["section"]) for r in rows})
    scope = predicates.any_of(
        predicates.all_of([predicates.eq("source_id", s), predicates.eq("section", sec)])
        for s, sec in wanted
    )
    keys = (
        table.search()
        .where(predicates.all_of([where_eligible, scope]), prefilter=True)
        .select(["vector_id", "source_id", "section", "block_key"])
        .limit(None)
        .to_list()
    )
    sections: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for key in keys:
        sections.setdefault((key["source_id"], key["section"]), []).append(key)
    positions: dict[str, tuple[list[str], int]] = {}
    for chunks in sections.values():
        chunks.sort(key=lambda c: block_order(str(c["block_key"])))
        ids = [c["vector_id"] for c in chunks]
        for i, vid in enumerate(ids):
            positions[vid] = (ids, i)
    reach = window if how == "neighbours" else SECTION_CONTEXT
    chosen: dict[str, list[str]] = {}
    for r in rows:
        ids, i = positions.get(r["vector_id"], ([r["vector_id"]], 0))
        chosen[r["vector_id"]] = ids[max(0, i - reach) : i + reach + 1]
    needed = sorted({vid for ids in chosen.values() for vid in ids})
    texts = {
        c["vector_id"]: c
        for c in table.search()
        .where(
            predicates.all_of([where_eligible, predicates.is_in("vector_id", needed)]),
            prefilter=True,
        )
        .select(["vector_id", "section", "block_key", "chunk_ref", "text"])
        .limit(len(needed))
        .to_list()
    }
    texts.update({r["vector_id"]: r for r in rows if r["vector_id"] not in texts})
    return {
        r["vector_id"]: tuple(
            ContextChunk(
                chunk_ref=texts[vid]["chunk_ref"],
                block_key=texts[vid]["block_key"],
                section=texts[vid]["section"],
                text=texts[vid]["text"],
                is_hit=vid == r["vector_id"],
            )
            for vid in chosen[r["vector_id"]]
            if vid in texts
        )
        for r in rows
    }
