"""The ``/v1`` API: per-namespace search, similar deals, generations and sidecars.

Everything a principal reads lives under ``/v1/namespaces/{namespace}/``; the message-namespace
reads (``groups/search``, ``people/{name}``) are beside ``search`` in :mod:`.contexts`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from corpus_index import predicates
from corpus_index.eligibility import Principal
from corpus_index.errors import (
    InvalidFilterError,
    MissingGenerationError,
    UnmaintainedGenerationError,
)
from corpus_index.filters import CorpusFilter, as_filter
from corpus_index.group_search import grouped_namespace
from corpus_index.hits import SearchResult
from corpus_index.http import models
from corpus_index.http.audit import AuditResult
from corpus_index.http.auth import Caller, narrowed
from corpus_index.http.cursor import Cursor, fingerprint
from corpus_index.http.problems import (
    BAD_CURSOR,
    BAD_FILTER,
    GENERATION_GONE,
    LIMIT,
    NO_ACTIVE,
    NOT_FOUND,
    UNKNOWN_GENERATION,
    UNKNOWN_NAMESPACE,
    UNMAINTAINED,
    Problem,
)
from corpus_index.http.service import Service
from corpus_index.registry import Generation
from corpus_index.sidecar_places import sidecar_folder
from corpus_index.storage import Location
from corpus_index.use_cases import similar_deals

router = APIRouter(prefix="/v1/namespaces", tags=["search"])
SIDECAR_SUFFIX = ".embeddings.json"


def service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


def tenant_namespaces(svc: Service, principal: Principal) -> set[str]:
    """The namespaces holding a collection of the principal's tenant: the key's namespaces."""
    return {
        c.namespace for c in svc.corpus.config.collections.values() if c.tenant == principal.tenant
    }


def own_namespace(svc: Service, ns: str, principal: Principal) -> str:
    """``ns`` when it is one of the key's namespaces; another tenant's is answered as one not
    configured (its existence is not the key's to learn)."""
    if ns not in tenant_namespaces(svc, principal):
        raise Problem(UNKNOWN_NAMESPACE, f"no namespace {ns!r} is configured")
    return ns


def bounded_filters(svc: Service, raw: dict[str, Any] | None) -> CorpusFilter:
    """The request's filters, bounded in size and checked for shape (400 when malformed)."""
    if raw is None:
        return CorpusFilter()
    limits = svc.serve
    size = len(json.dumps(raw, default=str))
    if size > limits.max_filter_bytes:
        raise Problem(LIMIT, f"the filter is {size} bytes; the limit is {limits.max_filter_bytes}")
    try:
        filt = as_filter(raw)
        conditions = filt.conditions()
    except (InvalidFilterError, TypeError, ValueError) as exc:
        raise Problem(BAD_FILTER, f"filters: {exc}") from None
    if len(conditions) > limits.max_filter_conditions:
        raise Problem(
            LIMIT,
            f"the filter has {len(conditions)} conditions; the limit is "
            f"{limits.max_filter_conditions}",
        )
    return filt


def within_limits(
    svc: Service, *, k: int | None = None, text: str = "", what: str = "query"
) -> None:
    """Refuse (422 limit-exceeded) a ``k`` above the server's ``max_k`` or a ``text`` (the
    query, or what ``what`` names) longer than ``max_query_chars``."""
    limits = svc.serve
    if k is not None and k > limits.max_k:
        raise Problem(LIMIT, f"k is {k}; the limit is {limits.max_k}")
    if len(text) > limits.max_query_chars:
        raise Problem(
            LIMIT, f"the {what} is {len(text)} characters; the limit is {limits.max_query_chars}"
        )


def _scope(
    svc: Service,
    namespace: str,
    principal: Principal,
    body: models.SearchRequest | models.SimilarRequest,
) -> tuple[str, Principal, CorpusFilter]:
    """The namespace, the (narrowed) principal and the filters of a request, within limits."""
    ns = own_namespace(svc, namespace, principal)
    who = narrowed(principal, body.groups)
    within_limits(svc, k=body.k)
    return ns, who, bounded_filters(svc, body.filters)


def generation_problem(exc: MissingGenerationError, *, named: str | None, cursor: bool) -> Problem:
    if cursor:
        return Problem(GENERATION_GONE, f"{exc}; search again without a cursor")
    if named:
        unmaintained = isinstance(exc, UnmaintainedGenerationError)
        return Problem(UNMAINTAINED if unmaintained else UNKNOWN_GENERATION, str(exc))
    return Problem(NO_ACTIVE, str(exc))


def _still_serving(svc: Service, ns: str, gen_id: str) -> None:
    """A cursor's generation must still hold its rows (not retired, its table not dropped)."""
    try:
        gen = svc.searcher.resolve_generation(ns, gen_id)
    except MissingGenerationError as exc:
        raise generation_problem(exc, named=gen_id, cursor=True) from None
    if gen.status == "RETIRED" or not svc.corpus.store.exists(gen):
        raise Problem(
            GENERATION_GONE,
            f"generation {gen_id}, which answered the first page, was retired; search again "
            "without a cursor",
        )


def _request_id(request: Request) -> str:
    return str(request.state.request_id)


def submit_audit(svc: Service, ns: str, shown: int, judge: Callable[[], AuditResult]) -> None:
    """After the response: ``judge`` the ``shown`` results again, into the metrics."""
    m = svc.metrics

    def audit() -> None:
        found = judge()
        m.audited.labels(ns).inc(shown)
        if found.unauthorized:
            m.unauthorized.labels(ns).inc(found.unauthorized)
        if found.deleted:
            m.stale.labels(ns, "deleted").inc(found.deleted)
        if found.superseded:
            m.stale.labels(ns, "superseded").inc(found.superseded)

    svc.background.submit(audit, what="audit")


def _account(
    svc: Service,
    request: Request,
    *,
    endpoint: str,
    principal: Principal,
    gen: Generation,
    result: SearchResult,
    query: str,
    started: float,
) -> None:
    """Metrics, and after the response: the audit of every returned hit and the trace (with
    its request id)."""
    ns, mode = gen.spec.namespace, str(result.trace.get("mode", "dense"))
    m = svc.metrics
    m.searches.labels(endpoint, mode, ns).inc()
    if not result.hits:
        m.zero_results.labels(endpoint, mode, ns).inc()
    hits = list(result.hits)
    submit_audit(svc, ns, len(hits), lambda: svc.audit.check(hits, principal, gen))
    result.trace["request_id"] = _request_id(request)
    traces = svc.traces
    if traces is not None:
        trace, hit_count = dict(result.trace), len(result.hits)

        def store_trace() -> None:
            traces.record(
                query=query,
                tenant=principal.tenant,
                groups=principal.groups,
                trace=trace,
                hits=hit_count,
                kind=endpoint,
            )

        svc.background.submit(store_trace, what="trace")
    m.latency.labels(endpoint, mode, ns).observe(time.perf_counter() - started)


@router.post(
    "/{namespace}/search",
    response_model=models.SearchResponse,
    response_model_exclude_none=True,
    summary="Search a namespace as the key's principal",
)
def search(
    namespace: str,
    body: models.SearchRequest,
    request: Request,
    principal: Caller,
) -> dict[str, Any]:
    started = time.perf_counter()
    svc = service(request)
    ns, who, filt = _scope(svc, namespace, principal, body)
    within_limits(svc, text=body.query)
    asked = {
        "tenant": who.tenant,
        "groups": list(who.groups),
        "query": body.query,
        "mode": body.mode,
        "k": body.k,
        "filters": filt.to_json(),
        "namespace": ns,
        "generation": body.generation,
    }
    fp = fingerprint(asked)
    gen_id: str | None
    if body.cursor:
        cur = svc.cursors.decode(body.cursor, expect=fp)
        if cur.namespace != ns:
            raise Problem(BAD_CURSOR, "the cursor belongs to another namespace")
        gen_id, offset = cur.generation, cur.offset
        # a later page is searched at the depth page 1 ended at, never deeper: a deeper
        # search ranks another list, whose pages could repeat or skip page 1's hits
        fixed: int | None = max(cur.candidates, offset + body.k)
        _still_serving(svc, ns, gen_id)
    else:
        gen_id, offset, fixed = body.generation, 0, None
    try:
        result = svc.searcher.search(
            body.query,
            principal=who,
            k=offset + body.k,
            namespace=ns,
            generation=gen_id,
            mode=body.mode,
            filters=filt,
            candidates=fixed,
        )
    except MissingGenerationError as exc:
        raise generation_problem(exc, named=gen_id, cursor=bool(body.cursor)) from None
    gen = svc.searcher.resolve_generation(ns, str(result.trace["generation"]))
    depth = int(result.trace["candidates"])  # page 1's may be deeper than max(5k, 50)
    result.hits = result.hits[offset:]
    full = len(result.hits) == body.k
    next_cursor = None
    if full and offset + 2 * body.k <= depth:
        next_cursor = svc.cursors.encode(Cursor(ns, gen.id, offset + body.k, depth, fp))
    result.trace["page"] = {"offset": offset, "k": body.k}
    _account(
        svc,
        request,
        endpoint="search",
        principal=who,
        gen=gen,
        result=result,
        query=body.query,
        started=started,
    )
    out = result.to_json()
    return {
        "namespace": ns,
        "generation": gen.id,
        "hits": out["hits"],
        "next_cursor": next_cursor,
        "request_id": _request_id(request),
        "trace": out["trace"],
    }


@router.post(
    "/{namespace}/deals/{deal_id}/similar",
    response_model=models.SimilarResponse,
    summary="Deals most like one deal (its own vectors, no re-embedding)",
)
def similar(
    namespace: str,
    deal_id: str,
    body: models.SimilarRequest,
    request: Request,
    principal: Caller,
) -> dict[str, Any]:
    started = time.perf_counter()
    svc = service(request)
    ns, who, filt = _scope(svc, namespace, principal, body)
    within_limits(svc, text=deal_id, what="deal id")
    if body.sections is not None:
        # each named section is a condition of the deal's searches
        if len(body.sections) > svc.serve.max_filter_conditions:
            raise Problem(
                LIMIT,
                f"sections names {len(body.sections)} sections; the limit is "
                f"{svc.serve.max_filter_conditions}",
            )
        for i, name in enumerate(body.sections):
            within_limits(svc, text=name, what=f"sections[{i}]")
    try:
        found = similar_deals(
            svc.searcher,
            deal_id,
            principal=who,
            k=body.k,
            namespace=ns,
            generation=body.generation,
            filters=filt,
            sections=body.sections,
        )
    except MissingGenerationError as exc:
        raise generation_problem(exc, named=body.generation, cursor=False) from None
    if found is None:
        raise Problem(NOT_FOUND, f"no deal {deal_id!r} is visible to this key in namespace {ns!r}")
    out = found.to_json()
    gen_id = str(found.trace["generation"])
    out["trace"]["request_id"] = _request_id(request)
    svc.metrics.searches.labels("similar", "dense", ns).inc()
    if not found.deals:
        svc.metrics.zero_results.labels("similar", "dense", ns).inc()
    svc.metrics.latency.labels("similar", "dense", ns).observe(time.perf_counter() - started)
    return {"namespace": ns, "generation": gen_id, "request_id": _request_id(request), **out}


@router.get(
    "", response_model=list[models.NamespaceModel], summary="Namespaces of the key's tenant"
)
def namespaces(request: Request, principal: Caller) -> list[dict[str, Any]]:
    svc = service(request)
    mine = tenant_namespaces(svc, principal)
    out = []
    for ns in svc.corpus.config.namespaces:
        if ns in mine:
            gen = svc.corpus.registry.active(ns, cached=True)
            out.append(
                {
                    "name": ns,
                    "active_generation": gen.id if gen else None,
                    "linked_groups": grouped_namespace(svc.corpus, ns),
                }
            )
    return out


def _summary(gen: Generation) -> dict[str, Any]:
    doc = gen.to_json()
    return {k: doc[k] for k in models.GenerationModel.model_fields}


@router.get(
    "/{namespace}/generations",
    response_model=list[models.GenerationModel],
    summary="The namespace's generations (read only)",
)
def generations(namespace: str, request: Request, principal: Caller) -> list[dict[str, Any]]:
    svc = service(request)
    ns = own_namespace(svc, namespace, principal)
    return [_summary(g) for g in svc.corpus.registry.generations(namespace=ns)]


@router.get(
    "/{namespace}/generations/{generation}",
    response_model=models.GenerationModel,
    summary="One generation (read only)",
)
def generation(
    namespace: str, generation: str, request: Request, principal: Caller
) -> dict[str, Any]:
    svc = service(request)
    ns = own_namespace(svc, namespace, principal)
    gen = svc.corpus.registry.get(generation)
    if gen is None or gen.spec.namespace != ns:
        raise Problem(UNKNOWN_GENERATION, f"namespace {ns!r} has no generation {generation!r}")
    return _summary(gen)


@router.get(
    "/{namespace}/sidecars/{collection}/{doc_id:path}",
    summary="The RFC 0013 sidecar of one of the key's own documents",
    response_class=FileResponse,
)
def sidecar(
    namespace: str,
    collection: str,
    doc_id: str,
    request: Request,
    principal: Caller,
    profile: Annotated[
        str | None, Query(description="Profile (default: the ACTIVE generation's).")
    ] = None,
) -> Response:
    svc = service(request)
    ns = own_namespace(svc, namespace, principal)
    missing = Problem(NOT_FOUND, f"no sidecar of {collection}/{doc_id} is visible to this key")
    if collection not in {c.name for c in svc.corpus.config.collections_in(ns)}:
        raise missing
    try:
        _, gen, where = svc.searcher.scope(principal, ns, None)
    except MissingGenerationError as exc:
        raise generation_problem(exc, named=None, cursor=False) from None
    profile = profile or gen.spec.profile
    if profile not in {p.name for p in svc.corpus.config.profiles_in(ns)}:
        raise Problem(NOT_FOUND, f"namespace {ns!r} has no profile {profile!r}")
    # the principal must see the document itself in the ACTIVE generation (its own data)
    mine = predicates.all_of([where, predicates.eq("source_id", f"{collection}/{doc_id}")])
    if not svc.corpus.store.exists(gen) or svc.corpus.store.table(gen).count_rows(mine) == 0:
        raise missing
    # under the home, or beside the source files for a ``sidecars: beside`` collection
    config = svc.corpus.config
    folder = sidecar_folder(svc.settings, config, profile, config.collections[collection])
    folder = folder.resolve()
    path = (folder / f"{doc_id}{SIDECAR_SUFFIX}").resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        raise missing
    return stored_file(path, media_type="application/json")


def stored_file(path: Location, *, media_type: str) -> Response:
    """A file of the stores as a response: streamed from disk here, read whole from an object
    store (sidecars and export files are small)."""
    if path.is_local:
        return FileResponse(path.path, media_type=media_type, filename=path.name)
    disposition = f'attachment; filename="{path.name}"'
    return Response(
        path.read_bytes(), media_type=media_type, headers={"content-disposition": disposition}
    )
