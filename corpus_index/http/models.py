"""Request and response bodies of the HTTP API (pydantic), documented in its OpenAPI."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from corpus_index.context_records import MemberRecord
from corpus_index.hits import Provenance

HARD_MAX_QUERY = 100_000  # a sanity bound for the schema; the configured limit is lower


class _Strict(BaseModel):
    """A request body: unknown fields refused, and numbers and booleans taken only as JSON
    numbers and booleans (``"k": "5"`` or ``"k": true`` is a validation error, not 5 or 1).
    Strings stay lax where JSON has no type of their own (``as_of`` is an ISO 8601 string)."""

    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Strict):
    """A search as the Python API takes it. The tenant comes from the API key, never from here."""

    query: str = Field(min_length=1, max_length=HARD_MAX_QUERY, description="The query text.")
    mode: Literal["dense", "lexical", "hybrid"] = "hybrid"
    k: int = Field(10, ge=1, strict=True, description="Hits per page (at most the server's max_k).")
    filters: dict[str, Any] | None = Field(
        None,
        description="RFC 0013 CorpusFilter (asset_class, geo{state, metro}, size_units_range, "
        "date_range) plus `column: value`, `column: [values]` or `column: {op: value}`.",
    )
    groups: list[str] | None = Field(
        None, description="Search as only these of the key's groups (narrowing, never widening)."
    )
    generation: str | None = Field(
        None, description="Search this generation of the namespace instead of the ACTIVE one."
    )
    cursor: str | None = Field(
        None, description="`next_cursor` of the previous page (same query, mode, k, filters)."
    )


class SimilarRequest(_Strict):
    """Deals most like one deal, found with its own vectors."""

    k: int = Field(5, ge=1, strict=True)
    filters: dict[str, Any] | None = None
    groups: list[str] | None = None
    generation: str | None = None
    sections: list[str] | None = None


class ContextsRequest(_Strict):
    """A group-first search of a messages namespace (seed "Linked Context" §6)."""

    query: str = Field(min_length=1, max_length=HARD_MAX_QUERY, description="The query text.")
    mode: Literal["dense", "lexical", "hybrid"] = "hybrid"
    k: int = Field(5, ge=1, strict=True, description="Records (at most the server's max_k).")
    filters: dict[str, Any] | None = None
    groups: list[str] | None = Field(
        None, description="Search as only these of the key's groups (narrowing, never widening)."
    )
    generation: str | None = None
    as_of: dt.datetime | None = Field(
        None,
        description="The time the query's time hints are resolved against (default now); "
        "refused with `units`, which reads no time hints (422).",
    )
    units: bool = Field(
        False, strict=True, description="Unit-only search, in the same record shape."
    )


class ContextRecordModel(BaseModel):
    """A whole group (conversation, incident, ...) or a unit standing alone, as ``corpus
    search --json`` prints it on a messages namespace."""

    rank: int
    id: str
    type: str
    title: str
    participants: list[dict[str, Any]]
    location: str
    date: str
    date_end: str
    members: list[MemberRecord]
    relevance: float
    topics: list[str]
    provenance: dict[str, Any] = Field(
        description="The row the record stands for (the group's own, or the unit's first)."
    )
    why: dict[str, Any]


class ContextsResponse(BaseModel):
    """The unified response: records by type (conversations, incidents, ...), ranked."""

    namespace: str
    request_id: str
    query: str
    analysis: dict[str, Any]
    results: dict[str, list[ContextRecordModel]]
    total_hits: int
    trace: dict[str, Any]


class PersonResponse(BaseModel):
    """Everything about one person: contexts by topic and month, roles, partners."""

    namespace: str
    request_id: str
    query: str
    person: dict[str, Any] | None
    candidates: list[dict[str, Any]]
    roles: dict[str, int]
    partners: list[dict[str, Any]]
    by_topic: dict[str, list[str]]
    by_month: dict[str, list[str]]
    records: list[ContextRecordModel]
    total_hits: int = Field(description="How many records this answer shows (at most limit).")
    total_contexts: int = Field(
        description="How many contexts about the person the key may see in all, shown or not."
    )


class HitModel(BaseModel):
    """A hit exactly as ``corpus search --json`` prints it."""

    score: float
    source_id: str
    collection: str
    tenant_id: str
    section: str
    excerpt: str
    provenance: Provenance
    context: list[dict[str, Any]] | None = None


class SearchResponse(BaseModel):
    namespace: str
    generation: str = Field(description="The generation that answered (every page: the same).")
    hits: list[HitModel]
    next_cursor: str | None = Field(None, description="Pass it back for the next page.")
    request_id: str
    trace: dict[str, Any]


class SimilarResponse(BaseModel):
    namespace: str
    generation: str
    source_id: str
    deal_id: str | None
    sections: list[str]
    deals: list[dict[str, Any]]
    request_id: str
    trace: dict[str, Any]


class GenerationModel(BaseModel):
    id: str
    namespace: str
    profile: str
    status: str
    backend_spec: str
    model_revision: str
    dim: int
    input_format: str
    created_at: str
    activated_at: str | None
    retired_at: str | None


class NamespaceModel(BaseModel):
    name: str
    active_generation: str | None
    linked_groups: bool = Field(
        description="Whether the namespace holds linked groups (a messages kind): "
        "`groups/search` and `people/{name}` answer there."
    )


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
    retryable: bool
    request_id: str
