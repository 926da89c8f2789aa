"""Search over a namespace's ACTIVE generation, tenant/ACL-filtered inside the engine.

The eligibility predicate (tenant, ACL overlap, collections still configured) plus the user's
filters form one LanceDB prefilter that both retrievers run inside: rows the principal may not
see never become candidates, so they cannot leak through scores, counts or truncation.

Stages (DESIGN §9), each timed in the trace: query embedding with the generation's own model ->
prefilter -> dense top-N (cosine) and lexical top-N (LanceDB native FTS, BM25), issued at the
same time in hybrid mode -> fusion (the namespace's retrieval settings: z-score by default, RRF
or min-max) -> a Rocchio feedback round (a second dense query, after the first fusion, fused
again) -> dedupe by content_hash and a per-document cap (when these leave fewer than k hits
while a retriever stopped at its depth, retrieval to here runs again, deeper) -> optional
rerank -> optional parent
expansion -> hits with scores, excerpts and provenance. The fusion is done here, from two
LanceDB queries, so every stage can be timed and tested on its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from corpus_index import feedback as feedback_round
from corpus_index import fusion, lance, predicates, retrieval
from corpus_index.dimension_probe import forget_learned_dim
from corpus_index.eligibility import Principal, eligibility
from corpus_index.errors import (
    DimensionMismatchError,
    EmbedderError,
    IncompatibleEmbedderError,
    InvalidQueryError,
    MissingGenerationError,
    MissingIndexError,
    RetryableError,
    UnknownNamespaceError,
    UnmaintainedGenerationError,
)
from corpus_index.filters import FilterSpec, as_filter, compile_filter, filterable_columns
from corpus_index.hits import Candidate, ContextChunk, Hit, Provenance, SearchResult
from corpus_index.home import Home
from corpus_index.kinds import excerpt_of
from corpus_index.registry import Generation
from corpus_index.rerank import Reranker
from corpus_index.retrieval import EXPANSIONS, FUSIONS, MODES, block_order, dedupe_key
from corpus_index.retrieval_settings import DEFAULT_RETRIEVAL, RetrievalSettings
from corpus_index.traces import TraceStore

EXCERPT_CHARS = 280
DEFAULT_PER_DOC_CAP = 3
MIN_CANDIDATES = 50
# a search whose dedupe and per-document cap leave fewer than k hits while a retriever stopped
# at its depth (one long document matching everywhere, a block repeated in many) searches
# again this many times deeper, up to this many times its first depth (2 more rounds at most)
DEPTH_GROWTH = 4
MAX_DEPTH_FACTOR = 16

# re-exported: callers take these from the search module
__all__ = [
    "EXPANSIONS",
    "FUSIONS",
    "MODES",
    "ContextChunk",
    "Hit",
    "Principal",
    "Provenance",
    "SearchResult",
    "Searcher",
    "block_order",
    "dedupe_key",
    "eligibility",
]


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def deepest_depth(depth: int) -> int:
    """The deepest a search that starts at ``depth`` rows per retriever goes while dedupe and
    the per-document cap leave fewer than k hits: ``DEPTH_GROWTH`` times deeper a round, to
    ``MAX_DEPTH_FACTOR`` times the first depth, and never past ``retrieval.MAX_CANDIDATES``."""
    return max(depth, min(depth * MAX_DEPTH_FACTOR, retrieval.MAX_CANDIDATES))


def candidate_depth(k: int) -> int:
    """How many rows each retriever returns for a top-``k`` search: ``max(5k, 50)``, at most
    ``retrieval.MAX_CANDIDATES`` (which is no less than the largest ``k``)."""
    return min(max(k * 5, MIN_CANDIDATES), retrieval.MAX_CANDIDATES)


class Stopwatch:
    """Each stage's time in milliseconds, in the order the stages first ran, and the total; a
    stage run again (a deeper round of retrieval) adds to its time."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.add(stage, _ms(self.last, now))
        self.last = now

    def add(self, stage: str, ms: float) -> None:
        """Count ``ms`` to ``stage`` (timed elsewhere, e.g. on another thread)."""
        key = f"{stage}_ms"
        self.laps[key] = round(self.laps.get(key, 0.0) + ms, 2)

    def times(self) -> dict[str, float]:
        return {**self.laps, "total_ms": _ms(self.start, self.last)}


class Retrieved(NamedTuple):
    """Each retriever's rows (dense after the feedback round) and the candidates fused from them."""

    dense_rows: list[dict[str, Any]]
    lexical_rows: list[dict[str, Any]]
    fused: list[Candidate]


class Narrowed(NamedTuple):
    """Candidates after dedupe and the per-document cap, with the count at each step."""

    candidates: list[Candidate]
    fused: int
    after_dedupe: int
    after_cap: int


class Searcher:
    """Dense, lexical and hybrid search over one home's generations."""

    def __init__(
        self, corpus: Home, *, traces: TraceStore | None = None, concurrent: bool = True
    ) -> None:
        """
        Args:
            corpus: the home and its configuration.
            traces: where to store a trace of every search (none by default).
            concurrent: run a hybrid search's dense and lexical retrievers at the same time
                (default); ``False`` runs them one after the other, with the same results.
        """
        self.corpus = corpus
        self.traces = traces
        self.concurrent = concurrent

    def default_namespace(self, principal: Principal) -> str:
        """The first namespace holding a collection of the principal's tenant, else the first one."""
        for c in self.corpus.config.collections.values():
            if c.tenant == principal.tenant:
                return c.namespace
        return next(iter(self.corpus.config.namespaces))

    def resolve_generation(self, namespace: str, generation: str | None) -> Generation:
        if namespace not in self.corpus.config.namespaces:
            raise UnknownNamespaceError(f"no namespace {namespace!r} is configured")
        # the ACTIVE pointer and a generation named are read on every search from the
        # registry's caches, checked against its state: a promotion, a rollback or a status
        # changed (retired, failed) applies at once
        if generation:
            gen = self.corpus.registry.get(generation, cached=True)
            if gen is None or gen.spec.namespace != namespace:
                # another namespace's generation is not named: it may be another tenant's
                raise MissingGenerationError(
                    f"no generation {generation} in namespace {namespace!r}"
                )
            self._maintained(gen, "search a generation its profile's runs write")
            return gen
        active = self.corpus.registry.active(namespace, cached=True)
        if active is None:
            raise MissingGenerationError(
                f"namespace {namespace!r} has no ACTIVE generation (run `corpus sync` then `corpus promote`)"
            )
        self._maintained(active, "promote a generation its profile's runs write")
        return active

    def _maintained(self, generation: Generation, remedy: str) -> None:
        """Refuse a generation the pipeline no longer writes: the edits and ACL changes of its
        sources no longer reach it (only deletions do), so it could show a unit to a group the
        unit was since taken from."""
        reason = self.corpus.unmaintained(generation)
        if reason is not None:
            raise UnmaintainedGenerationError(
                f"{reason}; the edits and ACL changes of its sources no longer reach it, so it "
                f"is not searched ({remedy})"
            )

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
        advice = (
            "so this query is not searched (the next one asks again); if it persists, check "
            f"that the server of profile {generation.spec.profile!r} serves that model"
        )
        try:
            qvec = np.asarray(embedder.embed([query])[0], dtype=np.float32)
        except DimensionMismatchError as exc:
            # the server's answer differs from the length it gave before: not kept as the
            # model's, the next query probes again
            forget_learned_dim(embedder)
            raise EmbedderError(f"{exc}; {advice}") from exc
        if qvec.shape[0] != generation.spec.dim:
            # a model whose length is learned, answering this query with another model's
            # vectors (a replica serving another one)
            forget_learned_dim(embedder)
            raise EmbedderError(
                f"the query's embedding from {embedder.backend_spec} has {qvec.shape[0]} "
                f"dimensions; generation {generation.id} holds {generation.spec.dim}: the "
                f"embedder's server answered with another model's vectors, {advice}"
            )
        return qvec

    def scope(
        self, principal: Principal, namespace: str | None, generation: str | None
    ) -> tuple[str, Generation, str]:
        """The namespace, the generation and the eligibility predicate of a principal's search."""
        ns = namespace or self.default_namespace(principal)
        gen = self.resolve_generation(ns, generation)
        collections = [c.name for c in self.corpus.config.collections_in(ns)]
        return ns, gen, eligibility(principal, collections)

    @lance.reads_tables
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
        fusion_method: str | None = None,
        rrf_k: int | None = None,
        weights: tuple[float, float] | None = None,
        feedback: bool | None = None,
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
            k: number of hits (at most ``retrieval.MAX_K``).
            namespace: namespace to search (default: the principal's tenant's).
            generation: a generation id to search instead of the namespace's ACTIVE one.
            mode: ``dense``, ``lexical`` or ``hybrid`` (both, fused).
            filters: a ``CorpusFilter``, its JSON shape, or a list of ``Condition``.
            vector: a query vector to use instead of embedding ``query`` (dense/hybrid); its
                dimension must be the generation's.
            candidates: rows each retriever returns (at most ``retrieval.MAX_CANDIDATES``).
                Default ``max(5k, 50)``, searched again ``DEPTH_GROWTH`` times deeper (to
                ``MAX_DEPTH_FACTOR`` times) while dedupe and the per-document cap leave fewer
                than ``k`` hits and a retriever stopped at its depth; a depth given is kept. The
                trace's ``candidates`` is the depth used (``deepened``: from what, in how many
                rounds).
            fusion_method: ``zscore`` (standardized scores), ``rrf`` (reciprocal rank fusion)
                or ``weighted`` (min-max scores); default: the namespace's retrieval settings.
            rrf_k: the RRF constant (default: the namespace's).
            weights: (dense, lexical) weights of the fusion (default: the namespace's).
            feedback: run the namespace's Rocchio round (hybrid only; default: when its
                settings have one).
            dedupe: drop later hits whose content (content_hash) was already returned.
            per_doc_cap: at most this many hits per document (``None``: no cap).
            rerank: a reranker to reorder the top ``rerank_depth`` candidates.
            rerank_depth: candidates the reranker sees (default ``max(3k, 30)``); below ``k``,
                the hits after them follow in fused order, with their fused score and no
                rerank rank.
            expand: ``section`` (the hit's section: the hit and up to
                ``retrieval.SECTION_CONTEXT`` chunks either side) or ``neighbours`` (``window``
                chunks either side) returned as each hit's ``context``, in document order.
            window: chunks either side for ``expand="neighbours"``.

        Raises:
            InvalidQueryError: an unknown mode/fusion/expansion, an empty query or one that is
                not Unicode text, bad numbers.
            InvalidFilterError: a filter names an unknown column or has a value of the wrong type.
            MissingGenerationError / UnknownNamespaceError: nothing to search.
            IncompatibleEmbedderError / DimensionMismatchError: the query cannot be compared.
            EmbedderError: the query's embedding failed, or its vector is not of the
                generation's dimension (a server answering with another model's vectors).
            MissingIndexError: lexical mode on a generation without its full-text index.
        """
        clock = Stopwatch()
        retrieval.check_options(
            mode,
            fusion_method or retrieval.FUSIONS[0],
            expand,
            k,
            candidates,
            window,
            weights or (1.0, 1.0),
            rerank_depth,
        )
        if per_doc_cap is not None and per_doc_cap < 1:
            raise InvalidQueryError(f"per-document cap must be >= 1 (got {per_doc_cap})")
        text = _checked_text(query, vector, mode, rerank)
        depth = candidates or candidate_depth(k)
        ns, gen, where_eligible = self.scope(principal, namespace, generation)
        plan = _plan(
            self.corpus.config.namespaces[ns].retrieval, fusion_method, rrf_k, weights, feedback
        )
        table = self.corpus.store.searched(gen)
        clock.lap("resolve")

        user_filter = as_filter(filters)
        where = _prefilter(table, where_eligible, user_filter)
        trace: dict[str, Any] = {
            "namespace": ns,
            "generation": gen.id,
            "mode": mode,
            "k": k,
            "candidates": depth,
            "fusion": plan.fusion if mode == "hybrid" else None,
            "filters": user_filter.to_json()["conditions"],
            "rerank": rerank.name if rerank is not None else None,
            "expand": expand,
        }
        clock.lap("filter")

        qvec = self.query_vector(text, vector, gen, mode)
        clock.lap("embedding")

        first_depth, rounds = depth, 0
        # a depth the caller gave is kept; the default one goes deeper while dedupe and the
        # per-document cap leave fewer than k hits and a retriever stopped at its depth
        deepest = depth if candidates else deepest_depth(depth)
        while True:
            found = self._retrieve(table, text, qvec, where, depth, mode, gen, plan, clock, trace)
            narrowed = _dedupe_and_cap(found.fused, dedupe=dedupe, per_doc_cap=per_doc_cap)
            clock.lap("dedupe")
            cut = depth in (len(found.dense_rows), len(found.lexical_rows))
            if len(narrowed.candidates) >= k or not cut or depth >= deepest:
                break
            depth, rounds = min(depth * DEPTH_GROWTH, deepest), rounds + 1
        trace["candidates"] = depth
        if rounds:
            trace["deepened"] = {"from": first_depth, "rounds": rounds}
        trace["retrievers"] = "concurrent" if mode == "hybrid" and self.concurrent else "sequential"

        pool = narrowed.candidates
        if rerank is not None and pool:
            head = rerank_depth or max(k * 3, 30)
            # the reranker orders only the head; the rest follow it in fused order, so a
            # depth below k still returns k hits
            pool = _rerank(pool[:head], text, rerank) + pool[head:]
        ordered = pool[:k]
        clock.lap("rerank")

        contexts: dict[str, tuple[ContextChunk, ...]] = {}
        if expand and table is not None and ordered:
            rows = [c.row for c in ordered]
            contexts = retrieval.expand(table, rows, where_eligible, expand, window)
        clock.lap("expand")

        hits = [_hit(c, contexts.get(c.row["vector_id"], ())) for c in ordered]
        trace["counts"] = {
            "dense": len(found.dense_rows),
            "lexical": len(found.lexical_rows),
            "fused": narrowed.fused,
            "after_dedupe": narrowed.after_dedupe,
            "after_cap": narrowed.after_cap,
            "returned": len(hits),
        }
        trace.update(clock.times())
        result = SearchResult(hits=hits, trace=trace)
        self._record(text, principal, result)
        return result

    def _retrieve(
        self,
        table: Any,
        text: str,
        qvec: npt.NDArray[np.float32] | None,
        where: str,
        depth: int,
        mode: str,
        gen: Generation,
        plan: RetrievalSettings,
        clock: Stopwatch,
        trace: dict[str, Any],
    ) -> Retrieved:
        """Each retriever's top ``depth`` rows inside ``where``, fused, and fused again after
        the plan's Rocchio round (hybrid only)."""

        def dense_stage() -> list[dict[str, Any]]:
            return retrieval.dense(table, qvec, where, depth)

        def lexical_stage() -> list[dict[str, Any]]:
            return _lexical_stage(table, text, where, depth, mode, gen, trace)

        if mode == "hybrid" and self.concurrent:
            # the two retrievers are independent: the search waits for the slower, not the sum
            dense_run, lexical_run = retrieval.concurrently(dense_stage, lexical_stage)
        else:
            dense_run, lexical_run = retrieval.timed(dense_stage), retrieval.timed(lexical_stage)
        dense_rows, lexical_rows = dense_run.rows, lexical_run.rows
        clock.lap("retrieval")
        clock.add("dense", dense_run.ms)
        clock.add("lexical", lexical_run.ms)

        fuse_opts: dict[str, Any] = {
            "mode": mode,
            "method": plan.fusion,
            "rrf_k": plan.rrf_k,
            "weights": plan.weights,
            "depth": depth,
        }
        fused = retrieval.fuse(dense_rows, lexical_rows, **fuse_opts)
        clock.lap("fusion")

        if mode == "hybrid" and plan.feedback and qvec is not None and table is not None:
            vectors = _feedback_vectors(table, fused, plan, where)
            moved = feedback_round.rocchio(qvec, vectors, beta=plan.feedback_beta)
            dense_rows = retrieval.dense(table, moved, where, depth)
            fused = retrieval.fuse(dense_rows, lexical_rows, **fuse_opts)
            trace["feedback"] = {
                "docs": len(vectors),
                "beta": plan.feedback_beta,
                "from": plan.feedback_from,
            }
        clock.lap("feedback")
        return Retrieved(dense_rows, lexical_rows, fused)

    def query_vector(
        self,
        text: str,
        vector: Sequence[float] | npt.NDArray[np.float32] | None,
        gen: Generation,
        mode: str,
    ) -> npt.NDArray[np.float32] | None:
        """The query's vector for the dense retriever: the one given (checked against the
        generation's dimension), else ``text`` embedded by the generation's own model."""
        if mode not in ("dense", "hybrid"):
            return None
        if vector is None:
            return self.embed_query(text, gen)
        qvec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if qvec.shape[0] != gen.spec.dim:
            raise DimensionMismatchError(
                f"query vector has {qvec.shape[0]} dimensions; generation {gen.id} "
                f"({gen.spec.backend_spec}) has {gen.spec.dim}"
            )
        if not np.all(np.isfinite(qvec)) or not np.any(qvec):
            raise InvalidQueryError("the query vector must be finite and not all zeros")
        return qvec

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


def _plan(
    settings: RetrievalSettings,
    fusion_method: str | None,
    rrf_k: int | None,
    weights: tuple[float, float] | None,
    feedback: bool | None,
) -> RetrievalSettings:
    """The namespace's retrieval settings with what this search asked for instead."""
    dense_w, lexical_w = weights or settings.weights
    plan = RetrievalSettings(
        fusion=fusion_method or settings.fusion,
        dense_weight=dense_w,
        lexical_weight=lexical_w,
        rrf_k=settings.rrf_k if rrf_k is None else rrf_k,
        feedback_docs=settings.feedback_docs,
        feedback_beta=settings.feedback_beta,
        feedback_from=settings.feedback_from,
    )
    if feedback is False or (feedback and not plan.feedback):
        # off, or asked for where the namespace has none: the default round's size
        docs, beta = (
            (0, 0.0)
            if feedback is False
            else (DEFAULT_RETRIEVAL.feedback_docs, DEFAULT_RETRIEVAL.feedback_beta)
        )
        plan = RetrievalSettings(**{**plan.to_json(), "feedback_docs": docs, "feedback_beta": beta})
    return plan


def _feedback_vectors(
    table: Any, fused: list[Candidate], plan: RetrievalSettings, where: str
) -> npt.NDArray[np.float32]:
    """The Rocchio round's feedback vectors: the top ``feedback_docs`` candidates' own rows, or
    (``feedback_from: document``) the top ``feedback_docs`` documents, each the unit mean of
    its rows among the first round's candidates (never rows the search did not already see)."""
    if plan.feedback_from == "chunk":
        return retrieval.vectors_of(
            table, [c.row["vector_id"] for c in fused[: plan.feedback_docs]], where
        )
    docs: dict[str, list[str]] = {}
    for c in fused:
        doc = c.row["source_id"]
        if doc in docs:
            docs[doc].append(c.row["vector_id"])
        elif len(docs) < plan.feedback_docs:
            docs[doc] = [c.row["vector_id"]]
    found = retrieval.vectors_by_id(table, [v for ids in docs.values() for v in ids], where)
    groups = [[found[v] for v in ids if v in found] for ids in docs.values()]
    return feedback_round.unit_centroids([np.asarray(g) for g in groups if g])


def _checked_text(
    query: str, vector: Sequence[float] | npt.NDArray[np.float32] | None, mode: str, rerank: Any
) -> str:
    """The query text, refused where it is not Unicode text or a stage needs text and there
    is none."""
    text = query if isinstance(query, str) else ""
    retrieval.check_query_text(text)
    if vector is None and not text.strip():
        raise InvalidQueryError("the query is empty: give some text (or a query vector)")
    if mode == "lexical" and not text.strip():
        raise InvalidQueryError("lexical search needs query text, not only a vector")
    if rerank is not None and not text.strip():
        raise InvalidQueryError("reranking needs query text, not only a vector")
    return text


def _prefilter(table: Any, where_eligible: str, user_filter: Any) -> str:
    """Eligibility AND the user's filters (compiled against the table's columns)."""
    user_pred = ""
    if table is not None:
        user_pred = compile_filter(user_filter, filterable_columns(table.schema))
    return predicates.all_of([where_eligible, user_pred])


def _lexical_stage(
    table: Any, text: str, where: str, depth: int, mode: str, gen: Generation, trace: dict[str, Any]
) -> list[dict[str, Any]]:
    """BM25 top-N when the mode uses it; a generation without its FTS index is an error in
    lexical mode and a noted skip in hybrid mode."""
    if table is None or mode not in ("lexical", "hybrid") or not text.strip():
        return []
    if retrieval.has_fts(table):
        return retrieval.lexical(table, text, where, depth)
    if mode == "lexical":
        raise MissingIndexError(
            f"generation {gen.id} has no full-text index yet (run `corpus sync`)"
        )
    trace["lexical_skipped"] = "no full-text index"
    return []


def _dedupe_and_cap(fused: list[Candidate], *, dedupe: bool, per_doc_cap: int | None) -> Narrowed:
    """Drop repeated content (by ``dedupe_key``), then keep at most ``per_doc_cap`` per document."""
    ordered = fused
    if dedupe:
        ordered = fusion.dedupe(ordered, key=lambda c: dedupe_key(c.row))
    deduped = len(ordered)
    ordered = fusion.cap_per_group(ordered, key=lambda c: c.row["source_id"], cap=per_doc_cap)
    return Narrowed(ordered, len(fused), deduped, len(ordered))


def _rerank(pool: list[Candidate], text: str, rerank: Reranker) -> list[Candidate]:
    """``pool`` reordered by the reranker's scores (ties keep the fused order)."""
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
    return pool


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 2)


def _hit(c: Candidate, context: tuple[ContextChunk, ...] = ()) -> Hit:
    row = c.row
    return Hit(
        score=round(c.final, 6),
        source_id=row["source_id"],
        collection=row["collection"],
        tenant_id=row["tenant_id"],
        section=row["section"],
        excerpt=excerpt(excerpt_of(row)),
        provenance=Provenance.of_row(row),
        doc_id=row.get("doc_id") or "",
        deal_id=row.get("deal_id"),
        block_key=row.get("block_key") or "",
        scores=dict(c.scores),
        ranks=dict(c.ranks),
        context=context,
    )
