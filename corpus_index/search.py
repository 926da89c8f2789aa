"""Search over a namespace's ACTIVE generation, tenant/ACL-filtered inside the engine.

The eligibility predicate (tenant, ACL overlap, collections still configured) plus the user's
filters form one LanceDB prefilter that both retrievers run inside: rows the principal may not
see never become candidates, so they cannot leak through scores, counts or truncation.

Stages (DESIGN §9), each timed in the trace: query embedding with the generation's own model ->
prefilter -> dense top-N (cosine) and lexical top-N (LanceDB native FTS, BM25) -> fusion (RRF by
default, or weighted) -> dedupe by content_hash and a per-document cap -> optional rerank ->
optional parent expansion -> hits with scores, excerpts and provenance. The fusion is done here,
from two LanceDB queries, so every stage can be timed and tested on its own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from corpus_index import fusion, predicates
from corpus_index.errors import (
    DimensionMismatchError,
    IncompatibleEmbedderError,
    InvalidQueryError,
    MissingGenerationError,
    MissingIndexError,
    RetryableError,
    UnknownNamespaceError,
)
from corpus_index.filters import FilterSpec, as_filter, compile_filter, filterable_columns
from corpus_index.home import Home
from corpus_index.index_store import FTS_COLUMN
from corpus_index.registry import Generation
from corpus_index.rerank import Reranker
from corpus_index.traces import TraceStore

EXCERPT_CHARS = 280
MODES = ("dense", "lexical", "hybrid")
FUSIONS = ("rrf", "weighted")
EXPANSIONS = ("section", "neighbours")
DEFAULT_PER_DOC_CAP = 3
MIN_CANDIDATES = 50
ANN_REFINE_FACTOR = (
    5  # exact re-ranking of the ANN candidates (bench/latency.py: recall@10 >= 0.95)
)

_RESULT_COLUMNS = [
    "vector_id",
    "source_id",
    "collection",
    "doc_id",
    "deal_id",
    "tenant_id",
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
_BLOCK_ORDER = re.compile(r"/(\d+)(?:#p(\d+))?$")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks: a tenant and the groups they belong to."""

    tenant: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a hit came from, down to the run that wrote it."""

    chunk_ref: str
    source_version: str
    content_hash: str
    input_format: str
    backend_spec: str
    generation: str
    run_id: str


@dataclass(frozen=True, slots=True)
class ContextChunk:
    """A chunk returned around a hit by parent expansion (its section, or its neighbours)."""

    chunk_ref: str
    block_key: str
    section: str
    text: str
    is_hit: bool


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result.

    ``score`` is the final ranking score: the rerank score when a reranker ran, else the fused
    score (hybrid), the cosine similarity (dense) or the BM25 score (lexical). ``scores`` and
    ``ranks`` keep each stage's own numbers.
    """

    score: float
    source_id: str
    collection: str
    tenant_id: str
    section: str
    excerpt: str
    provenance: Provenance
    doc_id: str = ""
    deal_id: str | None = None
    block_key: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    context: tuple[ContextChunk, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The hit as the CLI prints it: exactly ``score, source_id, collection, tenant_id,
        section, excerpt, provenance{...}``, plus ``context`` when parent expansion ran. Each
        stage's scores and ranks are in the trace (``trace.hits``)."""
        out: dict[str, Any] = {
            "score": self.score,
            "source_id": self.source_id,
            "collection": self.collection,
            "tenant_id": self.tenant_id,
            "section": self.section,
            "excerpt": self.excerpt,
            "provenance": asdict(self.provenance),
        }
        if self.context:
            out["context"] = [asdict(c) for c in self.context]
        return out

    def stages(self) -> dict[str, Any]:
        return {"chunk_ref": self.provenance.chunk_ref, "scores": self.scores, "ranks": self.ranks}


@dataclass(slots=True)
class SearchResult:
    """Hits in rank order and a trace of what each stage took."""

    hits: list[Hit]
    trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        trace = {**self.trace, "hits": [h.stages() for h in self.hits]}
        return {"hits": [h.to_json() for h in self.hits], "trace": trace}


@dataclass(slots=True)
class _Candidate:
    row: dict[str, Any]
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    final: float = 0.0


def eligibility(principal: Principal, collections: list[str]) -> str:
    """The prefilter every search runs inside: the principal's tenant and groups, live collections."""
    return predicates.all_of(
        [
            predicates.eq("tenant_id", principal.tenant),
            predicates.list_overlaps("acl_groups", list(principal.groups)),
            predicates.is_in("collection", collections),
        ]
    )


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def candidate_depth(k: int) -> int:
    """How many rows each retriever returns for a top-``k`` search: ``max(5k, 50)``."""
    return max(k * 5, MIN_CANDIDATES)


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


class Searcher:
    """Dense, lexical and hybrid search over one home's generations."""

    def __init__(self, corpus: Home, *, traces: TraceStore | None = None) -> None:
        """
        Args:
            corpus: the home and its configuration.
            traces: where to store a trace of every search (none by default).
        """
        self.corpus = corpus
        self.traces = traces
        # a generation's id, spec and table never change, so explicit lookups are cached; the
        # ACTIVE pointer is read on every search so a promotion or rollback applies at once
        self._generations: dict[str, Generation] = {}

    def default_namespace(self, principal: Principal) -> str:
        """The first namespace holding a collection of the principal's tenant, else the first one."""
        for c in self.corpus.config.collections.values():
            if c.tenant == principal.tenant:
                return c.namespace
        return next(iter(self.corpus.config.namespaces))

    def resolve_generation(self, namespace: str, generation: str | None) -> Generation:
        if namespace not in self.corpus.config.namespaces:
            raise UnknownNamespaceError(f"no namespace {namespace!r} is configured")
        if generation:
            gen = self._generations.get(generation) or self.corpus.registry.require(generation)
            self._generations[generation] = gen
            if gen.spec.namespace != namespace:
                raise MissingGenerationError(
                    f"generation {generation} serves namespace {gen.spec.namespace!r}, not {namespace!r}"
                )
            return gen
        active = self.corpus.registry.active(namespace, cached=True)
        if active is None:
            raise MissingGenerationError(
                f"namespace {namespace!r} has no ACTIVE generation (run `corpus sync` then `corpus promote`)"
            )
        return active

    def embed_query(self, query: str, generation: Generation) -> npt.NDArray[np.float32]:
        """Embed with the generation's own model; any other model is refused."""
        if generation.spec.profile not in self.corpus.config.profiles:
            raise IncompatibleEmbedderError(
                f"generation {generation.id} was built by profile {generation.spec.profile!r}, "
                "which is no longer configured; its queries cannot be embedded"
            )
        embedder = self.corpus.embedder(generation.spec.profile)
        if (
            embedder.backend_spec != generation.spec.backend_spec
            or embedder.revision != generation.spec.model_revision
        ):
            raise IncompatibleEmbedderError(
                f"query embedder {embedder.backend_spec} (revision {embedder.revision}) differs from "
                f"generation {generation.id}'s {generation.spec.backend_spec} (revision "
                f"{generation.spec.model_revision}); cosine across models is meaningless"
            )
        return np.asarray(embedder.embed([query])[0], dtype=np.float32)

    def scope(
        self, principal: Principal, namespace: str | None, generation: str | None
    ) -> tuple[str, Generation, str]:
        """The namespace, the generation and the eligibility predicate of a principal's search."""
        ns = namespace or self.default_namespace(principal)
        gen = self.resolve_generation(ns, generation)
        collections = [c.name for c in self.corpus.config.collections_in(ns)]
        return ns, gen, eligibility(principal, collections)

    def search(
        self,
        query: str,
        *,
        principal: Principal,
        k: int = 10,
        namespace: str | None = None,
        generation: str | None = None,
        mode: str = "hybrid",
        filters: FilterSpec = None,
        vector: Sequence[float] | npt.NDArray[np.float32] | None = None,
        candidates: int | None = None,
        fusion_method: str = "rrf",
        rrf_k: int = fusion.RRF_K,
        weights: tuple[float, float] = (1.0, 1.0),
        dedupe: bool = True,
        per_doc_cap: int | None = DEFAULT_PER_DOC_CAP,
        rerank: Reranker | None = None,
        rerank_depth: int | None = None,
        expand: str | None = None,
        window: int = 1,
    ) -> SearchResult:
        """Top-``k`` hits the principal may see, each with provenance, and a per-stage trace.

        Args:
            query: the query text (used by the lexical retriever, the embedder and the reranker).
            principal: who asks; only rows of their tenant sharing one of their groups qualify.
            k: number of hits.
            namespace: namespace to search (default: the principal's tenant's).
            generation: a generation id to search instead of the namespace's ACTIVE one.
            mode: ``dense``, ``lexical`` or ``hybrid`` (both, fused).
            filters: a ``CorpusFilter``, its JSON shape, or a list of ``Condition``.
            vector: a query vector to use instead of embedding ``query`` (dense/hybrid); its
                dimension must be the generation's.
            candidates: rows each retriever returns (default ``max(5k, 50)``).
            fusion_method: ``rrf`` (reciprocal rank fusion) or ``weighted`` (min-max scores).
            rrf_k: the RRF constant.
            weights: (dense, lexical) weights of the fusion.
            dedupe: drop later hits whose content (content_hash) was already returned.
            per_doc_cap: at most this many hits per document (``None``: no cap).
            rerank: a reranker to reorder the top ``rerank_depth`` candidates.
            rerank_depth: candidates the reranker sees (default ``max(3k, 30)``).
            expand: ``section`` (every chunk of the hit's section) or ``neighbours`` (``window``
                chunks either side) returned as each hit's ``context``.
            window: chunks either side for ``expand="neighbours"``.

        Raises:
            InvalidQueryError: an unknown mode/fusion/expansion, an empty query, bad numbers.
            InvalidFilterError: a filter names an unknown column or has a value of the wrong type.
            MissingGenerationError / UnknownNamespaceError: nothing to search.
            IncompatibleEmbedderError / DimensionMismatchError: the query cannot be compared.
            MissingIndexError: lexical mode on a generation without its full-text index.
        """
        t0 = time.perf_counter()
        _check_options(mode, fusion_method, expand, k, candidates, window, weights, rerank_depth)
        if per_doc_cap is not None and per_doc_cap < 1:
            raise InvalidQueryError(f"per-document cap must be >= 1 (got {per_doc_cap})")
        text = query if isinstance(query, str) else ""
        if vector is None and not text.strip():
            raise InvalidQueryError("the query is empty: give some text (or a query vector)")
        if mode == "lexical" and not text.strip():
            raise InvalidQueryError("lexical search needs query text, not only a vector")
        if rerank is not None and not text.strip():
            raise InvalidQueryError("reranking needs query text, not only a vector")
        depth = candidates or candidate_depth(k)
        ns, gen, where_eligible = self.scope(principal, namespace, generation)
        table = self.corpus.store.table(gen) if self.corpus.store.exists(gen) else None
        t_resolved = time.perf_counter()
        user_filter = as_filter(filters)
        user_pred = ""
        if table is not None:
            user_pred = compile_filter(user_filter, filterable_columns(table.schema))
        where = predicates.all_of([where_eligible, user_pred])
        trace: dict[str, Any] = {
            "namespace": ns,
            "generation": gen.id,
            "mode": mode,
            "k": k,
            "candidates": depth,
            "fusion": fusion_method if mode == "hybrid" else None,
            "filters": user_filter.to_json()["conditions"],
            "rerank": rerank.name if rerank is not None else None,
            "expand": expand,
        }
        t1 = time.perf_counter()

        qvec: npt.NDArray[np.float32] | None = None
        if mode in ("dense", "hybrid"):
            if vector is not None:
                qvec = np.asarray(vector, dtype=np.float32).reshape(-1)
                if qvec.shape[0] != gen.spec.dim:
                    raise DimensionMismatchError(
                        f"query vector has {qvec.shape[0]} dimensions; generation {gen.id} "
                        f"({gen.spec.backend_spec}) has {gen.spec.dim}"
                    )
                if not np.all(np.isfinite(qvec)) or not np.any(qvec):
                    raise InvalidQueryError("the query vector must be finite and not all zeros")
            else:
                qvec = self.embed_query(text, gen)
        t2 = time.perf_counter()

        dense_rows: list[dict[str, Any]] = []
        if table is not None and qvec is not None:
            dense_rows = (
                table.search(qvec, vector_column_name="vector")
                .distance_type("cosine")
                .where(where, prefilter=True)
                .select([*_RESULT_COLUMNS, "_distance"])
                .limit(depth)
                # IVF_PQ ranks by quantized distances (recall@10 0.44 at 100k rows): re-rank
                # depth * ANN_REFINE_FACTOR PQ candidates by exact cosine. No-op without an index.
                .refine_factor(ANN_REFINE_FACTOR)
                .to_list()
            )
        t3 = time.perf_counter()

        lexical_rows: list[dict[str, Any]] = []
        if table is not None and mode in ("lexical", "hybrid") and text.strip():
            if _has_fts(table):
                lexical_rows = _lexical(table, text, where, depth)
            elif mode == "lexical":
                raise MissingIndexError(
                    f"generation {gen.id} has no full-text index yet (run `corpus sync`)"
                )
            else:
                trace["lexical_skipped"] = "no full-text index"
        t4 = time.perf_counter()

        ordered = _fuse(
            dense_rows,
            lexical_rows,
            mode=mode,
            method=fusion_method,
            rrf_k=rrf_k,
            weights=weights,
        )
        fused_count = len(ordered)
        if dedupe:
            ordered = fusion.dedupe(ordered, key=lambda c: dedupe_key(c.row))
        deduped_count = len(ordered)
        ordered = fusion.cap_per_group(ordered, key=lambda c: c.row["source_id"], cap=per_doc_cap)
        capped_count = len(ordered)
        t5 = time.perf_counter()

        if rerank is not None and ordered:
            pool = ordered[: rerank_depth or max(k * 3, 30)]
            scores = rerank.score(text, [c.row["text"] for c in pool])
            if len(scores) != len(pool):
                raise InvalidQueryError(
                    f"reranker {rerank.name} returned {len(scores)} scores for {len(pool)} passages"
                )
            for c, s in zip(pool, scores, strict=True):
                c.scores["rerank"] = round(float(s), 6)
                c.final = float(s)
            pool.sort(key=lambda c: (-c.final, c.ranks.get("fused", 0)))
            for rank, c in enumerate(pool, start=1):
                c.ranks["rerank"] = rank
            ordered = pool
        ordered = ordered[:k]
        t6 = time.perf_counter()

        contexts: dict[str, tuple[ContextChunk, ...]] = {}
        if expand and table is not None and ordered:
            contexts = _expand(table, [c.row for c in ordered], where_eligible, expand, window)
        t7 = time.perf_counter()

        hits = [_hit(c, contexts.get(c.row["vector_id"], ())) for c in ordered]
        trace.update(
            {
                "counts": {
                    "dense": len(dense_rows),
                    "lexical": len(lexical_rows),
                    "fused": fused_count,
                    "after_dedupe": deduped_count,
                    "after_cap": capped_count,
                    "returned": len(hits),
                },
                "resolve_ms": _ms(t0, t_resolved),
                "filter_ms": _ms(t_resolved, t1),
                "embedding_ms": _ms(t1, t2),
                "dense_ms": _ms(t2, t3),
                "lexical_ms": _ms(t3, t4),
                "fusion_ms": _ms(t4, t5),
                "rerank_ms": _ms(t5, t6),
                "expand_ms": _ms(t6, t7),
                "total_ms": _ms(t0, t7),
            }
        )
        result = SearchResult(hits=hits, trace=trace)
        self._record(text, principal, result)
        return result

    def _record(self, query: str, principal: Principal, result: SearchResult) -> None:
        if self.traces is None:
            return
        try:
            result.trace["trace_id"] = self.traces.record(
                query=query,
                tenant=principal.tenant,
                groups=principal.groups,
                trace=result.trace,
                hits=len(result.hits),
            )
        except RetryableError as exc:
            # a busy registry must not fail a search that already succeeded
            result.trace["trace_error"] = str(exc)


def _check_options(
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
    if k < 1:
        raise InvalidQueryError(f"k must be >= 1 (got {k})")
    if candidates is not None and candidates < k:
        raise InvalidQueryError(f"candidates ({candidates}) must be >= k ({k})")
    if window < 0:
        raise InvalidQueryError(f"window must be >= 0 (got {window})")
    if rerank_depth is not None and rerank_depth < 1:
        raise InvalidQueryError(f"rerank depth must be >= 1 (got {rerank_depth})")
    if len(weights) != 2 or any(w < 0 for w in weights) or not any(weights):
        raise InvalidQueryError(
            f"fusion weights must be two non-negative numbers, not both 0 (got {weights})"
        )


def _has_fts(table: Any) -> bool:
    return any(idx.name == f"{FTS_COLUMN}_idx" for idx in table.list_indices())


def _lexical(table: Any, text: str, where: str, depth: int) -> list[dict[str, Any]]:
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
        .select([*_RESULT_COLUMNS, "_score"])
        .limit(depth)
        .to_list()
    )
    return rows


def _fuse(
    dense_rows: list[dict[str, Any]],
    lexical_rows: list[dict[str, Any]],
    *,
    mode: str,
    method: str,
    rrf_k: int,
    weights: tuple[float, float],
) -> list[_Candidate]:
    """Candidates in final order, each carrying its per-retriever ranks and scores."""
    # LanceDB returns exact ties in no fixed order; break them by vector_id so a query always
    # ranks the same way (ties are common with exact search over near-duplicate chunks)
    dense_rows = sorted(dense_rows, key=lambda r: (float(r["_distance"]), r["vector_id"]))
    lexical_rows = sorted(lexical_rows, key=lambda r: (-float(r["_score"]), r["vector_id"]))
    by_id: dict[str, _Candidate] = {}
    dense_ids: list[str] = []
    lexical_ids: list[str] = []
    for rank, row in enumerate(dense_rows, start=1):
        c = by_id.setdefault(row["vector_id"], _Candidate(row))
        c.scores["dense"] = round(1.0 - float(row["_distance"]), 6)
        c.ranks["dense"] = rank
        dense_ids.append(row["vector_id"])
    for rank, row in enumerate(lexical_rows, start=1):
        c = by_id.setdefault(row["vector_id"], _Candidate(row))
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


def _expand(
    table: Any, rows: list[dict[str, Any]], where_eligible: str, how: str, window: int
) -> dict[str, tuple[ContextChunk, ...]]:
    """Each hit's section (or its neighbouring chunks), read inside the same eligibility prefilter."""
    wanted = sorted({(r["source_id"], r["section"]) for r in rows})
    scope = predicates.any_of(
        predicates.all_of([predicates.eq("source_id", s), predicates.eq("section", sec)])
        for s, sec in wanted
    )
    siblings = (
        table.search()
        .where(predicates.all_of([where_eligible, scope]), prefilter=True)
        .select(["vector_id", "source_id", "section", "block_key", "chunk_ref", "text"])
        .limit(max(1000, 200 * len(wanted)))
        .to_list()
    )
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in siblings:
        grouped.setdefault((s["source_id"], s["section"]), []).append(s)
    for chunks in grouped.values():
        chunks.sort(key=lambda s: block_order(str(s["block_key"])))
    out: dict[str, tuple[ContextChunk, ...]] = {}
    for r in rows:
        chunks = grouped.get((r["source_id"], r["section"]), [])
        ids = [c["vector_id"] for c in chunks]
        if how == "neighbours" and r["vector_id"] in ids:
            i = ids.index(r["vector_id"])
            chunks = chunks[max(0, i - window) : i + window + 1]
        out[r["vector_id"]] = tuple(
            ContextChunk(
                chunk_ref=c["chunk_ref"],
                block_key=c["block_key"],
                section=c["section"],
                text=c["text"],
                is_hit=c["vector_id"] == r["vector_id"],
            )
            for c in chunks
        )
    return out


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 2)


def _hit(c: _Candidate, context: tuple[ContextChunk, ...] = ()) -> Hit:
    row = c.row
    return Hit(
        score=round(c.final, 6),
        source_id=row["source_id"],
        collection=row["collection"],
        tenant_id=row["tenant_id"],
        section=row["section"],
        excerpt=excerpt(row["text"]),
        provenance=Provenance(
            chunk_ref=row["chunk_ref"],
            source_version=row["source_version"],
            content_hash=row["content_hash"],
            input_format=row["input_format"],
            backend_spec=row["backend_spec"],
            generation=row["generation"],
            run_id=row["run_id"],
        ),
        doc_id=row.get("doc_id") or "",
        deal_id=row.get("deal_id"),
        block_key=row.get("block_key") or "",
        scores=dict(c.scores),
        ranks=dict(c.ranks),
        context=context,
    )
