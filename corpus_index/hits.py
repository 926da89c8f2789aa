"""What a search returns: hits with provenance and context, and the result with its trace."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


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

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Provenance:
        """The provenance of a generation row (one read with these columns)."""
        return cls(**{f.name: row[f.name] for f in fields(cls)})


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
class Candidate:
    """A row on its way through fusion, dedupe, cap and rerank, with each stage's numbers."""

    row: dict[str, Any]
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    final: float = 0.0
