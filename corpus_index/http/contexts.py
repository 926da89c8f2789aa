"""The message-namespace reads of the ``/v1`` API: group-first search
(``groups/search``) and everything about one person (``people/{name}``).

Both are the library's own (:func:`~corpus_index.group_search.search_contexts`,
:func:`~corpus_index.person_search.person_contexts`), asked as the key's principal (narrowed
by ``groups`` when the request names some); their records are what ``corpus search --json`` and
``corpus person --json`` print on a messages namespace.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from corpus_index.context_records import ContextRecord
from corpus_index.eligibility import Principal
from corpus_index.errors import MissingGenerationError
from corpus_index.group_search import grouped_namespace, search_contexts
from corpus_index.http import models
from corpus_index.http.auth import Caller, narrowed
from corpus_index.http.problems import NOT_FOUND, VALIDATION, Problem
from corpus_index.http.routes import (
    bounded_filters,
    generation_problem,
    own_namespace,
    service,
    submit_audit,
    within_limits,
)
from corpus_index.http.service import Service
from corpus_index.person_search import person_contexts

router = APIRouter(prefix="/v1/namespaces", tags=["contexts"])
MAX_PERSON_RECORDS = 200


def _grouped(svc: Service, namespace: str, principal: Principal) -> str:
    ns = own_namespace(svc, namespace, principal)
    if not grouped_namespace(svc.corpus, ns):
        raise Problem(NOT_FOUND, f"namespace {ns!r} holds no linked groups (no messages kind)")
    return ns


@router.post(
    "/{namespace}/groups/search",
    response_model=models.ContextsResponse,
    summary="Whole contexts (conversations, incidents, questions) first, then units",
)
def search_groups(
    namespace: str,
    body: models.ContextsRequest,
    request: Request,
    principal: Caller,
) -> dict[str, Any]:
    started = time.perf_counter()
    svc = service(request)
    ns = _grouped(svc, namespace, principal)
    who = narrowed(principal, body.groups)
    within_limits(svc, k=body.k, text=body.query)
    filt = bounded_filters(svc, body.filters)
    if body.units and body.as_of is not None:
        # only a group-first search reads the query's time hints: a unit search ranks by the
        # words alone, so the reference time would change nothing (the CLI refuses it too)
        raise Problem(
            VALIDATION,
            "as_of applies to a group-first search only (the reference time of the query's time "
            "hints, which a unit search does not read): leave out as_of, or units",
        )
    as_of = body.as_of
    if as_of is not None and as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=dt.UTC)
    try:
        result = search_contexts(
            svc.searcher,
            body.query,
            principal=who,
            k=body.k,
            namespace=ns,
            generation=body.generation,
            as_of=as_of,
            mode=body.mode,
            filters=filt,
            units=body.units,
        )
    except MissingGenerationError as exc:
        raise generation_problem(exc, named=body.generation, cursor=False) from None
    audit_records(svc, ns, result.records, who, str(result.trace["generation"]))
    m = svc.metrics
    m.searches.labels("groups", body.mode, ns).inc()
    if not result.records:
        m.zero_results.labels("groups", body.mode, ns).inc()
    m.latency.labels("groups", body.mode, ns).observe(time.perf_counter() - started)
    request_id = str(request.state.request_id)
    result.trace["request_id"] = request_id
    return {"namespace": ns, "request_id": request_id, **result.to_json()}


@router.get(
    "/{namespace}/people/{name}",
    response_model=models.PersonResponse,
    summary="Everything the key may see about one person of its tenant",
)
def person(
    namespace: str,
    name: str,
    request: Request,
    principal: Caller,
    groups: Annotated[
        list[str] | None, Query(description="Only these of the key's groups (narrowing).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PERSON_RECORDS)] = 50,
    generation: Annotated[str | None, Query(description="Instead of the ACTIVE one.")] = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    svc = service(request)
    ns = _grouped(svc, namespace, principal)
    who = narrowed(principal, groups)
    within_limits(svc, text=name, what="name")
    try:
        found = person_contexts(
            svc.searcher, name, principal=who, namespace=ns, generation=generation, limit=limit
        )
    except MissingGenerationError as exc:
        raise generation_problem(exc, named=generation, cursor=False) from None
    if found.records:
        gen_id = str(found.records[0].provenance.get("generation", ""))
        audit_records(svc, ns, found.records, who, gen_id)
    svc.metrics.latency.labels("person", "lookup", ns).observe(time.perf_counter() - started)
    if found.person is None and not found.candidates:
        raise Problem(NOT_FOUND, f"no person named {name!r} in this key's tenant")
    return {"namespace": ns, "request_id": str(request.state.request_id), **found.to_json()}


def audit_records(
    svc: Service, ns: str, records: Sequence[ContextRecord], who: Principal, generation: str
) -> None:
    """After the response, every row the records showed (a group's own and each member's) is
    read again and judged against the principal, as ``/search`` hits are."""
    shown = [
        (str(r.provenance["chunk_ref"]), str(r.provenance["source_id"]))
        for r in records
        if r.provenance.get("chunk_ref")
    ]
    shown += [(ref, m.source_id) for r in records for m in r.members for ref in m.chunk_refs]
    if not shown or not generation:
        return
    gen = svc.searcher.resolve_generation(ns, generation)
    submit_audit(svc, ns, len(shown), lambda: svc.audit.check_rows(shown, who, gen))
