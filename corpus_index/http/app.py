"""The FastAPI app of ``corpus serve``: the ``/v1`` API, health and readiness, ``/metrics``,
the search page, and RFC 9457 problem documents for every error."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corpus_index.config import Settings
from corpus_index.errors import CorpusError, RetryableError, StoreUnreachableError
from corpus_index.http import contexts, exports, models, problems, routes
from corpus_index.http.auth import MetricsReader
from corpus_index.http.problems import (
    FORBIDDEN,
    NO_ACTIVE,
    NOT_FOUND,
    NOT_READY,
    VALIDATION,
    Problem,
)
from corpus_index.http.service import Service

log = logging.getLogger("corpus_index.http")
API_VERSION = "1.0.0"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
# every status a problem document is answered with (413 and 500 are any route's too)
_PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    str(status): {"model": models.Problem, "content": {problems.MEDIA_TYPE: {}}}
    for status in sorted({kind.status for kind in problems.ALL})
}


def create_app(
    settings: Settings, *, record_traces: bool = True, service: Service | None = None
) -> FastAPI:
    """The app over ``settings``' home: ``service`` (opened by the caller, so a home, registry
    or keys it cannot open fails there), else one opened when the app starts."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.service = service or Service(settings, record_traces=record_traces)
        try:
            yield
        finally:
            app.state.service.close()

    app = FastAPI(
        title="corpus-index",
        version=API_VERSION,
        description="Governed search over a corpus-index home. Every request acts as the "
        "principal (tenant + groups) of its API key.",
        lifespan=lifespan,
        responses=_PROBLEM_RESPONSES,
    )
    app.include_router(routes.router)
    app.include_router(contexts.router)
    app.include_router(exports.router)
    app.add_api_route("/v1/health", health, methods=["GET"], tags=["operations"])
    app.add_api_route("/v1/ready", ready, methods=["GET"], tags=["operations"])
    app.add_api_route("/metrics", metrics, methods=["GET"], tags=["operations"])
    app.add_api_route("/", page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/search.js", script, methods=["GET"], include_in_schema=False)
    app.middleware("http")(request_ids)
    app.add_exception_handler(Problem, _problem_handler)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_handler)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_handler)  # type: ignore[arg-type]
    app.add_exception_handler(CorpusError, _error_handler)
    app.add_exception_handler(Exception, _error_handler)
    app.add_middleware(BodyLimit, limit=settings.load().serve.max_body_bytes)
    return app


class BodyLimit:
    """A request body over ``limit`` bytes is refused (413 ``body-too-large``) before a route
    reads it: by its ``Content-Length``, or, sent in chunks without one, once that many bytes
    have come."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            response = _respond(Request(scope), self._problem())
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise self._problem()  # answered by the problem handler
            return message

        await self.app(scope, counted, send)

    def _problem(self) -> Problem:
        return Problem(
            problems.TOO_LARGE, f"the body is over serve.max_body_bytes = {self.limit} bytes"
        )


async def request_ids(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Each request gets an id (the caller's ``X-Request-ID`` when sane), echoed in the response."""
    request.state.request_id = _given_id(request)
    response = await call_next(request)
    response.headers["X-Request-ID"] = request.state.request_id
    return response


def _given_id(request: Request) -> str:
    """The caller's ``X-Request-ID`` when sane, else a new id."""
    given = request.headers.get("x-request-id", "")
    return given if _REQUEST_ID.match(given) else uuid.uuid4().hex


def health() -> dict[str, str]:
    """The process is up (no authentication)."""
    return {"status": "ok"}


def ready(request: Request) -> dict[str, Any]:
    """Every configured namespace has an ACTIVE generation its profile's runs write, whose
    table the store holds, so it is searched (503 otherwise, naming why: an object store that
    cannot be listed among them)."""
    svc: Service = request.app.state.service
    # this answer needs no key: where the stores are (a bucket, a database's user and host) is
    # for the server's log only
    try:
        tables = set(svc.corpus.store.names())
    except StoreUnreachableError as exc:
        log.warning("not ready: %s", exc)
        raise Problem(
            NOT_READY, "the object store cannot be listed; see the server's log"
        ) from None
    try:
        gens = {
            ns: svc.corpus.registry.active(ns, cached=True) for ns in svc.corpus.config.namespaces
        }
    except RetryableError as exc:
        log.warning("not ready: %s", exc)
        raise Problem(NOT_READY, "the registry cannot be reached; see the server's log") from None
    active = {ns: g.id if g else None for ns, g in gens.items()}
    missing = sorted(ns for ns, g in gens.items() if g is None)
    unwritten = {ns: why for ns, g in gens.items() if g and (why := svc.corpus.unmaintained(g))}
    unwritten |= {
        ns: f"its ACTIVE generation {g.id}'s table {g.table_name} is not in the store"
        for ns, g in gens.items()
        if g and ns not in unwritten and g.table_name not in tables
    }
    problems = [f"namespace {ns}: {why}" for ns, why in sorted(unwritten.items())]
    if missing:
        problems.insert(
            0,
            f"namespace(s) {', '.join(missing)} have no ACTIVE generation (run `corpus sync` "
            "then `corpus promote`)",
        )
    if problems:
        raise Problem(NO_ACTIVE, "; ".join(problems), namespaces=active)
    return {"status": "ready", "namespaces": active}


def metrics(request: Request, _: MetricsReader) -> Response:
    """Prometheus metrics, for a key whose scopes hold ``metrics`` (or anyone, where
    ``serve.open_metrics`` is set)."""
    svc: Service = request.app.state.service
    return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _asset(name: str) -> str:
    return (resources.files("corpus_index.http") / "static" / name).read_text(encoding="utf-8")


def page() -> HTMLResponse:
    return HTMLResponse(_asset("index.html"))


def script() -> Response:
    return Response(_asset("search.js"), media_type="text/javascript")


def _respond(
    request: Request, problem: Problem, *, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """``problem``'s document, with ``headers`` (the framework's: ``Allow`` of a 405, ...)."""
    # a body refused by its length is answered before the request id middleware runs
    rid = getattr(request.state, "request_id", "") or _given_id(request)
    svc = getattr(request.app.state, "service", None)
    if svc is not None:
        svc.metrics.problems.labels(problem.kind.slug, str(problem.kind.status)).inc()
    return JSONResponse(
        problem.document(instance=request.url.path, request_id=rid),
        status_code=problem.kind.status,
        headers={**(headers or {}), **problem.headers(), "X-Request-ID": rid},
        media_type=problems.MEDIA_TYPE,
    )


async def _problem_handler(request: Request, exc: Problem) -> JSONResponse:
    return _respond(request, exc)


async def _validation_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(
        e.get("type") == "extra_forbidden" and e.get("loc", ())[-1:] == ("tenant",) for e in errors
    ):
        return _respond(
            request,
            Problem(FORBIDDEN, "the tenant comes from the API key; a request cannot name one"),
        )
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors]
    invalid = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg"))} for e in errors
    ]
    return _respond(request, Problem(VALIDATION, "; ".join(parts), errors=invalid))


async def _http_handler(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    # the exception's headers are part of its answer (RFC 9110: a 405 names the methods allowed)
    headers = exc.headers
    if exc.status_code == 404:
        return _respond(
            request, Problem(NOT_FOUND, f"no route {request.url.path}"), headers=headers
        )
    if exc.status_code == 400:
        # FastAPI's answer to any error while the route read the body: BodyLimit's problem
        # (through the middleware's task group), or a body that is not JSON (nested past the
        # parser's depth)
        cause = exc.__cause__
        while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
            cause = cause.exceptions[0]
        if isinstance(cause, Problem):
            return _respond(request, cause)
        return _respond(request, Problem(problems.VALIDATION, str(exc.detail)), headers=headers)
    kind = problems.ProblemType("http-" + str(exc.status_code), exc.status_code, str(exc.detail))
    return _respond(request, Problem(kind, str(exc.detail)), headers=headers)


async def _error_handler(request: Request, exc: Exception) -> JSONResponse:
    problem = problems.from_error(exc)
    if problem.kind is problems.INTERNAL:
        log.exception("request %s failed", request.url.path, exc_info=exc)
    elif problems.logged_only(problem):
        log.warning("request %s: %s: %s", request.url.path, problem.kind.slug, exc)
    return _respond(request, problem)
