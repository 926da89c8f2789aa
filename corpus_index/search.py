"""Search over a namespace's ACTIVE generation, tenant/ACL-filtered inside the engine.

The eligibility predicate (tenant, ACL overlap, collections still configured) is a LanceDB
prefilter: rows the principal may not see never become candidates, so they cannot leak
through scores, counts or truncation.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from corpus_index import predicates
from corpus_index.errors import (
    IncompatibleEmbedderError,
    MissingGenerationError,
    UnknownNamespaceError,
)
from corpus_index.registry import Generation
from corpus_index.service import Corpus

EXCERPT_CHARS = 280


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
class Hit:
    """One search result."""

    score: float
    source_id: str
    collection: str
    tenant_id: str
    section: str
    excerpt: str
    provenance: Provenance

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class SearchResult:
    """Hits in rank order and a trace of what each stage took."""

    hits: list[Hit]
    trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"hits": [h.to_json() for h in self.hits], "trace": self.trace}


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


class Searcher:
    """Dense search over one home's generations."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

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
            gen = self.corpus.registry.require(generation)
            if gen.spec.namespace != namespace:
                raise MissingGenerationError(
                    f"generation {generation} serves namespace {gen.spec.namespace!r}, not {namespace!r}"
                )
            return gen
        active = self.corpus.registry.active(namespace)
        if active is None:
            raise MissingGenerationError(
                f"namespace {namespace!r} has no ACTIVE generation (run `corpus sync` then `corpus promote`)"
            )
        return active

    def embed_query(self, query: str, generation: Generation) -> np.ndarray:
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

    def search(
        self,
        query: str,
        *,
        principal: Principal,
        k: int = 10,
        namespace: str | None = None,
        generation: str | None = None,
    ) -> SearchResult:
        """Top-``k`` hits the principal may see, each with provenance."""
        t0 = time.perf_counter()
        ns = namespace or self.default_namespace(principal)
        gen = self.resolve_generation(ns, generation)
        collections = [c.name for c in self.corpus.config.collections_in(ns)]
        where = eligibility(principal, collections)
        t1 = time.perf_counter()
        vector = self.embed_query(query, gen)
        t2 = time.perf_counter()
        hits: list[Hit] = []
        if self.corpus.store.exists(gen):
            table = self.corpus.store.table(gen)
            rows = (
                table.search(vector, vector_column_name="vector")
                .distance_type("cosine")
                .where(where, prefilter=True)
                .select(
                    [
                        "source_id",
                        "collection",
                        "tenant_id",
                        "section",
                        "text",
                        "chunk_ref",
                        "source_version",
                        "content_hash",
                        "input_format",
                        "backend_spec",
                        "generation",
                        "run_id",
                        "_distance",
                    ]
                )
                .limit(k)
                .to_list()
            )
            hits = [_hit(row, 1.0 - float(row["_distance"])) for row in rows]
        t3 = time.perf_counter()
        return SearchResult(
            hits=hits,
            trace={
                "namespace": ns,
                "generation": gen.id,
                "mode": "dense",
                "k": k,
                "filter_ms": round((t1 - t0) * 1000, 2),
                "embedding_ms": round((t2 - t1) * 1000, 2),
                "dense_ms": round((t3 - t2) * 1000, 2),
                "total_ms": round((t3 - t0) * 1000, 2),
            },
        )


def _hit(row: dict[str, Any], score: float) -> Hit:
    return Hit(
        score=round(score, 6),
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
    )
